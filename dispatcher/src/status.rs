//! Whether the database answers, as `/readyz` reports it: every loop says how its last
//! database call went ([`DbStatus`]); a failure is also counted and logged. And how long to
//! wait before asking again ([`reconnect_backoff`], [`retry_backoff`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backon::ExponentialBuilder;

use crate::metrics as m;

/// The pauses between tries to reach the database from scratch (a pool to connect, the
/// migrations to run): 200 ms doubling to 10 s, jittered so that processes restarted together
/// do not come back in step; never a last try (shutdown ends them).
pub(crate) fn reconnect_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
}

/// The pauses between tries of one statement of a leader's term while its failure may pass:
/// 100 ms doubling to 5 s; never a last try (the caller stops when the lease is lost).
pub(crate) fn retry_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times()
}

/// The readiness flag `/readyz` reads, set by the outcome of each database call.
#[derive(Debug, Clone, Default)]
pub(crate) struct DbStatus(Arc<AtomicBool>);

impl DbStatus {
    /// The status that sets `ready`.
    pub(crate) fn new(ready: Arc<AtomicBool>) -> DbStatus {
        DbStatus(ready)
    }

    /// A database call succeeded: ready.
    pub(crate) fn ok(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// A database call failed: not ready, counted under `call` and logged (the caller retries).
    pub(crate) fn failed(&self, call: m::DbCall, e: &outbox_store::Error) {
        self.0.store(false, Ordering::Relaxed);
        let operation = call.as_str();
        metrics::counter!(m::DB_ERRORS, "operation" => operation).increment(1);
        tracing::warn!(operation, error = %e, "database call failed; retrying");
    }
}
