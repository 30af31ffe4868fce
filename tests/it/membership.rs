//! Dispatcher membership on every backend: a heartbeat registers an instance and moves it on
//! the database clock, a silent instance counts as gone once its ttl has passed, a graceful
//! leave removes it, and a heartbeat the table would refuse is a typed error that writes nothing.

use std::time::Duration;

use outbox_store::Error;
use outbox_store::membership::InstanceBeat;
use outbox_tests::{TestDb, wait_until};
use uuid::Uuid;

fn beat(ttl: Duration, led: u32) -> InstanceBeat {
    InstanceBeat {
        instance_id: Uuid::new_v4(),
        host: "dispatcher-host-1".into(),
        pid: 4242,
        ttl,
        partitions: 8,
        led,
    }
}

async fn membership_heartbeats_register_move_expire_and_leave(db: TestDb) {
    let store = db.store().await;
    assert!(store.instance_list().await.unwrap().is_empty());

    let long = beat(Duration::from_secs(60), 0);
    store.instance_heartbeat(&long).await.unwrap();
    let short = beat(Duration::from_millis(300), 2);
    store.instance_heartbeat(&short).await.unwrap();
    let rows = store.instance_list().await.unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.live && r.heartbeat_age_ms < 30_000));
    let first = rows
        .iter()
        .find(|r| r.instance_id == long.instance_id)
        .unwrap();
    assert_eq!(
        (first.host.as_str(), first.pid, first.partitions, first.led),
        ("dispatcher-host-1", 4242, 8, 0)
    );

    // A second heartbeat reports what it leads now and keeps its start time.
    store
        .instance_heartbeat(&InstanceBeat {
            led: 3,
            ..long.clone()
        })
        .await
        .unwrap();
    let again = store.instance_list().await.unwrap();
    let first_again = again
        .iter()
        .find(|r| r.instance_id == long.instance_id)
        .unwrap();
    assert_eq!(first_again.led, 3);
    assert_eq!(first_again.started_at, first.started_at);

    // The silent one is gone once its ttl has passed, by the database clock.
    wait_until(
        Duration::from_secs(20),
        "the short-ttl instance to count as gone",
        || async {
            let rows = store.instance_list().await.unwrap();
            rows.iter()
                .any(|r| r.instance_id == short.instance_id && !r.live)
        },
    )
    .await;
    // Forgetting long-gone instances leaves a merely gone one (kept for a day) and live ones.
    assert_eq!(store.instance_leave(None).await.unwrap(), 0);
    assert_eq!(store.instance_list().await.unwrap().len(), 2);

    // A graceful leave removes exactly its own row.
    assert_eq!(
        store.instance_leave(Some(long.instance_id)).await.unwrap(),
        1
    );
    let left = store.instance_list().await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].instance_id, short.instance_id);
}

async fn membership_refuses_a_heartbeat_the_table_would_refuse(db: TestDb) {
    let store = db.store().await;
    for (bad, field) in [
        (
            InstanceBeat {
                host: String::new(),
                ..beat(Duration::from_secs(5), 0)
            },
            "host",
        ),
        (
            InstanceBeat {
                led: 9,
                ..beat(Duration::from_secs(5), 0)
            },
            "led",
        ),
        (
            InstanceBeat {
                ttl: Duration::ZERO,
                ..beat(Duration::from_secs(5), 0)
            },
            "ttl",
        ),
    ] {
        match store.instance_heartbeat(&bad).await {
            Err(Error::Invalid(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: expected a refusal, got {other:?}"),
        }
    }
    assert!(
        store.instance_list().await.unwrap().is_empty(),
        "nothing was written"
    );
}

conformance!(
    membership_heartbeats_register_move_expire_and_leave,
    membership_refuses_a_heartbeat_the_table_would_refuse,
);
