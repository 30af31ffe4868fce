//! The producer's error: one enum whose variants say what the caller can do.

use outbox_store::{InvalidInput, MigrateError, StoreError};

/// Every error of `outbox-producer`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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

impl From<outbox_store::Error> for Error {
    fn from(e: outbox_store::Error) -> Self {
        match e {
            outbox_store::Error::Invalid(e) => Error::Invalid(e),
            outbox_store::Error::Store(e) => Error::Store(e),
            outbox_store::Error::Migrate(e) => Error::Migrate(e),
        }
    }
}
