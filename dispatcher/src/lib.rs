//! `outbox-dispatcher`: the fenced daemon that delivers recorded ops over HTTP.
//!
//! [`run`] is the whole daemon: it connects (retrying while the database is unreachable),
//! migrates if configured, serves `/metrics`, `/healthz` and `/readyz`, and runs one loop per
//! partition that competes for the partition's lease and, while leading, claims and delivers
//! ops (see `drain`). It stops when `shutdown` is cancelled: no new claims, attempts in flight
//! finish within the grace period, leases are released. Tests start it in-process with their
//! own shutdown token.

pub mod config;
pub mod deliver;
pub mod demo;
mod drain;
pub mod http;
pub mod metrics;
pub mod partition;
pub mod retry;
pub mod signing;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use outbox_store::{Partition, Store, StoreOptions};
use tokio_util::sync::CancellationToken;

pub use config::{Config, ConfigError};

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
    let shared = Arc::new(drain::Shared::new(store.clone(), config.clone(), ready)?);
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
    let mut loops = tokio::task::JoinSet::new();
    for index in 0..config.dispatcher.partitions {
        let partition = Partition::new(index, config.dispatcher.partitions)
            .map_err(outbox_store::Error::from)?;
        loops.spawn(drain::serve_partition(
            shared.clone(),
            partition,
            shutdown.clone(),
        ));
    }
    loops.spawn(housekeeping(shared.clone(), shutdown.clone()));
    while loops.join_next().await.is_some() {}
    if let Some((listener, forward)) = listener {
        listener.abort();
        forward.abort();
    }
    store.close().await;
    tracing::info!("dispatcher stopped");
    Ok(())
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

/// Gauges, unrouted-op reports and retention, every few seconds (at most 10 s, and at least
/// twice per retention period) until shutdown.
async fn housekeeping(shared: Arc<drain::Shared>, shutdown: CancellationToken) {
    let period = (shared.config.dispatcher.retention / 2)
        .clamp(Duration::from_secs(1), Duration::from_secs(10));
    let mut unrouted = Unrouted::default();
    loop {
        match shared.store.op_stats().await {
            Ok(stats) => {
                ::metrics::gauge!(metrics::PENDING_OPS).set(stats.pending as f64);
                ::metrics::gauge!(metrics::IN_FLIGHT_OPS).set(stats.in_flight as f64);
                let age = stats.oldest_pending_ms.unwrap_or(0).max(0) as f64 / 1000.0;
                ::metrics::gauge!(metrics::OLDEST_PENDING_AGE).set(age);
            }
            Err(e) => tracing::warn!(error = %e, "could not read the outbox's counts"),
        }
        match shared
            .store
            .op_unrouted_list(shared.destination_names())
            .await
        {
            Ok(list) => unrouted.report(list),
            Err(e) => tracing::warn!(error = %e, "could not count unrouted ops"),
        }
        purge(&shared).await;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// Destinations with pending ops that are not configured: a gauge each, one warning each.
#[derive(Debug, Default)]
struct Unrouted {
    warned: HashSet<String>,
    reported: HashSet<String>,
}

impl Unrouted {
    fn report(&mut self, list: Vec<(String, i64)>) {
        let now: HashSet<String> = list.iter().map(|(d, _)| d.clone()).collect();
        for gone in self.reported.difference(&now) {
            ::metrics::gauge!(metrics::UNROUTED, "destination" => gone.clone()).set(0.0);
        }
        for (destination, pending) in &list {
            ::metrics::gauge!(metrics::UNROUTED, "destination" => destination.clone())
                .set(*pending as f64);
            if self.warned.insert(destination.clone()) {
                tracing::warn!(%destination, pending, "ops wait for a destination that is not configured; they are kept, not sent");
            }
        }
        self.reported = now;
    }
}

/// Deletes finished ops past retention, 1000 at a time, until none are left.
async fn purge(shared: &drain::Shared) {
    loop {
        match shared
            .store
            .op_purge_finished(shared.config.dispatcher.retention, 1000)
            .await
        {
            Ok(n) => {
                ::metrics::counter!(metrics::PURGED).increment(n);
                if n < 1000 {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention purge failed");
                return;
            }
        }
    }
}
