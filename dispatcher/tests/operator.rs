//! Operator actions are exact (issue 28): what an operator changes while three dispatchers
//! run takes effect on every one of them when the command returns, as the README says, with
//! ops arriving all the while. Each test races the command (the store call `outboxctl` makes)
//! against the dispatchers and checks what the destination, a real server on 127.0.0.1,
//! received.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Running, destination, three_settled};
use outbox_producer::{Operation, Outbox};
use outbox_store::admin::Change;
use outbox_tests::{Receiver, Reply, TestDb, conformance, lease, wait_until};
use tokio_util::sync::CancellationToken;

/// The destination's limit: what may still be sent after a pause returns, at most.
const MAX_IN_FLIGHT: usize = 6;

fn change(reason: &str) -> Change {
    Change {
        actor: "operator-test".to_owned(),
        reason: reason.to_owned(),
        force: false,
        dry_run: false,
    }
}

/// Keys enqueued one after another (each its own order key, so many are in flight at once),
/// with when each enqueue began, until stopped.
struct Producer {
    stop: CancellationToken,
    enqueued: Arc<Mutex<Vec<(String, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Producer {
    fn start(outbox: Outbox, destination: &'static str, every: Duration) -> Producer {
        let stop = CancellationToken::new();
        let enqueued: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let (s, e) = (stop.clone(), enqueued.clone());
        let task = tokio::spawn(async move {
            let lease = lease(&outbox, "operator-test").await;
            let mut i = 0;
            while !s.is_cancelled() {
                let key = format!("{destination}-{i:04}");
                let began = Instant::now();
                let op = Operation::post(destination, "/op")
                    .json(&serde_json::json!({"key": key}))
                    .idempotency_key(key.as_str())
                    .order_key(key.as_str())
                    .build()
                    .expect("a valid op");
                outbox.enqueue(&lease, &op).await.expect("enqueue");
                e.lock().unwrap().push((key, began));
                i += 1;
                tokio::time::sleep(every).await;
            }
        });
        Producer {
            stop,
            enqueued,
            task,
        }
    }

    /// Stops enqueuing; every key with when its enqueue began.
    async fn stop(self) -> Vec<(String, Instant)> {
        self.stop.cancel();
        self.task.await.expect("producer");
        std::mem::take(&mut *self.enqueued.lock().unwrap())
    }
}

async fn stop_all(running: Vec<Running>) {
    for r in running {
        r.stop().await;
    }
}

/// A pause under three dispatchers with ops arriving continuously: nothing enqueued after the
/// pause returned is sent, and after it returns at most the destination's in-flight limit of
/// requests (those claimed before its commit) arrive. The dispatchers poll only every 30 s,
/// so the resume is seen by its wake-up (PostgreSQL's notification, SQLite's commit
/// counter), not by a poll: the held ops are sent within seconds.
async fn a_pause_holds_every_dispatcher_from_its_return_and_a_resume_wakes_them(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let receiver =
        Receiver::start_with(|_| Reply::status(200).after(Duration::from_millis(40))).await;
    let dest = destination(
        "api",
        &receiver,
        &format!("max_in_flight = {MAX_IN_FLIGHT}\ntimeout = \"2s\""),
    );
    let running = three_settled(&db, &dest, "poll_interval = \"30s\"\n").await;
    let outbox = db.outbox().await;
    let store = outbox.store().clone();
    let producer = Producer::start(outbox.clone(), "api", Duration::from_millis(10));
    wait_until(Duration::from_secs(30), "ops flow", || async {
        receiver.received().len() >= 20
    })
    .await;

    store
        .destination_set_paused("api", true, &change("maintenance window"))
        .await
        .expect("pause")
        .expect("it was not paused");
    let paused = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let received_after_pause: Vec<String> = receiver
        .received()
        .iter()
        .filter(|r| r.at >= paused)
        .map(|r| r.header("idempotency-key").to_owned())
        .collect();

    store
        .destination_set_paused("api", false, &change("maintenance over"))
        .await
        .expect("resume")
        .expect("it was paused");
    let resumed = Instant::now();
    let enqueued = producer.stop().await;
    let after: Vec<&String> = enqueued
        .iter()
        .filter(|(_, began)| *began >= paused)
        .map(|(k, _)| k)
        .collect();
    assert!(
        after.len() >= 50,
        "ops kept arriving during the pause: {}",
        after.len()
    );
    let sent_after: Vec<&String> = after
        .iter()
        .copied()
        .filter(|k| received_after_pause.contains(k))
        .collect();
    assert!(
        sent_after.is_empty(),
        "ops enqueued after the pause returned were sent during it: {sent_after:?}"
    );
    assert!(
        received_after_pause.len() <= MAX_IN_FLIGHT,
        "after the pause returned, {} requests arrived ({received_after_pause:?}), more than \
         the {MAX_IN_FLIGHT} that may be in flight",
        received_after_pause.len()
    );
    // The resume wakes the dispatchers: the first held op arrives long before a 30 s poll.
    let first = wait_for_first(&receiver, resumed).await;
    println!(
        "paused under three dispatchers: {} enqueued after the pause returned, none sent; {} \
         requests arrived after it returned (claimed before); resumed: first request after {:?}",
        after.len(),
        received_after_pause.len(),
        first
    );
    wait_until(Duration::from_secs(60), "every op is delivered", || async {
        db.ops().await.iter().all(|o| o.state == "delivered")
    })
    .await;
    stop_all(running).await;
}

/// How long after `since` the destination received its first request.
async fn wait_for_first(receiver: &Receiver, since: Instant) -> Duration {
    let mut first = None;
    wait_until(
        Duration::from_secs(10),
        "a held op is sent after the resume, without waiting for a poll",
        || {
            first = receiver
                .received()
                .iter()
                .filter(|r| r.at >= since)
                .map(|r| r.at - since)
                .min();
            std::future::ready(first.is_some())
        },
    )
    .await;
    first.expect("found")
}

conformance!(a_pause_holds_every_dispatcher_from_its_return_and_a_resume_wakes_them,);
