//! What operators ask of the outbox and the fixes they apply (`outboxctl`): status, list, show,
//! replay, cancel, purge, rejections and tail. The rules of replay and cancel live here, once
//! for every backend; each backend reads and writes with its own `sql/<backend>/admin_*.sql`.
//!
//! Replay and cancel lock the ops they change (a dispatcher's claim skips locked rows, its
//! completion waits), decide from the state read under that lock, change and log in the same
//! transaction: an op is never in two states, and a dry run rolls back having changed nothing.

use serde::Serialize;
use time::OffsetDateTime;

use crate::error::InvalidInput;
use crate::model::{FencingToken, LeaseRow};
use crate::op::OpState;

/// Ops per replay or cancel transaction, and per purge delete.
pub const CHANGE_BATCH: usize = 500;

/// Which ops `list` shows (and `replay`/`cancel` take by filter). Unset fields match all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpFilter {
    /// Any of these states (empty: any state).
    pub states: Vec<OpState>,
    /// This destination.
    pub destination: Option<String>,
    /// This resource.
    pub resource: Option<String>,
    /// This idempotency key.
    pub idempotency_key: Option<String>,
    /// Enqueued at or after this time.
    pub created_since: Option<OffsetDateTime>,
    /// Enqueued before this time.
    pub created_before: Option<OffsetDateTime>,
    /// Only ops older than this sequence (the page cursor: the last one shown).
    pub before_seq: Option<i64>,
    /// How many at most.
    pub limit: u32,
}

impl OpFilter {
    /// The states asked for that need an operator (dead, cancelled, superseded), when every
    /// state asked for is one of them: the query then names the index's predicate.
    pub(crate) fn only_attention_states(&self) -> bool {
        !self.states.is_empty()
            && self
                .states
                .iter()
                .all(|s| matches!(s, OpState::Dead | OpState::Cancelled | OpState::Superseded))
    }
}

/// An op as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpSummary {
    /// Its enqueue sequence (row id).
    pub seq: i64,
    /// Its public id.
    pub op_id: String,
    /// The resource it was enqueued under.
    pub resource: String,
    /// The producer's fencing token.
    pub token: FencingToken,
    /// The destination's name.
    pub destination: String,
    /// The idempotency key.
    pub idempotency_key: String,
    /// Its state.
    pub state: String,
    /// Attempts made so far.
    pub attempts: i32,
    /// When it is due (pending) or was last due.
    #[serde(with = "time::serde::rfc3339")]
    pub next_attempt_at: OffsetDateTime,
    /// When it was enqueued.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it reached its final state, if it has.
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// The last attempt's error, or why it was cancelled or superseded.
    pub last_error: Option<String>,
    /// The body's size in bytes.
    pub body_bytes: i64,
}

/// Everything `show` tells about one op, with its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpDetail {
    /// What `list` shows.
    #[serde(flatten)]
    pub summary: OpSummary,
    /// The producer's owner id.
    pub owner_id: String,
    /// The order key (None: unordered).
    pub order_key: Option<String>,
    /// The HTTP method.
    pub method: String,
    /// Path and query below the destination's base URL.
    pub path: String,
    /// The producer's headers (never credentials: those live in the dispatcher's config).
    pub headers: Vec<(String, String)>,
    /// The body's content type.
    pub content_type: Option<String>,
    /// The body.
    #[serde(skip)]
    pub body: Vec<u8>,
    /// The dispatcher token holding it, while in flight.
    pub claimed_by_token: Option<FencingToken>,
    /// When it was delivered.
    #[serde(with = "time::serde::rfc3339::option")]
    pub delivered_at: Option<OffsetDateTime>,
    /// The producer's W3C traceparent.
    pub trace_context: Option<String>,
    /// Attempts made before it was last replayed (its retry budget counts from there).
    pub retry_base_attempts: i32,
    /// When it was last replayed.
    #[serde(with = "time::serde::rfc3339::option")]
    pub retry_since: Option<OffsetDateTime>,
    /// Its resource's newest token: a newer one than the op's means a newer owner exists.
    pub resource_token: Option<FencingToken>,
    /// Its attempts, first to last.
    pub attempt_history: Vec<AttemptRow>,
}

/// One recorded attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRow {
    /// The attempt row's id (`tail` follows it).
    pub id: i64,
    /// The op's sequence.
    pub seq: i64,
    /// The op's public id.
    pub op_id: String,
    /// The op's destination.
    pub destination: String,
    /// The op's resource.
    pub resource: String,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// The dispatcher's partition token that made it.
    pub dispatcher_token: FencingToken,
    /// When it started (the claim).
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// How long it took, in milliseconds.
    pub duration_ms: Option<i64>,
    /// `delivered`, `failed` or `unknown`.
    pub outcome: Option<String>,
    /// The HTTP status, when there was an answer.
    pub http_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
    /// The start of the answer's body.
    pub response_excerpt: Option<String>,
}

/// Ops of one state at one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateCount {
    /// The state.
    pub state: String,
    /// The destination.
    pub destination: String,
    /// How many ops.
    pub ops: i64,
}

/// What `status` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Ops by state and destination.
    pub counts: Vec<StateCount>,
    /// How long the oldest pending op has waited, in milliseconds.
    pub oldest_pending_ms: Option<i64>,
    /// Pending ops due now.
    pub due_now: i64,
    /// Ops that died in the last 24 hours.
    pub dead_last_day: i64,
    /// Stale or expired enqueues refused in the last hour.
    pub rejections_last_hour: i64,
    /// Each dispatcher partition's lease.
    pub partitions: Vec<LeaseRow>,
}

/// Who changes ops, why, and how carefully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Who: an operator's name, recorded in `outbox_admin_log`.
    pub actor: String,
    /// Why, recorded in `outbox_admin_log`.
    pub reason: String,
    /// Replay delivered ops and ops of superseded tokens too.
    pub force: bool,
    /// Decide and report, then roll back: nothing changes, nothing is logged.
    pub dry_run: bool,
}

impl Change {
    /// Checks the actor and reason: both needed, both bounded.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        for (field, value, max) in [("actor", &self.actor, 200), ("reason", &self.reason, 2000)] {
            if value.trim().is_empty() {
                return Err(InvalidInput::new(field, "is required"));
            }
            if value.chars().count() > max {
                return Err(InvalidInput::new(
                    field,
                    format!("is longer than {max} characters"),
                ));
            }
            // Kept in the admin log and shown to other operators: text, not terminal control.
            if value
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                return Err(InvalidInput::new(field, "must not hold control characters"));
            }
        }
        Ok(())
    }
}

/// An op a replay or cancel left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Its sequence.
    pub seq: i64,
    /// Its public id.
    pub op_id: String,
    /// Its state.
    pub state: String,
    /// Why it was left alone.
    pub why: String,
}

/// What a replay or cancel did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChangeReport {
    /// The ops changed (or that would be).
    pub changed: Vec<i64>,
    /// The ops left alone.
    pub refused: Vec<Refused>,
    /// Asked-for sequences that name no op.
    pub missing: Vec<i64>,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

/// What a purge deleted (or, dry, would delete), per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PurgeReport {
    /// Ops per state.
    pub by_state: Vec<(String, i64)>,
    /// Ops in all.
    pub total: i64,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

/// An op as read under the change's lock.
#[derive(Debug, Clone)]
pub(crate) struct Locked {
    pub(crate) seq: i64,
    pub(crate) op_id: String,
    pub(crate) state: String,
    pub(crate) token: i64,
    pub(crate) resource_token: Option<i64>,
}

/// The two changes operators make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Replay,
    Cancel,
}

impl Action {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Cancel => "cancel",
        }
    }

    /// Whether `op` may change, or why not.
    pub(crate) fn verdict(self, op: &Locked, force: bool) -> Result<(), String> {
        let superseded_token = op.resource_token.is_some_and(|t| t > op.token);
        match (self, op.state.as_str()) {
            (_, "in_flight") => {
                Err("in flight: an attempt is under way; try again after it".into())
            }
            (Action::Replay, "dead" | "cancelled") if superseded_token && !force => Err(format!(
                "its token {} is superseded by {} on its resource (use --force to send it anyway)",
                op.token,
                op.resource_token.unwrap_or_default()
            )),
            (Action::Replay, "dead" | "cancelled") => Ok(()),
            (Action::Replay, "delivered" | "superseded") if force => Ok(()),
            (Action::Replay, "delivered") => {
                Err("already delivered (use --force to send it again)".into())
            }
            (Action::Replay, "superseded") => {
                Err("superseded by a newer token (use --force to send it anyway)".into())
            }
            (Action::Replay, "pending") => Err("already pending".into()),
            (Action::Cancel, "pending" | "dead") => Ok(()),
            (Action::Cancel, state) => Err(format!(
                "{state}: only pending or dead ops can be cancelled"
            )),
            (_, state) => Err(format!("unknown state {state}")),
        }
    }
}

/// Sorts locked ops into changed and refused, and names the asked-for ones not found.
pub(crate) fn decide(
    action: Action,
    asked: &[i64],
    locked: &[Locked],
    force: bool,
) -> ChangeReport {
    let mut report = ChangeReport::default();
    for op in locked {
        match action.verdict(op, force) {
            Ok(()) => report.changed.push(op.seq),
            Err(why) => report.refused.push(Refused {
                seq: op.seq,
                op_id: op.op_id.clone(),
                state: op.state.clone(),
                why,
            }),
        }
    }
    report.missing = asked
        .iter()
        .filter(|s| !locked.iter().any(|l| l.seq == **s))
        .copied()
        .collect();
    report
}

/// The `outbox_admin_log` details of a change: the ops, the counts and the refusals.
pub(crate) fn log_details(report: &ChangeReport) -> String {
    serde_json::json!({
        "changed": report.changed,
        "refused": report.refused.iter().map(|r| serde_json::json!({"seq": r.seq, "state": r.state, "why": r.why})).collect::<Vec<_>>(),
        "missing": report.missing,
    })
    .to_string()
}

/// The last_error note a cancel leaves.
pub(crate) fn cancel_note(change: &Change) -> String {
    format!("cancelled by {}: {}", change.actor, change.reason)
}

/// Adds `n` ops of `state` to a purge report.
pub(crate) fn tally(report: &mut PurgeReport, state: String, n: i64) {
    report.total += n;
    match report.by_state.iter_mut().find(|(s, _)| *s == state) {
        Some((_, count)) => *count += n,
        None => report.by_state.push((state, n)),
    }
}

/// Terminal states only: purge refuses the others.
pub(crate) fn check_purge_states(states: &[OpState]) -> Result<(), InvalidInput> {
    if states.is_empty() {
        return Err(InvalidInput::new(
            "state",
            "name at least one state to purge",
        ));
    }
    if let Some(s) = states
        .iter()
        .find(|s| matches!(s, OpState::Pending | OpState::InFlight))
    {
        return Err(InvalidInput::new(
            "state",
            format!(
                "{s} is not a final state: only delivered, dead, cancelled and superseded ops can be purged"
            ),
        ));
    }
    Ok(())
}

/// An [`OpSummary`] from a row of `admin_op_list.sql` or `admin_op_show.sql` (either backend:
/// both return the same column names and types).
macro_rules! op_summary {
    ($r:expr) => {
        $crate::admin::OpSummary {
            seq: $r.try_get("id")?,
            op_id: $r.try_get("op_id")?,
            resource: $r.try_get("resource")?,
            token: $crate::model::FencingToken::new($r.try_get("fence")?),
            destination: $r.try_get("destination")?,
            idempotency_key: $r.try_get("idempotency_key")?,
            state: $r.try_get("state")?,
            attempts: $r.try_get("attempts")?,
            next_attempt_at: $r.try_get("next_attempt_at")?,
            created_at: $r.try_get("created_at")?,
            finished_at: $r.try_get("finished_at")?,
            last_error: $r.try_get("last_error")?,
            body_bytes: $r.try_get("body_bytes")?,
        }
    };
}
pub(crate) use op_summary;

/// An [`AttemptRow`] from a row of `admin_attempt_list.sql` or `admin_attempt_tail.sql`.
macro_rules! attempt_row {
    ($r:expr) => {
        $crate::admin::AttemptRow {
            id: $r.try_get("id")?,
            seq: $r.try_get("seq")?,
            op_id: $r.try_get("op_id")?,
            destination: $r.try_get("destination")?,
            resource: $r.try_get("resource")?,
            attempt: $r.try_get("attempt")?,
            dispatcher_token: $crate::model::FencingToken::new($r.try_get("dispatcher_fence")?),
            started_at: $r.try_get("started_at")?,
            duration_ms: $r.try_get("duration_ms")?,
            outcome: $r.try_get("outcome")?,
            http_status: $r.try_get("http_status")?,
            error: $r.try_get("error")?,
            response_excerpt: $r.try_get("response_excerpt")?,
        }
    };
}
pub(crate) use attempt_row;

/// An [`OpDetail`] from a row of `admin_op_show.sql`, without its headers (the caller parses
/// the `headers` column) and attempts.
macro_rules! op_detail {
    ($r:expr) => {
        $crate::admin::OpDetail {
            summary: $crate::admin::op_summary!($r),
            owner_id: $r.try_get("owner_id")?,
            order_key: $r.try_get("order_key")?,
            method: $r.try_get("method")?,
            path: $r.try_get("path")?,
            headers: Vec::new(),
            content_type: $r.try_get("content_type")?,
            body: $r.try_get("body")?,
            claimed_by_token: $r
                .try_get::<Option<i64>, _>("claimed_by_fence")?
                .map($crate::model::FencingToken::new),
            delivered_at: $r.try_get("delivered_at")?,
            trace_context: $r.try_get("trace_context")?,
            retry_base_attempts: $r.try_get("retry_base_attempts")?,
            retry_since: $r.try_get("retry_since")?,
            resource_token: $r
                .try_get::<Option<i64>, _>("resource_fence")?
                .map($crate::model::FencingToken::new),
            attempt_history: Vec::new(),
        }
    };
}
pub(crate) use op_detail;

/// A [`Locked`] op from a row of `admin_op_lock.sql`.
macro_rules! locked_op {
    ($r:expr) => {
        $crate::admin::Locked {
            seq: $r.try_get("id")?,
            op_id: $r.try_get("op_id")?,
            state: $r.try_get("state")?,
            token: $r.try_get("fence")?,
            resource_token: $r.try_get("resource_fence")?,
        }
    };
}
pub(crate) use locked_op;

/// Adds `filter`'s conditions (fixed fragments, bound values) and its order and page size to a
/// `list` query builder; both backends take the same fragments. `$destinations`: every
/// destination in use, for a key looked up without one. `$walk_ids`: what keeps a destination
/// filter from choosing the (destination, key) index, which would sort all of that
/// destination's ops; walking ids newest first stops at the page's end instead (SQLite: `+`;
/// PostgreSQL's planner walks the primary key by itself: empty).
macro_rules! push_filter {
    ($qb:expr, $filter:expr, $destinations:expr, $time:expr, $walk_ids:expr) => {{
        let f = $filter;
        let destinations: &[String] = $destinations;
        if !f.states.is_empty() {
            $qb.push("\n  AND state IN (");
            let mut list = $qb.separated(", ");
            for s in &f.states {
                list.push_bind(s.as_str());
            }
            $qb.push(")");
            if f.only_attention_states() {
                // The index's predicate, word for word (SQLite uses a partial index only then).
                $qb.push("\n  AND state IN ('dead', 'cancelled', 'superseded')");
            }
        }
        if let Some(d) = &f.destination {
            if f.idempotency_key.is_some() {
                $qb.push("\n  AND destination = ").push_bind(d.clone());
            } else {
                $qb.push(format_args!("\n  AND {}destination = ", $walk_ids))
                    .push_bind(d.clone());
            }
        }
        if let Some(r) = &f.resource {
            $qb.push("\n  AND resource = ").push_bind(r.clone());
        }
        if let Some(k) = &f.idempotency_key {
            $qb.push("\n  AND idempotency_key = ").push_bind(k.clone());
            if f.destination.is_none() {
                // One probe of the (destination, key) index per destination in use.
                $qb.push("\n  AND destination IN (");
                let mut list = $qb.separated(", ");
                list.push_bind(""); // never a destination: keeps the list valid when empty
                for d in destinations {
                    list.push_bind(d.clone());
                }
                $qb.push(")");
            }
        }
        if let Some(t) = f.created_since {
            $qb.push("\n  AND created_at >= ").push_bind($time(t));
        }
        if let Some(t) = f.created_before {
            $qb.push("\n  AND created_at < ").push_bind($time(t));
        }
        if let Some(seq) = f.before_seq {
            $qb.push("\n  AND id < ").push_bind(seq);
        }
        $qb.push("\nORDER BY id DESC\nLIMIT ")
            .push_bind(i64::from(f.limit));
    }};
}
pub(crate) use push_filter;

#[cfg(test)]
mod tests {
    use super::*;

    fn op(state: &str, token: i64, newest: Option<i64>) -> Locked {
        Locked {
            seq: 1,
            op_id: "x".into(),
            state: state.into(),
            token,
            resource_token: newest,
        }
    }

    #[test]
    fn replay_takes_dead_and_cancelled_ops_of_the_newest_token() {
        let r = Action::Replay;
        assert!(r.verdict(&op("dead", 3, Some(3)), false).is_ok());
        assert!(r.verdict(&op("cancelled", 3, None), false).is_ok());
        assert!(r.verdict(&op("dead", 2, Some(3)), false).is_err());
        assert!(r.verdict(&op("dead", 2, Some(3)), true).is_ok());
        assert!(r.verdict(&op("delivered", 3, Some(3)), false).is_err());
        assert!(r.verdict(&op("delivered", 3, Some(3)), true).is_ok());
        assert!(r.verdict(&op("in_flight", 3, Some(3)), true).is_err());
        assert!(r.verdict(&op("pending", 3, Some(3)), true).is_err());
    }

    #[test]
    fn cancel_takes_pending_and_dead_ops_only() {
        let c = Action::Cancel;
        assert!(c.verdict(&op("pending", 1, Some(1)), false).is_ok());
        assert!(c.verdict(&op("dead", 1, Some(1)), false).is_ok());
        for state in ["in_flight", "delivered", "cancelled", "superseded"] {
            assert!(c.verdict(&op(state, 1, Some(1)), true).is_err(), "{state}");
        }
    }

    #[test]
    fn purge_refuses_states_that_are_not_final() {
        assert!(check_purge_states(&[OpState::Delivered, OpState::Dead]).is_ok());
        assert!(check_purge_states(&[OpState::Pending]).is_err());
        assert!(check_purge_states(&[]).is_err());
    }

    #[test]
    fn a_change_needs_an_actor_and_a_reason() {
        let mut c = Change {
            actor: "ana".into(),
            reason: "destination fixed".into(),
            force: false,
            dry_run: false,
        };
        assert!(c.validate().is_ok());
        c.reason = " ".into();
        assert!(c.validate().is_err());
        c.reason = "fixed\0\x1b[2J".into();
        assert!(c.validate().is_err());
    }
}
