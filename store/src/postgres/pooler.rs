//! Connection poolers in transaction mode (PgBouncer, managed poolers): how the store finds out
//! it talks to one, and what it then does differently (issue 27).
//!
//! Such a pooler hands each transaction of a client connection to whichever server connection
//! is free, and a statement outside a transaction is a transaction of its own. sqlx prepares a
//! statement and runs it in two round trips, each ending in a `Sync`, so outside a transaction
//! the two may reach different servers; and a named statement it keeps for the next time stays
//! on a server that another client gets next ("prepared statement \"sqlx_s_1\" already
//! exists"). So, through a transaction pooler, every statement is unnamed (planned each time,
//! nothing left on the server: the claim keeps its plan in its function) and runs inside a
//! transaction, a statement on its own in one of its own; and LISTEN, which needs a session,
//! takes a direct URL or is replaced by polling.
//!
//! Which it is, is found at connect by a probe (`probe.rs`), and while the probe cannot tell,
//! the store behaves as through a pooler. A URL can also say it (`pooler=transaction`) or rule
//! it out (`pooler=none`); the parameter is the store's and is taken off before sqlx reads the
//! URL.

use sqlx::postgres::{PgQueryResult, PgRow};

use super::probe::{Reached, maybe_pooled};
use super::{PgStore, Query, map_err};
use crate::error::{Backend, Error, StoreError, StoreErrorKind};

/// Whether this process's PostgreSQL statements are unnamed: while any of its stores may go
/// through a transaction pooler (`probe.rs`, `MAYBE_POOLED`).
pub(crate) fn through_pooler() -> bool {
    maybe_pooled()
}

/// One of our statements: prepared once and kept per connection when PostgreSQL is reached
/// directly, unnamed through a transaction pooler.
pub(crate) fn query<'q>(sql: &'static str) -> Query<'q> {
    sqlx::query(sql).persistent(!through_pooler())
}

/// What the URL says about a pooler in front of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooler {
    /// Nothing: find out at connect.
    Detect,
    /// `pooler=transaction`: a transaction pooler, without asking.
    Transaction,
    /// `pooler=none`: PostgreSQL itself, or a pooler in session mode.
    None,
}

impl Pooler {
    /// What the URL decided without a probe; `None` when a probe must find out.
    pub(crate) fn declared(self) -> Option<Reached> {
        match self {
            Pooler::Detect => None,
            Pooler::Transaction => Some(Reached::Pooler),
            Pooler::None => Some(Reached::Server),
        }
    }
}

/// What to do instead of a multi-host URL, which the driver cannot follow.
const ONE_HOST: &str = "the PostgreSQL driver connects to one host and cannot pick the \
primary among several: put HAProxy (routing by Patroni's `/primary` check), a pooler or your \
provider's primary endpoint in front and name that one host (docs/scaling.md, high availability)";

/// Takes the store's own `pooler` parameter off a `postgres://` URL; the rest is for sqlx.
/// A URL naming several hosts, or asking for `target_session_attrs` (which the driver would
/// ignore, connecting to whichever host it names, a standby too), is refused saying what to
/// do instead.
pub(crate) fn split_url(url: &str) -> Result<(String, Pooler), Error> {
    let authority = url.split_once("://").map_or("", |(_, rest)| {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let hosts = &rest[..end];
        hosts.rsplit_once('@').map_or(hosts, |(_, h)| h)
    });
    if authority.contains(',') {
        return Err(invalid_url(format!(
            "the URL names several hosts: {ONE_HOST}"
        )));
    }
    let Some((base, params)) = url.split_once('?') else {
        return Ok((url.to_owned(), Pooler::Detect));
    };
    let mut pooler = Pooler::Detect;
    let mut kept = Vec::new();
    for param in params.split('&') {
        match param.split_once('=') {
            Some(("pooler", "transaction")) => pooler = Pooler::Transaction,
            Some(("pooler", "none")) => pooler = Pooler::None,
            Some(("pooler", other)) => {
                return Err(invalid_url(format!(
                    "the URL's pooler={other} is neither `transaction` nor `none`"
                )));
            }
            Some(("target_session_attrs", "any")) => {}
            Some(("target_session_attrs", other)) => {
                return Err(invalid_url(format!(
                    "the URL's target_session_attrs={other} would be ignored: {ONE_HOST}"
                )));
            }
            _ => kept.push(param),
        }
    }
    Ok(match kept.is_empty() {
        true => (base.to_owned(), pooler),
        false => (format!("{base}?{}", kept.join("&")), pooler),
    })
}

fn invalid_url(message: String) -> Error {
    Error::Store(StoreError::new(
        Backend::Postgres,
        StoreErrorKind::Other,
        message,
    ))
}

/// Runs a statement on its own: autocommit on a pooled connection when PostgreSQL is reached
/// directly, in a transaction of its own through a transaction pooler (so its two round trips
/// reach one server).
pub(crate) trait OnStore {
    /// Every row.
    async fn all_on(self, s: &PgStore) -> Result<Vec<PgRow>, Error>;
    /// The one row.
    async fn one_on(self, s: &PgStore) -> Result<PgRow, Error>;
    /// The row, if any.
    async fn optional_on(self, s: &PgStore) -> Result<Option<PgRow>, Error>;
    /// What it changed.
    async fn execute_on(self, s: &PgStore) -> Result<PgQueryResult, Error>;
}

/// `$run` of the query `$q` on store `$s`, as [`OnStore`] says.
macro_rules! on_store {
    ($q:expr, $s:expr, $run:ident) => {{
        let (q, s) = ($q.persistent(!through_pooler()), $s);
        if s.pooled() {
            let mut tx = crate::driver::Driver::begin(s).await?;
            let done = q.$run(&mut *tx).await.map_err(map_err)?;
            tx.commit().await.map_err(map_err)?;
            Ok(done)
        } else {
            q.$run(&s.pool).await.map_err(map_err)
        }
    }};
}

impl OnStore for Query<'_> {
    async fn all_on(self, s: &PgStore) -> Result<Vec<PgRow>, Error> {
        on_store!(self, s, fetch_all)
    }

    async fn one_on(self, s: &PgStore) -> Result<PgRow, Error> {
        on_store!(self, s, fetch_one)
    }

    async fn optional_on(self, s: &PgStore) -> Result<Option<PgRow>, Error> {
        on_store!(self, s, fetch_optional)
    }

    async fn execute_on(self, s: &PgStore) -> Result<PgQueryResult, Error> {
        on_store!(self, s, execute)
    }
}

/// A driver error with what to do about it.
#[derive(Debug, thiserror::Error)]
#[error("{source}; {hint}")]
pub(crate) struct Hinted {
    source: super::failure::Failure,
    hint: &'static str,
}

impl Hinted {
    pub(crate) fn new(source: sqlx::Error, hint: &'static str) -> Self {
        Hinted {
            source: super::failure::Failure(source),
            hint,
        }
    }
}

/// What to do about an error a pooler in between caused, when the driver's words alone would
/// not say: `None` for every other error.
pub(crate) fn hint(e: &sqlx::Error) -> Option<&'static str> {
    let text = e.to_string();
    if text.contains("unsupported startup parameter") {
        Some(
            "a connection pooler refused a startup parameter: the driver sends \
             extra_float_digits, so add `ignore_startup_parameters = extra_float_digits` to \
             pgbouncer.ini (the store itself sends no startup options)",
        )
    } else if text.contains("prepared statement \"sqlx_s_")
        || text.contains("unnamed prepared statement does not exist")
    {
        Some(
            "a connection pooler in transaction mode hands this connection's statements to \
             different servers, and it was not recognised at connect: add `pooler=transaction` \
             to the database URL's parameters",
        )
    } else if text.contains("statement pooling mode") {
        Some(
            "a connection pooler in statement mode allows no transactions, and the outbox \
             needs them (the fenced enqueue, the takeover): use pool_mode = transaction or \
             session",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pooler_parameter_is_taken_off_the_url_and_read() {
        let cases = [
            ("postgres://u@h/db", "postgres://u@h/db", Pooler::Detect),
            (
                "postgres://u@h/db?pooler=transaction",
                "postgres://u@h/db",
                Pooler::Transaction,
            ),
            (
                "postgres://u@h/db?sslmode=disable&pooler=none&application_name=x",
                "postgres://u@h/db?sslmode=disable&application_name=x",
                Pooler::None,
            ),
            (
                "postgres://u@h/db?sslmode=disable",
                "postgres://u@h/db?sslmode=disable",
                Pooler::Detect,
            ),
        ];
        for (url, rest, pooler) in cases {
            assert_eq!(split_url(url).unwrap(), (rest.to_owned(), pooler), "{url}");
        }
        let e = split_url("postgres://u@h/db?pooler=yes").unwrap_err();
        assert!(e.to_string().contains("pooler=yes"), "{e}");
    }

    #[test]
    fn a_url_of_several_hosts_is_refused_naming_what_to_do_instead() {
        for url in [
            "postgres://u:secret@a:5432,b:5432/db",
            "postgres://a,b/db?sslmode=disable",
            "postgres://u@h/db?target_session_attrs=read-write",
        ] {
            let e = split_url(url).unwrap_err().to_string();
            assert!(
                e.contains("HAProxy") && e.contains("one host"),
                "{url}: {e}"
            );
            assert!(!e.contains("secret"), "{e}");
        }
        // A comma in the password or the query is no second host.
        assert!(split_url("postgres://u:a,b@h/db").is_ok());
        assert!(split_url("postgres://u@h/db?application_name=a,b").is_ok());
        assert!(split_url("postgres://u@h/db?target_session_attrs=any").is_ok());
    }

    #[test]
    fn errors_a_pooler_caused_name_their_fix_and_others_do_not() {
        let protocol = |m: &str| sqlx::Error::Protocol(m.to_owned());
        let named = hint(&protocol("prepared statement \"sqlx_s_1\" already exists")).unwrap();
        assert!(named.contains("pooler=transaction"), "{named}");
        let startup = hint(&protocol(
            "unsupported startup parameter: extra_float_digits",
        ))
        .unwrap();
        assert!(startup.contains("ignore_startup_parameters"), "{startup}");
        let statement_mode = hint(&protocol(
            "transaction blocks not allowed in statement pooling mode",
        ))
        .unwrap();
        assert!(statement_mode.contains("pool_mode"), "{statement_mode}");
        assert_eq!(
            hint(&protocol("relation \"outbox_ops\" does not exist")),
            None
        );
    }
}
