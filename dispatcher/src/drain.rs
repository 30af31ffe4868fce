//! The loop of one partition: standby until its lease is won, then a leader's term (wait,
//! claim a batch, deliver, record the outcome) until step-down, then standby again. Every
//! database call of a term is the [`Leader`]'s (`leader.rs`); this file decides when.
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

use outbox_store::Partition;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::handles::Handles;
use crate::leader::{self, Leader, StepDown, Term};
use crate::membership::Share;

/// Serves one partition until `shutdown`: standby until the lease is won, then leader until it
/// is lost (and standby again) or shutdown. `share` is this process's share of the partitions.
pub(crate) async fn serve_partition(
    h: Handles,
    mut share: watch::Receiver<Share>,
    partition: Partition,
    shutdown: CancellationToken,
) {
    let ttl = h.settings.lease_ttl;
    // Until the membership is first read, every partition counts as this process's share: a
    // newcomer would try for all of them, take those free for a moment (mid-handover) and
    // hand them back at once. So the first read is waited for, up to a lease period (if the
    // membership cannot be read, every partition is tried, the lease deciding).
    tokio::select! {
        () = shutdown.cancelled() => return,
        _ = share.wait_for(Option::is_some) => {}
        () = tokio::time::sleep(ttl) => {}
    }
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
        let term = Leader::try_lead(&h, partition, &shutdown).await;
        let term_was_held = matches!(term, Term::Held);
        match term {
            Term::Won(leader) => {
                lead(leader, share.clone(), &shutdown).await;
                continue;
            }
            Term::Ended => continue,
            Term::Held | Term::Standby => leader::show_leading(partition, false),
        }
        // A partition of this process's share that another holds is being handed over (the
        // other saw the membership change) or its holder is gone (its lease lapses): asked for
        // again every tenth of the TTL, so that a join or a crash settles within a lease
        // period or so. A database failure waits the usual third.
        let again = match term_was_held {
            true => (ttl / 10).max(std::time::Duration::from_millis(100)),
            false => ttl / 3,
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(again) => {}
        }
    }
}

/// One term: claim and deliver until the lease is lost, the partition leaves this process's
/// share (hand it over) or shutdown; then step down.
async fn lead(
    leader: Box<Leader>,
    mut share: watch::Receiver<Share>,
    shutdown: &CancellationToken,
) {
    let partition = leader.partition();
    let stop = leader.lost().child_token();
    // When the partition leaves this process's share (an instance joined), stop claiming and
    // hand it over gracefully.
    let handover = CancellationToken::new();
    let hand_over_when_asked = {
        let (stop, handover) = (stop.clone(), handover.clone());
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
    drain(&leader, &stop).await;
    stop_on_shutdown.abort();
    hand_over_when_asked.abort();
    let how = if shutdown.is_cancelled() {
        StepDown::Shutdown
    } else if handover.is_cancelled() && !leader.lost().is_cancelled() {
        StepDown::Handover
    } else {
        StepDown::Lost
    };
    leader.step_down(how).await;
}

/// Whether `partition` is in this process's share; every partition while the share is unknown.
fn in_share(share: &Share, partition: Partition) -> bool {
    share
        .as_ref()
        .is_none_or(|s| s.get(partition.index() as usize).copied().unwrap_or(true))
}

/// Destinations a claim found nothing more due of, left out of claims until new due ops may
/// have come (`Wakes::work_seen` moved: an enqueue notification, a retry scheduled, a hold
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
    fn over(&self, work_seen: u64, woken: bool) -> bool {
        self.work != work_seen || Instant::now() >= self.until || (self.any_wake && woken)
    }

    fn holds(&self, destination: &str) -> bool {
        self.names.iter().any(|n| n == destination)
    }
}

/// Claims and starts attempts until `stop`.
async fn drain(leader: &Leader, stop: &CancellationToken) {
    let poll = leader.settings().poll_interval;
    let mut trust = leader.trust();
    let mut listening = false;
    let mut drained: Option<Drained> = None;
    let mut woken = false;
    while !stop.is_cancelled() {
        // A held destination's probe may be due: one op of it, if this partition has one.
        leader.probe().await;
        if drained
            .as_ref()
            .is_some_and(|d| d.over(leader.work_seen(), woken))
        {
            drained = None;
        }
        woken = false;
        // Idle with nothing left to claim: ask for notifications first, then look once more
        // (everything) before sleeping, so an enqueue that committed before the request was
        // visible is not missed.
        let want = drained.is_some();
        if want && !listening && leader.listen(true).await {
            listening = true;
            drained = None;
            continue;
        }
        let reserved = leader.reserve(|d| drained.as_ref().is_some_and(|x| x.holds(d)));
        if reserved.is_empty() {
            let wait = drained
                .as_ref()
                .map_or(poll, |d| d.until.saturating_duration_since(Instant::now()));
            woken = leader.idle(stop, wait.min(poll)).await;
            continue;
        }
        // Everything claimed must be able to finish inside the trusted window.
        let destinations = reserved.destinations();
        let longest = leader.longest_timeout(&destinations);
        if !trust.covers(longest) {
            drop(reserved);
            if !trust.wait_to_cover(longest, stop).await {
                break;
            }
            continue;
        }
        let work = leader.work_seen();
        let Some(exhausted) = leader.claim(reserved).await else {
            woken = leader.idle(stop, poll).await;
            continue;
        };
        if !exhausted {
            // Busy: claim again at once, and spare producers the notifications.
            if listening && drained.is_none() && leader.listen(false).await {
                listening = false;
            }
            continue;
        }
        let due = leader.next_due(&destinations).await;
        // Due, yet not claimed: held back by something a wake-up reports.
        let any_wake = due == Some(std::time::Duration::ZERO);
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
