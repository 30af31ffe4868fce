//! SQL Server's database roles (migrations/mssql/0018_database_roles.sql, issue 37): a login
//! holding one role alone is refused what its role must not do, with a permission error and
//! nothing changed, and runs what its component runs through the store: the dispatcher claims,
//! completes, erases and purges; the operator reads content and replays; the viewer reads
//! status, lists and shows ops without their content and is refused it. Ignored without
//! `OUTBOX_MSSQL_URL`, like every SQL Server test.

use std::time::Duration;

use outbox_producer::Operation;
use outbox_store::admin::{Change, OpFilter};
use outbox_store::{
    AttemptOutcome, ClaimRoom, Completion, NextState, Partition, ResourceName, Store,
    StoreErrorKind,
};
use outbox_tests::{TestDb, lease};
use time::OffsetDateTime;

const SECRET: &str = "holder Grace Hopper";

/// Runs `sql` as the login of `url`: `Err` with the server's message when refused.
async fn run_as(url: &str, sql: &str) -> Result<(), String> {
    let mut c = outbox_store::mssql::connect(url)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    c.simple_query(sql)
        .await
        .map_err(|e| e.to_string())?
        .into_results()
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Each of `sql` is refused `url`'s login with a permission error.
async fn refused(url: &str, role: &str, sqls: &[&str]) {
    for sql in sqls {
        let e = run_as(url, sql)
            .await
            .expect_err(&format!("{role} must not run {sql}"));
        let lower = e.to_lowercase();
        assert!(
            lower.contains("permission") || lower.contains("denied"),
            "{role}: {sql}: {e}"
        );
    }
}

/// Each of `sql` runs as `url`'s login.
async fn allowed(url: &str, role: &str, sqls: &[&str]) {
    for sql in sqls {
        run_as(url, sql)
            .await
            .unwrap_or_else(|e| panic!("{role} may run {sql}: {e}"));
    }
}

/// A store on `url` with the options the components use: their lease calls are statements
/// (the dispatcher's partition leases), as `outbox-dispatcher` and `outboxctl` configure them.
async fn store_as(url: &str) -> Store {
    let options = outbox_store::StoreOptions {
        producer_calls: outbox_store::ProducerCalls::Statements,
        ..TestDb::options()
    };
    Store::connect(url, options)
        .await
        .expect("connect as the role")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn each_role_is_refused_what_it_must_not_do_and_runs_its_component() {
    let db = TestDb::mssql().await;
    let owner = db.store().await;
    let outbox = db.outbox().await;
    let producer = lease(&outbox, "statement:7").await;
    for key in ["a", "b"] {
        let op = Operation::post("api", "/v1/statements")
            .header("X-Holder", SECRET)
            .body(SECRET.as_bytes().to_vec(), "text/plain")
            .idempotency_key(key)
            .unordered()
            .build()
            .unwrap();
        outbox.enqueue(&producer, &op).await.unwrap();
    }
    let before = db.snapshot().await;

    // The viewer: reads everything but the content, changes nothing.
    let viewer = db.login_as("outbox_viewer").await;
    allowed(
        &viewer,
        "viewer",
        &[
            "SELECT id, destination, idempotency_key FROM dbo.outbox_requests",
            "SELECT body_bytes, header_names FROM dbo.outbox_request_meta",
            "SELECT state, attempts FROM dbo.outbox_ops",
            "SELECT * FROM dbo.outbox_queue",
        ],
    )
    .await;
    refused(
        &viewer,
        "viewer",
        &[
            "SELECT body FROM dbo.outbox_requests",
            "SELECT headers FROM dbo.outbox_requests",
            "SELECT request_hash FROM dbo.outbox_requests",
            "SELECT body FROM dbo.outbox_ops",
            "UPDATE dbo.outbox_queue SET attempts = 0",
            "DELETE FROM dbo.outbox_requests",
            "INSERT INTO dbo.outbox_admin_log (actor, action, reason) VALUES ('v', 'purge', 'x')",
            "UPDATE dbo.outbox_leases SET fence = fence + 1",
        ],
    )
    .await;
    let as_viewer = store_as(&viewer).await;
    as_viewer
        .admin_status()
        .await
        .expect("status as the viewer");
    let listed = as_viewer
        .admin_op_list(&OpFilter {
            limit: 10,
            ..OpFilter::default()
        })
        .await
        .expect("list as the viewer");
    assert_eq!(listed.len(), 2);
    let shown = as_viewer
        .admin_op_show(listed[0].seq)
        .await
        .expect("show as the viewer")
        .unwrap();
    assert_eq!(shown.header_names, ["X-Holder"]);
    assert_eq!(shown.summary.body_bytes, SECRET.len() as i64);
    let e = as_viewer.admin_op_content(listed[0].seq).await.unwrap_err();
    assert!(
        matches!(&e, outbox_store::Error::Store(s) if s.kind() == StoreErrorKind::Denied),
        "{e}"
    );

    // The producer: the SQL API's procedures only, no table.
    let producer_url = db.login_as("outbox_producer").await;
    refused(
        &producer_url,
        "producer",
        &[
            "SELECT * FROM dbo.outbox_leases",
            "SELECT id FROM dbo.outbox_requests",
            "UPDATE dbo.outbox_leases SET fence = fence + 1",
            "DELETE FROM dbo.outbox_queue",
            "INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, fence, \
             expire_with_generation) VALUES (1, SYSUTCDATETIME(), 0, 'api', 1, 0)",
        ],
    )
    .await;

    // The dispatcher: no request of its own, no admin log, no request change but the content.
    let dispatcher = db.login_as("outbox_dispatcher").await;
    refused(
        &dispatcher,
        "dispatcher",
        &[
            "INSERT INTO dbo.outbox_requests (resource, fence) VALUES (N'r', 1)",
            "UPDATE dbo.outbox_requests SET path = '/v1/elsewhere'",
            "UPDATE dbo.outbox_requests SET destination = 'other'",
            "INSERT INTO dbo.outbox_admin_log (actor, action, reason) VALUES ('d', 'purge', 'x')",
            "DELETE FROM dbo.outbox_admin_log",
            "DELETE FROM dbo.outbox_leases",
        ],
    )
    .await;

    // The operator: no request of its own, no lease.
    let operator = db.login_as("outbox_operator").await;
    refused(
        &operator,
        "operator",
        &[
            "INSERT INTO dbo.outbox_requests (resource, fence) VALUES (N'r', 1)",
            "UPDATE dbo.outbox_requests SET path = '/v1/elsewhere'",
            "UPDATE dbo.outbox_leases SET fence = fence + 1",
            "DELETE FROM dbo.outbox_admin_log",
        ],
    )
    .await;
    assert_eq!(
        db.snapshot().await,
        before,
        "nothing refused changed anything"
    );

    // The dispatcher's statements with its role alone: a partition lease, a claim, a delivery
    // and a give-up, erasure and the retention purge.
    let as_dispatcher = store_as(&dispatcher).await;
    let one = Partition::new(0, 1).unwrap();
    let name = ResourceName::new(one.lease_resource()).unwrap();
    let held = as_dispatcher
        .lease_try_acquire(&name, Duration::from_secs(30))
        .await
        .expect("a partition lease as the dispatcher")
        .unwrap();
    let claimed = as_dispatcher
        .op_claim(&held, one, &[ClaimRoom::new("api", 10)], &[], 10, 1 << 20)
        .await
        .expect("claim as the dispatcher");
    assert_eq!(claimed.ops.len(), 2);
    let ends: Vec<Completion> = claimed
        .ops
        .iter()
        .zip([NextState::Delivered, NextState::Dead])
        .map(|(op, next)| Completion {
            seq: op.seq,
            op_id: op.op_id,
            attempt: 1,
            started_at: OffsetDateTime::now_utc(),
            outcome: if next == NextState::Delivered {
                AttemptOutcome::Delivered
            } else {
                AttemptOutcome::Failed
            },
            http_status: Some(if next == NextState::Delivered {
                200
            } else {
                400
            }),
            error: None,
            excerpt: None,
            next,
            trace_context: None,
        })
        .collect();
    assert_eq!(
        as_dispatcher.op_complete_batch(&held, &ends).await.unwrap(),
        [true, true]
    );
    assert_eq!(
        as_dispatcher
            .op_erase_finished(Duration::ZERO, None, 10)
            .await
            .expect("erase as the dispatcher"),
        1
    );
    as_dispatcher
        .op_purge_finished(Duration::from_secs(86_400), 10)
        .await
        .expect("purge as the dispatcher");
    as_dispatcher.lease_release(&held).await.unwrap();

    // The operator's: the content, and a replay logged.
    let as_operator = store_as(&operator).await;
    let dead = ends[1].seq;
    let content = as_operator.admin_op_content(dead).await.unwrap().unwrap();
    assert_eq!(content.body, SECRET.as_bytes());
    let change = Change {
        actor: "ana".into(),
        reason: "fixed".into(),
        force: false,
        dry_run: false,
    };
    let report = as_operator.admin_replay(&[dead], &change).await.unwrap();
    assert_eq!(report.changed, [dead]);
    assert!(db.admin_log().await.iter().any(|l| l.contains("replay")));
    owner.close().await;
}

fn statement(key: &str, body: &str) -> Operation {
    Operation::post("statements", "/v1/statements")
        .json(&serde_json::json!({ "body": body }))
        .idempotency_key(key)
        .build()
        .expect("an op")
}

/// Runs `sql` on `c` (the caller's transaction).
async fn on(c: &mut outbox_store::mssql::Client, sql: &str) {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_results()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Issue 37, item 1 on SQL Server: the Rust producer needs `outbox_producer` alone. Its store
/// finds that the user may not write the tables and calls the procedures instead (TryAcquire,
/// Renew, Release, EnqueueOps): leases, an enqueue, a duplicate with its state, a conflict, a
/// stale token (kept as a rejection by the procedure), a batch all or nothing, an enqueue in
/// the caller's transaction (committed, rolled back, and refused with the transaction still
/// usable), and older pending ops superseded. The rows are those the statements write: the
/// owner's store sees the same request as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn the_rust_producer_runs_with_the_producer_role_alone() {
    use outbox_producer::Error as E;
    let db = TestDb::mssql().await;
    let owner = db.store().await;
    // On SQL Server a user holding outbox_producer alone, its calls chosen by the store; on
    // Babelfish, which runs a procedure with its caller's rights, the owner with the
    // procedures chosen by hand and the helpers it cannot run replaced: the procedures' logic
    // and the Rust side are run, the rights are not.
    let (url, calls) = if db.babelfish() {
        db.babelfish_sql_api_stand_ins().await;
        db.part_not_run_on_babelfish(
            "the user holding outbox_producer alone",
            outbox_tests::babelfish::NO_OWNERSHIP_CHAINING,
        );
        (db.url().to_owned(), outbox_store::ProducerCalls::Functions)
    } else {
        let url = db.login_as("outbox_producer").await;
        refused(
            &url,
            "producer",
            &["INSERT INTO dbo.outbox_requests (resource, fence) VALUES (N'r', 1)"],
        )
        .await;
        (url, outbox_store::ProducerCalls::Auto)
    };
    let options = outbox_store::StoreOptions {
        producer_calls: calls,
        ..TestDb::options()
    };
    let outbox = outbox_producer::Outbox::connect_with(&url, options)
        .await
        .expect("connect as the producer");
    let (lease, first) =
        super::super::rust_producer::leases_and_keys(&outbox, &db.outbox().await, statement).await;

    // A batch: every op or none; a key twice in one batch is one op.
    let batch = outbox
        .enqueue_batch(
            &lease,
            &[
                statement("k-2", "a"),
                statement("k-3", "a"),
                statement("k-2", "a"),
            ],
        )
        .await
        .expect("batch");
    assert_eq!(batch.len(), 3);
    assert!(!batch[0].duplicate && !batch[1].duplicate && batch[2].duplicate);
    assert_eq!(batch[2].op_id, batch[0].op_id);
    let before = db.states().await;
    match outbox
        .enqueue_batch(
            &lease,
            &[statement("k-4", "a"), statement("k-2", "changed")],
        )
        .await
    {
        Err(E::IdempotencyConflict { existing_op_id }) => {
            assert_eq!(existing_op_id, batch[0].op_id)
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    match outbox
        .enqueue_batch(
            &lease,
            &[statement("k-4", "a"), statement("k-4", "changed")],
        )
        .await
    {
        Err(E::IdempotencyConflict { .. }) => {}
        other => panic!("expected a conflict within the batch, got {other:?}"),
    }
    assert_eq!(db.states().await, before, "a refused batch writes nothing");

    // The caller's transaction: committed, rolled back, and a refusal leaves it usable.
    let stale = outbox_producer::Lease {
        token: outbox_producer::FencingToken::new(lease.token.get() + 7),
        ..lease.clone()
    };
    let mut c = outbox_store::mssql::connect(&url)
        .await
        .expect("the worker's connection");
    on(&mut c, "BEGIN TRANSACTION").await;
    outbox
        .enqueue_in(&mut c, &lease, &statement("k-5", "a"))
        .await
        .expect("in the caller's transaction");
    match outbox
        .enqueue_in(&mut c, &stale, &statement("k-6", "a"))
        .await
    {
        Err(E::Stale { current_token }) => assert_eq!(current_token, lease.token),
        other => panic!("expected stale, got {other:?}"),
    }
    match outbox
        .enqueue_in(&mut c, &lease, &statement("k-1", "b"))
        .await
    {
        Err(E::IdempotencyConflict { existing_op_id }) => assert_eq!(existing_op_id, first.op_id),
        other => panic!("expected a conflict, got {other:?}"),
    }
    on(&mut c, "SELECT 1").await;
    on(&mut c, "COMMIT TRANSACTION").await;
    on(&mut c, "BEGIN TRANSACTION").await;
    outbox
        .enqueue_in(&mut c, &lease, &statement("k-7", "a"))
        .await
        .expect("in the caller's transaction");
    on(&mut c, "ROLLBACK TRANSACTION").await;

    // A stale enqueue outside a transaction, kept as a rejection by the procedure.
    match outbox.enqueue(&stale, &statement("k-8", "a")).await {
        Err(E::Stale { current_token }) => assert_eq!(current_token, lease.token),
        other => panic!("expected stale, got {other:?}"),
    }
    // An input the procedure refuses, named by its field: the SQL API's lease bounds
    // (outbox.Settings, 5 s at least by default) are narrower than these tests' store (1 s).
    match outbox
        .try_acquire("account:2", Duration::from_secs(2))
        .await
    {
        Err(E::Invalid(e)) => assert_eq!(e.field, "ttl", "{e}"),
        other => panic!("expected an invalid ttl, got {other:?}"),
    }

    // A newer owner supersedes the older one's pending ops.
    super::super::rust_producer::newer_owner_supersedes(&outbox, &lease).await;

    let states = db.states().await;
    let states: Vec<(&str, &str)> = states
        .iter()
        .map(|(k, s)| (k.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("k-1", "superseded"),
            ("k-2", "superseded"),
            ("k-3", "superseded"),
            ("k-5", "superseded"),
            ("k-9", "pending"),
        ]
    );
    let rejections = owner.rejection_list(10).await.expect("rejections");
    assert!(
        rejections.iter().any(|r| r.reason == "stale"
            && r.idempotency_key.as_deref() == Some("k-8")
            && r.stage == "enqueue"),
        "kept by the procedure: {rejections:?}"
    );
    owner.close().await;
}

/// `outbox.EnqueueOps` trusts no caller: a producer's user may call it with anything. Each
/// input the Rust builder would never send is refused with `THROW 51000` naming its field, and
/// nothing is written; a valid call with the same lease then goes in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn enqueue_ops_refuses_what_the_rust_builder_never_sends() {
    let db = TestDb::mssql().await;
    let owner = db.store().await;
    let url = if db.babelfish() {
        db.babelfish_sql_api_stand_ins().await;
        db.url().to_owned()
    } else {
        db.login_as("outbox_producer").await
    };
    // The longest lease these tests' stores allow: on a loaded Babelfish the refused calls
    // below (a login each) have taken longer than the usual minute.
    let held = db
        .outbox()
        .await
        .try_acquire("account:3", Duration::from_secs(300))
        .await
        .expect("acquire")
        .expect("free");
    let before = db.snapshot().await;
    let hash = "0x".to_owned() + &"ab".repeat(32);
    // One op as the Rust side sends it, with `changed` set over it.
    let op = |changed: serde_json::Value| {
        let mut o = serde_json::json!({
            "op_id": "0193b5a0-0000-7000-8000-000000000001", "destination": "api", "key": "k",
            "at": 1, "body_bytes": 0, "order_key": null, "partition": 3, "method": "POST",
            "path": "/v1/x", "headers": "[]", "content_type": null, "expire": false,
            "delay_ms": 0, "trace": null, "trace_state": null, "supersede": false
        });
        if let (Some(o), Some(changed)) = (o.as_object_mut(), changed.as_object()) {
            o.extend(changed.clone());
        }
        serde_json::json!([o]).to_string()
    };
    let call = |ops: String, bytes: &str, stage: &str| {
        format!(
            "EXEC outbox.EnqueueOps @Resource = N'account:3', @OwnerId = '{}', @Token = {}, \
             @Ops = N'{}', @Bytes = {bytes}, @Stage = '{stage}'",
            held.owner_id,
            held.token.get(),
            ops.replace('\'', "''")
        )
    };
    let none = || serde_json::json!({});
    let with = |field: &str, value: serde_json::Value| serde_json::json!({ field: value });
    let cases = [
        (call("not json".into(), &hash, "enqueue"), "invalid ops"),
        (call("[]".into(), &hash, "enqueue"), "invalid ops"),
        (call(op(none()), &hash, "sent"), "invalid stage"),
        (call(op(none()), "0x00", "enqueue"), "invalid body"),
        (
            call(op(with("body_bytes", 40.into())), &hash, "enqueue"),
            "invalid body",
        ),
        (
            call(op(with("partition", 5000.into())), &hash, "enqueue"),
            "invalid partition",
        ),
        (
            call(op(with("method", "post".into())), &hash, "enqueue"),
            "invalid method",
        ),
        (
            call(
                op(with("path", "//evil.example/x".into())),
                &hash,
                "enqueue",
            ),
            "invalid path",
        ),
        (
            call(op(with("op_id", serde_json::Value::Null)), &hash, "enqueue"),
            "invalid op_id",
        ),
        (
            call(
                op(with("delay_ms", serde_json::Value::Null)),
                &hash,
                "enqueue",
            ),
            "invalid op",
        ),
        (
            call(op(with("trace_state", "a=b".into())), &hash, "enqueue"),
            "invalid tracestate",
        ),
    ];
    let mut cases = cases.to_vec();
    if !db.part_not_run_on_babelfish(
        "a destination that is not a name",
        outbox_tests::babelfish::LIKE_CLASS_ENDING_IN_HYPHEN,
    ) {
        cases.push((
            call(
                op(with("destination", "http://evil".into())),
                &hash,
                "enqueue",
            ),
            "invalid destination",
        ));
    }
    for (sql, says) in &cases {
        let e = run_as(&url, sql)
            .await
            .expect_err(&format!("refused: {sql}"));
        assert!(e.contains(says), "{says}: {e}");
    }
    assert_eq!(db.snapshot().await, before, "nothing refused was written");
    run_as(&url, &call(op(none()), &hash, "enqueue"))
        .await
        .expect("a valid call goes in");
    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    owner.close().await;
}
