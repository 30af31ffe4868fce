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

/// Every kind of bad op is refused with the field it broke, and nothing at all is written:
/// no op, no rejection.
async fn g10_invalid_ops_are_refused_and_write_nothing(db: TestDb) {
    use outbox_producer::{Method, Operation};
    let outbox = db.outbox().await.with_max_body_bytes(1024).unwrap();
    let lease = outbox.try_acquire("held", TTL).await.unwrap().unwrap();
    let before = db.snapshot().await;
    let ok = || Operation::post("billing", "/v1/x").idempotency_key("k");
    let cases: Vec<(&str, Result<Operation, outbox_producer::InvalidInput>)> = vec![
        (
            "destination",
            Operation::post("https://billing.example", "/x")
                .idempotency_key("k")
                .build(),
        ),
        (
            "destination",
            Operation::post("Billing", "/x")
                .idempotency_key("k")
                .build(),
        ),
        (
            "path",
            Operation::post("billing", "https://evil.example/x")
                .idempotency_key("k")
                .build(),
        ),
        (
            "path",
            Operation::post("billing", "/a/../admin")
                .idempotency_key("k")
                .build(),
        ),
        (
            "path",
            Operation::builder("billing", Method::Get, "/a\r\nb")
                .idempotency_key("k")
                .build(),
        ),
        (
            "header_value",
            ok().header("X-A", "b\r\nHost: evil").build(),
        ),
        ("header_name", ok().header("Host", "evil.example").build()),
        ("header_name", ok().header("X-Outbox-Attempt", "9").build()),
        (
            "header_name",
            ok().header("Authorization", "Bearer secret").build(),
        ),
        ("idempotency_key", Operation::post("billing", "/x").build()),
        (
            "idempotency_key",
            Operation::post("billing", "/x")
                .idempotency_key("k".repeat(256))
                .build(),
        ),
        ("order_key", ok().order_key("").build()),
        ("traceparent", ok().traceparent("nope").build()),
        (
            "tracestate",
            ok().traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .tracestate("a=b\r\nX-Injected: 1")
                .build(),
        ),
        ("tracestate", ok().tracestate("congo=t61").build()),
    ];
    for (field, built) in cases {
        assert_eq!(built.expect_err(field).field, field);
    }
    // Too large for this outbox: refused at enqueue, before any write.
    let big = ok().body(vec![b'x'; 1025], "text/plain").build().unwrap();
    assert_eq!(field_of(outbox.enqueue(&lease, &big).await), "body");
    assert_eq!(
        field_of(
            outbox
                .enqueue_batch(&lease, &[ok().build().unwrap(), big])
                .await
        ),
        "body"
    );
    assert_eq!(
        db.snapshot().await,
        before,
        "a refused op must write nothing"
    );
}

conformance!(
    g10_invalid_ops_are_refused_and_write_nothing,
    g10_invalid_lease_input_is_refused_and_writes_nothing,
    g10_default_bounds_are_the_seeds_5s_to_300s,
);
