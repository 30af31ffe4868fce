//! Whether a PostgreSQL URL reaches the server itself or a connection pooler in transaction
//! mode (issue 27), decided on certain evidence only (issue 34). PostgreSQL serves a client
//! connection with one backend for its whole life, and a backend serves one client connection;
//! a transaction pooler breaks both as soon as it can. A slow answer proves nothing (a loaded
//! server, one recovering after a failover, and a pooler without a free server connection all
//! make a query wait), so it leaves the question open: the store then behaves as through a
//! pooler, which is right either way, and probes again, less and less often, until it knows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBuilder};
use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::map_err;
use crate::error::Error;

/// What is between a store and its server, as far as it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// PostgreSQL itself (or a pooler in session mode, which behaves alike).
    Server,
    /// A connection pooler in transaction mode: the probe caught it, or the URL says so.
    Pooler,
    /// Not known yet: the probe waited too long for an answer.
    Unknown,
}

/// How many PostgreSQL stores of this process may go through a transaction pooler (one was
/// found, or it is not known yet). sqlx names statements per connection, not per store, and
/// a caller's own connections (`enqueue_in`) run the same statements, so while any may, every
/// PostgreSQL statement of the process is unnamed: slower beside a direct store, never wrong.
static MAYBE_POOLED: AtomicUsize = AtomicUsize::new(0);

/// Whether a store of this process may go through a transaction pooler ([`MAYBE_POOLED`]).
pub(crate) fn maybe_pooled() -> bool {
    MAYBE_POOLED.load(Ordering::Relaxed) > 0
}

/// How long a probe waits for a trivial query before it gives up on this round: a pooler whose
/// server connections are all held elsewhere makes it wait, and so does a slow server.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// How many times the probe tries to catch the pooler moving a connection.
const PROBE_ROUNDS: usize = 8;

/// The first pause before probing again a server the probe could not tell; it doubles up to
/// [`LAST_REPROBE`], the pause from then on.
const FIRST_REPROBE: Duration = Duration::from_secs(2);
/// See [`FIRST_REPROBE`]: a pooler with a single server connection may never let the probe
/// tell, and each probe holds that connection for up to [`PROBE_WAIT`].
const LAST_REPROBE: Duration = Duration::from_secs(300);

/// What one store knows of the way to its server, shared by the store's clones and probed
/// again in the background while it is [`Reached::Unknown`].
#[derive(Debug)]
pub(crate) struct Route {
    reached: watch::Sender<Reached>,
    /// Ends the probing again when the store is closed or dropped.
    stop: CancellationToken,
    /// host:port/database, for the log (never the user or the password).
    server: String,
}

impl Route {
    /// Finds out at connect what is between `connect` and its server: what the URL said
    /// (`declared`, after one connection that reports a connect failure's real cause), or what
    /// a probe shows; unknown, it probes again in the background. What it decided, and why, is
    /// logged at warn whenever it is not the plain server.
    pub(crate) async fn find(
        connect: &PgConnectOptions,
        declared: Option<Reached>,
    ) -> Result<Arc<Route>, Error> {
        let server = format!(
            "{}:{}/{}",
            connect.get_host(),
            connect.get_port(),
            connect.get_database().unwrap_or_default()
        );
        let reached = match declared {
            Some(reached) => {
                let first = PgConnection::connect_with(connect).await.map_err(map_err)?;
                first.close().await.map_err(map_err)?;
                if reached == Reached::Pooler {
                    tracing::info!(%server, "the URL says pooler=transaction: {POOLED_MODE}");
                }
                reached
            }
            None => {
                let (reached, why) = probe(connect).await?;
                say_found(&server, reached, why);
                reached
            }
        };
        let route = Arc::new(Route::new(reached, server));
        if reached == Reached::Unknown {
            probe_again(&route, connect.clone());
        }
        Ok(route)
    }

    fn new(reached: Reached, server: String) -> Route {
        if reached != Reached::Server {
            MAYBE_POOLED.fetch_add(1, Ordering::Relaxed);
        }
        Route {
            reached: watch::Sender::new(reached),
            stop: CancellationToken::new(),
            server,
        }
    }

    /// Whether the store behaves as through a pooler: one was found, or it is not known yet.
    pub(crate) fn pooled(&self) -> bool {
        self.now() != Reached::Server
    }

    /// What is known now.
    pub(crate) fn now(&self) -> Reached {
        *self.reached.borrow()
    }

    /// Waits until it is known; [`Reached::Unknown`] only when the store closed first.
    pub(crate) async fn known(&self) -> Reached {
        let mut seen = self.reached.subscribe();
        tokio::select! {
            known = seen.wait_for(|r| *r != Reached::Unknown) => {
                known.map_or(Reached::Unknown, |r| *r)
            }
            () = self.stop.cancelled() => Reached::Unknown,
        }
    }

    /// Stops probing again: the store is closing.
    pub(crate) fn close(&self) {
        self.stop.cancel();
    }

    /// Takes in what a later probe found (not [`Reached::Unknown`]), and says it at warn.
    fn learn(&self, found: Reached, why: &str) {
        let changed = self.reached.send_if_modified(|reached| {
            let learnt = *reached == Reached::Unknown;
            if learnt {
                *reached = found;
            }
            learnt
        });
        if !changed {
            return;
        }
        let server = &self.server;
        if found == Reached::Server {
            MAYBE_POOLED.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                %server,
                "PostgreSQL is reached directly after all ({why}): statements are prepared and \
                 kept again, and LISTEN runs; until now they were unnamed and LISTEN waited, \
                 since the probe at connect could not tell"
            );
        } else {
            tracing::warn!(
                %server,
                "PostgreSQL is reached through a connection pooler in transaction mode ({why}): \
                 {POOLED_MODE}, as since connect. Add pooler=transaction to the URL to say so \
                 without probing"
            );
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.now() != Reached::Server {
            MAYBE_POOLED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Says at connect what the probe found at `server` and why: at warn unless it is the server.
fn say_found(server: &str, reached: Reached, why: &str) {
    match reached {
        Reached::Server => tracing::debug!(%server, "no transaction pooler: {why}"),
        Reached::Pooler => tracing::warn!(
            %server,
            "PostgreSQL is reached through a connection pooler in transaction mode ({why}): \
             {POOLED_MODE}. Add pooler=transaction to the URL to say so without probing, or \
             pooler=none if this is wrong"
        ),
        Reached::Unknown => tracing::warn!(
            %server,
            "cannot tell yet whether PostgreSQL is reached through a connection pooler in \
             transaction mode ({why}: a loaded or recovering server, or a pooler without a free \
             server connection). Until a later probe tells, {POOLED_MODE}; probing again in \
             {FIRST_REPROBE:?}, then less often. pooler=none or pooler=transaction in the URL \
             decides without probing"
        ),
    }
}

/// What the store does through a transaction pooler, as the log says it.
const POOLED_MODE: &str = "every statement is unnamed and runs in a transaction of its own, \
and LISTEN runs only on database.listen_url (the dispatcher polls otherwise)";

/// The pauses before each probe again: [`FIRST_REPROBE`], doubling up to [`LAST_REPROBE`],
/// then that pause for as long as it takes. No jitter: one store probes, not a crowd.
fn reprobe_pauses() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(FIRST_REPROBE)
        .with_factor(2.0)
        .with_max_delay(LAST_REPROBE)
        .without_max_times()
        .build()
}

/// Probes `connect` again after each of [`reprobe_pauses`], until a probe tells, the store is
/// closed, or it is dropped. A probe that cannot connect (the server is down) tells nothing
/// either.
fn probe_again(route: &Arc<Route>, connect: PgConnectOptions) {
    let (route, stop) = (Arc::downgrade(route), route.stop.clone());
    tokio::spawn(async move {
        for pause in reprobe_pauses() {
            let found = tokio::select! {
                () = stop.cancelled() => return,
                found = async {
                    tokio::time::sleep(pause).await;
                    probe(&connect).await
                } => found,
            };
            // The store's, for this turn only: dropped, it is not kept alive to be probed.
            let Some(store) = Weak::upgrade(&route) else {
                return;
            };
            match found {
                Ok((Reached::Unknown, why)) => {
                    tracing::debug!(server = %store.server, "still cannot tell: {why}");
                }
                Ok((found, why)) => return store.learn(found, why),
                Err(e) => tracing::debug!(server = %store.server, error = %e, "cannot probe"),
            }
        }
    });
}

/// Why the probe decided what it did.
const MOVED: &str = "one client connection was answered by two backends";
const SHARED: &str = "two client connections were answered by one backend";
const SLOW: &str = "a trivial query took longer than 2 s";
const STEADY: &str = "each connection kept its own backend through every round";

/// One probe: one connection asks for its backend, a second opens a transaction and asks for
/// its own, and the first asks again. PostgreSQL answers each with its own backend every time;
/// a transaction pooler hands the second the backend the first just released (PgBouncer reuses
/// the most recently released one), or moves the first to another. Either is certain. An answer
/// slower than [`PROBE_WAIT`] is not: [`Reached::Unknown`]. Plain queries only (nothing is left
/// prepared anywhere), in rounds, since other clients' traffic can get in between.
pub(crate) async fn probe(connect: &PgConnectOptions) -> Result<(Reached, &'static str), Error> {
    let mut first = PgConnection::connect_with(connect).await.map_err(map_err)?;
    let mut holder = PgConnection::connect_with(connect).await.map_err(map_err)?;
    let backend = backend_pid(&mut first, ASK).await?;
    for _ in 0..PROBE_ROUNDS {
        if backend_pid(&mut first, ASK).await? != backend {
            return close_both(first, holder, (Reached::Pooler, MOVED)).await;
        }
        let held = backend_pid(&mut holder, HOLD).await?;
        let again = match held == backend {
            true => None,
            false => Some(tokio::time::timeout(PROBE_WAIT, backend_pid(&mut first, ASK)).await),
        };
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut holder)
            .await
            .map_err(map_err)?;
        match again {
            None => return close_both(first, holder, (Reached::Pooler, SHARED)).await,
            Some(Err(_)) => {
                // The first connection is mid-query: dropped.
                holder.close().await.map_err(map_err)?;
                return Ok((Reached::Unknown, SLOW));
            }
            Some(Ok(pid)) => {
                if pid? != backend {
                    return close_both(first, holder, (Reached::Pooler, MOVED)).await;
                }
            }
        }
    }
    close_both(first, holder, (Reached::Server, STEADY)).await
}

/// The probe's question: which backend answers.
const ASK: &str = "SELECT pg_backend_pid()::text";
/// The same in a transaction left open, which holds a pooler's server connection.
const HOLD: &str = "BEGIN; SELECT pg_backend_pid()::text";

async fn close_both<T>(first: PgConnection, holder: PgConnection, found: T) -> Result<T, Error> {
    first.close().await.map_err(map_err)?;
    holder.close().await.map_err(map_err)?;
    Ok(found)
}

/// The backend process id that answers `sql` (a plain query that ends in
/// `SELECT pg_backend_pid()::text`) on `c`.
async fn backend_pid(c: &mut PgConnection, sql: &'static str) -> Result<String, Error> {
    use sqlx::Row as _;
    let row = sqlx::raw_sql(sql).fetch_one(c).await.map_err(map_err)?;
    row.try_get::<String, _>(0).map_err(map_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reprobing_waits_2_s_then_doubles_up_to_5_min_and_stays_there() {
        let secs: Vec<u64> = reprobe_pauses().take(11).map(|d| d.as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert!(reprobe_pauses().take(11).all(|d| d.subsec_nanos() == 0));
        assert_eq!(
            reprobe_pauses().nth(10_000),
            Some(LAST_REPROBE),
            "never gives up"
        );
    }
}
