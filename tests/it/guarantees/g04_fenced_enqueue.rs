//! G4: an enqueue is accepted iff, atomically with the insert, the resource's lease has this
//! owner id and token and is unexpired; otherwise nothing is inserted, the caller gets a typed
//! error and a rejection record is kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_producer::{Error, Lease, Operation};
use outbox_tests::{Kind, Rng, TestDb, wait_for};
use time::OffsetDateTime;

const TTL: Duration = Duration::from_secs(30);

/// Runs the block with `$tx` bound to a new transaction on the caller's own connection to
/// `$db` (SQLite: `BEGIN IMMEDIATE`; SQL Server: `BEGIN TRANSACTION` on a client of
/// `outbox_store::mssql::connect`), as an application using `enqueue_in` would; the block
/// commits or rolls back.
macro_rules! in_caller_tx {
    ($db:expr, |$tx:ident| $body:block) => {{
        let mut $tx = CallerTx::begin(&$db).await;
        $body
    }};
}

/// A caller's own open transaction, on any backend.
enum CallerTx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    /// Boxed: a tiberius client is large beside the sqlx transactions.
    Mssql(Box<outbox_store::mssql::Client>),
}

impl CallerTx {
    async fn begin(db: &TestDb) -> CallerTx {
        match db.kind() {
            Kind::Sqlite => {
                let pool = outbox_producer::sqlx::SqlitePool::connect(db.url())
                    .await
                    .unwrap();
                CallerTx::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await.unwrap())
            }
            Kind::Postgres => {
                let pool = outbox_producer::sqlx::PgPool::connect(db.url())
                    .await
                    .unwrap();
                CallerTx::Postgres(pool.begin().await.unwrap())
            }
            Kind::Mssql => {
                let mut c = outbox_store::mssql::connect(db.url()).await.unwrap();
                Self::batch(&mut c, "BEGIN TRANSACTION").await.unwrap();
                CallerTx::Mssql(Box::new(c))
            }
        }
    }

    /// One business write inside the transaction.
    async fn execute(&mut self, sql: &'static str) -> Result<(), String> {
        match self {
            CallerTx::Sqlite(tx) => sqlx::query(sql).execute(&mut **tx).await.map(drop),
            CallerTx::Postgres(tx) => sqlx::query(sql).execute(&mut **tx).await.map(drop),
            CallerTx::Mssql(c) => return Self::batch(c, sql).await,
        }
        .map_err(|e| e.to_string())
    }

    async fn commit(self) -> Result<(), String> {
        match self {
            CallerTx::Sqlite(tx) => tx.commit().await.map_err(|e| e.to_string()),
            CallerTx::Postgres(tx) => tx.commit().await.map_err(|e| e.to_string()),
            CallerTx::Mssql(mut c) => Self::batch(&mut c, "COMMIT TRANSACTION").await,
        }
    }

    /// On SQL Server an error under `XACT_ABORT ON` may have rolled the transaction back
    /// already; rolling back what is left is all a caller can do either way.
    async fn rollback(self) -> Result<(), String> {
        match self {
            CallerTx::Sqlite(tx) => tx.rollback().await.map_err(|e| e.to_string()),
            CallerTx::Postgres(tx) => tx.rollback().await.map_err(|e| e.to_string()),
            CallerTx::Mssql(mut c) => {
                Self::batch(&mut c, "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION").await
            }
        }
    }

    async fn batch(c: &mut outbox_store::mssql::Client, sql: &str) -> Result<(), String> {
        let done = async { c.simple_query(sql).await?.into_results().await }.await;
        done.map(drop).map_err(|e| e.to_string())
    }
}

impl<'c> From<&'c mut CallerTx> for outbox_store::Conn<'c> {
    fn from(tx: &'c mut CallerTx) -> Self {
        match tx {
            CallerTx::Sqlite(tx) => outbox_store::Conn::from(tx),
            CallerTx::Postgres(tx) => outbox_store::Conn::from(tx),
            CallerTx::Mssql(c) => outbox_store::Conn::from(&mut **c),
        }
    }
}

fn statement_op(key: &str, body: &str) -> Operation {
    Operation::post("statements", "/v1/statements")
        .body(body.as_bytes().to_vec(), "application/json")
        .idempotency_key(key)
        .build()
        .unwrap()
}

/// The seed's story: A is paused past its lease, B takes over and enqueues, A resumes and is
/// refused; only B's op is pending, and A's attempt is on record.
async fn g4_seed_story_stale_owner_is_rejected_and_recorded(db: TestDb) {
    let outbox = db.outbox().await;
    let resource = "statement:account-1842:2026-07";
    let a = outbox
        .try_acquire(resource, Duration::from_secs(1))
        .await
        .unwrap()
        .expect("A acquires");
    // A starts work, then stops renewing (paused). B waits for the lease to expire.
    let outbox_ref = &outbox;
    let b = wait_for(
        Duration::from_secs(20),
        "B takes over the expired lease",
        || async move { outbox_ref.try_acquire(resource, TTL).await.unwrap() },
    )
    .await;
    assert_eq!(b.token.get(), a.token.get() + 1);
    let accepted = outbox
        .enqueue(&b, &statement_op("statement-1842-2026-07", r#"{"by":"B"}"#))
        .await
        .unwrap();
    assert!(!accepted.duplicate);

    // A resumes and tries to record its (older) statement.
    match outbox
        .enqueue(&a, &statement_op("statement-1842-2026-07", r#"{"by":"A"}"#))
        .await
    {
        Err(Error::Stale { current_token }) => assert_eq!(current_token, b.token),
        other => panic!("A must be refused as stale, got {other:?}"),
    }

    let ops = db.ops().await;
    assert_eq!(ops.len(), 1, "only B's op exists: {ops:?}");
    assert_eq!(
        (ops[0].fence, ops[0].state.as_str(), ops[0].body.as_slice()),
        (b.token.get(), "pending", &br#"{"by":"B"}"#[..])
    );
    assert_eq!(ops[0].op_id, accepted.op_id.to_string());

    let rejections = outbox.store().rejection_list(10).await.unwrap();
    assert_eq!(rejections.len(), 1);
    let r = &rejections[0];
    assert_eq!(
        (r.resource.as_str(), r.owner_id, r.token, r.current_token),
        (resource, a.owner_id, a.token, Some(b.token))
    );
    assert_eq!((r.reason.as_str(), r.stage.as_str()), ("stale", "enqueue"));
    assert_eq!(
        (r.destination.as_deref(), r.idempotency_key.as_deref()),
        (Some("statements"), Some("statement-1842-2026-07"))
    );
}

async fn g4_several_enqueues_under_one_token_are_accepted(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("billing:run-7", TTL)
        .await
        .unwrap()
        .unwrap();
    let mut seqs = Vec::new();
    for i in 0..5 {
        let done = outbox
            .enqueue(&lease, &statement_op(&format!("line-{i}"), "{}"))
            .await
            .unwrap();
        assert!(!done.duplicate);
        seqs.push(done.seq);
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers grow: {seqs:?}"
    );
    let ops = db.ops().await;
    assert_eq!(ops.len(), 5);
    assert!(
        ops.iter().all(
            |o| o.fence == lease.token.get() && o.order_key.as_deref() == Some("billing:run-7")
        )
    );
}

async fn g4_expired_released_and_unknown_leases_get_their_own_errors(db: TestDb) {
    let outbox = db.outbox().await;
    let short = outbox
        .try_acquire("short", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let outbox_ref = &outbox;
    wait_for(
        Duration::from_secs(20),
        "the lease expired",
        || async move { (!outbox_ref.list_leases().await.unwrap()[0].held).then_some(()) },
    )
    .await;
    assert!(matches!(
        outbox.enqueue(&short, &statement_op("k1", "{}")).await,
        Err(Error::LeaseExpired)
    ));

    let released = outbox.try_acquire("released", TTL).await.unwrap().unwrap();
    assert!(outbox.release(&released).await.unwrap());
    assert!(matches!(
        outbox.enqueue(&released, &statement_op("k2", "{}")).await,
        Err(Error::NoLease)
    ));

    let never = Lease {
        resource: outbox_producer::ResourceName::new("never-leased").unwrap(),
        ..released.clone()
    };
    assert!(matches!(
        outbox.enqueue(&never, &statement_op("k3", "{}")).await,
        Err(Error::NoLease)
    ));

    assert!(db.ops().await.is_empty());
    let reasons: Vec<String> = outbox
        .store()
        .rejection_list(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(reasons, ["no_lease", "no_lease", "expired"]);
}

/// One task keeps taking over the resource as each 1 s lease expires, while 8 tasks enqueue
/// with whatever lease they last saw, sometimes holding on to it too long. Every accepted op
/// must have had the newest token when it committed: it was inserted before the next token was
/// granted (database time) and no newer token had been granted before the enqueue began.
async fn g4_race_every_accepted_op_had_the_newest_token(db: TestDb) {
    let outbox = db.outbox().await;
    let clock = Arc::new(AtomicU64::new(0));
    let first = outbox
        .try_acquire("contended", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    // token -> (database time of the grant, order position after the grant returned)
    let grants: Arc<Mutex<HashMap<i64, (OffsetDateTime, u64)>>> = Arc::default();
    grants.lock().unwrap().insert(
        first.token.get(),
        (first.expires_at - Duration::from_secs(1), 0),
    );
    let (publish, current) = tokio::sync::watch::channel(first);
    let stop = tokio_util::sync::CancellationToken::new();

    let acquirer = {
        let (outbox, grants, clock, stop) =
            (outbox.clone(), grants.clone(), clock.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Some(lease) = outbox
                    .try_acquire("contended", Duration::from_secs(1))
                    .await
                    .unwrap()
                {
                    let seq = clock.fetch_add(1, Ordering::SeqCst);
                    grants.lock().unwrap().insert(
                        lease.token.get(),
                        (lease.expires_at - Duration::from_secs(1), seq),
                    );
                    publish.send_replace(lease);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // (token, op id, order position before the enqueue was invoked)
    let accepted: Arc<Mutex<Vec<(i64, uuid::Uuid, u64)>>> = Arc::default();
    let (stale, expired) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let producers: Vec<_> = (0..8u64)
        .map(|p| {
            let (outbox, current, clock, accepted) = (
                outbox.clone(),
                current.clone(),
                clock.clone(),
                accepted.clone(),
            );
            let (stale, expired) = (stale.clone(), expired.clone());
            tokio::spawn(async move {
                let mut rng = Rng::new(0x4_2026 + p);
                for round in 0..40 {
                    let lease = current.borrow().clone();
                    for i in 0..1 + rng.below(4) {
                        let op = statement_op(&format!("p{p}-r{round}-{i}"), "{}");
                        let invoked = clock.fetch_add(1, Ordering::SeqCst);
                        match outbox.enqueue(&lease, &op).await {
                            Ok(done) => accepted.lock().unwrap().push((
                                lease.token.get(),
                                done.op_id,
                                invoked,
                            )),
                            Err(Error::Stale { .. }) => _ = stale.fetch_add(1, Ordering::Relaxed),
                            Err(Error::LeaseExpired) => _ = expired.fetch_add(1, Ordering::Relaxed),
                            Err(e) => panic!("unexpected enqueue error: {e}"),
                        }
                        // Holding on to a lease for a while is how owners go stale.
                        tokio::time::sleep(Duration::from_millis(5 + rng.below(60))).await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    stop.cancel();
    acquirer.await.unwrap();

    let created: HashMap<String, OffsetDateTime> = db
        .ops()
        .await
        .into_iter()
        .map(|o| (o.op_id, o.created_at))
        .collect();
    let grants = grants.lock().unwrap();
    let accepted = accepted.lock().unwrap();
    for (token, op_id, invoked) in accepted.iter() {
        let Some((next_granted_at, next_granted_seq)) = grants.get(&(token + 1)) else {
            continue;
        };
        let created_at = created[&op_id.to_string()];
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
    let (stale, expired) = (
        stale.load(Ordering::Relaxed),
        expired.load(Ordering::Relaxed),
    );
    println!(
        "race: {} accepted, {stale} rejected as stale, {expired} rejected as expired, {} tokens granted",
        accepted.len(),
        grants.len()
    );
    assert!(
        !accepted.is_empty(),
        "nothing was accepted: the test proved nothing"
    );
    assert!(
        stale + expired > 0,
        "nothing was rejected: the test proved nothing"
    );
    assert!(
        grants.len() >= 3,
        "the lease changed hands too rarely: {} tokens",
        grants.len()
    );
}

async fn g4_enqueue_in_commits_or_rolls_back_with_the_business_write(db: TestDb) {
    let outbox = db.outbox().await;
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)")
        .await;
    let lease = outbox.try_acquire("invoice:7", TTL).await.unwrap().unwrap();
    let op = |k: &str| statement_op(k, r#"{"invoice":7}"#);
    in_caller_tx!(db, |tx| {
        tx.execute("INSERT INTO invoices (id, amount) VALUES (1, 100)")
            .await
            .unwrap();
        outbox
            .enqueue_in(&mut tx, &lease, &op("rolled-back"))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    });
    in_caller_tx!(db, |tx| {
        tx.execute("INSERT INTO invoices (id, amount) VALUES (2, 200)")
            .await
            .unwrap();
        outbox
            .enqueue_in(&mut tx, &lease, &op("committed"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    });
    let keys: Vec<String> = db
        .ops()
        .await
        .into_iter()
        .map(|o| o.idempotency_key)
        .collect();
    assert_eq!(keys, ["committed"]);
    assert_eq!(
        db.execute("UPDATE invoices SET amount = amount").await,
        1,
        "only the committed invoice exists"
    );
}

/// A stale enqueue inside a caller's transaction is refused, and its rejection record survives
/// the caller rolling back.
async fn g4_rejection_in_a_caller_transaction_survives_its_rollback(db: TestDb) {
    let outbox = db.outbox().await;
    let old = outbox.try_acquire("tx-stale", TTL).await.unwrap().unwrap();
    outbox.release(&old).await.unwrap();
    let newer = outbox.try_acquire("tx-stale", TTL).await.unwrap().unwrap();
    let op = statement_op("in-tx", "{}");
    in_caller_tx!(db, |tx| {
        let err = outbox.enqueue_in(&mut tx, &old, &op).await.unwrap_err();
        assert!(
            matches!(err, Error::Stale { current_token } if current_token == newer.token),
            "{err:?}"
        );
        tx.rollback().await.unwrap();
    });
    let store = outbox.store();
    let rejection = wait_for(
        Duration::from_secs(20),
        "the rejection is recorded",
        || async move { store.rejection_list(1).await.unwrap().pop() },
    )
    .await;
    assert_eq!(
        (rejection.stage.as_str(), rejection.token),
        ("enqueue_in", old.token)
    );
    assert!(db.ops().await.is_empty());
}

async fn g4_batches_are_all_or_nothing(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = outbox.try_acquire("batch", TTL).await.unwrap().unwrap();
    outbox
        .enqueue(&lease, &statement_op("taken", "original"))
        .await
        .unwrap();
    let batch = [
        statement_op("b1", "{}"),
        statement_op("b2", "{}"),
        statement_op("taken", "different"),
    ];
    assert!(matches!(
        outbox.enqueue_batch(&lease, &batch).await,
        Err(Error::IdempotencyConflict { .. })
    ));
    assert_eq!(
        db.ops().await.len(),
        1,
        "the conflicting batch left nothing behind"
    );

    let batch = [
        statement_op("b1", "{}"),
        statement_op("b2", "{}"),
        statement_op("taken", "original"),
    ];
    let done = outbox.enqueue_batch(&lease, &batch).await.unwrap();
    assert_eq!(
        done.iter().map(|d| d.duplicate).collect::<Vec<_>>(),
        [false, false, true]
    );
    assert_eq!(db.ops().await.len(), 3);

    outbox.release(&lease).await.unwrap();
    let batch = [statement_op("c1", "{}"), statement_op("c2", "{}")];
    assert!(matches!(
        outbox.enqueue_batch(&lease, &batch).await,
        Err(Error::NoLease)
    ));
    assert_eq!(db.ops().await.len(), 3);
    let rejection = &outbox.store().rejection_list(1).await.unwrap()[0];
    assert_eq!(
        (
            rejection.stage.as_str(),
            rejection.idempotency_key.as_deref()
        ),
        ("enqueue_batch", Some("c1"))
    );
}

/// The lock half of G4: while an enqueue's transaction is open it holds the lease row (FOR
/// SHARE on PostgreSQL, the write lock on SQLite), so a takeover after expiry waits for it
/// to commit, and the accepted op is never committed after a newer token was granted.
/// A batch stores each op exactly as `enqueue` would: every column but the key.
async fn g4_a_batch_stores_ops_as_enqueue_does(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::OPENJSON_KEEPS_ESCAPES) {
        return;
    }
    let outbox = db.outbox().await;
    let lease = outbox.try_acquire("batch", TTL).await.unwrap().unwrap();
    let op = |key: &str| {
        Operation::post("statements", "/v1/statements?draft=false")
            .header("X-Request-Source", "statement-job")
            .body(vec![0u8, 159, 146, 150, 255], "application/octet-stream")
            .idempotency_key(key)
            .order_key("account-1842")
            .expire_with_generation()
            .not_before(Duration::from_secs(3600))
            .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
            .build()
            .unwrap()
    };
    outbox.enqueue(&lease, &op("single")).await.unwrap();
    outbox
        .enqueue_batch(&lease, &[op("batch-1"), op("batch-2")])
        .await
        .unwrap();
    let ops = db.ops().await;
    assert_eq!(ops.len(), 3);
    for batched in &ops[1..] {
        let single = &ops[0];
        assert_eq!(
            (
                &batched.body,
                &batched.content_type,
                &batched.headers,
                &batched.order_key,
                batched.expire_with_generation,
                batched.fence,
                &batched.state
            ),
            (
                &single.body,
                &single.content_type,
                &single.headers,
                &single.order_key,
                single.expire_with_generation,
                single.fence,
                &single.state
            )
        );
        let delay = batched.next_attempt_at - batched.created_at;
        assert!(delay > time::Duration::minutes(59), "{delay}");
    }
    assert!(ops[1].seq < ops[2].seq, "batch order is enqueue order");
    let store = db.store().await;
    for op in &ops {
        let shown = store.admin_op_show(op.seq).await.unwrap().unwrap();
        assert_eq!(
            (shown.trace_context.as_deref(), shown.trace_state.as_deref()),
            (
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
                Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
            ),
            "the trace context is stored whole"
        );
    }
}

async fn g4_a_takeover_waits_for_an_open_enqueue_transaction(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::IGNORES_LOCKING_HINTS) {
        return;
    }
    let outbox = db.outbox().await;
    let ttl = Duration::from_secs(1);
    let lease = outbox.try_acquire("locked", ttl).await.unwrap().unwrap();
    let op = statement_op("in-open-tx", "{}");
    let takeover = |outbox: outbox_producer::Outbox| {
        tokio::spawn(async move {
            // Past the 1 s lease: by the clock the lease is free to take.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            outbox.try_acquire("locked", TTL).await.unwrap()
        })
    };
    let newer = in_caller_tx!(db, |tx| {
        outbox.enqueue_in(&mut tx, &lease, &op).await.unwrap();
        let taker = takeover(outbox.clone());
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !taker.is_finished(),
            "the takeover must wait for the open enqueue transaction"
        );
        tx.commit().await.unwrap();
        taker
            .await
            .unwrap()
            .expect("the takeover succeeds once the enqueue committed")
    });
    assert_eq!(newer.token.get(), lease.token.get() + 1);
    let op_row = &db.ops().await[0];
    assert!(
        op_row.created_at < newer.expires_at - TTL,
        "the op was inserted before the takeover"
    );
}

/// The takeover window on PostgreSQL: while a takeover holds the lease row (its update not
/// yet committed), an enqueue with the old token waits on the row, and once the takeover
/// commits it is refused as stale (it re-reads the row: it never reads around the lock), and
/// nothing is inserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_postgres_an_enqueue_waits_for_a_takeover_in_progress_then_is_refused() {
    use outbox_producer::sqlx::{Connection as _, PgConnection};
    let db = TestDb::postgres().await;
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("takeover-window", TTL)
        .await
        .unwrap()
        .unwrap();
    // Another owner takes the resource over (as an operator's forced takeover would), in a
    // transaction left open: the lease row stays locked.
    let mut taker = PgConnection::connect(db.url()).await.unwrap();
    outbox_producer::sqlx::query("BEGIN")
        .execute(&mut taker)
        .await
        .unwrap();
    outbox_producer::sqlx::query(
        "UPDATE outbox_leases SET owner_id = gen_random_uuid(), fence = fence + 1, \
         expires_at = clock_timestamp() + interval '30 seconds' WHERE resource = 'takeover-window'",
    )
    .execute(&mut taker)
    .await
    .unwrap();
    let enqueue = {
        let (outbox, lease) = (outbox.clone(), lease.clone());
        tokio::spawn(async move { outbox.enqueue(&lease, &statement_op("late", "{}")).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !enqueue.is_finished(),
        "the enqueue must wait for the takeover holding the lease row"
    );
    assert!(db.ops().await.is_empty());
    outbox_producer::sqlx::query("COMMIT")
        .execute(&mut taker)
        .await
        .unwrap();
    match enqueue.await.unwrap() {
        Err(Error::Stale { current_token }) => {
            assert_eq!(current_token.get(), lease.token.get() + 1)
        }
        other => panic!("expected a stale refusal after the takeover, got {other:?}"),
    }
    assert!(db.ops().await.is_empty(), "never inserted");
}

conformance!(
    g4_a_takeover_waits_for_an_open_enqueue_transaction,
    g4_seed_story_stale_owner_is_rejected_and_recorded,
    g4_several_enqueues_under_one_token_are_accepted,
    g4_expired_released_and_unknown_leases_get_their_own_errors,
    g4_race_every_accepted_op_had_the_newest_token,
    g4_enqueue_in_commits_or_rolls_back_with_the_business_write,
    g4_rejection_in_a_caller_transaction_survives_its_rollback,
    g4_batches_are_all_or_nothing,
    g4_a_batch_stores_ops_as_enqueue_does,
);
