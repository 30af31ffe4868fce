//! Erase after delivery (`dispatcher.erase_after`): the housekeeping pass that clears the
//! content of finished ops, reading only what finished since its last pass.

use std::time::{Duration, Instant};

use outbox_store::Store;

use crate::metrics as m;

/// Ops erased per statement: each batch is its own short transaction.
const BATCH: u32 = 500;
/// How far before the last pass's cut-off a pass looks again: an op whose finish committed
/// late (a producer's transaction that superseded it and ran on) is still found.
const MARGIN: Duration = Duration::from_secs(60);
/// How often a pass looks at every finished op kept, not only the recent ones: what a
/// transaction that ran longer than [`MARGIN`] finished is erased at the latest then.
const FULL_PASS_EVERY: Duration = Duration::from_secs(3600);

/// When the passes ran; a pass looks back to the last one that completed, plus [`MARGIN`].
#[derive(Debug, Default)]
pub(crate) struct Eraser {
    last_pass: Option<Instant>,
    last_full_pass: Option<Instant>,
}

impl Eraser {
    /// Erases, in batches, what finished more than `erase_after` ago and since the last pass
    /// (all that is kept on the first pass and every [`FULL_PASS_EVERY`]). A failed batch is
    /// logged and the next pass looks back over this one's window too.
    pub(crate) async fn pass(&mut self, store: &Store, erase_after: Duration) {
        let started = Instant::now();
        let full = self
            .last_full_pass
            .is_none_or(|t| started.duration_since(t) >= FULL_PASS_EVERY);
        let within = match self.last_pass {
            Some(t) if !full => Some(started.duration_since(t) + MARGIN),
            _ => None,
        };
        loop {
            match store.op_erase_finished(erase_after, within, BATCH).await {
                Ok(n) => {
                    metrics::counter!(m::ERASED).increment(n);
                    if n < u64::from(BATCH) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "erasing finished ops' content failed");
                    return;
                }
            }
        }
        self.last_pass = Some(started);
        if full {
            self.last_full_pass = Some(started);
        }
    }
}
