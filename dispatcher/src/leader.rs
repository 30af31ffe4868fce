//! One leader's term of one partition: a [`Leader`] is made when the partition lease is won
//! and consumed when it steps down, so a new term is a new value. It holds what the term
//! needs (its partition, lease and trusted window, the store, the routes' admission, the
//! health view, its recorder and its attempts) and does every database call of the term: the
//! partition count on the won lease, the re-queue of what older tokens left in flight, the
//! claim, the breaker's probe, the release of a claim, the next due time, the wish for
//! notifications, the release of the lease. `drain.rs` decides when.
//!
//! Invariants kept here: every claim, release, re-queue and partition-count write carries the
//! term's one lease (G9, G12); nothing is claimed before the re-queue; every claimed op starts
//! through [`Leader::start`], its slots reserved before the claim was sent or, claimed ahead
//! of them (`dispatcher.claim_ahead`), once they free (`held.rs`), or its claim is given back;
//! step-down gives back what is held, stops listening and then releases the lease (or abandons
//! a lost one, and with it what is held).

use std::time::{Duration, SystemTime};

use backon::Retryable as _;
use opentelemetry::trace::SpanContext;
use outbox_store::{ClaimRoom, ClaimedOp, Lease, Partition, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::attempt::{self, Context};
use crate::handles::{Handles, Settings};
use crate::held::Held;
use crate::metrics as m;
use crate::partition::{Leadership, Trust};
use crate::record::{self, Writer};
use crate::routes::{Leading, Permits, Reservation};
use crate::status::DbStatus;
use crate::telemetry;

/// What came of trying for a partition's lease ([`Leader::try_lead`]).
#[derive(Debug)]
pub(crate) enum Term {
    /// Won: the term has begun.
    Won(Box<Leader>),
    /// Another dispatcher holds the lease. When the partition is in this process's share, that
    /// one is handing it over or gone: try again soon.
    Held,
    /// Not led: the database failed, or a live lease of another partition count stands in the
    /// way. Try again later.
    Standby,
    /// Won and given back before the term began (the lease was lost, or shutdown came, during
    /// the re-queue). Try again at once.
    Ended,
}

/// How a term ends ([`Leader::step_down`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepDown {
    /// The process stops: attempts get up to `shutdown_grace`, then the lease is released.
    Shutdown,
    /// The partition left this process's share: attempts end within their timeouts, which
    /// fit the trusted window, then the lease is released for the instance whose share it is.
    Handover,
    /// The lease can no longer be trusted: it is abandoned, not released.
    Lost,
}

/// One term of one partition's leadership.
#[derive(Debug)]
pub(crate) struct Leader {
    leadership: Leadership,
    h: Handles,
    attempts: TaskTracker,
    /// What each attempt takes along, the term's trusted window and recorder among it.
    cx: Context,
    /// Counts this partition in the routes' limits while the term lasts.
    leading: Leading,
    /// What the term's claims took beyond the free slots, waiting for them.
    held: Held,
}

impl Leader {
    /// Tries for `partition`'s lease; once won, records the partition count on it and
    /// re-queues what older tokens left in flight before the term begins (no claim comes
    /// before that).
    pub(crate) async fn try_lead(
        h: &Handles,
        partition: Partition,
        shutdown: &CancellationToken,
    ) -> Term {
        let leadership = match Leadership::acquire(&h.store, partition, h.settings.lease_ttl).await
        {
            Ok(Some(leadership)) => leadership,
            Ok(None) => {
                h.db.ok();
                return Term::Held;
            }
            Err(e) => {
                h.db.failed(m::DbCall::AcquireLease, &e);
                return Term::Standby;
            }
        };
        h.db.ok();
        match record_partition_count(h, &leadership.lease).await {
            Ok(true) => {}
            outcome => {
                if let Err(e) = &outcome {
                    h.db.failed(m::DbCall::RecordPartitionCount, e);
                }
                leadership.release(&h.store).await;
                return Term::Standby;
            }
        }
        tracing::info!(partition = partition.index(), token = %leadership.lease.token, "leading partition");
        show_leading(partition, true);
        let leading = h.routes.leading(partition);
        if !requeue_abandoned(h, &leadership, shutdown).await {
            drop(leading);
            show_leading(partition, false);
            if shutdown.is_cancelled() && !leadership.lost().is_cancelled() {
                leadership.release(&h.store).await;
            } else {
                leadership.abandon().await;
            }
            return Term::Ended;
        }
        let attempts = TaskTracker::new();
        let trust = leadership.trust();
        let recorder = record::spawn(
            &attempts,
            Writer {
                store: h.store.clone(),
                db: h.db.clone(),
                routes: h.routes.clone(),
                lease: leadership.lease.clone(),
                trust: trust.clone(),
                traces: h.settings.traces,
            },
        );
        let cx = Context {
            routes: h.routes.clone(),
            health: h.health.clone(),
            wakes: h.wakes.clone(),
            tally: h.tally.clone(),
            trust,
            recorder,
            traces: h.settings.traces,
        };
        Term::Won(Box::new(Leader {
            leadership,
            h: h.clone(),
            attempts,
            cx,
            leading,
            held: Held::default(),
        }))
    }

    /// The partition led.
    pub(crate) fn partition(&self) -> Partition {
        self.leadership.partition
    }

    /// The settings of the term.
    pub(crate) fn settings(&self) -> Settings {
        self.h.settings
    }

    /// Cancelled once the lease can no longer be trusted.
    pub(crate) fn lost(&self) -> &CancellationToken {
        self.leadership.lost()
    }

    /// The term's trusted window.
    pub(crate) fn trust(&self) -> Trust {
        self.cx.trust.clone()
    }

    /// How many wake-ups for new due ops there were so far ([`Wakes::work_seen`]).
    pub(crate) fn work_seen(&self) -> u64 {
        self.h.wakes.work_seen()
    }

    /// Reserves what the next claim may take, leaving out `skipped` destinations unless ops
    /// of theirs are held here, which are worth starting at every free slot
    /// ([`Routes::reserve`]).
    pub(crate) fn reserve(&self, skipped: impl Fn(&str) -> bool) -> Reservation<'_> {
        let held = &self.held;
        self.h
            .routes
            .reserve(|d| skipped(d) && !held.has(d), |d| held.has(d))
    }

    /// The longest timeout among `destinations`: what a claim for them must leave time for.
    pub(crate) fn longest_timeout(&self, destinations: &[String]) -> Duration {
        self.h.routes.longest_timeout(destinations)
    }

    /// Starts the ops held from earlier claims that `reserved` has slots for, then claims what
    /// it still has room for of destinations with none held, with up to `claim_ahead` more (at
    /// most `claim_batch` in all, of each destination at most [`Routes::ahead_room`]); starts
    /// each op it took that a slot is reserved for and holds the others. `None` when the
    /// database call failed, otherwise whether the claim left nothing more of these
    /// destinations that it could take (it took less than its room of every one of them, and
    /// less than its room in all, and every row it took was readable); `Some(false)` when
    /// there was no room left to claim for.
    pub(crate) async fn claim(&self, mut reserved: Reservation<'_>) -> Option<bool> {
        self.start_held(&mut reserved).await;
        // Read before the claim is sent: a hold this process applies while it runs gives the
        // ops of its destination back (below).
        let seen = self.h.health.holds_seen();
        let mut rooms = reserved.rooms();
        rooms.retain(|r| r.ops > 0 && !self.held.has(&r.destination));
        let room: usize = rooms.iter().map(|r| r.ops as usize).sum();
        if room == 0 {
            return Some(false);
        }
        let ahead =
            (self.h.settings.claim_ahead).min(self.h.routes.claim_batch().saturating_sub(room));
        let mut extra = 0;
        for r in &mut rooms {
            let more = ahead.min(self.h.routes.ahead_room(&r.destination));
            r.ops = r.ops.saturating_add(more as u32);
            extra += more;
        }
        let total = room + ahead.min(extra);
        let taken = self.take(&rooms, total, false).await?;
        let filled = rooms.iter().any(|r| {
            taken
                .ops
                .iter()
                .filter(|op| op.destination == r.destination)
                .count()
                >= r.ops as usize
        });
        let exhausted = !filled && taken.unreadable == 0 && taken.ops.len() < total;
        for op in taken.ops {
            // Whether the destination is held was the claim's to decide, from the database:
            // this process's view may be older (issue 28). Only a hold this process applied
            // after the claim was sent (its last failure opened the breaker while the claim
            // ran, say) gives the op back (issue 34). The slots were taken before the claim
            // was sent, and a breaker destination's slot is freed only once its outcome is
            // applied, so a hold that freed the slot reserved here is already counted in
            // `seen` and was seen by the claim.
            if self.h.health.held_after(&op.destination, seen) {
                self.release(&op).await;
                continue;
            }
            match reserved.take(&op.destination) {
                Some(permits) => self.start(op, Some(permits), taken.trace.clone()).await,
                None => self.held.push(op, taken.trace.clone()),
            }
        }
        Some(exhausted)
    }

    /// Starts the held ops that `reserved` has slots for, oldest claimed first, taking their
    /// slots from it. The ops of a destination held now (paused, its breaker not closed, as
    /// this process last saw it) are given back instead: the next claim that may take them
    /// decides again, from the database.
    async fn start_held(&self, reserved: &mut Reservation<'_>) {
        for destination in reserved.destinations() {
            if !self.held.has(&destination) {
                continue;
            }
            if self.h.health.held_now(&destination) {
                for op in self.held.take_all(&destination) {
                    self.release(&op).await;
                }
                continue;
            }
            for (op, claim) in self.held.take(&destination, reserved.left(&destination)) {
                let permits = reserved.take(&op.destination);
                self.start(op, permits, claim).await;
            }
        }
    }

    /// Tries the probe of every held destination whose probe may be due, when an attempt to it
    /// fits the trusted window: one op of it, if this partition has one and a slot is free
    /// (`probe_one` reserves it first).
    pub(crate) async fn probe(&self) {
        for destination in self.h.health.probes_due() {
            let timeout = self
                .h
                .routes
                .longest_timeout(std::slice::from_ref(&destination));
            if self.cx.trust.covers(timeout) {
                self.probe_one(&destination).await;
            }
        }
    }

    /// `destination`'s probe in this partition: reserves one attempt's slots, claims one of
    /// its ops here, then asks the database for the probe (one caller of all instances gets
    /// it) and starts the op when this one did; otherwise the claim is given back unattempted.
    async fn probe_one(&self, destination: &str) {
        let mut reserved = self.h.routes.reserve_one(destination);
        if reserved.is_empty() {
            return;
        }
        let Some(taken) = self.take(&reserved.rooms(), 1, true).await else {
            return;
        };
        let Some(op) = taken.ops.into_iter().next() else {
            return;
        };
        let permits = reserved.take(&op.destination);
        drop(reserved);
        if self.h.health.take_probe(destination).await {
            self.start(op, permits, taken.trace).await;
        } else {
            self.release(&op).await;
        }
    }

    /// Claims up to `total` ops, of each destination at most its room, with the claim's span
    /// when traces are on and it took something; ops whose rows cannot be read are made dead
    /// here. `None` when the database call failed. The claim leaves out what the database
    /// holds (a pause; a breaker that is not closed, unless this is its `probe`), whatever
    /// this process's view of the destinations says (issue 28).
    async fn take(&self, rooms: &[ClaimRoom], total: usize, probe: bool) -> Option<Taken> {
        let breakers: &[String] = if probe { &[] } else { self.h.routes.breakers() };
        let lease = &self.leadership.lease;
        let partition = self.partition();
        let started = SystemTime::now();
        let claimed = match self
            .h
            .store
            .op_claim(
                lease,
                partition,
                rooms,
                breakers,
                total as u32,
                self.h.settings.max_body_bytes,
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.h.db.failed(m::DbCall::Claim, &e);
                return None;
            }
        };
        self.h.db.ok();
        if claimed.superseded > 0 {
            metrics::counter!(m::SUPERSEDED).increment(claimed.superseded);
        }
        let trace = self
            .h
            .settings
            .traces
            .then(|| telemetry::claim_span(lease, partition, started, &claimed))
            .flatten();
        let unreadable = claimed.unreadable.len();
        for u in claimed.unreadable {
            let (recorder, wakes) = (self.cx.recorder.clone(), self.h.wakes.clone());
            self.attempts.spawn(async move {
                record::bury(u, &recorder).await;
                wakes.wake_all();
            });
        }
        Some(Taken {
            ops: claimed.ops,
            unreadable,
            trace,
        })
    }

    /// Starts the attempt of a claimed op with the `permits` reserved for it (`claim`: the
    /// claim's span): the one way an attempt starts, for work and probes alike. Without
    /// permits, or when the attempt hands the op back unsent, its claim is given back.
    async fn start(&self, op: ClaimedOp, permits: Option<Permits>, claim: Option<SpanContext>) {
        let Some(permits) = permits else {
            self.release(&op).await;
            return;
        };
        let cx = self.cx.clone();
        let (store, lease, db) = (
            self.h.store.clone(),
            self.leadership.lease.clone(),
            self.h.db.clone(),
        );
        self.attempts.spawn(async move {
            if let Err(op) = attempt::run(&cx, op, permits, claim).await {
                release_claim(&store, &lease, &db, &op).await;
            }
        });
    }

    /// Gives back the claim of `op`, never attempted (counted).
    async fn release(&self, op: &ClaimedOp) {
        release_claim(&self.h.store, &self.leadership.lease, &self.h.db, op).await;
    }

    /// How long until the next op of `destinations` is due (zero: due now), at most
    /// `poll_interval`; `None` when none is pending.
    pub(crate) async fn next_due(&self, destinations: &[String]) -> Option<Duration> {
        let poll = self.h.settings.poll_interval;
        match self
            .h
            .store
            .op_next_due(self.partition(), destinations, self.h.routes.breakers())
            .await
        {
            Ok(Some(ms)) => Some(Duration::from_millis(ms.max(0) as u64).min(poll)),
            Ok(None) => None,
            Err(e) => {
                self.h.db.failed(m::DbCall::NextDue, &e);
                Some(poll)
            }
        }
    }

    /// Records whether this partition's loop wants notifications; false when that failed.
    pub(crate) async fn listen(&self, listening: bool) -> bool {
        set_listening(&self.h, self.partition(), listening).await
    }

    /// Waits for a wake-up of this partition's loop, at most `at_most`; true when woken.
    pub(crate) async fn idle(&self, stop: &CancellationToken, at_most: Duration) -> bool {
        tokio::select! {
            () = stop.cancelled() => false,
            () = self.h.wakes.woken(self.partition()) => true,
            () = tokio::time::sleep(at_most) => false,
        }
    }

    /// Ends the term: no attempt starts any more. Gracefully (`Shutdown`, `Handover`) this
    /// partition's part of the destinations' limits goes first, the attempts still running
    /// here must end and fit what is left (so the next leader's part never adds to them),
    /// within the grace period; then the loop stops listening and the lease is released. A
    /// `Lost` lease is abandoned: the next leader re-queues what is still in flight.
    pub(crate) async fn step_down(self, how: StepDown) {
        let Leader {
            leadership,
            h,
            attempts,
            cx,
            leading,
            held,
        } = self;
        let partition = leadership.partition;
        // What was claimed ahead is never sent in this term: given back while the lease is
        // still trusted, so the next leader finds it pending, not in flight (its re-queue
        // would count an `unknown` attempt for each). A lost lease can give back nothing.
        let unsent = held.drain();
        if how != StepDown::Lost {
            for op in &unsent {
                release_claim(&h.store, &leadership.lease, &h.db, op).await;
            }
        }
        drop(unsent);
        // The recorder ends once the attempts' handles and this one are gone.
        drop(cx);
        attempts.close();
        let grace = match how {
            StepDown::Shutdown => h.settings.shutdown_grace,
            StepDown::Handover => {
                tracing::info!(
                    partition = partition.index(),
                    "handing the partition over to the instance whose share it is now"
                );
                crate::partition::longest_attempt(h.settings.lease_ttl)
            }
            StepDown::Lost => {
                tracing::warn!(
                    partition = partition.index(),
                    "lost the partition lease; standing by"
                );
                leadership.abandon().await;
                drop(leading);
                show_leading(partition, false);
                return;
            }
        };
        h.routes.stop_leading(partition);
        let settled = async {
            attempts.wait().await;
            h.routes.fit_limits().await;
        };
        if tokio::time::timeout(grace, settled).await.is_err() {
            tracing::warn!(
                partition = partition.index(),
                "attempts still in flight when the partition was released; the next leader re-queues them"
            );
        }
        // Nobody will listen until the next leader asks: spare producers the notifications.
        set_listening(&h, partition, false).await;
        leadership.release(&h.store).await;
        drop(leading);
        show_leading(partition, false);
    }
}

/// Sets `outbox_leader{partition}`.
pub(crate) fn show_leading(partition: Partition, leading: bool) {
    let label = partition.index().to_string();
    metrics::gauge!(m::LEADER, "partition" => label).set(if leading { 1.0 } else { 0.0 });
}

/// What one claim took: the ops to start, how many rows could not be read (made dead), and
/// the claim's span.
#[derive(Debug)]
struct Taken {
    ops: Vec<ClaimedOp>,
    unreadable: usize,
    trace: Option<SpanContext>,
}

/// Records on a freshly won partition lease the partition count this dispatcher serves, then
/// checks that no live partition lease was taken with another count; `false` when one was:
/// after `outboxctl partitions set`, dispatchers of the old count are stepping down (or this
/// one is, and its membership loop will soon say so), and two counts never serve at once, so
/// the lease is given back and tried for again later (G12).
async fn record_partition_count(h: &Handles, lease: &Lease) -> Result<bool, outbox_store::Error> {
    let count = h.settings.partitions;
    h.store.lease_set_partitions(lease, count).await?;
    let others = h.store.lease_partition_conflicts(count).await?;
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

/// Re-queues what older tokens left in flight in the partition, retrying with backoff (100 ms
/// doubling to 5 s) while the database fails; false when the lease was lost or shutdown came
/// first (nothing may be claimed then).
async fn requeue_abandoned(
    h: &Handles,
    leadership: &Leadership,
    shutdown: &CancellationToken,
) -> bool {
    let (lease, partition) = (&leadership.lease, leadership.partition);
    let requeue = (|| h.store.op_requeue_abandoned(lease, partition))
        .retry(crate::status::retry_backoff())
        .notify(|e, _| h.db.failed(m::DbCall::RequeueAbandoned, e));
    let requeued = tokio::select! {
        requeued = requeue => requeued,
        () = leadership.lost().cancelled() => return false,
        () = shutdown.cancelled() => return false,
    };
    if let Ok(n) = requeued
        && n > 0
    {
        metrics::counter!(m::REQUEUED).increment(n);
        tracing::warn!(
            partition = partition.index(),
            requeued = n,
            "re-queued ops an older dispatcher left in flight (they may have been sent)"
        );
    }
    requeued.is_ok()
}

/// Gives back the claim of `op`, never attempted (counted).
async fn release_claim(store: &Store, lease: &Lease, db: &DbStatus, op: &ClaimedOp) {
    metrics::counter!(m::RELEASED_CLAIMS).increment(1);
    if let Err(e) = store.op_release_claim(lease, op.seq).await {
        db.failed(m::DbCall::ReleaseClaim, &e);
    }
}

/// Records whether `partition`'s loop wants notifications; false when that failed.
async fn set_listening(h: &Handles, partition: Partition, listening: bool) -> bool {
    match h.store.wakeup_set(partition, listening).await {
        Ok(()) => true,
        Err(e) => {
            h.db.failed(m::DbCall::SetWakeUp, &e);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use outbox_producer::{Operation, Outbox};
    use outbox_store::{ResourceName, StoreOptions, TtlBounds};

    use std::sync::Arc;

    use crate::config::Config;
    use crate::health::Health;
    use crate::routes::Routes;
    use crate::wake::Wakes;

    use super::*;

    /// A dispatcher's handles on a migrated SQLite file in `dir`, one partition, destination
    /// `api`, leases of 1 s and more allowed.
    async fn handles(dir: &tempfile::TempDir) -> Handles {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let text = format!(
            "[database]\nurl = \"sqlite://{}\"\n[lease]\nmin_ttl = \"1s\"\n\
             [dispatcher]\npartitions = 1\nlease_ttl = \"3s\"\nlisten = \"\"\n\
             [destinations.api]\nbase_url = \"http://127.0.0.1:1\"\ntimeout = \"1s\"\n",
            dir.path().join("o.db").display()
        );
        let config = Config::load(Some(&text), &HashMap::new()).unwrap();
        let options = StoreOptions {
            lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(60)).unwrap(),
            ..StoreOptions::default()
        };
        let store = Store::connect(config.database_url.expose(), options)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let (wakes, db) = (Arc::new(Wakes::new(1)), DbStatus::default());
        Handles {
            health: Arc::new(Health::new(
                store.clone(),
                &config,
                wakes.clone(),
                db.clone(),
            )),
            routes: Arc::new(Routes::new(&config).unwrap()),
            tally: Arc::default(),
            store,
            db,
            wakes,
            settings: Settings::of(&config),
        }
    }

    /// Issue 35, item 5: no claim before the re-queue of what an older token left in flight.
    /// A term exists only once that re-queue is done: the op an expired leader left in flight
    /// is pending again when `try_lead` returns, before the term can claim anything; and a
    /// graceful step-down releases the lease (its token stays, its owner goes).
    #[tokio::test]
    async fn a_term_begins_only_after_the_requeue_and_ends_by_releasing_its_lease() {
        let dir = tempfile::tempdir().unwrap();
        let h = handles(&dir).await;
        let outbox = Outbox::from_store(h.store.clone());
        let producer = outbox
            .try_acquire("billing:1", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let op = Operation::post("api", "/v1/a")
            .idempotency_key("a")
            .build()
            .unwrap();
        outbox.enqueue(&producer, &op).await.unwrap();
        // An older leader claims it, then its lease lapses (1 s).
        let partition = Partition::new(0, 1).unwrap();
        let resource = ResourceName::new(partition.lease_resource()).unwrap();
        let old = h
            .store
            .lease_try_acquire(&resource, Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        let rooms = [ClaimRoom::new("api", 1)];
        let claimed = h
            .store
            .op_claim(&old, partition, &rooms, &[], 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(claimed.ops.len(), 1);
        assert_eq!(h.store.op_stats().await.unwrap().in_flight, 1);
        let shutdown = CancellationToken::new();
        let leader = loop {
            match Leader::try_lead(&h, partition, &shutdown).await {
                Term::Won(leader) => break leader,
                Term::Held | Term::Standby | Term::Ended => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
            }
        };
        let stats = h.store.op_stats().await.unwrap();
        assert_eq!((stats.pending, stats.in_flight), (1, 0), "re-queued first");
        assert!(leader.leadership.lease.token > old.token);
        assert_eq!(h.routes.led(), 1, "the term counts in the limits");
        let token = leader.leadership.lease.token;
        leader.step_down(StepDown::Shutdown).await;
        assert_eq!(h.routes.led(), 0);
        let row = h
            .store
            .lease_list()
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.resource == resource)
            .unwrap();
        assert_eq!((row.owner_id, row.token, row.held), (None, token, false));
    }
}
