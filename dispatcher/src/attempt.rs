//! One attempt of a claimed op: send it, decide what comes next (retry, dead, delivered), hand
//! the completion to the recorder, and count and log what became of it. The destination's slot
//! is given back as soon as the exchange ends (with a breaker, once the outcome is recorded);
//! the global one once the outcome is recorded. An op it cannot start goes back to the caller,
//! which gives its claim back.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::SpanContext;
use outbox_store::{ClaimedOp, Completion, NextState};
use tracing::Instrument as _;

use crate::deliver::{Attempt, TraceHeaders};
use crate::health::Health;
use crate::metrics as m;
use crate::partition::Trust;
use crate::record::{self, Recorder};
use crate::retry;
use crate::routes::{Permits, Routes};
use crate::tally::{Finished, Tally};
use crate::telemetry::AttemptSpan;
use crate::wake::Wakes;

/// What an attempt needs of its leader's term; each attempt's task has a clone.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The destinations' senders.
    pub(crate) routes: Arc<Routes>,
    /// Told each outcome (a breaker's count), and asked how long a destination was held.
    pub(crate) health: Arc<Health>,
    /// Rung when a slot is freed, and for an op made pending again.
    pub(crate) wakes: Arc<Wakes>,
    /// The console's per-minute counts, told each applied completion.
    pub(crate) tally: Arc<Tally>,
    /// The term's trusted window, checked right before sending.
    pub(crate) trust: Trust,
    /// The term's recorder.
    pub(crate) recorder: Recorder,
    /// Whether traces are on.
    pub(crate) traces: bool,
}

/// One attempt: send, decide, record. The destination's slot is freed when the exchange ends
/// (its `max_in_flight` counts requests to it, and recording involves only the database), or
/// with a breaker once the outcome is recorded; the global one when this returns. `claim` is
/// the span of the claim that took the op. An op that is not sent (its destination is no
/// longer configured, or the trusted window no longer covers its timeout) is handed back.
pub(crate) async fn run(
    cx: &Context,
    op: ClaimedOp,
    permits: Permits,
    claim: Option<SpanContext>,
) -> Result<(), ClaimedOp> {
    let Some(route) = cx.routes.route(&op.destination) else {
        return Err(op);
    };
    let destination = route.sender().destination();
    if !cx.trust.covers(destination.timeout) {
        // Never start what could outlast the lease we trust (the claim ran close to the edge).
        return Err(op);
    }
    let span = if cx.traces {
        let url = crate::deliver::join(&destination.base_url, &op.path).ok();
        AttemptSpan::start(&op, url.as_ref(), claim.as_ref())
    } else {
        AttemptSpan::off()
    };
    // With traces on, the destination's spans become children of this attempt's; with them
    // off (or no subscriber to make the span), it gets the producer's context as stored.
    let trace = span.headers().or_else(|| {
        op.trace_context.clone().map(|traceparent| TraceHeaders {
            traceparent,
            tracestate: op.trace_state.clone(),
        })
    });
    let gauge = metrics::gauge!(m::IN_FLIGHT, "destination" => op.destination.clone());
    gauge.increment(1.0);
    let (_global, slot) = permits;
    // A destination with a breaker learns each outcome before its slot is used again (its
    // count of failures in a row must see them one by one); the others free the slot at once.
    let breaker = destination.breaker.is_some();
    let mut slot = Some(slot);
    let sent = route
        .sender()
        .send(&op, trace.as_ref())
        .instrument(span.span().clone())
        .await;
    gauge.decrement(1.0);
    if !breaker {
        drop(slot.take());
        cx.wakes.wake_all();
    }
    // The span ends here (it was last entered for the exchange): recording the outcome after
    // is not part of the HTTP call.
    let decided_at = SystemTime::now();
    span.ended(&sent.result);
    // A replayed op's budget counts from its replay (outboxctl replay); the time its
    // destination was held (breaker open, or paused) does not count.
    let held = cx
        .health
        .held_within(&op.destination, op.budget_since, op.claimed_at);
    let age =
        ((op.claimed_at - op.budget_since).unsigned_abs() + sent.duration).saturating_sub(held);
    let decision = retry::decide(
        &destination.retry,
        &sent.result,
        op.budget_attempt.max(1) as u32,
        age,
        jitter(),
    );
    count_attempt(&op, &sent, &decision, span.span());
    let sent_for = sent.duration;
    let result = sent.result.clone();
    let completion = completion(&op, &decision, sent, span.traceparent());
    if record::submit(&cx.recorder, completion, span.context()).await {
        if matches!(decision.next, NextState::RetryAfter(_)) {
            // Pending again, due later: a loop that found nothing due of its destination
            // must learn its due time.
            cx.wakes.new_work();
        }
        count_outcome(&op, &decision, age, span.span());
        cx.tally
            .count(&op.destination, finished(&op, &decision, sent_for));
        if decision.next == NextState::Dead {
            span.dead(decision.reason.as_deref().unwrap_or("dead"), decided_at);
        }
        // Only an attempt this process still owned tells of the destination: one whose
        // completion was discarded may have timed out because this process was paused.
        cx.health.record(destination, &result).await;
    }
    drop(slot);
    cx.wakes.wake_all();
    Ok(())
}

/// Counts a finished attempt, and warns when the op's row broke a rule (it was not sent). The
/// log lines belong to the attempt's `span` (none while traces are off).
fn count_attempt(op: &ClaimedOp, sent: &Attempt, decision: &retry::Decision, span: &tracing::Span) {
    let labels = [("destination", op.destination.clone())];
    if let retry::AttemptResult::Invalid(why) = &sent.result {
        metrics::counter!(m::INVALID_OPS, &labels).increment(1);
        tracing::warn!(parent: span, op_id = %op.op_id, destination = %op.destination, reason = %why, "not sending an op whose row breaks a rule; it is made dead");
    }
    metrics::histogram!(m::ATTEMPT_DURATION, &labels).record(sent.duration.as_secs_f64());
    metrics::counter!(m::ATTEMPTS, "destination" => op.destination.clone(), "outcome" => decision.outcome.as_str()).increment(1);
}

/// The completion that records `sent` and what was decided for `op`; `trace` is the attempt
/// span's traceparent, kept so that the next attempt's span links to this one.
fn completion(
    op: &ClaimedOp,
    decision: &retry::Decision,
    sent: Attempt,
    trace: Option<String>,
) -> Completion {
    Completion {
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
        trace_context: trace,
    }
}

/// Counts (and logs, in the attempt's `span`) what an applied completion made of `op`, `age`
/// after its enqueue.
fn count_outcome(op: &ClaimedOp, decision: &retry::Decision, age: Duration, span: &tracing::Span) {
    let labels = [("destination", op.destination.clone())];
    match decision.next {
        NextState::Delivered => {
            metrics::counter!(m::DELIVERED, &labels).increment(1);
            metrics::histogram!(m::DELIVERY_LATENCY, &labels).record(age.as_secs_f64());
        }
        NextState::Dead => {
            metrics::counter!(m::DEAD, &labels).increment(1);
            tracing::warn!(parent: span, op_id = %op.op_id, destination = %op.destination, attempt = op.attempt, reason = ?decision.reason, "op is dead");
        }
        NextState::RetryAfter(delay) => {
            metrics::counter!(m::RETRIES, &labels).increment(1);
            tracing::info!(parent: span, op_id = %op.op_id, destination = %op.destination, attempt = op.attempt, ?delay, reason = ?decision.reason, "attempt failed; retry scheduled");
        }
    }
}

/// What `decision` made of `op` for the console's charts: delivered ops with the time from their
/// enqueue to the answer (database clock to the claim, then the exchange's `sent_for`), which,
/// unlike the retry budget's age, counts replays and holds: the wait the charts show.
fn finished(op: &ClaimedOp, decision: &retry::Decision, sent_for: Duration) -> Finished {
    match decision.next {
        NextState::Delivered => {
            Finished::Delivered((op.claimed_at - op.created_at).unsigned_abs() + sent_for)
        }
        NextState::RetryAfter(_) => Finished::Retried,
        NextState::Dead => Finished::Dead,
    }
}

/// A number in [0, 1) for full jitter, from the operating system's randomness (via UUID v4).
fn jitter() -> f64 {
    // The low 53 bits of a v4 UUID are all random (version and variant bits sit above them).
    (uuid::Uuid::new_v4().as_u128() & ((1u128 << 53) - 1)) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn jitter_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = super::jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
