//! The one place errors become exit codes and one-line messages on stderr.
//! Codes: 0 ok, 1 error, 2 bad usage or invalid input, 3 stale token or expired lease,
//! 4 not found, 5 idempotency conflict, 6 lease busy, 7 refused: the login lacks the right,
//! 8 the database is unavailable for now (no space, no connection, unreachable, busy): retry.

use std::process::ExitCode;

/// An error `outboxctl` reports, already sorted by exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    code: u8,
    message: String,
}

/// Something went wrong that is not the caller's input.
pub(crate) const ERROR: u8 = 1;
/// Bad usage or invalid input; nothing was written.
pub(crate) const INVALID: u8 = 2;
/// Stale token, expired or lost lease: this owner's generation is over.
pub(crate) const STALE: u8 = 3;
/// The op (or other named thing) does not exist.
pub(crate) const NOT_FOUND: u8 = 4;
/// The idempotency key holds a different request.
pub(crate) const CONFLICT: u8 = 5;
/// Another owner holds the lease.
pub(crate) const BUSY: u8 = 6;
/// The database refused the login the right (its roles' grants); nothing was changed.
pub(crate) const DENIED: u8 = 7;
/// The database could not serve the command now (out of disk or connections, unreachable,
/// shutting down, or a lock conflict): the same command may succeed when retried.
pub(crate) const UNAVAILABLE: u8 = 8;

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn other(message: impl Into<String>) -> Self {
        CliError::new(ERROR, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        CliError::new(INVALID, message)
    }

    /// What is printed after `outboxctl: `.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<outbox_store::Error> for CliError {
    fn from(e: outbox_store::Error) -> Self {
        match e {
            outbox_store::Error::Invalid(e) => CliError::invalid(e.to_string()),
            outbox_store::Error::Store(e) => CliError::from(e),
            outbox_store::Error::Migrate(e) => CliError::other(e.to_string()),
        }
    }
}

impl From<outbox_store::StoreError> for CliError {
    fn from(e: outbox_store::StoreError) -> Self {
        if e.kind() == outbox_store::StoreErrorKind::Denied {
            return CliError::new(
                DENIED,
                format!(
                    "{e} (this login's roles do not allow it: docs/security.md says which \
                     role each command needs)"
                ),
            );
        }
        if e.is_retryable() {
            return CliError::new(
                UNAVAILABLE,
                format!(
                    "{e} (the database cannot do this now: retry the same command once it can; \
                     an enqueue retried with the same idempotency key is never a second op)"
                ),
            );
        }
        CliError::other(e.to_string())
    }
}

impl From<outbox_producer::Error> for CliError {
    fn from(e: outbox_producer::Error) -> Self {
        use outbox_producer::Error as E;
        let code = match e {
            E::Store(s) => return CliError::from(s),
            E::Stale { .. } | E::LeaseExpired | E::NoLease => STALE,
            E::IdempotencyConflict { .. } => CONFLICT,
            E::Invalid(_) => INVALID,
            _ => ERROR,
        };
        CliError::new(code, e.to_string())
    }
}

impl From<outbox_store::InvalidInput> for CliError {
    fn from(e: outbox_store::InvalidInput) -> Self {
        CliError::invalid(e.to_string())
    }
}

/// Prints the error on stderr and returns its exit code.
pub(crate) fn report(e: &CliError) -> ExitCode {
    eprintln!("outboxctl: {}", e.message);
    ExitCode::from(e.code)
}
