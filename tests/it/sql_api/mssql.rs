//! SQL Server: the `outbox.*` procedures of migrations/mssql/0004_sql_api.sql, called as a .NET
//! or Python worker calls them (procedure parameters over a plain driver connection, inside the
//! caller's own transaction). Ignored without `OUTBOX_MSSQL_URL`, like every SQL Server test.

mod calls;
mod roles;

use std::collections::HashMap;
use std::time::Duration;

use outbox_producer::{Operation, OrderKey};
use outbox_store::op::partition_slot;
use outbox_tests::{EnqueueCase, TestDb, enqueue_cases};
use tiberius::ColumnData;
use time::OffsetDateTime;
use uuid::Uuid;

use calls::{
    Args, RENEW, SqlEnqueued, SqlLease, acquire, batch, call, connect, count,
    create_business_table, enqueue, expect_invalid, expect_thrown, loopback_set_up, release, renew,
    scalar, text, try_acquire,
};

/// A SQL Server database for the SQL API's tests; `None` on Babelfish, whose lack of `_SC`
/// and `_UTF8` collations the procedures cannot run without (said on stderr).
async fn sql_api_db() -> Option<TestDb> {
    let db = TestDb::mssql().await;
    (!db.skip_on_babelfish(outbox_tests::babelfish::NO_SC_OR_UTF8_COLLATIONS)).then_some(db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g1_g3_sql_acquire_renew_and_release_keep_the_token_rules() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let r = "statement:account-1842:2026-07";

    let a = acquire(&mut c, r).await;
    assert_eq!(a.token, 1);
    assert!(a.expires_at > OffsetDateTime::now_utc() - Duration::from_secs(60));
    assert!(
        try_acquire(&mut c, r, 30_000).await.unwrap().is_none(),
        "held"
    );

    // Renewal keeps the token and needs this owner and this token (G3).
    let later = renew(&mut c, &a, 60_000).await.unwrap().expect("renewed");
    assert!(later > a.expires_at);
    let other_owner = SqlLease {
        owner: Uuid::new_v4(),
        ..a.clone()
    };
    let other_token = SqlLease {
        token: a.token + 1,
        ..a.clone()
    };
    assert!(renew(&mut c, &other_owner, 60_000).await.unwrap().is_none());
    assert!(renew(&mut c, &other_token, 60_000).await.unwrap().is_none());
    assert!(!release(&mut c, &other_owner).await);
    assert!(!release(&mut c, &other_token).await);

    // Release keeps the fence: the next owner gets a larger token and a new owner id (G1).
    assert!(release(&mut c, &a).await);
    assert!(!release(&mut c, &a).await, "released once");
    let b = acquire(&mut c, r).await;
    assert_eq!(b.token, 2);
    assert_ne!(b.owner, a.owner);

    // Expired by the database clock: not renewed (never revived), and free to take (G2).
    db.shift_lease_clock(3600).await;
    assert!(renew(&mut c, &b, 60_000).await.unwrap().is_none());
    let c3 = acquire(&mut c, r).await;
    assert_eq!(c3.token, 3);

    // Bad input is refused by name.
    expect_invalid(try_acquire(&mut c, r, 4_999).await, "ttl");
    expect_invalid(try_acquire(&mut c, r, 300_001).await, "ttl");
    expect_invalid(try_acquire(&mut c, "", 30_000).await, "resource");
    expect_invalid(
        try_acquire(&mut c, "dispatcher/0", 30_000).await,
        "resource",
    );
    expect_invalid(
        try_acquire(&mut c, "statement:1 ", 30_000).await,
        "resource",
    );
    let no_owner = call(
        &mut c,
        RENEW,
        vec![
            text(r),
            ColumnData::Guid(None),
            ColumnData::I64(Some(3)),
            ColumnData::I32(Some(30_000)),
        ],
    )
    .await;
    expect_invalid(no_owner, "owner_id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn sql_resource_names_are_counted_in_characters_not_utf16_units() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    // 200 characters outside the BMP are 400 UTF-16 units: still 200 characters.
    let wide = "😀".repeat(200);
    let lease = acquire(&mut c, &wide).await;
    assert_eq!(lease.token, 1);
    expect_invalid(
        try_acquire(&mut c, &"😀".repeat(201), 30_000).await,
        "resource",
    );
    // A lone surrogate is no character: no Rust string holds one, so it is refused. Built in
    // T-SQL, since a Rust string cannot carry it.
    let lone = call(
        &mut c,
        "DECLARE @r nvarchar(10) = CONCAT(N'a', CONVERT(nchar(1), 0x00D8)); EXEC outbox.TryAcquire @Resource = @r, @TtlMs = 30000",
        vec![],
    )
    .await;
    expect_invalid(lone, "resource");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g4_sql_enqueue_commits_and_rolls_back_with_the_callers_business_write() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    create_business_table(&mut c).await;
    let lease = acquire(&mut c, "statement:account-1842:2026-07").await;

    // The seed's story inside one transaction: the statement row and its op commit together.
    batch(&mut c, "BEGIN TRANSACTION").await;
    batch(
        &mut c,
        "INSERT INTO dbo.account_statements VALUES (1842, N'July')",
    )
    .await;
    let op = enqueue(&mut c, &Args::statement(&lease, "statement-1842-2026-07"))
        .await
        .expect("accepted");
    assert!(!op.duplicate);
    assert_eq!(
        scalar(&mut c, "SELECT CAST(@@TRANCOUNT AS bigint)", vec![]).await,
        1,
        "Enqueue leaves the caller's transaction open"
    );
    batch(&mut c, "COMMIT TRANSACTION").await;
    assert_eq!(count(&mut c, "account_statements").await, 1);
    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].op_id, op.op_id.to_string());
    assert_eq!(
        (ops[0].seq, ops[0].fence, ops[0].state.as_str()),
        (op.seq, lease.token, "pending")
    );
    assert_eq!(
        ops[0].order_key.as_deref(),
        Some(lease.resource.as_str()),
        "the resource is the default order key"
    );
    assert_eq!(ops[0].body, br#"{"account":1842}"#);

    // Rolled back: neither the business row nor the op.
    batch(&mut c, "BEGIN TRANSACTION").await;
    batch(
        &mut c,
        "INSERT INTO dbo.account_statements VALUES (1843, N'July')",
    )
    .await;
    enqueue(&mut c, &Args::statement(&lease, "statement-1843-2026-07"))
        .await
        .expect("accepted");
    batch(&mut c, "ROLLBACK TRANSACTION").await;
    assert_eq!(count(&mut c, "account_statements").await, 1);
    assert_eq!(count(&mut c, "outbox_ops").await, 1);

    // Outside any transaction it commits its own, and leaves none open.
    enqueue(&mut c, &Args::statement(&lease, "statement-1844-2026-07"))
        .await
        .expect("accepted");
    assert_eq!(
        scalar(&mut c, "SELECT CAST(@@TRANCOUNT AS bigint)", vec![]).await,
        0
    );
    assert_eq!(count(&mut c, "outbox_ops").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g4_sql_stale_owner_is_refused_with_the_current_token_and_its_write_rolls_back() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    create_business_table(&mut c).await;
    let resource = "statement:account-1842:2026-07";

    // A is paused past its lease; B takes over and enqueues.
    let a = acquire(&mut c, resource).await;
    db.shift_lease_clock(3600).await;
    let b = acquire(&mut c, resource).await;
    assert_eq!(b.token, a.token + 1);
    let b_op = enqueue(&mut c, &Args::statement(&b, "statement-1842-2026-07-b"))
        .await
        .expect("B is the owner");

    // A resumes inside its own transaction: refused, with B's token; its business write goes too.
    batch(&mut c, "BEGIN TRANSACTION").await;
    batch(
        &mut c,
        "INSERT INTO dbo.account_statements VALUES (1842, N'stale')",
    )
    .await;
    let refused = enqueue(&mut c, &Args::statement(&a, "statement-1842-2026-07-a")).await;
    expect_thrown(refused, 51001, &format!("stale; current token {}", b.token));
    batch(&mut c, "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION").await;
    assert_eq!(count(&mut c, "account_statements").await, 0);
    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    assert_eq!(
        (ops[0].op_id.as_str(), ops[0].fence),
        (b_op.op_id.to_string().as_str(), b.token)
    );

    // B's token with another owner id is no lease of B's: stale too.
    let forged = SqlLease {
        owner: Uuid::new_v4(),
        ..b.clone()
    };
    expect_thrown(
        enqueue(&mut c, &Args::statement(&forged, "forged")).await,
        51001,
        &format!("stale; current token {}", b.token),
    );
    assert_eq!(count(&mut c, "outbox_ops").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g4_sql_expired_lease_is_refused_as_expired() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let a = acquire(&mut c, "statement:account-1842:2026-07").await;
    db.shift_lease_clock(3600).await;
    expect_thrown(
        enqueue(&mut c, &Args::statement(&a, "k")).await,
        51002,
        "expired",
    );
    assert_eq!(count(&mut c, "outbox_ops").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g4_sql_enqueue_without_a_lease_is_refused_as_no_lease() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let never = SqlLease {
        resource: "never-leased".into(),
        owner: Uuid::new_v4(),
        token: 1,
        expires_at: OffsetDateTime::now_utc(),
    };
    expect_thrown(
        enqueue(&mut c, &Args::statement(&never, "k")).await,
        51003,
        "no lease",
    );
    let released = acquire(&mut c, "released").await;
    assert!(release(&mut c, &released).await);
    expect_thrown(
        enqueue(&mut c, &Args::statement(&released, "k")).await,
        51003,
        "no lease; current token 1",
    );
    assert_eq!(count(&mut c, "outbox_ops").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g4_sql_rejection_outlives_the_callers_rollback_when_outbox_loopback_is_set_up() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let resource = "statement:account-1842:2026-07";
    let a = acquire(&mut c, resource).await;
    db.shift_lease_clock(3600).await;
    let b = acquire(&mut c, resource).await;

    batch(&mut c, "BEGIN TRANSACTION").await;
    let refused = enqueue(&mut c, &Args::statement(&a, "statement-1842-2026-07")).await;
    expect_thrown(refused, 51001, &format!("stale; current token {}", b.token));
    batch(&mut c, "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION").await;

    let kept = call(
        &mut c,
        "SELECT resource, owner_id, fence, current_fence, destination, idempotency_key, stage, reason \
         FROM dbo.outbox_rejections",
        vec![],
    )
    .await
    .expect("rejections");
    if !loopback_set_up(&mut c).await {
        // Without the loopback nothing durable can be kept, and nothing is pretended.
        assert!(
            kept.is_empty(),
            "a rejection record without OUTBOX_LOOPBACK cannot survive the rollback"
        );
        eprintln!(
            "skipped the durable half: this server has no OUTBOX_LOOPBACK linked server \
             (see migrations/mssql/0004_sql_api.sql)"
        );
        return;
    }
    assert_eq!(
        kept.len(),
        1,
        "one rejection record, kept through the rollback (the loopback's login needs EXECUTE on \
         outbox.KeepRejection in each test database: on a test server map it with @useself = 'true')"
    );
    let r = &kept[0];
    assert_eq!(r.get::<&str, _>("resource"), Some(resource));
    assert_eq!(r.get::<Uuid, _>("owner_id"), Some(a.owner));
    assert_eq!(r.get::<i64, _>("fence"), Some(a.token));
    assert_eq!(r.get::<i64, _>("current_fence"), Some(b.token));
    assert_eq!(r.get::<&str, _>("destination"), Some("billing"));
    assert_eq!(
        r.get::<&str, _>("idempotency_key"),
        Some("statement-1842-2026-07")
    );
    assert_eq!(r.get::<&str, _>("stage"), Some("sql_enqueue"));
    assert_eq!(r.get::<&str, _>("reason"), Some("stale"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g7_sql_same_request_is_a_duplicate_and_another_is_a_conflict() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let lease = acquire(&mut c, "statement:account-1842:2026-07").await;
    let args = Args::statement(&lease, "statement-1842-2026-07");
    let first = enqueue(&mut c, &args).await.expect("accepted");
    assert!(!first.duplicate);
    let again = enqueue(&mut c, &args).await.expect("duplicate");
    assert_eq!(
        again,
        SqlEnqueued {
            duplicate: true,
            ..first.clone()
        }
    );

    let other = args.with(|a| a.body = Some(br#"{"account":1843}"#.to_vec()));
    expect_thrown(
        enqueue(&mut c, &other).await,
        51004,
        &format!("conflict; existing op {}", first.op_id),
    );
    assert_eq!(count(&mut c, "outbox_ops").await, 1);
    assert_eq!(
        count(&mut c, "outbox_rejections").await,
        0,
        "a conflict is not a rejection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g5_sql_supersede_pending_drops_older_tokens_pending_ops() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let resource = "statement:account-1842:2026-07";
    let a = acquire(&mut c, resource).await;
    enqueue(&mut c, &Args::statement(&a, "draft-a"))
        .await
        .expect("A's op");
    db.shift_lease_clock(3600).await;
    let b = acquire(&mut c, resource).await;
    let newer = Args::statement(&b, "final-b").with(|a| a.supersede_pending = true);
    enqueue(&mut c, &newer).await.expect("B's op");
    let states: Vec<(String, String)> = db
        .ops()
        .await
        .into_iter()
        .map(|o| (o.idempotency_key, o.state))
        .collect();
    assert_eq!(
        states,
        [
            ("draft-a".into(), "superseded".into()),
            ("final-b".into(), "pending".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g10_sql_invalid_input_is_refused_by_field_and_writes_nothing() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let lease = acquire(&mut c, "statement:account-1842:2026-07").await;
    let base = Args::statement(&lease, "k-1");
    let before = db.snapshot().await;
    let cases: Vec<(&str, Args)> = vec![
        (
            "path",
            base.with(|a| a.path = Some("https://evil.example/x".into())),
        ),
        (
            "path",
            base.with(|a| a.path = Some("/a/%2E%2e/admin".into())),
        ),
        (
            "headers",
            base.with(|a| a.headers = Some("not json".into())),
        ),
        (
            "headers",
            base.with(|a| a.headers = Some(r#"{"X-Note": "a"}"#.into())),
        ),
        (
            "headers",
            base.with(|a| a.headers = Some(r#"[["X-Note", "a", "b"]]"#.into())),
        ),
        (
            "headers",
            base.with(|a| a.headers = Some(r#"[["X-Note", 1]]"#.into())),
        ),
        (
            "header_name",
            base.with(|a| a.headers = Some(r#"[["Authorization", "Bearer x"]]"#.into())),
        ),
        (
            "header_value",
            base.with(|a| a.headers = Some(r#"[["X-Note", "a\u0000b"]]"#.into())),
        ),
        (
            "content_type",
            base.with(|a| a.content_type = Some(" \t".into())),
        ),
        ("idempotency_key", base.with(|a| a.idempotency_key = None)),
        ("not_before", base.with(|a| a.not_before_ms = Some(-1))),
        (
            "traceparent",
            base.with(|a| {
                a.traceparent = Some(format!("00-{}-{}-01", "0".repeat(32), "a".repeat(16)))
            }),
        ),
        ("owner_id", base.with(|a| a.owner = None)),
        ("token", base.with(|a| a.token = None)),
        (
            "resource",
            base.with(|a| a.resource = "dispatcher/0".into()),
        ),
    ];
    for (field, args) in &cases {
        expect_invalid(enqueue(&mut c, args).await, field);
    }
    // White space around the array is JSON too: accepted, and stored as compact JSON.
    let spaced =
        base.with(|a| a.headers = Some("\n [ [\"X-Request-Source\", \"nightly\"] ]\n".into()));
    let op = enqueue(&mut c, &spaced).await.expect("accepted");
    assert!(!op.duplicate);
    assert_eq!(
        db.ops().await[0].headers,
        r#"[["X-Request-Source","nightly"]]"#
    );
    let after = db.snapshot().await;
    assert_eq!(before.len(), after.len());
    assert_eq!(
        before[..before.len() - 1],
        after[..after.len() - 1],
        "no lease changed"
    );
    assert_eq!(
        after.last().map(String::as_str),
        Some("[1, 0, 0, 0]"),
        "only the accepted op"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn sql_settings_override_the_ttl_bounds_and_the_body_limit() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    expect_invalid(try_acquire(&mut c, "r", 600_000).await, "ttl");
    batch(&mut c, "INSERT INTO outbox.Settings (Name, Value) VALUES ('lease_max_ttl_ms', 600000), ('max_body_bytes', 10)").await;
    let lease = try_acquire(&mut c, "r", 600_000)
        .await
        .unwrap()
        .expect("within the new bounds");
    let big = Args::statement(&lease, "k").with(|a| a.body = Some(vec![b'x'; 11]));
    expect_invalid(enqueue(&mut c, &big).await, "body");
    let small = Args::statement(&lease, "k").with(|a| a.body = Some(vec![b'x'; 10]));
    enqueue(&mut c, &small).await.expect("at the limit");
    // The table refuses values out of range; crossed bounds are refused by name.
    let out_of_range = async {
        c.simple_query("INSERT INTO outbox.Settings (Name, Value) VALUES ('max_body_bytes_x', 1)")
            .await?
            .into_results()
            .await
    }
    .await;
    assert!(out_of_range.is_err(), "an unknown setting is refused");
    batch(
        &mut c,
        "INSERT INTO outbox.Settings (Name, Value) VALUES ('lease_min_ttl_ms', 700000)",
    )
    .await;
    expect_invalid(try_acquire(&mut c, "r2", 600_000).await, "lease_min_ttl_ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g7_g8_sql_and_rust_producers_agree_on_the_request_hash_and_the_partition() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let outbox = db.outbox().await;
    let mut c = connect(&db).await;
    let resource = "relevé:compte-1842";
    let lease = outbox
        .try_acquire(resource, Duration::from_secs(60))
        .await
        .expect("acquire")
        .expect("free");
    let sql_lease = SqlLease {
        resource: resource.into(),
        owner: lease.owner_id.as_uuid(),
        token: lease.token.get(),
        expires_at: lease.expires_at,
    };
    let headers = [("X-Request-Source", "nightly/1"), ("X-Note", "a b\tc")];
    let body = "{\"account\":1842,\"note\":\"€\"}";
    let order_key = "relevé-😀";

    // Rust first, then the same request through outbox.Enqueue: a duplicate, not a conflict.
    let mut builder = Operation::post("billing", "/statements?draft=false")
        .body(body.as_bytes().to_vec(), "application/json; charset=utf-8")
        .idempotency_key("agree-1")
        .order_key(order_key);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let op = builder.build().expect("a valid op");
    let rust = outbox.enqueue(&lease, &op).await.expect("Rust enqueue");
    let headers_json = serde_json::to_string(&headers).expect("JSON");
    let args = Args::statement(&sql_lease, "agree-1").with(|a| {
        a.method = Some("post".into());
        a.path = Some("/statements?draft=false".into());
        a.headers = Some(headers_json.clone());
        a.body = Some(body.as_bytes().to_vec());
        a.content_type = Some("application/json; charset=utf-8".into());
        a.order_key = Some(order_key.into());
    });
    let sql = enqueue(&mut c, &args).await.expect("the same request");
    assert_eq!(
        (sql.op_id, sql.seq, sql.duplicate),
        (rust.op_id, rust.seq, true)
    );

    // T-SQL first (unordered, so the slot hashes the op id's bytes), then Rust.
    let unordered = args.with(|a| {
        a.idempotency_key = Some("agree-2".into());
        a.order_key = None;
        a.unordered = true;
    });
    let sql2 = enqueue(&mut c, &unordered).await.expect("accepted");
    assert!(!sql2.duplicate);
    let mut builder = Operation::post("billing", "/statements?draft=false")
        .body(body.as_bytes().to_vec(), "application/json; charset=utf-8")
        .idempotency_key("agree-2")
        .unordered();
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let op2 = builder.build().expect("a valid op");
    let rust2 = outbox
        .enqueue(&lease, &op2)
        .await
        .expect("the same request");
    assert_eq!((rust2.op_id, rust2.duplicate), (sql2.op_id, true));

    // The T-SQL op's stored hash and slot are Rust's, byte for byte; its id is a UUID v7.
    let rows = call(
        &mut c,
        "SELECT request_hash, partition, order_key, method, headers FROM dbo.outbox_ops WHERE op_id = @P1",
        vec![ColumnData::Guid(Some(sql2.op_id))],
    )
    .await
    .expect("the op");
    assert_eq!(
        rows[0].get::<&[u8], _>("request_hash"),
        Some(&op2.request_hash()[..])
    );
    assert_eq!(
        rows[0].get::<i32, _>("partition"),
        Some(partition_slot(None, sql2.op_id))
    );
    assert_eq!(rows[0].get::<&str, _>("order_key"), None);
    assert_eq!(rows[0].get::<&str, _>("method"), Some("POST"));
    let stored: Vec<(String, String)> =
        serde_json::from_str(rows[0].get::<&str, _>("headers").expect("headers"))
            .expect("JSON pairs");
    assert_eq!(stored, headers.map(|(n, v)| (n.to_owned(), v.to_owned())));
    assert_eq!(sql2.op_id.get_version_num(), 7);
    assert_eq!(sql2.op_id.get_variant(), uuid::Variant::RFC4122);

    // An ordered op's slot hashes the order key's UTF-8 bytes.
    let ordered = args.with(|a| a.idempotency_key = Some("agree-3".into()));
    let sql3 = enqueue(&mut c, &ordered).await.expect("accepted");
    let slot = scalar(
        &mut c,
        "SELECT CAST(partition AS bigint) FROM dbo.outbox_ops WHERE op_id = @P1",
        vec![ColumnData::Guid(Some(sql3.op_id))],
    )
    .await;
    let key = OrderKey::new(order_key).expect("an order key");
    assert_eq!(slot, i64::from(partition_slot(Some(&key), sql3.op_id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn g10_sql_enqueue_accepts_and_refuses_exactly_what_the_shared_table_says() {
    let Some(db) = sql_api_db().await else {
        return;
    };
    let _store = db.store().await;
    let mut c = connect(&db).await;
    let cases = enqueue_cases();
    // One lease per valid resource of the table; an invalid one is refused before any lease
    // is looked at, so it gets an owner and token of nobody's.
    let mut leases: HashMap<String, SqlLease> = HashMap::new();
    let mut wrong = Vec::new();
    for case in &cases {
        let name = &case.name;
        let resource = case.text("resource").unwrap_or_default();
        let lease = match leases.get(&resource) {
            Some(l) => l.clone(),
            None => match try_acquire(&mut c, &resource, 30_000).await {
                Ok(Some(l)) => {
                    leases.insert(resource.clone(), l.clone());
                    l
                }
                Ok(None) => panic!("{name}: {resource:?} is held by someone else"),
                Err(_) => SqlLease {
                    resource: resource.clone(),
                    owner: Uuid::new_v4(),
                    token: 1,
                    expires_at: OffsetDateTime::now_utc(),
                },
            },
        };
        // Each case in a transaction rolled back, so accepted cases leave no key behind.
        batch(&mut c, "BEGIN TRANSACTION").await;
        let got = enqueue(&mut c, &case_args(&lease, case)).await;
        batch(&mut c, "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION").await;
        let expected = case.expect.clone();
        let got_field = match &got {
            Ok(_) => None,
            Err(t) => Some(
                t.invalid_field()
                    .map_or_else(|| format!("{t:?}"), str::to_owned),
            ),
        };
        if got_field != expected {
            wrong.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    assert_eq!(
        count(&mut c, "outbox_ops").await,
        0,
        "every case was rolled back"
    );
}

/// outbox.Enqueue's arguments for one case under `lease`. As the Rust side, a body is passed
/// only together with its content type (the builder's `.body(bytes, content_type)`).
fn case_args(lease: &SqlLease, case: &EnqueueCase) -> Args {
    let s = |k: &str| case.text(k);
    let flag = |k: &str| case.flag(k);
    let (body, content_type) = match case.body_and_content_type() {
        Some((body, content_type)) => (Some(body), Some(content_type)),
        None => (None, None),
    };
    Args {
        resource: s("resource").unwrap_or_default(),
        owner: Some(lease.owner),
        token: Some(lease.token),
        destination: s("destination"),
        method: s("method"),
        path: s("path"),
        headers: Some(case.headers_json().to_string()),
        body,
        content_type,
        idempotency_key: s("idempotency_key"),
        order_key: s("order_key"),
        unordered: flag("unordered"),
        not_before_ms: Some(case.number("not_before_ms") as i64),
        supersede_pending: flag("supersede_pending"),
        expire_with_generation: flag("expire_with_generation"),
        traceparent: None,
    }
}
