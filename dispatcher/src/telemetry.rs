//! Traces and the log lines that name them. [`Traces::start`] sets up the process's
//! OpenTelemetry provider from `[telemetry]` (a bounded export queue, `export`); [`install`]
//! sets the process's `tracing` subscriber (`logs`). Both are process-wide and are set once by
//! `main` (or a test binary); [`crate::run`] needs neither: it makes its spans (`spans`) when
//! `[telemetry]` is on, and they go wherever the process's provider and subscriber send them.

mod export;
mod logs;
mod spans;

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config::{Sampler, TelemetryConfig};

pub use logs::LogFormat;
pub(crate) use spans::{AttemptSpan, BatchOutcome, claim_span, complete_span};

/// The longest [`Traces::shutdown`] waits for the last spans to be exported.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Why traces or logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (the message never holds the endpoint).
    #[error("telemetry: cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// The export thread could not be started.
    #[error("telemetry: cannot start the export thread: {0}")]
    Thread(std::io::Error),
    /// Another `tracing` subscriber is already installed.
    #[error("telemetry: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
}

/// The process's tracer provider while traces are on.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Starts exporting spans as `config` says, and makes this the process's global tracer
    /// provider (claims and completions use it). Spans of attempts reach it through the
    /// subscriber [`install`] sets with it. Call it once per process.
    pub fn start(config: &TelemetryConfig) -> Result<Traces, TelemetryError> {
        // The drop counter must have a recorder from the first span on.
        crate::metrics::handle();
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(export::BoundedExport::start(config)?)
            .with_sampler(sampler(config.sampler))
            .with_resource(resource)
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Traces { provider })
    }

    /// Exports what is still queued and stops, waiting at most [`SHUTDOWN_WAIT`] (a collector
    /// that is down does not hold up the exit longer). It blocks: call it after the runtime
    /// stopped, or from `spawn_blocking`.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::warn!(error = %e, "traces were not all exported at shutdown");
        }
    }
}

/// Sets the process's `tracing` subscriber: log lines on stderr in `format`, filtered by
/// `RUST_LOG` (else `default_filter`); with `traces`, the OpenTelemetry layer that exports
/// the dispatcher's spans, and JSON lines that carry `trace_id` and `span_id`.
pub fn install(
    format: LogFormat,
    default_filter: &str,
    traces: Option<&Traces>,
) -> Result<(), TelemetryError> {
    use std::io::IsTerminal as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let tracer = traces.map(|t| t.provider.tracer(spans::SCOPE));
    let ansi = std::io::stderr().is_terminal();
    logs::subscriber(format, filter, tracer, std::io::stderr, ansi).try_init()?;
    Ok(())
}

/// The SDK's sampler for `sampler`.
fn sampler(sampler: Sampler) -> opentelemetry_sdk::trace::Sampler {
    use opentelemetry_sdk::trace::Sampler as S;
    let parent_based = |root| S::ParentBased(Box::new(root));
    match sampler {
        Sampler::AlwaysOn => S::AlwaysOn,
        Sampler::AlwaysOff => S::AlwaysOff,
        Sampler::TraceIdRatio(r) => S::TraceIdRatioBased(r),
        Sampler::ParentBasedAlwaysOn => parent_based(S::AlwaysOn),
        Sampler::ParentBasedAlwaysOff => parent_based(S::AlwaysOff),
        Sampler::ParentBasedTraceIdRatio(r) => parent_based(S::TraceIdRatioBased(r)),
    }
}
