//! What every leader's term of this process is made from: the handles each partition loop is
//! given (store, readiness, routes, health, wake-ups) and the settings a term reads from the
//! config once.

use std::sync::Arc;
use std::time::Duration;

use outbox_store::Store;

use crate::config::Config;
use crate::health::Health;
use crate::routes::Routes;
use crate::status::DbStatus;
use crate::tally::Tally;
use crate::wake::Wakes;

/// The settings a term reads, taken from the config once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// `dispatcher.partitions`: the count recorded on every partition lease won (G12).
    pub(crate) partitions: u32,
    /// `dispatcher.lease_ttl`.
    pub(crate) lease_ttl: Duration,
    /// `dispatcher.poll_interval`: the longest a loop sleeps without a wake-up.
    pub(crate) poll_interval: Duration,
    /// `dispatcher.shutdown_grace`: how long a stopping leader waits for its attempts.
    pub(crate) shutdown_grace: Duration,
    /// `dispatcher.max_body_bytes`: a claimed body larger than this is not sent.
    pub(crate) max_body_bytes: usize,
    /// `dispatcher.claim_ahead`: the most a claim takes beyond the free slots, held here.
    pub(crate) claim_ahead: usize,
    /// Whether traces are on (`[telemetry]`).
    pub(crate) traces: bool,
}

impl Settings {
    /// The settings of `config`.
    pub(crate) fn of(config: &Config) -> Settings {
        let d = &config.dispatcher;
        Settings {
            partitions: d.partitions,
            lease_ttl: d.lease_ttl,
            poll_interval: d.poll_interval,
            shutdown_grace: d.shutdown_grace,
            max_body_bytes: d.max_body_bytes,
            claim_ahead: d.claim_ahead as usize,
            traces: config.telemetry.is_some(),
        }
    }
}

/// What every term of this process is made from: handed to each partition loop.
#[derive(Debug, Clone)]
pub(crate) struct Handles {
    /// The dispatcher's store.
    pub(crate) store: Store,
    /// `/readyz`, told how each database call went.
    pub(crate) db: DbStatus,
    /// Admission and limits.
    pub(crate) routes: Arc<Routes>,
    /// The destinations' health.
    pub(crate) health: Arc<Health>,
    /// The partition loops' wake-ups.
    pub(crate) wakes: Arc<Wakes>,
    /// The console's per-minute counts, kept across terms and written once a minute.
    pub(crate) tally: Arc<Tally>,
    /// The config's settings for a term.
    pub(crate) settings: Settings,
}
