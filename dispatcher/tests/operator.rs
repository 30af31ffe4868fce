//! Operator actions are exact (issue 28): what an operator changes while three dispatchers
//! run takes effect on every one of them when the command returns, as docs/operating.md says, with
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

/// One op the producer enqueued.
struct Enqueued {
    key: String,
    order_key: String,
    /// When its enqueue began.
    began: Instant,
}

/// Ops enqueued one after another until stopped, each under an order key of its own (so many
/// are in flight at once) or, with `order_keys`, under one of that many.
struct Producer {
    stop: CancellationToken,
    enqueued: Arc<Mutex<Vec<Enqueued>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Producer {
    fn start(
        outbox: Outbox,
        destination: &'static str,
        every: Duration,
        order_keys: Option<usize>,
    ) -> Producer {
        let stop = CancellationToken::new();
        let enqueued: Arc<Mutex<Vec<Enqueued>>> = Arc::default();
        let (s, e) = (stop.clone(), enqueued.clone());
        let task = tokio::spawn(async move {
            let lease = lease(&outbox, "operator-test").await;
            let mut i = 0;
            while !s.is_cancelled() {
                let key = format!("{destination}-{i:04}");
                let order_key =
                    order_keys.map_or_else(|| key.clone(), |n| format!("account-{}", i % n));
                let began = Instant::now();
                let op = Operation::post(destination, "/op")
                    .json(&serde_json::json!({"key": key}))
                    .idempotency_key(key.as_str())
                    .order_key(order_key.as_str())
                    .build()
                    .expect("a valid op");
                outbox.enqueue(&lease, &op).await.expect("enqueue");
                e.lock().unwrap().push(Enqueued {
                    key,
                    order_key,
                    began,
                });
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

    /// Stops enqueuing; every op it enqueued, in order.
    async fn stop(self) -> Vec<Enqueued> {
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
    let producer = Producer::start(outbox.clone(), "api", Duration::from_millis(10), None);
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
        .filter(|e| e.began >= paused)
        .map(|e| &e.key)
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

/// `outboxctl cancel` of pending ops while three dispatchers drain a backlog: an op the
/// command reports cancelled is never sent (it was pending, so never sent before: the
/// destination answers 200 to every first request); one it skips as in flight is delivered.
async fn a_cancel_racing_three_dispatchers_sends_nothing_it_cancelled(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    // About 13 ops/s delivered, many more enqueued: a backlog of pending ops to cancel builds
    // up however loaded the machine is.
    let receiver =
        Receiver::start_with(|_| Reply::status(200).after(Duration::from_millis(150))).await;
    let dest = destination("api", &receiver, "max_in_flight = 2\ntimeout = \"2s\"");
    let running = three_settled(&db, &dest, "").await;
    let outbox = db.outbox().await;
    let store = outbox.store().clone();
    let producer = Producer::start(outbox.clone(), "api", Duration::from_millis(5), None);
    let mut cancelled: Vec<i64> = Vec::new();
    let mut skipped = 0;
    for round in 0..8 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Every other pending op, the oldest first: the ones the dispatchers are about to claim.
        let pending: Vec<i64> = db
            .ops()
            .await
            .iter()
            .filter(|o| o.state == "pending")
            .map(|o| o.seq)
            .step_by(2)
            .take(20)
            .collect();
        let report = store
            .admin_cancel(&pending, &change(&format!("cancel round {round}")))
            .await
            .expect("cancel");
        skipped += report.skipped.len();
        cancelled.extend(report.changed);
    }
    let enqueued = producer.stop().await;
    wait_until(
        Duration::from_secs(60),
        "the backlog is drained",
        || async {
            db.ops()
                .await
                .iter()
                .all(|o| o.state == "delivered" || o.state == "cancelled")
        },
    )
    .await;
    stop_all(running).await;
    let ops = db.ops().await;
    let cancelled_keys: Vec<&str> = ops
        .iter()
        .filter(|o| cancelled.contains(&o.seq))
        .map(|o| o.idempotency_key.as_str())
        .collect();
    assert!(
        cancelled_keys.len() >= 20,
        "the cancels raced the claims: {} cancelled",
        cancelled_keys.len()
    );
    let sent = receiver.idempotency_keys();
    let sent_cancelled: Vec<&&str> = cancelled_keys
        .iter()
        .filter(|k| sent.iter().any(|s| s == **k))
        .collect();
    assert!(
        sent_cancelled.is_empty(),
        "cancelled ops were sent: {sent_cancelled:?}"
    );
    let delivered = ops.iter().filter(|o| o.state == "delivered").count();
    assert_eq!(
        delivered + cancelled_keys.len(),
        enqueued.len(),
        "every op is delivered or cancelled"
    );
    println!(
        "cancel under three dispatchers: {} of {} ops cancelled, {skipped} skipped (in flight \
         or already delivered), none of the cancelled sent",
        cancelled_keys.len(),
        enqueued.len()
    );
}

/// `outboxctl replay` of dead ops while three dispatchers run: each replayed op is sent once
/// more, by one dispatcher, and delivered; nothing is sent a third time.
async fn a_replay_racing_three_dispatchers_sends_each_op_once_more(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    // 400 to an op's first request (dead at once), 200 to the next.
    let seen = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let receiver = Receiver::start_with(move |r| {
        let first = seen
            .lock()
            .unwrap()
            .insert(r.header("idempotency-key").to_owned());
        Reply::status(if first { 400 } else { 200 })
    })
    .await;
    let dest = destination("api", &receiver, "max_in_flight = 8");
    let running = three_settled(&db, &dest, "").await;
    let outbox = db.outbox().await;
    let store = outbox.store().clone();
    let producer = Producer::start(outbox.clone(), "api", Duration::from_millis(5), None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let enqueued = producer.stop().await;
    wait_until(Duration::from_secs(60), "every op is dead", || async {
        db.ops().await.iter().all(|o| o.state == "dead")
    })
    .await;
    let seqs: Vec<i64> = db.ops().await.iter().map(|o| o.seq).collect();
    let report = store
        .admin_replay(&seqs, &change("the vendor fixed its validation"))
        .await
        .expect("replay");
    assert_eq!(report.changed.len(), enqueued.len(), "{report:?}");
    wait_until(
        Duration::from_secs(60),
        "every replayed op is delivered",
        || async { db.ops().await.iter().all(|o| o.state == "delivered") },
    )
    .await;
    // A moment for anything sent twice to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_all(running).await;
    let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for key in receiver.idempotency_keys() {
        *counts.entry(key).or_default() += 1;
    }
    let wrong: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n != 2).collect();
    assert!(
        wrong.is_empty() && counts.len() == enqueued.len(),
        "each op sent twice (dead, then replayed): {wrong:?}"
    );
}

/// `outboxctl partitions set` while three dispatchers deliver ops of a few order keys: they
/// step down from 2 partitions to serve 4 with nothing sent twice, and per order key never
/// two requests at once nor out of order (G8, G12).
async fn partitions_set_racing_three_dispatchers_sends_nothing_twice(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let receiver =
        Receiver::start_with(|_| Reply::status(204).after(Duration::from_millis(20))).await;
    let dest = destination("ledger", &receiver, "");
    let store = db.outbox().await.store().clone();
    let running: Vec<Running> = (0..3)
        .map(|_| common::dispatch_with(&db, &dest, "partitions = 2\n"))
        .collect();
    wait_until(
        Duration::from_secs(60),
        "three dispatchers joined",
        || async {
            let live = store.instance_list().await.unwrap();
            live.iter().filter(|r| r.live && r.partitions == 2).count() == 3
        },
    )
    .await;
    let producer = Producer::start(
        db.outbox().await,
        "ledger",
        Duration::from_millis(10),
        Some(6),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = store
        .partition_count_set(4, &change("more partitions for more hosts"))
        .await
        .expect("partitions set");
    assert_eq!((report.before, report.after), (Some(2), 4));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let enqueued = producer.stop().await;
    wait_until(Duration::from_secs(60), "every op is delivered", || async {
        db.ops().await.iter().all(|o| o.state == "delivered")
    })
    .await;
    stop_all(running).await;
    let got = receiver.received();
    let keys: Vec<&str> = got.iter().map(|r| r.header("idempotency-key")).collect();
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        (keys.len(), unique.len()),
        (enqueued.len(), enqueued.len()),
        "each op sent exactly once"
    );
    for account in 0..6 {
        let order_key = format!("account-{account}");
        let expected: Vec<&str> = enqueued
            .iter()
            .filter(|e| e.order_key == order_key)
            .map(|e| e.key.as_str())
            .collect();
        let requests: Vec<&outbox_tests::Received> = got
            .iter()
            .filter(|r| expected.contains(&r.header("idempotency-key")))
            .collect();
        let arrived: Vec<&str> = requests
            .iter()
            .map(|r| r.header("idempotency-key"))
            .collect();
        assert_eq!(arrived, expected, "{order_key} in enqueue order");
        for pair in requests.windows(2) {
            let done = pair[0].done.expect("answered");
            assert!(
                done <= pair[1].at,
                "{order_key}: two requests at once across the change"
            );
        }
    }
}

conformance!(
    a_pause_holds_every_dispatcher_from_its_return_and_a_resume_wakes_them,
    a_cancel_racing_three_dispatchers_sends_nothing_it_cancelled,
    a_replay_racing_three_dispatchers_sends_each_op_once_more,
    partitions_set_racing_three_dispatchers_sends_nothing_twice,
);
