//! Issue 12, item 8: the dispatcher's partition leases (`dispatcher/<n>`) are its own. The
//! producer API refuses to acquire, renew or release them, and to enqueue under one (a `Lease`
//! can be built by hand), with `Error::Invalid` on `resource` and nothing written.

use std::time::Duration;

use outbox_producer::{Error, FencingToken, Lease, Operation, OwnerId, ResourceName};
use outbox_store::Partition;
use outbox_tests::{Kind, TestDb, conformance};
use sqlx::{Connection as _, PgConnection, SqliteConnection};
use time::OffsetDateTime;

fn assert_refused<T: std::fmt::Debug>(what: &str, result: Result<T, Error>) {
    match result {
        Err(Error::Invalid(e)) => {
            assert_eq!(e.field, "resource", "{what}: {e}");
            assert!(
                e.reason.contains("dispatcher/0") && e.reason.contains("outbox-dispatcher"),
                "{what}: {e}"
            );
        }
        other => panic!("{what}: expected Error::Invalid on resource, got {other:?}"),
    }
}

/// A lease on `dispatcher/0` built by hand, as a caller could.
fn hand_made() -> Lease {
    Lease {
        resource: ResourceName::new(format!("{}0", Partition::LEASE_PREFIX)).unwrap(),
        owner_id: "00000000-0000-4000-8000-000000000000"
            .parse::<OwnerId>()
            .unwrap(),
        token: "1".parse::<FencingToken>().unwrap(),
        expires_at: OffsetDateTime::UNIX_EPOCH,
    }
}

fn op() -> Operation {
    Operation::post("statements", "/v1/statements")
        .idempotency_key("k")
        .build()
        .unwrap()
}

async fn dispatcher_partition_leases_are_refused_and_nothing_is_written(db: TestDb) {
    let outbox = db.outbox().await;
    let before = db.snapshot().await;
    let ttl = Duration::from_secs(30);
    let lease = hand_made();
    assert_refused("try_acquire", outbox.try_acquire("dispatcher/0", ttl).await);
    assert_refused("renew", outbox.renew(&lease, ttl).await);
    assert_refused("release", outbox.release(&lease).await);
    assert_refused("enqueue", outbox.enqueue(&lease, &op()).await);
    assert_refused("enqueue_batch", outbox.enqueue_batch(&lease, &[op()]).await);
    let in_caller = match db.kind() {
        Kind::Sqlite => {
            let mut c = SqliteConnection::connect(db.url()).await.unwrap();
            outbox.enqueue_in(&mut c, &lease, &op()).await
        }
        Kind::Postgres => {
            let mut c = PgConnection::connect(db.url()).await.unwrap();
            outbox.enqueue_in(&mut c, &lease, &op()).await
        }
        Kind::Mssql => {
            let mut c = outbox_store::mssql::connect(db.url()).await.unwrap();
            outbox.enqueue_in(&mut c, &lease, &op()).await
        }
    };
    assert_refused("enqueue_in", in_caller);
    assert_eq!(db.snapshot().await, before, "nothing may be written");
    // Only the prefix is reserved: a resource that merely mentions it is a resource like any.
    assert!(
        outbox
            .try_acquire("jobs/dispatcher/0", ttl)
            .await
            .unwrap()
            .is_some()
    );
}

conformance!(dispatcher_partition_leases_are_refused_and_nothing_is_written);
