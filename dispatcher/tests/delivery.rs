//! The dispatcher delivering ops to real HTTP servers on 127.0.0.1, in-process, on every
//! backend: headers and signatures, retries and dead letters, Retry-After, timeouts recorded
//! as `unknown`, ordering per key, unrouted destinations, superseded ops never sent, and a
//! graceful shutdown that leaves nothing in flight.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{all, destination, dispatch, dispatch_listening, dispatch_with, post, until_states};
use outbox_dispatcher::Config;
use outbox_dispatcher::signing::SigningKey;
use outbox_producer::Operation;
use outbox_tests::{Receiver, Reply, TestDb, conformance, lease, wait_until, wait_until_explained};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn delivers_with_every_header_and_a_verifiable_signature(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "statement:account-1842:2026-07").await;
    let op = Operation::post("statements", "/v1/statements?draft=false")
        .header("X-Request-Source", "statement-job")
        .json(&serde_json::json!({"account": 1842}))
        .idempotency_key("statement-1842-2026-07")
        .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .build()
        .unwrap();
    let enqueued = outbox.enqueue(&lease, &op).await.unwrap();
    let extra = format!(
        "headers = {{ Authorization = \"Bearer ${{TEST_TOKEN}}\" }}\nsigning_secret = {SECRET:?}"
    );
    let running = dispatch(&db, &destination("statements", &receiver, &extra));
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;

    let got = receiver.received();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/api/v1/statements?draft=false")
    );
    assert_eq!(r.body, br#"{"account":1842}"#);
    let op_id = enqueued.op_id.to_string();
    let expected = [
        ("idempotency-key", "statement-1842-2026-07"),
        ("x-fencing-token", &lease.token.to_string()),
        ("x-outbox-op-id", &op_id),
        ("x-outbox-attempt", "1"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("x-request-source", "statement-job"),
        ("content-type", "application/json"),
        ("authorization", "Bearer s3cret-token"),
        ("webhook-id", &op_id),
    ];
    for (name, value) in expected {
        assert_eq!(r.header(name), value, "{name}");
    }
    let timestamp: i64 = r.header("webhook-timestamp").parse().unwrap();
    let signature = SigningKey::parse(SECRET)
        .unwrap()
        .sign(&op_id, timestamp, &r.body);
    assert_eq!(
        r.header("webhook-signature"),
        signature,
        "the Standard Webhooks signature verifies"
    );

    let attempts = db.attempts().await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (attempts[0].outcome.as_deref(), attempts[0].http_status),
        (Some("delivered"), Some(200))
    );
}

async fn retries_503_twice_then_delivers_with_the_same_key(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/charge",
        [
            Reply::status(503),
            Reply::status(503).body("busy"),
            Reply::status(200),
        ],
    );
    let lease = lease(&outbox, "billing:1").await;
    outbox
        .enqueue(&lease, &post("billing", "/charge", "charge-1"))
        .await
        .unwrap();
    let running = dispatch(&db, &destination("billing", &receiver, ""));
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;

    let got = receiver.received();
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .all(|r| r.header("idempotency-key") == "charge-1")
    );
    let numbers: Vec<&str> = got.iter().map(|r| r.header("x-outbox-attempt")).collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    let attempts = db.attempts().await;
    let outcomes: Vec<(Option<&str>, Option<i32>)> = attempts
        .iter()
        .map(|a| (a.outcome.as_deref(), a.http_status))
        .collect();
    assert_eq!(
        outcomes,
        [
            (Some("failed"), Some(503)),
            (Some("failed"), Some(503)),
            (Some("delivered"), Some(200))
        ]
    );
    assert_eq!(
        attempts[1].excerpt.as_deref(),
        Some("busy"),
        "the answer's body is kept as an excerpt"
    );
    assert_eq!(db.ops().await[0].attempts, 3);
}

async fn a_400_is_dead_at_once_and_stays_visible(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/charge",
        [Reply::status(400).body("{\"error\":\"bad amount\"}")],
    );
    let lease = lease(&outbox, "billing:2").await;
    outbox
        .enqueue(&lease, &post("billing", "/charge", "charge-2"))
        .await
        .unwrap();
    let running = dispatch(&db, &destination("billing", &receiver, ""));
    until_states(&db, "the op is dead", all("dead")).await;
    running.stop().await;
    assert_eq!(receiver.received().len(), 1);
    let op = &db.ops().await[0];
    assert!(
        op.last_error.as_deref().unwrap_or_default().contains("400"),
        "{op:?}"
    );
}

async fn retry_after_is_honoured(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/charge",
        [Reply::status(429).header("Retry-After", "2")],
    );
    let lease = lease(&outbox, "billing:3").await;
    outbox
        .enqueue(&lease, &post("billing", "/charge", "charge-3"))
        .await
        .unwrap();
    // The cap must allow a 2 s wait.
    let dest = format!(
        "[destinations.billing]\nbase_url = \"{}/api\"\ntimeout = \"1s\"\nretry = {{ base = \"50ms\", cap = \"5s\" }}\nbreaker = {{ enabled = false }}\n",
        receiver.url()
    );
    let running = dispatch(&db, &dest);
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;
    let got = receiver.received();
    assert_eq!(got.len(), 2);
    let waited = got[1].at - got[0].at;
    assert!(waited >= Duration::from_secs(2), "waited only {waited:?}");
}

async fn a_timeout_is_recorded_as_unknown_then_retried(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/slow",
        [Reply::status(200).after(Duration::from_secs(3))],
    );
    let lease = lease(&outbox, "slow:1").await;
    outbox
        .enqueue(&lease, &post("slow", "/slow", "slow-1"))
        .await
        .unwrap();
    let running = dispatch(&db, &destination("slow", &receiver, ""));
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;
    let outcomes: Vec<Option<String>> =
        db.attempts().await.into_iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [Some("unknown".to_owned()), Some("delivered".to_owned())]
    );
    assert_eq!(
        receiver.received().len(),
        2,
        "both attempts reached the destination"
    );
}

async fn g8_ops_of_one_key_arrive_in_order_while_keys_progress_in_parallel(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let mut leases = Vec::new();
    for k in 0..10 {
        leases.push(lease(&outbox, &format!("account:{k}")).await);
    }
    // 200 ops on key 0; 10 on each of the other 9 keys. Each takes 5 ms at the destination.
    let mut batches = Vec::new();
    for (k, lease) in leases.iter().enumerate() {
        let n = if k == 0 { 200 } else { 10 };
        let ops: Vec<Operation> = (0..n)
            .map(|i| post("ledger", &format!("/k{k}"), &format!("k{k}-{i:03}")))
            .collect();
        batches.push((lease.clone(), ops));
    }
    for (lease, ops) in &batches {
        outbox.enqueue_batch(lease, ops).await.unwrap();
    }
    for k in 0..10 {
        receiver.script(
            &format!("/api/k{k}"),
            (0..200).map(|_| Reply::status(200).after(Duration::from_millis(5))),
        );
    }
    let running = dispatch(&db, &destination("ledger", &receiver, ""));
    until_states(&db, "every op is delivered", all("delivered")).await;
    running.stop().await;
    let got = receiver.received();
    assert_eq!(got.len(), 290, "each op once");
    for k in 0..10 {
        let keys: Vec<&str> = got
            .iter()
            .filter(|r| r.path == format!("/api/k{k}"))
            .map(|r| r.header("idempotency-key"))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "key {k} out of order");
    }
    // The short keys finished long before the long one: they did not queue behind it.
    let last_short = got
        .iter()
        .filter(|r| r.path != "/api/k0")
        .map(|r| r.at)
        .max()
        .unwrap();
    let last_long = got
        .iter()
        .filter(|r| r.path == "/api/k0")
        .map(|r| r.at)
        .max()
        .unwrap();
    assert!(
        last_short < last_long,
        "other keys progressed in parallel with key 0"
    );
}

async fn unrouted_ops_wait_and_superseded_ops_are_never_sent(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let old = lease(&outbox, "doc:1").await;
    // Another destination, so only expire_with_generation (not supersede_pending) drops it.
    let stale_generation = Operation::post("previews", "/render")
        .idempotency_key("old-gen")
        .expire_with_generation()
        .build()
        .unwrap();
    outbox.enqueue(&old, &stale_generation).await.unwrap();
    outbox
        .enqueue(&old, &post("docs", "/render", "old-pending"))
        .await
        .unwrap();
    outbox.release(&old).await.unwrap();
    // An unrouted op holds its order key (G8 keeps the order), so it gets its own resource.
    let elsewhere = lease(&outbox, "doc:2").await;
    outbox
        .enqueue(&elsewhere, &post("nowhere", "/x", "unrouted"))
        .await
        .unwrap();
    let newer = lease(&outbox, "doc:1").await;
    let replacing = Operation::post("docs", "/render")
        .idempotency_key("new")
        .supersede_pending()
        .build()
        .unwrap();
    outbox.enqueue(&newer, &replacing).await.unwrap();

    let both = format!(
        "{}{}",
        destination("docs", &receiver, ""),
        destination("previews", &receiver, "")
    );
    let running = dispatch(&db, &both);
    until_states(&db, "the newest op is delivered", |s| {
        s.len() == 4 && s[3] == "delivered"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let states: Vec<(String, String)> = db
        .ops()
        .await
        .into_iter()
        .map(|o| (o.idempotency_key, o.state))
        .collect();
    let expected = [
        ("old-gen", "superseded"),
        ("old-pending", "superseded"),
        ("unrouted", "pending"),
        ("new", "delivered"),
    ];
    assert_eq!(
        db.ops().await[0].last_error.as_deref(),
        Some("token 1 is no longer the newest of its resource")
    );
    assert_eq!(states, expected.map(|(k, s)| (k.to_owned(), s.to_owned())));
    let keys: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").to_owned())
        .collect();
    assert_eq!(keys, ["new"], "superseded and unrouted ops were never sent");
}

async fn g12_graceful_shutdown_leaves_nothing_in_flight(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/api/work",
        (0..20).map(|_| Reply::status(200).after(Duration::from_millis(400))),
    );
    let lease = lease(&outbox, "work").await;
    let unordered: Vec<Operation> = (0..20)
        .map(|i| {
            Operation::post("work", "/work")
                .idempotency_key(format!("w{i}"))
                .unordered()
                .build()
                .unwrap()
        })
        .collect();
    outbox.enqueue_batch(&lease, &unordered).await.unwrap();
    let running = dispatch(&db, &destination("work", &receiver, ""));
    wait_until(
        Duration::from_secs(30),
        "attempts are in flight",
        || async { !receiver.received().is_empty() },
    )
    .await;
    running.stop().await;
    let states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
    assert!(
        states.iter().all(|s| s == "delivered" || s == "pending"),
        "{states:?}"
    );
    assert!(states.iter().any(|s| s == "delivered"));
    let leases = outbox.list_leases().await.unwrap();
    let partition = leases
        .iter()
        .find(|l| l.resource.as_str() == "dispatcher/0")
        .unwrap();
    assert!(!partition.held, "the partition lease was released");
}

/// A destination that hangs (30 s per request, past its 2 s timeout) does not delay another
/// destination's deliveries by more than a second.
async fn a_hanging_destination_does_not_delay_the_others(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let outbox = db.outbox().await;
    let (hanging, fast) = (Receiver::start().await, Receiver::start().await);
    hanging.script(
        "/api/x",
        (0..50).map(|_| Reply::status(200).after(Duration::from_secs(30))),
    );
    let lease = lease(&outbox, "mixed").await;
    let stuck: Vec<Operation> = (0..8)
        .map(|i| {
            Operation::post("hanging", "/x")
                .idempotency_key(format!("h{i}"))
                .unordered()
                .build()
                .unwrap()
        })
        .collect();
    outbox.enqueue_batch(&lease, &stuck).await.unwrap();
    let dests = format!(
        "{}{}",
        destination("hanging", &hanging, "max_in_flight = 4\ntimeout = \"2s\"")
            .replace("timeout = \"1s\"\n", ""),
        destination("fast", &fast, "")
    );
    let running = dispatch(&db, &dests);
    wait_until(
        Duration::from_secs(30),
        "the hanging destination holds requests",
        || async { hanging.received().len() >= 4 },
    )
    .await;
    let mut delays = Vec::new();
    for i in 0..5 {
        let op = Operation::post("fast", "/y")
            .idempotency_key(format!("f{i}"))
            .unordered()
            .build()
            .unwrap();
        let sent = std::time::Instant::now();
        outbox.enqueue(&lease, &op).await.unwrap();
        let key = format!("f{i}");
        wait_until(Duration::from_secs(10), "the fast op arrives", || async {
            fast.received()
                .iter()
                .any(|r| r.header("idempotency-key") == key)
        })
        .await;
        delays.push(sent.elapsed());
    }
    running.stop().await;
    println!("fast destination delays while another hangs: {delays:?}");
    assert!(
        delays.iter().all(|d| *d < Duration::from_secs(1)),
        "{delays:?}"
    );
}

/// /healthz and /readyz answer, and /metrics counts what was delivered.
async fn health_and_metrics_endpoints_answer(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "metered").await;
    outbox
        .enqueue(&lease, &post("metered", "/m", "m-1"))
        .await
        .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let running = dispatch_listening(
        &db,
        &destination("metered", &receiver, ""),
        &format!("127.0.0.1:{port}"),
    );
    until_states(&db, "the op is delivered", all("delivered")).await;
    let base = format!("http://127.0.0.1:{port}");
    let get = |path: &str| reqwest::get(format!("{base}{path}"));
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    for name in [
        "outbox_delivered_total",
        "outbox_attempts_total",
        "outbox_attempt_duration_seconds",
        "outbox_enqueue_to_delivery_seconds",
        "outbox_partition_leader",
        "outbox_pending_ops",
        "outbox_oldest_pending_age_seconds",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    assert!(metrics.contains("destination=\"metered\""), "{metrics}");
    running.stop().await;
}

/// A rate limit of 5/s spreads 10 ops over about a second; all are delivered.
async fn a_rate_limit_spreads_deliveries(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "limited").await;
    let ops: Vec<Operation> = (0..10)
        .map(|i| {
            Operation::post("limited", "/r")
                .idempotency_key(format!("r{i}"))
                .unordered()
                .build()
                .unwrap()
        })
        .collect();
    outbox.enqueue_batch(&lease, &ops).await.unwrap();
    let running = dispatch(
        &db,
        &destination("limited", &receiver, "rate_limit = \"5/s\""),
    );
    until_states(&db, "every op is delivered", all("delivered")).await;
    running.stop().await;
    let got = receiver.received();
    assert_eq!(got.len(), 10);
    let span = got.last().unwrap().at - got[0].at;
    println!("10 ops at 5/s took {span:?}");
    assert!(
        span >= Duration::from_millis(800),
        "the limit was not applied: {span:?}"
    );
}

/// Enqueues `n` ops to `destination`, each under an order key of its own (so they can all be
/// in flight at once), waits until all are delivered, and stops `running`.
async fn drain_one_per_key(
    db: &TestDb,
    running: Vec<common::Running>,
    destination: &str,
    n: usize,
) {
    let outbox = db.outbox().await;
    let lease = lease(&outbox, destination).await;
    let ops: Vec<Operation> = (0..n)
        .map(|i| {
            Operation::post(destination, "/op")
                .idempotency_key(format!("{destination}-{i:02}"))
                .order_key(format!("key-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    outbox.enqueue_batch(&lease, &ops).await.unwrap();
    until_states(db, "every op is delivered", all("delivered")).await;
    for r in running {
        r.stop().await;
    }
}

/// The most requests the destination was answering at once (each held for its delay).
fn peak_concurrency(got: &[outbox_tests::Received]) -> usize {
    let mut edges: Vec<(std::time::Instant, i32)> = got
        .iter()
        .flat_map(|r| [(r.at, 1), (r.at + r.delay, -1)])
        .collect();
    // An answer that ends as another arrives frees its slot first.
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

/// A destination's max_in_flight holds across all live dispatchers: three of them, each
/// leading its share of 4 partitions, never have more than 3 requests open at once at a
/// destination allowing 3 (each of them alone would allow 3).
async fn max_in_flight_holds_across_dispatchers(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let receiver =
        Receiver::start_with(|_| Reply::status(204).after(Duration::from_millis(150))).await;
    let dest = destination("narrow", &receiver, "max_in_flight = 3\ntimeout = \"2s\"");
    let running = common::three_settled(&db, &dest, "").await;
    drain_one_per_key(&db, running, "narrow", 48).await;
    let got = receiver.received();
    let peak = peak_concurrency(&got);
    println!("48 ops to a destination of max_in_flight 3 over 3 dispatchers: peak {peak} at once");
    assert_eq!(got.len(), 48);
    assert!(peak <= 3, "the limit was exceeded: {peak} at once");
    assert!(
        peak >= 2,
        "the dispatchers did not work in parallel: {peak}"
    );
}

/// A destination's rate_limit holds across all live dispatchers: 40 ops at 10/s over three of
/// them take about 3 s (the three parts of the burst make 9, then 10/s), never the burst of
/// each one alone (which would send 30 at once).
async fn rate_limit_holds_across_dispatchers(db: TestDb) {
    let receiver = Receiver::start().await;
    let dest = destination("slow", &receiver, "rate_limit = \"10/s\"");
    let running = common::three_settled(&db, &dest, "").await;
    drain_one_per_key(&db, running, "slow", 40).await;
    let mut at: Vec<std::time::Instant> = receiver.received().iter().map(|r| r.at).collect();
    at.sort_unstable();
    assert_eq!(at.len(), 40);
    // In any second, at most the burst (10 together) and a second's rate (10).
    let busiest = at
        .iter()
        .map(|t| {
            at.iter()
                .filter(|u| **u >= *t && **u < *t + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let span = *at.last().unwrap() - at[0];
    println!("40 ops at 10/s over 3 dispatchers took {span:?}, at most {busiest} in one second");
    assert!(busiest <= 20, "{busiest} requests in one second");
    assert!(
        span >= Duration::from_millis(2500),
        "the limit was not global: {span:?}"
    );
}

/// The held partition leases, as (resource, the count its holder serves), sorted.
async fn held_partitions(store: &outbox_store::Store) -> Vec<(String, Option<u32>)> {
    let mut held: Vec<(String, Option<u32>)> = store
        .lease_list()
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.held && l.resource.as_str().starts_with("dispatcher/"))
        .map(|l| (l.resource.to_string(), l.partitions))
        .collect();
    held.sort();
    held
}

/// Three ops on each of ten order keys (a fresh resource each wave), their idempotency keys
/// naming the wave.
async fn enqueue_wave(outbox: &outbox_producer::Outbox, wave: usize) {
    for k in 0..10 {
        let lease = lease(outbox, &format!("acct:{k}:wave-{wave}")).await;
        let ops: Vec<Operation> = (0..3)
            .map(|i| {
                Operation::post("ledger", format!("/k{k}"))
                    .idempotency_key(format!("k{k:02}-w{wave}-{i}"))
                    .order_key(format!("acct:{k}"))
                    .build()
                    .unwrap()
            })
            .collect();
        outbox.enqueue_batch(&lease, &ops).await.unwrap();
    }
}

/// `outboxctl partitions set` (the store call it makes) moves two running dispatchers from 2
/// partitions to 4: they step down and take the four partitions of the new count, ops
/// enqueued before and after are each sent once and in order per key, and a dispatcher
/// started with the old count afterwards refuses to serve, naming the count in force.
async fn partitions_set_moves_running_dispatchers_to_the_new_count(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let receiver =
        Receiver::start_with(|_| Reply::status(204).after(Duration::from_millis(30))).await;
    let dest = destination("ledger", &receiver, "");
    let running = [
        dispatch_with(&db, &dest, "partitions = 2\n"),
        dispatch_with(&db, &dest, "partitions = 2\n"),
    ];
    let outbox = db.outbox().await;
    let store = outbox.store().clone();
    // Both dispatchers must have joined (they register only once they adopted the count):
    // one may lead both partitions while the other is still starting, and a dispatcher that
    // starts after the change refuses the old count, as the end of this test shows.
    wait_until_explained(
        Duration::from_secs(30),
        "both partitions of 2 are led and both dispatchers have joined",
        || async {
            let live = store
                .instance_list()
                .await
                .unwrap()
                .iter()
                .filter(|r| r.live && r.partitions == 2)
                .count();
            live == 2
                && held_partitions(&store).await
                    == [
                        ("dispatcher/0".to_owned(), Some(2)),
                        ("dispatcher/1".to_owned(), Some(2)),
                    ]
        },
        || db.explain_activity(),
    )
    .await;
    enqueue_wave(&outbox, 1).await;
    let change = outbox_store::admin::Change {
        actor: "ops-oncall".into(),
        reason: "more partitions for more hosts".into(),
        force: false,
        dry_run: false,
    };
    let report = store.partition_count_set(4, &change).await.unwrap();
    assert_eq!((report.before, report.after), (Some(2), 4));
    enqueue_wave(&outbox, 2).await;
    wait_until_explained(
        Duration::from_secs(60),
        "the four partitions of 4 are led",
        || async {
            held_partitions(&store).await
                == (0..4)
                    .map(|i| (format!("dispatcher/{i}"), Some(4)))
                    .collect::<Vec<_>>()
        },
        || db.explain_activity(),
    )
    .await;
    enqueue_wave(&outbox, 3).await;
    until_states(&db, "every op is delivered", all("delivered")).await;

    // A dispatcher still configured with the old count refuses to serve.
    let text = format!(
        "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\npartitions = 2\nlisten = \"\"\n{dest}",
        url = db.url()
    );
    let config = Config::load(Some(&text), &HashMap::new()).unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        outbox_dispatcher::run(config, CancellationToken::new()),
    )
    .await
    .expect("the stale dispatcher stops at once");
    let message = refused
        .expect_err("a dispatcher of the old count refuses")
        .to_string();
    for words in [
        "dispatcher.partitions is 2",
        "the partition count in force is 4 (set by ops-oncall",
        "more partitions for more hosts",
        "Set dispatcher.partitions = 4 here",
    ] {
        assert!(message.contains(words), "{words:?} in {message}");
    }
    for r in running {
        r.stop().await;
    }
    let got = receiver.received();
    assert_eq!(
        got.len(),
        90,
        "each op exactly once: {:?}",
        receiver.idempotency_keys()
    );
    for k in 0..10 {
        let keys: Vec<&str> = got
            .iter()
            .filter(|r| r.path == format!("/api/k{k}"))
            .map(|r| r.header("idempotency-key"))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "key {k}: {keys:?}");
    }
}

/// Finished ops are purged after `retention` with their attempts; dead ops stay.
async fn retention_purges_finished_ops_but_keeps_dead_ones(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script("/api/dead", [Reply::status(410)]);
    let lease = lease(&outbox, "kept").await;
    outbox
        .enqueue(&lease, &post("kept", "/alive", "alive"))
        .await
        .unwrap();
    outbox
        .enqueue(&lease, &post("kept", "/dead", "dead"))
        .await
        .unwrap();
    let text = destination("kept", &receiver, "");
    let db_url = db.url().to_owned();
    let config = format!(
        "[database]\nurl = {db_url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"10s\"\npoll_interval = \"100ms\"\nlisten = \"\"\nretention = \"2s\"\n{text}"
    );
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(outbox_dispatcher::run(
        Config::load(Some(&config), &HashMap::new()).unwrap(),
        shutdown.clone(),
    ));
    // Generous: on Babelfish each housekeeping statement takes a good part of a second.
    wait_until(
        Duration::from_secs(90),
        "the delivered op is purged",
        || async {
            let ops = db.ops().await;
            ops.len() == 1 && ops[0].state == "dead"
        },
    )
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    let attempts = db.attempts().await;
    assert_eq!(
        attempts.len(),
        1,
        "the purged op's attempts went with it: {attempts:?}"
    );
    assert_eq!(attempts[0].http_status, Some(410));
}

/// Three partitions served by two dispatchers: every op is delivered exactly once, and ops of
/// one key stay in order (a key always falls in the same partition).
async fn g12_partitions_split_the_work_between_dispatchers(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    for k in 0..12 {
        let lease = lease(&outbox, &format!("acct:{k}")).await;
        let ops: Vec<Operation> = (0..5)
            .map(|i| post("ledger", &format!("/k{k}"), &format!("k{k:02}-{i}")))
            .collect();
        outbox.enqueue_batch(&lease, &ops).await.unwrap();
    }
    let dest = destination("ledger", &receiver, "");
    let (one, two) = (
        dispatch_with(&db, &dest, "partitions = 3\n"),
        dispatch_with(&db, &dest, "partitions = 3\n"),
    );
    until_states(&db, "every op is delivered", all("delivered")).await;
    one.stop().await;
    two.stop().await;
    let got = receiver.received();
    assert_eq!(got.len(), 60, "each op exactly once");
    for k in 0..12 {
        let keys: Vec<&str> = got
            .iter()
            .filter(|r| r.path == format!("/api/k{k}"))
            .map(|r| r.header("idempotency-key"))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "key {k}: {keys:?}");
    }
    let held: Vec<String> = outbox
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.resource.to_string())
        .filter(|r| r.starts_with("dispatcher/"))
        .collect();
    assert_eq!(held, ["dispatcher/0", "dispatcher/1", "dispatcher/2"]);
}

conformance!(
    partitions_set_moves_running_dispatchers_to_the_new_count,
    max_in_flight_holds_across_dispatchers,
    rate_limit_holds_across_dispatchers,
    g12_partitions_split_the_work_between_dispatchers,
    a_rate_limit_spreads_deliveries,
    retention_purges_finished_ops_but_keeps_dead_ones,
    a_hanging_destination_does_not_delay_the_others,
    health_and_metrics_endpoints_answer,
    delivers_with_every_header_and_a_verifiable_signature,
    retries_503_twice_then_delivers_with_the_same_key,
    a_400_is_dead_at_once_and_stays_visible,
    retry_after_is_honoured,
    a_timeout_is_recorded_as_unknown_then_retried,
    g8_ops_of_one_key_arrive_in_order_while_keys_progress_in_parallel,
    unrouted_ops_wait_and_superseded_ops_are_never_sent,
    g12_graceful_shutdown_leaves_nothing_in_flight,
);

/// With the database down the dispatcher stays up, /readyz says 503, and once the database is
/// back it becomes ready and delivers what was enqueued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g6_postgres_unreachable_at_start_means_not_ready_until_it_is_back() {
    let Some(db) = TestDb::postgres_own_cluster().await else {
        return;
    };
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "later").await;
    outbox
        .enqueue(&lease, &post("later", "/l", "l-1"))
        .await
        .unwrap();
    outbox.store().close().await;
    db.stop_server();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let running = dispatch_listening(
        &db,
        &destination("later", &receiver, ""),
        &format!("127.0.0.1:{port}"),
    );
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    wait_until(Duration::from_secs(30), "/readyz answers 503", || async {
        matches!(reqwest::get(&readyz).await, Ok(r) if r.status() == 503)
    })
    .await;
    db.start_server();
    wait_until(Duration::from_secs(60), "/readyz answers 200", || async {
        matches!(reqwest::get(&readyz).await, Ok(r) if r.status() == 200)
    })
    .await;
    until_states(&db, "the op is delivered", all("delivered")).await;
    running.stop().await;
}
