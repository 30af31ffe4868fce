//! [`Outbox`]: the producer's handle on the outbox database, one connection pool. Leases are
//! its methods in `lease.rs`, the fenced enqueue in `enqueue.rs`.

use std::sync::Arc;

use outbox_seal::Keys;
use outbox_store::{MigrationReport, Store, StoreOptions};

use crate::Error;

/// The producer's handle on the outbox database: leases now, fenced enqueue on top.
/// Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Outbox {
    pub(crate) store: Store,
    max_body_bytes: usize,
    keys: Option<Arc<Keys>>,
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
            keys: None,
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

    /// Encrypts every op's header values and body at rest with `keys`' sealing key (its
    /// `encrypt_with`), after the request hash is taken over the clear request: the dispatcher
    /// decrypts them right before sending, and needs the key. Refused without a sealing key.
    pub fn with_keys(mut self, keys: Keys) -> Result<Outbox, Error> {
        if keys.sealing_key().is_none() {
            return Err(outbox_store::InvalidInput::new(
                "keys",
                "name the key to encrypt with (encrypt_with)",
            )
            .into());
        }
        self.keys = Some(Arc::new(keys));
        Ok(self)
    }

    /// The keys ops are sealed with, if any.
    pub fn keys(&self) -> Option<&Keys> {
        self.keys.as_deref()
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
}
