//! The dispatcher's spans. An attempt is a `tracing` span (so the log lines of the attempt
//! carry its ids), an HTTP client span by the semantic conventions, a child of the producer's
//! span (with its tracestate), linked to the claim that took its op and, for a retry, to the
//! op's previous attempt (its traceparent is kept on the op); a claim and a batch of completions are
//! spans made after the fact with the OpenTelemetry API, so that claims that found nothing
//! (every poll of an idle partition) make none.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use outbox_store::{Claimed, ClaimedOp, Lease, Partition};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use url::Url;

use crate::deliver::TraceHeaders;
use crate::retry::AttemptResult;

/// The instrumentation scope of every span the dispatcher makes.
pub(crate) const SCOPE: &str = "outbox-dispatcher";
/// The target of the dispatcher's `tracing` spans: the log lines leave them out (their ids are
/// on the lines instead) and the OpenTelemetry layer takes them.
pub(crate) const SPAN_TARGET: &str = "outbox_dispatcher::span";

/// The span of one attempt, or none while traces are off.
#[derive(Debug)]
pub(crate) struct AttemptSpan {
    span: tracing::Span,
    /// Its OpenTelemetry context, when a subscriber with the OpenTelemetry layer made one.
    context: Option<SpanContext>,
}

impl AttemptSpan {
    /// No span: traces are off.
    pub(crate) fn off() -> AttemptSpan {
        AttemptSpan {
            span: tracing::Span::none(),
            context: None,
        }
    }

    /// Starts the span of `op`'s attempt to `url` (`None` when the path cannot be joined: the
    /// op is never sent), below the producer's span when its stored traceparent is valid, and
    /// linked to the `claim` span that took the op and to the op's previous attempt.
    pub(crate) fn start(op: &ClaimedOp, url: Option<&Url>, claim: Option<&SpanContext>) -> Self {
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            parent: None,
            "attempt",
            otel.name = %op.method,
            otel.kind = "client",
        );
        let producer = op.trace_context.as_deref();
        if let Some(parent) = producer.and_then(|tp| remote_parent(tp, op.trace_state.as_deref())) {
            let _ = span.set_parent(parent);
        }
        if let Some(claim) = claim {
            span.add_link_with_attributes(
                claim.clone(),
                vec![KeyValue::new("outbox.link", "claim")],
            );
        }
        let previous = op
            .previous_attempt
            .as_deref()
            .and_then(|tp| remote_parent(tp, None));
        if let Some(previous) = previous {
            span.add_link_with_attributes(
                previous.span().span_context().clone(),
                vec![
                    KeyValue::new("outbox.link", "previous_attempt"),
                    KeyValue::new("outbox.attempt", i64::from(op.attempt - 1)),
                ],
            );
        }
        span.set_attribute("http.request.method", op.method.clone());
        if let Some(url) = url {
            if let Some(host) = url.host_str() {
                span.set_attribute("server.address", host.to_owned());
            }
            if let Some(port) = url.port_or_known_default() {
                span.set_attribute("server.port", i64::from(port));
            }
            span.set_attribute("url.full", url_full(url));
        }
        span.set_attribute("outbox.op_id", op.op_id.to_string());
        span.set_attribute("outbox.attempt", i64::from(op.attempt));
        span.set_attribute("outbox.fence", op.token.get());
        span.set_attribute("outbox.destination", op.destination.clone());
        let context = Some(span.context().span().span_context().clone()).filter(|c| c.is_valid());
        AttemptSpan { span, context }
    }

    /// The `tracing` span, to enter while sending and to parent the attempt's log lines.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Its OpenTelemetry context, for links.
    pub(crate) fn context(&self) -> Option<SpanContext> {
        self.context.clone()
    }

    /// The `traceparent` of this span: what the destination gets (so its spans are this one's
    /// children) and what the op keeps for its next attempt's link.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.context.as_ref().map(traceparent)
    }

    /// The trace context the destination gets: this span's traceparent and the tracestate it
    /// carries on from the producer.
    pub(crate) fn headers(&self) -> Option<TraceHeaders> {
        self.context.as_ref().map(|c| TraceHeaders {
            traceparent: traceparent(c),
            tracestate: Some(c.trace_state().header()).filter(|ts| !ts.is_empty()),
        })
    }

    /// Records how the exchange ended: the status, and `error.type` for anything but a 2xx.
    pub(crate) fn ended(&self, result: &AttemptResult) {
        let error = match result {
            AttemptResult::Status { code, .. } => {
                self.span
                    .set_attribute("http.response.status_code", i64::from(*code));
                (!(200..300).contains(code)).then(|| code.to_string())
            }
            AttemptResult::NotSent(_) => Some("connection_error".to_owned()),
            AttemptResult::Unknown(why) if why.starts_with("timed out") => {
                Some("timeout".to_owned())
            }
            AttemptResult::Unknown(_) => Some("_OTHER".to_owned()),
            AttemptResult::Invalid(_) => Some("invalid_op".to_owned()),
        };
        if let Some(error) = error {
            self.span.set_attribute("error.type", error.clone());
            self.span.set_status(Status::error(error));
        }
    }

    /// The op became dead after this attempt, for `reason` (decided `at`, when the exchange
    /// ended, so the event falls inside the span).
    pub(crate) fn dead(&self, reason: &str, at: SystemTime) {
        self.span.add_event_with_timestamp(
            "outbox.op.dead",
            at,
            vec![KeyValue::new("outbox.reason", reason.to_owned())],
        );
    }
}

/// The span of a claim that took something (ops, unreadable rows, or superseded ops), from
/// `started` to now; superseded ops are an event on it. Its context, for the attempts' links.
pub(crate) fn claim_span(
    lease: &Lease,
    partition: Partition,
    started: SystemTime,
    claimed: &Claimed,
) -> Option<SpanContext> {
    if claimed.ops.is_empty() && claimed.unreadable.is_empty() && claimed.superseded == 0 {
        return None;
    }
    let tracer = global::tracer(SCOPE);
    let mut span = tracer
        .span_builder("claim")
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes([
            KeyValue::new("outbox.partition", i64::from(partition.index())),
            KeyValue::new("outbox.partition_lease", lease.resource.to_string()),
            KeyValue::new("outbox.partition_fence", lease.token.get()),
            KeyValue::new("outbox.claimed", claimed.ops.len() as i64),
            KeyValue::new("outbox.unreadable", claimed.unreadable.len() as i64),
        ])
        .start_with_context(&tracer, &Context::new());
    if claimed.superseded > 0 {
        span.add_event(
            "outbox.superseded",
            vec![
                KeyValue::new("outbox.superseded", claimed.superseded as i64),
                KeyValue::new(
                    "outbox.reason",
                    "pending ops whose token is no longer the newest of their resource (expire_with_generation) are never sent",
                ),
            ],
        );
    }
    let context = span.span_context().clone();
    span.end();
    context.is_valid().then_some(context)
}

/// What became of a batch of completions.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BatchOutcome {
    /// Written.
    pub(crate) applied: usize,
    /// Left to the current leader (G9).
    pub(crate) discarded: usize,
    /// Not written.
    pub(crate) dropped: usize,
}

/// The span of one batch of completions written under `lease`, from `started` to now,
/// linked to the attempts it recorded.
pub(crate) fn complete_span(
    lease: &Lease,
    started: SystemTime,
    attempts: Vec<SpanContext>,
    outcome: BatchOutcome,
) {
    let tracer = global::tracer(SCOPE);
    let total = outcome.applied + outcome.discarded + outcome.dropped;
    let mut span = tracer
        .span_builder("complete")
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes([
            KeyValue::new("outbox.partition_lease", lease.resource.to_string()),
            KeyValue::new("outbox.partition_fence", lease.token.get()),
            KeyValue::new("outbox.completions", total as i64),
            KeyValue::new("outbox.applied", outcome.applied as i64),
            KeyValue::new("outbox.discarded", outcome.discarded as i64),
            KeyValue::new("outbox.dropped", outcome.dropped as i64),
        ])
        .with_links(attempts.into_iter().map(Link::with_context).collect())
        .start_with_context(&tracer, &Context::new());
    if outcome.discarded + outcome.dropped > 0 {
        span.set_status(Status::error(
            "some completions were not applied (discarded or dropped)",
        ));
    }
    span.end();
}

/// A stored span as a remote parent (or link), from its W3C traceparent and tracestate.
fn remote_parent(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
    let mut carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    if let Some(ts) = tracestate {
        carrier.insert("tracestate".to_owned(), ts.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// `context` as a W3C traceparent: `00-<trace id>-<span id>-<flags>`.
pub(crate) fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// `url` for `url.full`: the values of its query and any credentials replaced by `REDACTED`
/// (the semantic conventions' marker). Parameter names stay: they say which call it was; the
/// values may be personal data.
pub(crate) fn url_full(url: &Url) -> String {
    let mut url = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_username("REDACTED");
        let _ = url.set_password(Some("REDACTED"));
    }
    if let Some(query) = url.query() {
        let names: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}=REDACTED"),
                None => pair.to_owned(),
            })
            .collect();
        url.set_query(Some(&names.join("&")));
    }
    url.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_full_keeps_the_query_names_and_drops_their_values_and_credentials() {
        let cases = [
            (
                "http://127.0.0.1:9000/api/v1/x?account=1842&token=abc&draft",
                "http://127.0.0.1:9000/api/v1/x?account=REDACTED&token=REDACTED&draft",
            ),
            (
                "https://u:pw@api.example/v2/items",
                "https://REDACTED:REDACTED@api.example/v2/items",
            ),
            ("https://api.example/", "https://api.example/"),
        ];
        for (url, full) in cases {
            assert_eq!(url_full(&Url::parse(url).unwrap()), full);
        }
    }

    #[test]
    fn a_stored_traceparent_becomes_the_remote_parent_and_back() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = remote_parent(tp, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).unwrap();
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc), tp);
        assert_eq!(sc.trace_state().get("rojo"), Some("00f067aa0ba902b7"));
        assert!(
            remote_parent(
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                None
            )
            .is_none()
        );
    }
}
