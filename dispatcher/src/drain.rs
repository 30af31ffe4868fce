//! The loop of one partition's leader: wait, claim a batch, deliver, record the outcome.
//!
//! ```text
//!              enqueue (fenced, G4)
//!                     │
//!                     ▼
//!   ┌──────────► pending ──────────────┬──────────────┐
//!   │   retry at      │ claim (G8, G9) │ supersede     │ cancel (operator)
//!   │   next_attempt  ▼                ▼               ▼
//!   └──────────── in_flight        superseded      cancelled
//!                  │      │
//!          2xx     │      │ permanent / out of retries
//!                  ▼      ▼
//!             delivered   dead ── replay (operator) ──► pending
//! ```
//!
//! Invariants: a claim and a completion each check, in the same statement, that this
//! dispatcher's partition lease has its owner and token (G9); at most one op per order key is
//! in flight and they go in (token, sequence) order (G8); an attempt starts only if its
//! timeout fits the window the leader still trusts its lease. Wake-ups: a notification
//! (PostgreSQL LISTEN, or a finished attempt), the next op's due time, or `poll_interval`.
//! On pause the loop stops with the process and the lease lapses; on resume its completions
//! are refused. On crash the ops it had in flight are re-queued by the next leader (they may
//! have been sent: at-least-once, same idempotency key). On restart it re-queues what an older
//! token left in flight before claiming anything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use outbox_store::{ClaimedOp, Completion, Lease, NextState, Partition, Store};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::PartitionCountMismatch;
use crate::config::Config;
use crate::deliver::Sender;
use crate::metrics as m;
use crate::partition::{Leadership, Trust};
use crate::retry;

/// One destination's sender and limits.
#[derive(Debug)]
pub(crate) struct Route {
    sender: Sender,
    slots: Arc<Semaphore>,
    limiter: Option<(DefaultDirectRateLimiter, Duration)>,
}

/// What every partition loop shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) config: Config,
    routes: HashMap<String, Route>,
    names: Vec<String>,
    global: Arc<Semaphore>,
    /// One per partition loop, woken by enqueue notifications and by finished attempts (a
    /// slot freed up). Each keeps a permit when nobody waits, so no wake-up is lost.
    wakes: Vec<Notify>,
    pub(crate) ready: Arc<AtomicBool>,
    /// Destinations that hit their rate limit, and until when to leave them out of claims.
    throttled: Mutex<HashMap<String, Instant>>,
    /// Why the dispatcher must stop serving, once a loop found out; `stop` is then cancelled.
    fatal: Mutex<Option<PartitionCountMismatch>>,
    stop: CancellationToken,
}

impl Shared {
    pub(crate) fn new(
        store: Store,
        config: Config,
        ready: Arc<AtomicBool>,
        stop: CancellationToken,
    ) -> Result<Shared, reqwest::Error> {
        let mut routes = HashMap::new();
        for (name, d) in &config.destinations {
            // The config allows at most one request per microsecond, so the period is never 0.
            let limiter = d.rate_limit.and_then(|(n, per)| {
                let gap = per / n.get();
                Quota::with_period(gap).map(|q| (RateLimiter::direct(q.allow_burst(n)), gap))
            });
            routes.insert(
                name.clone(),
                Route {
                    sender: Sender::new(d, config.dispatcher.max_body_bytes)?,
                    slots: Arc::new(Semaphore::new(d.max_in_flight)),
                    limiter,
                },
            );
        }
        let names = config.destinations.keys().cloned().collect();
        let global = Arc::new(Semaphore::new(config.dispatcher.max_in_flight));
        Ok(Shared {
            store,
            routes,
            names,
            global,
            wakes: (0..config.dispatcher.partitions)
                .map(|_| Notify::new())
                .collect(),
            ready,
            throttled: Mutex::default(),
            fatal: Mutex::default(),
            stop,
            config,
        })
    }

    /// Stops every loop: this dispatcher must not serve (see [`PartitionCountMismatch`]).
    fn fail(&self, why: PartitionCountMismatch) {
        if let Ok(mut fatal) = self.fatal.lock() {
            fatal.get_or_insert(why);
        }
        self.stop.cancel();
    }

    /// Why the loops were stopped, if it was not a shutdown.
    pub(crate) fn take_fatal(&self) -> Option<PartitionCountMismatch> {
        self.fatal.lock().ok()?.take()
    }

    /// Wakes every partition loop (they look for work at once).
    pub(crate) fn wake_all(&self) {
        for wake in &self.wakes {
            wake.notify_one();
        }
    }

    pub(crate) fn destination_names(&self) -> &[String] {
        &self.names
    }

    fn db_ok(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    fn db_failed(&self, operation: &'static str, e: &outbox_store::Error) {
        self.ready.store(false, Ordering::Relaxed);
        metrics::counter!(m::DB_ERRORS, "operation" => operation).increment(1);
        tracing::warn!(operation, error = %e, "database call failed; retrying");
    }

    /// Destinations that could start an attempt now: a free slot, not throttled.
    fn open_destinations(&self) -> Vec<String> {
        let now = Instant::now();
        let mut throttled = self.throttled.lock().expect("throttle map");
        throttled.retain(|_, until| *until > now);
        self.routes
            .iter()
            .filter(|(name, r)| r.slots.available_permits() > 0 && !throttled.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// Serves one partition until `shutdown`: standby until the lease is won, then leader until it
/// is lost (and standby again) or shutdown.
pub(crate) async fn serve_partition(
    shared: Arc<Shared>,
    partition: Partition,
    shutdown: CancellationToken,
) {
    let ttl = shared.config.dispatcher.lease_ttl;
    let label = partition.index().to_string();
    while !shutdown.is_cancelled() {
        match Leadership::acquire(&shared.store, partition, ttl).await {
            Ok(Some(leadership)) => {
                shared.db_ok();
                match record_partition_count(&shared, &leadership.lease).await {
                    Ok(()) => {}
                    Err(crate::Error::PartitionCount(e)) => {
                        leadership.release(&shared.store).await;
                        return shared.fail(e);
                    }
                    Err(e) => {
                        if let crate::Error::Store(e) = &e {
                            shared.db_failed("record the partition count", e);
                        }
                        leadership.release(&shared.store).await;
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(ttl / 3) => {}
                        }
                        continue;
                    }
                }
                tracing::info!(partition = partition.index(), token = %leadership.lease.token, "leading partition");
                metrics::gauge!(m::LEADER, "partition" => label.clone()).set(1.0);
                lead(&shared, leadership, &shutdown).await;
                metrics::gauge!(m::LEADER, "partition" => label.clone()).set(0.0);
                continue;
            }
            Ok(None) => {
                shared.db_ok();
                metrics::gauge!(m::LEADER, "partition" => label.clone()).set(0.0);
            }
            Err(e) => shared.db_failed("acquire partition lease", &e),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
    }
}

/// Records on a freshly won partition lease the partition count this dispatcher serves, then
/// checks that no live partition lease was taken with another count (two dispatchers started
/// at once with different counts both find out here, G12).
async fn record_partition_count(shared: &Shared, lease: &Lease) -> Result<(), crate::Error> {
    let count = shared.config.dispatcher.partitions;
    shared.store.lease_set_partitions(lease, count).await?;
    crate::check_partition_count(&shared.store, count).await
}

/// Leads a partition: re-queue what older tokens left in flight, then claim and deliver until
/// the lease is lost or shutdown; then let attempts finish (up to the grace period on
/// shutdown) and release the lease.
async fn lead(shared: &Arc<Shared>, leadership: Leadership, shutdown: &CancellationToken) {
    let lease = leadership.lease.clone();
    let partition = leadership.partition;
    // Nothing is claimed before what older tokens left in flight is back in the queue.
    let mut backoff = Duration::from_millis(100);
    loop {
        match shared.store.op_requeue_abandoned(&lease, partition).await {
            Ok(n) => {
                if n > 0 {
                    metrics::counter!(m::REQUEUED).increment(n);
                    tracing::warn!(
                        partition = partition.index(),
                        requeued = n,
                        "re-queued ops an older dispatcher left in flight (they may have been sent)"
                    );
                }
                break;
            }
            Err(e) => shared.db_failed("requeue abandoned ops", &e),
        }
        tokio::select! {
            () = leadership.lost().cancelled() => return leadership.abandon().await,
            () = shutdown.cancelled() => return leadership.release(&shared.store).await,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    let attempts = TaskTracker::new();
    let (recorder, completions) = mpsc::channel(RECORDER_QUEUE);
    attempts.spawn(record_loop(
        shared.clone(),
        lease.clone(),
        leadership.trust(),
        completions,
    ));
    let stop = leadership.lost().child_token();
    let stop_on_shutdown = {
        let (stop, shutdown) = (stop.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stop.cancel();
        })
    };
    drain(
        shared,
        &lease,
        partition,
        leadership.trust(),
        &attempts,
        &stop,
        &recorder,
    )
    .await;
    drop(recorder);
    stop_on_shutdown.abort();
    attempts.close();
    if shutdown.is_cancelled() {
        let grace = shared.config.dispatcher.shutdown_grace;
        if tokio::time::timeout(grace, attempts.wait()).await.is_err() {
            tracing::warn!(
                partition = partition.index(),
                "shutdown grace ran out with attempts in flight; the next leader re-queues them"
            );
        }
        // Nobody will listen until the next leader asks: spare producers the notifications.
        set_listening(shared, partition, false).await;
        leadership.release(&shared.store).await;
    } else {
        tracing::warn!(
            partition = partition.index(),
            "lost the partition lease; standing by"
        );
        leadership.abandon().await;
    }
}

/// Claims and starts attempts until `stop`.
async fn drain(
    shared: &Arc<Shared>,
    lease: &Lease,
    partition: Partition,
    mut trust: Trust,
    attempts: &TaskTracker,
    stop: &CancellationToken,
    recorder: &Recorder,
) {
    let poll = shared.config.dispatcher.poll_interval;
    let mut listening = false;
    while !stop.is_cancelled() {
        let open = shared.open_destinations();
        let room = shared
            .global
            .available_permits()
            .min(shared.config.dispatcher.claim_batch as usize);
        if open.is_empty() || room == 0 {
            idle(shared, partition, stop, poll).await;
            continue;
        }
        // Everything claimed must be able to finish inside the trusted window.
        let longest = open
            .iter()
            .filter_map(|d| shared.routes.get(d))
            .map(|r| r.sender.destination().timeout)
            .max()
            .unwrap_or_default();
        if !trust.wait_to_cover(longest, stop).await {
            break;
        }
        let claimed = match shared
            .store
            .op_claim(
                lease,
                partition,
                &open,
                room as u32,
                shared.config.dispatcher.max_body_bytes,
            )
            .await
        {
            Ok(c) => {
                shared.db_ok();
                if c.superseded > 0 {
                    metrics::counter!(m::SUPERSEDED).increment(c.superseded);
                }
                for u in c.unreadable {
                    let (shared, recorder) = (shared.clone(), recorder.clone());
                    attempts.spawn(async move { bury(&shared, u, &recorder).await });
                }
                c.ops
            }
            Err(e) => {
                shared.db_failed("claim", &e);
                idle(shared, partition, stop, poll).await;
                continue;
            }
        };
        let full = claimed.len() == room;
        for op in claimed {
            start(shared, lease, op, trust.clone(), attempts, recorder).await;
        }
        // Busy (a full batch): claim again at once, and spare producers the notifications.
        // About to idle: ask for notifications first, then look once more before sleeping, so
        // an enqueue that committed before the request was visible is not missed.
        let want = !full;
        if listening != want && set_listening(shared, partition, want).await {
            listening = want;
            continue;
        }
        if !full {
            let due = match shared.store.op_next_due(partition, &open).await {
                Ok(Some(ms)) => Duration::from_millis(ms.max(0) as u64),
                Ok(None) => poll,
                Err(e) => {
                    shared.db_failed("next due", &e);
                    poll
                }
            };
            idle(shared, partition, stop, due.min(poll)).await;
        }
    }
}

/// Records whether this partition's loop wants notifications; false when that failed.
async fn set_listening(shared: &Shared, partition: Partition, listening: bool) -> bool {
    match shared.store.wakeup_set(partition, listening).await {
        Ok(()) => true,
        Err(e) => {
            shared.db_failed("set wake-up", &e);
            false
        }
    }
}

/// Waits for a wake-up of `partition`'s loop, at most `at_most`.
async fn idle(shared: &Shared, partition: Partition, stop: &CancellationToken, at_most: Duration) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = shared.wakes[partition.index() as usize].notified() => {}
        () = tokio::time::sleep(at_most) => {}
    }
}

/// Starts the attempt of a claimed op, or gives the claim back when its destination has no
/// free slot or budget.
async fn start(
    shared: &Arc<Shared>,
    lease: &Lease,
    op: ClaimedOp,
    trust: Trust,
    attempts: &TaskTracker,
    recorder: &Recorder,
) {
    let Some(route) = shared.routes.get(&op.destination) else {
        // The claim asks only for configured destinations; a row says otherwise: give it back.
        release_claim(shared, lease, &op).await;
        return;
    };
    let permits = (
        shared.global.clone().try_acquire_owned(),
        route.slots.clone().try_acquire_owned(),
    );
    let budget = match &route.limiter {
        Some((limiter, gap)) => limiter.check().map_err(|_| *gap),
        None => Ok(()),
    };
    match (permits, budget) {
        ((Ok(global), Ok(slot)), Ok(())) => {
            let (shared, lease, recorder) = (shared.clone(), lease.clone(), recorder.clone());
            attempts.spawn(async move {
                attempt(&shared, &lease, op, trust, &recorder, (global, slot)).await
            });
        }
        (_, budget) => {
            if let Err(gap) = budget {
                shared
                    .throttled
                    .lock()
                    .expect("throttle map")
                    .insert(op.destination.clone(), Instant::now() + gap);
            }
            release_claim(shared, lease, &op).await;
        }
    }
}

async fn release_claim(shared: &Shared, lease: &Lease, op: &ClaimedOp) {
    metrics::counter!(m::RELEASED_CLAIMS).increment(1);
    if let Err(e) = shared.store.op_release_claim(lease, op.seq).await {
        shared.db_failed("release claim", &e);
    }
}

/// One attempt: send, decide, record; the slots are freed when it returns.
async fn attempt(
    shared: &Shared,
    lease: &Lease,
    op: ClaimedOp,
    trust: Trust,
    recorder: &Recorder,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) {
    let Some(route) = shared.routes.get(&op.destination) else {
        release_claim(shared, lease, &op).await;
        return;
    };
    let destination = route.sender.destination();
    if !trust.covers(destination.timeout) {
        // Never start what could outlast the lease we trust (the claim ran close to the edge).
        release_claim(shared, lease, &op).await;
        return;
    }
    let gauge = metrics::gauge!(m::IN_FLIGHT, "destination" => op.destination.clone());
    gauge.increment(1.0);
    let sent = route.sender.send(&op).await;
    gauge.decrement(1.0);
    // A replayed op's budget counts from its replay (outboxctl replay).
    let age = (op.claimed_at - op.budget_since).unsigned_abs() + sent.duration;
    let decision = retry::decide(
        &destination.retry,
        &sent.result,
        op.budget_attempt.max(1) as u32,
        age,
        jitter(),
    );
    let labels = [("destination", op.destination.clone())];
    if let retry::AttemptResult::Invalid(why) = &sent.result {
        metrics::counter!(m::INVALID_OPS, &labels).increment(1);
        tracing::warn!(op_id = %op.op_id, destination = %op.destination, reason = %why, "not sending an op whose row breaks a rule; it is made dead");
    }
    metrics::histogram!(m::ATTEMPT_DURATION, &labels).record(sent.duration.as_secs_f64());
    metrics::counter!(m::ATTEMPTS, "destination" => op.destination.clone(), "outcome" => decision.outcome.as_str()).increment(1);
    let completion = Completion {
        seq: op.seq,
        op_id: op.op_id,
        attempt: op.attempt,
        started_at: op.claimed_at,
        outcome: decision.outcome,
        http_status: match sent.result {
            retry::AttemptResult::Status { code, .. } => Some(code),
            _ => None,
        },
        error: decision.reason.clone(),
        excerpt: sent.excerpt,
        next: decision.next,
    };
    let (reply, recorded) = oneshot::channel();
    let applied =
        recorder.send((completion, reply)).await.is_ok() && recorded.await.unwrap_or(false);
    if applied {
        match decision.next {
            NextState::Delivered => {
                metrics::counter!(m::DELIVERED, &labels).increment(1);
                metrics::histogram!(m::DELIVERY_LATENCY, &labels).record(age.as_secs_f64());
            }
            NextState::Dead => {
                metrics::counter!(m::DEAD, &labels).increment(1);
                tracing::warn!(op_id = %op.op_id, destination = %op.destination, attempt = op.attempt, reason = ?decision.reason, "op is dead");
            }
            NextState::RetryAfter(delay) => {
                metrics::counter!(m::RETRIES, &labels).increment(1);
                tracing::info!(op_id = %op.op_id, destination = %op.destination, attempt = op.attempt, ?delay, reason = ?decision.reason, "attempt failed; retry scheduled");
            }
        }
    }
    shared.wake_all();
}

/// Makes dead a claimed op whose row could not be read: nothing is sent, the attempt is
/// recorded as failed with what could not be read.
async fn bury(shared: &Shared, u: outbox_store::Unreadable, recorder: &Recorder) {
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
    };
    let (reply, recorded) = oneshot::channel();
    if recorder.send((completion, reply)).await.is_ok() {
        let _ = recorded.await;
    }
    shared.wake_all();
}

/// A completion waiting to be written, and where to say whether it was applied.
type Pending = (Completion, oneshot::Sender<bool>);
/// Where attempts hand their completions to the leader's recorder.
type Recorder = mpsc::Sender<Pending>;
/// How many completions may wait for the recorder.
const RECORDER_QUEUE: usize = 1024;
/// The most completions written in one transaction.
const RECORD_BATCH: usize = 128;

/// Writes completions in batches, one transaction each: whatever has queued up while the
/// previous batch was written goes together. Ends when every attempt task and the claim loop
/// have dropped their senders. See [`record`] for what happens when a batch is refused.
async fn record_loop(
    shared: Arc<Shared>,
    lease: Lease,
    trust: Trust,
    mut queue: mpsc::Receiver<Pending>,
) {
    let mut batch: Vec<Pending> = Vec::with_capacity(RECORD_BATCH);
    while queue.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        let completions: Vec<Completion> = batch.iter().map(|(c, _)| c.clone()).collect();
        let applied = record(&shared, &lease, &trust, &completions).await;
        for ((completion, reply), applied) in batch.drain(..).zip(applied) {
            if applied == Recorded::Discarded {
                metrics::counter!(m::STALE_COMPLETIONS).increment(1);
                tracing::warn!(op_id = %completion.op_id, token = %lease.token, "completion discarded: this dispatcher no longer holds the claim or the partition lease");
            }
            let _ = reply.send(applied == Recorded::Applied);
        }
    }
}

/// What became of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    /// Written.
    Applied,
    /// The database refused it because the claim or the lease moved on (G9).
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
async fn record(
    shared: &Shared,
    lease: &Lease,
    trust: &Trust,
    batch: &[Completion],
) -> Vec<Recorded> {
    let refused = match complete_retrying(shared, lease, trust, batch).await {
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
            complete_retrying(shared, lease, trust, std::slice::from_ref(c)).await
        };
        let outcome = match alone {
            Ok(applied) => applied[0],
            Err(Unwritten::LeaseLost) => Recorded::Dropped,
            Err(Unwritten::Refused(_)) => {
                match complete_retrying(shared, lease, trust, &[c.without_details()]).await {
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

/// One completion statement, retried with backoff while the failure may pass and the lease
/// is still trusted.
async fn complete_retrying(
    shared: &Shared,
    lease: &Lease,
    trust: &Trust,
    completions: &[Completion],
) -> Result<Vec<Recorded>, Unwritten> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match shared.store.op_complete_batch(lease, completions).await {
            Ok(applied) => {
                shared.db_ok();
                return Ok(applied
                    .into_iter()
                    .map(|a| {
                        if a {
                            Recorded::Applied
                        } else {
                            Recorded::Discarded
                        }
                    })
                    .collect());
            }
            Err(outbox_store::Error::Store(e)) if e.is_retryable() => {
                shared.db_failed("complete", &outbox_store::Error::Store(e));
                if trust.is_lost() {
                    tracing::warn!(
                        count = completions.len(),
                        "could not record attempts before losing the lease; the next leader re-queues their ops"
                    );
                    return Err(Unwritten::LeaseLost);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                metrics::counter!(m::DB_ERRORS, "operation" => "complete").increment(1);
                return Err(Unwritten::Refused(e.to_string()));
            }
        }
    }
}

/// A number in [0, 1) for full jitter, from the operating system's randomness (via UUID v4).
fn jitter() -> f64 {
    // The low 53 bits of a v4 UUID are all random (version and variant bits sit above them).
    (uuid::Uuid::new_v4().as_u128() & ((1u128 << 53) - 1)) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12, item 7: the largest values the config accepts build the daemon's shared
    /// state without panicking (before, a semaphore larger than tokio's limit, or a rate
    /// limit whose period rounded to zero, panicked here).
    #[tokio::test]
    async fn the_largest_accepted_limits_do_not_panic() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[database]\nurl = \"sqlite://{}\"\n[dispatcher]\nmax_in_flight = 65536\nclaim_batch = 1000\n\
             [destinations.b]\nbase_url = \"http://127.0.0.1:1\"\nmax_in_flight = 65536\nrate_limit = \"1000000/s\"\n\
             [destinations.c]\nbase_url = \"http://127.0.0.1:1\"\nrate_limit = \"1/h\"\n",
            dir.path().join("o.db").display()
        );
        let config = Config::load(Some(&text), &HashMap::new()).unwrap();
        let store = outbox_store::Store::connect(config.database_url.expose(), Default::default())
            .await
            .unwrap();
        let shared = Shared::new(store, config, Arc::default(), CancellationToken::new()).unwrap();
        assert_eq!(shared.global.available_permits(), 65536);
        assert!(shared.routes["b"].limiter.is_some() && shared.routes["c"].limiter.is_some());
    }

    #[test]
    fn jitter_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = super::jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
