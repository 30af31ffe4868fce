//! The process's `tracing` subscriber: log lines on stderr (text or JSON, filtered by
//! `RUST_LOG`), and, when traces are on, the OpenTelemetry layer that turns the dispatcher's
//! spans into exported spans. A JSON line written inside a span with an OpenTelemetry context
//! carries its `trace_id` and `span_id`, which tracing-subscriber's formatter does not do.

use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId};
use opentelemetry_sdk::trace::SdkTracer;
use tracing::dispatcher::WeakDispatch;
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, filter_fn};
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, MakeWriter};
use tracing_subscriber::layer::{Layer, SubscriberExt as _};
use tracing_subscriber::registry::{LookupSpan, Registry};

use super::spans::SPAN_TARGET;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object a line, with `trace_id` and `span_id` inside a traced span.
    Json,
}

/// The subscriber: log lines in `format` to `writer`, filtered by `filter`; and spans to
/// `tracer`'s provider when traces are on.
pub(crate) fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    tracer: Option<SdkTracer>,
    writer: W,
    ansi: bool,
) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    // The dispatcher's spans are for traces only: log lines carry their ids instead of their
    // attributes (an attempt's URL and the like stay out of the logs).
    let logged = filter.and(filter_fn(|m| !(m.is_span() && m.target() == SPAN_TARGET)));
    let dispatch = Arc::new(OnceLock::new());
    let log = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(ansi)
            .with_filter(logged)
            .boxed(),
        LogFormat::Json => {
            let layer = tracing_subscriber::fmt::layer().json().with_writer(writer);
            match &tracer {
                Some(_) => layer
                    .event_format(JsonWithTraceIds {
                        inner: tracing_subscriber::fmt::format().json(),
                        dispatch: dispatch.clone(),
                    })
                    .with_filter(logged)
                    .boxed(),
                None => layer.with_filter(logged).boxed(),
            }
        }
    };
    let registry = Registry::default().with(log);
    let built = match tracer {
        Some(tracer) => Dispatch::new(registry.with(otel_layer(tracer))),
        None => Dispatch::new(registry),
    };
    let _ = dispatch.set(built.downgrade());
    built
}

/// The OpenTelemetry layer: spans only (log lines do not become span events), at INFO or
/// above, without the code location and thread attributes tracing-opentelemetry adds by
/// default.
fn otel_layer<S>(tracer: SdkTracer) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            filter_fn(|m| m.is_span() && *m.level() <= tracing::Level::INFO)
                .with_max_level_hint(LevelFilter::INFO),
        )
}

/// tracing-subscriber's JSON line with `"trace_id"` and `"span_id"` added when the event is
/// inside a span with a valid OpenTelemetry context (the innermost such span).
struct JsonWithTraceIds {
    inner: Format<Json>,
    /// The subscriber this formatter belongs to, to find span contexts in (set once built).
    dispatch: Arc<OnceLock<WeakDispatch>>,
}

impl<S> FormatEvent<S, JsonFields> for JsonWithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace_id, span_id)) = self.trace_ids(ctx, event) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        // One JSON object and a newline: the ids go in before its closing brace.
        match line.trim_end().strip_suffix('}') {
            Some(object) => writeln!(
                writer,
                "{object},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            None => writer.write_str(&line),
        }
    }
}

impl JsonWithTraceIds {
    /// The ids of the innermost span around `event` that has a valid OpenTelemetry context.
    /// Spans are looked up in the registry itself, not through the log filter, which leaves
    /// the dispatcher's own spans out.
    fn trace_ids<S>(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        event: &Event<'_>,
    ) -> Option<(TraceId, SpanId)>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let dispatch = self.dispatch.get()?.upgrade()?;
        let leaf = match event.parent() {
            Some(id) => id.clone(),
            None if event.is_contextual() => ctx.current_span().id()?.clone(),
            None => return None,
        };
        let registry = dispatch.downcast_ref::<Registry>()?;
        let scope: Vec<_> = registry.span(&leaf)?.scope().map(|s| s.id()).collect();
        scope.iter().find_map(|id| {
            let cx = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
            let span = cx.span();
            let sc = span.span_context();
            sc.is_valid().then(|| (sc.trace_id(), sc.span_id()))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    use super::*;

    /// Log lines written into a shared buffer.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn json(&self) -> Vec<serde_json::Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        }
    }

    fn logging(format: LogFormat, traced: bool) -> (Dispatch, Lines) {
        let lines = Lines::default();
        let writer = lines.clone();
        // A provider without an exporter still gives spans valid, sampled contexts.
        let tracer = traced.then(|| SdkTracerProvider::builder().build().tracer("test"));
        let d = subscriber(
            format,
            EnvFilter::new("info"),
            tracer,
            move || writer.clone(),
            false,
        );
        (d, lines)
    }

    #[test]
    fn json_lines_inside_a_traced_span_carry_its_trace_and_span_ids() {
        let (dispatch, lines) = logging(LogFormat::Json, true);
        let (trace_id, span_id) = tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!(n = 1, "outside any span");
            let outer = tracing::info_span!("job", account = 1842);
            let inner = tracing::info_span!(target: SPAN_TARGET, parent: &outer, "attempt");
            let sc = inner.context().span().span_context().clone();
            inner.in_scope(|| tracing::warn!("inside"));
            tracing::warn!(parent: &inner, "explicitly inside");
            (sc.trace_id().to_string(), sc.span_id().to_string())
        });
        let got = lines.json();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].get("trace_id").is_none(), "{}", got[0]);
        assert_eq!(got[0]["fields"]["n"], 1);
        for line in &got[1..] {
            assert_eq!(line["trace_id"], trace_id.as_str(), "{line}");
            assert_eq!(line["span_id"], span_id.as_str(), "{line}");
            assert_eq!(line["level"], "WARN");
            // The dispatcher's own span is left out of the line: its ids stand for it.
            assert!(!line.to_string().contains("\"attempt\""), "{line}");
        }
        assert_eq!(got[1]["fields"]["message"], "inside");
    }

    #[test]
    fn without_traces_json_lines_are_tracing_subscribers_own() {
        let (dispatch, lines) = logging(LogFormat::Json, false);
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("job");
            span.in_scope(|| tracing::info!("inside"));
        });
        let got = lines.json();
        assert_eq!(got.len(), 1);
        assert!(got[0].get("trace_id").is_none(), "{}", got[0]);
        assert_eq!(got[0]["span"]["name"], "job");
    }
}
