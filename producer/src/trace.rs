//! The caller's current trace context, for ops built without an explicit traceparent
//! (feature `otel`): the current `tracing` span's OpenTelemetry context (tracing-opentelemetry),
//! else OpenTelemetry's current context. Only the W3C `traceparent` is kept: the outbox stores
//! no `tracestate` (it would need a column of its own).

/// The current span's context as `00-<trace id>-<span id>-<flags>`, if there is a valid one.
#[cfg(feature = "otel")]
pub(crate) fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let from_span = tracing::Span::current().context();
    [from_span, opentelemetry::Context::current()]
        .iter()
        .map(|cx| cx.span().span_context().clone())
        .find(|sc| sc.is_valid())
        .map(|sc| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
}

/// Without the `otel` feature there is no current trace context to take.
#[cfg(not(feature = "otel"))]
pub(crate) fn current_traceparent() -> Option<String> {
    None
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };

    use super::*;

    #[test]
    fn the_current_opentelemetry_context_is_taken_when_no_span_has_one() {
        assert_eq!(current_traceparent(), None);
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let _attached = opentelemetry::Context::new()
            .with_remote_span_context(sc)
            .attach();
        assert_eq!(
            current_traceparent().as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }
}
