// The probe fails: open again, with the doubled cooldown.
//! Destination health on every backend: failures open a destination's breaker, exactly one
//! caller takes a due probe, its outcome closes or re-opens it with a longer cooldown, and a
//! pause (logged, with who and why) stops probes until a resume; each change is one locked
//! transaction, and a dry run or a refused input writes nothing.

use std::time::Duration;

use outbox_store::Error;
use outbox_store::admin::Change;
use outbox_store::health::{BreakerPolicy, BreakerState, Outcomes};
use outbox_tests::TestDb;

fn policy(cooldown_ms: u64) -> BreakerPolicy {
    BreakerPolicy {
        failures: 3,
        cooldown: Duration::from_millis(cooldown_ms),
        cooldown_max: Duration::from_secs(60),
        probe_timeout: Duration::from_secs(30),
    }
}

fn failed(n: u32) -> Outcomes {
    Outcomes {
        healthy: false,
        failures_after: n,
        last_error: Some("HTTP 503: retry scheduled".into()),
    }
}

fn change(reason: &str, dry_run: bool) -> Change {
    Change {
        actor: "ops-oncall".into(),
        reason: reason.into(),
        force: false,
        dry_run,
    }
}

async fn failures_open_a_destination_and_one_probe_closes_it(db: TestDb) {
    let store = db.store().await;
    assert!(store.destination_list().await.unwrap().is_empty());
    let p = policy(0);
    let t = store
        .destination_record("billing", &failed(2), &p)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.from, t.to, t.health.consecutive_failures),
        ("closed", "closed", 2)
    );
    let t = store
        .destination_record("billing", &failed(1), &p)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.from, t.to), ("closed", "open"));
    assert!(t.health.opened_at.is_some() && t.health.next_probe_at.is_some());
    assert_eq!(
        t.health.last_error.as_deref(),
        Some("HTTP 503: retry scheduled")
    );

    // Two callers race for the probe: one gets it.
    let (a, b) = tokio::join!(
        store.destination_probe_take("billing", &p),
        store.destination_probe_take("billing", &p)
    );
    let taken: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
    assert_eq!(taken.len(), 1, "{taken:#?}");
    assert_eq!(taken[0].to, "half_open");
    // The probe fails: open again, with the doubled cooldown.
    let t = store
        .destination_record("billing", &failed(1), &p)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.from, t.to, t.health.openings), ("half_open", "open", 2));
    // Another destination with a long cooldown: its doubled cooldown keeps it from probes.
    let slow = policy(60_000);
    store
        .destination_record("reports", &failed(3), &slow)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .destination_probe_take("reports", &slow)
            .await
            .unwrap()
            .is_none(),
        "cooling down"
    );

    // A healthy probe closes it, and the hold is kept for the ops' max_age.
    let since = t.health.opened_at.unwrap() - time::Duration::seconds(1);
    store
        .destination_probe_take("billing", &p)
        .await
        .unwrap()
        .unwrap();
    let healthy = Outcomes {
        healthy: true,
        ..Outcomes::default()
    };
    let t = store
        .destination_record("billing", &healthy, &p)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.from, t.to, t.health.consecutive_failures),
        ("half_open", "closed", 0)
    );
    let holds = store.destination_hold_list(since).await.unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].0, "billing");
    assert!(holds[0].1.until >= holds[0].1.from);
    // Retention: a recent hold is kept, an old one deleted.
    assert_eq!(
        store
            .destination_hold_purge(Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.destination_hold_purge(Duration::ZERO).await.unwrap(),
        1
    );
    assert!(store.destination_hold_list(since).await.unwrap().is_empty());
    // Nothing to write for a healthy answer to a healthy destination.
    assert!(
        store
            .destination_record("billing", &healthy, &p)
            .await
            .unwrap()
            .is_none()
    );
    let listed = store.destination_list().await.unwrap();
    let states: Vec<_> = listed
        .iter()
        .map(|h| (h.destination.as_str(), h.state))
        .collect();
    assert_eq!(
        states,
        [
            ("billing", BreakerState::Closed),
            ("reports", BreakerState::Open)
        ]
    );
}

async fn a_paused_destination_is_never_probed_and_its_pause_is_logged(db: TestDb) {
    let store = db.store().await;
    let p = policy(0);
    store
        .destination_record("billing", &failed(3), &p)
        .await
        .unwrap()
        .unwrap();

    let before = db.snapshot().await;
    let dry = store
        .destination_set_paused("billing", true, &change("vendor maintenance", true))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((dry.from, dry.to), ("open", "paused"));
    assert_eq!(db.snapshot().await, before, "a dry run writes nothing");

    let t = store
        .destination_set_paused(
            "billing",
            true,
            &change("vendor maintenance (CHG-12)", false),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.to, "paused");
    let pause = t.health.paused.clone().unwrap();
    assert_eq!(
        (pause.by.as_str(), pause.reason.as_str()),
        ("ops-oncall", "vendor maintenance (CHG-12)")
    );
    assert_ne!(db.snapshot().await, before, "logged in outbox_admin_log");
    assert!(
        store
            .destination_probe_take("billing", &p)
            .await
            .unwrap()
            .is_none(),
        "never probed"
    );
    assert!(
        store
            .destination_set_paused("billing", true, &change("again", false))
            .await
            .unwrap()
            .is_none(),
        "already paused"
    );
    // A destination that was never seen can be paused before it fails.
    let fresh = store
        .destination_set_paused("reports", true, &change("not yet", false))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((fresh.from, fresh.to), ("closed", "paused"));

    let resumed = store
        .destination_set_paused("billing", false, &change("vendor is back", false))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((resumed.from, resumed.to), ("paused", "closed"));
    assert!(resumed.health.delivering());
    assert_eq!(resumed.health.consecutive_failures, 0);

    let before = db.snapshot().await;
    for (name, reason, field) in [
        ("https://evil", "ok", "destination"),
        ("billing", "", "reason"),
        ("billing", &"r".repeat(2001) as &str, "reason"),
    ] {
        match store
            .destination_set_paused(name, true, &change(reason, false))
            .await
        {
            Err(Error::Invalid(e)) => assert_eq!(e.field, field, "{name} {reason:?}"),
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(db.snapshot().await, before, "nothing was written");
}

conformance!(
    failures_open_a_destination_and_one_probe_closes_it,
    a_paused_destination_is_never_probed_and_its_pause_is_logged,
);
