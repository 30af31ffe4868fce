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
//! timeout fits the window the leader still trusts its lease; a claim takes no more of a
//! destination's ops than it can start, its slots reserved before the claim is sent (issue
//! 34). Wake-ups: a notification (PostgreSQL LISTEN, or a finished attempt), the next op's due
//! time, or `poll_interval`; a destination found with nothing due is asked for again only
//! after new work may have come or its next op is due.
//! On pause the loop stops with the process and the lease lapses; on resume its completions
//! are discarded. On crash the ops it had in flight are re-queued by the next leader (they may
//! have been sent: at-least-once, same idempotency key). On restart it re-queues what an older
//! token left in flight before claiming anything.
//!
//! Traces (with `[telemetry]` on, `telemetry`): a claim that took something is a span; each
//! attempt is an HTTP client span below the producer's, linked to its claim, whose context is
//! the `traceparent` the destination gets; an op made dead leaves an event on it saying why.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::SpanContext;
use outbox_store::{ClaimRoom, Claimed, ClaimedOp, Lease, Partition};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::health::HoldsSeen;
use crate::metrics as m;
use crate::partition::{Leadership, Trust};
use crate::record::{self, Recorder};
use crate::routes::{Permits, Shared};
use crate::telemetry;

/// Serves one partition until `shutdown`: standby until the lease is won, then leader until it
/// is lost (and standby again) or shutdown.
pub(crate) async fn serve_partition(
    shared: Arc<Shared>,
    partition: Partition,
    shutdown: CancellationToken,
) {
    let ttl = shared.config.dispatcher.lease_ttl;
    let label = partition.index().to_string();
    let mut share = shared.watch_share();
    while !shutdown.is_cancelled() {
        // Only partitions of this process's fair share are tried for; another live instance
        // takes the others (docs/scaling.md). The share changes when instances come and go.
        if !in_share(&share.borrow_and_update(), partition) {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = share.changed() => {}
                () = tokio::time::sleep(ttl / 3) => {}
            }
            continue;
        }
        match Leadership::acquire(&shared.store, partition, ttl).await {
            Ok(Some(leadership)) => {
                shared.db_ok();
                match record_partition_count(&shared, &leadership.lease).await {
                    Ok(true) => {}
                    outcome => {
                        if let Err(e) = &outcome {
                            shared.db_failed(m::DbCall::RecordPartitionCount, e);
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
                let leading = shared.leading(partition);
                lead(&shared, leadership, &shutdown).await;
                drop(leading);
                metrics::gauge!(m::LEADER, "partition" => label.clone()).set(0.0);
                continue;
            }
            Ok(None) => {
                shared.db_ok();
                metrics::gauge!(m::LEADER, "partition" => label.clone()).set(0.0);
            }
            Err(e) => shared.db_failed(m::DbCall::AcquireLease, &e),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
    }
}

/// Records on a freshly won partition lease the partition count this dispatcher serves, then
/// checks that no live partition lease was taken with another count; `false` when one was:
/// after `outboxctl partitions set`, dispatchers of the old count are stepping down (or this
/// one is, and its membership loop will soon say so), and two counts never serve at once, so
/// the lease is given back and tried for again later (G12).
async fn record_partition_count(
    shared: &Shared,
    lease: &Lease,
) -> Result<bool, outbox_store::Error> {
    let count = shared.config.dispatcher.partitions;
    shared.store.lease_set_partitions(lease, count).await?;
    let others = shared.store.lease_partition_conflicts(count).await?;
    if let Some((lease, theirs)) = others.first() {
        tracing::info!(
            partitions = count,
            other = %lease,
            other_partitions = theirs,
            "a partition lease of another count is live: waiting for its dispatcher to step down"
        );
    }
    Ok(others.is_empty())
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
            Err(e) => shared.db_failed(m::DbCall::RequeueAbandoned, &e),
        }
        tokio::select! {
            () = leadership.lost().cancelled() => return leadership.abandon().await,
            () = shutdown.cancelled() => return leadership.release(&shared.store).await,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    let attempts = TaskTracker::new();
    let recorder = record::spawn(&attempts, shared.clone(), lease.clone(), leadership.trust());
    let stop = leadership.lost().child_token();
    // When the partition leaves this process's share (an instance joined), stop claiming and
    // hand it over gracefully.
    let handover = CancellationToken::new();
    let hand_over_when_asked = {
        let (mut share, stop, handover) = (shared.watch_share(), stop.clone(), handover.clone());
        tokio::spawn(async move {
            loop {
                if !in_share(&share.borrow_and_update(), partition) {
                    handover.cancel();
                    stop.cancel();
                    return;
                }
                if share.changed().await.is_err() {
                    return;
                }
            }
        })
    };
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
    hand_over_when_asked.abort();
    attempts.close();
    if shutdown.is_cancelled() || (handover.is_cancelled() && !leadership.lost().is_cancelled()) {
        // Shutdown: up to the grace period. Handover: every attempt ends within its timeout,
        // which fits the lease's trusted window, so the next leader finds nothing in flight.
        let grace = if shutdown.is_cancelled() {
            shared.config.dispatcher.shutdown_grace
        } else {
            tracing::info!(
                partition = partition.index(),
                "handing the partition over to the instance whose share it is now"
            );
            crate::partition::longest_attempt(shared.config.dispatcher.lease_ttl)
        };
        // This partition's part of the destinations' limits goes first, and the attempts
        // still running here must fit what is left before the lease is released: the next
        // leader's part never adds to them (limits.rs).
        shared.stop_leading(partition);
        let settled = async {
            attempts.wait().await;
            shared.fit_limits().await;
        };
        if tokio::time::timeout(grace, settled).await.is_err() {
            tracing::warn!(
                partition = partition.index(),
                "attempts still in flight when the partition was released; the next leader re-queues them"
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

/// Whether `partition` is in this process's share; every partition while the share is unknown.
fn in_share(share: &Option<std::sync::Arc<Vec<bool>>>, partition: Partition) -> bool {
    share
        .as_ref()
        .is_none_or(|s| s.get(partition.index() as usize).copied().unwrap_or(true))
}

/// Destinations a claim found nothing more due of, left out of claims until new due ops may
/// have come (`Shared::work_seen` moved: an enqueue notification, a retry scheduled, a hold
/// ended) or the next of their ops is due; with `any_wake`, until any wake-up at all (their
/// due ops wait for something else: an op ahead of them in an order key, a row another
/// transaction holds), so a loop neither spins on them nor asks for them again at every slot
/// another destination frees (issue 34).
#[derive(Debug)]
struct Drained {
    names: Vec<String>,
    work: u64,
    until: Instant,
    any_wake: bool,
}

impl Drained {
    fn over(&self, shared: &Shared, woken: bool) -> bool {
        self.work != shared.work_seen() || Instant::now() >= self.until || (self.any_wake && woken)
    }

    fn holds(&self, destination: &str) -> bool {
        self.names.iter().any(|n| n == destination)
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
    let mut drained: Option<Drained> = None;
    let mut woken = false;
    while !stop.is_cancelled() {
        let room = shared.room();
        // A held destination's probe may be due: one op of it, if this partition has one.
        for destination in shared.probe_destinations() {
            if room > 0 && trust.covers(shared.longest_timeout(std::slice::from_ref(&destination)))
            {
                probe(
                    shared,
                    lease,
                    partition,
                    &destination,
                    &trust,
                    attempts,
                    recorder,
                )
                .await;
            }
        }
        if drained.as_ref().is_some_and(|d| d.over(shared, woken)) {
            drained = None;
        }
        woken = false;
        // Idle with nothing left to claim: ask for notifications first, then look once more
        // (everything) before sleeping, so an enqueue that committed before the request was
        // visible is not missed.
        let want = drained.is_some();
        if want && !listening && set_listening(shared, partition, true).await {
            listening = true;
            drained = None;
            continue;
        }
        let mut reserved = shared.reserve(|d| drained.as_ref().is_some_and(|x| x.holds(d)));
        if reserved.is_empty() {
            let wait = drained
                .as_ref()
                .map_or(poll, |d| d.until.saturating_duration_since(Instant::now()));
            woken = idle(shared, partition, stop, wait.min(poll)).await;
            continue;
        }
        // Everything claimed must be able to finish inside the trusted window.
        let destinations = reserved.destinations();
        let longest = shared.longest_timeout(&destinations);
        if !trust.covers(longest) {
            drop(reserved);
            if !trust.wait_to_cover(longest, stop).await {
                break;
            }
            continue;
        }
        let (work, seen, total) = (
            shared.work_seen(),
            shared.health.holds_seen(),
            reserved.total(),
        );
        let rooms = reserved.rooms();
        let Some((claimed, trace)) = claim(shared, lease, partition, &rooms, total, false).await
        else {
            drop(reserved);
            woken = idle(shared, partition, stop, poll).await;
            continue;
        };
        // When no destination got all its room and the claim took fewer than it could in all,
        // its scan saw every due op of these destinations that it could take: none is left.
        let filled = rooms.iter().any(|r| {
            claimed
                .ops
                .iter()
                .filter(|op| op.destination == r.destination)
                .count()
                >= r.ops as usize
        });
        let exhausted = !filled && claimed.unreadable.is_empty() && claimed.ops.len() < total;
        for u in claimed.unreadable {
            let (shared, recorder) = (shared.clone(), recorder.clone());
            attempts.spawn(async move { record::bury(&shared, u, &recorder).await });
        }
        for op in claimed.ops {
            let permits = reserved.take(&op.destination);
            let (trust, trace) = (trust.clone(), trace.clone());
            start(
                shared, lease, op, permits, seen, trust, attempts, recorder, trace,
            )
            .await;
        }
        drop(reserved);
        if !exhausted {
            // Busy: claim again at once, and spare producers the notifications.
            if listening && drained.is_none() && set_listening(shared, partition, false).await {
                listening = false;
            }
            continue;
        }
        let due = next_due(shared, partition, &destinations, poll).await;
        // Due, yet not claimed: held back by something a wake-up reports.
        let any_wake = due == Some(Duration::ZERO);
        let until = Instant::now() + due.filter(|d| !d.is_zero()).unwrap_or(poll);
        match &mut drained {
            Some(d) if d.work == work => {
                d.names.extend(destinations);
                d.until = d.until.min(until);
                d.any_wake |= any_wake;
            }
            _ => {
                drained = Some(Drained {
                    names: destinations,
                    work,
                    until,
                    any_wake,
                });
            }
        }
    }
}

/// Claims up to `total` ops, of each destination at most its room, with the claim's span when
/// traces are on and it took something; `None` when the database call failed. The claim
/// leaves out what the database holds (a pause; a breaker that is not closed, unless this is
/// its `probe`), whatever this process's view of the destinations says (issue 28).
async fn claim(
    shared: &Shared,
    lease: &Lease,
    partition: Partition,
    rooms: &[ClaimRoom],
    total: usize,
    probe: bool,
) -> Option<(Claimed, Option<SpanContext>)> {
    let max_body_bytes = shared.config.dispatcher.max_body_bytes;
    let breakers: &[String] = if probe { &[] } else { shared.breakers() };
    let started = SystemTime::now();
    match shared
        .store
        .op_claim(
            lease,
            partition,
            rooms,
            breakers,
            total as u32,
            max_body_bytes,
        )
        .await
    {
        Ok(c) => {
            shared.db_ok();
            if c.superseded > 0 {
                metrics::counter!(m::SUPERSEDED).increment(c.superseded);
            }
            let trace = shared.config.telemetry.is_some();
            let span = trace
                .then(|| telemetry::claim_span(lease, partition, started, &c))
                .flatten();
            Some((c, span))
        }
        Err(e) => {
            shared.db_failed(m::DbCall::Claim, &e);
            None
        }
    }
}

/// How long until the next op of `destinations` is due (zero: due now), at most `poll`;
/// `None` when none is pending.
async fn next_due(
    shared: &Shared,
    partition: Partition,
    destinations: &[String],
    poll: Duration,
) -> Option<Duration> {
    match shared
        .store
        .op_next_due(partition, destinations, shared.breakers())
        .await
    {
        Ok(Some(ms)) => Some(Duration::from_millis(ms.max(0) as u64).min(poll)),
        Ok(None) => None,
        Err(e) => {
            shared.db_failed(m::DbCall::NextDue, &e);
            Some(poll)
        }
    }
}

/// Records whether this partition's loop wants notifications; false when that failed.
async fn set_listening(shared: &Shared, partition: Partition, listening: bool) -> bool {
    match shared.store.wakeup_set(partition, listening).await {
        Ok(()) => true,
        Err(e) => {
            shared.db_failed(m::DbCall::SetWakeUp, &e);
            false
        }
    }
}

/// Waits for a wake-up of `partition`'s loop, at most `at_most`; true when woken.
async fn idle(
    shared: &Shared,
    partition: Partition,
    stop: &CancellationToken,
    at_most: Duration,
) -> bool {
    tokio::select! {
        () = stop.cancelled() => false,
        () = shared.woken(partition) => true,
        () = tokio::time::sleep(at_most) => false,
    }
}

/// Starts the attempt of a claimed op with the `permits` reserved for it (`claim`: the claim's
/// span), or gives the claim back when it has none or its destination became held by this
/// process after `seen` (see below).
#[allow(clippy::too_many_arguments)]
async fn start(
    shared: &Arc<Shared>,
    lease: &Lease,
    op: ClaimedOp,
    permits: Option<Permits>,
    seen: HoldsSeen,
    trust: Trust,
    attempts: &TaskTracker,
    recorder: &Recorder,
    claim: Option<SpanContext>,
) {
    let Some(permits) = permits else {
        release_claim(shared, lease, &op).await;
        return;
    };
    // Whether the destination is held was the claim's to decide, from the database: this
    // process's view may be older (issue 28). Only a hold this process applied after the
    // claim was sent (its last failure opened the breaker while the claim ran, say) gives the
    // op back (issue 34). The slots were taken before the claim was sent, and a breaker
    // destination's slot is freed only once its outcome is applied, so a hold that freed the
    // slot reserved here is already counted in `seen` and was seen by the claim.
    if shared
        .health
        .held_after(&op.destination, shared.has_breaker(&op.destination), seen)
    {
        drop(permits);
        release_claim(shared, lease, &op).await;
        return;
    }
    let (shared, lease, recorder) = (shared.clone(), lease.clone(), recorder.clone());
    attempts.spawn(async move {
        crate::attempt::run(&shared, &lease, op, trust, &recorder, permits, claim).await
    });
}

/// Tries `destination`'s probe in this partition: claims one of its ops here, takes a slot,
/// then asks the database for the probe (one caller of all instances gets it) and sends the op
/// when this one did; otherwise the claim is given back unattempted.
async fn probe(
    shared: &Arc<Shared>,
    lease: &Lease,
    partition: Partition,
    destination: &str,
    trust: &Trust,
    attempts: &TaskTracker,
    recorder: &Recorder,
) {
    let Some(policy) = shared
        .config
        .destinations
        .get(destination)
        .and_then(|d| d.breaker)
    else {
        return;
    };
    let one = [ClaimRoom::new(destination, 1)];
    let Some((claimed, trace)) = claim(shared, lease, partition, &one, 1, true).await else {
        return;
    };
    for u in claimed.unreadable {
        let (shared, recorder) = (shared.clone(), recorder.clone());
        attempts.spawn(async move { record::bury(&shared, u, &recorder).await });
    }
    let Some(op) = claimed.ops.into_iter().next() else {
        return;
    };
    let Some(permits) = shared.admit(&op.destination) else {
        release_claim(shared, lease, &op).await;
        return;
    };
    match shared
        .store
        .destination_probe_take(destination, &policy)
        .await
    {
        Ok(Some(t)) => {
            shared.health.apply(&t);
            let (shared, lease, recorder) = (shared.clone(), lease.clone(), recorder.clone());
            let trust = trust.clone();
            attempts.spawn(async move {
                crate::attempt::run(&shared, &lease, op, trust, &recorder, permits, trace).await
            });
        }
        Ok(None) => release_claim(shared, lease, &op).await,
        Err(e) => {
            shared.db_failed(m::DbCall::DestinationHealth, &e);
            release_claim(shared, lease, &op).await;
        }
    }
}

/// Gives back the claim of `op`, never attempted (counted).
pub(crate) async fn release_claim(shared: &Shared, lease: &Lease, op: &ClaimedOp) {
    metrics::counter!(m::RELEASED_CLAIMS).increment(1);
    if let Err(e) = shared.store.op_release_claim(lease, op.seq).await {
        shared.db_failed(m::DbCall::ReleaseClaim, &e);
    }
}
