//! How a PostgreSQL failure reads and what kind it is: the server's own message with its
//! SQLSTATE, without the driver's "error returned from database:" and the server's source line
//! ("at line 486" of a C file, which means nothing to a caller), and the portable kind by
//! SQLSTATE class.

use std::fmt;

use crate::StoreErrorKind;

/// A driver error as callers read it; the driver's error stays its source.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) sqlx::Error);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            sqlx::Error::Database(db) => {
                f.write_str(db.message())?;
                match db.code() {
                    Some(code) => write!(f, " (SQLSTATE {code})"),
                    None => Ok(()),
                }
            }
            other => fmt::Display::fmt(other, f),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The portable kind of a driver error, by SQLSTATE where there is one.
pub(crate) fn kind(e: &sqlx::Error) -> StoreErrorKind {
    match e {
        sqlx::Error::Database(db) => code_kind(db.code().as_deref().unwrap_or("")),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    }
}

/// The kind of a SQLSTATE (PostgreSQL's appendix A).
fn code_kind(code: &str) -> StoreErrorKind {
    match code {
        "23505" => StoreErrorKind::UniqueViolation,
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => StoreErrorKind::Retryable,
        // read_only_sql_transaction: this connection reached a standby (after a failover,
        // through a stale address), which is the database being unavailable, not the op
        // being bad.
        "25006" => StoreErrorKind::Unavailable,
        // insufficient_privilege: a missing grant, or a row a policy keeps from this role
        "42501" => StoreErrorKind::Denied,
        // Class 08, connection exceptions; 53, insufficient resources (disk full, out of
        // memory, too many connections, a configured limit); 58, system errors (an I/O error
        // of the server's); 57P01-57P05, the server shutting down, starting, or ending an idle
        // session. The statement may succeed once the server has what it lacked.
        _ if code.starts_with("08") || code.starts_with("53") || code.starts_with("58") => {
            StoreErrorKind::Unavailable
        }
        "57P01" | "57P02" | "57P03" | "57P05" => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_and_connection_failures_are_unavailable() {
        for code in [
            "53100", "53200", "53300", "53400", "53000", "58030", "08006", "08001", "57P01",
            "57P03", "25006",
        ] {
            assert_eq!(code_kind(code), StoreErrorKind::Unavailable, "{code}");
        }
        assert_eq!(code_kind("40001"), StoreErrorKind::Retryable);
        assert_eq!(code_kind("42501"), StoreErrorKind::Denied);
        assert_eq!(code_kind("23505"), StoreErrorKind::UniqueViolation);
        for code in ["22P02", "42P01", "XX000", "57014", ""] {
            assert_eq!(code_kind(code), StoreErrorKind::Other, "{code}");
        }
    }
}
