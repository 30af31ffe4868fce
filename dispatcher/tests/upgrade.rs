//! Moving a database filled by the build before the queue layout (issue 36) forward: the ops
//! of every state, their attempts and their history are carried over by the migration, and
//! then `show`, `replay` and the dispatcher work on them. PostgreSQL, the backend on the queue
//! layout so far.

mod common;

use std::time::Duration;

use common::{destination, dispatch};
use outbox_store::admin::Change;
use outbox_store::migrate::migrations;
use outbox_store::{Backend, Store};
use outbox_tests::{Receiver, TestDb, wait_until};
use sqlx::{Connection, PgConnection, Row};

/// The last migration of the build before the queue layout.
const BEFORE: i64 = 12;

/// Applies migrations 1..=BEFORE as the store would have, records them, and fills the old
/// `outbox_ops` table through that schema's own SQL API (`outbox.enqueue`, 0004) and the
/// columns that build's dispatcher and `outboxctl` wrote.
async fn fill_before_queue_layout(db: &TestDb) {
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    sqlx::raw_sql(include_str!(
        "../../store/sql/postgres/migration_table_create.sql"
    ))
    .execute(&mut c)
    .await
    .expect("migration table");
    for m in migrations(Backend::Postgres)
        .iter()
        .filter(|m| m.version <= BEFORE)
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
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    let rows = sqlx::query(
        "SELECT idempotency_key || '|' || state || '|' || attempts || '|' || \
                coalesce(last_error, '-') || '|' || (finished_at IS NOT NULL) || '|' || \
                coalesce(claimed_by_fence::text, '-') AS r \
         FROM outbox_ops ORDER BY id",
    )
    .fetch_all(&mut c)
    .await
    .expect("ops");
    rows.iter().map(|r| r.get("r")).collect()
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
    let before = ops_as_seen(&db).await;
    assert_eq!(before.len(), 7, "{before:?}");

    let store = db.store_with(TestDb::options()).await;
    let report = store.migrate().await.expect("migrate");
    assert_eq!(report.applied, ["0013_queue_layout"]);
    assert_eq!(ops_as_seen(&db).await, before, "every op as it was");

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
    let running = dispatch(&db, &destination("api", &api, ""));
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
