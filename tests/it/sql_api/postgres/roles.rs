//! Least privilege through SQL (issue 37): a login holding only the role `outbox_producer`
//! takes leases and enqueues through the `outbox.*` functions, which run with their owner's
//! rights, and is refused everything else: writing an op or a lease directly, reading a body,
//! calling a helper or a dispatcher's statement. A worker given the README's former table
//! rights before the upgrade keeps calling the functions after it.

use outbox_store::Backend;
use outbox_store::migrate::migrations;
use outbox_tests::TestDb;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use super::{SqlOp, acquire, connect, enqueue, migrated, refused, release, renew};

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
    assert_eq!(report.applied, ["0015_producer_role"]);
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
