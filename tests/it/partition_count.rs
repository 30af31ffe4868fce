//! The partition count in force on every backend: the first dispatcher's count is adopted and
//! a later one cannot replace it; `partitions set` changes it with who and why, logged in the
//! admin log in the same transaction; a dry run, an unchanged count and a refused input write
//! nothing.

use outbox_store::Error;
use outbox_store::admin::Change;
use outbox_tests::TestDb;

fn change(reason: &str, dry_run: bool) -> Change {
    Change {
        actor: "ops-oncall".into(),
        reason: reason.into(),
        force: false,
        dry_run,
    }
}

async fn partition_count_is_adopted_once_then_changed_only_by_an_operator(db: TestDb) {
    let store = db.store().await;
    assert_eq!(store.partition_count().await.unwrap(), None);
    let first = store.partition_count_adopt(8).await.unwrap();
    assert_eq!(
        (first.partitions, first.changed_by.as_str()),
        (8, "dispatcher")
    );
    assert!(
        first.reason.contains("dispatcher.partitions = 8"),
        "{}",
        first.reason
    );
    // A second dispatcher with another count does not replace it: it reads 8 and must refuse.
    let second = store.partition_count_adopt(16).await.unwrap();
    assert_eq!(second, first);

    let before = db.snapshot().await;
    let dry = store
        .partition_count_set(16, &change("more hosts", true))
        .await
        .unwrap();
    assert_eq!((dry.before, dry.after, dry.changed), (Some(8), 16, true));
    assert_eq!(db.snapshot().await, before, "a dry run writes nothing");
    assert_eq!(
        store.partition_count().await.unwrap().unwrap().partitions,
        8
    );

    let done = store
        .partition_count_set(16, &change("three hosts from today (CHG-88)", false))
        .await
        .unwrap();
    assert_eq!((done.before, done.after, done.changed), (Some(8), 16, true));
    let now = store.partition_count().await.unwrap().unwrap();
    assert_eq!(
        (now.partitions, now.changed_by.as_str(), now.reason.as_str()),
        (16, "ops-oncall", "three hosts from today (CHG-88)")
    );
    assert!(now.changed_at >= first.changed_at);
    let after = db.snapshot().await;
    assert_ne!(after, before, "the change is logged in outbox_admin_log");

    let same = store
        .partition_count_set(16, &change("again", false))
        .await
        .unwrap();
    assert!(!same.changed);
    assert_eq!(
        db.snapshot().await,
        after,
        "an unchanged count is not logged"
    );
}

async fn partition_count_set_refuses_bad_input_and_writes_nothing(db: TestDb) {
    let store = db.store().await;
    store.partition_count_adopt(4).await.unwrap();
    let before = db.snapshot().await;
    for (n, reason, field) in [
        (0, "why", "partitions"),
        (1025, "why", "partitions"),
        (u32::MAX, "why", "partitions"),
        (8, "", "reason"),
        (8, "  ", "reason"),
        (8, "line\u{1b}[2J", "reason"),
    ] {
        match store.partition_count_set(n, &change(reason, false)).await {
            Err(Error::Invalid(e)) => assert_eq!(e.field, field, "{n} {reason:?}"),
            other => panic!("{n} {reason:?}: expected a refusal, got {other:?}"),
        }
    }
    let long = "x".repeat(2001);
    assert!(matches!(
        store.partition_count_set(8, &change(&long, false)).await,
        Err(Error::Invalid(e)) if e.field == "reason"
    ));
    assert!(matches!(
        store.partition_count_adopt(0).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(db.snapshot().await, before, "nothing was written");
    assert_eq!(
        store.partition_count().await.unwrap().unwrap().partitions,
        4
    );
}

conformance!(
    partition_count_is_adopted_once_then_changed_only_by_an_operator,
    partition_count_set_refuses_bad_input_and_writes_nothing,
);
