//! The running daemon: [`run`] connects, serves the probes, starts one loop per partition and
//! the housekeeping loop, restarts a loop that panics, and stops them all on shutdown; and the
//! errors that stop it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use backon::Retryable as _;
use outbox_store::partitioning::PartitionCount;
use outbox_store::{Partition, ProducerCalls, Store, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::handles::{Handles, Settings};
use crate::health::Health;
use crate::membership::Membership;
use crate::routes::Routes;
use crate::status::DbStatus;
use crate::tally::{self, Tally};
use crate::wake::Wakes;
use crate::{console, drain, housekeeping, http, metrics};

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
    /// The console's logins could not be set up (no random session key from the system).
    #[error("console: {0}")]
    Console(#[from] outbox_console::AccessError),
}

/// This dispatcher's `dispatcher.partitions` is not the partition count in force (kept in the
/// database, `outboxctl partitions set`), or no count is recorded yet and live partition
/// leases were taken with another one: two counts split the ops' slots differently, so they
/// must never serve at once (G12).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dispatcher.partitions is {configured}, but {}; two counts would split the ops differently. Set dispatcher.partitions = {} here, or change the count of every dispatcher at once with `outboxctl partitions set {configured} --reason …` (running dispatchers step down and follow it; docs/dispatcher.md: changing the partition count)",
    describe(self),
    self.in_force.as_ref().map_or_else(|| self.live.first().map_or(0, |l| l.1), |c| c.partitions)
)]
pub struct PartitionCountMismatch {
    /// The count this dispatcher was configured with.
    pub configured: u32,
    /// The count in force, when one is recorded.
    pub in_force: Option<PartitionCount>,
    /// The live partition leases of another count: (lease, the count its holder serves).
    pub live: Vec<(String, u32)>,
}

fn describe(e: &PartitionCountMismatch) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &e.in_force {
        parts.push(format!(
            "the partition count in force is {} (set by {} at {}: {})",
            c.partitions,
            c.changed_by,
            c.changed_at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            c.reason
        ));
    }
    let shown: Vec<String> = e
        .live
        .iter()
        .take(3)
        .map(|(lease, n)| format!("{lease} is held with partitions = {n}"))
        .collect();
    let more = e.live.len().saturating_sub(shown.len());
    if more > 0 {
        parts.push(format!("{} and {more} more", shown.join(", ")));
    } else if !shown.is_empty() {
        parts.push(shown.join(", "));
    }
    parts.join("; ")
}

/// At start: the partition count in force (this dispatcher's count is recorded when there is
/// none and no live partition lease disagrees). Refuses to serve another count. Live leases of
/// another count while this one is in force belong to dispatchers stepping down after a
/// change: the partition loops wait for them (`drain::record_partition_count`).
async fn adopt_partition_count(store: &Store, configured: u32) -> Result<(), Error> {
    let live = store.lease_partition_conflicts(configured).await?;
    let in_force = if live.is_empty() {
        Some(store.partition_count_adopt(configured).await?)
    } else {
        store.partition_count().await?
    };
    match in_force {
        Some(c) if c.partitions == configured => {
            if !live.is_empty() {
                tracing::warn!(
                    partitions = configured,
                    live = live.len(),
                    "partition leases of another count are live: waiting for their dispatchers to step down to the count in force"
                );
            }
            Ok(())
        }
        in_force => Err(PartitionCountMismatch {
            configured,
            in_force,
            live,
        }
        .into()),
    }
}

/// Runs the dispatcher until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let ready = Arc::new(AtomicBool::new(false));
    let console = console::console(&config)?;
    // Every metric exists before the listener opens, so the first scrape is whole (at its
    // initial values) even while the database is still being reached: a rule on an absent
    // series would misfire otherwise. The recorder is installed first: a metric registered
    // before it would go nowhere.
    let recorder = metrics::handle();
    let destinations: Vec<String> = config.destinations.keys().cloned().collect();
    metrics::register(&destinations, config.dispatcher.partitions);
    if let Some(addr) = config.dispatcher.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        let mut app = http::router(http::Probe {
            ready: ready.clone(),
            metrics: recorder,
        });
        if let Some(console) = &console {
            app = app.merge(console.router());
        }
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "health and metrics listener failed");
            }
        });
        if console.is_some() {
            tracing::info!(%addr, "serving /metrics, /healthz, /readyz and the console under {}/", console::BASE_PATH);
        } else {
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        }
    }
    let Some(store) = connect(&config, &shutdown).await? else {
        return Ok(());
    };
    // The console's pool closes whenever run returns, by shutdown or by an error.
    let console_stop = shutdown.child_token();
    let _console_stop = console_stop.clone().drop_guard();
    if let Some(console) = console {
        console::connect(console, &config, console_stop);
    }
    if config.destinations.is_empty() {
        tracing::warn!("no destinations are configured: ops stay pending until one is");
    }
    if let Err(e) = adopt_partition_count(&store, config.dispatcher.partitions).await {
        store.close().await;
        return Err(e);
    }
    // One instance id for the process's whole run, across changes of the partition count.
    let instance_id = uuid::Uuid::new_v4();
    // The console's counts too; written until the loops have ended, then once more.
    let tally = Arc::new(Tally::default());
    let tally_stop = CancellationToken::new();
    let _tally_stop = tally_stop.clone().drop_guard();
    let writer = tokio::spawn(tally::run(
        store.clone(),
        tally.clone(),
        instance_id,
        tally_stop.clone(),
    ));
    let mut config = config;
    loop {
        let serving = config.dispatcher.partitions;
        match serve(
            &store,
            config.clone(),
            ready.clone(),
            &shutdown,
            instance_id,
            tally.clone(),
        )
        .await
        {
            Ok(None) => break,
            Ok(Some(next)) => {
                tracing::warn!(
                    from = serving,
                    to = next,
                    "the partition count in force changed (outboxctl partitions set): stepped down, now serving the new count; set dispatcher.partitions = {next} in this dispatcher's config before it restarts"
                );
                config.dispatcher.partitions = next;
            }
            Err(e) => {
                store.close().await;
                return Err(e);
            }
        }
    }
    tally_stop.cancel();
    if let Err(e) = writer.await {
        tracing::error!(error = %e, "the console's counts writer failed");
    }
    store.close().await;
    tracing::info!("dispatcher stopped");
    Ok(())
}

/// The process-wide context while one partition count is served: only the daemon holds it,
/// and hands each task the narrow part it needs (the partition loops their [`Handles`] and
/// the share, the membership its own state, housekeeping the store and config).
struct Process {
    config: Config,
    handles: Handles,
    membership: Arc<Membership>,
    /// Cancelled on shutdown, or when the membership sees the count in force change.
    stop: CancellationToken,
}

impl Process {
    fn new(
        store: &Store,
        config: Config,
        ready: Arc<AtomicBool>,
        stop: CancellationToken,
        instance_id: uuid::Uuid,
        tally: Arc<Tally>,
    ) -> Result<Process, Error> {
        let db = DbStatus::new(ready);
        let wakes = Arc::new(Wakes::new(config.dispatcher.partitions));
        let routes = Arc::new(Routes::new(&config)?);
        let health = Arc::new(Health::new(
            store.clone(),
            &config,
            wakes.clone(),
            db.clone(),
        ));
        let membership = Arc::new(Membership::new(
            store.clone(),
            db.clone(),
            instance_id,
            config.dispatcher.lease_ttl,
            config.dispatcher.partitions,
            routes.clone(),
            stop.clone(),
        ));
        Ok(Process {
            handles: Handles {
                store: store.clone(),
                db,
                routes,
                health,
                wakes,
                tally,
                settings: Settings::of(&config),
            },
            membership,
            config,
            stop,
        })
    }
}

/// Serves `config.dispatcher.partitions` partitions until `shutdown` (then `None`), or until
/// the partition count in force changes (then the new count, once every loop has stepped
/// down: attempts finished within `shutdown_grace`, leases released).
async fn serve(
    store: &Store,
    config: Config,
    ready: Arc<AtomicBool>,
    shutdown: &CancellationToken,
    instance_id: uuid::Uuid,
    tally: Arc<Tally>,
) -> Result<Option<u32>, Error> {
    let stop = shutdown.child_token();
    let partitions = config.dispatcher.partitions;
    let process = Process::new(store, config, ready, stop.clone(), instance_id, tally)?;
    metrics::register(process.handles.routes.names(), partitions);
    // PostgreSQL notifications (SQLite's commits) arrive on one Notify; forward each to every
    // partition loop as new work.
    let notified = Arc::new(tokio::sync::Notify::new());
    let listener = store.listen_for_enqueues(notified.clone()).map(|listener| {
        let wakes = process.handles.wakes.clone();
        let forward = tokio::spawn(async move {
            loop {
                notified.notified().await;
                wakes.new_work();
            }
        });
        (listener, forward)
    });
    let membership = tokio::spawn(process.membership.clone().run());
    let health = tokio::spawn(process.handles.health.clone().run(stop.clone()));
    let mut loops = Loops::default();
    for index in 0..partitions {
        let partition = Partition::new(index, partitions).map_err(outbox_store::Error::from)?;
        loops.start(&process, Some(partition));
    }
    loops.start(&process, None);
    loops.run(&process).await;
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
    health.abort();
    Ok(if shutdown.is_cancelled() {
        None
    } else {
        process.membership.take_recount()
    })
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
    fn start(&mut self, process: &Process, which: Option<Partition>) {
        let stop = process.stop.clone();
        let handle = match which {
            Some(p) => self.set.spawn(drain::serve_partition(
                process.handles.clone(),
                process.membership.watch_share(),
                p,
                stop,
            )),
            None => self.set.spawn(housekeeping::run(
                process.handles.store.clone(),
                process.config.clone(),
                stop,
            )),
        };
        self.of.insert(handle.id(), which);
    }

    /// Waits for every loop to end, restarting those that panic until `stop`.
    async fn run(&mut self, process: &Process) {
        while let Some(done) = self.set.join_next_with_id().await {
            let (id, panicked) = match done {
                Ok((id, ())) => (id, false),
                Err(e) => (e.id(), e.is_panic()),
            };
            let which = self.of.remove(&id).flatten();
            if !panicked || process.stop.is_cancelled() {
                continue;
            }
            let name = which.map_or("housekeeping".to_owned(), |p| p.lease_resource());
            ::metrics::counter!(metrics::LOOP_PANICS, "loop" => name.clone()).increment(1);
            tracing::error!(r#loop = %name, "a dispatcher loop panicked; starting it again");
            self.start(process, which);
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

/// Connects and migrates, retrying with backoff (200 ms doubling to 10 s, jittered) while the
/// database is unreachable; `None` when shutdown came first.
async fn connect(config: &Config, shutdown: &CancellationToken) -> Result<Option<Store>, Error> {
    let options = StoreOptions {
        lease_ttl: config.lease_bounds,
        max_connections: config.max_connections,
        application_name: "outbox-dispatcher".to_owned(),
        dispatcher_sessions: true,
        listen_url: config
            .database_listen_url
            .as_ref()
            .map(|u| u.expose().to_owned()),
        // Its partition leases are statements its role may run (outbox_dispatcher writes
        // dispatcher/N rows); it enqueues nothing, so it never needs a producer's functions.
        producer_calls: ProducerCalls::Statements,
        ..StoreOptions::default()
    };
    let attempt = || async {
        let store = Store::connect(config.database_url.expose(), options.clone()).await?;
        if config.migrate {
            let report = store.migrate().await?;
            for applied in &report.applied {
                tracing::info!(migration = %applied, "applied migration");
            }
        }
        Ok::<_, outbox_store::Error>(store)
    };
    let connecting = attempt
        .retry(crate::status::reconnect_backoff())
        .when(|e| matches!(e, outbox_store::Error::Store(e) if e.is_retryable()))
        .notify(
            |e, backoff| tracing::warn!(error = %e, ?backoff, "database unreachable; retrying"),
        );
    tokio::select! {
        () = shutdown.cancelled() => Ok(None),
        connected = connecting => Ok(Some(connected?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_count_mismatch_names_both_counts_and_what_to_do() {
        let e = PartitionCountMismatch {
            configured: 4,
            in_force: None,
            live: vec![("dispatcher/0".into(), 2), ("dispatcher/1".into(), 2)],
        };
        let text = e.to_string();
        for words in [
            "dispatcher.partitions is 4",
            "dispatcher/0 is held with partitions = 2",
            "Set dispatcher.partitions = 2 here",
            "outboxctl partitions set 4 --reason",
        ] {
            assert!(text.contains(words), "{text}");
        }
        let e = PartitionCountMismatch {
            configured: 4,
            in_force: Some(PartitionCount {
                partitions: 16,
                changed_at: time::OffsetDateTime::UNIX_EPOCH,
                changed_by: "ops-oncall".into(),
                reason: "three hosts (CHG-88)".into(),
            }),
            live: vec![],
        };
        let text = e.to_string();
        for words in [
            "dispatcher.partitions is 4",
            "the partition count in force is 16 (set by ops-oncall at 1970-01-01T00:00:00Z: three hosts (CHG-88))",
            "Set dispatcher.partitions = 16 here",
        ] {
            assert!(text.contains(words), "{text}");
        }
    }
}
