//! The circuit breaker (issue 18) with in-process dispatchers on SQLite and a real destination
//! on 127.0.0.1 that answers 503 while it is "down": after `failures` consecutive failures the
//! destination opens, gets one probe per cooldown (doubling up to its cap) until it recovers,
//! then every op is delivered, none dead although the outage outlasts their `max_age` and
//! their retry budget; another destination is not slowed meanwhile; two dispatcher instances
//! share the breaker's state through the database.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Running, all, destination, dispatch, until_states};
use outbox_store::health::BreakerState;
use outbox_tests::{Receiver, Reply, TestDb, lease, wait_until};

const DOWN: Duration = Duration::from_secs(30);
const FAILURES: usize = 3;
const COOLDOWN: Duration = Duration::from_secs(4);

/// A destination that answers 503 while `down` is set, else 200.
async fn flaky(down: &Arc<AtomicBool>) -> Receiver {
    let down = down.clone();
    Receiver::start_with(move |_| {
        Reply::status(if down.load(Ordering::SeqCst) {
            503
        } else {
            200
        })
    })
    .await
}

/// The `flaky` destination: 3 failures open it, a 4 s cooldown doubling up to 8 s, one
/// attempt in flight at a time, and a retry budget the outage would exhaust many times over
/// (10 attempts, a 20 s max_age) if it ran while the destination was open.
fn flaky_config(receiver: &Receiver) -> String {
    destination(
        "flaky",
        receiver,
        &format!(
            "max_in_flight = 1\nretry = {{ base = \"50ms\", cap = \"200ms\", max_attempts = 10, max_age = \"20s\" }}\nbreaker = {{ failures = {FAILURES}, cooldown = \"{}s\", cooldown_max = \"{}s\" }}",
            COOLDOWN.as_secs(),
            COOLDOWN.as_secs() * 2
        ),
    )
}

/// Enqueues `n` unordered ops to `destination`, keys `<prefix>-<i>`.
async fn enqueue(db: &TestDb, destination: &str, prefix: &str, n: usize) {
    let outbox = db.outbox().await;
    let lease = lease(&outbox, &format!("job:{prefix}")).await;
    for i in 0..n {
        let op = outbox_producer::Operation::post(destination, "/charge")
            .json(&serde_json::json!({"i": i}))
            .idempotency_key(format!("{prefix}-{i}"))
            .unordered()
            .build()
            .unwrap();
        outbox.enqueue(&lease, &op).await.unwrap();
    }
}

/// How many requests `receiver` answered 503 (while it was down).
fn failed(receiver: &Receiver) -> usize {
    receiver
        .received()
        .iter()
        .filter(|r| r.status == 503)
        .count()
}

async fn breaker_state(db: &TestDb, destination: &str) -> Option<BreakerState> {
    let rows = db.store().await.destination_list().await.unwrap();
    rows.into_iter()
        .find(|h| h.destination == destination)
        .map(|h| h.state)
}

/// Runs the outage against `dispatchers` (already started) and checks what the issue asks;
/// returns the requests `flaky` got while down.
async fn outage(
    db: &TestDb,
    down: &Arc<AtomicBool>,
    receiver: &Receiver,
    instances: usize,
) -> usize {
    let started = Instant::now();
    wait_until(Duration::from_secs(20), "the breaker opens", || async {
        breaker_state(db, "flaky").await == Some(BreakerState::Open)
    })
    .await;
    let opened = Instant::now();
    while started.elapsed() < DOWN {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    down.store(false, Ordering::SeqCst);
    wait_until(
        Duration::from_secs(30),
        "every flaky op is delivered",
        || async {
            db.ops()
                .await
                .iter()
                .filter(|o| o.destination == "flaky")
                .all(|o| o.state == "delivered")
        },
    )
    .await;
    let during = failed(receiver);
    let times: Vec<String> = receiver
        .received()
        .iter()
        .filter(|r| r.status == 503)
        .map(|r| format!("{:.1}s", (r.at - started).as_secs_f64()))
        .collect();
    eprintln!("503s at {times:?} after the start");
    // After the failures that opened it (and what the other instances had in flight, which
    // they learn within a poll interval), one probe per cooldown over all instances: they
    // share one breaker.
    let probes: Vec<Instant> = receiver
        .received()
        .iter()
        .filter(|r| r.status == 503 && r.at > opened + Duration::from_secs(1))
        .map(|r| r.at)
        .collect();
    for pair in probes.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= COOLDOWN - Duration::from_millis(300),
            "two probes {gap:?} apart: {times:?}"
        );
    }
    // Failures open it; then one probe per cooldown (4 s, then 8 s), and the attempts each
    // other instance had in flight (max_in_flight = 1) before it saw the opening.
    let probes_allowed = DOWN.as_secs() as usize / COOLDOWN.as_secs() as usize + 1;
    let bound = FAILURES + probes_allowed + (instances - 1);
    assert!(
        during <= bound,
        "{during} requests while down; at most {FAILURES} failures + {probes_allowed} probes + {} in flight elsewhere",
        instances - 1
    );
    assert!(during > FAILURES, "it was probed: {during} requests");
    during
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_down_for_30s_gets_its_failures_and_one_probe_per_cooldown_then_everything() {
    let db = TestDb::sqlite().await;
    let down = Arc::new(AtomicBool::new(true));
    let receiver = flaky(&down).await;
    let steady = Receiver::start().await;
    enqueue(&db, "flaky", "flaky", 20).await;
    let config = flaky_config(&receiver) + &destination("steady", &steady, "");
    let running = dispatch(&db, &config);

    let started = Instant::now();
    wait_until(Duration::from_secs(20), "the breaker opens", || async {
        breaker_state(&db, "flaky").await == Some(BreakerState::Open)
    })
    .await;
    assert_eq!(
        failed(&receiver),
        FAILURES,
        "exactly `failures` attempts open it (one in flight at a time)"
    );
    // Other destinations are not slowed while it is open.
    let enqueued = Instant::now();
    enqueue(&db, "steady", "steady", 10).await;
    wait_until(
        Duration::from_secs(5),
        "steady ops are delivered at once",
        || async { steady.received().len() == 10 },
    )
    .await;
    let steady_took = enqueued.elapsed();
    assert!(steady_took < Duration::from_secs(3), "{steady_took:?}");

    while started.elapsed() < DOWN {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    down.store(false, Ordering::SeqCst);
    let recovered = Instant::now();
    until_states(&db, "every op is delivered, none dead", all("delivered")).await;
    let recovery = recovered.elapsed();
    running.stop().await;

    let during = failed(&receiver);
    let probes_allowed = DOWN.as_secs() as usize / COOLDOWN.as_secs() as usize + 1;
    assert!(
        during <= FAILURES + probes_allowed,
        "{during} requests while down: at most {FAILURES} failures + {probes_allowed} probes"
    );
    assert!(during > FAILURES, "it was probed: {during} requests");
    // Probes are spaced by the cooldown, which doubles (4 s, then 8 s).
    let times: Vec<Instant> = receiver
        .received()
        .iter()
        .filter(|r| r.status == 503)
        .map(|r| r.at)
        .collect();
    for pair in times[FAILURES - 1..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= COOLDOWN - Duration::from_millis(300),
            "probes {gap:?} apart"
        );
    }
    let ops = db.ops().await;
    let flaky_ops: Vec<_> = ops.iter().filter(|o| o.destination == "flaky").collect();
    let attempts: i32 = flaky_ops.iter().map(|o| o.attempts).sum();
    assert!(
        flaky_ops.iter().all(|o| o.attempts <= 1 + during as i32),
        "attempts bounded"
    );
    assert_eq!(
        attempts as usize,
        during + 20,
        "each op: its failures, then one delivery"
    );
    assert_eq!(
        breaker_state(&db, "flaky").await,
        Some(BreakerState::Closed)
    );
    eprintln!(
        "breaker: flaky down {DOWN:?}: {during} requests while down ({FAILURES} failures opened it, {} probes at {:?} apart), then 20 of 20 ops delivered in {recovery:?} with {attempts} attempts in all, 0 dead; 10 steady ops delivered in {steady_took:?} while it was open",
        during - FAILURES,
        times[FAILURES - 1..]
            .windows(2)
            .map(|p| p[1] - p[0])
            .map(|d| format!("{:.1}s", d.as_secs_f64()))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dispatcher_instances_share_the_breaker() {
    let db = TestDb::sqlite().await;
    let down = Arc::new(AtomicBool::new(true));
    let receiver = flaky(&down).await;
    enqueue(&db, "flaky", "two", 20).await;
    let config = flaky_config(&receiver);
    let first: Running = dispatch(&db, &config);
    let second: Running = dispatch(&db, &config);
    let during = outage(&db, &down, &receiver, 2).await;
    first.stop().await;
    second.stop().await;
    let dead = db.ops().await.iter().filter(|o| o.state == "dead").count();
    assert_eq!(dead, 0);
    eprintln!(
        "breaker, two instances: {during} requests while down for {DOWN:?}, then all 20 delivered, 0 dead"
    );
}
