//! G3: renewal keeps the token and needs owner id + token + an unexpired lease; release needs
//! owner id + token; an old owner can neither renew nor release a newer owner's lease.

use std::time::Duration;

use outbox_store::{Lease, OwnerId};
use outbox_tests::{TestDb, wait_for, wait_until};

const TTL: Duration = Duration::from_secs(30);

async fn g3_renewal_keeps_the_token_and_moves_expiry_forward(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox.try_acquire("renewed", TTL).await.unwrap().unwrap();
    let renewed = outbox
        .renew(&a, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("still ours");
    assert_eq!((renewed.token, renewed.owner_id), (a.token, a.owner_id));
    assert!(
        renewed.expires_at >= a.expires_at + Duration::from_secs(29),
        "{renewed:?} vs {a:?}"
    );
    let row = &outbox.list_leases().await.unwrap()[0];
    assert_eq!(
        (row.token, row.expires_at),
        (a.token, Some(renewed.expires_at))
    );
    // Renewing the renewed value or the original value is the same lease.
    assert!(outbox.renew(&a, TTL).await.unwrap().is_some());
}

async fn g3_renewing_an_expired_lease_fails_even_when_nobody_took_it(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox
        .try_acquire("lapsed", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let outbox_ref = &outbox;
    wait_until(
        Duration::from_secs(20),
        "the lease expired by the database clock",
        || async move { !outbox_ref.list_leases().await.unwrap()[0].held },
    )
    .await;
    assert!(
        outbox.renew(&a, TTL).await.unwrap().is_none(),
        "an expired generation is never revived"
    );
    let row = &outbox.list_leases().await.unwrap()[0];
    assert!(!row.held);
    assert_eq!(row.token, a.token);
    // Nobody took it, so the last owner may still tidy up.
    assert!(outbox.release(&a).await.unwrap());
}

async fn g3_wrong_owner_or_token_can_neither_renew_nor_release(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox.try_acquire("guarded", TTL).await.unwrap().unwrap();
    let other_owner = Lease {
        owner_id: OwnerId::new_random(),
        ..a.clone()
    };
    let other_token = Lease {
        token: outbox_store::FencingToken::new(a.token.get() + 1),
        ..a.clone()
    };
    for forged in [&other_owner, &other_token] {
        assert!(
            outbox.renew(forged, TTL).await.unwrap().is_none(),
            "{forged:?}"
        );
        assert!(!outbox.release(forged).await.unwrap(), "{forged:?}");
    }
    let row = &outbox.list_leases().await.unwrap()[0];
    assert_eq!(
        (row.owner_id, row.token, row.held),
        (Some(a.owner_id), a.token, true)
    );
}

async fn g3_an_old_owner_cannot_touch_the_newer_lease(db: TestDb) {
    let outbox = db.outbox().await;
    let old = outbox
        .try_acquire("handed-over", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let outbox_ref = &outbox;
    let newer = wait_for(
        Duration::from_secs(20),
        "a new owner took the expired lease",
        || async move { outbox_ref.try_acquire("handed-over", TTL).await.unwrap() },
    )
    .await;
    assert_eq!(newer.token.get(), old.token.get() + 1);
    assert!(outbox.renew(&old, TTL).await.unwrap().is_none());
    assert!(!outbox.release(&old).await.unwrap());
    let row = &outbox.list_leases().await.unwrap()[0];
    assert_eq!(
        (row.owner_id, row.token, row.held),
        (Some(newer.owner_id), newer.token, true)
    );
}

conformance!(
    g3_renewal_keeps_the_token_and_moves_expiry_forward,
    g3_renewing_an_expired_lease_fails_even_when_nobody_took_it,
    g3_wrong_owner_or_token_can_neither_renew_nor_release,
    g3_an_old_owner_cannot_touch_the_newer_lease,
);
