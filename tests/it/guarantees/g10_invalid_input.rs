//! G10 (leases): bad resource names and lease durations out of bounds get a typed error that
//! names the field, and nothing is written.

use std::time::Duration;

use outbox_producer::Error;
use outbox_tests::TestDb;

const TTL: Duration = Duration::from_secs(30);

fn field_of(result: Result<impl std::fmt::Debug, Error>) -> &'static str {
    match result {
        Err(Error::Invalid(e)) => e.field,
        other => panic!("expected an invalid-input error, got {other:?}"),
    }
}

async fn g10_invalid_lease_input_is_refused_and_writes_nothing(db: TestDb) {
    let outbox = db.outbox().await;
    let held = outbox.try_acquire("held", TTL).await.unwrap().unwrap();
    let before = db.snapshot().await;

    let too_long = "r".repeat(201);
    for bad in [
        "",
        too_long.as_str(),
        "line\nbreak",
        "carriage\rreturn",
        "nul\0",
        "bell\u{7}",
    ] {
        assert_eq!(
            field_of(outbox.try_acquire(bad, TTL).await),
            "resource",
            "{bad:?}"
        );
    }
    // The test store allows 1 s..=300 s.
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::from_millis(300_001),
        Duration::from_secs(3600),
    ] {
        assert_eq!(
            field_of(outbox.try_acquire("fresh", ttl).await),
            "ttl",
            "{ttl:?}"
        );
        assert_eq!(field_of(outbox.renew(&held, ttl).await), "ttl", "{ttl:?}");
    }
    assert_eq!(
        field_of(
            outbox
                .try_acquire("fresh", Duration::from_micros(1_500_500))
                .await
        ),
        "ttl"
    );

    assert_eq!(
        db.snapshot().await,
        before,
        "a refused call must write nothing"
    );
}

async fn g10_default_bounds_are_the_seeds_5s_to_300s(db: TestDb) {
    let store = db.store_with(outbox_store::StoreOptions::default()).await;
    store.migrate().await.unwrap();
    let outbox = outbox_producer::Outbox::from_store(store);
    assert_eq!(
        field_of(outbox.try_acquire("x", Duration::from_millis(4_999)).await),
        "ttl"
    );
    assert_eq!(
        field_of(
            outbox
                .try_acquire("x", Duration::from_millis(300_001))
                .await
        ),
        "ttl"
    );
    assert!(
        outbox
            .try_acquire("x", Duration::from_secs(5))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        outbox
            .try_acquire("y", Duration::from_secs(300))
            .await
            .unwrap()
            .is_some()
    );
}

conformance!(
    g10_invalid_lease_input_is_refused_and_writes_nothing,
    g10_default_bounds_are_the_seeds_5s_to_300s,
);
