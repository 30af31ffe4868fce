//! G1: tokens for a resource strictly increase across acquisitions, including after release,
//! expiry and a database restart; concurrent first-time acquisitions make one row, one winner.

use std::sync::Arc;
use std::time::Duration;

use outbox_tests::{TestDb, wait_for};

const TTL: Duration = Duration::from_secs(30);

async fn g1_tokens_increase_across_release(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox
        .try_acquire("statement:account-1842:2026-07", TTL)
        .await
        .unwrap()
        .expect("free");
    assert!(outbox.release(&a).await.unwrap());
    let b = outbox
        .try_acquire("statement:account-1842:2026-07", TTL)
        .await
        .unwrap()
        .expect("released");
    assert_eq!(b.token.get(), a.token.get() + 1);
    assert_ne!(
        a.owner_id, b.owner_id,
        "every acquisition has a fresh owner id"
    );
}

async fn g1_tokens_increase_across_expiry(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox
        .try_acquire("expiring", Duration::from_secs(1))
        .await
        .unwrap()
        .expect("free");
    let outbox_ref = &outbox;
    let b = wait_for(
        Duration::from_secs(20),
        "the 1 s lease expired by the database clock",
        || async move { outbox_ref.try_acquire("expiring", TTL).await.unwrap() },
    )
    .await;
    assert_eq!(b.token.get(), a.token.get() + 1);
    assert_ne!(b.owner_id, a.owner_id);
}

async fn g1_concurrent_first_acquisitions_have_one_winner(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::IGNORES_LOCKING_HINTS) {
        return;
    }
    let outbox = db.outbox().await;
    for round in 0..5 {
        let resource = format!("brand-new-{round}");
        let start = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (outbox, start, resource) = (outbox.clone(), start.clone(), resource.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    outbox.try_acquire(&resource, TTL).await.unwrap()
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            winners.extend(t.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(winners[0].token.get(), 1);
        let rows: Vec<_> = outbox
            .list_leases()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.resource.as_str() == resource)
            .collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].owner_id, Some(winners[0].owner_id));
    }
}

conformance!(
    g1_tokens_increase_across_release,
    g1_tokens_increase_across_expiry,
    g1_concurrent_first_acquisitions_have_one_winner,
);

/// Acquire, release, acquire and hold; restart the database; the next token is still larger
/// and the held lease is still held by its owner.
async fn g1_token_survives_database_restart(db: TestDb) {
    let store = db.store().await;
    let resource = outbox_store::ResourceName::new("survivor").unwrap();
    let a = store
        .lease_try_acquire(&resource, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(store.lease_release(&a).await.unwrap());
    let b = store
        .lease_try_acquire(&resource, TTL)
        .await
        .unwrap()
        .unwrap();
    store.close().await;

    db.restart_server().await;

    let store = db.store().await;
    let rows = store.lease_list().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].token, rows[0].owner_id, rows[0].held),
        (b.token, Some(b.owner_id), true)
    );
    assert!(
        store
            .lease_try_acquire(&resource, TTL)
            .await
            .unwrap()
            .is_none(),
        "still held by b"
    );
    assert!(store.lease_release(&b).await.unwrap());
    let c = store
        .lease_try_acquire(&resource, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.token.get(), b.token.get() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_g1_token_survives_closing_and_reopening_the_file() {
    g1_token_survives_database_restart(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_g1_token_survives_a_cluster_restart() {
    if let Some(db) = TestDb::postgres_own_cluster().await {
        g1_token_survives_database_restart(db).await;
    }
}
