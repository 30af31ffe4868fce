//! G7: the same (destination, idempotency key) with the same request returns the existing op;
//! with a different request it fails with `IdempotencyConflict` and the original is kept.

use std::sync::Arc;
use std::time::Duration;

use outbox_producer::{Error, Operation};
use outbox_tests::TestDb;

const TTL: Duration = Duration::from_secs(30);

fn charge(amount: u32) -> Operation {
    Operation::post("payments", "/v1/charges")
        .header("X-Customer", "cus_1842")
        .json(&serde_json::json!({"amount": amount, "currency": "eur"}))
        .idempotency_key("charge-1842-2026-07")
        .build()
        .unwrap()
}

async fn g7_sixteen_concurrent_enqueues_of_one_request_make_one_op(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (outbox, lease, start) = (outbox.clone(), lease.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                outbox.enqueue(&lease, &charge(1250)).await.unwrap()
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    assert_eq!(
        results.iter().filter(|r| !r.duplicate).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| r.op_id == results[0].op_id && r.seq == results[0].seq)
    );
    assert_eq!(db.ops().await.len(), 1);
}

async fn g7_a_different_request_under_a_used_key_conflicts_and_keeps_the_original(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    let original = outbox.enqueue(&lease, &charge(1250)).await.unwrap();
    match outbox.enqueue(&lease, &charge(9999)).await {
        Err(Error::IdempotencyConflict { existing_op_id }) => {
            assert_eq!(existing_op_id, original.op_id)
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].body, br#"{"amount":1250,"currency":"eur"}"#);
    // The same request under the same key from a later owner is the same op.
    outbox.release(&lease).await.unwrap();
    let later = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    let again = outbox.enqueue(&later, &charge(1250)).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.op_id, original.op_id);
    // The same key at another destination is another op.
    let elsewhere = Operation::post("ledger", "/v1/charges")
        .idempotency_key("charge-1842-2026-07")
        .build()
        .unwrap();
    assert!(!outbox.enqueue(&later, &elsewhere).await.unwrap().duplicate);
}

/// The fence is checked before the key: a stale owner resending a known request is refused.
async fn g7_a_stale_owner_is_refused_even_for_a_known_request(db: TestDb) {
    let outbox = db.outbox().await;
    let old = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    outbox.enqueue(&old, &charge(1250)).await.unwrap();
    outbox.release(&old).await.unwrap();
    let _newer = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        outbox.enqueue(&old, &charge(1250)).await,
        Err(Error::Stale { .. })
    ));
}

/// A batch naming one key twice: the same request is one op, another request conflicts and
/// the batch writes nothing.
async fn g7_a_batch_naming_a_key_twice_makes_one_op_or_conflicts(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::OPENJSON_KEEPS_ESCAPES) {
        return;
    }
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("billing:1842", TTL)
        .await
        .unwrap()
        .unwrap();
    let other = Operation::post("payments", "/v1/charges")
        .idempotency_key("charge-1842-2026-08")
        .build()
        .unwrap();
    assert!(matches!(
        outbox
            .enqueue_batch(&lease, &[other.clone(), charge(1250), charge(9999)])
            .await,
        Err(Error::IdempotencyConflict { .. })
    ));
    assert!(db.ops().await.is_empty());
    let done = outbox
        .enqueue_batch(&lease, &[charge(1250), other, charge(1250)])
        .await
        .unwrap();
    assert_eq!(
        done.iter().map(|d| d.duplicate).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(done[2].op_id, done[0].op_id);
    assert_eq!(db.ops().await.len(), 2);
}

conformance!(
    g7_a_batch_naming_a_key_twice_makes_one_op_or_conflicts,
    g7_sixteen_concurrent_enqueues_of_one_request_make_one_op,
    g7_a_different_request_under_a_used_key_conflicts_and_keeps_the_original,
    g7_a_stale_owner_is_refused_even_for_a_known_request,
);
