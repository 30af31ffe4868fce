//! The producer's error: one enum whose variants say what the caller can do.

use outbox_store::{FencingToken, InvalidInput, MigrateError, StoreError};
use uuid::Uuid;

/// Every error of `outbox-producer`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A newer owner holds the resource (or the owner id does not match): this work belongs to
    /// an obsolete generation. Do not retry with the same token; nothing was written (G4).
    #[error("stale fencing token: the resource's current token is {current_token}")]
    Stale {
        /// The resource's newest token.
        current_token: FencingToken,
    },
    /// This owner's lease expired by the database clock before the enqueue; nothing was
    /// written. Reacquire (a new token) and restart the work from a defined boundary.
    #[error("the lease expired by the database clock before the enqueue")]
    LeaseExpired,
    /// This owner holds no lease on the resource: it was never acquired, or was released.
    #[error("no lease is held on this resource by this owner")]
    NoLease,
    /// The (destination, idempotency key) already holds a different request; the original op
    /// is kept and nothing was written (G7).
    #[error("idempotency key already used for a different request by op {existing_op_id}")]
    IdempotencyConflict {
        /// The op that holds the key.
        existing_op_id: Uuid,
    },
    /// The input was refused before anything was written (G10).
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The database failed; see [`StoreError::kind`] for whether a retry may help.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The schema could not be brought up to date.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

impl Error {
    /// Whether the database could not serve the call now: out of disk or connections,
    /// unreachable, shutting down, or a standby after a failover. The op was not refused:
    /// the same call may be retried later (an enqueue with the same idempotency key is never
    /// a second op, G7). Never true of [`Error::Stale`] and the other refusals.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Store(e) if e.kind() == outbox_store::StoreErrorKind::Unavailable)
    }
}

impl From<outbox_store::Error> for Error {
    fn from(e: outbox_store::Error) -> Self {
        match e {
            outbox_store::Error::Invalid(e) => Error::Invalid(e),
            outbox_store::Error::Store(e) => Error::Store(e),
            outbox_store::Error::Migrate(e) => Error::Migrate(e),
        }
    }
}
