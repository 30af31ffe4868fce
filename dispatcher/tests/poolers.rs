//! The dispatcher through a real PgBouncer (issue 27), with nothing changed but the URL's host
//! and port (`admin/tests/poolers.rs` runs `outboxctl` the same way): the store sends no startup options and no session-level `SET`, so the pooler lets it in and
//! nothing of one client's session reaches another.
//!
//! In transaction mode the store finds the pooler at connect, so every statement is unnamed and
//! runs in a transaction, and the dispatcher polls instead of LISTENing.

use outbox_tests::TestDb;
use outbox_tests::pgbouncer::{PgBouncer, PoolMode};

fn bouncer(db: &TestDb, mode: PoolMode) -> PgBouncer {
    PgBouncer::start(db.url(), mode).unwrap_or_else(|e| panic!("cannot start PgBouncer: {e}"))
}

async fn run(program: &str, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The seed's story (two workers, an expired lease, a stale enqueue refused, one delivery)
/// told by the real binary with its database behind PgBouncer.
async fn the_seed_story_runs_through(mode: PoolMode) {
    let db = TestDb::postgres().await;
    let pgbouncer = bouncer(&db, mode);
    let url = pgbouncer.in_front_of(db.url());
    let (ok, text) = run(
        env!("CARGO_BIN_EXE_outbox-dispatcher"),
        &["demo", "--database-url", &url],
    )
    .await;
    assert!(ok, "{text}\nPgBouncer's log:\n{}", pgbouncer.log());
    for line in [
        "refused as stale: token 2 is newer",
        "ok   the API received exactly one request for it",
        "PASS",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_story_runs_through_pgbouncer_in_session_mode() {
    the_seed_story_runs_through(PoolMode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_story_runs_through_pgbouncer_in_transaction_mode() {
    the_seed_story_runs_through(PoolMode::Transaction).await;
}
