//! The leader's recorder: attempts hand their completions to one task that writes them in
//! batches, one transaction each, and tells each attempt whether its completion was applied
//! or discarded (the claim or the partition lease moved on, G9). A completion the database
//! refuses for a reason retrying cannot fix is retried alone, then without its optional parts.
//! With traces on, each batch is a span linked to the attempts it records.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use backon::Retryable as _;
use opentelemetry::trace::SpanContext;
use outbox_store::{Completion, Lease, NextState, Store};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::metrics as m;
use crate::partition::Trust;
use crate::routes::Routes;
use crate::status::DbStatus;
use crate::telemetry::{self, BatchOutcome};

/// A completion waiting to be written, its attempt's span, and where to say whether it was
/// applied.
type Pending = (Completion, Option<SpanContext>, oneshot::Sender<bool>);
/// Where attempts hand their completions to the leader's recorder.
pub(crate) type Recorder = mpsc::Sender<Pending>;
/// How many completions may wait for the recorder.
const RECORDER_QUEUE: usize = 1024;
/// The most completions written in one transaction.
const RECORD_BATCH: usize = 128;
/// How long a batch waits for the completions of requests still being sent.
const GATHER: Duration = Duration::from_millis(2);

/// What the recorder of one leader's term writes with.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Where completions are written.
    pub(crate) store: Store,
    /// Told how each write went.
    pub(crate) db: DbStatus,
    /// How many requests are being sent (a batch waits a little for their completions).
    pub(crate) routes: Arc<Routes>,
    /// The term's lease, checked by every completion (G9).
    pub(crate) lease: Lease,
    /// The term's trusted window: a failing write is retried while the lease may be ours.
    pub(crate) trust: Trust,
    /// Whether traces are on (each batch is then a span).
    pub(crate) traces: bool,
}

/// Starts the recorder of a leader's term on `attempts` (so waiting for them waits for it
/// too); it ends once every sender of the returned handle is dropped.
pub(crate) fn spawn(attempts: &TaskTracker, writer: Writer) -> Recorder {
    let (recorder, completions) = mpsc::channel(RECORDER_QUEUE);
    attempts.spawn(record_loop(writer, completions));
    recorder
}

/// Hands `completion` (of the attempt whose span is `attempt`) to the recorder and waits for
/// it to be written; true when it was applied, false when it was discarded, dropped, or the
/// recorder is gone.
pub(crate) async fn submit(
    recorder: &Recorder,
    completion: Completion,
    attempt: Option<SpanContext>,
) -> bool {
    let (reply, recorded) = oneshot::channel();
    let pending = (completion, attempt, reply);
    recorder.send(pending).await.is_ok() && recorded.await.unwrap_or(false)
}

/// Writes completions in batches, one transaction each: whatever has queued up while the
/// previous batch was written goes together. Ends when every attempt task and the claim loop
/// have dropped their senders. See [`record`] for what happens when a batch is refused.
async fn record_loop(w: Writer, mut queue: mpsc::Receiver<Pending>) {
    let mut batch: Vec<Pending> = Vec::with_capacity(RECORD_BATCH);
    let lease = &w.lease;
    while queue.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        gather(&w.routes, &mut queue, &mut batch).await;
        let started = SystemTime::now();
        let completions: Vec<Completion> = batch.iter().map(|(c, _, _)| c.clone()).collect();
        let applied = record(&w, &completions).await;
        if w.traces {
            let attempts = batch.iter().filter_map(|(_, a, _)| a.clone()).collect();
            telemetry::complete_span(lease, started, attempts, outcome(&applied));
        }
        for ((completion, _, reply), applied) in batch.drain(..).zip(applied) {
            if applied == Recorded::Discarded {
                metrics::counter!(m::STALE_COMPLETIONS).increment(1);
                tracing::warn!(op_id = %completion.op_id, token = %lease.token, "completion discarded: this dispatcher no longer holds the claim or the partition lease");
            }
            let _ = reply.send(applied == Recorded::Applied);
        }
    }
}

/// Lets the completions of the requests still being sent join `batch`, waiting at most
/// [`GATHER`]: one statement for many ops instead of one each when attempts end close together
/// (the database's cost is mostly per statement), and no wait at all when nothing else is
/// being sent, so that a lone op is recorded at once.
async fn gather(routes: &Routes, queue: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>) {
    let want = (batch.len() + routes.sending()).min(RECORD_BATCH);
    let more = async {
        while batch.len() < want {
            if queue.recv_many(batch, want - batch.len()).await == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(GATHER, more).await;
}

/// How many completions of a batch became what.
fn outcome(recorded: &[Recorded]) -> BatchOutcome {
    let count = |what| recorded.iter().filter(|&&r| r == what).count();
    BatchOutcome {
        applied: count(Recorded::Applied),
        discarded: count(Recorded::Discarded),
        dropped: count(Recorded::Dropped),
    }
}

/// What became of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    /// Written.
    Applied,
    /// Not applied: the claim or the partition lease moved on (G9), so the database left the
    /// op to its current leader.
    Discarded,
    /// Not written: the lease was lost while the database was failing, or the database refused
    /// it even without its optional parts. The op stays in flight under this token; the next
    /// leader re-queues it.
    Dropped,
}

/// Records `batch`. Failures retrying may fix are retried while the lease may still be ours.
/// When the database refuses the batch for a reason retrying cannot fix, each completion is
/// tried on its own, then without its optional parts (excerpt and error), and then given up,
/// counted and logged: one unstorable answer never stalls the partition, and nothing else in
/// the batch is lost.
async fn record(w: &Writer, batch: &[Completion]) -> Vec<Recorded> {
    let refused = match complete_retrying(w, batch).await {
        Ok(applied) => return applied,
        Err(Unwritten::LeaseLost) => return vec![Recorded::Dropped; batch.len()],
        Err(Unwritten::Refused(e)) => e,
    };
    tracing::warn!(count = batch.len(), error = %refused, "the database refused a batch of completions; recording them one by one");
    let mut recorded = Vec::with_capacity(batch.len());
    for c in batch {
        let alone = if batch.len() == 1 {
            Err(Unwritten::Refused(refused.to_string()))
        } else {
            complete_retrying(w, std::slice::from_ref(c)).await
        };
        let outcome = match alone {
            Ok(applied) => applied[0],
            Err(Unwritten::LeaseLost) => Recorded::Dropped,
            Err(Unwritten::Refused(_)) => {
                match complete_retrying(w, &[c.without_details()]).await {
                    Ok(applied) => applied[0],
                    Err(Unwritten::LeaseLost) => Recorded::Dropped,
                    Err(Unwritten::Refused(e)) => {
                        metrics::counter!(m::UNRECORDABLE_COMPLETIONS).increment(1);
                        tracing::error!(op_id = %c.op_id, attempt = c.attempt, error = %e, "the database refuses this attempt's completion even without its excerpt and error; the op stays in flight until the next leader re-queues it");
                        Recorded::Dropped
                    }
                }
            }
        };
        recorded.push(outcome);
    }
    recorded
}

/// Why completions were not written.
#[derive(Debug)]
enum Unwritten {
    /// The lease was lost while the database kept failing.
    LeaseLost,
    /// The database refused them for a reason retrying cannot fix (its message).
    Refused(String),
}

/// One completion statement, retried with backoff (100 ms doubling to 5 s) while the failure
/// may pass and the lease is still trusted.
async fn complete_retrying(
    w: &Writer,
    completions: &[Completion],
) -> Result<Vec<Recorded>, Unwritten> {
    let retryable =
        |e: &outbox_store::Error| matches!(e, outbox_store::Error::Store(e) if e.is_retryable());
    let written = (|| w.store.op_complete_batch(&w.lease, completions))
        .retry(crate::status::retry_backoff())
        .when(|e| retryable(e) && !w.trust.is_lost())
        .notify(|e, _| w.db.failed(m::DbCall::Complete, e))
        .await;
    match written {
        Ok(applied) => {
            w.db.ok();
            Ok(applied
                .into_iter()
                .map(|a| {
                    if a {
                        Recorded::Applied
                    } else {
                        Recorded::Discarded
                    }
                })
                .collect())
        }
        Err(e) if retryable(&e) => {
            w.db.failed(m::DbCall::Complete, &e);
            tracing::warn!(
                count = completions.len(),
                "could not record attempts before losing the lease; the next leader re-queues their ops"
            );
            Err(Unwritten::LeaseLost)
        }
        Err(e) => {
            metrics::counter!(m::DB_ERRORS, "operation" => "complete").increment(1);
            Err(Unwritten::Refused(e.to_string()))
        }
    }
}

/// Makes dead a claimed op whose row could not be read: nothing is sent, the attempt is
/// recorded as failed with what could not be read.
pub(crate) async fn bury(u: outbox_store::Unreadable, recorder: &Recorder) {
    metrics::counter!(m::INVALID_OPS, "destination" => "").increment(1);
    tracing::warn!(seq = u.seq, op_id = %u.op_id, reason = %u.reason, "a claimed op's row cannot be read; it is made dead, never sent");
    let completion = Completion {
        seq: u.seq,
        op_id: u.op_id,
        attempt: u.attempt,
        started_at: u.claimed_at,
        outcome: outbox_store::AttemptOutcome::Failed,
        http_status: None,
        error: Some(format!(
            "the stored op cannot be read, never sent: {}",
            u.reason
        )),
        excerpt: None,
        next: NextState::Dead,
        trace_context: None,
    };
    submit(recorder, completion, None).await;
}
