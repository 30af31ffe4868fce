//! Tests named after the issue they pin, each run against every backend.

use std::time::Duration;

use outbox_producer::{OpState, Operation, OrderKey};
use outbox_store::{
    AttemptOutcome, ClaimRoom, Completion, Lease, NextState, Partition, Renewal, ResourceName,
    Store,
};
use outbox_tests::{Kind, TestDb, lease, wait_until};
use time::OffsetDateTime;

const TTL: Duration = Duration::from_secs(60);

/// A resource whose ops fall in a partition slot with `slot % count == index`.
fn resource_in(count: i32, index: i32) -> String {
    (0..)
        .map(|i| format!("issue12:{i}"))
        .find(|r| {
            let key = OrderKey::new(r.as_str()).unwrap();
            outbox_store::op::partition_slot(Some(&key), uuid::Uuid::nil()) % count == index
        })
        .unwrap()
}

/// A partition lease, acquired `times` times in a row (each acquisition a newer token).
async fn partition_lease(store: &Store, partition: Partition, times: u32) -> Lease {
    let resource = ResourceName::new(partition.lease_resource()).unwrap();
    for _ in 1..times {
        let lease = store
            .lease_try_acquire(&resource, TTL)
            .await
            .unwrap()
            .unwrap();
        store.lease_release(&lease).await.unwrap();
    }
    store
        .lease_try_acquire(&resource, TTL)
        .await
        .unwrap()
        .unwrap()
}

/// Enqueues one op under `resource`, then claims it as partition 0 of 1 under a partition
/// lease of `ttl`: the lease and the claimed op's sequence.
async fn claimed_by_partition_0(
    db: &TestDb,
    store: &Store,
    resource: &str,
    ttl: Duration,
) -> (Lease, i64) {
    let outbox = db.outbox().await;
    let producer = lease(&outbox, resource).await;
    let op = Operation::post("api", "/v1/x")
        .idempotency_key("k")
        .build()
        .unwrap();
    outbox.enqueue(&producer, &op).await.unwrap();
    let one = Partition::new(0, 1).unwrap();
    let name = ResourceName::new(one.lease_resource()).unwrap();
    let held = store.lease_try_acquire(&name, ttl).await.unwrap().unwrap();
    let claimed = store
        .op_claim(&held, one, &[ClaimRoom::new("api", 10)], &[], 10, 1 << 20)
        .await
        .unwrap();
    assert_eq!(claimed.ops.len(), 1);
    (held, claimed.ops[0].seq)
}

fn delivered(seq: i64) -> Completion {
    Completion {
        seq,
        op_id: uuid::Uuid::nil(),
        attempt: 1,
        started_at: OffsetDateTime::now_utc(),
        outcome: AttemptOutcome::Delivered,
        http_status: Some(200),
        error: None,
        excerpt: None,
        next: NextState::Delivered,
        trace_context: None,
    }
}

/// Issue 12, item 4: a claim is matched by its partition lease, not only its token. Tokens of
/// different partitions can be equal; before, a dispatcher of another partition count could
/// complete another's claim of the same token number, and re-queue (to send again) one whose
/// token number differed, while its attempt was under way.
async fn issue12_claims_match_their_partition_lease_not_only_its_token(db: TestDb) {
    let store = db.store().await;
    // Partition 0 of 1 claims it with token 1.
    let (first, seq) = claimed_by_partition_0(&db, &store, &resource_in(6, 5), TTL).await;

    // A dispatcher counting 2 partitions serves the op's slot as partition 1, token 2: the
    // claim's lease is live, so nothing is re-queued.
    let two = Partition::new(1, 2).unwrap();
    let other = partition_lease(&store, two, 2).await;
    assert_eq!(store.op_requeue_abandoned(&other, two).await.unwrap(), 0);
    // One counting 3 serves it as partition 2, token 1, the claim's token number: it can
    // neither complete nor give back the claim.
    let three = Partition::new(2, 3).unwrap();
    let same_number = partition_lease(&store, three, 1).await;
    assert_eq!(same_number.token, first.token);
    assert_eq!(
        store
            .op_complete_batch(&same_number, &[delivered(seq)])
            .await
            .unwrap(),
        [false]
    );
    assert!(!store.op_release_claim(&same_number, seq).await.unwrap());
    assert_eq!(db.ops().await[0].state, "in_flight");

    // The claim's own lease completes it.
    assert_eq!(
        store
            .op_complete_batch(&first, &[delivered(seq)])
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(db.ops().await[0].state, "delivered");
}

/// Issue 12, item 4: once the claim's lease has lapsed (its dispatcher crashed), the slot's
/// leader under any partition count re-queues it, closing the attempt as unknown.
async fn issue12_a_lapsed_claim_of_another_partition_count_is_requeued(db: TestDb) {
    let store = db.store().await;
    claimed_by_partition_0(&db, &store, &resource_in(2, 1), Duration::from_secs(1)).await;
    db.shift_lease_clock(5).await;
    let two = Partition::new(1, 2).unwrap();
    let next = partition_lease(&store, two, 1).await;
    assert_eq!(store.op_requeue_abandoned(&next, two).await.unwrap(), 1);
    let ops = db.ops().await;
    assert_eq!(ops[0].state, "pending");
    let attempts = db.attempts().await;
    assert_eq!(attempts[0].outcome.as_deref(), Some("unknown"));
}

/// Issue 12, item 11: giving back a claim checks the partition lease, as every completion does
/// (G9). Before, the claim's token alone sufficed: a paused dispatcher that resumed after its
/// lease was taken over could still move its op back to pending.
async fn issue12_a_stale_dispatcher_cannot_give_back_its_claim(db: TestDb) {
    let store = db.store().await;
    let (paused, seq) =
        claimed_by_partition_0(&db, &store, "issue12:release", Duration::from_secs(1)).await;
    let resource = paused.resource.clone();
    db.shift_lease_clock(5).await;
    let _next = store
        .lease_try_acquire(&resource, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(!store.op_release_claim(&paused, seq).await.unwrap());
    assert_eq!(db.ops().await[0].state, "in_flight");
}

/// Issue 12, item 5: dropping a renewal stops it. Before, the renewal task outlived whoever
/// held it (a panicked partition loop), renewing a lease nobody used, forever.
async fn issue12_a_dropped_renewal_stops_renewing(db: TestDb) {
    let store = db.store().await;
    let resource = ResourceName::new("issue12:renewal").unwrap();
    let ttl = Duration::from_secs(1);
    let held = store
        .lease_try_acquire(&resource, ttl)
        .await
        .unwrap()
        .unwrap();
    let renewal = Renewal::start(store.clone(), held, ttl, |_, _| {});
    tokio::time::sleep(ttl / 2).await; // one renewal went through
    drop(renewal);
    wait_until(
        Duration::from_secs(10),
        "the dropped lease expires",
        || async {
            store
                .lease_list()
                .await
                .unwrap()
                .iter()
                .any(|l| l.resource == resource && !l.held)
        },
    )
    .await;
}

/// Issue 12, item 6: a purge deletes only ops that are still finished when deleted. Before,
/// on PostgreSQL, `DELETE … WHERE id IN (SELECT … LIMIT n)` waited on an operator's replay,
/// then re-checked only `id` and deleted the op it had just made pending again (G6).
async fn issue12_a_purge_keeps_an_op_replayed_meanwhile(db: TestDb) {
    if db.skip_on_babelfish(outbox_tests::babelfish::IGNORES_LOCKING_HINTS) {
        return;
    }
    let store = db.store().await;
    let outbox = db.outbox().await;
    let producer = lease(&outbox, "issue12:purge").await;
    for key in ["replayed", "old"] {
        let op = Operation::post("api", "/v1/x")
            .idempotency_key(key)
            .build()
            .unwrap();
        outbox.enqueue(&producer, &op).await.unwrap();
    }
    db.execute(
        "UPDATE outbox_ops SET state = 'delivered', finished_at = '2000-01-01T00:00:00.000Z'",
    )
    .await;
    // The replay's transaction: the op is pending again, not yet committed.
    let replay = Replay::begin(&db).await;
    // Retention and `outboxctl purge`, both at once.
    let retention = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .op_purge_finished(Duration::from_secs(86_400), 100)
                .await
        }
    });
    let operator = tokio::spawn({
        let store = store.clone();
        let change = outbox_store::admin::Change {
            actor: "ana".into(),
            reason: "issue 12".into(),
            force: false,
            dry_run: false,
        };
        async move {
            store
                .admin_purge(&[OpState::Delivered], Duration::from_secs(86_400), &change)
                .await
        }
    });
    // PostgreSQL: the old statement waited for the replay's row lock, the new one skips it.
    // SQLite: one writer; the purge waits for the replay to commit, then sees its state.
    // SQL Server: as PostgreSQL; a session waiting on the replay's locks shows as blocked.
    wait_until(
        Duration::from_secs(10),
        "the purges ran or wait",
        || async {
            (retention.is_finished() && operator.is_finished()) || replay.someone_waits(&db).await
        },
    )
    .await;
    replay.commit().await;
    let purged = retention.await.unwrap().unwrap() + operator.await.unwrap().unwrap().total as u64;
    let left: Vec<(String, String)> = db
        .ops()
        .await
        .into_iter()
        .map(|o| (o.idempotency_key, o.state))
        .collect();
    assert_eq!(left, [("replayed".to_owned(), "pending".to_owned())]);
    assert_eq!(purged, 1);
}

/// An open transaction that has made the op keyed `replayed` pending again.
enum Replay {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection, tokio::time::Instant),
    /// Boxed: a tiberius client is large beside the sqlx connections.
    Mssql(Box<outbox_store::mssql::Client>),
}

impl Replay {
    const SQL: &'static str = "UPDATE outbox_ops SET state = 'pending', finished_at = NULL \
                               WHERE idempotency_key = 'replayed'";

    async fn begin(db: &TestDb) -> Replay {
        use sqlx::Connection as _;
        match db.kind() {
            Kind::Postgres => {
                let mut c = sqlx::PgConnection::connect(db.url()).await.unwrap();
                sqlx::query("BEGIN").execute(&mut c).await.unwrap();
                sqlx::query(Self::SQL).execute(&mut c).await.unwrap();
                Replay::Postgres(c)
            }
            Kind::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut c)
                    .await
                    .unwrap();
                sqlx::query(Self::SQL).execute(&mut c).await.unwrap();
                Replay::Sqlite(c, tokio::time::Instant::now())
            }
            Kind::Mssql => {
                let mut c = outbox_store::mssql::connect(db.url()).await.unwrap();
                Self::mssql(&mut c, "BEGIN TRANSACTION").await;
                Self::mssql(&mut c, Self::SQL).await;
                Replay::Mssql(Box::new(c))
            }
        }
    }

    /// Runs a T-SQL batch and returns its first result.
    async fn mssql(c: &mut outbox_store::mssql::Client, sql: &str) -> Vec<tiberius::Row> {
        let rows = async { c.simple_query(sql).await?.into_first_result().await }.await;
        rows.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Whether another session waits on this one's locks (on SQLite, which cannot tell:
    /// after half a second).
    async fn someone_waits(&self, db: &TestDb) -> bool {
        match self {
            Replay::Postgres(_) => {
                use sqlx::Connection as _;
                let mut c = sqlx::PgConnection::connect(db.url()).await.unwrap();
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&mut c)
                .await
                .unwrap();
                waiting > 0
            }
            Replay::Sqlite(_, since) => since.elapsed() > Duration::from_millis(500),
            Replay::Mssql(_) => {
                let mut c = outbox_store::mssql::connect(db.url()).await.unwrap();
                let rows = Self::mssql(
                    &mut c,
                    "SELECT COUNT_BIG(*) AS waiting FROM sys.dm_exec_requests \
                     WHERE database_id = DB_ID() AND blocking_session_id <> 0",
                )
                .await;
                rows[0].get::<i64, _>("waiting").unwrap_or(0) > 0
            }
        }
    }

    async fn commit(self) {
        match self {
            Replay::Postgres(mut c) => {
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
            }
            Replay::Sqlite(mut c, _) => {
                sqlx::query("COMMIT").execute(&mut c).await.unwrap();
            }
            Replay::Mssql(mut c) => {
                Self::mssql(&mut c, "COMMIT TRANSACTION").await;
            }
        }
    }
}

conformance!(
    issue12_claims_match_their_partition_lease_not_only_its_token,
    issue12_a_lapsed_claim_of_another_partition_count_is_requeued,
    issue12_a_stale_dispatcher_cannot_give_back_its_claim,
    issue12_a_dropped_renewal_stops_renewing,
    issue12_a_purge_keeps_an_op_replayed_meanwhile,
);
