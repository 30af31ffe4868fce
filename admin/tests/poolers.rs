//! `outboxctl` through a real PgBouncer (issue 27), with nothing changed but the URL's host and
//! port (`dispatcher/tests/poolers.rs` runs the dispatcher the same way): the store sends no
//! startup options and no session-level `SET`, so the pooler lets it in and nothing of one
//! command's session reaches the next.
//!
//! Session mode is what runs here today; transaction mode also needs the store to keep no named
//! prepared statement across transactions, which is the next step of issue 27.

use outbox_tests::TestDb;
use outbox_tests::pgbouncer::{PgBouncer, PoolMode};

/// `outboxctl` commands one after another through the pooler, each on a connection PgBouncer
/// may have served to another client before: none fails on what an earlier one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_commands_run_one_after_another_through_pgbouncer_in_session_mode() {
    let db = TestDb::postgres().await;
    let pgbouncer = PgBouncer::start(db.url(), PoolMode::Session)
        .unwrap_or_else(|e| panic!("cannot start PgBouncer: {e}"));
    let url = pgbouncer.in_front_of(db.url());
    let ctl = env!("CARGO_BIN_EXE_outboxctl");
    let acquired = [
        "lease",
        "acquire",
        "--resource",
        "invoice:7",
        "--ttl",
        "60s",
    ];
    for args in [
        &["migrate"][..],
        &["status"],
        &acquired,
        &["lease", "list"],
        &["list"],
        &["status"],
    ] {
        let mut all = vec!["--database-url", url.as_str()];
        all.extend_from_slice(args);
        let out = tokio::process::Command::new(ctl)
            .args(&all)
            .output()
            .await
            .expect("run outboxctl");
        let ok = out.status.success();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            ok,
            "outboxctl {args:?}: {text}\nPgBouncer's log:\n{}",
            pgbouncer.log()
        );
    }
}
