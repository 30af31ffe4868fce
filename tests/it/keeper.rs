//! `LeaseKeeper`: keeps a short lease alive for much longer than its TTL, and cancels its token
//! within one renewal period once the lease row is taken over.

use std::time::{Duration, Instant};

use outbox_producer::LeaseKeeper;
use outbox_tests::{TestDb, wait_until};

async fn keeper_keeps_a_2s_lease_alive_for_10s_then_cancels_after_a_takeover(db: TestDb) {
    let outbox = db.outbox().await;
    let ttl = Duration::from_secs(2);
    let lease = outbox.try_acquire("kept", ttl).await.unwrap().unwrap();
    let keeper = LeaseKeeper::start(&outbox, lease.clone(), ttl);

    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let row = &outbox.list_leases().await.unwrap()[0];
        assert!(
            row.held && row.token == lease.token,
            "lease lost while kept: {row:?}"
        );
        assert!(!keeper.is_lost());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        keeper.lease().expires_at > lease.expires_at + Duration::from_secs(5),
        "renewals moved the expiry"
    );

    // Another owner takes the row over (as an acquisition after expiry would).
    db.execute("UPDATE outbox_leases SET owner_id = '00000000-0000-4000-8000-000000000000', fence = fence + 1 WHERE resource = 'kept'").await;
    let taken_over = Instant::now();
    let lost = keeper.lost();
    wait_until(
        Duration::from_secs(10),
        "the keeper noticed the takeover",
        || {
            let lost = lost.clone();
            async move { lost.is_cancelled() }
        },
    )
    .await;
    let noticed = taken_over.elapsed();
    let period = ttl / 3;
    println!("keeper noticed the takeover after {noticed:?} (renewal period {period:?})");
    // One period plus scheduling slack for a loaded 2-core machine.
    assert!(
        noticed <= period + Duration::from_millis(750),
        "took {noticed:?}"
    );
    assert!(
        !keeper.release().await.unwrap(),
        "a lost lease cannot be released"
    );
}

async fn keeper_release_frees_the_lease_at_once(db: TestDb) {
    let outbox = db.outbox().await;
    let ttl = Duration::from_secs(30);
    let lease = outbox.try_acquire("kept", ttl).await.unwrap().unwrap();
    let keeper = LeaseKeeper::start(&outbox, lease, ttl);
    assert!(keeper.release().await.unwrap());
    assert!(outbox.try_acquire("kept", ttl).await.unwrap().is_some());
}

conformance!(
    keeper_keeps_a_2s_lease_alive_for_10s_then_cancels_after_a_takeover,
    keeper_release_frees_the_lease_at_once,
);
