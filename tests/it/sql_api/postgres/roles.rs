//! Least privilege through SQL (issue 37): a login holding only the role `outbox_producer`
//! takes leases and enqueues through the `outbox.*` functions, which run with their owner's
//! rights, and is refused everything else: writing an op or a lease directly, reading a body,
//! calling a helper or a dispatcher's statement. A worker given the README's former table
//! rights before the upgrade keeps calling the functions after it. The components' roles
//! (`outbox_dispatcher`, `outbox_operator`, `outbox_viewer`) are refused what each may not do
//! (`admin/tests/roles.rs` runs the components themselves with them).

use outbox_store::Backend;
use outbox_store::migrate::migrations;
use outbox_tests::TestDb;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use super::{SqlLease, SqlOp, acquire, connect, enqueue, migrated, refused, release, renew};

/// A new login role of the test cluster (roles are the cluster's: a unique name), given
/// `grants` (statements with `{login}` for its name) in `db`, and a connection as it.
async fn login(db: &TestDb, grants: &[&str]) -> PgConnection {
    let name = format!("worker_{}", Uuid::new_v4().simple());
    let mut admin = connect(db).await;
    // The name is this test's own (a UUID), the grants its constants.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE ROLE {name} LOGIN")))
        .execute(&mut admin)
        .await
        .expect("create login");
    for grant in grants {
        sqlx::raw_sql(sqlx::AssertSqlSafe(grant.replace("{login}", &name)))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{grant}: {e}"));
    }
    let options: PgConnectOptions = db.url().parse().expect("url");
    PgConnection::connect_with(&options.username(&name))
        .await
        .expect("connect as the login")
}

/// Issue 37, items 1 and 2 (PostgreSQL, the SQL API): with `outbox_producer` alone a worker
/// acquires, enqueues in its own transaction, renews and releases; every direct read or write
/// of the outbox's tables and every other function is refused with a permission error
/// (42501), and nothing it tried is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_login_enqueues_through_the_functions_and_nothing_else() {
    let db = migrated().await;
    let mut worker = login(&db, &["GRANT outbox_producer TO {login}"]).await;
    let lease = acquire(&mut worker, "billing:1", "30 seconds").await;
    let mut tx = worker.begin().await.expect("begin");
    let op = SqlOp::post("st-1", r#"{"account":"secret"}"#);
    let enqueued = enqueue(&mut *tx, "billing:1", &lease, &op)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    assert!(!enqueued.duplicate);
    assert!(
        renew(&mut worker, "billing:1", &lease, Some("30 seconds"))
            .await
            .expect("renew")
            .is_some()
    );

    let forbidden = [
        "INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, \
         idempotency_key, request_hash, partition, method, path, headers, body) \
         SELECT gen_random_uuid(), resource, fence, owner_id, destination, 'forged', \
         request_hash, partition, method, path, headers, body FROM outbox_requests",
        "UPDATE outbox_leases SET fence = fence + 1",
        "UPDATE outbox_requests SET path = '/v1/elsewhere'",
        "DELETE FROM outbox_queue",
        "SELECT body FROM outbox_requests",
        "SELECT headers FROM outbox_requests",
        "SELECT count(*) FROM outbox_attempts",
        "SELECT outbox.check_path('/v1/a')",
        "SELECT outbox.grant_producer_role()",
        "SELECT * FROM outbox_op_claim_due('dispatcher/0', gen_random_uuid(), 1, 1, 0, \
         ARRAY['statements'], ARRAY[1], ARRAY[]::text[], 1, 1048576)",
    ];
    for sql in forbidden {
        let r = refused(
            sqlx::query(sql).execute(&mut worker).await.map(|_| ()),
            "42501",
        );
        assert!(r.message.contains("permission denied"), "{sql}: {r:?}");
    }
    assert!(
        release(&mut worker, "billing:1", &lease)
            .await
            .expect("release")
    );

    let mut admin = connect(&db).await;
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT idempotency_key, path, fence FROM outbox_requests")
            .fetch_all(&mut admin)
            .await
            .expect("requests");
    assert_eq!(
        rows,
        [("st-1".to_owned(), "/v1/statements".to_owned(), lease.token)]
    );
    let fence: i64 =
        sqlx::query_scalar("SELECT fence FROM outbox_leases WHERE resource = 'billing:1'")
            .fetch_one(&mut admin)
            .await
            .expect("lease");
    assert_eq!(
        fence, lease.token,
        "the fence is where the functions left it"
    );
}

/// Issue 37: a worker given the README's former grants (USAGE on the schema and the
/// producer's table rights, relying on EXECUTE for PUBLIC) before 0015_producer_role keeps
/// enqueueing after the upgrade, which takes EXECUTE away from PUBLIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_granted_before_the_producer_role_keeps_its_calls() {
    let db = TestDb::postgres().await;
    let mut c = connect(&db).await;
    sqlx::raw_sql(include_str!(
        "../../../../store/sql/postgres/migration_table_create.sql"
    ))
    .execute(&mut c)
    .await
    .expect("migration table");
    for m in migrations(Backend::Postgres)
        .iter()
        .filter(|m| m.version <= 14)
    {
        sqlx::raw_sql(sqlx::AssertSqlSafe(m.sql))
            .execute(&mut c)
            .await
            .unwrap_or_else(|e| panic!("migration {}: {e}", m.name));
        sqlx::query(
            "INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        )
        .bind(m.version)
        .bind(m.name)
        .bind(m.checksum())
        .execute(&mut c)
        .await
        .expect("record migration");
    }
    let mut worker = login(
        &db,
        &[
            "GRANT USAGE ON SCHEMA outbox TO {login}",
            "GRANT SELECT, INSERT, UPDATE ON outbox_leases TO {login}",
            "GRANT SELECT, INSERT ON outbox_requests, outbox_finished TO {login}",
            "GRANT SELECT, INSERT, DELETE ON outbox_queue TO {login}",
            "GRANT SELECT ON outbox_wakeups TO {login}",
        ],
    )
    .await;
    let report = db
        .store_with(TestDb::options())
        .await
        .migrate()
        .await
        .expect("migrate");
    assert_eq!(
        report.applied,
        [
            "0015_producer_role",
            "0016_component_roles",
            "0017_content_at_rest",
            "0018_database_roles",
            "0019_minute_stats",
            "0020_producer_procedure"
        ]
    );
    let lease = acquire(&mut worker, "billing:2", "30 seconds").await;
    let op = SqlOp::post("st-2", "{}");
    assert!(
        !enqueue(&mut worker, "billing:2", &lease, &op)
            .await
            .expect("enqueue")
            .duplicate
    );
    assert!(
        release(&mut worker, "billing:2", &lease)
            .await
            .expect("release")
    );
}

/// One enqueued op with a header value and a body, and the lease it was enqueued under.
async fn one_op(db: &TestDb) -> SqlLease {
    let mut admin = connect(db).await;
    let lease = acquire(&mut admin, "billing:7", "30 seconds").await;
    let mut op = SqlOp::post("st-7", r#"{"account":"secret"}"#);
    op.headers = serde_json::json!([["X-Note", "secret-note"]]);
    enqueue(&mut admin, "billing:7", &lease, &op)
        .await
        .expect("enqueue");
    lease
}

/// Each statement is refused with a permission error (42501).
async fn all_refused(c: &mut PgConnection, who: &str, statements: &[&'static str]) {
    for sql in statements {
        let r = refused(
            sqlx::query(*sql).execute(&mut *c).await.map(|_| ()),
            "42501",
        );
        assert!(
            r.message.contains("permission denied") || r.message.contains("row-level security"),
            "{who}: {sql}: {r:?}"
        );
    }
}

/// Statements that write an op's request, enqueue or take a producer's lease: no component
/// but a producer does any of them.
const PRODUCERS_ONLY: [&str; 4] = [
    "INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, \
     idempotency_key, request_hash, partition, method, path, headers, body) \
     SELECT gen_random_uuid(), resource, fence, owner_id, destination, 'forged', \
     request_hash, partition, method, path, headers, body FROM outbox_requests",
    "UPDATE outbox_requests SET path = '/v1/elsewhere'",
    "SELECT * FROM outbox.try_acquire('billing:8', '30 seconds')",
    "SELECT * FROM outbox.enqueue('billing:7', gen_random_uuid(), 1, 'statements', 'POST', \
     '/v1/forged')",
];

/// Issue 37, item 2: `outbox_dispatcher` takes, renews and gives back partition leases and
/// claims, but may not write a request, take or change a producer's lease (a row-level policy
/// keeps its lease writes to `dispatcher/…`), nor write the admin log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_login_keeps_to_its_partition_leases_and_the_queue() {
    let db = migrated().await;
    let lease = one_op(&db).await;
    let mut d = login(&db, &["GRANT outbox_dispatcher TO {login}"]).await;
    sqlx::query(
        "INSERT INTO outbox_leases (resource, owner_id, fence, expires_at) \
         VALUES ('dispatcher/0', gen_random_uuid(), 1, clock_timestamp() + interval '30 s')",
    )
    .execute(&mut d)
    .await
    .expect("a partition lease");
    let (owner,): (uuid::Uuid,) =
        sqlx::query_as("SELECT owner_id FROM outbox_leases WHERE resource = 'dispatcher/0'")
            .fetch_one(&mut d)
            .await
            .expect("read it back");
    let claimed: Vec<(String,)> = sqlx::query_as(
        "SELECT idempotency_key FROM outbox_op_claim_due('dispatcher/0', $1, 1, 1, 0, \
         ARRAY['statements'], ARRAY[1], ARRAY[]::text[], 1, 1048576)",
    )
    .bind(owner)
    .fetch_all(&mut d)
    .await
    .expect("claim");
    assert_eq!(claimed, [("st-7".to_owned(),)]);

    let mut forbidden = PRODUCERS_ONLY.to_vec();
    forbidden.extend([
        "INSERT INTO outbox_leases (resource, owner_id, fence, expires_at) \
         VALUES ('billing:9', gen_random_uuid(), 1, clock_timestamp() + interval '30 s')",
        "UPDATE outbox_leases SET resource = 'billing:9' WHERE resource = 'dispatcher/0'",
        "INSERT INTO outbox_queue SELECT * FROM outbox_queue",
        "INSERT INTO outbox_admin_log (actor, action, reason, details) \
         VALUES ('d', 'replay', 'r', '{}')",
        "DELETE FROM outbox_leases",
        "DELETE FROM outbox_rejections",
    ]);
    all_refused(&mut d, "dispatcher", &forbidden).await;
    let changed =
        sqlx::query("UPDATE outbox_leases SET fence = fence + 1 WHERE resource = 'billing:7'")
            .execute(&mut d)
            .await
            .expect("an update the policy filters")
            .rows_affected();
    assert_eq!(
        changed, 0,
        "a producer's lease is not the dispatcher's to change"
    );
    let mut admin = connect(&db).await;
    let fence: i64 =
        sqlx::query_scalar("SELECT fence FROM outbox_leases WHERE resource = 'billing:7'")
            .fetch_one(&mut admin)
            .await
            .expect("lease");
    assert_eq!(fence, lease.token);
}

/// Issue 37, item 2: `outbox_viewer` reads every column but an op's content (the view
/// `outbox_request_meta` gives the body's size and the header names) and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_login_reads_all_but_the_content_and_writes_nothing() {
    let db = migrated().await;
    one_op(&db).await;
    let mut v = login(&db, &["GRANT outbox_viewer TO {login}"]).await;
    let (names, bytes): (String, i64) = sqlx::query_as(
        "SELECT header_names, body_bytes FROM outbox_request_meta WHERE idempotency_key = 'st-7'",
    )
    .fetch_one(&mut v)
    .await
    .expect("the op without its content");
    assert_eq!((names.as_str(), bytes), (r#"["X-Note"]"#, 20));
    let (state, path): (String, String) =
        sqlx::query_as("SELECT state, path FROM outbox_ops WHERE idempotency_key = 'st-7'")
            .fetch_one(&mut v)
            .await
            .expect("the op's state");
    assert_eq!(
        (state.as_str(), path.as_str()),
        ("pending", "/v1/statements")
    );

    let mut forbidden = PRODUCERS_ONLY.to_vec();
    forbidden.extend([
        "SELECT body FROM outbox_requests",
        "SELECT headers FROM outbox_requests",
        "SELECT request_hash FROM outbox_requests",
        "SELECT body FROM outbox_ops",
        "SELECT headers FROM outbox_ops",
        "SELECT * FROM outbox_requests",
        "DELETE FROM outbox_queue",
        "UPDATE outbox_queue SET attempts = 0",
        "DELETE FROM outbox_finished",
        "UPDATE outbox_destinations SET paused_at = now()",
        "INSERT INTO outbox_admin_log (actor, action, reason, details) \
         VALUES ('v', 'replay', 'r', '{}')",
        "UPDATE outbox_leases SET fence = fence + 1",
    ]);
    all_refused(&mut v, "viewer", &forbidden).await;
}

/// Issue 37, item 2: `outbox_operator` reads everything, content included, and changes ops'
/// queue and finished rows and the admin log; it may not write a request or a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_login_may_not_write_a_request_or_a_lease() {
    let db = migrated().await;
    one_op(&db).await;
    let mut o = login(&db, &["GRANT outbox_operator TO {login}"]).await;
    let body: Vec<u8> = sqlx::query_scalar("SELECT body FROM outbox_requests")
        .fetch_one(&mut o)
        .await
        .expect("the content");
    assert_eq!(body, br#"{"account":"secret"}"#);
    sqlx::query(
        "INSERT INTO outbox_admin_log (actor, action, reason, details) \
         VALUES ('o', 'replay', 'r', '{}')",
    )
    .execute(&mut o)
    .await
    .expect("the admin log");
    let mut forbidden = PRODUCERS_ONLY.to_vec();
    forbidden.extend([
        "UPDATE outbox_leases SET fence = fence + 1",
        "INSERT INTO outbox_leases (resource, owner_id, fence, expires_at) \
         VALUES ('dispatcher/0', gen_random_uuid(), 1, clock_timestamp())",
        "DELETE FROM outbox_leases",
        "DELETE FROM outbox_admin_log",
    ]);
    all_refused(&mut o, "operator", &forbidden).await;
}

/// The Rust producer's store on `url` (a login of the test's), migrated by the owner before.
async fn producer_on(url: &str) -> outbox_producer::Outbox {
    outbox_producer::Outbox::connect_with(url, TestDb::options())
        .await
        .expect("connect as the producer")
}

fn statement(key: &str, body: &str) -> outbox_producer::Operation {
    outbox_producer::Operation::post("statements", "/v1/statements")
        .header("X-Note", "n")
        .json(&serde_json::json!({ "body": body }))
        .idempotency_key(key)
        .build()
        .expect("an op")
}

/// Issue 37, item 1: the Rust producer needs `outbox_producer` alone. Its store finds that
/// the login may not write the tables and calls the functions instead: leases, an enqueue, a
/// duplicate with its state, a conflict, a stale token (kept as a rejection by the function),
/// a batch all or nothing, an enqueue in the caller's transaction (committed, rolled back, and
/// rejected with the transaction still usable), and older pending ops superseded. The rows are
/// those the statements write: the owner's store sees the same request as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_producer_runs_with_the_producer_role_alone() {
    use outbox_producer::Error as E;
    let db = migrated().await;
    let url = db.login_as("outbox_producer").await;
    let outbox = producer_on(&url).await;
    let owner = db.outbox().await;
    let (lease, _) = super::super::rust_producer::leases_and_keys(&outbox, &owner, statement).await;

    // A batch: every op or none.
    let batch = outbox
        .enqueue_batch(&lease, &[statement("k-2", "a"), statement("k-3", "a")])
        .await
        .expect("batch");
    assert_eq!(batch.len(), 2);
    match outbox
        .enqueue_batch(
            &lease,
            &[statement("k-4", "a"), statement("k-2", "changed")],
        )
        .await
    {
        Err(E::IdempotencyConflict { .. }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }

    // The caller's transaction: committed, rolled back, and a refusal leaves it usable.
    let pool = sqlx::PgPool::connect(&url)
        .await
        .expect("the worker's pool");
    let mut tx = pool.begin().await.expect("begin");
    outbox
        .enqueue_in(&mut *tx, &lease, &statement("k-5", "a"))
        .await
        .expect("in the caller's transaction");
    let stale = outbox_producer::Lease {
        token: outbox_producer::FencingToken::new(lease.token.get() + 7),
        ..lease.clone()
    };
    match outbox
        .enqueue_in(&mut *tx, &stale, &statement("k-6", "a"))
        .await
    {
        Err(E::Stale { current_token }) => assert_eq!(current_token, lease.token),
        other => panic!("expected stale, got {other:?}"),
    }
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .expect("the transaction is still usable");
    assert_eq!(one, 1);
    tx.commit().await.expect("commit");
    let mut tx = pool.begin().await.expect("begin");
    outbox
        .enqueue_in(&mut *tx, &lease, &statement("k-7", "a"))
        .await
        .expect("in the caller's transaction");
    tx.rollback().await.expect("rollback");

    // A stale enqueue outside a transaction, kept as a rejection by the function.
    match outbox.enqueue(&stale, &statement("k-8", "a")).await {
        Err(E::Stale { current_token }) => assert_eq!(current_token, lease.token),
        other => panic!("expected stale, got {other:?}"),
    }

    // A newer owner supersedes the older one's pending ops.
    super::super::rust_producer::newer_owner_supersedes(&outbox, &lease).await;

    let keys: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT idempotency_key, state, trace_state FROM outbox_ops ORDER BY id")
            .fetch_all(&mut connect(&db).await)
            .await
            .expect("ops");
    let keys: Vec<(&str, &str)> = keys
        .iter()
        .map(|(k, s, _)| (k.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("k-1", "superseded"),
            ("k-2", "superseded"),
            ("k-3", "superseded"),
            ("k-5", "superseded"),
            ("k-9", "pending"),
        ]
    );
    let rejections: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_rejections WHERE reason = 'stale' AND idempotency_key = 'k-8'",
    )
    .fetch_one(&mut connect(&db).await)
    .await
    .expect("rejections");
    assert_eq!(rejections, 1, "kept by the function");
}
