//! PostgreSQL: the `outbox.*` functions of migrations/postgres/0004_sql_api.sql, called as a
//! worker in another language calls them: SQL text and bound parameters over a plain sqlx
//! connection, answers read from rows, SQLSTATEs and their JSON details. Here: the calls, the
//! enqueue's answers and refusals, and the caller's transaction; the shared validation table,
//! the lease functions and the race have modules of their own.

mod leases;
mod race;
mod roles;
mod validation;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox_producer::{Method, Operation};
use outbox_store::OrderKey;
use outbox_store::op::partition_slot;
use outbox_tests::{TestDb, wait_for, wait_until};
use serde_json::{Value, json};
use sqlx::postgres::{PgDatabaseError, PgPoolOptions};
use sqlx::{Connection as _, Executor as _, PgConnection, PgExecutor, PgPool, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

/// A lease as `outbox.try_acquire` returns it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SqlLease {
    owner_id: Uuid,
    token: i64,
    expires_at: OffsetDateTime,
}

/// An op as a worker passes it to `outbox.enqueue`: one value per argument after the lease's.
#[derive(Debug, Clone)]
struct SqlOp {
    destination: String,
    method: String,
    path: String,
    /// A JSON array of [name, value] pairs, sent as text and cast to jsonb.
    headers: Value,
    body: Option<Vec<u8>>,
    content_type: Option<String>,
    idempotency_key: Option<String>,
    order_key: Option<String>,
    unordered: bool,
    /// Sent as a number of milliseconds and turned into an interval in the statement.
    not_before_ms: i64,
    supersede_pending: bool,
    expire_with_generation: bool,
    traceparent: Option<String>,
}

impl SqlOp {
    /// A statement POST with a JSON body under `key`.
    fn post(key: &str, body: &str) -> SqlOp {
        SqlOp {
            destination: "statements".into(),
            method: "POST".into(),
            path: "/v1/statements".into(),
            headers: json!([]),
            body: Some(body.as_bytes().to_vec()),
            content_type: Some("application/json".into()),
            idempotency_key: Some(key.into()),
            order_key: None,
            unordered: false,
            not_before_ms: 0,
            supersede_pending: false,
            expire_with_generation: false,
            traceparent: None,
        }
    }

    /// The same op built with the Rust producer's builder.
    fn to_rust(&self) -> Operation {
        let method: Method = self.method.parse().expect("a method");
        let mut op = Operation::builder(&self.destination, method, &self.path);
        for pair in self.headers.as_array().expect("headers is a list") {
            op = op.header(pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        }
        if let (Some(body), Some(content_type)) = (&self.body, &self.content_type) {
            op = op.body(body.clone(), content_type);
        }
        if let Some(key) = &self.idempotency_key {
            op = op.idempotency_key(key);
        }
        if let Some(key) = &self.order_key {
            op = op.order_key(key);
        }
        if self.unordered {
            op = op.unordered();
        }
        if self.supersede_pending {
            op = op.supersede_pending();
        }
        if self.expire_with_generation {
            op = op.expire_with_generation();
        }
        if let Some(traceparent) = &self.traceparent {
            op = op.traceparent(traceparent);
        }
        op.not_before(Duration::from_millis(self.not_before_ms as u64))
            .build()
            .expect("a valid op")
    }
}

/// What `outbox.enqueue` returned.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SqlEnqueued {
    op_id: Uuid,
    seq: i64,
    duplicate: bool,
}

/// A refusal as the server sent it.
#[derive(Debug)]
struct Refusal {
    code: String,
    column: Option<String>,
    /// The DETAIL field parsed as JSON (`Null` when absent or not JSON).
    detail: Value,
    message: String,
}

fn refusal(e: &sqlx::Error) -> Option<Refusal> {
    let pg = e
        .as_database_error()?
        .try_downcast_ref::<PgDatabaseError>()?;
    Some(Refusal {
        code: pg.code().to_owned(),
        column: pg.column().map(str::to_owned),
        detail: pg
            .detail()
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or(Value::Null),
        message: pg.message().to_owned(),
    })
}

/// The refusal of `result`, which must have failed with SQLSTATE `code`.
fn refused<T: std::fmt::Debug>(result: Result<T, sqlx::Error>, code: &str) -> Refusal {
    let e = result.expect_err("the call must be refused");
    let r = refusal(&e).unwrap_or_else(|| panic!("not a database error: {e}"));
    assert_eq!(r.code, code, "{r:?}");
    r
}

async fn try_acquire(
    c: impl PgExecutor<'_>,
    resource: &str,
    ttl: Option<&str>,
) -> Result<Option<SqlLease>, sqlx::Error> {
    let row =
        sqlx::query("SELECT owner_id, token, expires_at FROM outbox.try_acquire($1, $2::interval)")
            .bind(resource)
            .bind(ttl)
            .fetch_optional(c)
            .await?;
    Ok(row.map(|r| SqlLease {
        owner_id: r.get(0),
        token: r.get(1),
        expires_at: r.get(2),
    }))
}

/// A lease the test expects to be granted.
async fn acquire(c: impl PgExecutor<'_>, resource: &str, ttl: &str) -> SqlLease {
    try_acquire(c, resource, Some(ttl))
        .await
        .expect("try_acquire")
        .expect("the resource is free")
}

async fn renew(
    c: impl PgExecutor<'_>,
    resource: &str,
    lease: &SqlLease,
    ttl: Option<&str>,
) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    sqlx::query_scalar("SELECT outbox.renew($1, $2, $3, $4::interval)")
        .bind(resource)
        .bind(lease.owner_id)
        .bind(lease.token)
        .bind(ttl)
        .fetch_one(c)
        .await
}

async fn release(
    c: impl PgExecutor<'_>,
    resource: &str,
    lease: &SqlLease,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT outbox.release($1, $2, $3)")
        .bind(resource)
        .bind(lease.owner_id)
        .bind(lease.token)
        .fetch_one(c)
        .await
}

/// `outbox.enqueue` with every argument, by position.
async fn enqueue(
    c: impl PgExecutor<'_>,
    resource: &str,
    lease: &SqlLease,
    op: &SqlOp,
) -> Result<SqlEnqueued, sqlx::Error> {
    let row = sqlx::query(
        "SELECT op_id, seq, duplicate FROM outbox.enqueue($1, $2, $3, $4, $5, $6, $7::jsonb, \
         $8, $9, $10, $11, $12, $13::bigint * interval '1 millisecond', $14, $15, $16)",
    )
    .bind(resource)
    .bind(lease.owner_id)
    .bind(lease.token)
    .bind(&op.destination)
    .bind(&op.method)
    .bind(&op.path)
    .bind(op.headers.to_string())
    .bind(op.body.as_deref())
    .bind(op.content_type.as_deref())
    .bind(op.idempotency_key.as_deref())
    .bind(op.order_key.as_deref())
    .bind(op.unordered)
    .bind(op.not_before_ms)
    .bind(op.supersede_pending)
    .bind(op.expire_with_generation)
    .bind(op.traceparent.as_deref())
    .fetch_one(c)
    .await?;
    Ok(SqlEnqueued {
        op_id: row.get(0),
        seq: row.get(1),
        duplicate: row.get(2),
    })
}

/// A fresh database, migrated.
async fn migrated() -> TestDb {
    let db = TestDb::postgres().await;
    db.store().await.close().await;
    db
}

async fn connect(db: &TestDb) -> PgConnection {
    PgConnection::connect(db.url()).await.expect("connect")
}

/// A pool whose sessions allow leases from 100 ms (the `outbox.lease_min_ttl` setting), so
/// that tests can let a lease expire quickly.
async fn short_lease_pool(db: &TestDb) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .after_connect(|c, _| {
            Box::pin(async move {
                c.execute("SET outbox.lease_min_ttl = '100ms'")
                    .await
                    .map(drop)
            })
        })
        .connect(db.url())
        .await
        .expect("connect")
}

/// Waits until `resource`'s lease has expired by the database clock.
async fn wait_expired(pool: &PgPool, resource: &str) {
    let expired = || async move {
        sqlx::query_scalar::<_, bool>(
            "SELECT expires_at <= clock_timestamp() FROM outbox_leases WHERE resource = $1",
        )
        .bind(resource)
        .fetch_one(pool)
        .await
        .expect("lease row")
    };
    wait_until(Duration::from_secs(20), "the lease expired", expired).await;
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// A rejection row: (resource, owner id, token, current token, reason, stage, destination, key).
type RejectionRow = (
    String,
    Uuid,
    i64,
    Option<i64>,
    String,
    String,
    Option<String>,
    Option<String>,
);

async fn rejections(pool: &PgPool) -> Vec<RejectionRow> {
    sqlx::query_as(
        "SELECT resource, owner_id, fence, current_fence, reason, stage, destination, \
         idempotency_key FROM outbox_rejections ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("rejections")
}

// ---- Rust and SQL agree (G7, G8) ----

/// Request shapes both producers must see as the same request.
fn shapes() -> Vec<SqlOp> {
    let base = SqlOp::post("", r#"{"account":1842}"#);
    vec![
        SqlOp {
            headers: json!([["X-Request-Source", "nightly"], ["X-Note", "a b\tc"]]),
            ..base.clone()
        },
        SqlOp {
            method: "DELETE".into(),
            path: "/v1/statements/7".into(),
            body: None,
            content_type: None,
            ..base.clone()
        },
        SqlOp {
            method: "PUT".into(),
            path: "/v1/blobs/1?draft=false".into(),
            body: Some(vec![0, 159, 146, 150, 255]),
            content_type: Some("application/octet-stream".into()),
            order_key: Some("account-1842".into()),
            expire_with_generation: true,
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            ..base.clone()
        },
        SqlOp {
            method: "PATCH".into(),
            body: Some("relevé".as_bytes().to_vec()),
            content_type: Some("text/plain; charset=utf-8".into()),
            unordered: true,
            not_before_ms: 60_000,
            ..base.clone()
        },
        SqlOp {
            body: Some(Vec::new()),
            content_type: Some("text/plain".into()),
            ..base
        },
    ]
}

/// Every stored column that describes the request and its delivery, as one text per key.
async fn stored_requests(pool: &PgPool) -> HashMap<String, String> {
    sqlx::query_as(
        "SELECT idempotency_key, concat_ws(' | ', resource, fence, owner_id, destination, \
         method, path, headers::text, coalesce(content_type, '-'), encode(body, 'hex'), \
         coalesce(order_key, '-'), encode(request_hash, 'hex'), coalesce(trace_context, '-'), \
         expire_with_generation, state, \
         round(extract(epoch FROM next_attempt_at - created_at))) FROM outbox_ops",
    )
    .fetch_all(pool)
    .await
    .expect("ops")
    .into_iter()
    .collect()
}

/// G7 across languages: a request enqueued by `Outbox::enqueue` and then by `outbox.enqueue`
/// under the same key (or the other way round) is one op, a duplicate with the same op id,
/// never a conflict; both store it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g7_rust_and_sql_enqueues_of_one_request_are_duplicates_not_conflicts() {
    let db = TestDb::postgres().await;
    let outbox = db.outbox().await;
    let resource = "statement:account-1842:2026-07";
    let lease = outbox
        .try_acquire(resource, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let sql_lease = SqlLease {
        owner_id: lease.owner_id.as_uuid(),
        token: lease.token.get(),
        expires_at: lease.expires_at,
    };
    let pool = PgPool::connect(db.url()).await.unwrap();
    let shapes = shapes();
    for (i, shape) in shapes.iter().enumerate() {
        let keyed = |key: String| SqlOp {
            idempotency_key: Some(key),
            ..shape.clone()
        };
        let rust_first = keyed(format!("rust-first-{i}"));
        let by_rust = outbox.enqueue(&lease, &rust_first.to_rust()).await.unwrap();
        let by_sql = enqueue(&pool, resource, &sql_lease, &rust_first).await;
        assert_eq!(
            by_sql.unwrap_or_else(|e| panic!("shape {i}: {:?}", refusal(&e))),
            SqlEnqueued {
                op_id: by_rust.op_id,
                seq: by_rust.seq,
                duplicate: true
            },
            "shape {i}: SQL after Rust"
        );

        let sql_first = keyed(format!("sql-first-{i}"));
        let by_sql = enqueue(&pool, resource, &sql_lease, &sql_first)
            .await
            .unwrap();
        assert!(!by_sql.duplicate);
        let by_rust = outbox.enqueue(&lease, &sql_first.to_rust()).await.unwrap();
        assert_eq!(
            (by_rust.op_id, by_rust.seq, by_rust.duplicate),
            (by_sql.op_id, by_sql.seq, true),
            "shape {i}: Rust after SQL"
        );
    }
    let stored = stored_requests(&pool).await;
    assert_eq!(
        stored.len(),
        2 * shapes.len(),
        "one op per key: {stored:#?}"
    );
    for i in 0..shapes.len() {
        assert_eq!(
            stored[&format!("rust-first-{i}")],
            stored[&format!("sql-first-{i}")],
            "shape {i} is stored alike by both producers"
        );
    }
    // And a different request under a Rust-made key is a conflict from SQL.
    let other = SqlOp {
        idempotency_key: Some("rust-first-0".into()),
        ..SqlOp::post("", r#"{"account":9999}"#)
    };
    let r = refused(enqueue(&pool, resource, &sql_lease, &other).await, "OB004");
    let first: Uuid =
        sqlx::query_scalar("SELECT op_id FROM outbox_ops WHERE idempotency_key = 'rust-first-0'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(r.detail["existing_op_id"], json!(first.to_string()));
}

/// G8 across languages: an op enqueued through SQL sits in the partition slot
/// `op::partition_slot` gives its order key (its op id when unordered), and its op id is a
/// UUID v7 of the database's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g8_sql_ops_get_the_rust_partition_slot_and_a_uuid_v7() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let resource = "statement:account-1842:2026-07";
    let lease = acquire(&pool, resource, "60 seconds").await;
    let mut ops = vec![
        SqlOp::post("default-order-key", "{}"),
        SqlOp {
            order_key: Some("account-1842".into()),
            ..SqlOp::post("explicit-order-key", "{}")
        },
        SqlOp {
            order_key: Some("relevé:compte-1842".into()),
            ..SqlOp::post("unicode-order-key", "{}")
        },
    ];
    for i in 0..8 {
        ops.push(SqlOp {
            unordered: true,
            ..SqlOp::post(&format!("unordered-{i}"), "{}")
        });
    }
    for op in &ops {
        enqueue(&pool, resource, &lease, op).await.unwrap();
    }
    let rows: Vec<(Uuid, Option<String>, i32, OffsetDateTime)> = sqlx::query_as(
        "SELECT op_id, order_key, partition, created_at FROM outbox_ops ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let order_keys: Vec<Option<&str>> = rows.iter().map(|r| r.1.as_deref()).collect();
    assert_eq!(
        order_keys[..4],
        [
            Some(resource),
            Some("account-1842"),
            Some("relevé:compte-1842"),
            None
        ]
    );
    let mut unordered_slots = HashSet::new();
    for (op_id, order_key, slot, created_at) in &rows {
        let key = order_key
            .as_ref()
            .map(|k| OrderKey::new(k.as_str()).unwrap());
        assert_eq!(
            *slot,
            partition_slot(key.as_ref(), *op_id),
            "{op_id} {key:?}"
        );
        if key.is_none() {
            unordered_slots.insert(*slot);
        }
        assert_eq!(op_id.get_version_num(), 7, "{op_id}");
        assert_eq!(op_id.get_variant(), uuid::Variant::RFC4122, "{op_id}");
        let (secs, nanos) = op_id.get_timestamp().expect("a v7 time").to_unix();
        let id_ms = i128::from(secs) * 1000 + i128::from(nanos / 1_000_000);
        let row_ms = created_at.unix_timestamp_nanos() / 1_000_000;
        assert!(
            (row_ms - id_ms).abs() < 5_000,
            "{op_id}: id time {id_ms} ms, row created at {row_ms} ms"
        );
    }
    assert!(
        unordered_slots.len() > 1,
        "unordered ops spread over slots by op id: {unordered_slots:?}"
    );
}

// ---- SQLSTATEs and their details (G4, G7, G10) ----

/// G4: after the lease expired and another owner took over, the old owner's enqueue is OB001
/// with the new token in DETAIL current_token, nothing is inserted and the rejection is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_stale_enqueue_after_a_takeover_is_ob001_with_the_current_token() {
    let db = migrated().await;
    let pool = short_lease_pool(&db).await;
    let resource = "statement:account-1842:2026-07";
    let old = acquire(&pool, resource, "200 milliseconds").await;
    let pool_ref = &pool;
    let newer = wait_for(
        Duration::from_secs(20),
        "another owner takes over",
        || async move {
            try_acquire(pool_ref, resource, Some("60 seconds"))
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!(newer.token, old.token + 1);
    let r = refused(
        enqueue(&pool, resource, &old, &SqlOp::post("late", "{}")).await,
        "OB001",
    );
    assert_eq!(r.detail["current_token"], json!(newer.token), "{r:?}");
    assert_eq!(
        (&r.detail["reason"], &r.detail["token"]),
        (&json!("stale"), &json!(old.token))
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_ops").await, 0);
    assert_eq!(
        rejections(&pool).await,
        [(
            resource.to_owned(),
            old.owner_id,
            old.token,
            Some(newer.token),
            "stale".to_owned(),
            "sql_enqueue".to_owned(),
            Some("statements".to_owned()),
            Some("late".to_owned())
        )]
    );
}

/// G4: the same owner and token after the lease expired (nobody took it) is OB002.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_enqueue_on_an_expired_lease_is_ob002() {
    let db = migrated().await;
    let pool = short_lease_pool(&db).await;
    let lease = acquire(&pool, "short", "200 milliseconds").await;
    wait_expired(&pool, "short").await;
    let r = refused(
        enqueue(&pool, "short", &lease, &SqlOp::post("k", "{}")).await,
        "OB002",
    );
    assert_eq!(
        (&r.detail["reason"], &r.detail["token"]),
        (&json!("expired"), &json!(lease.token))
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_ops").await, 0);
    let kept = rejections(&pool).await;
    assert_eq!(
        kept.iter()
            .map(|r| (r.2, r.4.as_str(), r.5.as_str()))
            .collect::<Vec<_>>(),
        [(lease.token, "expired", "sql_enqueue")]
    );
}

/// G4: a resource never leased, and a released lease, are OB003; DETAIL current_token is the
/// released lease's token, and null for the one never leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_enqueue_without_a_lease_is_ob003_with_the_current_token_when_known() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let never = SqlLease {
        owner_id: Uuid::new_v4(),
        token: 1,
        expires_at: OffsetDateTime::now_utc(),
    };
    let r = refused(
        enqueue(&pool, "never-leased", &never, &SqlOp::post("k1", "{}")).await,
        "OB003",
    );
    assert_eq!(r.detail["current_token"], Value::Null, "{r:?}");

    let released = acquire(&pool, "released", "30 seconds").await;
    assert!(release(&pool, "released", &released).await.unwrap());
    let r = refused(
        enqueue(&pool, "released", &released, &SqlOp::post("k2", "{}")).await,
        "OB003",
    );
    assert_eq!(r.detail["current_token"], json!(released.token), "{r:?}");

    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_ops").await, 0);
    let kept: Vec<(String, Option<i64>, String)> = rejections(&pool)
        .await
        .into_iter()
        .map(|r| (r.0, r.3, r.4))
        .collect();
    assert_eq!(
        kept,
        [
            ("never-leased".to_owned(), None, "no_lease".to_owned()),
            (
                "released".to_owned(),
                Some(released.token),
                "no_lease".to_owned()
            )
        ]
    );
}

/// G7: the same key with another request is OB004 naming the existing op; the original is
/// kept as it was and nothing is recorded as a rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g7_sql_enqueue_of_another_request_under_a_used_key_is_ob004_with_the_existing_op() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let lease = acquire(&pool, "billing:run-7", "30 seconds").await;
    let first = enqueue(
        &pool,
        "billing:run-7",
        &lease,
        &SqlOp::post("k", "original"),
    )
    .await
    .unwrap();
    let again = enqueue(
        &pool,
        "billing:run-7",
        &lease,
        &SqlOp::post("k", "original"),
    )
    .await
    .unwrap();
    assert_eq!(
        again,
        SqlEnqueued {
            duplicate: true,
            ..first
        }
    );
    let r = refused(
        enqueue(
            &pool,
            "billing:run-7",
            &lease,
            &SqlOp::post("k", "different"),
        )
        .await,
        "OB004",
    );
    assert_eq!(r.detail["existing_op_id"], json!(first.op_id.to_string()));
    let bodies: Vec<Vec<u8>> = sqlx::query_scalar("SELECT body FROM outbox_ops")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(bodies, [b"original".to_vec()]);
    assert!(rejections(&pool).await.is_empty());
}

/// G10: invalid input is OB005 naming the field in COLUMN and DETAIL, never quoting a header
/// value, and writes nothing: no op, no lease, no rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_sql_invalid_input_is_ob005_naming_the_field_and_writes_nothing() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let lease = acquire(&pool, "r", "30 seconds").await;
    let before = db.snapshot().await;
    let base = SqlOp::post("k", "{}");
    let cases = [
        (
            "destination",
            SqlOp {
                destination: "https://evil.example".into(),
                ..base.clone()
            },
        ),
        (
            "path",
            SqlOp {
                path: "/a/%2E%2e/admin".into(),
                ..base.clone()
            },
        ),
        (
            "header_name",
            SqlOp {
                headers: json!([["Authorization", "Bearer hunter2"]]),
                ..base.clone()
            },
        ),
        (
            "header_value",
            SqlOp {
                headers: json!([["X-Note", "hunter2\r\nX-Injected: 1"]]),
                ..base.clone()
            },
        ),
        (
            "headers",
            SqlOp {
                headers: json!({"X-Note": "a"}),
                ..base.clone()
            },
        ),
        (
            "traceparent",
            SqlOp {
                traceparent: Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01".into()),
                ..base.clone()
            },
        ),
        (
            "idempotency_key",
            SqlOp {
                idempotency_key: None,
                ..base.clone()
            },
        ),
    ];
    for (field, op) in &cases {
        let r = refused(enqueue(&pool, "r", &lease, op).await, "OB005");
        assert_eq!(
            (r.column.as_deref(), &r.detail["field"]),
            (Some(*field), &json!(field)),
            "{r:?}"
        );
        assert!(r.message.contains(field), "{r:?}");
        assert!(
            !format!("{r:?}").contains("hunter2"),
            "a refusal never quotes a header value: {r:?}"
        );
    }
    let r = refused(enqueue(&pool, "", &lease, &base).await, "OB005");
    assert_eq!(r.column.as_deref(), Some("resource"));
    assert_eq!(db.snapshot().await, before, "nothing was written");
}

// ---- The caller's transaction (G4) ----

async fn invoices(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar("SELECT id FROM invoices ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// G4: an op enqueued inside the caller's transaction commits with its business write, and a
/// rollback leaves neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_enqueue_commits_or_rolls_back_with_the_business_write() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    pool.execute("CREATE TABLE invoices (id integer PRIMARY KEY, amount integer NOT NULL)")
        .await
        .unwrap();
    let lease = acquire(&pool, "invoice:7", "30 seconds").await;
    for (id, key, commit) in [(1, "rolled-back", false), (2, "committed", true)] {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO invoices (id, amount) VALUES ($1, 100)")
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
        enqueue(
            &mut *tx,
            "invoice:7",
            &lease,
            &SqlOp::post(key, r#"{"invoice":7}"#),
        )
        .await
        .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
    let keys: Vec<String> = sqlx::query_scalar("SELECT idempotency_key FROM outbox_ops")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(keys, ["committed"]);
    assert_eq!(invoices(&pool).await, [2]);
}

/// G4: a stale enqueue inside the caller's transaction fails it with OB001; the caller rolls
/// back, and the rejection record, written by an autonomous transaction, survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g4_sql_rejection_in_a_caller_transaction_survives_its_rollback() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    pool.execute("CREATE TABLE invoices (id integer PRIMARY KEY, amount integer NOT NULL)")
        .await
        .unwrap();
    let old = acquire(&pool, "tx-stale", "30 seconds").await;
    assert!(release(&pool, "tx-stale", &old).await.unwrap());
    let newer = acquire(&pool, "tx-stale", "30 seconds").await;

    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO invoices (id, amount) VALUES (1, 100)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let r = refused(
        enqueue(&mut *tx, "tx-stale", &old, &SqlOp::post("in-tx", "{}")).await,
        "OB001",
    );
    assert_eq!(r.detail["current_token"], json!(newer.token));
    tx.rollback().await.unwrap();

    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_rejections WHERE stage = 'sql_enqueue' AND reason = 'stale'"
        )
        .await,
        1
    );
    let kept = &rejections(&pool).await[0];
    assert_eq!((kept.2, kept.3), (old.token, Some(newer.token)));
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_ops").await, 0);
    assert!(
        invoices(&pool).await.is_empty(),
        "the business write rolled back"
    );
}
