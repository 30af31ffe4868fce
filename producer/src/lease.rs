//! The `Outbox` handle and leases for applications: [`Outbox::try_acquire`], [`Outbox::renew`], [`Outbox::release`].
//!
//! Invariant: at most one unexpired lease per resource by the database clock (G2), and every
//! acquisition gets a token larger than all before it (G1). A paused process keeps its `Lease`
//! value but not the lease: once the database says it expired, renewing and releasing fail (G3),
//! and anything fenced by the old token is refused. A crash leaves the lease to expire; a
//! database restart keeps every token, because lease rows are never deleted.
//!
//! The leases on `dispatcher/<n>` belong to `outbox-dispatcher` (G9): this API refuses them.

use std::time::Duration;

use outbox_store::{
    InvalidInput, Lease, LeaseRow, MigrationReport, Partition, ResourceName, Store, StoreOptions,
};

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

    /// Sets the largest op body accepted, in bytes (default 1 MiB); refused above the hard
    /// ceiling of [`MAX_BODY_BYTES_CEILING`](crate::MAX_BODY_BYTES_CEILING) (16 MiB) or at 0.
    /// The dispatcher has a limit of its own (`dispatcher.max_body_bytes`): keep it as large.
    pub fn with_max_body_bytes(mut self, limit: usize) -> Result<Outbox, Error> {
        outbox_store::request::check_body_limit("max_body_bytes", limit)?;
        self.max_body_bytes = limit;
        Ok(self)
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
    /// `dispatcher/<n>` is refused with [`Error::Invalid`]: those leases are the dispatcher's.
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Option<Lease>, Error> {
        let resource = ResourceName::new(resource)?;
        refuse_dispatcher_lease(&resource)?;
        Ok(self.store.lease_try_acquire(&resource, ttl).await?)
    }

    /// Extends `lease` to `ttl` from now, keeping its token. Returns the renewed lease, or
    /// `None` when it is lost: expired (even if nobody took it) or held by a newer owner (G3).
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        Ok(self.store.lease_renew(lease, ttl).await?)
    }

    /// Releases `lease`; `false` when this owner and token no longer hold it (G3).
    pub async fn release(&self, lease: &Lease) -> Result<bool, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        Ok(self.store.lease_release(lease).await?)
    }

    /// Every lease row with whether it is held now, by the database clock.
    pub async fn list_leases(&self) -> Result<Vec<LeaseRow>, Error> {
        Ok(self.store.lease_list().await?)
    }
}

/// Refuses a dispatcher partition lease (`dispatcher/<n>`): only `outbox-dispatcher` takes,
/// renews or releases those (G9), and no op may be fenced by one. A producer holding one
/// would stall its partition; one renewing or releasing the dispatcher's would change who
/// delivers behind the dispatcher's back.
pub(crate) fn refuse_dispatcher_lease(resource: &ResourceName) -> Result<(), InvalidInput> {
    if resource.as_str().starts_with(Partition::LEASE_PREFIX) {
        return Err(InvalidInput::new(
            "resource",
            format!(
                "{resource} is a dispatcher partition lease: only outbox-dispatcher takes those"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_resources_under_the_dispatcher_prefix_are_refused() {
        let refused = |r: &str| refuse_dispatcher_lease(&ResourceName::new(r).unwrap()).is_err();
        assert!(refused("dispatcher/0") && refused("dispatcher/anything"));
        assert!(
            !refused("dispatcher") && !refused("jobs/dispatcher/0") && !refused("Dispatcher/0")
        );
    }
}
