//! What the dispatcher reads and writes: claimed ops, the completion of an attempt, and the
//! partition an instance serves (`Partition`, defined in `model/partition.rs` and re-exported
//! here). The SQL enforcing G8/G9 lives in the backend files
//! (`op_claim_due.sql`, `op_complete_batch_if_claimed.sql`, `op_requeue_abandoned.sql`).

pub use crate::model::Partition;

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::InvalidInput;
use crate::model::{DestinationName, FencingToken, IdempotencyKey};
use crate::request;

/// The longest error text stored on an attempt or op, in characters.
pub const ERROR_MAX_CHARS: usize = 2048;
/// The longest response excerpt stored on an attempt, in characters.
pub const EXCERPT_MAX_CHARS: usize = 1024;

/// An op claimed for one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedOp {
    /// Its enqueue sequence (row id).
    pub seq: i64,
    /// Its public id, sent as `X-Outbox-Op-Id` and `webhook-id`.
    pub op_id: Uuid,
    /// The resource it was enqueued under.
    pub resource: String,
    /// The producer's fencing token, sent as `X-Fencing-Token`.
    pub token: FencingToken,
    /// The destination's name.
    pub destination: String,
    /// The idempotency key, the same on every attempt.
    pub idempotency_key: String,
    /// The HTTP method.
    pub method: String,
    /// Path and query below the destination's base URL.
    pub path: String,
    /// The producer's headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body's content type.
    pub content_type: Option<String>,
    /// The body; empty when it is larger than the dispatcher's `max_body_bytes`, which the
    /// claim never loads.
    pub body: Vec<u8>,
    /// The body's size in bytes as stored.
    pub body_bytes: i64,
    /// This attempt's number, 1 for the first.
    pub attempt: i32,
    /// When the op was enqueued (database clock): the start of its `max_age`.
    pub created_at: OffsetDateTime,
    /// When it was claimed (database clock): the attempt's start.
    pub claimed_at: OffsetDateTime,
    /// The producer's W3C traceparent, if any.
    pub trace_context: Option<String>,
    /// The producer's W3C tracestate, if any (only with a traceparent).
    pub trace_state: Option<String>,
    /// The traceparent of the op's previous attempt's span, if it had one: a retry's span
    /// links to it. Written by a dispatcher, not the producer, and not checked by
    /// [`Self::check`]: one that is not a valid traceparent is only no link.
    pub previous_attempt: Option<String>,
    /// This attempt's number within the op's retry budget: `attempt` less the attempts made
    /// before an operator last replayed it.
    pub budget_attempt: i32,
    /// The start of the op's `max_age`: when it was enqueued, or last replayed.
    pub budget_since: OffsetDateTime,
}

impl ClaimedOp {
    /// Checks the row against the producer's rules again (G11): whatever wrote it, an op that
    /// breaks one is never sent. The error names the field and the rule.
    pub fn check(&self, max_body_bytes: usize) -> Result<(), InvalidInput> {
        DestinationName::new(self.destination.as_str())?;
        IdempotencyKey::new(self.idempotency_key.as_str())?;
        request::check_method(&self.method)?;
        request::check_path(&self.path)?;
        request::check_headers(&self.headers)?;
        if let Some(ct) = &self.content_type {
            request::check_content_type(ct)?;
        }
        if let Some(tp) = &self.trace_context {
            request::check_traceparent(tp)?;
        }
        if let Some(ts) = &self.trace_state {
            request::check_tracestate(ts)?;
        }
        let stored = usize::try_from(self.body_bytes).unwrap_or(usize::MAX);
        request::check_body(stored, max_body_bytes)?;
        if stored != self.body.len() {
            return Err(InvalidInput::new(
                "body",
                format!("was read as {} bytes of {stored}", self.body.len()),
            ));
        }
        Ok(())
    }
}

/// A claimed op whose row could not be read (a value of the wrong type, headers that are not
/// pairs): it is made dead without an attempt being sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Its row id.
    pub seq: i64,
    /// Its public id, when readable (nil otherwise).
    pub op_id: Uuid,
    /// The attempt number the claim counted (0 when unreadable).
    pub attempt: i32,
    /// When it was claimed (now, when unreadable).
    pub claimed_at: OffsetDateTime,
    /// What could not be read.
    pub reason: String,
}

/// How an attempt went, as stored on its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx answer.
    Delivered,
    /// A definite failure: an error status, or no connection.
    Failed,
    /// Timed out or cut off after the request was sent: the destination may have acted.
    Unknown,
}

impl AttemptOutcome {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Unknown => "unknown",
        }
    }
}

/// What the op becomes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    /// Done.
    Delivered,
    /// Pending again, due after this delay (database clock).
    RetryAfter(Duration),
    /// Failed permanently or out of retries; kept for operators and releases its order key.
    Dead,
}

impl NextState {
    pub(crate) fn state(self) -> &'static str {
        match self {
            NextState::Delivered => "delivered",
            NextState::RetryAfter(_) => "pending",
            NextState::Dead => "dead",
        }
    }

    pub(crate) fn delay_ms(self) -> i64 {
        match self {
            // A retry delay is capped by configuration far below i64 milliseconds.
            NextState::RetryAfter(d) => d.as_millis().min(i64::MAX as u128) as i64,
            _ => 0,
        }
    }
}

/// The end of one attempt, written atomically with the op's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The op's row id.
    pub seq: i64,
    /// The op's public id.
    pub op_id: Uuid,
    /// The attempt's number.
    pub attempt: i32,
    /// When the attempt started: the claim's database time.
    pub started_at: OffsetDateTime,
    /// How it went.
    pub outcome: AttemptOutcome,
    /// The HTTP status, when an answer came.
    pub http_status: Option<u16>,
    /// What went wrong, if anything (never a header value or the request body).
    pub error: Option<String>,
    /// The start of the response body.
    pub excerpt: Option<String>,
    /// What the op becomes.
    pub next: NextState,
    /// The traceparent of the attempt's span, if traces are on: kept on the attempt and on
    /// the op, where the next attempt's span links to it.
    pub trace_context: Option<String>,
}

/// Counts for the dispatcher's gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpStats {
    /// Pending ops, due or not.
    pub pending: i64,
    /// Ops in flight.
    pub in_flight: i64,
    /// Milliseconds the oldest pending op has waited since it was enqueued.
    pub oldest_pending_ms: Option<i64>,
    /// Enqueues refused (stale, expired or no lease) in the last hour.
    pub rejections_last_hour: i64,
}

/// One destination a claim may take ops of, and how many at most: what it can start now (its
/// free in-flight slots, its rate budget), so that nothing is claimed only to be given back
/// (issue 34).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRoom {
    /// The destination, as configured.
    pub destination: String,
    /// How many of its ops one claim may take.
    pub ops: u32,
}

impl ClaimRoom {
    /// Room for `ops` ops of `destination`.
    pub fn new(destination: impl Into<String>, ops: u32) -> ClaimRoom {
        ClaimRoom {
            destination: destination.into(),
            ops,
        }
    }
}

/// The destinations of `rooms` and their rooms, as two lists in one order: the claim's
/// parameters.
pub(crate) fn split_rooms(rooms: &[ClaimRoom]) -> (Vec<&str>, Vec<i32>) {
    rooms
        .iter()
        .map(|r| {
            let ops = i32::try_from(r.ops).unwrap_or(i32::MAX);
            (r.destination.as_str(), ops)
        })
        .unzip()
}

/// The result of a claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// The ops claimed, in sequence order.
    pub ops: Vec<ClaimedOp>,
    /// Claimed rows that could not be read; the caller makes them dead.
    pub unreadable: Vec<Unreadable>,
    /// Pending ops dropped first because their token was no longer the newest (G5).
    pub superseded: u64,
}

impl Claimed {
    /// Sorts decoded rows into ops (in sequence order) and unreadable ones.
    pub(crate) fn new(rows: Vec<Result<ClaimedOp, Unreadable>>, superseded: u64) -> Claimed {
        let (mut ops, mut unreadable) = (Vec::new(), Vec::new());
        for row in rows {
            match row {
                Ok(op) => ops.push(op),
                Err(u) => unreadable.push(u),
            }
        }
        ops.sort_by_key(|c| c.seq);
        Claimed {
            ops,
            unreadable,
            superseded,
        }
    }
}

impl Completion {
    /// The error as stored: control characters escaped, at most [`ERROR_MAX_CHARS`].
    pub(crate) fn stored_error(&self) -> Option<String> {
        self.error
            .as_deref()
            .map(|e| crate::text::storable(e, ERROR_MAX_CHARS))
    }

    /// The excerpt as stored: control characters escaped, at most [`EXCERPT_MAX_CHARS`].
    pub(crate) fn stored_excerpt(&self) -> Option<String> {
        self.excerpt
            .as_deref()
            .map(|e| crate::text::storable(e, EXCERPT_MAX_CHARS))
    }

    /// This completion without its optional parts (the excerpt, and the error replaced by a
    /// fixed note): what is still recorded when the database refused the whole of it.
    pub fn without_details(&self) -> Completion {
        Completion {
            error: Some(
                "the attempt's error and response excerpt could not be stored and were dropped"
                    .to_owned(),
            ),
            excerpt: None,
            ..self.clone()
        }
    }
}

/// On becoming leader of `part`: ops left in flight by claims whose lease lapsed go back to
/// pending, their open attempts closed as `unknown`, in one transaction (G6, G12).
pub(crate) async fn requeue_abandoned<D: crate::driver::Driver>(
    d: &D,
    lease: &crate::Lease,
    part: Partition,
) -> Result<u64, crate::Error> {
    let mut tx = d.begin().await?;
    D::attempt_record_abandoned(&mut tx, lease, part).await?;
    let requeued = D::op_requeue_abandoned(&mut tx, lease, part).await?;
    D::commit(tx).await?;
    Ok(requeued)
}

/// Parses the stored headers (a JSON array of pairs).
pub(crate) fn parse_headers(
    json: &str,
    backend: crate::Backend,
) -> Result<Vec<(String, String)>, crate::Error> {
    parse_stored(
        json,
        backend,
        "stored headers are not a JSON array of pairs",
    )
}

/// The header names `admin_op_show.sql` gives, a JSON array of strings, in order.
pub(crate) fn parse_header_names(
    json: &str,
    backend: crate::Backend,
) -> Result<Vec<String>, crate::Error> {
    parse_stored(
        json,
        backend,
        "header names are not a JSON array of strings",
    )
}

/// JSON text a statement returned, as `T`; `what` says what it should have been.
fn parse_stored<T: serde::de::DeserializeOwned>(
    json: &str,
    backend: crate::Backend,
    what: &str,
) -> Result<T, crate::Error> {
    serde_json::from_str(json).map_err(|e| {
        crate::StoreError::new(
            backend,
            crate::StoreErrorKind::Other,
            format!("{what}: {e}"),
        )
        .into()
    })
}

/// Runs `watch` (a wake-up source: PostgreSQL's LISTEN, SQLite's WAL index) on a task until
/// the task is aborted, again after each end, with a backoff from 100 ms to 5 s that starts
/// over after a clean end; an error is logged as `what` interrupted.
pub(crate) fn keep_watching<F, Fut, E>(what: &'static str, watch: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + 'static,
{
    tokio::spawn(watch_forever(what, watch))
}

/// [`keep_watching`]'s loop, for a task that has something to wait for first.
pub(crate) async fn watch_forever<F, Fut, E>(what: &'static str, mut watch: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .without_max_times();
    loop {
        // Until a clean end (never an error: the schedule has no last try), then again after
        // the shortest pause, the schedule started over.
        let _ = (|| watch())
            .retry(backoff)
            .notify(|e, _| tracing::warn!(error = %e, "{what} interrupted; reconnecting"))
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_texts_are_escaped_and_cut_at_character_boundaries() {
        let c = Completion {
            seq: 1,
            op_id: Uuid::nil(),
            attempt: 1,
            started_at: OffsetDateTime::UNIX_EPOCH,
            outcome: AttemptOutcome::Failed,
            http_status: Some(500),
            error: Some("é".repeat(ERROR_MAX_CHARS + 1)),
            excerpt: Some("bad\0answer\x1b[2J".to_owned()),
            next: NextState::Dead,
            trace_context: None,
        };
        assert_eq!(c.stored_error().unwrap().chars().count(), ERROR_MAX_CHARS);
        assert_eq!(c.stored_excerpt().unwrap(), "bad\\u0000answer\\x1b[2J");
        let bare = c.without_details();
        assert_eq!((bare.excerpt, bare.http_status), (None, Some(500)));
    }
}
