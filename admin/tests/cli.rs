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
    assert_eq!(
        report["already_applied"],
        serde_json::json!(db.migrations())
    );
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

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        stderr(out)
    );
    serde_json::from_str(stdout(out).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// `--resource R --owner-id O --token T` from a lease printed by `lease acquire --json`.
fn lease_args(lease: &serde_json::Value) -> Vec<String> {
    vec![
        "--resource".into(),
        lease["resource"].as_str().unwrap().into(),
        "--owner-id".into(),
        lease["owner_id"].as_str().unwrap().into(),
        "--token".into(),
        lease["token"].to_string(),
    ]
}

/// Runs `outboxctl <verb…> <lease args> <rest…> --database-url URL` with 1 s leases allowed.
fn with_lease(db: &TestDb, verb: &[&str], lease: &serde_json::Value, rest: &[&str]) -> Output {
    let lease = lease_args(lease);
    let mut args: Vec<&str> = verb.to_vec();
    args.extend(lease.iter().map(String::as_str));
    args.extend(rest);
    args.extend(["--database-url", db.url()]);
    outboxctl(&args, &[("OUTBOX_LEASE_MIN_TTL", "1s")])
}

fn enqueue(db: &TestDb, lease: &serde_json::Value, body: &str) -> Output {
    let rest = [
        "--destination",
        "statements",
        "--path",
        "/v1/statements",
        "--header",
        "X-Job: statement-worker",
        "--body",
        body,
        "--idempotency-key",
        "statement-1842-2026-07",
        "--json",
    ];
    with_lease(db, &["enqueue"], lease, &rest)
}

/// The seed's story from the shell: A acquires, B takes over after expiry and enqueues, A's
/// enqueue exits 3, B's retry is a duplicate, a changed request exits 5.
async fn outboxctl_tells_the_seed_story(db: TestDb) {
    // Its first lease lives 1 s, across two outboxctl calls.
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    let env = [("OUTBOX_LEASE_MIN_TTL", "1s")];
    let url = db.url();
    let run = |args: &[&str]| outboxctl(&[args, &["--database-url", url]].concat(), &env);
    assert!(run(&["migrate"]).status.success());
    let resource = "statement:account-1842:2026-07";
    let a = json(&run(&[
        "lease",
        "acquire",
        "--resource",
        resource,
        "--ttl",
        "1s",
        "--json",
    ]));
    assert_eq!(a["token"], 1);
    let busy = run(&["lease", "acquire", "--resource", resource, "--ttl", "30s"]);
    assert_eq!(busy.status.code(), Some(6), "{}", stderr(&busy));

    let run = &run;
    let b = outbox_tests::wait_for(
        Duration::from_secs(20),
        "B acquires after A's lease expired",
        || async move {
            let out = run(&[
                "lease",
                "acquire",
                "--resource",
                resource,
                "--ttl",
                "30s",
                "--json",
            ]);
            out.status.success().then(|| json(&out))
        },
    )
    .await;
    assert_eq!(b["token"], 2);

    let accepted = json(&enqueue(&db, &b, r#"{"by":"B"}"#));
    assert_eq!(accepted["duplicate"], false);
    assert_eq!(accepted["state"], "pending");

    let stale = enqueue(&db, &a, r#"{"by":"A"}"#);
    assert_eq!(stale.status.code(), Some(3), "{}", stderr(&stale));
    assert!(stderr(&stale).contains("stale"), "{}", stderr(&stale));

    let again = json(&enqueue(&db, &b, r#"{"by":"B"}"#));
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["op_id"], accepted["op_id"]);

    let changed = enqueue(&db, &b, r#"{"by":"someone else"}"#);
    assert_eq!(changed.status.code(), Some(5), "{}", stderr(&changed));

    let renewed = json(&with_lease(
        &db,
        &["lease", "renew"],
        &b,
        &["--ttl", "60s", "--json"],
    ));
    assert_eq!(renewed["token"], 2);
    assert_eq!(
        with_lease(&db, &["lease", "renew"], &a, &["--ttl", "60s"])
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        with_lease(&db, &["lease", "release"], &a, &[])
            .status
            .code(),
        Some(3)
    );
    let release = with_lease(&db, &["lease", "release"], &b, &[]);
    assert!(release.status.success(), "{}", stderr(&release));

    let ops = db.ops().await;
    assert_eq!(ops.len(), 1);
    assert_eq!(
        (ops[0].fence, ops[0].body.as_slice()),
        (2, &br#"{"by":"B"}"#[..])
    );
    assert_eq!(ops[0].content_type.as_deref(), Some("application/json"));
    assert_eq!(
        ops[0].headers.replace(' ', ""),
        r#"[["X-Job","statement-worker"]]"#
    );
}

/// Issue 12, item 8: `dispatcher/<n>` leases are the dispatcher's. Acquiring, renewing,
/// releasing or enqueueing under one exits 2 and says why; nothing is written.
async fn dispatcher_partition_leases_exit_2_and_write_nothing(db: TestDb) {
    db.store().await; // migrated
    let before = db.snapshot().await;
    let lease = serde_json::json!({
        "resource": "dispatcher/0",
        "owner_id": "00000000-0000-4000-8000-000000000000",
        "token": 1,
    });
    let acquire = outboxctl(
        &[
            "lease",
            "acquire",
            "--resource",
            "dispatcher/0",
            "--ttl",
            "30s",
            "--database-url",
            db.url(),
        ],
        &[],
    );
    let calls = [
        ("lease acquire", acquire),
        (
            "lease renew",
            with_lease(&db, &["lease", "renew"], &lease, &["--ttl", "30s"]),
        ),
        (
            "lease release",
            with_lease(&db, &["lease", "release"], &lease, &[]),
        ),
        ("enqueue", enqueue(&db, &lease, "{}")),
    ];
    for (call, out) in calls {
        assert_eq!(out.status.code(), Some(2), "{call}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "dispatcher/0 is a dispatcher partition lease: only outbox-dispatcher takes those"
            ),
            "{call}: {}",
            stderr(&out)
        );
    }
    assert_eq!(db.snapshot().await, before, "nothing may be written");
}

/// `partitions show` before and after a dispatcher's count, `partitions set` with its dry
/// run, its unchanged case and its refusals (exit 2, nothing written), and `status` showing the
/// count in force.
async fn partitions_show_and_set_change_the_count_in_force_with_a_reason(db: TestDb) {
    let store = db.store().await;
    let url = db.url();
    let show = outboxctl(&["partitions", "show", "--database-url", url], &[]);
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(
        stdout(&show).contains("partition count in force: none yet"),
        "{}",
        stdout(&show)
    );
    store.partition_count_adopt(8).await.unwrap();
    let show = outboxctl(
        &["partitions", "show", "--json", "--database-url", url],
        &[],
    );
    let shown = json(&show);
    assert_eq!(shown["in_force"]["partitions"], 8);
    assert_eq!(shown["in_force"]["changed_by"], "dispatcher");

    let before = db.snapshot().await;
    let set = |extra: &[&str]| {
        let args = [&["partitions", "set", "--database-url", url][..], extra].concat();
        outboxctl(&args, &[("USER", "ops-oncall")])
    };
    let dry = set(&["16", "--reason", "three hosts", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("dry run: would change the partition count in force from 8 to 16"),
        "{}",
        stdout(&dry)
    );
    for (args, words) in [
        (
            &["0", "--reason", "why"][..],
            "partitions: must be 1..=1024, got 0",
        ),
        (
            &["1025", "--reason", "why"][..],
            "partitions: must be 1..=1024, got 1025",
        ),
        (&["16", "--reason", " "][..], "reason"),
        (&["16", "--reason", "bell\u{7}"][..], "reason"),
        (
            &["sixteen", "--reason", "why"][..],
            "invalid value 'sixteen'",
        ),
        (&["16"][..], "--reason"),
    ] {
        let out = set(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(words), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(db.snapshot().await, before, "nothing was written");

    let done = set(&["16", "--reason", "three dispatcher hosts from today"]);
    assert!(done.status.success(), "{}", stderr(&done));
    let text = stdout(&done);
    for words in [
        "partition count in force: 8 -> 16",
        "step down",
        "set dispatcher.partitions = 16",
    ] {
        assert!(text.contains(words), "{words:?} in {text}");
    }
    let now = store.partition_count().await.unwrap().unwrap();
    assert_eq!(
        (now.partitions, now.changed_by.as_str(), now.reason.as_str()),
        (16, "ops-oncall", "three dispatcher hosts from today")
    );
    assert_ne!(db.snapshot().await, before, "logged in outbox_admin_log");
    let again = set(&["16", "--reason", "again", "--json"]);
    assert_eq!(json(&again)["changed"], false);

    let status = outboxctl(&["status", "--database-url", url], &[]);
    assert!(
        stdout(&status).contains("partition count in force: 16 (set by ops-oncall"),
        "{}",
        stdout(&status)
    );
    let status = outboxctl(&["status", "--json", "--database-url", url], &[]);
    assert_eq!(json(&status)["partition_count"]["partitions"], 16);
}

conformance!(
    partitions_show_and_set_change_the_count_in_force_with_a_reason,
    dispatcher_partition_leases_exit_2_and_write_nothing,
    migrate_applies_once_then_reports_up_to_date,
    lease_list_shows_tokens_owners_and_state,
    outboxctl_tells_the_seed_story,
);

#[test]
fn enqueue_refuses_bad_input_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("x.db").display());
    let lease = [
        "--resource",
        "r",
        "--owner-id",
        "00000000-0000-4000-8000-000000000000",
        "--token",
        "1",
    ];
    let common = [&["enqueue", "--database-url", url.as_str()][..], &lease[..]].concat();
    let good = [
        ("--destination", "d"),
        ("--path", "/x"),
        ("--idempotency-key", "k"),
    ];
    let bad = [
        ("--destination", "https://evil"),
        ("--path", "/../x"),
        ("--header", "Host: evil"),
        ("--header", "no colon"),
        ("--method", "CONNECT"),
        ("--idempotency-key", "has space"),
        ("--traceparent", "00-nope-01"),
        // Without --traceparent it is refused too (clap's `requires`).
        ("--tracestate", "congo=t61rcWkgMzE"),
    ];
    for (flag, value) in bad {
        let mut args = common.clone();
        for (f, v) in good.iter().filter(|(f, _)| *f != flag) {
            args.extend([*f, *v]);
        }
        args.extend([flag, value]);
        let out = outboxctl(&args, &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {value}: {}",
            stderr(&out)
        );
    }
    let bad_owner = [
        "enqueue",
        "--database-url",
        &url,
        "--resource",
        "r",
        "--owner-id",
        "x",
        "--token",
        "1",
        "--destination",
        "d",
        "--path",
        "/x",
        "--idempotency-key",
        "k",
    ];
    let out = outboxctl(&bad_owner, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

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
fn an_unreachable_database_exits_8_unavailable_without_echoing_the_password() {
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
    // 8: the database is unavailable, the same command may be retried (issue 38).
    assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("outboxctl: postgres unavailable error: ")
            && stderr(&out).contains("retry"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
}

#[test]
fn sql_server_urls_are_checked_and_never_echoed() {
    let lease_list = |url: &str| outboxctl(&["lease", "list", "--database-url", url], &[]);

    // A mistyped ADO.NET key is refused by name before anything connects.
    let typo = lease_list("mssql://sa:hunter2@127.0.0.1:9/x?TrustServerCertifcate=true");
    assert_eq!(typo.status.code(), Some(2), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("TrustServerCertifcate"),
        "{}",
        stderr(&typo)
    );
    let in_query = lease_list("mssql://sa@127.0.0.1:9/x?Password=hunter2");
    assert_eq!(in_query.status.code(), Some(2), "{}", stderr(&in_query));

    // Nothing listens: unavailable, exit 8.
    let closed = lease_list("mssql://sa:hunter2@127.0.0.1:9/x?TrustServerCertificate=true");
    assert_eq!(closed.status.code(), Some(8), "{}", stderr(&closed));

    // Something answers, but not in TDS: an error, never a panic or a hang.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2).flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"\x04\x01\xff\xff garbage \x00\x1b[2J");
        }
    });
    let url = format!(
        "mssql://sa:hunter2@127.0.0.1:{port}/x?TrustServerCertificate=true&Connect%20Timeout=5"
    );
    let garbage = lease_list(&url);
    // The driver reports the broken stream as I/O: unavailable (8), as a dropped connection is.
    assert_eq!(garbage.status.code(), Some(8), "{}", stderr(&garbage));
    assert!(
        !stderr(&garbage).contains("panicked"),
        "{}",
        stderr(&garbage)
    );

    for out in [&typo, &in_query, &closed, &garbage] {
        assert!(!stderr(out).contains("hunter2"), "{}", stderr(out));
    }
}

/// Issue 39: `console hash-password` reads the password from standard input (one trailing
/// newline is not part of it), needs no database, and prints an argon2id PHC string that
/// verifies that password and no other; an empty password is refused.
#[test]
fn console_hash_password_reads_stdin_and_prints_a_hash_that_verifies() {
    use std::io::Write as _;
    use std::process::Stdio;

    use argon2::PasswordVerifier as _;

    let run = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_outboxctl"))
            .args(["console", "hash-password"])
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("OUTBOX_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run outboxctl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run("correct horse battery staple\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let hash = stdout(&out).trim().to_owned();
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
    assert!(
        !stdout(&out).contains("correct horse"),
        "the password is not printed"
    );
    let verify = |password: &str| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), hash.as_str())
            .is_ok()
    };
    assert!(verify("correct horse battery staple"));
    assert!(!verify("correct horse battery staple\n"));
    assert!(!verify("correct horse"));
    let again = run("correct horse battery staple\n");
    assert_ne!(stdout(&again).trim(), hash, "a new salt each time");

    let empty = run("\n");
    assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));
    assert!(
        stderr(&empty).contains("the password is empty"),
        "{}",
        stderr(&empty)
    );
}
