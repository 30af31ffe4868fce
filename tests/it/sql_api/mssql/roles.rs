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

async fn store_as(url: &str) -> Store {
    Store::connect(url, TestDb::options())
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
