//! The PostgreSQL store's pooler probe against a server that is slow, with no pooler in
//! between (issue 34, item 5): a slow answer is no evidence of a pooler. The store behaves as
//! through one while it cannot tell (unnamed statements, no LISTEN), and once the server
//! answers promptly a later probe finds it direct and the store goes back to named statements
//! and LISTEN. It once took the slow answer for a pooler, for the whole process and for good.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_producer::{Operation, Outbox};
use outbox_store::{Partition, Store};
use outbox_tests::TestDb;
use outbox_tests::slow_link::SlowLink;
use sqlx::Connection as _;

/// How long the relay holds each answer back while the server is "slow": over the probe's
/// 2 s wait, with room for a loaded machine (a hold only makes an answer later).
const SLOW: Duration = Duration::from_secs(3);

/// Named statements the connection `c` keeps (sqlx's, prepared once and kept when the store
/// knows it reaches PostgreSQL directly).
async fn kept_statements(c: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sqlx_s_%'")
        .persistent(false)
        .fetch_one(c)
        .await
        .unwrap()
}

/// Enqueues `key` on the caller's own connection `c` (as `enqueue_in` does inside a caller's
/// transaction), so the statements it runs are the process's as the store decides them.
async fn enqueue_on(outbox: &Outbox, c: &mut sqlx::PgConnection, key: &str) {
    let lease = outbox
        .try_acquire(&format!("issue34:{key}"), Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    let op = Operation::post("statements", "/v1/statements")
        .idempotency_key(key)
        .unordered()
        .build()
        .unwrap();
    outbox.enqueue_in(&mut *c, &lease, &op).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue34_a_slow_server_is_not_taken_for_a_pooler_for_good() {
    let db = TestDb::postgres().await;
    let direct = db.store().await;
    let link = SlowLink::start(db.url()).await;
    link.hold(SLOW);
    let started = Instant::now();
    let store = Store::connect(&link.in_front_of(db.url()), TestDb::options())
        .await
        .unwrap();
    println!("connected through the slow link in {:?}", started.elapsed());
    let notified = Arc::new(tokio::sync::Notify::new());
    let listener = store.listen_for_enqueues(notified.clone());
    assert!(
        listener.is_some(),
        "a server that answered slowly was taken for a transaction pooler: no LISTEN, for good"
    );
    // While it cannot tell, statements are unnamed: right through a pooler too.
    let outbox = Outbox::from_store(store);
    let mut own = sqlx::PgConnection::connect(db.url()).await.unwrap();
    enqueue_on(&outbox, &mut own, "unknown").await;
    assert_eq!(kept_statements(&mut own).await, 0, "unnamed while unknown");

    // The server answers promptly again: a later probe finds it direct.
    link.hold(Duration::ZERO);
    let known = Instant::now();
    // LISTEN starts (it wakes once as it starts, for anything enqueued before).
    tokio::time::timeout(Duration::from_secs(60), notified.notified())
        .await
        .expect("the store LISTENs once the server answers promptly");
    println!(
        "LISTENing {:?} after the server answered promptly",
        known.elapsed()
    );
    // And it hears an enqueue for a listening partition.
    direct
        .wakeup_set(Partition::new(0, 1).unwrap(), true)
        .await
        .unwrap();
    let enqueued = Outbox::from_store(direct.clone());
    let mut other = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let key = format!("heard-{}", uuid::Uuid::new_v4().simple());
        enqueue_on(&enqueued, &mut other, &key).await;
        let heard = tokio::time::timeout(Duration::from_secs(2), notified.notified()).await;
        if heard.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no enqueue was heard");
    }
    // Statements are named and kept again, on a caller's own connection too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let key = uuid::Uuid::new_v4().simple().to_string();
        enqueue_on(&outbox, &mut own, &key).await;
        if kept_statements(&mut own).await > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "statements stay unnamed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    listener.unwrap().abort();
}
