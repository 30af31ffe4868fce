//! SQL Server's errors in the store's terms: the driver's and server's failures to a portable
//! kind by error number, and the numbers our own T-SQL throws (`THROW 510xx`, the seed's
//! convention) to the typed outcomes they stand for.

use uuid::Uuid;

use crate::error::{Backend, Error, StoreError, StoreErrorKind};
use crate::model::FencingToken;
use crate::op::RejectReason;

/// `THROW 51000`: the input broke a rule the statement checks (the message says which).
pub(crate) const THROW_INVALID: u32 = 51000;
/// `THROW 51001`, message `stale; current token <n>`: a newer owner holds the resource, or
/// the owner id does not match.
pub(crate) const THROW_STALE: u32 = 51001;
/// `THROW 51002`, message `expired`: this owner and token, but the lease expired.
pub(crate) const THROW_EXPIRED: u32 = 51002;
/// `THROW 51003`, message `no lease` or `no lease; current token <n>`: never leased, or
/// released.
pub(crate) const THROW_NO_LEASE: u32 = 51003;
/// `THROW 51004`, message `conflict; existing op <uuid>`: the idempotency key holds another
/// request.
pub(crate) const THROW_CONFLICT: u32 = 51004;

/// What one of our `THROW`s means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Thrown {
    /// The lease check failed.
    Rejected(RejectReason),
    /// The key holds another request: the op that holds it.
    Conflict(Uuid),
    /// The statement refused its input.
    Invalid(String),
}

/// Reads one of our `THROW`s from its error number and message; `None` for any other error,
/// and for one of our numbers whose message lacks what it must carry.
pub(crate) fn thrown(code: u32, message: &str) -> Option<Thrown> {
    let detail = |prefix: &str| -> Option<&str> {
        message
            .strip_prefix(prefix)
            .map(|rest| rest.trim_start_matches([';', ':', ' ']).trim())
    };
    let token = |rest: &str| -> Option<FencingToken> {
        rest.strip_prefix("current token")?
            .trim()
            .parse::<i64>()
            .ok()
            .map(FencingToken::new)
    };
    match code {
        THROW_STALE => Some(Thrown::Rejected(RejectReason::Stale {
            current: token(detail("stale")?)?,
        })),
        THROW_EXPIRED => detail("expired").map(|_| Thrown::Rejected(RejectReason::Expired)),
        THROW_NO_LEASE => {
            let rest = detail("no lease")?;
            let current = if rest.is_empty() {
                None
            } else {
                Some(token(rest)?)
            };
            Some(Thrown::Rejected(RejectReason::NoLease { current }))
        }
        THROW_CONFLICT => detail("conflict")?
            .strip_prefix("existing op")?
            .trim()
            .parse()
            .ok()
            .map(Thrown::Conflict),
        THROW_INVALID => Some(Thrown::Invalid(message.to_owned())),
        _ => None,
    }
}

/// One of our `THROW`s, if `e` is one.
pub(crate) fn thrown_by(e: &tiberius::error::Error) -> Option<Thrown> {
    match e {
        tiberius::error::Error::Server(token) => thrown(token.code(), token.message()),
        _ => None,
    }
}

/// The portable kind of a SQL Server error number.
pub(crate) fn kind_of(code: u32) -> StoreErrorKind {
    match code {
        // Violation of a PRIMARY KEY / UNIQUE constraint, or of a unique index.
        2627 | 2601 => StoreErrorKind::UniqueViolation,
        // Deadlock victim, lock request timeout, snapshot update conflicts, and the
        // in-memory OLTP conflicts: the same call may succeed again.
        1205 | 1222 | 3960 | 3961 | 41302 | 41305 | 41325 | 41301 | 41839 => {
            StoreErrorKind::Retryable
        }
        // Cannot open database (during failover), Azure SQL throttling, failover and
        // reconfiguration, the server is shutting down or paused, resources exhausted: memory
        // (701), a full filegroup or disk (1101, 1105), a full transaction log (9002), every
        // user connection taken (17809).
        4060 | 4221 | 615 | 10928 | 10929 | 40197 | 40501 | 40613 | 40540 | 40143 | 49918
        | 49919 | 49920 | 6005 | 6006 | 17142 | 233 | 64 | 10053 | 10054 | 10060 | 701 | 1101
        | 1105 | 9002 | 17809 => StoreErrorKind::Unavailable,
        // The permission was denied on an object, a column, a statement (CREATE …) or the
        // database.
        229 | 230 | 262 | 300 => StoreErrorKind::Denied,
        _ => StoreErrorKind::Other,
    }
}

/// Babelfish for PostgreSQL's refusal of a right: PostgreSQL's own message under its one
/// number for errors it does not map (SQL Server says 229 or 230).
fn babelfish_denied(code: u32, message: &str) -> bool {
    code == BABELFISH_UNMAPPED && message.starts_with("permission denied for ")
}

/// The number Babelfish for PostgreSQL gives an error it has no SQL Server number for.
const BABELFISH_UNMAPPED: u32 = 33_557_097;

/// Maps a driver error to the store's error.
pub(crate) fn map_err(e: tiberius::error::Error) -> Error {
    let kind = match &e {
        tiberius::error::Error::Server(token)
            if babelfish_denied(token.code(), token.message()) =>
        {
            StoreErrorKind::Denied
        }
        tiberius::error::Error::Server(token) => kind_of(token.code()),
        tiberius::error::Error::Io { .. }
        | tiberius::error::Error::Tls(_)
        | tiberius::error::Error::Routing { .. } => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    };
    Error::Store(StoreError::new(Backend::Mssql, kind, e))
}

/// A failure to check a connection out of the pool.
pub(crate) fn map_pool_err(e: bb8::RunError<tiberius::error::Error>) -> Error {
    match e {
        bb8::RunError::User(e) => map_err(e),
        bb8::RunError::TimedOut => Error::Store(StoreError::new(
            Backend::Mssql,
            StoreErrorKind::Unavailable,
            "timed out waiting for a pooled SQL Server connection",
        )),
    }
}

/// An error about what a row held, naming the column.
pub(crate) fn column_err(name: &str, reason: impl std::fmt::Display) -> Error {
    Error::Store(StoreError::new(
        Backend::Mssql,
        StoreErrorKind::Other,
        format!("column {name}: {reason}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_throws_map_to_the_typed_outcomes() {
        let t = FencingToken::new;
        let op: Uuid = "0190c1a2-7b3c-7d4e-8f00-112233445566".parse().unwrap();
        let cases = [
            (
                51001,
                "stale; current token 42",
                Some(Thrown::Rejected(RejectReason::Stale { current: t(42) })),
            ),
            (
                51002,
                "expired",
                Some(Thrown::Rejected(RejectReason::Expired)),
            ),
            (
                51003,
                "no lease",
                Some(Thrown::Rejected(RejectReason::NoLease { current: None })),
            ),
            (
                51003,
                "no lease; current token 7",
                Some(Thrown::Rejected(RejectReason::NoLease {
                    current: Some(t(7)),
                })),
            ),
            (
                51004,
                &format!("conflict; existing op {op}"),
                Some(Thrown::Conflict(op)),
            ),
            (
                51000,
                "invalid ttl: must be 5..=300 s",
                Some(Thrown::Invalid("invalid ttl: must be 5..=300 s".into())),
            ),
            // Ours, but without what the caller needs: not mistaken for a rejection.
            (51001, "stale", None),
            (51001, "stale; current token forty", None),
            (51003, "no lease; current token", None),
            (51004, "conflict; existing op not-a-uuid", None),
            (51002, "something else", None),
            // Not ours.
            (2627, "Violation of UNIQUE KEY constraint", None),
            (50000, "stale; current token 42", None),
        ];
        for (code, message, expected) in cases {
            assert_eq!(thrown(code, message), expected, "{code} {message}");
        }
    }

    #[test]
    fn server_error_numbers_have_portable_kinds() {
        assert_eq!(kind_of(2627), StoreErrorKind::UniqueViolation);
        assert_eq!(kind_of(2601), StoreErrorKind::UniqueViolation);
        assert_eq!(kind_of(1205), StoreErrorKind::Retryable);
        assert_eq!(kind_of(1222), StoreErrorKind::Retryable);
        assert_eq!(kind_of(3960), StoreErrorKind::Retryable);
        assert_eq!(kind_of(40613), StoreErrorKind::Unavailable);
        assert_eq!(kind_of(4060), StoreErrorKind::Unavailable);
        assert_eq!(kind_of(208), StoreErrorKind::Other);
        assert!(babelfish_denied(
            33_557_097,
            "permission denied for table outbox_requests"
        ));
        assert!(!babelfish_denied(
            33_557_097,
            "relation \"x\" does not exist"
        ));
        assert!(!babelfish_denied(50_000, "permission denied for table t"));
        assert_eq!(kind_of(THROW_STALE), StoreErrorKind::Other);
    }

    #[test]
    fn transport_failures_are_unavailable() {
        let io = tiberius::error::Error::Io {
            kind: std::io::ErrorKind::ConnectionReset,
            message: "reset".into(),
        };
        match map_err(io) {
            Error::Store(e) => assert_eq!(e.kind(), StoreErrorKind::Unavailable),
            other => panic!("{other:?}"),
        }
        match map_err(tiberius::error::Error::Protocol("bad token".into())) {
            Error::Store(e) => assert_eq!(e.kind(), StoreErrorKind::Other),
            other => panic!("{other:?}"),
        }
    }
}
