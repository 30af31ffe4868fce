//! The destinations' health as this process sees and changes it ([`Health`]): the breaker
//! view, its probes and its writes. The view (`outbox_store::health`) holds the breaker rows
//! and the recent holds, re-read from the database every `poll_interval` (at most every
//! second) and updated at once by the changes this process makes. The view is a cache: it
//! decides when a partition loop tries a probe and how much of an op's age was spent while its
//! destination was held, and it sets `outbox_destination_state` (`unknown` until the first
//! read). Whether a destination's ops may be claimed is not its to say: the claim reads the
//! pause and the breaker's state from the database in the same statement (issue 28), so a pause
//! or an opening holds every instance from its commit, whatever their views; the view only
//! gives back a claimed op whose destination this process held after the claim read it
//! (`held_after`).
//!
//! A breaker's count is shared by every instance through the database: each instance records
//! its attempts' outcomes there (only failures, and a healthy answer while failures are
//! counted), so the destination opens for all of them. Once it is open no instance claims its
//! ops; the attempts claimed before that commit still go out, at most the destination's
//! in-flight limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_store::Store;
use outbox_store::health::{self, BreakerPolicy, DestinationHealth, Hold, Outcomes, Transition};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Destination};
use crate::metrics as m;
use crate::retry::AttemptResult;
use crate::status::DbStatus;
use crate::wake::Wakes;

/// What this process knows of every destination's health: the cache.
#[derive(Debug, Default)]
struct View {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    rows: HashMap<String, DestinationHealth>,
    holds: HashMap<String, Vec<Hold>>,
    /// How many changes to a hold this process has applied ([`View::apply`]), and when each
    /// destination was last held by one of them, on that count: the order in which this
    /// process learnt of its own holds, which no clock can reorder.
    holds_applied: u64,
    held_at: HashMap<String, u64>,
}

/// Where the count of this process's own holds stood when a claim was sent
/// ([`View::holds_seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldsSeen(u64);

impl View {
    /// The count of holds this process has applied so far: read before a claim is sent, and
    /// given to [`View::held_after`] with each op it took.
    fn holds_seen(&self) -> HoldsSeen {
        HoldsSeen(self.lock().holds_applied)
    }

    /// Whether `destination` is held now (paused, or with `breaker_on` its breaker not closed)
    /// by a change this process applied after `seen`, read before a claim was sent: a change
    /// whose commit the claim may not have seen (this process opened the breaker while the
    /// claim ran), so the claimed op is given back. A change applied before `seen` had
    /// committed before the claim was sent, and the claim, which reads the holds in the same
    /// statement, left the destination's ops alone. The decision rests on the order this
    /// process applied its changes in, not on database times: a breaker write that locked the
    /// row before the claim's time and committed after its snapshot carries an older
    /// `changed_at` (issue 34). An older view never overrides the claim.
    fn held_after(&self, destination: &str, breaker_on: bool, seen: HoldsSeen) -> bool {
        let view = self.lock();
        let held = view
            .rows
            .get(destination)
            .is_some_and(|h| holds(h, breaker_on));
        held && view.held_at.get(destination).is_some_and(|&at| at > seen.0)
    }

    /// Whether `destination` is held in this view now: paused, or with `breaker_on` its breaker
    /// not closed, whoever made the change (this process, another, an operator).
    fn held_now(&self, destination: &str, breaker_on: bool) -> bool {
        self.lock()
            .rows
            .get(destination)
            .is_some_and(|h| holds(h, breaker_on))
    }

    /// Whether a probe of `destination` may be due now: open and cooled down, or a probe
    /// under way for longer than the policy allows, and not paused. The database decides
    /// (`destination_probe_take`); this only spares it the question otherwise.
    fn probe_due(&self, destination: &str, policy: &BreakerPolicy) -> bool {
        let now = OffsetDateTime::now_utc();
        let view = self.lock();
        let Some(h) = view.rows.get(destination) else {
            return false;
        };
        health::take_probe(h, policy, now).is_some()
    }

    /// How much of `[from, until]` `destination` was held (open, half-open or paused).
    fn held_within(
        &self,
        destination: &str,
        from: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Duration {
        let view = self.lock();
        let holds = view.holds.get(destination).map_or(&[][..], Vec::as_slice);
        let current = view.rows.get(destination).and_then(|h| h.held_since());
        health::held_within(holds, current, from, until)
    }

    /// Takes in a change this process made: the view, the log line and the counter.
    fn apply(&self, t: &Transition) {
        if t.from != t.to {
            metrics::counter!(m::DESTINATION_TRANSITIONS, "destination" => t.destination.clone(), "to" => t.to)
                .increment(1);
            let h = &t.health;
            match t.to {
                "open" => {
                    tracing::warn!(destination = %t.destination, from = t.from, consecutive_failures = h.consecutive_failures, openings = h.openings, next_probe_at = %h.next_probe_at.map(|t| t.to_string()).unwrap_or_default(), last_error = h.last_error.as_deref().unwrap_or(""), "destination breaker opened: its ops wait until a probe succeeds")
                }
                "half_open" => {
                    tracing::info!(destination = %t.destination, "destination breaker half-open: sending one probe op")
                }
                _ => {
                    tracing::info!(destination = %t.destination, from = t.from, to = t.to, "destination breaker closed: delivering again")
                }
            }
        }
        // Changes are serialised by the database, but their answers may come back in another
        // order: an older one never replaces a newer.
        let mut view = self.lock();
        let newer = view
            .rows
            .get(&t.destination)
            .is_none_or(|mine| mine.changed_at <= t.health.changed_at);
        if newer {
            m::show_destination_state(&t.destination, t.to);
            if t.health.paused.is_some() || t.health.state != health::BreakerState::Closed {
                view.holds_applied += 1;
                let at = view.holds_applied;
                view.held_at.insert(t.destination.clone(), at);
            }
            view.rows.insert(t.destination.clone(), t.health.clone());
        }
    }

    /// Whether an attempt's outcome must be written: always a failure, and a healthy answer
    /// only while the destination's row says anything but closed with no failures.
    fn worth_recording(&self, destination: &str, outcomes: &Outcomes) -> bool {
        outcomes.failures_after > 0
            || self.lock().rows.get(destination).is_some_and(|h| {
                h.state != health::BreakerState::Closed || h.consecutive_failures > 0
            })
    }

    /// Takes in what was read; `breaker_on` says which destinations have their breaker on:
    /// for the others only a pause is shown (a row left open from before is not in force). A
    /// row this process changed after the read began is kept: a slow read never takes the
    /// view back to a state the database has left (a destination just opened seen closed).
    /// A `configured` destination without a row was never held: closed, now that it is known
    /// (until the first read its state is `unknown`, issue 34). True when a destination the
    /// view had held is held no more.
    fn replace(
        &self,
        rows: Vec<DestinationHealth>,
        holds: Vec<(String, Hold)>,
        configured: &[String],
        breaker_on: impl Fn(&str) -> bool,
    ) -> bool {
        let mut view = self.lock();
        let held = |h: &DestinationHealth| {
            h.paused.is_some()
                || (breaker_on(&h.destination) && h.state != health::BreakerState::Closed)
        };
        let held_before: Vec<String> = view
            .rows
            .values()
            .filter(|h| held(h))
            .map(|h| h.destination.clone())
            .collect();
        let rows: HashMap<String, DestinationHealth> = rows
            .into_iter()
            .map(|read| match view.rows.get(&read.destination) {
                Some(mine) if mine.changed_at > read.changed_at => mine.clone(),
                _ => read,
            })
            .map(|h| (h.destination.clone(), h))
            .collect();
        for h in rows.values() {
            let shown = match (h.paused.is_some(), breaker_on(&h.destination)) {
                (false, false) => "closed",
                _ => h.shown_state(),
            };
            m::show_destination_state(&h.destination, shown);
        }
        for name in configured.iter().filter(|name| !rows.contains_key(*name)) {
            m::show_destination_state(name, "closed");
        }
        view.rows = rows;
        view.holds.clear();
        for (destination, hold) in holds {
            view.holds.entry(destination).or_default().push(hold);
        }
        held_before
            .iter()
            .any(|d| view.rows.get(d).is_none_or(|h| !held(h)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it leaves a consistent map: take it back.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `h` holds its destination's ops: paused, or with `breaker_on` its breaker not closed.
fn holds(h: &DestinationHealth, breaker_on: bool) -> bool {
    h.paused.is_some() || (breaker_on && h.state != health::BreakerState::Closed)
}

/// What one attempt says about its destination: `None` when it says nothing (the op was
/// never sent). No connection, a timeout or cut-off answer, and a status the destination's
/// retry policy retries are failures; any other answer is healthy (the op's fault, not the
/// destination's).
pub(crate) fn outcome(result: &AttemptResult, destination: &Destination) -> Option<Outcomes> {
    let failure = |why: String| Outcomes {
        healthy: false,
        failures_after: 1,
        last_error: Some(why),
    };
    match result {
        AttemptResult::Status { code, .. } if destination.retry.retry_statuses.contains(code) => {
            Some(failure(format!("HTTP {code}")))
        }
        AttemptResult::Status { .. } => Some(Outcomes {
            healthy: true,
            ..Outcomes::default()
        }),
        AttemptResult::NotSent(why) => Some(failure(format!("not sent: {why}"))),
        AttemptResult::Unknown(why) => Some(failure(format!("unknown: {why}"))),
        AttemptResult::Invalid(_) => None,
    }
}

/// How far back holds are read: twice the longest `max_age`. An op older than that by the
/// wall clock is still within its budget only if its destination was held for more than
/// `max_age` in all; holds that ended earlier than this are not subtracted (nor kept, by the
/// housekeeping's retention).
pub(crate) fn hold_horizon(config: &crate::Config) -> Duration {
    config
        .destinations
        .values()
        .map(|d| d.retry.max_age)
        .max()
        .unwrap_or_default()
        .saturating_mul(2)
}

/// The destinations' health as this process sees and changes it: the view, and the writes
/// that keep the database's rows (the breakers' counts, the probes) and the view in step.
#[derive(Debug)]
pub(crate) struct Health {
    view: View,
    store: Store,
    wakes: Arc<Wakes>,
    db: DbStatus,
    /// Every configured destination's breaker policy (`None`: no breaker), by name.
    policies: BTreeMap<String, Option<BreakerPolicy>>,
    /// How often the view is re-read: `poll_interval`, at most a second.
    every: Duration,
    /// How far back holds are read ([`hold_horizon`]).
    horizon: Duration,
}

impl Health {
    /// The health of `config`'s destinations, unknown until [`Health::run`] first reads it.
    pub(crate) fn new(store: Store, config: &Config, wakes: Arc<Wakes>, db: DbStatus) -> Health {
        Health {
            view: View::default(),
            store,
            wakes,
            db,
            policies: config
                .destinations
                .iter()
                .map(|(name, d)| (name.clone(), d.breaker))
                .collect(),
            every: config.dispatcher.poll_interval.min(Duration::from_secs(1)),
            horizon: hold_horizon(config),
        }
    }

    fn policy(&self, destination: &str) -> Option<&BreakerPolicy> {
        self.policies.get(destination).and_then(Option::as_ref)
    }

    /// The count of holds this process has applied so far: read before a claim is sent, and
    /// given to [`Health::held_after`] with each op it took.
    pub(crate) fn holds_seen(&self) -> HoldsSeen {
        self.view.holds_seen()
    }

    /// Whether `destination` became held by a change this process applied after `seen` (see
    /// [`View::held_after`]): its claimed op is given back.
    pub(crate) fn held_after(&self, destination: &str, seen: HoldsSeen) -> bool {
        let breaker_on = self.policy(destination).is_some();
        self.view.held_after(destination, breaker_on, seen)
    }

    /// Whether `destination` is held as this process last saw it (paused, or its breaker not
    /// closed): the ops a leader holds claimed for it are given back rather than started
    /// (`dispatcher.claim_ahead`). The view of another process's change is as old as its last
    /// read (`poll_interval`, at most a second).
    pub(crate) fn held_now(&self, destination: &str) -> bool {
        let breaker_on = self.policy(destination).is_some();
        self.view.held_now(destination, breaker_on)
    }

    /// How much of `[from, until]` `destination` was held (open, half-open or paused).
    pub(crate) fn held_within(
        &self,
        destination: &str,
        from: OffsetDateTime,
        until: OffsetDateTime,
    ) -> Duration {
        self.view.held_within(destination, from, until)
    }

    /// The destinations whose breaker's probe may be due now (the database decides which
    /// caller of all instances gets it: [`Health::take_probe`]).
    pub(crate) fn probes_due(&self) -> Vec<String> {
        self.policies
            .iter()
            .filter_map(|(name, p)| p.as_ref().map(|p| (name, p)))
            .filter(|(name, policy)| self.view.probe_due(name, policy))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Asks the database for `destination`'s probe; true when this caller got it (the view
    /// takes the row back).
    pub(crate) async fn take_probe(&self, destination: &str) -> bool {
        let Some(policy) = self.policy(destination) else {
            return false;
        };
        match self.store.destination_probe_take(destination, policy).await {
            Ok(Some(t)) => {
                self.view.apply(&t);
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.db.failed(m::DbCall::DestinationHealth, &e);
                false
            }
        }
    }

    /// Records what an attempt to `destination` said, when its breaker is on and it is worth a
    /// write; the view takes the row back.
    pub(crate) async fn record(&self, destination: &Destination, result: &AttemptResult) {
        let Some(policy) = &destination.breaker else {
            return;
        };
        let Some(outcomes) = outcome(result, destination) else {
            return;
        };
        if !self.view.worth_recording(&destination.name, &outcomes) {
            return;
        }
        match self
            .store
            .destination_record(&destination.name, &outcomes, policy)
            .await
        {
            Ok(Some(t)) => {
                self.view.apply(&t);
                if t.to == "closed" && t.from != "closed" {
                    // Its ops may be claimed again: loops that found nothing of it ask again.
                    self.wakes.new_work();
                }
            }
            Ok(None) => {}
            Err(e) => self.db.failed(m::DbCall::DestinationHealth, &e),
        }
    }

    /// Re-reads the view until `stop`: every `poll_interval`, at most every second.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let configured: Vec<String> = self.policies.keys().cloned().collect();
        loop {
            let since = OffsetDateTime::now_utc() - self.horizon;
            let read = async {
                let rows = self.store.destination_list().await?;
                let holds = self.store.destination_hold_list(since).await?;
                Ok::<_, outbox_store::Error>((rows, holds))
            };
            match read.await {
                Ok((rows, holds)) => {
                    let released = self
                        .view
                        .replace(rows, holds, &configured, |name| self.policy(name).is_some());
                    if released {
                        // Another instance or an operator ended a hold: its ops may be due.
                        self.wakes.new_work();
                    }
                }
                Err(e) => self.db.failed(m::DbCall::DestinationHealth, &e),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.every) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A breaker change as `destination_record` returns it: `to` at `changed_at`.
    fn opened(destination: &str, changed_at: OffsetDateTime) -> Transition {
        let mut h = DestinationHealth::closed(destination, changed_at);
        h.state = health::BreakerState::Open;
        h.opened_at = Some(changed_at);
        Transition {
            destination: destination.to_owned(),
            from: "closed",
            to: "open",
            health: h,
        }
    }

    /// Issue 34, item 2: the breaker write locked its row (and took its `changed_at`) before the
    /// claim's time, and committed after the claim's snapshot; the claim took an op of the
    /// destination. The op is given back because this process applied the opening after the
    /// claim was sent, whatever the two database times say. Before, `held_after` compared
    /// `changed_at` with the claim's time and let the op go: a fourth request to a destination
    /// whose breaker opens after three.
    #[test]
    fn a_hold_applied_after_the_claim_was_sent_gives_its_ops_back_whatever_the_times() {
        let view = View::default();
        let claimed_at = OffsetDateTime::now_utc();
        let locked_at = claimed_at - Duration::from_millis(5);
        let seen = view.holds_seen();
        view.apply(&opened("b", locked_at));
        assert!(view.held_after("b", true, seen));
        // The next claim is sent after the opening was applied: the claim itself saw it (and
        // took nothing of b); an op it took of b would be the database's word, kept.
        let later = view.holds_seen();
        assert!(!view.held_after("b", true, later));
        // Without its breaker on, an open row holds nothing; other destinations are not held.
        assert!(!view.held_after("b", false, seen));
        assert!(!view.held_after("c", true, seen));
    }

    #[test]
    fn failures_are_the_destinations_and_other_answers_the_ops() {
        let config = crate::Config::load(
            Some("[destinations.b]\nbase_url = \"http://127.0.0.1:1\"\n"),
            &HashMap::new(),
        )
        .unwrap();
        let d = &config.destinations["b"];
        let status = |code| AttemptResult::Status {
            code,
            retry_after: None,
        };
        for (result, failed) in [
            (status(503), Some(true)),
            (status(429), Some(true)),
            (status(400), Some(false)),
            (status(204), Some(false)),
            (AttemptResult::NotSent("refused".into()), Some(true)),
            (AttemptResult::Unknown("timed out".into()), Some(true)),
            (AttemptResult::Invalid("bad row".into()), None),
        ] {
            let got = outcome(&result, d).map(|o| o.failures_after == 1 && !o.healthy);
            assert_eq!(got, failed, "{result:?}");
        }
        assert!(d.breaker.is_some(), "on by default");
    }

    /// Issue 34, item 8: a read without a row for a configured destination knows it closed
    /// (rows are written at its first change), where it showed `unknown` until then.
    #[test]
    fn a_read_shows_a_configured_destination_without_a_row_closed() {
        let handle = m::handle();
        let name = "issue34-no-row".to_owned();
        m::register(std::slice::from_ref(&name), 1);
        let series = |state: &str| {
            format!("outbox_destination_state{{destination=\"{name}\",state=\"{state}\"}}")
        };
        assert!(
            handle
                .render()
                .contains(&format!("{} 1", series("unknown")))
        );
        View::default().replace(Vec::new(), Vec::new(), std::slice::from_ref(&name), |_| {
            true
        });
        let page = handle.render();
        for (state, value) in [("closed", 1), ("open", 0), ("paused", 0), ("unknown", 0)] {
            assert!(
                page.contains(&format!("{} {value}", series(state))),
                "{page}"
            );
        }
    }
}
