//! `outboxctl` inspecting and fixing ops, end to end on every backend: the real binary next to
//! a real dispatcher (in this process) delivering to a recording HTTP server on 127.0.0.1.
//! Checked: output, exit codes and the database afterwards — a dead op replayed and delivered,
//! every replay refusal, cancel meaning never sent, dry runs changing nothing, purge, list
//! filters and paging, rejections, tail, and replays racing a working dispatcher.

mod common;

use std::process::Output;
use std::time::Duration;

use outbox_producer::Operation;
use outbox_tests::{Kind, Receiver, Reply, TestDb, conformance, lease, wait_until};

use common::{Dispatcher, json, text};

/// Runs outboxctl against `db` with `args`.
async fn ctl(db: &TestDb, args: &[&str]) -> Output {
    common::ctl(db.url(), args).await
}

/// The JSON lines a successful list call printed.
fn lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", text(out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A dispatcher in this process delivering `statements` ops to `receiver`; a 400 is final, so
/// ops die at once.
fn start_dispatcher(db: &TestDb, receiver: &Receiver) -> Dispatcher {
    Dispatcher::start(&format!(
        "[database]\nurl = {:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\npoll_interval = \"100ms\"\nlisten = \"\"\n[destinations.statements]\nbase_url = \"{}\"\ntimeout = \"2s\"\nretry = {{ base = \"50ms\", cap = \"100ms\", max_attempts = 3 }}\nbreaker = {{ enabled = false }}\n",
        db.url(),
        receiver.url()
    ))
}

fn statement(key: &str) -> Operation {
    Operation::post("statements", "/v1/statements")
        .json(&serde_json::json!({"statement": key}))
        .idempotency_key(key)
        .unordered()
        .build()
        .unwrap()
}

async fn state_of(db: &TestDb, seq: i64) -> String {
    db.ops()
        .await
        .into_iter()
        .find(|o| o.seq == seq)
        .map(|o| o.state)
        .unwrap_or_default()
}

async fn until_state(db: &TestDb, seq: i64, state: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("op {seq} {state}"),
        || async { state_of(db, seq).await == state },
    )
    .await;
}

/// The transcript the issue asks for: status → list --state dead → show → replay → show.
async fn a_dead_op_is_investigated_replayed_and_delivered(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/v1/statements",
        [Reply::status(400).body("account 1842 is locked")],
    );
    let dispatcher = start_dispatcher(&db, &receiver);
    let lease = lease(&outbox, "statement:1842").await;
    let op = outbox
        .enqueue(&lease, &statement("statement-1842-2026-07"))
        .await
        .unwrap();
    until_state(&db, op.seq, "dead").await;

    let status = json(&ctl(&db, &["status", "--json"]).await);
    assert_eq!(status["dead_last_day"], 1, "{status}");
    assert!(
        status["counts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["state"] == "dead" && c["destination"] == "statements" && c["ops"] == 1),
        "{status}"
    );
    assert_eq!(status["partitions"][0]["held"], true, "{status}");
    let table = text(&ctl(&db, &["status"]).await);
    assert!(table.contains("dead in the last 24 h: 1"), "{table}");

    let dead = lines(&ctl(&db, &["list", "--state", "dead", "--json"]).await);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["seq"], op.seq);

    let shown = json(&ctl(&db, &["show", &op.op_id.to_string(), "--json"]).await);
    assert_eq!(shown["state"], "dead");
    assert_eq!(shown["attempt_history"][0]["http_status"], 400);
    assert_eq!(
        shown["attempt_history"][0]["response_excerpt"],
        "account 1842 is locked"
    );
    let table = text(&ctl(&db, &["show", &op.seq.to_string(), "--body"]).await);
    assert!(
        table.contains("statement-1842-2026-07") && table.contains("400"),
        "{table}"
    );

    let replay = ctl(
        &db,
        &[
            "replay",
            &op.seq.to_string(),
            "--reason",
            "account unlocked",
        ],
    )
    .await;
    assert!(replay.status.success(), "{}", text(&replay));
    assert!(text(&replay).contains("replayed 1 op"), "{}", text(&replay));
    until_state(&db, op.seq, "delivered").await;

    let shown = json(&ctl(&db, &["show", &op.seq.to_string(), "--json"]).await);
    assert_eq!(shown["state"], "delivered");
    assert_eq!(shown["attempts"], 2);
    assert_eq!(shown["retry_base_attempts"], 1);
    assert_eq!(shown["attempt_history"][1]["outcome"], "delivered");
    let keys: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").to_owned())
        .collect();
    assert_eq!(keys, ["statement-1842-2026-07", "statement-1842-2026-07"]);
    dispatcher.stop().await;
    assert_eq!(db.snapshot().await.last().unwrap(), "[1, 2, 0, 1]");
}

/// Replay refuses an op of a superseded token and a delivered op unless --force, an in-flight
/// op always, and changes nothing it refused.
async fn replay_refuses_superseded_delivered_and_in_flight_ops(db: TestDb) {
    let outbox = db.outbox().await;
    let old = lease(&outbox, "statement:1842").await;
    let stale = outbox.enqueue(&old, &statement("old-token")).await.unwrap();
    outbox.release(&old).await.unwrap();
    let newer = lease(&outbox, "statement:1842").await;
    let delivered = outbox
        .enqueue(&newer, &statement("delivered"))
        .await
        .unwrap();
    let flying = outbox.enqueue(&newer, &statement("flying")).await.unwrap();
    db.force_state(Some("old-token"), "dead", None, None).await;
    db.force_state(Some("delivered"), "delivered", None, None)
        .await;
    db.force_state(Some("flying"), "in_flight", None, Some(1))
        .await;

    for (seq, why) in [
        (stale.seq, "superseded"),
        (delivered.seq, "already delivered"),
        (flying.seq, "in flight"),
    ] {
        let out = ctl(&db, &["replay", &seq.to_string(), "--reason", "try"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(why), "{}", text(&out));
    }
    assert_eq!(state_of(&db, stale.seq).await, "dead");
    assert_eq!(state_of(&db, delivered.seq).await, "delivered");

    let forced = ctl(
        &db,
        &[
            "replay",
            &stale.seq.to_string(),
            &delivered.seq.to_string(),
            &flying.seq.to_string(),
            "--reason",
            "resend on purpose",
            "--force",
            "--json",
        ],
    )
    .await;
    assert_eq!(forced.status.code(), Some(1), "{}", text(&forced));
    let report: serde_json::Value = serde_json::from_slice(&forced.stdout).unwrap();
    assert_eq!(
        report["changed"],
        serde_json::json!([stale.seq, delivered.seq])
    );
    assert_eq!(report["refused"][0]["seq"], flying.seq);
    assert_eq!(state_of(&db, stale.seq).await, "pending");
    assert_eq!(state_of(&db, delivered.seq).await, "pending");
    assert_eq!(state_of(&db, flying.seq).await, "in_flight");

    let missing = ctl(&db, &["replay", "999999", "--reason", "typo"]).await;
    assert_eq!(missing.status.code(), Some(4), "{}", text(&missing));
    let no_reason = ctl(&db, &["replay", &stale.seq.to_string(), "--reason", " "]).await;
    assert_eq!(no_reason.status.code(), Some(2), "{}", text(&no_reason));
}

/// A cancelled pending op is never sent, even once a dispatcher runs; a cancelled op can be
/// replayed.
async fn a_cancelled_op_is_never_sent(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let lease = lease(&outbox, "statement:1842").await;
    let cancelled = outbox
        .enqueue(&lease, &statement("cancel-me"))
        .await
        .unwrap();
    let out = ctl(
        &db,
        &[
            "cancel",
            &cancelled.op_id.to_string(),
            "--reason",
            "account closed",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let dispatcher = start_dispatcher(&db, &receiver);
    let sent = outbox.enqueue(&lease, &statement("send-me")).await.unwrap();
    until_state(&db, sent.seq, "delivered").await;
    dispatcher.stop().await;
    let keys: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").to_owned())
        .collect();
    assert_eq!(keys, ["send-me"]);
    let ops = db.ops().await;
    assert_eq!(ops[0].state, "cancelled");
    assert_eq!(
        ops[0].last_error.as_deref(),
        Some("cancelled by ana: account closed")
    );
    // Cancel refuses what is not pending or dead.
    let again = ctl(&db, &["cancel", &sent.seq.to_string(), "--reason", "late"]).await;
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert_eq!(state_of(&db, sent.seq).await, "delivered");
}

/// --dry-run reports and changes nothing, logs nothing.
async fn dry_runs_change_nothing(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = lease(&outbox, "statement:1842").await;
    for key in ["a", "b", "c"] {
        outbox.enqueue(&lease, &statement(key)).await.unwrap();
    }
    db.force_state(Some("a"), "dead", Some("2020-01-01T00:00:00.000Z"), None)
        .await;
    let before = (db.snapshot().await, db.ops().await);
    let replay = ctl(
        &db,
        &["replay", "--state", "dead", "--reason", "r", "--dry-run"],
    )
    .await;
    assert!(
        text(&replay).contains("would have replayed 1 op"),
        "{}",
        text(&replay)
    );
    let cancel = ctl(
        &db,
        &[
            "cancel",
            "--state",
            "pending",
            "--reason",
            "r",
            "--dry-run",
            "--json",
        ],
    )
    .await;
    assert_eq!(json(&cancel)["changed"].as_array().unwrap().len(), 2);
    let purge = ctl(
        &db,
        &[
            "purge",
            "--older-than",
            "1d",
            "--state",
            "dead",
            "--dry-run",
            "--json",
        ],
    )
    .await;
    assert_eq!(json(&purge)["total"], 1);
    assert_eq!((db.snapshot().await, db.ops().await), before);
}

/// Purge deletes old finished ops with their attempts, keeps recent ones, refuses live states.
async fn purge_deletes_old_finished_ops_only(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = lease(&outbox, "statement:1842").await;
    for key in ["old", "recent", "live"] {
        outbox.enqueue(&lease, &statement(key)).await.unwrap();
    }
    db.force_state(
        Some("old"),
        "delivered",
        Some("2020-01-01T00:00:00.000Z"),
        None,
    )
    .await;
    db.force_state(
        Some("recent"),
        "delivered",
        Some("2999-01-01T00:00:00.000Z"),
        None,
    )
    .await;
    let refused = ctl(&db, &["purge", "--older-than", "1d", "--state", "pending"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let out = ctl(&db, &["purge", "--older-than", "1d"]).await;
    assert!(text(&out).contains("deleted 1 op"), "{}", text(&out));
    let keys: Vec<String> = db
        .ops()
        .await
        .into_iter()
        .map(|o| o.idempotency_key)
        .collect();
    assert_eq!(keys, ["recent", "live"]);
    assert_eq!(db.snapshot().await.last().unwrap(), "[2, 0, 0, 1]");
}

/// list filters by state, destination, resource and key, pages with --after, and says how to
/// go on.
async fn list_filters_and_pages(db: TestDb) {
    let outbox = db.outbox().await;
    let a = lease(&outbox, "statement:1").await;
    let b = lease(&outbox, "statement:2").await;
    let mut seqs = Vec::new();
    for i in 0..5 {
        let lease = if i % 2 == 0 { &a } else { &b };
        seqs.push(
            outbox
                .enqueue(lease, &statement(&format!("k{i}")))
                .await
                .unwrap()
                .seq,
        );
    }
    let page = lines(&ctl(&db, &["list", "--limit", "2", "--json"]).await);
    assert_eq!(
        page.iter()
            .map(|o| o["seq"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [seqs[4], seqs[3]]
    );
    let after = seqs[3].to_string();
    let next = lines(&ctl(&db, &["list", "--limit", "2", "--after", &after, "--json"]).await);
    assert_eq!(
        next.iter()
            .map(|o| o["seq"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [seqs[2], seqs[1]]
    );
    let by_resource = lines(&ctl(&db, &["list", "--resource", "statement:2", "--json"]).await);
    assert_eq!(by_resource.len(), 2);
    let by_key = lines(
        &ctl(
            &db,
            &[
                "list",
                "--key",
                "k3",
                "--destination",
                "statements",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(by_key[0]["seq"], seqs[3]);
    let key_anywhere = lines(&ctl(&db, &["list", "--key", "k3", "--json"]).await);
    assert_eq!(key_anywhere.len(), 1);
    let by_state = lines(&ctl(&db, &["list", "--state", "dead", "--json"]).await);
    assert!(by_state.is_empty());
    let recent = lines(
        &ctl(
            &db,
            &[
                "list",
                "--since",
                "1h",
                "--before",
                "2999-01-01T00:00:00Z",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(recent.len(), 5);
    let table = text(&ctl(&db, &["list", "--limit", "2"]).await);
    assert!(table.contains(&format!("--after {}", seqs[3])), "{table}");
    let bad = ctl(&db, &["list", "--state", "lost"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    let missing = ctl(
        &db,
        &["show", "--destination", "statements", "--key", "nope"],
    )
    .await;
    assert_eq!(missing.status.code(), Some(4), "{}", text(&missing));
}

/// rejections lists the stale enqueues of a resource.
async fn rejections_list_stale_enqueues(db: TestDb) {
    let outbox = db.outbox().await;
    let old = lease(&outbox, "statement:1842").await;
    outbox.release(&old).await.unwrap();
    let _newer = lease(&outbox, "statement:1842").await;
    assert!(outbox.enqueue(&old, &statement("late")).await.is_err());
    let rows = lines(
        &ctl(
            &db,
            &["rejections", "--resource", "statement:1842", "--json"],
        )
        .await,
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["reason"].as_str(), rows[0]["token"].as_i64()),
        (Some("stale"), Some(1))
    );
    let none = lines(&ctl(&db, &["rejections", "--resource", "other", "--json"]).await);
    assert!(none.is_empty());
}

/// --config reads the database from the dispatcher's config file, as the dispatcher does.
async fn the_dispatcher_config_names_the_database(db: TestDb) {
    db.outbox().await; // migrated
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dispatcher.toml");
    std::fs::write(&path, "[database]\nurl = \"${TEST_OUTBOX_URL}\"\n").unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["status", "--json", "--config", path.to_str().unwrap()])
        .env_remove("OUTBOX_DATABASE_URL")
        .env("TEST_OUTBOX_URL", db.url())
        .output()
        .await
        .unwrap();
    assert_eq!(json(&out)["due_now"], 0);
    let missing = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["status", "--config", "/nonexistent/dispatcher.toml"])
        .env_remove("OUTBOX_DATABASE_URL")
        .output()
        .await
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
}

/// tail prints attempts as the dispatcher records them.
async fn tail_follows_attempts(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let mut tail = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["tail", "--interval", "100ms"])
        .env("OUTBOX_DATABASE_URL", db.url())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let dispatcher = start_dispatcher(&db, &receiver);
    let lease = lease(&outbox, "statement:1842").await;
    let op = outbox.enqueue(&lease, &statement("tailed")).await.unwrap();
    let mut out = tokio::io::BufReader::new(tail.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line),
    )
    .await
    .expect("a line within 30 s")
    .unwrap();
    assert!(
        line.contains(&format!(
            "seq {} statements attempt 1 delivered 200",
            op.seq
        )),
        "{line}"
    );
    dispatcher.stop().await;
}

/// Replays racing a working dispatcher: each op is delivered once, attempts are numbered
/// without gaps or repeats, and no op ends anywhere but delivered.
async fn replays_racing_the_dispatcher_leave_each_op_in_one_state(db: TestDb) {
    const OPS: usize = 30;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script("/v1/statements", (0..OPS).map(|_| Reply::status(400)));
    let dispatcher = start_dispatcher(&db, &receiver);
    let lease = lease(&outbox, "statement:1842").await;
    for i in 0..OPS {
        outbox
            .enqueue(&lease, &statement(&format!("race-{i}")))
            .await
            .unwrap();
    }
    wait_until(Duration::from_secs(60), "every op dead", || async {
        db.ops().await.iter().all(|o| o.state == "dead")
    })
    .await;
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url().to_owned();
            tokio::spawn(async move {
                tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
                    .args(["replay", "--state", "dead", "--reason", "race", "--json"])
                    .env("OUTBOX_DATABASE_URL", url)
                    .env("USER", "ana")
                    .output()
                    .await
                    .expect("run outboxctl")
            })
        })
        .collect();
    for racer in racers {
        let out = racer.await.unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}", text(&out));
    }
    wait_until(Duration::from_secs(60), "every op delivered", || async {
        db.ops().await.iter().all(|o| o.state == "delivered")
    })
    .await;
    dispatcher.stop().await;
    let received = receiver.received();
    for i in 0..OPS {
        let key = format!("race-{i}");
        let n = received
            .iter()
            .filter(|r| r.header("idempotency-key") == key)
            .count();
        assert_eq!(n, 2, "{key}: one dead attempt and one delivery");
    }
    let mut attempts: Vec<(String, i32)> = db
        .attempts()
        .await
        .into_iter()
        .map(|a| (a.op_id, a.attempt))
        .collect();
    attempts.sort();
    attempts.dedup();
    assert_eq!(attempts.len(), OPS * 2);
    assert!(db.ops().await.iter().all(|o| o.attempts == 2));
}

/// Text planted with terminal controls: colour, clear screen, a window-title sequence, carriage
/// return, bell, and the one-byte C1 CSI.
const EVIL: &str = "\x1b[31mred\x1b[2J\x1b]0;owned\x07\r\u{9b}1m";

/// `format!` for `TestDb::execute`, which takes static SQL; tests may leak a few statements.
fn sql(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// Asserts a call succeeded and printed no raw control character but the newlines between
/// lines; returns what it printed.
fn printable_output(call: &str, out: &Output) -> String {
    assert!(out.status.success(), "{call}: {}", text(out));
    let printed = String::from_utf8(out.stdout.clone()).expect("UTF-8 output");
    let raw: Vec<char> = printed
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        raw.is_empty(),
        "{call} printed raw control characters {raw:?}:\n{}",
        printed.escape_debug()
    );
    assert!(
        printed.contains("\\x1b[31mred"),
        "{call} must show the escaped text:\n{printed}"
    );
    printed
}

/// The first line a `tail` call prints, then stops it.
async fn first_tail_line(db: &TestDb, args: &[&str]) -> String {
    let mut tail = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(args)
        .env("OUTBOX_DATABASE_URL", db.url())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(tail.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line),
    )
    .await
    .expect("a line within 30 s")
    .unwrap();
    line
}

/// Issue 12, item 9: what destinations and producers wrote cannot drive the operator's
/// terminal. show, list, tail and rejections print control characters escaped; --json keeps
/// the exact text. (Paths are not planted: migration 0003 makes the tables refuse them.)
async fn operators_terminals_never_receive_control_characters(db: TestDb) {
    let outbox = db.outbox().await;
    let lease = lease(&outbox, "statement:1842").await;
    let body = format!("{{\"a\": \"{EVIL}\",\n\t\"b\": 1}}\r\n");
    let op = Operation::post("statements", "/v1/statements")
        .body(body.clone(), "application/json")
        .idempotency_key("evil")
        .build()
        .unwrap();
    let op = outbox.enqueue(&lease, &op).await.unwrap();
    let headers = serde_json::json!([[format!("X-{EVIL}"), EVIL]]).to_string();
    db.execute(sql(format!(
        "UPDATE outbox_queue SET last_error = 'error{EVIL}' WHERE id = {}",
        op.seq
    )))
    .await;
    db.execute(sql(format!(
        "UPDATE outbox_requests SET idempotency_key = 'key{EVIL}', resource = 'res{EVIL}', \
         order_key = 'order{EVIL}', content_type = 'type/{EVIL}', headers = '{headers}' \
         WHERE idempotency_key = 'evil'"
    )))
    .await;
    db.execute(sql(format!(
        "INSERT INTO outbox_attempts (op_id, attempt, dispatcher_fence, outcome, http_status, \
         error, response_excerpt) SELECT op_id, 1, 1, 'failed', 500, 'attempt{EVIL}', \
         'excerpt{EVIL}' FROM outbox_ops WHERE id = {}",
        op.seq
    )))
    .await;
    db.execute(sql(format!(
        "INSERT INTO outbox_rejections (resource, owner_id, fence, current_fence, destination, \
         idempotency_key, stage, reason) VALUES ('res{EVIL}', \
         '00000000-0000-4000-8000-000000000000', 1, 2, 'dest{EVIL}', 'key{EVIL}', 'enqueue', \
         'stale')"
    )))
    .await;
    let seq = op.seq.to_string();

    let shown = printable_output("show", &ctl(&db, &["show", &seq, "--body"]).await);
    for part in [
        "key", "res", "error", "order", "type/", "X-", "attempt", "excerpt",
    ] {
        assert!(
            shown.contains(&format!("{part}\\x1b[31mred")),
            "{part}:\n{shown}"
        );
    }
    assert!(shown.contains("\\x09\"b\": 1}\\x0d"), "{shown}");
    let listed = printable_output("list", &ctl(&db, &["list"]).await);
    assert!(listed.contains("key\\x1b[31mred"), "{listed}");
    let rejected = printable_output("rejections", &ctl(&db, &["rejections"]).await);
    assert!(rejected.contains("dest\\x1b[31mred"), "{rejected}");
    let tailed = first_tail_line(&db, &["tail", "--from-start"]).await;
    let tailed = printable_output(
        "tail",
        &Output {
            status: std::process::ExitStatus::default(),
            stdout: tailed.into_bytes(),
            stderr: Vec::new(),
        },
    );
    assert!(tailed.contains("attempt\\x1b[31mred"), "{tailed}");

    let evil = |prefix: &str| serde_json::Value::from(format!("{prefix}{EVIL}"));
    // SQL Server's key and destination columns are varchar in a Latin1 collation (both are
    // ASCII, G10), whose code page 1252 has no U+009B: a planted one is stored as '?' (seen on
    // Babelfish). Everything else is kept exactly.
    let ascii_column = |prefix: &str| match db.kind() {
        Kind::Mssql => serde_json::Value::from(format!("{prefix}{}", EVIL.replace('\u{9b}', "?"))),
        _ => evil(prefix),
    };
    let shown = json(&ctl(&db, &["show", &seq, "--body", "--json"]).await);
    assert_eq!(shown["idempotency_key"], ascii_column("key"));
    for (field, prefix) in [
        ("resource", "res"),
        ("last_error", "error"),
        ("order_key", "order"),
        ("content_type", "type/"),
    ] {
        assert_eq!(shown[field], evil(prefix), "{field}");
    }
    assert_eq!(shown["headers"], serde_json::json!([[evil("X-"), EVIL]]));
    assert_eq!(shown["body"], serde_json::Value::from(body));
    assert_eq!(shown["attempt_history"][0]["error"], evil("attempt"));
    assert_eq!(
        shown["attempt_history"][0]["response_excerpt"],
        evil("excerpt")
    );
    let listed = lines(&ctl(&db, &["list", "--json"]).await);
    assert_eq!(
        (&listed[0]["idempotency_key"], &listed[0]["last_error"]),
        (&ascii_column("key"), &evil("error"))
    );
    let rejected = lines(&ctl(&db, &["rejections", "--json"]).await);
    assert_eq!(
        (
            &rejected[0]["resource"],
            &rejected[0]["destination"],
            &rejected[0]["idempotency_key"]
        ),
        (&evil("res"), &ascii_column("dest"), &ascii_column("key"))
    );
    let tailed = first_tail_line(&db, &["tail", "--from-start", "--json"]).await;
    let tailed: serde_json::Value = serde_json::from_str(&tailed).unwrap();
    assert_eq!(
        (&tailed["error"], &tailed["response_excerpt"]),
        (&evil("attempt"), &evil("excerpt"))
    );
}

#[test]
fn completions_print_a_script() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("outboxctl") && script.contains("replay"),
        "{script}"
    );
}

/// A destination paused from outboxctl while a dispatcher runs: its ops wait, pending, and are
/// delivered once it is resumed; `destination list` shows who paused it and why, and both
/// changes are in the admin log.
async fn a_destination_paused_from_outboxctl_waits_until_resumed(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let dispatcher = start_dispatcher(&db, &receiver);
    let pause = ctl(
        &db,
        &[
            "destination",
            "pause",
            "statements",
            "--reason",
            "vendor maintenance (CHG-12)",
        ],
    )
    .await;
    assert!(pause.status.success(), "{}", text(&pause));
    assert!(
        text(&pause).contains("closed -> paused"),
        "{}",
        text(&pause)
    );
    let again = ctl(
        &db,
        &[
            "destination",
            "pause",
            "statements",
            "--reason",
            "r",
            "--json",
        ],
    )
    .await;
    assert_eq!(json(&again)["changed"], false, "already paused");

    let lease = lease(&outbox, "statement:1842").await;
    let sent = outbox
        .enqueue(&lease, &statement("paused-1"))
        .await
        .unwrap();
    // Well past the dispatchers' view refresh (the poll interval): still pending, nothing sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state_of(&db, sent.seq).await, "pending");
    assert!(receiver.received().is_empty());
    let listed = json(&ctl(&db, &["destination", "list", "--json"]).await);
    let row = &listed.as_array().unwrap()[0];
    assert_eq!(
        (row["destination"].as_str(), row["state"].as_str()),
        (Some("statements"), Some("paused"))
    );
    assert_eq!(row["pending"], 1);
    assert_eq!(row["health"]["paused"]["by"], "ana");
    assert_eq!(
        row["health"]["paused"]["reason"],
        "vendor maintenance (CHG-12)"
    );
    let table = text(&ctl(&db, &["destination", "list"]).await);
    assert!(
        table.contains("paused") && table.contains("vendor maintenance"),
        "{table}"
    );

    let resume = ctl(
        &db,
        &[
            "destination",
            "resume",
            "statements",
            "--reason",
            "vendor confirmed the fix",
            "--actor",
            "bo",
        ],
    )
    .await;
    assert!(
        text(&resume).contains("paused -> closed"),
        "{}",
        text(&resume)
    );
    until_state(&db, sent.seq, "delivered").await;
    dispatcher.stop().await;
    let log = db.admin_log().await;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log[0].starts_with("ana|pause|vendor maintenance (CHG-12)|"),
        "{log:?}"
    );
    assert!(
        log[1].starts_with("bo|resume|vendor confirmed the fix|"),
        "{log:?}"
    );
    let details: serde_json::Value =
        serde_json::from_str(log[1].splitn(4, '|').nth(3).unwrap()).unwrap();
    assert_eq!(
        details,
        serde_json::json!({"destination": "statements", "before": "paused", "after": "closed"})
    );
    let bad = ctl(
        &db,
        &["destination", "pause", "https://evil", "--reason", "r"],
    )
    .await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

conformance!(
    a_destination_paused_from_outboxctl_waits_until_resumed,
    a_dead_op_is_investigated_replayed_and_delivered,
    replay_refuses_superseded_delivered_and_in_flight_ops,
    a_cancelled_op_is_never_sent,
    dry_runs_change_nothing,
    purge_deletes_old_finished_ops_only,
    list_filters_and_pages,
    rejections_list_stale_enqueues,
    the_dispatcher_config_names_the_database,
    tail_follows_attempts,
    replays_racing_the_dispatcher_leave_each_op_in_one_state,
    operators_terminals_never_receive_control_characters,
);
