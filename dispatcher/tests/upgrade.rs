//! Moving a database filled by the build before the queue layout (issue 36) forward: the ops
//! of every state, their attempts and their history are carried over by the migration, and
//! then `show`, `replay` and the dispatcher work on them: PostgreSQL, SQLite, and SQL Server
//! when `OUTBOX_MSSQL_URL` is set (with `--include-ignored`).

mod common;

use std::time::Duration;

use common::{destination, dispatch};
use outbox_store::admin::Change;
use outbox_store::migrate::migrations;
use outbox_store::{Backend, Store};
use outbox_tests::{Kind, Receiver, TestDb, wait_until};
use sqlx::{Connection, PgConnection, Row, SqliteConnection};

/// The last migration of the build before the queue layout.
const BEFORE: i64 = 12;

/// Applies `backend`'s migrations 1..=BEFORE on the connection `c` and records each with
/// `record` (the backend's placeholders), as that build's store did: a macro, since SQLite's
/// and PostgreSQL's connections are different types.
macro_rules! migrate_before {
    ($c:ident, $backend:expr, $table:literal, $record:literal) => {
        sqlx::raw_sql(include_str!($table))
            .execute(&mut $c)
            .await
            .expect("migration table");
        for m in migrations($backend).iter().filter(|m| m.version <= BEFORE) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(m.sql))
                .execute(&mut $c)
                .await
                .unwrap_or_else(|e| panic!("migration {}: {e}", m.name));
            sqlx::query($record)
                .bind(m.version)
                .bind(m.name)
                .bind(m.checksum())
                .execute(&mut $c)
                .await
                .expect("record migration");
        }
    };
}

/// Applies migrations 1..=BEFORE as the store would have, records them, and fills the old
/// `outbox_ops` table: ops of every state, their attempts, and the partition lease of a
/// dispatcher that stopped with an op in flight.
async fn fill_before_queue_layout(db: &TestDb) {
    match db.kind() {
        Kind::Postgres => fill_postgres(db).await,
        Kind::Sqlite => fill_sqlite(db).await,
        Kind::Mssql => unreachable!("SQL Server is not on the queue layout yet"),
    }
}

/// [`fill_before_queue_layout`] on SQLite, which has no SQL API: the rows as that build's
/// enqueue, dispatcher and `outboxctl` wrote them.
async fn fill_sqlite(db: &TestDb) {
    let options: sqlx::sqlite::SqliteConnectOptions = db.url().parse().expect("url");
    let mut c = SqliteConnection::connect_with(&options.create_if_missing(true))
        .await
        .expect("connect");
    migrate_before!(
        c,
        Backend::Sqlite,
        "../../store/sql/sqlite/migration_table_create.sql",
        "INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES (?1, ?2, ?3)"
    );
    const FILL: &str = r#"
        INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
        VALUES ('upgrade:1', '00000000-0000-4000-8000-000000000001',
                strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+1 hour'), 1),
               -- The partition lease of a dispatcher that stopped with an op in flight.
               ('dispatcher/0', NULL, NULL, 7);
        WITH t (k, n) AS (VALUES ('delivered', 1), ('dead', 2), ('cancelled', 3),
                                 ('superseded', 4), ('flying', 5), ('after-flying', 6),
                                 ('pending', 7))
        INSERT INTO outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                                request_hash, order_key, partition, method, path, headers,
                                content_type, body)
        SELECT '00000000-0000-4000-8000-00000000010' || n, 'upgrade:1', 1,
               '00000000-0000-4000-8000-000000000001', 'api', k, randomblob(32),
               CASE WHEN k IN ('flying', 'after-flying') THEN 'seq' END, 0, 'POST', '/v1/' || k,
               '[]', 'application/json', CAST('{"key":"' || k || '"}' AS BLOB)
        FROM t ORDER BY n;
        UPDATE outbox_ops SET state = 'delivered', attempts = 1,
                              delivered_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                              finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
        WHERE idempotency_key = 'delivered';
        UPDATE outbox_ops SET state = 'dead', attempts = 3,
                              finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                              last_error = 'HTTP 500 from the destination'
        WHERE idempotency_key = 'dead';
        UPDATE outbox_ops SET state = 'cancelled',
                              finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                              last_error = 'cancelled by ops: not needed'
        WHERE idempotency_key = 'cancelled';
        UPDATE outbox_ops SET state = 'superseded',
                              finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                              last_error = 'superseded by token 2'
        WHERE idempotency_key = 'superseded';
        UPDATE outbox_ops SET state = 'in_flight', attempts = 1, claimed_by_fence = 7,
                              claimed_by_lease = 'dispatcher/0',
                              claimed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
        WHERE idempotency_key = 'flying';
        WITH a (n) AS (VALUES (1), (2), (3))
        INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, finished_at, outcome,
                                     http_status, error)
        SELECT op_id, a.n, 5, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
               CASE WHEN idempotency_key = 'dead' THEN 'failed' ELSE 'delivered' END,
               CASE WHEN idempotency_key = 'dead' THEN 500 ELSE 204 END,
               CASE WHEN idempotency_key = 'dead' THEN 'HTTP 500 from the destination' END
        FROM outbox_ops, a
        WHERE a.n <= attempts AND idempotency_key IN ('delivered', 'dead');
    "#;
    sqlx::raw_sql(FILL).execute(&mut c).await.expect("fill");
    c.close().await.expect("close");
}

/// [`fill_before_queue_layout`] on PostgreSQL, through that schema's own SQL API
/// (`outbox.enqueue`, 0004) and the columns that build's dispatcher and `outboxctl` wrote.
async fn fill_postgres(db: &TestDb) {
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    migrate_before!(
        c,
        Backend::Postgres,
        "../../store/sql/postgres/migration_table_create.sql",
        "INSERT INTO outbox_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"
    );
    const FILL: &str = r#"
        INSERT INTO outbox_leases (resource, owner_id, expires_at, fence)
        VALUES ('upgrade:1', '00000000-0000-4000-8000-000000000001', clock_timestamp() + interval '1 hour', 1),
               -- The partition lease of a dispatcher that stopped with an op in flight.
               ('dispatcher/0', NULL, NULL, 7);
        SELECT outbox.enqueue('upgrade:1', '00000000-0000-4000-8000-000000000001', 1, 'api', 'POST',
                              '/v1/' || k, body => convert_to('{"key":"' || k || '"}', 'UTF8'),
                              content_type => 'application/json', idempotency_key => k,
                              order_key => CASE WHEN k IN ('flying', 'after-flying') THEN 'seq' END,
                              unordered => k NOT IN ('flying', 'after-flying'))
        FROM unnest(ARRAY['delivered', 'dead', 'cancelled', 'superseded', 'flying',
                          'after-flying', 'pending']) WITH ORDINALITY AS t(k, n)
        ORDER BY n;
        UPDATE outbox_ops SET state = 'delivered', attempts = 1, delivered_at = clock_timestamp(),
                              finished_at = clock_timestamp()
        WHERE idempotency_key = 'delivered';
        UPDATE outbox_ops SET state = 'dead', attempts = 3, finished_at = clock_timestamp(),
                              last_error = 'HTTP 500 from the destination'
        WHERE idempotency_key = 'dead';
        UPDATE outbox_ops SET state = 'cancelled', finished_at = clock_timestamp(),
                              last_error = 'cancelled by ops: not needed'
        WHERE idempotency_key = 'cancelled';
        UPDATE outbox_ops SET state = 'superseded', finished_at = clock_timestamp(),
                              last_error = 'superseded by token 2'
        WHERE idempotency_key = 'superseded';
        UPDATE outbox_ops SET state = 'in_flight', attempts = 1, claimed_by_fence = 7,
                              claimed_by_lease = 'dispatcher/0', claimed_at = clock_timestamp()
        WHERE idempotency_key = 'flying';
        INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, finished_at, outcome, http_status, error)
        SELECT op_id, a, 5, clock_timestamp(), CASE WHEN idempotency_key = 'dead' THEN 'failed' ELSE 'delivered' END,
               CASE WHEN idempotency_key = 'dead' THEN 500 ELSE 204 END,
               CASE WHEN idempotency_key = 'dead' THEN 'HTTP 500 from the destination' END
        FROM outbox_ops, generate_series(1, attempts) AS a
        WHERE idempotency_key IN ('delivered', 'dead');
    "#;
    sqlx::raw_sql(FILL).execute(&mut c).await.expect("fill");
    c.close().await.expect("close");
}

/// Each op as `key|state|attempts|last_error|finished|claimed_by_fence`, in enqueue order: the
/// old table's columns before the migration, the view `outbox_ops` after it.
async fn ops_as_seen(db: &TestDb) -> Vec<String> {
    const OPS: &str = "SELECT idempotency_key || '|' || state || '|' || attempts || '|' || \
                coalesce(last_error, '-') || '|' || (finished_at IS NOT NULL) || '|' || \
                coalesce(CAST(claimed_by_fence AS text), '-') AS r \
         FROM outbox_ops ORDER BY id";
    match db.kind() {
        Kind::Sqlite => {
            let mut c = SqliteConnection::connect(db.url()).await.expect("connect");
            let rows = sqlx::query(OPS).fetch_all(&mut c).await.expect("ops");
            rows.iter().map(|r| r.get("r")).collect()
        }
        _ => {
            let mut c = PgConnection::connect(db.url()).await.expect("connect");
            let rows = sqlx::query(OPS).fetch_all(&mut c).await.expect("ops");
            rows.iter().map(|r| r.get("r")).collect()
        }
    }
}

/// The SQL Server twin of [`fill_before_queue_layout`]: migrations 1..=BEFORE applied batch
/// by batch (split at their `GO` lines, as the store does) and recorded, then the old
/// `outbox_ops` filled with plain INSERTs and the columns that build's dispatcher and
/// `outboxctl` wrote (the SQL API's `outbox.Enqueue` does not run on Babelfish, 0004).
async fn fill_before_queue_layout_mssql(db: &TestDb) {
    db.execute(include_str!(
        "../../store/sql/mssql/migration_table_create.sql"
    ))
    .await;
    for m in migrations(Backend::Mssql)
        .iter()
        .filter(|m| m.version <= BEFORE)
    {
        for batch in go_batches(m.sql) {
            db.try_execute(Box::leak(batch.into_boxed_str()))
                .await
                .unwrap_or_else(|e| panic!("migration {}: {e}", m.name));
        }
        db.execute(Box::leak(
            format!(
                "INSERT INTO dbo.outbox_schema_migrations (version, name, checksum) \
                 VALUES ({}, N'{}', '{}')",
                m.version,
                m.name,
                m.checksum()
            )
            .into_boxed_str(),
        ))
        .await;
    }
    const FILL: &str = r#"
        INSERT INTO dbo.outbox_leases (resource, owner_id, expires_at, fence)
        VALUES (N'upgrade:1', '00000000-0000-4000-8000-000000000001',
                DATEADD(HOUR, 1, CAST(SYSUTCDATETIME() AS datetimeoffset(7))), 1);
        -- The partition lease of a dispatcher that stopped with an op in flight.
        INSERT INTO dbo.outbox_leases (resource, owner_id, expires_at, fence)
        VALUES (N'dispatcher/0', NULL, NULL, 7);
        INSERT INTO dbo.outbox_ops (op_id, resource, fence, owner_id, destination, idempotency_key,
                                    request_hash, order_key, partition, method, path, headers,
                                    content_type, body)
        SELECT NEWID(), N'upgrade:1', 1, '00000000-0000-4000-8000-000000000001', 'api', t.k,
               CAST(REPLICATE(CAST(t.n AS varchar(2)), 32) AS varbinary(32)),
               CASE WHEN t.k IN ('flying', 'after-flying') THEN N'seq' END, t.n,
               'POST', CONCAT(N'/v1/', t.k), N'[]', N'application/json',
               CAST(CONCAT('{"key":"', t.k, '"}') AS varbinary(max))
        FROM (VALUES (1, 'delivered'), (2, 'dead'), (3, 'cancelled'), (4, 'superseded'),
                     (5, 'flying'), (6, 'after-flying'), (7, 'pending')) AS t (n, k)
        ORDER BY t.n;
        UPDATE dbo.outbox_ops SET state = 'delivered', attempts = 1,
               delivered_at = SYSUTCDATETIME(), finished_at = SYSUTCDATETIME()
        WHERE idempotency_key = 'delivered';
        UPDATE dbo.outbox_ops SET state = 'dead', attempts = 3, finished_at = SYSUTCDATETIME(),
               last_error = N'HTTP 500 from the destination'
        WHERE idempotency_key = 'dead';
        UPDATE dbo.outbox_ops SET state = 'cancelled', finished_at = SYSUTCDATETIME(),
               last_error = N'cancelled by ops: not needed'
        WHERE idempotency_key = 'cancelled';
        UPDATE dbo.outbox_ops SET state = 'superseded', finished_at = SYSUTCDATETIME(),
               last_error = N'superseded by token 2'
        WHERE idempotency_key = 'superseded';
        UPDATE dbo.outbox_ops SET state = 'in_flight', attempts = 1, claimed_by_fence = 7,
               claimed_by_lease = N'dispatcher/0', claimed_at = SYSUTCDATETIME()
        WHERE idempotency_key = 'flying';
        INSERT INTO dbo.outbox_attempts (op_id, attempt, dispatcher_fence, finished_at, outcome,
                                         http_status, error)
        SELECT o.op_id, a.n, 5, SYSUTCDATETIME(),
               CASE WHEN o.idempotency_key = 'dead' THEN 'failed' ELSE 'delivered' END,
               CASE WHEN o.idempotency_key = 'dead' THEN 500 ELSE 204 END,
               CASE WHEN o.idempotency_key = 'dead' THEN N'HTTP 500 from the destination' END
        FROM dbo.outbox_ops AS o
        INNER JOIN (VALUES (1), (2), (3)) AS a (n) ON a.n <= o.attempts
        WHERE o.idempotency_key IN ('delivered', 'dead');
    "#;
    db.execute(FILL).await;
}

/// The batches of a T-SQL script, split at its `GO` lines as the store's migration runner
/// splits them; batches of nothing but comments and blank lines are left out.
fn go_batches(sql: &str) -> Vec<String> {
    let mut batches = vec![String::new()];
    for line in sql.lines() {
        if line.trim().eq_ignore_ascii_case("GO") {
            batches.push(String::new());
        } else {
            let last = batches.last_mut().expect("a batch");
            last.push_str(line);
            last.push('\n');
        }
    }
    batches.retain(|b| {
        b.lines().any(|l| {
            let l = l.trim();
            !l.is_empty() && !l.starts_with("--")
        })
    });
    batches
}

/// [`ops_as_seen`] on SQL Server.
async fn ops_as_seen_mssql(db: &TestDb) -> Vec<String> {
    let mut c = outbox_store::mssql::connect(db.url())
        .await
        .expect("connect");
    let rows = c
        .simple_query(
            "SELECT CONCAT(idempotency_key, '|', state, '|', attempts, '|', \
                    COALESCE(last_error, N'-'), '|', \
                    CASE WHEN finished_at IS NOT NULL THEN 'true' ELSE 'false' END, '|', \
                    COALESCE(CAST(claimed_by_fence AS varchar(20)), '-')) AS r \
             FROM dbo.outbox_ops ORDER BY id",
        )
        .await
        .expect("ops")
        .into_first_result()
        .await
        .expect("ops");
    c.close().await.ok();
    rows.iter()
        .map(|r| r.get::<&str, _>("r").expect("r").to_owned())
        .collect()
}

async fn seq_of(store: &Store, key: &str) -> i64 {
    store
        .admin_op_find_by_key("api", key)
        .await
        .expect("find")
        .unwrap_or_else(|| panic!("op {key} not found"))
}

#[tokio::test]
async fn a_database_of_the_build_before_moves_to_the_queue_layout_with_every_op() {
    let db = TestDb::postgres().await;
    fill_before_queue_layout(&db).await;
    moves_to_the_queue_layout_with_every_op(&db).await;
}

#[tokio::test]
async fn a_sqlite_database_of_the_build_before_moves_to_the_queue_layout_with_every_op() {
    let db = TestDb::sqlite().await;
    fill_before_queue_layout(&db).await;
    moves_to_the_queue_layout_with_every_op(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn mssql_a_database_of_the_build_before_moves_to_the_queue_layout_with_every_op() {
    let db = TestDb::mssql().await;
    fill_before_queue_layout_mssql(&db).await;
    moves_to_the_queue_layout_with_every_op(&db).await;
}

/// The ops of `db` as [`ops_as_seen`] lists them, on its backend.
async fn ops_seen(db: &TestDb) -> Vec<String> {
    match db.kind() {
        Kind::Mssql => ops_as_seen_mssql(db).await,
        _ => ops_as_seen(db).await,
    }
}

/// Migrates `db`, filled by the build before, and checks that its ops read the same
/// afterwards and that `show`, `replay` and the dispatcher work on them.
async fn moves_to_the_queue_layout_with_every_op(db: &TestDb) {
    let before = ops_seen(db).await;
    assert_eq!(before.len(), 7, "{before:?}");

    let store = db.store_with(TestDb::options()).await;
    let report = store.migrate().await.expect("migrate");
    assert_eq!(
        report.applied,
        [
            "0013_queue_layout",
            "0014_request_rules",
            "0015_producer_role",
            "0016_component_roles",
            "0017_content_at_rest",
            "0018_database_roles",
            "0019_minute_stats",
            "0020_producer_procedure"
        ]
    );
    assert_eq!(ops_seen(db).await, before, "every op as it was");

    // `show` reads the old ops with their history.
    let dead = store
        .admin_op_show(seq_of(&store, "dead").await)
        .await
        .expect("show")
        .expect("the dead op");
    assert_eq!(
        (dead.summary.state.as_str(), dead.summary.attempts),
        ("dead", 3)
    );
    assert_eq!(dead.attempt_history.len(), 3);
    let flying = store
        .admin_op_show(seq_of(&store, "flying").await)
        .await
        .expect("show")
        .expect("the op in flight");
    assert_eq!(flying.summary.state, "in_flight");
    assert_eq!(flying.claimed_by_token.map(|t| t.get()), Some(7));

    // `replay` takes the old dead op.
    let change = Change {
        actor: "upgrade-test".to_owned(),
        reason: "the destination is fixed".to_owned(),
        force: false,
        dry_run: false,
    };
    let replayed = store
        .admin_replay(&[seq_of(&store, "dead").await], &change)
        .await
        .expect("replay");
    assert_eq!(replayed.changed.len(), 1, "{replayed:?}");

    // The dispatcher re-queues what the stopped one left in flight (its attempt unknown),
    // keeps the order key's order, sends what is pending and nothing that finished.
    let api = Receiver::start().await;
    let running = dispatch(db, &destination("api", &api, ""));
    wait_until(
        Duration::from_secs(60),
        "the unfinished ops are delivered",
        || async {
            let states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
            states
                == [
                    "delivered",
                    "delivered",
                    "cancelled",
                    "superseded",
                    "delivered",
                    "delivered",
                    "delivered",
                ]
        },
    )
    .await;
    running.stop().await;
    let mut sent = api.idempotency_keys();
    let flying_first =
        sent.iter().position(|k| k == "flying") < sent.iter().position(|k| k == "after-flying");
    assert!(flying_first, "the order key's order: {sent:?}");
    sent.sort();
    assert_eq!(sent, ["after-flying", "dead", "flying", "pending"]);
    let outcomes: Vec<(i32, Option<String>)> = store
        .admin_op_show(seq_of(&store, "flying").await)
        .await
        .expect("show")
        .expect("op")
        .attempt_history
        .into_iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, Some("unknown".to_owned())),
            (2, Some("delivered".to_owned()))
        ]
    );
    store.close().await;
}
