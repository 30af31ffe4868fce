//! The Rust producer with `outbox_producer` alone, the part both backends' role tests share:
//! leases, an enqueue, its duplicate and a conflict, the same request seen by the owner's
//! statements as a duplicate, and a newer owner superseding the older one's pending ops.

use std::time::Duration;

use outbox_producer::{Enqueued, Error as E, Lease, Operation, Outbox};

/// A backend's op for key `key` with a body made from `body`.
pub(super) type Statement = fn(&str, &str) -> Operation;

const TTL: Duration = Duration::from_secs(30);

/// On `outbox` (the producer's) and `owner` (the migrating login's): `account:1` acquired,
/// refused while held and renewed with its owner and token; `k-1` enqueued, again a
/// duplicate in state pending, with another body a conflict, and through the owner's
/// statements the same duplicate. Returns the lease and the first enqueue.
pub(super) async fn leases_and_keys(
    outbox: &Outbox,
    owner: &Outbox,
    statement: Statement,
) -> (Lease, Enqueued) {
    let lease = outbox
        .try_acquire("account:1", TTL)
        .await
        .expect("acquire")
        .expect("free");
    assert!(
        outbox
            .try_acquire("account:1", TTL)
            .await
            .expect("busy")
            .is_none()
    );
    let renewed = outbox
        .renew(&lease, TTL)
        .await
        .expect("renew")
        .expect("held");
    assert_eq!(
        (renewed.owner_id, renewed.token),
        (lease.owner_id, lease.token)
    );

    let first = outbox
        .enqueue(&lease, &statement("k-1", "a"))
        .await
        .expect("enqueue");
    assert!(!first.duplicate);
    let again = outbox
        .enqueue(&lease, &statement("k-1", "a"))
        .await
        .expect("duplicate");
    assert!(again.duplicate && again.op_id == first.op_id && again.seq == first.seq);
    assert_eq!(again.state, outbox_store::OpState::Pending);
    match outbox.enqueue(&lease, &statement("k-1", "b")).await {
        Err(E::IdempotencyConflict { existing_op_id }) => assert_eq!(existing_op_id, first.op_id),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let seen_by_owner = owner
        .enqueue(&lease, &statement("k-1", "a"))
        .await
        .expect("the statements' way");
    assert!(seen_by_owner.duplicate && seen_by_owner.op_id == first.op_id);
    (lease, first)
}

/// `lease` released (and a second release refused), a newer owner of `account:1`, and its op
/// `k-9` with `supersede_pending`: the older owner's pending ops become superseded.
pub(super) async fn newer_owner_supersedes(outbox: &Outbox, lease: &Lease) {
    assert!(outbox.release(lease).await.expect("release"));
    assert!(!outbox.release(lease).await.expect("released already"));
    let newer = outbox
        .try_acquire("account:1", TTL)
        .await
        .expect("acquire")
        .expect("free");
    assert!(newer.token > lease.token && newer.owner_id != lease.owner_id);
    outbox
        .enqueue(
            &newer,
            &Operation::post("statements", "/v1/statements")
                .idempotency_key("k-9")
                .supersede_pending()
                .build()
                .expect("an op"),
        )
        .await
        .expect("enqueue");
}
