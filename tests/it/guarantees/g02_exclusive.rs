//! G2: at most one unexpired lease per resource at any instant of the database clock.
//! The history test runs 8 tasks × 200 acquire/renew/release rounds over 4 resources, records
//! what each call returned, and checks the history: per resource the tokens are exactly
//! 1, 2, 3, … and no lease began before the previous one ended, in database time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_tests::{Rng, TestDb};
use time::OffsetDateTime;

const TTL: Duration = Duration::from_secs(30);

async fn g2_held_lease_cannot_be_acquired(db: TestDb) {
    let outbox = db.outbox().await;
    let a = outbox
        .try_acquire("busy", TTL)
        .await
        .unwrap()
        .expect("free");
    assert!(outbox.try_acquire("busy", TTL).await.unwrap().is_none());
    assert!(
        outbox
            .try_acquire("busy", Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
    let rows = outbox.list_leases().await.unwrap();
    assert_eq!(
        (rows[0].owner_id, rows[0].token),
        (Some(a.owner_id), a.token),
        "unchanged"
    );
    assert!(outbox.release(&a).await.unwrap());
    assert!(outbox.try_acquire("busy", TTL).await.unwrap().is_some());
}

/// A lease as the history saw it.
#[derive(Debug, Default)]
struct Generation {
    /// Database time of the grant: the returned expiry minus the TTL asked for.
    acquired_at: Option<OffsetDateTime>,
    /// Position in the global order of events, taken after the acquisition returned.
    acquired_seq: u64,
    /// Database times of successful renewals.
    renewed_at: Vec<OffsetDateTime>,
    /// The latest expiry granted by acquisition or renewal.
    expires_at: Option<OffsetDateTime>,
    /// Position in the global order, taken before the release was called.
    released_seq: Option<u64>,
}

type History = HashMap<(usize, i64), Generation>;

async fn g2_history_of_concurrent_rounds_has_no_overlap(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::IGNORES_LOCKING_HINTS) {
        return;
    }
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 200;
    const RESOURCES: usize = 4;
    let outbox = db.outbox().await;
    let history: Arc<Mutex<History>> = Arc::default();
    let clock = Arc::new(AtomicU64::new(0));

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (outbox, history, clock) = (outbox.clone(), history.clone(), clock.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x6_2026 + task);
                for _ in 0..ROUNDS {
                    let r = rng.below(RESOURCES as u64) as usize;
                    // A few leases are abandoned with a short TTL, so expiry takeovers happen.
                    let abandon = rng.chance(3);
                    let ttl = if abandon { Duration::from_secs(1) } else { TTL };
                    if let Some(lease) = outbox.try_acquire(&format!("r{r}"), ttl).await.unwrap() {
                        let seq = clock.fetch_add(1, Ordering::SeqCst);
                        let key = (r, lease.token.get());
                        {
                            let mut h = history.lock().unwrap();
                            let g = h.entry(key).or_default();
                            assert!(g.acquired_at.is_none(), "token {key:?} granted twice");
                            g.acquired_at = Some(lease.expires_at - ttl);
                            g.acquired_seq = seq;
                            g.expires_at = Some(lease.expires_at);
                        }
                        for _ in 0..rng.below(3) {
                            if let Some(renewed) = outbox.renew(&lease, ttl).await.unwrap() {
                                let mut h = history.lock().unwrap();
                                let g = h.get_mut(&key).unwrap();
                                g.renewed_at.push(renewed.expires_at - ttl);
                                g.expires_at = Some(renewed.expires_at);
                            }
                        }
                        if !abandon {
                            let seq = clock.fetch_add(1, Ordering::SeqCst);
                            history.lock().unwrap().get_mut(&key).unwrap().released_seq = Some(seq);
                            assert!(
                                outbox.release(&lease).await.unwrap(),
                                "a 30 s lease is still ours"
                            );
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2 + rng.below(10))).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }

    let history = history.lock().unwrap();
    let (mut handovers, mut takeovers) = (0, 0);
    for r in 0..RESOURCES {
        let mut tokens: Vec<i64> = history.keys().filter(|k| k.0 == r).map(|k| k.1).collect();
        tokens.sort();
        let expected: Vec<i64> = (1..=tokens.len() as i64).collect();
        assert_eq!(
            tokens, expected,
            "resource r{r}: tokens must be 1, 2, 3, … with no gap or repeat"
        );
        for pair in tokens.windows(2) {
            let (prev, next) = (&history[&(r, pair[0])], &history[&(r, pair[1])]);
            let next_start = next.acquired_at.unwrap();
            assert!(
                next_start >= prev.acquired_at.unwrap(),
                "r{r}: token {} began before {}",
                pair[1],
                pair[0]
            );
            for renewed in &prev.renewed_at {
                assert!(
                    *renewed <= next_start,
                    "r{r}: token {} renewed after {} began",
                    pair[0],
                    pair[1]
                );
            }
            match prev.released_seq {
                Some(released) => {
                    assert!(
                        released < next.acquired_seq,
                        "r{r}: token {} granted before {} was released",
                        pair[1],
                        pair[0]
                    );
                    handovers += 1;
                }
                None => {
                    assert!(
                        next_start >= prev.expires_at.unwrap(),
                        "r{r}: token {} granted at {next_start} before {} expired at {:?}",
                        pair[1],
                        pair[0],
                        prev.expires_at
                    );
                    takeovers += 1;
                }
            }
        }
    }
    println!(
        "history: {} leases, {handovers} handovers after release, {takeovers} takeovers after expiry",
        history.len()
    );
    assert!(
        handovers > 0 && takeovers > 0,
        "the run must exercise both release and expiry"
    );
}

conformance!(
    g2_held_lease_cannot_be_acquired,
    g2_history_of_concurrent_rounds_has_no_overlap
);
