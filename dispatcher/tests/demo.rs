//! `outbox-dispatcher demo` end to end: the real binary tells the seed's story on SQLite (no
//! set-up) and on PostgreSQL (`--database-url`), exits 0, and says each expectation held;
//! `--breaker` adds the circuit breaker's chapter, and the default demo does not show it.

use outbox_tests::TestDb;

async fn demo(args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
        .arg("demo")
        .args(args)
        .output()
        .await
        .expect("run the demo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn assert_told(ok: bool, text: &str) {
    assert!(ok, "{text}");
    for line in [
        "acquires statement:account-1842:2026-07",
        "with token 1 (lease 2s)",
        "A's lease expired",
        "with token 2\n",
        "received B's statement: Idempotency-Key statement-1842-2026-07",
        ", X-Fencing-Token 2",
        "refused as stale: token 2 is newer",
        "ok   the API received exactly one request for it",
        "PASS",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "no colour when stdout is not a terminal:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_tells_the_story_on_sqlite() {
    let (ok, text) = demo(&[]).await;
    assert_told(ok, &text);
    assert!(
        !text.contains("breaker"),
        "the default demo has no breaker chapter:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_the_breaker_open_probe_and_close() {
    let (ok, text) = demo(&["--breaker"]).await;
    assert_told(ok, &text);
    for line in [
        "open after 3 consecutive failures",
        "half-open: one probe sent, it failed",
        "closed by a healthy probe; all 5 postings delivered",
        "ok   no posting is dead",
        "ok   the breaker is closed",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_tells_the_story_on_postgres() {
    let db = TestDb::postgres().await;
    let (ok, text) = demo(&["--database-url", db.url()]).await;
    assert_told(ok, &text);
}
