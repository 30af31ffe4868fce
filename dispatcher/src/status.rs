//! Whether the database answers, as `/readyz` reports it: every loop says how its last
//! database call went ([`DbStatus`]); a failure is also counted and logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics as m;

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
