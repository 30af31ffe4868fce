//! What operators ask of the outbox and the fixes they apply (`outboxctl`): status, list, show,
//! replay, cancel, purge, rejections and tail. This module holds what they read and what they
//! report; the rules and flows of replay, cancel and purge live once in `change`, the
//! statements' binding and decoding of both sqlx backends once in `sqlx_admin`; each backend
//! reads and writes with its own `sql/<backend>/admin_*.sql`. [`Change`] (who changes ops and
//! why) is defined in `model/change.rs` and re-exported here.
//!
//! Replay and cancel lock the ops they change (a dispatcher's claim skips locked rows, its
//! completion waits), decide from the state read under that lock, change and log in the same
//! transaction: an op is never in two states, and a dry run rolls back having changed nothing.

pub(crate) mod change;
pub(crate) mod content;
pub(crate) mod sqlx_admin;
mod store;

pub use crate::model::{Change, ContentRewrite, StoredContent};
pub(crate) use change::Action;

use serde::Serialize;
use time::OffsetDateTime;

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

    /// The states asked for are all unfinished (pending, in flight).
    pub(crate) fn only_unfinished_states(&self) -> bool {
        !self.states.is_empty()
            && self
                .states
                .iter()
                .all(|s| matches!(s, OpState::Pending | OpState::InFlight))
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
    /// The names of the producer's headers, in order. Their values, like the body, are the
    /// op's content: read with [`crate::Store::admin_op_content`] by a role that may.
    pub header_names: Vec<String>,
    /// The body's content type.
    pub content_type: Option<String>,
    /// The dispatcher token holding it, while in flight.
    pub claimed_by_token: Option<FencingToken>,
    /// When it was delivered.
    #[serde(with = "time::serde::rfc3339::option")]
    pub delivered_at: Option<OffsetDateTime>,
    /// When erasure after delivery cleared its body and header values (their names stay).
    #[serde(with = "time::serde::rfc3339::option")]
    pub erased_at: Option<OffsetDateTime>,
    /// The producer's W3C traceparent.
    pub trace_context: Option<String>,
    /// The producer's W3C tracestate.
    pub trace_state: Option<String>,
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

/// An op's content, as the producer wrote it: what the viewer role may not read, and what
/// `show --body` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpContent {
    /// The producer's headers, names and values (never credentials: those live in the
    /// dispatcher's config).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
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
    /// The traceparent of the attempt's span (its trace id finds it in the tracing system),
    /// when the dispatcher had traces on.
    pub trace_context: Option<String>,
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
    /// Stale or expired enqueues rejected in the last hour.
    pub rejections_last_hour: i64,
    /// Each dispatcher partition's lease.
    pub partitions: Vec<LeaseRow>,
    /// Every registered dispatcher process, live or gone.
    pub instances: Vec<crate::membership::InstanceRow>,
    /// The partition count in force, once a dispatcher started or an operator set one.
    pub partition_count: Option<crate::partitioning::PartitionCount>,
}

/// An op a replay or cancel left alone (skipped), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
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
    /// (Named `refused` in JSON, as outboxctl has always printed it.)
    #[serde(rename = "refused")]
    pub skipped: Vec<Skipped>,
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
