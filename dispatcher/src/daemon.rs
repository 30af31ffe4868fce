//! The running daemon: [`run`] connects, serves the probes, starts one loop per partition and
//! the housekeeping loop, restarts a loop that panics, and stops them all on shutdown; and the
//! errors that stop it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use outbox_store::{Partition, Store, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::routes::Shared;
use crate::{drain, housekeeping, http, metrics};

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database refused something that retrying cannot fix (bad URL, changed migration).
    #[error(transparent)]
    Store(#[from] outbox_store::Error),
    /// The health and metrics listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// An HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    /// Live partition leases were taken by dispatchers serving another partition count.
    #[error(transparent)]
    PartitionCount(#[from] PartitionCountMismatch),
}

/// This dispatcher's `dispatcher.partitions` disagrees with live partition leases: two
/// partition counts split the ops' slots differently, so they must never serve at once (G12).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dispatcher.partitions is {configured}, but {} (a dispatcher serving another partition count is running); two counts would split the ops differently. Start this dispatcher with the same count, or to change the count stop every dispatcher first, then start them all with the new one (README: changing the partition count)",
    describe(live)
)]
pub struct PartitionCountMismatch {
    /// The count this dispatcher was configured with.
    pub configured: u32,
    /// The live partition leases of another count: (lease, the count its holder serves).
    pub live: Vec<(String, u32)>,
}

fn describe(live: &[(String, u32)]) -> String {
    let shown: Vec<String> = live
        .iter()
        .take(3)
        .map(|(lease, n)| format!("{lease} is held with partitions = {n}"))
        .collect();
    let more = live.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Refuses to serve while live partition leases were taken with another partition count.
pub(crate) async fn check_partition_count(store: &Store, configured: u32) -> Result<(), Error> {
    let live = store.lease_partition_conflicts(configured).await?;
    if live.is_empty() {
        Ok(())
    } else {
        Err(PartitionCountMismatch { configured, live }.into())
    }
}

/// Runs the dispatcher until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = config.dispatcher.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        let app = http::router(http::Probe {
            ready: ready.clone(),
            metrics: metrics::handle(),
        });
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "health and metrics listener failed");
            }
        });
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    } else {
        metrics::handle();
    }
    let Some(store) = connect(&config, &shutdown).await? else {
        return Ok(());
    };
    if config.destinations.is_empty() {
        tracing::warn!("no destinations are configured: ops stay pending until one is");
    }
    if let Err(e) = check_partition_count(&store, config.dispatcher.partitions).await {
        store.close().await;
        return Err(e);
    }
    // Loops stop on shutdown, or when one of them finds the partition count disagreeing.
    let stop = shutdown.child_token();
    let shared = Arc::new(Shared::new(
        store.clone(),
        config.clone(),
        ready,
        stop.clone(),
    )?);
    // PostgreSQL notifications arrive on one Notify; forward each to every partition loop.
    let notified = Arc::new(tokio::sync::Notify::new());
    let listener = store.listen_for_enqueues(notified.clone()).map(|listener| {
        let shared = shared.clone();
        let forward = tokio::spawn(async move {
            loop {
                notified.notified().await;
                shared.wake_all();
            }
        });
        (listener, forward)
    });
    let membership = tokio::spawn(crate::membership::run(shared.clone(), stop.clone()));
    let mut loops = Loops::default();
    for index in 0..config.dispatcher.partitions {
        let partition = Partition::new(index, config.dispatcher.partitions)
            .map_err(outbox_store::Error::from)?;
        loops.start(&shared, Some(partition), &stop);
    }
    loops.start(&shared, None, &stop);
    loops.run(&shared, &stop).await;
    if let Some((listener, forward)) = listener {
        listener.abort();
        forward.abort();
    }
    // The loops have stopped: leave the membership (the loops ended because `stop` was
    // cancelled, which ends the heartbeat too).
    stop.cancel();
    if let Err(e) = membership.await {
        tracing::error!(error = %e, "the membership task failed");
    }
    store.close().await;
    if let Some(e) = shared.take_fatal() {
        tracing::error!(error = %e, "dispatcher stopped");
        return Err(e.into());
    }
    tracing::info!("dispatcher stopped");
    Ok(())
}

/// The partition loops and the housekeeping loop. A loop that panics is logged, counted and
/// started again: its leadership (and with it the lease renewal) was dropped while unwinding,
/// so the partition's lease lapses and is won again, never renewed by a zombie.
#[derive(Default)]
struct Loops {
    set: tokio::task::JoinSet<()>,
    /// Which loop each task runs: a partition, or housekeeping (`None`).
    of: std::collections::HashMap<tokio::task::Id, Option<Partition>>,
}

impl Loops {
    fn start(&mut self, shared: &Arc<Shared>, which: Option<Partition>, stop: &CancellationToken) {
        let handle = match which {
            Some(p) => self
                .set
                .spawn(drain::serve_partition(shared.clone(), p, stop.clone())),
            None => self
                .set
                .spawn(housekeeping::run(shared.clone(), stop.clone())),
        };
        self.of.insert(handle.id(), which);
    }

    /// Waits for every loop to end, restarting those that panic until `stop`.
    async fn run(&mut self, shared: &Arc<Shared>, stop: &CancellationToken) {
        while let Some(done) = self.set.join_next_with_id().await {
            let (id, panicked) = match done {
                Ok((id, ())) => (id, false),
                Err(e) => (e.id(), e.is_panic()),
            };
            let which = self.of.remove(&id).flatten();
            if !panicked || stop.is_cancelled() {
                continue;
            }
            let name = which.map_or("housekeeping".to_owned(), |p| p.lease_resource());
            ::metrics::counter!(metrics::LOOP_PANICS, "loop" => name.clone()).increment(1);
            tracing::error!(r#loop = %name, "a dispatcher loop panicked; starting it again");
            self.start(shared, which, stop);
        }
    }
}

impl std::fmt::Debug for Loops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loops")
            .field("running", &self.of.len())
            .finish()
    }
}

/// Connects and migrates, retrying with backoff while the database is unreachable; `None`
/// when shutdown came first.
async fn connect(config: &Config, shutdown: &CancellationToken) -> Result<Option<Store>, Error> {
    let options = StoreOptions {
        lease_ttl: config.lease_bounds,
        max_connections: config.max_connections,
        application_name: "outbox-dispatcher".to_owned(),
        dispatcher_sessions: true,
        ..StoreOptions::default()
    };
    let mut backoff = Duration::from_millis(200);
    loop {
        let attempt = async {
            let store = Store::connect(config.database_url.expose(), options.clone()).await?;
            if config.migrate {
                let report = store.migrate().await?;
                for applied in &report.applied {
                    tracing::info!(migration = %applied, "applied migration");
                }
            }
            Ok::<_, outbox_store::Error>(store)
        };
        match attempt.await {
            Ok(store) => return Ok(Some(store)),
            Err(outbox_store::Error::Store(e)) if e.is_retryable() => {
                tracing::warn!(error = %e, ?backoff, "database unreachable; retrying");
            }
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_count_mismatch_names_both_counts_and_what_to_do() {
        let e = PartitionCountMismatch {
            configured: 4,
            live: vec![("dispatcher/0".into(), 2), ("dispatcher/1".into(), 2)],
        };
        let text = e.to_string();
        for words in [
            "dispatcher.partitions is 4",
            "dispatcher/0 is held with partitions = 2",
            "stop every dispatcher",
        ] {
            assert!(text.contains(words), "{text}");
        }
    }
}
