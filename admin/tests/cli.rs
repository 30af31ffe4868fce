//! `outboxctl` end to end: the real binary against real databases, checking output, exit
//! codes and what the database holds afterwards. Lives here because only this crate's tests
//! can see `CARGO_BIN_EXE_outboxctl`; the harness comes from `outbox-tests`.

use std::process::{Command, Output};
use std::time::Duration;

use outbox_store::ResourceName;
use outbox_tests::{TestDb, conformance};

fn outboxctl(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outboxctl"));
    cmd.args(args).env_remove("OUTBOX_DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run outboxctl")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn migrate_applies_once_then_reports_up_to_date(db: TestDb) {
    let first = outboxctl(&["migrate", "--database-url", db.url()], &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).contains("applied 0001_init"),
        "{}",
        stdout(&first)
    );

    let again = outboxctl(&["migrate", "--json"], &[("OUTBOX_DATABASE_URL", db.url())]);
    assert!(again.status.success(), "{}", stderr(&again));
    let report: serde_json::Value = serde_json::from_str(stdout(&again).trim()).unwrap();
    assert_eq!(report["applied"], serde_json::json!([]));
    assert_eq!(report["already_applied"], serde_json::json!(["0001_init"]));
}

async fn lease_list_shows_tokens_owners_and_state(db: TestDb) {
    let store = db.store().await;
    let held = ResourceName::new("statement:account-1842:2026-07").unwrap();
    let lease = store
        .lease_try_acquire(&held, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let freed = ResourceName::new("released-one").unwrap();
    let other = store
        .lease_try_acquire(&freed, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert!(store.lease_release(&other).await.unwrap());

    let out = outboxctl(
        &["lease", "list", "--database-url", db.url(), "--json"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "one JSON object per line");
    let row = rows
        .iter()
        .find(|r| r["resource"] == held.as_str())
        .unwrap();
    assert_eq!(row["token"], lease.token.get());
    assert_eq!(row["owner_id"], lease.owner_id.to_string());
    assert_eq!(row["held"], true);
    let row = rows
        .iter()
        .find(|r| r["resource"] == "released-one")
        .unwrap();
    assert_eq!(
        (row["held"].clone(), row["owner_id"].clone()),
        (false.into(), serde_json::Value::Null)
    );

    let table = outboxctl(&["lease", "list", "--database-url", db.url()], &[]);
    let text = stdout(&table);
    assert!(
        text.contains("statement:account-1842:2026-07") && text.contains("held"),
        "{text}"
    );
    assert!(text.contains("free") && text.contains("2 leases"), "{text}");
}

conformance!(
    migrate_applies_once_then_reports_up_to_date,
    lease_list_shows_tokens_owners_and_state
);

#[test]
fn sqlite_file_is_created_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let out = outboxctl(
        &[
            "migrate",
            "--database-url",
            &format!("sqlite://{}", path.display()),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(path.exists());
}

#[test]
fn missing_or_malformed_database_urls_exit_2_without_echoing_secrets() {
    let none = outboxctl(&["lease", "list"], &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(
        stderr(&none).contains("--database-url"),
        "{}",
        stderr(&none)
    );

    let bad = outboxctl(
        &[
            "lease",
            "list",
            "--database-url",
            "mysql://admin:hunter2@db/x",
        ],
        &[],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(!stderr(&bad).contains("hunter2"), "{}", stderr(&bad));

    let memory = outboxctl(&["migrate", "--database-url", "sqlite::memory:"], &[]);
    assert_eq!(memory.status.code(), Some(2), "{}", stderr(&memory));
}

#[test]
fn bad_lease_bounds_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("x.db").display());
    let unparsable = outboxctl(
        &["lease", "list", "--database-url", &url],
        &[("OUTBOX_LEASE_MIN_TTL", "soon")],
    );
    assert_eq!(unparsable.status.code(), Some(2), "{}", stderr(&unparsable));
    let inverted = outboxctl(
        &[
            "lease",
            "list",
            "--database-url",
            &url,
            "--lease-min-ttl",
            "10m",
            "--lease-max-ttl",
            "1m",
        ],
        &[],
    );
    assert_eq!(inverted.status.code(), Some(2), "{}", stderr(&inverted));
    assert!(
        stderr(&inverted).contains("lease_min_ttl"),
        "{}",
        stderr(&inverted)
    );
}

#[test]
fn an_unreachable_database_exits_1_without_echoing_the_password() {
    // Port 9 on loopback: nothing listens there.
    let out = outboxctl(
        &[
            "lease",
            "list",
            "--database-url",
            "postgres://u:hunter2@127.0.0.1:9/x",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}
