//! The `Outbox` handle and leases for applications: [`Outbox::try_acquire`], [`Outbox::renew`], [`Outbox::release`].
//!
//! Invariant: at most one unexpired lease per resource by the database clock (G2), and every
//! acquisition gets a token larger than all before it (G1). A paused process keeps its `Lease`
//! value but not the lease: once the database says it expired, renewing and releasing fail (G3),
//! and anything fenced by the old token is refused. A crash leaves the lease to expire; a
//! database restart keeps every token, because lease rows are never deleted.

use std::time::Duration;

use outbox_store::{Lease, LeaseRow, MigrationReport, ResourceName, Store, StoreOptions};

use crate::Error;

/// The producer's handle on the outbox database: leases now, fenced enqueue on top.
/// Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Outbox {
    store: Store,
    max_body_bytes: usize,
}

impl Outbox {
    /// Connects by URL (`postgres://…`, `sqlite://path`) with default options: leases of
    /// 5 s..=300 s.
    pub async fn connect(url: &str) -> Result<Outbox, Error> {
        Outbox::connect_with(url, StoreOptions::default()).await
    }

    /// Connects by URL with the given pool and lease-bound options.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Outbox, Error> {
        Ok(Outbox::from_store(Store::connect(url, options).await?))
    }

    /// Wraps a store that is already connected.
    pub fn from_store(store: Store) -> Outbox {
        Outbox {
            store,
            max_body_bytes: crate::op::DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Sets the largest op body accepted, in bytes (default 1 MiB).
    pub fn with_max_body_bytes(mut self, limit: usize) -> Outbox {
        self.max_body_bytes = limit;
        self
    }

    /// The largest op body accepted, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// The store underneath, shared with the dispatcher and admin roles.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Creates or upgrades the outbox tables.
    pub async fn migrate(&self) -> Result<MigrationReport, Error> {
        Ok(self.store.migrate().await?)
    }

    /// Acquires `resource` for `ttl` if nobody holds it; `None` when another owner does.
    /// The returned lease has a fresh owner id and a token larger than any before (G1).
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Option<Lease>, Error> {
        let resource = ResourceName::new(resource)?;
        Ok(self.store.lease_try_acquire(&resource, ttl).await?)
    }

    /// Extends `lease` to `ttl` from now, keeping its token. Returns the renewed lease, or
    /// `None` when it is lost: expired (even if nobody took it) or held by a newer owner (G3).
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, Error> {
        Ok(self.store.lease_renew(lease, ttl).await?)
    }

    /// Releases `lease`; `false` when this owner and token no longer hold it (G3).
    pub async fn release(&self, lease: &Lease) -> Result<bool, Error> {
        Ok(self.store.lease_release(lease).await?)
    }

    /// Every lease row with whether it is held now, by the database clock.
    pub async fn list_leases(&self) -> Result<Vec<LeaseRow>, Error> {
        Ok(self.store.lease_list().await?)
    }
}
