//! The span processor: finished spans go into a bounded queue with `try_send`, and one
//! thread exports them in batches with the blocking OTLP/HTTP exporter. Nothing on the path of
//! an attempt ever waits for the collector: a span that finds the queue full, or whose batch
//! the collector does not take within `export_timeout`, is dropped and counted in
//! `outbox_trace_spans_dropped_total`.
//!
//! Why not the SDK's `BatchSpanProcessor`: it has the same bounded queue, but keeps its drop
//! count private (it only logs it at shutdown), and a batch whose export failed is lost
//! without being counted at all. An operator needs to see both on /metrics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter as _, SpanProcessor};

use super::TelemetryError;
use crate::config::TelemetryConfig;
use crate::metrics as m;

/// The most spans sent in one export.
const MAX_BATCH: usize = 512;
/// How long a span waits for its batch to fill before it is sent anyway.
const INTERVAL: Duration = Duration::from_secs(1);
/// How often the export thread looks for a flush or shutdown while idle.
const TICK: Duration = Duration::from_millis(100);

/// What the export thread is asked besides exporting.
enum Control {
    /// The provider's resource (service.name …), for the exporter.
    Resource(Resource),
    /// Export everything queued, then answer.
    Flush(SyncSender<()>),
    /// Export everything queued, shut the exporter down, answer and stop.
    Shutdown(SyncSender<()>),
}

/// The bounded queue and its export thread.
#[derive(Debug)]
pub(super) struct BoundedExport {
    spans: SyncSender<SpanData>,
    control: mpsc::Sender<Control>,
    closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// How long a flush or shutdown may wait for the thread (one export, and a margin).
    wait: Duration,
}

impl BoundedExport {
    /// Starts the thread that builds the exporter for `config` and uses it.
    pub(super) fn start(config: &TelemetryConfig) -> Result<BoundedExport, TelemetryError> {
        let (spans, queued) = mpsc::sync_channel(config.queue_size);
        let (control, asked) = mpsc::channel();
        let (built, is_built) = mpsc::sync_channel(1);
        let (endpoint, timeout) = (config.endpoint.expose().to_owned(), config.export_timeout);
        let thread = std::thread::Builder::new()
            .name("outbox-trace-export".into())
            .spawn(move || match Export::new(endpoint, timeout) {
                Ok(out) => {
                    let _ = built.send(Ok(()));
                    export_loop(out, &queued, &asked);
                }
                Err(e) => {
                    let _ = built.send(Err(e));
                }
            })
            .map_err(TelemetryError::Thread)?;
        is_built
            .recv()
            .unwrap_or_else(|_| Err(TelemetryError::Exporter("the export thread died".into())))?;
        Ok(BoundedExport {
            spans,
            control,
            closed: AtomicBool::new(false),
            thread: Mutex::new(Some(thread)),
            wait: config.export_timeout + Duration::from_secs(1),
        })
    }

    /// Asks the thread something and waits for its answer, at most `timeout`.
    fn ask(&self, what: fn(SyncSender<()>) -> Control, timeout: Duration) -> OTelSdkResult {
        let (answer, answered) = mpsc::sync_channel(1);
        self.control
            .send(what(answer))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        answered.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => OTelSdkError::Timeout(timeout),
            RecvTimeoutError::Disconnected => OTelSdkError::AlreadyShutdown,
        })
    }
}

/// `text` without `secret` in it (an error may quote the endpoint, which may hold credentials).
fn without(text: &str, secret: &str) -> String {
    text.replace(secret, "<endpoint>")
}

/// Counts `n` spans dropped.
fn dropped(n: usize) {
    metrics::counter!(m::TRACE_SPANS_DROPPED).increment(n as u64);
}

impl SpanProcessor for BoundedExport {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    /// Never blocks and never logs (it may run inside the tracing subscriber): a span that
    /// does not fit is counted.
    fn on_end(&self, span: SpanData) {
        if self.closed.load(Ordering::Relaxed) {
            return dropped(1);
        }
        // Full, or the thread is gone.
        if self.spans.try_send(span).is_err() {
            dropped(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, self.wait)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.closed.swap(true, Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.ask(Control::Shutdown, timeout)?;
        if let Some(thread) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = thread.join();
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.control.send(Control::Resource(resource.clone()));
    }
}

/// The export thread's side: the exporter, and whether its last export failed.
struct Export {
    exporter: opentelemetry_otlp::SpanExporter,
    /// Removed from error messages before they are logged (it may hold credentials).
    endpoint: String,
    failing: bool,
}

/// The export thread: a batch goes out when it is full or its first span has waited
/// [`INTERVAL`]; flushes and shutdown export what is queued first.
fn export_loop(mut out: Export, queued: &Receiver<SpanData>, asked: &Receiver<Control>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut due: Option<Instant> = None;
    loop {
        match asked.try_recv() {
            Ok(Control::Resource(resource)) => out.exporter.set_resource(&resource),
            Ok(Control::Flush(answer)) => {
                out.export_queued(queued, &mut batch);
                due = None;
                let _ = answer.send(());
            }
            Ok(Control::Shutdown(answer)) => {
                out.export_queued(queued, &mut batch);
                let _ = out.exporter.shutdown();
                let _ = answer.send(());
                return;
            }
            // The provider is gone without a shutdown: what is queued goes with it.
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {}
        }
        let wait = due.map_or(TICK, |d| {
            d.saturating_duration_since(Instant::now()).min(TICK)
        });
        match queued.recv_timeout(wait) {
            Ok(span) => {
                due.get_or_insert_with(|| Instant::now() + INTERVAL);
                batch.push(span);
                fill(queued, &mut batch);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if batch.len() >= MAX_BATCH || due.is_some_and(|d| Instant::now() >= d) {
            out.export(&mut batch);
            due = None;
        }
    }
}

/// Moves queued spans into `batch` until it is full or the queue is empty.
fn fill(queued: &Receiver<SpanData>, batch: &mut Vec<SpanData>) {
    while batch.len() < MAX_BATCH {
        let Ok(span) = queued.try_recv() else { break };
        batch.push(span);
    }
}

impl Export {
    /// The exporter to `endpoint`. Built, used and dropped on the export thread only: the
    /// blocking HTTP client panics inside an async runtime.
    fn new(endpoint: String, timeout: Duration) -> Result<Export, TelemetryError> {
        let failed = |e: &dyn std::fmt::Display| {
            TelemetryError::Exporter(without(&e.to_string(), &endpoint))
        };
        // Like every request the dispatcher makes: no proxy from the environment (it would
        // see every span), and bounded in time.
        let client = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("fenced-outbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| failed(&e))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.as_str())
            .with_timeout(timeout)
            .build()
            .map_err(|e| failed(&e))?;
        Ok(Export {
            exporter,
            endpoint,
            failing: false,
        })
    }

    /// Exports `batch` and everything queued behind it.
    fn export_queued(&mut self, queued: &Receiver<SpanData>, batch: &mut Vec<SpanData>) {
        loop {
            fill(queued, batch);
            if batch.is_empty() {
                return;
            }
            self.export(batch);
        }
    }

    /// Sends `batch` (emptying it); a batch the collector did not take is dropped and
    /// counted. Logs when exports start failing and when they work again, not every batch.
    fn export(&mut self, batch: &mut Vec<SpanData>) {
        let n = batch.len();
        // The exporter's future makes its blocking HTTP call when polled: no runtime needed.
        match futures_executor::block_on(self.exporter.export(std::mem::take(batch))) {
            Ok(()) => {
                if std::mem::replace(&mut self.failing, false) {
                    tracing::info!("trace export works again");
                }
            }
            Err(e) => {
                dropped(n);
                if !std::mem::replace(&mut self.failing, true) {
                    let error = without(&e.to_string(), &self.endpoint);
                    tracing::warn!(spans = n, %error, "cannot export spans to the collector; dropping them (outbox_trace_spans_dropped_total) until it answers again");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::TcpListener;

    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;
    use crate::config::Config;

    fn spans_dropped() -> u64 {
        crate::metrics::handle()
            .render()
            .lines()
            .find_map(|l| l.strip_prefix("outbox_trace_spans_dropped_total "))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// Waits (10 s at most) for the exporter to connect to `collector`.
    fn accept(collector: &TcpListener) -> std::net::TcpStream {
        collector.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match collector.accept() {
                Ok((connection, _)) => return connection,
                Err(_) if Instant::now() < deadline => std::thread::sleep(TICK / 10),
                Err(e) => panic!("the exporter never connected: {e}"),
            }
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_spans_without_waiting_for_the_collector() {
        // A collector that takes the connection and never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let file = format!(
            "[telemetry]\notlp_endpoint = \"http://{}\"\nqueue_size = 2\nexport_timeout = \"500ms\"\n",
            silent.local_addr().unwrap()
        );
        let config = Config::load(Some(&file), &HashMap::new()).unwrap();
        let processor = BoundedExport::start(&config.telemetry.unwrap()).unwrap();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let before = spans_dropped();
        tracer.start("first").end();
        // Once the exporter has connected, the thread waits for an answer that never comes.
        let _connection = accept(&silent);
        let started = Instant::now();
        for _ in 0..10 {
            tracer.start("more").end();
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(200),
            "ending spans waited: {took:?}"
        );
        // Two fit in the queue; the others are dropped at once.
        assert!(
            spans_dropped() >= before + 8,
            "{} after {before}",
            spans_dropped()
        );
        // The unanswered batch is dropped too, once its export times out.
        provider.shutdown().unwrap();
        assert!(
            spans_dropped() >= before + 9,
            "{} after {before}",
            spans_dropped()
        );
    }
}
