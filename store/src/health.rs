//! Destination health: each destination's circuit breaker and its pause, kept in the database
//! (`outbox_destinations`) so that every dispatcher instance and `outboxctl` see one state.
//!
//! - **closed**: delivering. Failed or unknown attempts since the last healthy answer are
//!   counted; at the policy's `failures` the destination opens.
//! - **open**: nothing is claimed until `next_probe_at`. The cooldown doubles with each opening
//!   since the destination was last closed, from `cooldown` up to `cooldown_max`.
//! - **half_open**: one dispatcher took the probe: one op is claimed and sent. A healthy answer
//!   closes the destination, a failure opens it again with the next cooldown. A probe whose
//!   outcome never came (its dispatcher crashed) may be taken again after `probe_timeout`.
//! - **paused** (orthogonal, by an operator): nothing is claimed and nothing is probed until it
//!   is resumed; resuming closes the breaker too.
//!
//! The transitions are pure functions of the row, what happened and the database clock; each
//! runs locked in one transaction (the flows below), so two instances never both take a probe.
//! A stretch during which a destination was held (open, half-open or paused) is kept in
//! `outbox_destination_holds` once it ends: an op's `max_age` does not count it.
//!
//! The row and its parts (`DestinationHealth`, `BreakerState`, `Pause`, `Hold`) live in
//! `model/health.rs`, where the statements read and write them; they are re-exported here.

pub use crate::model::{BreakerState, DestinationHealth, Hold, Pause};

use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use crate::driver::Driver;
use crate::error::Error;
use crate::model::{Change, DestinationName};

/// A destination's breaker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failed or unknown attempts that open it.
    pub failures: u32,
    /// The first cooldown.
    pub cooldown: Duration,
    /// The longest cooldown.
    pub cooldown_max: Duration,
    /// After this long without its outcome, a probe may be taken again.
    pub probe_timeout: Duration,
}

impl BreakerPolicy {
    /// The cooldown after the `openings`-th opening (1 for the first): doubled each time, at
    /// most `cooldown_max`.
    pub fn cooldown_after(&self, openings: u32) -> Duration {
        let doublings = openings.saturating_sub(1).min(32);
        self.cooldown
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.cooldown_max)
    }
}

/// What a batch of completed attempts to one destination said about it, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcomes {
    /// Whether an answer in the batch was healthy (a 2xx, or a status the op's fault).
    pub healthy: bool,
    /// Failed or unknown attempts after the batch's last healthy answer.
    pub failures_after: u32,
    /// The last failure's error.
    pub last_error: Option<String>,
}

/// A change of a destination's state, as logged and counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// The destination.
    pub destination: String,
    /// Its shown state before.
    pub from: &'static str,
    /// Its shown state after.
    pub to: &'static str,
    /// The row after.
    pub health: DestinationHealth,
}

/// What a transition function decided: the new row, and the hold that ended, if any.
type Decided = Option<(DestinationHealth, Option<Hold>)>;

/// `outcomes` recorded on `h` at `now`.
pub fn record(
    h: &DestinationHealth,
    o: &Outcomes,
    policy: &BreakerPolicy,
    now: OffsetDateTime,
) -> Decided {
    let mut next = h.clone();
    if o.failures_after > 0 {
        next.last_error = o.last_error.clone();
        next.last_failure_at = Some(now);
    }
    let mut ended = None;
    match h.state {
        BreakerState::Closed => {
            next.consecutive_failures = if o.healthy {
                o.failures_after
            } else {
                h.consecutive_failures.saturating_add(o.failures_after)
            };
            if next.consecutive_failures >= policy.failures.max(1) {
                open(&mut next, 1, policy, now);
            }
        }
        // The probe's outcome (or a late answer of an attempt started before it opened).
        BreakerState::HalfOpen if o.failures_after > 0 => {
            next.consecutive_failures = h.consecutive_failures.saturating_add(o.failures_after);
            open(&mut next, h.openings.saturating_add(1), policy, now);
        }
        BreakerState::HalfOpen if o.healthy => {
            ended = h.opened_at.map(|from| Hold { from, until: now });
            next.state = BreakerState::Closed;
            next.consecutive_failures = 0;
            next.openings = 0;
            next.opened_at = None;
            next.next_probe_at = None;
            next.probe_started_at = None;
        }
        // Open: answers of attempts started before it opened change nothing but the last error.
        BreakerState::HalfOpen | BreakerState::Open => {}
    }
    (next != *h).then(|| {
        next.changed_at = now;
        (next, ended)
    })
}

fn open(h: &mut DestinationHealth, openings: u32, policy: &BreakerPolicy, now: OffsetDateTime) {
    h.state = BreakerState::Open;
    h.openings = openings;
    if h.opened_at.is_none() {
        h.opened_at = Some(now);
    }
    h.next_probe_at = Some(now + policy.cooldown_after(openings));
    h.probe_started_at = None;
}

/// Takes the probe of `h` at `now`: an open destination whose cooldown is over, or a half-open
/// one whose probe outlived `probe_timeout`, and never a paused one.
pub fn take_probe(h: &DestinationHealth, policy: &BreakerPolicy, now: OffsetDateTime) -> Decided {
    if h.paused.is_some() {
        return None;
    }
    let due = match h.state {
        BreakerState::Open => h.next_probe_at.is_none_or(|at| at <= now),
        BreakerState::HalfOpen => h
            .probe_started_at
            .is_none_or(|at| at + policy.probe_timeout <= now),
        BreakerState::Closed => false,
    };
    due.then(|| {
        let mut next = h.clone();
        next.state = BreakerState::HalfOpen;
        next.probe_started_at = Some(now);
        next.changed_at = now;
        (next, None)
    })
}

/// Pauses `h` for `change` at `now` (nothing when it already is).
pub fn pause(h: &DestinationHealth, change: &Change, now: OffsetDateTime) -> Decided {
    h.paused.is_none().then(|| {
        let mut next = h.clone();
        next.paused = Some(Pause {
            at: now,
            by: change.actor.clone(),
            reason: change.reason.clone(),
        });
        next.changed_at = now;
        (next, None)
    })
}

/// Resumes `h` at `now`: unpaused and closed, its failures forgotten; an operator who knows
/// the destination is back closes an open breaker this way without waiting for its probe
/// (nothing when it was neither paused nor open). The hold that ends is from the pause, or
/// the opening if earlier.
pub fn resume(h: &DestinationHealth, now: OffsetDateTime) -> Decided {
    if h.delivering() {
        return None;
    }
    let ended = h.held_since().map(|from| Hold { from, until: now });
    let mut next = DestinationHealth::closed(&h.destination, now);
    next.last_error = h.last_error.clone();
    next.last_failure_at = h.last_failure_at;
    Some((next, ended))
}

/// How long of `[from, until]` the destination was held, by `holds` (ended stretches, in any
/// order, possibly overlapping) and `current` (the start of the hold under way, if any).
pub fn held_within(
    holds: &[Hold],
    current: Option<OffsetDateTime>,
    from: OffsetDateTime,
    until: OffsetDateTime,
) -> Duration {
    let mut spans: Vec<(OffsetDateTime, OffsetDateTime)> = holds
        .iter()
        .map(|h| (h.from, h.until))
        .chain(current.map(|c| (c, until)))
        .map(|(a, b)| (a.max(from), b.min(until)))
        .filter(|(a, b)| a < b)
        .collect();
    spans.sort();
    let mut total = time::Duration::ZERO;
    let mut reach: Option<OffsetDateTime> = None;
    for (a, b) in spans {
        let start = reach.map_or(a, |r| a.max(r));
        if b > start {
            total += b - start;
        }
        reach = Some(reach.map_or(b, |r| r.max(b)));
    }
    total.try_into().unwrap_or(Duration::ZERO)
}

/// A [`DestinationHealth`] from a row of `destination_list.sql` or `destination_lock.sql`, on
/// any backend (each has a `col` reader).
macro_rules! health_row {
    ($r:expr) => {{
        let count = |n: i32| n.max(0) as u32;
        let paused_at: Option<time::OffsetDateTime> = $r.col("paused_at")?;
        let paused_by: Option<String> = $r.col("paused_by")?;
        let pause_reason: Option<String> = $r.col("pause_reason")?;
        $crate::model::DestinationHealth {
            destination: $r.col("destination")?,
            state: $crate::model::BreakerState::parse(&$r.col::<String>("state")?)?,
            consecutive_failures: count($r.col("consecutive_failures")?),
            openings: count($r.col("openings")?),
            opened_at: $r.col("opened_at")?,
            next_probe_at: $r.col("next_probe_at")?,
            probe_started_at: $r.col("probe_started_at")?,
            last_error: $r.col("last_error")?,
            last_failure_at: $r.col("last_failure_at")?,
            paused: match (paused_at, paused_by, pause_reason) {
                (Some(at), Some(by), Some(reason)) => Some($crate::model::Pause { at, by, reason }),
                _ => None,
            },
            changed_at: $r.col("changed_at")?,
        }
    }};
}
pub(crate) use health_row;

/// Runs `decide` on `name`'s row, locked, and writes what it decided (and the hold that
/// ended) in the same transaction, with the admin log row of `log` when given.
async fn change<D: Driver>(
    d: &D,
    name: &str,
    decide: impl FnOnce(&DestinationHealth, OffsetDateTime) -> Decided,
    log: Option<(&Change, &str)>,
) -> Result<Option<Transition>, Error> {
    DestinationName::new(name)?;
    let mut tx = d.begin().await?;
    D::destination_ensure(&mut tx, name).await?;
    let (before, now) = D::destination_lock(&mut tx, name).await?;
    let Some((after, ended)) = decide(&before, now) else {
        D::rollback(tx).await?;
        return Ok(None);
    };
    if log.is_some_and(|(c, _)| c.dry_run) {
        D::rollback(tx).await?;
    } else {
        D::destination_write(&mut tx, &after).await?;
        if let Some(hold) = ended {
            D::destination_hold_insert(&mut tx, name, hold).await?;
        }
        if let Some((change, action)) = log {
            let details = serde_json::json!({
                "destination": name,
                "before": before.shown_state(),
                "after": after.shown_state(),
            })
            .to_string();
            D::admin_log_insert(&mut tx, change, action, &details).await?;
        }
        D::commit(tx).await?;
    }
    Ok(Some(Transition {
        destination: name.to_owned(),
        from: before.shown_state(),
        to: after.shown_state(),
        health: after,
    }))
}

/// Records `outcomes` of attempts to `name` under `policy`; the transition when its state or
/// counts changed.
pub(crate) async fn record_outcomes<D: Driver>(
    d: &D,
    name: &str,
    outcomes: &Outcomes,
    policy: &BreakerPolicy,
) -> Result<Option<Transition>, Error> {
    change(d, name, |h, now| record(h, outcomes, policy, now), None).await
}

/// Takes `name`'s probe if it is due; the half-open row when this caller got it.
pub(crate) async fn probe_take<D: Driver>(
    d: &D,
    name: &str,
    policy: &BreakerPolicy,
) -> Result<Option<Transition>, Error> {
    change(d, name, |h, now| take_probe(h, policy, now), None).await
}

/// Pauses or resumes `name` for `change`, logged; `None` when it already was so.
pub(crate) async fn set_paused<D: Driver>(
    d: &D,
    name: &str,
    paused: bool,
    change_: &Change,
) -> Result<Option<Transition>, Error> {
    change_.validate()?;
    if paused {
        change(
            d,
            name,
            |h, now| pause(h, change_, now),
            Some((change_, "pause")),
        )
        .await
    } else {
        change(d, name, resume, Some((change_, "resume"))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: OffsetDateTime = OffsetDateTime::UNIX_EPOCH;

    fn policy() -> BreakerPolicy {
        BreakerPolicy {
            failures: 3,
            cooldown: Duration::from_secs(5),
            cooldown_max: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(20),
        }
    }

    fn fails(n: u32) -> Outcomes {
        Outcomes {
            healthy: false,
            failures_after: n,
            last_error: Some("HTTP 503".into()),
        }
    }

    fn ok() -> Outcomes {
        Outcomes {
            healthy: true,
            ..Outcomes::default()
        }
    }

    fn at(secs: i64) -> OffsetDateTime {
        T0 + time::Duration::seconds(secs)
    }

    #[test]
    fn consecutive_failures_open_it_and_a_healthy_answer_resets_them() {
        let h = DestinationHealth::closed("billing", T0);
        let (h, _) = record(&h, &fails(2), &policy(), at(1)).unwrap();
        assert_eq!((h.state, h.consecutive_failures), (BreakerState::Closed, 2));
        let (h, _) = record(&h, &ok(), &policy(), at(2)).unwrap();
        assert_eq!(h.consecutive_failures, 0);
        let (h, _) = record(&h, &fails(2), &policy(), at(3)).unwrap();
        let (h, _) = record(&h, &fails(1), &policy(), at(4)).unwrap();
        assert_eq!(h.state, BreakerState::Open);
        assert_eq!((h.opened_at, h.next_probe_at), (Some(at(4)), Some(at(9))));
        assert_eq!(h.last_error.as_deref(), Some("HTTP 503"));
        // Nothing to write for a healthy answer on a healthy destination.
        assert!(record(&DestinationHealth::closed("b", T0), &ok(), &policy(), at(1)).is_none());
    }

    #[test]
    fn a_probe_is_taken_once_when_due_and_its_outcome_closes_or_reopens_with_a_longer_cooldown() {
        let h = DestinationHealth::closed("billing", T0);
        let (open, _) = record(&h, &fails(3), &policy(), at(0)).unwrap();
        assert!(
            take_probe(&open, &policy(), at(4)).is_none(),
            "cooling down"
        );
        let (half, _) = take_probe(&open, &policy(), at(5)).unwrap();
        assert_eq!(half.state, BreakerState::HalfOpen);
        assert!(
            take_probe(&half, &policy(), at(6)).is_none(),
            "one probe at a time"
        );
        assert!(
            take_probe(&half, &policy(), at(25)).is_some(),
            "a lost probe is retaken"
        );
        let (reopened, _) = record(&half, &fails(1), &policy(), at(6)).unwrap();
        assert_eq!((reopened.state, reopened.openings), (BreakerState::Open, 2));
        assert_eq!(reopened.next_probe_at, Some(at(16)), "10 s: doubled");
        assert_eq!(
            reopened.opened_at,
            Some(at(0)),
            "held since the first opening"
        );
        let (half, _) = take_probe(&reopened, &policy(), at(16)).unwrap();
        let (closed, hold) = record(&half, &ok(), &policy(), at(17)).unwrap();
        assert_eq!((closed.state, closed.openings), (BreakerState::Closed, 0));
        assert_eq!(
            hold,
            Some(Hold {
                from: at(0),
                until: at(17)
            })
        );
        assert_eq!(
            policy().cooldown_after(10),
            Duration::from_secs(60),
            "capped"
        );
        assert_eq!(policy().cooldown_after(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn a_paused_destination_is_never_probed_and_resuming_closes_it() {
        let change = Change {
            actor: "ana".into(),
            reason: "vendor maintenance".into(),
            force: false,
            dry_run: false,
        };
        let (open, _) = record(
            &DestinationHealth::closed("b", T0),
            &fails(3),
            &policy(),
            at(0),
        )
        .unwrap();
        let (paused, _) = pause(&open, &change, at(2)).unwrap();
        assert_eq!(paused.shown_state(), "paused");
        assert!(pause(&paused, &change, at(3)).is_none());
        assert!(take_probe(&paused, &policy(), at(100)).is_none());
        let (resumed, hold) = resume(&paused, at(10)).unwrap();
        assert!(resumed.delivering());
        assert_eq!(
            hold,
            Some(Hold {
                from: at(0),
                until: at(10)
            })
        );
        assert!(resume(&resumed, at(11)).is_none());
        // An open breaker is closed by a resume too, without its probe.
        let (closed, hold) = resume(&open, at(3)).unwrap();
        assert!(closed.delivering());
        assert_eq!(
            hold,
            Some(Hold {
                from: at(0),
                until: at(3)
            })
        );
    }

    #[test]
    fn held_time_is_the_union_of_the_holds_within_the_window() {
        let holds = [
            Hold {
                from: at(10),
                until: at(20),
            },
            Hold {
                from: at(15),
                until: at(30),
            },
            Hold {
                from: at(50),
                until: at(60),
            },
        ];
        assert_eq!(
            held_within(&holds, None, at(0), at(100)),
            Duration::from_secs(30)
        );
        assert_eq!(
            held_within(&holds, None, at(25), at(55)),
            Duration::from_secs(10)
        );
        assert_eq!(
            held_within(&holds, Some(at(90)), at(0), at(100)),
            Duration::from_secs(40)
        );
        assert_eq!(held_within(&[], None, at(0), at(100)), Duration::ZERO);
    }
}
