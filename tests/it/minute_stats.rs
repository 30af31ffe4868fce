//! The console's per-minute counts on every backend (`outbox_store::stats`): what two
//! dispatchers write for the same minutes is read back summed, a rewrite of a row already
//! written changes nothing (a retry of a write that committed), the backlog reads the larger
//! sample of a minute, retention deletes whole minutes, and an invalid destination name writes
//! nothing.

use std::time::Duration;

use outbox_store::Error;
use outbox_store::stats::{BacklogSample, Counts, MinuteCounts, minute_of};
use outbox_tests::TestDb;
use time::OffsetDateTime;
use uuid::Uuid;

fn counts(delivered: u64, latency: Duration, retried: u64, dead: u64) -> Counts {
    let mut c = Counts {
        retried,
        dead,
        ..Counts::default()
    };
    for _ in 0..delivered {
        c.delivered_after(latency);
    }
    c
}

fn row(minute: OffsetDateTime, destination: &str, c: Counts) -> MinuteCounts {
    MinuteCounts {
        minute,
        destination: destination.to_owned(),
        counts: c,
    }
}

fn sample(minute: OffsetDateTime, pending: i64, oldest_ms: Option<i64>) -> BacklogSample {
    BacklogSample {
        minute,
        pending,
        in_flight: 1,
        oldest_pending_ms: oldest_ms,
    }
}

async fn two_dispatchers_counts_are_read_back_summed_by_minute_and_destination(db: TestDb) {
    let store = db.store().await;
    let now = minute_of(OffsetDateTime::now_utc());
    let (m1, m2) = (
        now - time::Duration::minutes(3),
        now - time::Duration::minutes(2),
    );
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let fast = Duration::from_millis(40);
    let slow = Duration::from_secs(3);
    let a_rows = [
        row(m1, "billing", counts(5, fast, 1, 0)),
        row(m2, "billing", counts(2, slow, 0, 1)),
        row(m2, "mail", counts(0, fast, 3, 0)),
    ];
    store
        .stats_write(a, &a_rows, Some(&sample(m2, 40, Some(2500))))
        .await
        .unwrap();
    // The same rows again (a retried write that had committed): nothing changes.
    store
        .stats_write(a, &a_rows, Some(&sample(m2, 999, None)))
        .await
        .unwrap();
    store
        .stats_write(
            b,
            &[row(m2, "billing", counts(4, fast, 0, 0))],
            Some(&sample(m2, 42, Some(1000))),
        )
        .await
        .unwrap();

    let read = store
        .stats_read(now - time::Duration::minutes(10))
        .await
        .unwrap();
    let got: Vec<(OffsetDateTime, &str, u64, u64, u64)> = read
        .counts
        .iter()
        .map(|m| {
            let c = &m.counts;
            (
                m.minute,
                m.destination.as_str(),
                c.delivered,
                c.retried,
                c.dead,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (m1, "billing", 5, 1, 0),
            (m2, "billing", 6, 0, 1),
            (m2, "mail", 0, 3, 0),
        ]
    );
    let billing = &read.counts[1].counts;
    assert_eq!(billing.latency[0], 4, "b's four fast ones");
    assert_eq!(billing.latency[5], 2, "a's two of 3 s (≤ 5 s)");
    assert_eq!(billing.latency.iter().sum::<u64>(), 6);
    let grouped = !db.part_not_run_on_babelfish(
        "the backlog samples of one minute read as one",
        outbox_tests::babelfish::GROUP_BY_DATETIMEOFFSET,
    );
    if grouped {
        assert_eq!(read.backlog.len(), 1);
        let backlog = read.backlog[0];
        assert_eq!(
            (backlog.minute, backlog.pending),
            (m2, 42),
            "the larger sample"
        );
        assert_eq!(backlog.oldest_pending_ms, Some(2500));
    }

    // From a later minute on, the earlier one is left out.
    let later = store.stats_read(m2).await.unwrap();
    assert_eq!(later.counts.len(), 2);

    // Retention: the minutes before m2 go, of both tables.
    let deleted = store.stats_purge(m2).await.unwrap();
    assert_eq!(deleted, 1);
    let left = store
        .stats_read(now - time::Duration::minutes(10))
        .await
        .unwrap();
    assert_eq!(left.counts.len(), 2);
    if grouped {
        assert_eq!(left.backlog.len(), 1);
    }
    // Three rows of counts (two dispatchers) and two samples.
    assert_eq!(
        store
            .stats_purge(now + time::Duration::minutes(1))
            .await
            .unwrap(),
        5
    );
}

async fn an_invalid_destination_name_writes_nothing(db: TestDb) {
    let store = db.store().await;
    let now = minute_of(OffsetDateTime::now_utc());
    let rows = [
        row(now, "billing", counts(1, Duration::ZERO, 0, 0)),
        row(now, "https://evil/x", counts(1, Duration::ZERO, 0, 0)),
    ];
    match store.stats_write(Uuid::new_v4(), &rows, None).await {
        Err(Error::Invalid(e)) => assert_eq!(e.field, "destination"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let read = store.stats_read(now).await.unwrap();
    assert!(read.counts.is_empty() && read.backlog.is_empty());
}

conformance!(
    two_dispatchers_counts_are_read_back_summed_by_minute_and_destination,
    an_invalid_destination_name_writes_nothing,
);
