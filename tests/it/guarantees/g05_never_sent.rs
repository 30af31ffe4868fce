//! G5 at enqueue time: an op that was not accepted does not exist, and `supersede_pending`
//! turns exactly the older-token pending ops of one resource and destination into
//! `superseded`, atomically with the newer op's acceptance. (That the dispatcher never sends
//! them is the dispatcher's suite.)

use std::time::Duration;

use outbox_producer::Operation;
use outbox_tests::TestDb;

const TTL: Duration = Duration::from_secs(30);

fn op(destination: &str, key: &str) -> Operation {
    Operation::post(destination, "/v1/documents")
        .json(&serde_json::json!({"key": key}))
        .idempotency_key(key)
        .build()
        .unwrap()
}

async fn g5_supersede_pending_marks_exactly_the_older_pending_ops(db: TestDb) {
    let outbox = db.outbox().await;
    let old = outbox.try_acquire("doc:42", TTL).await.unwrap().unwrap();
    outbox
        .enqueue(&old, &op("docs", "old-docs-1"))
        .await
        .unwrap();
    outbox
        .enqueue(&old, &op("docs", "old-docs-2"))
        .await
        .unwrap();
    outbox
        .enqueue(&old, &op("docs", "old-docs-claimed"))
        .await
        .unwrap();
    outbox.enqueue(&old, &op("mail", "old-mail")).await.unwrap();
    let other = outbox.try_acquire("doc:43", TTL).await.unwrap().unwrap();
    outbox
        .enqueue(&other, &op("docs", "other-resource"))
        .await
        .unwrap();
    // One old op is already being delivered: superseding must not touch it.
    db.force_state(Some("old-docs-claimed"), "in_flight", None, Some(1))
        .await;
    outbox.release(&old).await.unwrap();

    let new = outbox.try_acquire("doc:42", TTL).await.unwrap().unwrap();
    outbox
        .enqueue(&new, &op("docs", "new-docs-plain"))
        .await
        .unwrap();
    let replacing = Operation::post("docs", "/v1/documents")
        .json(&serde_json::json!({"v": 2}))
        .idempotency_key("new-docs")
        .supersede_pending()
        .build()
        .unwrap();
    outbox.enqueue(&new, &replacing).await.unwrap();

    let states = db.states().await;
    let expected = [
        ("old-docs-1", "superseded"),
        ("old-docs-2", "superseded"),
        ("old-docs-claimed", "in_flight"),
        ("old-mail", "pending"),
        ("other-resource", "pending"),
        ("new-docs-plain", "pending"),
        ("new-docs", "pending"),
    ];
    assert_eq!(states, expected.map(|(k, s)| (k.to_owned(), s.to_owned())));
}

async fn g5_a_refused_supersede_changes_nothing(db: TestDb) {
    let outbox = db.outbox().await;
    let old = outbox.try_acquire("doc:9", TTL).await.unwrap().unwrap();
    outbox.enqueue(&old, &op("docs", "old")).await.unwrap();
    outbox.release(&old).await.unwrap();
    let newer = outbox.try_acquire("doc:9", TTL).await.unwrap().unwrap();
    outbox.release(&newer).await.unwrap();
    // The newer owner released: its superseding enqueue is refused and supersedes nothing.
    let replacing = Operation::post("docs", "/x")
        .idempotency_key("new")
        .supersede_pending()
        .build()
        .unwrap();
    assert!(outbox.enqueue(&newer, &replacing).await.is_err());
    let states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
    assert_eq!(states, ["pending"]);
}

conformance!(
    g5_supersede_pending_marks_exactly_the_older_pending_ops,
    g5_a_refused_supersede_changes_nothing
);
