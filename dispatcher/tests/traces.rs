//! Traces end to end (issue 17): an in-process dispatcher on SQLite whose spans go to a real
//! OTLP/HTTP receiver on 127.0.0.1 (`POST /v1/traces`, protobuf decoded with
//! opentelemetry-proto). Each attempt is a child of the producer's span, the destination gets
//! the attempt's own traceparent (and the producer's tracestate), a retry's span links to the
//! attempt before it, claims and completions have spans, a dead op says why, and a collector
//! that is down slows nothing and is counted.
//!
//! The tracer provider and the `tracing` subscriber are process-wide: [`setup`] installs them
//! once, pointed at the one [`Collector`] of this binary, and the tests take turns ([`SERIAL`])
//! because one of them stops the collector.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use common::{all, destination, dispatch, post, until_states};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use outbox_dispatcher::Config;
use outbox_dispatcher::telemetry::{self, LogFormat, Traces};
use outbox_producer::Operation;
use outbox_tests::{Receiver, Reply, TestDb, lease, wait_for, wait_until};
use prost::Message as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The producer's context in the tests that set it explicitly.
const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// One test at a time: they share the collector, and one stops it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A span as the collector received it: ids in hex, attribute values as text.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    kind: i32,
    /// 0 unset, 1 ok, 2 error.
    status: i32,
    attributes: HashMap<String, String>,
    events: Vec<(String, HashMap<String, String>)>,
    /// The span ids it links to.
    links: Vec<String>,
    /// Each link's `outbox.link` attribute (what the linked span is), by span id.
    link_kinds: HashMap<String, String>,
}

impl Exported {
    fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The OTLP/HTTP receiver: keeps every span it is sent. It runs on a runtime of its own (each
/// test has its own, which ends with it), which [`Collector::stop`] shuts down, closing the
/// port and every connection.
struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl Collector {
    /// The binary's collector, listening from the first call on.
    fn get() -> &'static Collector {
        static COLLECTOR: OnceLock<Collector> = OnceLock::new();
        COLLECTOR.get_or_init(|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let collector = Collector {
                addr: listener.local_addr().unwrap(),
                spans: Arc::default(),
                runtime: Mutex::new(None),
            };
            collector.serve(listener);
            collector
        })
    }

    fn serve(&self, listener: std::net::TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(receive))
            .with_state(self.spans.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = axum::serve(listener, app).await;
        });
        *self.runtime.lock().unwrap() = Some(runtime);
    }

    /// Closes the port and every open connection.
    fn stop(&self) {
        if let Some(runtime) = self.runtime.lock().unwrap().take() {
            runtime.shutdown_background();
        }
    }

    /// Listens again on the same port.
    fn restart(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match std::net::TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("collector: rebinding {}: {e}", self.addr);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (30 s at most) for a span that `matches`.
    async fn span(&self, what: &str, matches: impl Fn(&Exported) -> bool) -> Exported {
        wait_for(Duration::from_secs(30), what, || {
            let found = self.spans().into_iter().find(|s| matches(s));
            async move { found }
        })
        .await
    }
}

/// Restarts the collector when dropped, so a failing test leaves it up for the others.
struct Restart(&'static Collector);

impl Drop for Restart {
    fn drop(&mut self) {
        self.0.restart();
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<Exported>>>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP/protobuf body");
    let mut got = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| text(&r.attributes));
        let service = resource
            .and_then(|r| r.get("service.name").cloned())
            .unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(Exported {
                service: service.clone(),
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                name: span.name,
                kind: span.kind,
                status: span.status.map_or(0, |s| s.code),
                attributes: text(&span.attributes),
                events: span
                    .events
                    .iter()
                    .map(|e| (e.name.clone(), text(&e.attributes)))
                    .collect(),
                links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
                link_kinds: span
                    .links
                    .iter()
                    .map(|l| {
                        let kind = text(&l.attributes).remove("outbox.link");
                        (hex(&l.span_id), kind.unwrap_or_default())
                    })
                    .collect(),
            });
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// Installs, once, the process's tracer provider (exporting to the collector, with a small
/// queue and a short export timeout) and the subscriber with its OpenTelemetry layer: what
/// `main` does from `[telemetry]`.
fn setup() -> &'static Collector {
    static TRACES: OnceLock<Traces> = OnceLock::new();
    let collector = Collector::get();
    TRACES.get_or_init(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let file = format!(
            "{}queue_size = 256\nexport_timeout = \"1s\"\n",
            telemetry_table(collector)
        );
        let config = Config::load(Some(&file), &HashMap::new()).unwrap();
        let traces = Traces::start(&config.telemetry.expect("traces on")).unwrap();
        telemetry::install(LogFormat::Json, "warn", Some(&traces)).unwrap();
        traces
    });
    collector
}

/// The `[telemetry]` table that turns traces on for an in-process dispatcher (whose spans
/// reach the provider [`setup`] installed).
fn telemetry_table(collector: &Collector) -> String {
    format!(
        "[telemetry]\notlp_endpoint = \"http://{}\"\n",
        collector.addr
    )
}

/// `traceparent` as (trace id, parent id).
fn ids(traceparent: &str) -> (&str, &str) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    (parts[1], parts[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_is_a_child_of_the_producers_span_and_the_destination_gets_its_context() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "statement:account-1842:2026-07").await;
    let op = Operation::post("statements", "/v1/statements?account=1842&draft=false")
        .json(&serde_json::json!({"account": 1842}))
        .idempotency_key("statement-1842-2026-07")
        .traceparent(format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"))
        .tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        .build()
        .unwrap();
    let op_id = outbox.enqueue(&lease, &op).await.unwrap().op_id.to_string();
    let config = destination("statements", &receiver, "") + &telemetry_table(collector);
    let running = dispatch(&db, &config);
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;

    let attempt = collector
        .span("the attempt's span is exported", |s| {
            s.attr("outbox.op_id") == op_id
        })
        .await;
    assert_eq!(
        (attempt.trace_id.as_str(), attempt.parent.as_str()),
        (PRODUCER_TRACE, PRODUCER_SPAN),
        "the attempt is a child of the producer's span"
    );
    assert_eq!(
        (attempt.name.as_str(), attempt.kind),
        ("POST", 3),
        "an HTTP client span"
    );
    assert_eq!(attempt.service, "outbox-dispatcher");
    let port = receiver.url().rsplit(':').next().unwrap().to_owned();
    let expected = [
        ("http.request.method", "POST"),
        ("server.address", "127.0.0.1"),
        ("server.port", port.as_str()),
        (
            "url.full",
            &format!(
                "{}/api/v1/statements?account=REDACTED&draft=REDACTED",
                receiver.url()
            ),
        ),
        ("http.response.status_code", "200"),
        ("outbox.attempt", "1"),
        ("outbox.fence", &lease.token.to_string()),
        ("outbox.destination", "statements"),
    ];
    for (key, value) in expected {
        assert_eq!(attempt.attr(key), value, "{key} in {attempt:#?}");
    }
    assert!(
        !attempt.attributes.contains_key("error.type"),
        "{attempt:#?}"
    );

    let got = receiver.received();
    let sent = got[0].header("traceparent");
    assert_eq!(
        sent,
        format!("00-{PRODUCER_TRACE}-{}-01", attempt.span_id),
        "the destination's parent is the attempt"
    );
    assert_eq!(
        got[0].header("tracestate"),
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        "the producer's tracestate travels on"
    );

    let claim = collector
        .span("the claim's span is exported", |s| {
            s.name == "claim" && attempt.links.contains(&s.span_id)
        })
        .await;
    assert_eq!(attempt.link_kinds[&claim.span_id], "claim");
    assert_eq!(
        attempt.links.len(),
        1,
        "a first attempt links only its claim"
    );
    assert!(
        claim.attr("outbox.claimed").parse::<u32>().unwrap() >= 1,
        "{claim:#?}"
    );
    let complete = collector
        .span("the completion batch's span is exported", |s| {
            s.name == "complete" && s.links.contains(&attempt.span_id)
        })
        .await;
    assert!(
        complete.attr("outbox.applied").parse::<u32>().unwrap() >= 1,
        "{complete:#?}"
    );
    eprintln!(
        "span tree: producer {PRODUCER_TRACE} (span {PRODUCER_SPAN}) → attempt {} {} (span {}, parent {}, linked to claim {}) → destination traceparent {sent} (parent {}); completion batch {} links attempt {}",
        attempt.name,
        attempt.attr("url.full"),
        attempt.span_id,
        attempt.parent,
        claim.span_id,
        ids(sent).1,
        complete.span_id,
        attempt.span_id,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_built_in_a_traced_span_takes_its_context() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "invoice:7").await;
    let producer = tracing::info_span!("issue invoice", invoice = 7);
    let op = producer.in_scope(|| {
        Operation::post("billing", "/invoices")
            .idempotency_key("invoice-7")
            .build()
            .unwrap()
    });
    let producer_context = producer.context().span().span_context().clone();
    let (trace_id, span_id) = (
        producer_context.trace_id().to_string(),
        producer_context.span_id().to_string(),
    );
    drop(producer);
    let op_id = outbox.enqueue(&lease, &op).await.unwrap().op_id.to_string();
    let config = destination("billing", &receiver, "") + &telemetry_table(collector);
    let running = dispatch(&db, &config);
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;

    let produced = collector
        .span("the producer's span is exported", |s| s.span_id == span_id)
        .await;
    assert_eq!(produced.name, "issue invoice");
    let attempt = collector
        .span("the attempt's span is exported", |s| {
            s.attr("outbox.op_id") == op_id
        })
        .await;
    assert_eq!(
        (attempt.trace_id.as_str(), attempt.parent.as_str()),
        (trace_id.as_str(), span_id.as_str()),
        "the op took the producer's span's context"
    );
    let sent = receiver.received()[0].header("traceparent").to_owned();
    assert_eq!(ids(&sent), (trace_id.as_str(), attempt.span_id.as_str()));
    eprintln!(
        "span tree: producer span \"{}\" {trace_id} (span {span_id}) → attempt {} /api/invoices (span {}, parent {}) → destination traceparent parent {}",
        produced.name,
        attempt.name,
        attempt.span_id,
        attempt.parent,
        ids(&sent).1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_op_leaves_an_event_saying_why_and_each_retry_is_a_span_linked_to_the_last() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    // The attempt's traceparent is kept by the completion statements, which differ by backend.
    for db in [TestDb::sqlite().await, TestDb::postgres().await] {
        retries_link_the_attempt_before(collector, &db).await;
    }
}

async fn retries_link_the_attempt_before(collector: &Collector, db: &TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/charge",
        [
            Reply::status(503),
            Reply::status(502),
            Reply::status(400).body("bad amount"),
        ],
    );
    let lease = lease(&outbox, "billing:9").await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let op = Operation::post("billing", "/charge")
        .idempotency_key("charge-9")
        .traceparent(format!("00-{trace}-b7ad6b7169203331-01"))
        .build()
        .unwrap();
    let enqueued = outbox.enqueue(&lease, &op).await.unwrap();
    let op_id = enqueued.op_id.to_string();
    let config = destination("billing", &receiver, "") + &telemetry_table(collector);
    let running = dispatch(db, &config);
    until_states(db, "the op is dead", all("dead")).await;
    running.stop().await;

    let attempt = |n: &'static str| {
        let op_id = op_id.clone();
        move |s: &Exported| s.attr("outbox.op_id") == op_id && s.attr("outbox.attempt") == n
    };
    let first = collector.span("the first attempt", attempt("1")).await;
    let second = collector.span("the second attempt", attempt("2")).await;
    let third = collector.span("the third attempt", attempt("3")).await;
    for (span, status) in [(&first, "503"), (&second, "502"), (&third, "400")] {
        assert_eq!(
            (span.trace_id.as_str(), span.parent.as_str()),
            (trace, "b7ad6b7169203331")
        );
        assert_eq!(span.attr("http.response.status_code"), status);
        assert_eq!(span.attr("error.type"), status);
        assert_eq!(span.status, 2, "an error span");
    }
    // Each retry is a new span linked to the attempt before it (and to its own claim).
    assert!(
        !first.link_kinds.values().any(|k| k == "previous_attempt"),
        "{first:#?}"
    );
    assert_eq!(second.link_kinds[&first.span_id], "previous_attempt");
    assert_eq!(third.link_kinds[&second.span_id], "previous_attempt");
    assert_eq!(
        [&second, &third].map(|s| s.links.len()),
        [2, 2],
        "the claim and the attempt before"
    );
    for span in [&first, &second] {
        assert!(
            span.events.is_empty(),
            "a retried op is not dead: {span:#?}"
        );
    }
    let (event, why) = &third.events[0];
    assert_eq!(event, "outbox.op.dead", "{third:#?}");
    assert_eq!(why["outbox.reason"], "HTTP 400: not retryable");
    let sent: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| ids(r.header("traceparent")).1.to_owned())
        .collect();
    let spans = [&first, &second, &third].map(|s| s.span_id.clone());
    assert_eq!(sent, spans);
    // Each attempt row keeps its span's traceparent, for outboxctl show.
    let detail = db
        .store()
        .await
        .admin_op_show(enqueued.seq)
        .await
        .unwrap()
        .unwrap();
    let kept: Vec<String> = detail
        .attempt_history
        .iter()
        .map(|a| ids(a.trace_context.as_deref().unwrap_or("-")).1.to_owned())
        .collect();
    assert_eq!(kept, spans);
    eprintln!(
        "retries ({:?}): attempt 1 span {} (503) ← linked by attempt 2 span {} (502) ← linked by attempt 3 span {} (400, event outbox.op.dead), all children of {trace}/b7ad6b7169203331",
        db.kind(),
        first.span_id,
        second.span_id,
        third.span_id
    );
}

/// With the default parent-based sampler, a producer's unsampled trace stays unsampled, and
/// the destination still continues it below the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_producer_trace_is_continued_unsampled() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "sampling:1").await;
    let trace = "5e5f5a0b1c2d3e4f5a6b7c8d9e0f1a2b";
    let op = Operation::post("hooks", "/ping")
        .idempotency_key("ping-1")
        .traceparent(format!("00-{trace}-{PRODUCER_SPAN}-00"))
        .build()
        .unwrap();
    outbox.enqueue(&lease, &op).await.unwrap();
    let config = destination("hooks", &receiver, "") + &telemetry_table(collector);
    let running = dispatch(&db, &config);
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;
    let sent = receiver.received()[0].header("traceparent").to_owned();
    let (trace_id, parent) = ids(&sent);
    assert_eq!(trace_id, trace);
    assert_ne!(
        parent, PRODUCER_SPAN,
        "the attempt has a span id of its own"
    );
    assert!(sent.ends_with("-00"), "still unsampled: {sent}");
    // Spans are exported in the order they ended: once one that ended after the attempt is
    // in, the attempt's would be too.
    let sentinel = tracing::info_span!("sentinel");
    let sentinel_id = sentinel
        .context()
        .span()
        .span_context()
        .span_id()
        .to_string();
    drop(sentinel);
    collector
        .span("a span that ended after the attempt", |s| {
            s.span_id == sentinel_id
        })
        .await;
    assert!(
        collector.spans().iter().all(|s| s.trace_id != trace),
        "nothing of an unsampled trace is exported"
    );
}

/// Also: an op without a trace context starts a trace of its own at its attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_ops_leave_an_event_on_the_claim_span() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let old = lease(&outbox, "doc:1").await;
    let stale = Operation::post("docs", "/render")
        .idempotency_key("old-gen")
        .expire_with_generation()
        .build()
        .unwrap();
    outbox.enqueue(&old, &stale).await.unwrap();
    outbox.release(&old).await.unwrap();
    let newer = lease(&outbox, "doc:1").await;
    let plain = post("docs", "/render", "new");
    let op_id = outbox
        .enqueue(&newer, &plain)
        .await
        .unwrap()
        .op_id
        .to_string();
    let config = destination("docs", &receiver, "") + &telemetry_table(collector);
    let running = dispatch(&db, &config);
    until_states(
        &db,
        "the old op is superseded, the new one delivered",
        |s| s == ["superseded", "delivered"],
    )
    .await;
    running.stop().await;

    let claim = collector
        .span("a claim span with a superseded event", |s| {
            s.name == "claim" && s.events.iter().any(|(e, _)| e == "outbox.superseded")
        })
        .await;
    let (_, event) = claim
        .events
        .iter()
        .find(|(e, _)| e == "outbox.superseded")
        .unwrap();
    assert_eq!(event["outbox.superseded"], "1", "{claim:#?}");
    let got = receiver.received();
    assert_eq!(got.len(), 1, "a superseded op is never sent");
    let attempt = collector
        .span("the new op's attempt", |s| s.attr("outbox.op_id") == op_id)
        .await;
    assert_eq!(attempt.parent, "", "no producer context: a root span");
    let sent = got[0].header("traceparent");
    assert_eq!(
        ids(sent),
        (attempt.trace_id.as_str(), attempt.span_id.as_str())
    );
}

/// The dropped-spans counter on /metrics.
fn spans_dropped() -> u64 {
    let page = outbox_dispatcher::metrics::handle().render();
    page.lines()
        .find_map(|l| l.strip_prefix("outbox_trace_spans_dropped_total "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Enqueues `n` unordered ops and times a dispatcher with `extra` config until all are
/// delivered.
async fn deliver(n: usize, extra: &str) -> Duration {
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "batch:1").await;
    for i in 0..n {
        let op = Operation::post("bulk", format!("/item/{i}"))
            .idempotency_key(format!("item-{i}"))
            .unordered()
            .traceparent(format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"))
            .build()
            .unwrap();
        outbox.enqueue(&lease, &op).await.unwrap();
    }
    let started = Instant::now();
    let running = dispatch(&db, &(destination("bulk", &receiver, "") + extra));
    until_states(&db, "every op is delivered", all("delivered")).await;
    let took = started.elapsed();
    running.stop().await;
    assert_eq!(receiver.received().len(), n);
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_delivery_keeps_its_pace_and_dropped_spans_are_counted() {
    let _turn = SERIAL.lock().await;
    let collector = setup();
    let without = deliver(200, "").await;
    collector.stop();
    let _restart = Restart(collector);
    let before = spans_dropped();
    let with = deliver(200, &telemetry_table(collector)).await;
    eprintln!("200 ops: {without:?} without traces, {with:?} with traces and the collector down");
    assert!(
        with <= without * 3 + Duration::from_secs(2),
        "{with:?} with traces against {without:?} without"
    );
    wait_until(
        Duration::from_secs(30),
        "the dropped spans are counted",
        || async { spans_dropped() > before },
    )
    .await;
    eprintln!(
        "outbox_trace_spans_dropped_total: {before} before, {} after",
        spans_dropped()
    );
}
