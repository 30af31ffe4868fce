//! The store's errors: invalid input, database failures with a portable kind, and
//! migration problems. Messages are lowercase and never echo bodies or header values.

use std::fmt;

/// Which database a store speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL (production).
    Postgres,
    /// SQLite (embedded default).
    Sqlite,
    /// Microsoft SQL Server.
    Mssql,
}

impl Backend {
    /// The lowercase name used in URLs, folder names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
            Backend::Mssql => "mssql",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Input that was refused before anything was written (G10).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InvalidInput {
    /// The argument or field that was wrong, e.g. `resource` or `ttl`.
    pub field: &'static str,
    /// Why it was refused, naming the bound it broke.
    pub reason: String,
}

impl InvalidInput {
    /// An error for `field`, explained by `reason`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}

/// What a caller can do about a database failure, the same on every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// A unique constraint refused the write.
    UniqueViolation,
    /// Lock contention, serialization failure or deadlock: the same call may succeed if retried.
    Retryable,
    /// The database could not be reached or refused connections.
    Unavailable,
    /// The login lacks a right the statement needs: its roles' grants do not cover it
    /// (docs/security.md). Retrying does not help; a role administrator's grant does.
    Denied,
    /// Anything else; usually a bug or a schema that does not match this build.
    Other,
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreErrorKind::UniqueViolation => "unique violation",
            StoreErrorKind::Retryable => "retryable",
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Denied => "denied",
            StoreErrorKind::Other => "other",
        })
    }
}

/// A failure reported by the database or its driver.
#[derive(Debug, thiserror::Error)]
#[error("{backend} {kind} error: {source}")]
pub struct StoreError {
    backend: Backend,
    kind: StoreErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl StoreError {
    /// Wraps a driver error; each backend module decides the kind.
    pub fn new(
        backend: Backend,
        kind: StoreErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError {
            backend,
            kind,
            source: source.into(),
        }
    }

    /// The backend that failed.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The portable kind of the failure.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::Retryable | StoreErrorKind::Unavailable
        )
    }
}

/// Why the schema could not be brought up to date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// An applied migration's file differs from the one this build carries.
    #[error(
        "migration {version} ({name}) was changed after it was applied: recorded checksum {recorded}, file checksum {current}"
    )]
    Changed {
        /// The migration's number.
        version: i64,
        /// The migration's name.
        name: String,
        /// SHA-256 recorded when it was applied.
        recorded: String,
        /// SHA-256 of the file in this build.
        current: String,
    },
    /// The database has a migration this build does not know: it is newer than this build.
    #[error(
        "the database has migration {version} ({name}), which this build does not know: upgrade this program"
    )]
    Unknown {
        /// The migration's number.
        version: i64,
        /// The migration's recorded name.
        name: String,
    },
    /// A migration is pending and this login may not apply it (a component's role, such as
    /// `outbox_dispatcher`, holds no right to change the schema).
    #[error(
        "migration {version} ({name}) is pending and this login may not apply it ({reason}): run `outboxctl migrate` as the schema's owner, then start this again"
    )]
    Denied {
        /// The pending migration's number.
        version: i64,
        /// The pending migration's name.
        name: String,
        /// The database's refusal.
        reason: String,
    },
}

/// Every error of the store. Deliberately exhaustive: the crates that map it to their own
/// errors (producer, dispatcher, admin exit codes) must be revisited when a variant is added.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input was refused before anything was written.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The schema could not be migrated.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}
