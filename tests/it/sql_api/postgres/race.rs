//! G4 under contention, through SQL: the twin of
//! g4_race_every_accepted_op_had_the_newest_token (tests/it/guarantees/g04_fenced_enqueue.rs)
//! with every lease and every enqueue an `outbox.*` call.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_tests::Rng;
use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{SqlLease, SqlOp, count, enqueue, migrated, refusal, try_acquire};

/// What the race recorded.
#[derive(Debug, Default)]
struct RaceLog {
    /// token -> (database time of the grant, order position after the grant returned).
    grants: HashMap<i64, (OffsetDateTime, u64)>,
    /// (token, op id, order position before the enqueue was invoked).
    accepted: Vec<(i64, Uuid, u64)>,
    stale: u64,
    expired: u64,
}

impl RaceLog {
    /// Enough happened for the race to prove something.
    fn enough(&self) -> bool {
        self.grants.len() >= 4 && !self.accepted.is_empty() && self.stale + self.expired > 0
    }
}

const RACE_TTL_MS: u64 = 200;

/// One worker of the race: takes the lease whenever it is free, then enqueues with the token
/// it last got, holding on to it a while (which is how owners go stale), until the race has
/// run long enough.
async fn race_worker(url: String, p: u64, log: Arc<Mutex<RaceLog>>, clock: Arc<AtomicU64>) {
    let mut c = PgConnection::connect(&url).await.unwrap();
    c.execute("SET outbox.lease_min_ttl = '100ms'")
        .await
        .unwrap();
    let ttl = format!("{RACE_TTL_MS} milliseconds");
    let started = tokio::time::Instant::now();
    let mut rng = Rng::new(0x15_2026 + p);
    let mut mine: Option<SqlLease> = None;
    let mut round = 0;
    // At least 2 s of churn, then until enough happened; the bound is for a stalled machine.
    while started.elapsed() < Duration::from_secs(2)
        || (!log.lock().unwrap().enough() && started.elapsed() < Duration::from_secs(20))
    {
        round += 1;
        if let Some(lease) = try_acquire(&mut c, "contended", Some(&ttl)).await.unwrap() {
            let seq = clock.fetch_add(1, Ordering::SeqCst);
            let granted_at = lease.expires_at - Duration::from_millis(RACE_TTL_MS);
            log.lock()
                .unwrap()
                .grants
                .insert(lease.token, (granted_at, seq));
            mine = Some(lease);
        }
        let Some(lease) = mine else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        for i in 0..1 + rng.below(4) {
            let op = SqlOp::post(&format!("p{p}-r{round}-{i}"), "{}");
            let invoked = clock.fetch_add(1, Ordering::SeqCst);
            let result = enqueue(&mut c, "contended", &lease, &op).await;
            {
                let mut log = log.lock().unwrap();
                match result {
                    Ok(done) => log.accepted.push((lease.token, done.op_id, invoked)),
                    Err(e) => match refusal(&e).map(|r| r.code) {
                        Some(code) if code == "OB001" => log.stale += 1,
                        Some(code) if code == "OB002" => log.expired += 1,
                        _ => panic!("unexpected enqueue error: {e}"),
                    },
                }
            }
            tokio::time::sleep(Duration::from_millis(5 + rng.below(60))).await;
        }
    }
}

/// The SQL twin of g4_race_every_accepted_op_had_the_newest_token: 8 connections each take
/// the 200 ms lease whenever it is free and enqueue through `outbox.enqueue` with the token
/// they last got, while leases expire and are granted again. Every accepted op had the newest
/// token when it committed: it was inserted before the next token was granted (database
/// time), and no newer token had been granted before the enqueue began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_race_every_accepted_op_had_the_newest_token() {
    let db = migrated().await;
    let log = Arc::new(Mutex::new(RaceLog::default()));
    let clock = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..8u64)
        .map(|p| {
            tokio::spawn(race_worker(
                db.url().to_owned(),
                p,
                log.clone(),
                clock.clone(),
            ))
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let log = Arc::into_inner(log)
        .expect("the workers are done")
        .into_inner()
        .unwrap();
    let pool = PgPool::connect(db.url()).await.unwrap();
    let stored: HashMap<Uuid, (i64, OffsetDateTime)> =
        sqlx::query_as::<_, (Uuid, i64, OffsetDateTime)>(
            "SELECT op_id, fence, created_at FROM outbox_ops",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, fence, at)| (id, (fence, at)))
        .collect();
    assert_eq!(
        stored.len(),
        log.accepted.len(),
        "exactly the accepted ops are stored"
    );
    let mut superseded = 0;
    for (token, op_id, invoked) in &log.accepted {
        let (fence, created_at) = stored[op_id];
        assert_eq!(fence, *token);
        let Some((next_granted_at, next_granted_seq)) = log.grants.get(&(token + 1)) else {
            continue;
        };
        superseded += 1;
        assert!(
            created_at < *next_granted_at,
            "op {op_id} of token {token} inserted at {created_at}, after token {} was granted at {next_granted_at}",
            token + 1
        );
        assert!(
            invoked < next_granted_seq,
            "op {op_id} of token {token} began after token {} was granted",
            token + 1
        );
    }
    println!(
        "sql race: {} accepted, {} rejected as stale, {} as expired, {} tokens granted",
        log.accepted.len(),
        log.stale,
        log.expired,
        log.grants.len()
    );
    assert!(log.enough(), "the race proved nothing: {log:?}");
    assert!(
        superseded > 0,
        "no accepted op's token was followed by a newer one"
    );
    let tokens: Vec<i64> = log.grants.keys().copied().collect();
    assert_eq!(
        (1..=tokens.len() as i64).collect::<HashSet<_>>(),
        tokens.into_iter().collect::<HashSet<_>>(),
        "every grant was recorded"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_rejections WHERE stage = 'sql_enqueue'"
        )
        .await,
        (log.stale + log.expired) as i64,
        "every refused enqueue was kept as a rejection"
    );
}
