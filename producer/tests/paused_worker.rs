//! The seed's failure with real processes: worker A is stopped with SIGSTOP after acquiring,
//! its lease expires, worker B takes over and records the statement; A is resumed with SIGCONT
//! and its enqueue is refused as stale. Uses the `statement_worker` example, which
//! `cargo test -p outbox-producer` builds next to this test.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_tests::{TestDb, conformance, signal, wait_until};

fn worker_exe() -> PathBuf {
    let deps = std::env::current_exe().expect("test exe");
    let exe = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples/statement_worker");
    assert!(
        exe.exists(),
        "{} is missing: run `cargo test -p outbox-producer` (it builds the examples)",
        exe.display()
    );
    exe
}

fn worker(url: &str, ttl: &str, work: &str, extra: &[&str]) -> Child {
    Command::new(worker_exe())
        .args(["--database-url", url, "--ttl", ttl, "--work", work])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start statement_worker")
}

/// Kills a worker if the test fails while it is stopped, so no stopped process outlives it.
struct KillOnPanic(u32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

fn events(output: &[u8]) -> Vec<serde_json::Value> {
    output
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// Starts worker A, stops it right after it acquired token 1, waits for its lease to expire,
/// runs worker B to completion (token 2, accepted), resumes A and returns A's exit and events.
async fn pause_a_while_b_takes_over(
    db: &TestDb,
    a_work: &str,
    a_extra: &[&str],
) -> (Option<i32>, Vec<serde_json::Value>) {
    let outbox = db.outbox().await;
    let mut a = worker(db.url(), "1s", a_work, a_extra);
    let _guard = KillOnPanic(a.id());
    let mut first = String::new();
    BufReader::new(a.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let acquired: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (acquired["event"].as_str(), acquired["token"].as_i64()),
        (Some("acquired"), Some(1)),
        "{first}"
    );

    signal(&a, "-STOP");
    let outbox_ref = &outbox;
    wait_until(
        Duration::from_secs(20),
        "A's lease expired while A is stopped",
        || async move { !outbox_ref.list_leases().await.unwrap()[0].held },
    )
    .await;
    let b = worker(db.url(), "5s", "100ms", &[])
        .wait_with_output()
        .unwrap();
    assert!(b.status.success());
    let b = events(&b.stdout);
    assert_eq!(b[1]["result"]["outcome"], "accepted", "{b:?}");

    signal(&a, "-CONT");
    let a = a.wait_with_output().unwrap();
    (a.status.code(), events(&a.stdout))
}

/// A worker that does not watch its keeper (or finished its work during the pause) reaches
/// the fenced enqueue after resuming, and is refused there.
async fn a_paused_worker_resumes_and_is_refused(db: TestDb) {
    let outbox = db.outbox().await;
    let (code, a) = pause_a_while_b_takes_over(&db, "300ms", &["--uncooperative"]).await;
    assert_eq!(code, Some(3), "A exits with 3: stale");
    assert_eq!(a[0]["event"], "enqueue", "{a:?}");
    assert_eq!(
        (
            a[0]["result"]["outcome"].as_str(),
            a[0]["result"]["current_token"].as_i64()
        ),
        (Some("stale"), Some(2))
    );

    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].fence, 2, "only B's statement is in the outbox");
    let rejections = outbox.store().rejection_list(10).await.unwrap();
    assert_eq!((rejections.len(), rejections[0].token.get()), (1, 1));
}

/// A cooperative worker resumed mid-work hears from its keeper that the lease is gone and
/// stops before wasting more work; nothing of its own is written.
async fn a_paused_cooperative_worker_stops_when_its_lease_is_lost(db: TestDb) {
    let (code, a) = pause_a_while_b_takes_over(&db, "10s", &[]).await;
    assert_eq!(code, Some(3));
    assert_eq!(a[0]["event"], "lost", "{a:?}");
    let ops = db.ops().await;
    assert_eq!((ops.len(), ops[0].fence), (1, 2));
}

conformance!(
    a_paused_worker_resumes_and_is_refused,
    a_paused_cooperative_worker_stops_when_its_lease_is_lost
);
