//! The caller's current trace context, for ops built without an explicit traceparent
//! (feature `otel`): the current `tracing` span's OpenTelemetry context (tracing-opentelemetry),
//! else OpenTelemetry's current context, as the W3C `traceparent` and `tracestate` headers.

/// The current span's context as `(traceparent, tracestate)`, if there is a valid one:
/// `00-<trace id>-<span id>-<flags>`, and the vendors' list when it is not empty.
#[cfg(feature = "otel")]
pub(crate) fn current_context() -> Option<(String, Option<String>)> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let from_span = tracing::Span::current().context();
    [from_span, opentelemetry::Context::current()]
        .iter()
        .map(|cx| cx.span().span_context().clone())
        .find(|sc| sc.is_valid())
        .map(|sc| {
            let traceparent = format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            );
            let tracestate = sc.trace_state().header();
            (traceparent, Some(tracestate).filter(|ts| !ts.is_empty()))
        })
}

/// Without the `otel` feature there is no current trace context to take.
#[cfg(not(feature = "otel"))]
pub(crate) fn current_context() -> Option<(String, Option<String>)> {
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
        assert_eq!(current_context(), None);
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("congo", "t61rcWkgMzE")]).unwrap(),
        );
        let _attached = opentelemetry::Context::new()
            .with_remote_span_context(sc)
            .attach();
        assert_eq!(
            current_context(),
            Some((
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
                Some("congo=t61rcWkgMzE".to_owned())
            ))
        );
    }
}
