//! Least privilege (issue 37), end to end on PostgreSQL: a dispatcher whose login holds only
//! `outbox_dispatcher` delivers, retries, records and steps down; `outboxctl` with only
//! `outbox_operator` investigates, replays, pauses, cancels and purges, and with only
//! `outbox_viewer` reads everything but an op's content. What a role may not do is refused
//! with exit code 7 and changes nothing. The real `outboxctl` binary next to a real dispatcher
//! (in this process) delivering to a recording HTTP server on 127.0.0.1.

mod common;

use std::collections::HashMap;
use std::process::Output;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use outbox_producer::{Operation, Outbox};
use outbox_store::{MigrateError, Store};
use outbox_tests::{Receiver, Reply, TestDb, lease, wait_until};

use common::{Dispatcher, Web, ctl, text};

/// What a header value and a body of the ops hold: never to be seen by a viewer.
const SECRET_HEADER: &str = "header-value-4417";
const SECRET_BODY: &str = "body-text-9921";

/// What this process logged at warn and above (the in-process dispatcher's warnings: a
/// statement its role may not run is logged, not returned, by the loops that retry).
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The process's warnings, collected from the first call on.
fn logged() -> String {
    static LOGGED: OnceLock<Logged> = OnceLock::new();
    let lines = LOGGED.get_or_init(|| {
        let lines = Logged::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        lines
    });
    String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned()
}

/// A producer's lease: neither the viewer's nor the operator's to take.
const TAKE_A_LEASE: [&str; 6] = [
    "lease",
    "acquire",
    "--resource",
    "statement:9",
    "--ttl",
    "30s",
];

/// The command succeeded; its standard output.
fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command was refused for the login's rights: exit 7, saying where the roles are told.
fn denied(out: &Output) {
    assert_eq!(out.status.code(), Some(7), "{}", text(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("permission denied") && err.contains("docs/security.md"),
        "{err}"
    );
}

/// `outboxctl web` as the login of `url`: the status and body of each page of `paths`.
async fn console_pages(url: &str, paths: &[String]) -> Vec<(String, String)> {
    let web = Web::start(&format!("[database]\nurl = {url:?}\n"), "10s").await;
    let mut pages = Vec::new();
    for path in paths {
        let (status, page) = web.get(path).await;
        pages.push((status.to_string(), page));
    }
    web.stop();
    pages
}

/// A dispatcher in this process, connected as `url`'s login: it delivers `statements` ops to
/// `receiver` (a 400 is final, a 503 retried), with a retention of a second, so its
/// housekeeping purges what finished within seconds.
fn start_dispatcher(url: &str, receiver: &Receiver) -> Dispatcher {
    start_dispatcher_with(url, receiver, "retention = \"1s\"")
}

/// [`start_dispatcher`] with `housekeeping` (its retention and erasure settings).
fn start_dispatcher_with(url: &str, receiver: &Receiver, housekeeping: &str) -> Dispatcher {
    Dispatcher::start(&format!(
        "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\n\
             poll_interval = \"100ms\"\nlisten = \"\"\npartitions = 2\n{housekeeping}\n\
             [destinations.statements]\nbase_url = \"{}\"\ntimeout = \"2s\"\n\
             retry = {{ base = \"50ms\", cap = \"100ms\", max_attempts = 4 }}\n",
        receiver.url()
    ))
}

fn statement(key: &str) -> Operation {
    Operation::post("statements", format!("/v1/statements/{key}"))
        .header("X-Note", SECRET_HEADER)
        .json(&serde_json::json!({ "note": SECRET_BODY, "key": key }))
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

/// Until the op is in `state`, or gone: the dispatcher's retention purges delivered and
/// cancelled ops a second after they finish (dead ones stay).
async fn until_state(db: &TestDb, seq: i64, state: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("op {seq} {state}"),
        || async { [state, ""].contains(&state_of(db, seq).await.as_str()) },
    )
    .await;
}

/// Issue 37 items 1 and 2 for the outbox's own components: each runs with its role alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_component_runs_with_its_role_alone_and_is_refused_the_rest() {
    logged();
    let db = TestDb::postgres().await;
    let owner = db.outbox().await;
    let dispatcher_url = db.login_as("outbox_dispatcher").await;
    let operator_url = db.login_as("outbox_operator").await;
    let viewer_url = db.login_as("outbox_viewer").await;

    let receiver = Receiver::start().await;
    receiver.script("/v1/statements/dead", [Reply::status(400).body("locked")]);
    receiver.script(
        "/v1/statements/retried",
        [Reply::status(503), Reply::status(503)],
    );
    let l = lease(&owner, "statement:1842").await;
    let mut seqs = HashMap::new();
    for key in ["delivered", "retried", "dead"] {
        let done = owner.enqueue(&l, &statement(key)).await.expect("enqueue");
        seqs.insert(key, done.seq.to_string());
    }

    // The dispatcher: migrates with nothing pending, leads its partitions, delivers, retries,
    // records attempts and gives up on a 400, all as outbox_dispatcher.
    let dispatcher = start_dispatcher(&dispatcher_url, &receiver);
    until_state(&db, seqs["delivered"].parse().unwrap(), "delivered").await;
    until_state(&db, seqs["retried"].parse().unwrap(), "delivered").await;
    until_state(&db, seqs["dead"].parse().unwrap(), "dead").await;
    let attempts = db.attempts().await;
    assert_eq!(attempts.len(), 5, "{attempts:?}");

    // The viewer reads status, lists and shows ops: the header names and the body's size,
    // never a header value or the body.
    let status = ok(&ctl(&viewer_url, &["status", "--json"]).await);
    assert!(status.contains("\"partitions\""), "{status}");
    let listed = ok(&ctl(&viewer_url, &["list", "--json"]).await);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    let shown = ok(&ctl(&viewer_url, &["show", &seqs["dead"], "--json"]).await);
    let shown_json: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(shown_json["header_names"], serde_json::json!(["X-Note"]));
    assert!(shown_json["body_bytes"].as_i64().unwrap() > 0, "{shown}");
    let table = ok(&ctl(&viewer_url, &["show", &seqs["dead"]]).await);
    assert!(
        table.contains("X-Note") && table.contains("locked"),
        "{table}"
    );
    for out in [&listed, &shown, &table, &status] {
        assert!(
            !out.contains(SECRET_HEADER) && !out.contains(SECRET_BODY),
            "{out}"
        );
    }
    let dead = seqs["dead"].as_str();
    let delivered = seqs["delivered"].as_str();
    // The console, which is the viewer's: the overview and the dead op's page.
    let pages = console_pages(&viewer_url, &["/".to_owned(), format!("/ops/{dead}")]).await;
    for ((status, page), shows) in pages.iter().zip(["statements", "X-Note"]) {
        assert_eq!(status, "200", "{page}");
        assert!(page.contains(shows), "{page}");
        assert!(
            !page.contains(SECRET_HEADER) && !page.contains(SECRET_BODY),
            "{page}"
        );
    }
    let log_before = db.admin_log().await;
    for args in [
        vec!["show", dead, "--body"],
        vec!["replay", dead, "--reason", "viewer tries"],
        vec!["cancel", dead, "--reason", "viewer tries"],
        vec![
            "destination",
            "pause",
            "statements",
            "--reason",
            "viewer tries",
        ],
        vec!["purge", "--older-than", "0s", "--reason", "viewer tries"],
        TAKE_A_LEASE.to_vec(),
    ] {
        denied(&ctl(&viewer_url, &args).await);
    }
    assert_eq!(state_of(&db, dead.parse().unwrap()).await, "dead");
    assert_eq!(db.admin_log().await, log_before, "a viewer logs nothing");

    // The operator reads the content, replays, pauses and resumes, cancels, purges; each is
    // logged. It may not enqueue or take a lease.
    let content = ok(&ctl(&operator_url, &["show", dead, "--body"]).await);
    assert!(
        content.contains(SECRET_HEADER) && content.contains(SECRET_BODY),
        "{content}"
    );
    ok(&ctl(&operator_url, &["replay", dead, "--reason", "unlocked"]).await);
    until_state(&db, dead.parse().unwrap(), "delivered").await;
    ok(&ctl(
        &operator_url,
        &[
            "destination",
            "pause",
            "statements",
            "--reason",
            "maintenance",
        ],
    )
    .await);
    let held = owner
        .enqueue(&l, &statement("held"))
        .await
        .expect("enqueue")
        .seq;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(state_of(&db, held).await, "pending", "paused: not sent");
    ok(&ctl(
        &operator_url,
        &["cancel", &held.to_string(), "--reason", "not wanted"],
    )
    .await);
    ok(&ctl(
        &operator_url,
        &["destination", "resume", "statements", "--reason", "done"],
    )
    .await);
    ok(&ctl(
        &operator_url,
        &[
            "purge",
            "--older-than",
            "0s",
            "--state",
            "cancelled",
            "--reason",
            "tidy",
        ],
    )
    .await);
    until_state(&db, held, "").await;
    let log = db.admin_log().await;
    assert_eq!(log.len(), log_before.len() + 5, "{log:?}");
    for args in [
        TAKE_A_LEASE.to_vec(),
        vec![
            "enqueue",
            "--resource",
            "statement:1842",
            "--owner-id",
            &l.owner_id.to_string(),
            "--token",
            &l.token.to_string(),
            "--destination",
            "statements",
            "--method",
            "POST",
            "--path",
            "/v1/forged",
            "--idempotency-key",
            "forged",
        ],
    ] {
        denied(&ctl(&operator_url, &args).await);
    }
    // Retention, the dispatcher's: what was delivered is purged, the dead op's replay too.
    until_state(&db, delivered.parse().unwrap(), "").await;
    until_state(&db, dead.parse().unwrap(), "").await;

    // The dispatcher's login may not enqueue nor take a producer's lease.
    let as_dispatcher = Outbox::from_store(
        Store::connect(&dispatcher_url, TestDb::options())
            .await
            .expect("connect as the dispatcher"),
    );
    for e in [
        as_dispatcher
            .try_acquire("statement:1842", Duration::from_secs(30))
            .await
            .map(|_| ())
            .expect_err("no producer lease for a dispatcher"),
        as_dispatcher
            .enqueue(&l, &statement("forged"))
            .await
            .map(|_| ())
            .expect_err("no enqueue for a dispatcher"),
    ] {
        assert!(
            matches!(&e, outbox_producer::Error::Store(s)
                if s.kind() == outbox_store::StoreErrorKind::Denied),
            "{e}"
        );
    }

    // Stepping down gives its partition leases back and leaves the membership.
    dispatcher.stop().await;
    let leases = owner.list_leases().await.expect("leases");
    let partitions: Vec<_> = leases
        .iter()
        .filter(|l| l.resource.as_str().starts_with("dispatcher/"))
        .collect();
    assert_eq!(partitions.len(), 2, "{leases:?}");
    assert!(
        partitions.iter().all(|l| l.owner_id.is_none()),
        "{partitions:?}"
    );
    // Delivered 1, retried 3, dead 1 and once more after its replay; the cancelled op never.
    assert_eq!(receiver.received().len(), 6);
    // What it finished, written for the charts as it stopped (with its role alone), and read by
    // the viewer's console: 3 delivered, 2 attempts retried, 1 dead (before its replay).
    let charts = console_pages(&viewer_url, &["/charts".to_owned()]).await;
    let (status, page) = &charts[0];
    assert_eq!(status, "200", "{page}");
    for (what, n) in [("delivered", 3), ("retried", 2), ("dead", 1)] {
        assert!(
            page.contains(&format!("data-total=\"{what}\">{n}<")),
            "{what} {n}: {page}"
        );
    }
    let warnings = logged();
    assert!(!warnings.contains("denied"), "{warnings}");
}

/// Issue 37, item 4: a dispatcher with `erase_after` and its role alone clears what it
/// delivered (the content gone from the table, not only from the output), keeps what is dead,
/// and `outboxctl show` says when; the erased op cannot be replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_erases_delivered_content_with_its_role_alone() {
    logged();
    let db = TestDb::postgres().await;
    let owner = db.outbox().await;
    let dispatcher_url = db.login_as("outbox_dispatcher").await;
    let operator_url = db.login_as("outbox_operator").await;
    let receiver = Receiver::start().await;
    receiver.script("/v1/statements/dead", [Reply::status(400)]);
    let l = lease(&owner, "statement:2002").await;
    let mut seqs = HashMap::new();
    for key in ["delivered", "dead"] {
        let done = owner.enqueue(&l, &statement(key)).await.expect("enqueue");
        seqs.insert(key, done.seq.to_string());
    }
    let dispatcher = start_dispatcher_with(
        &dispatcher_url,
        &receiver,
        "retention = \"1h\"\nerase_after = \"1s\"",
    );
    let store = db.store().await;
    let delivered: i64 = seqs["delivered"].parse().unwrap();
    wait_until(
        Duration::from_secs(30),
        "the delivered op erased",
        || async {
            let op = store.admin_op_show(delivered).await.unwrap().unwrap();
            op.erased_at.is_some()
        },
    )
    .await;
    until_state(&db, seqs["dead"].parse().unwrap(), "dead").await;
    dispatcher.stop().await;
    // What was sent was the content; what is kept is not.
    let sent = receiver.received();
    assert!(
        sent.iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains(SECRET_BODY))
    );
    let rows = db.ops().await;
    let kept = |seq: &str| rows.iter().find(|o| o.seq.to_string() == seq).unwrap();
    assert!(kept(&seqs["delivered"]).body.is_empty());
    assert!(String::from_utf8_lossy(&kept(&seqs["dead"]).body).contains(SECRET_BODY));
    let shown = ok(&ctl(&operator_url, &["show", &seqs["delivered"], "--body"]).await);
    assert!(
        shown.contains("erased") && shown.contains("X-Note"),
        "{shown}"
    );
    assert!(
        !shown.contains(SECRET_HEADER) && !shown.contains(SECRET_BODY),
        "{shown}"
    );
    let replay = ctl(
        &operator_url,
        &["replay", &seqs["delivered"], "--force", "--reason", "again"],
    )
    .await;
    assert!(text(&replay).contains("erased"), "{}", text(&replay));
    assert_eq!(state_of(&db, delivered).await, "delivered");
    let warnings = logged();
    assert!(!warnings.contains("denied"), "{warnings}");
}

/// Issue 37, item 1: `outboxctl lease` and `outboxctl enqueue` need `outbox_producer` alone:
/// acquire, enqueue (a duplicate the second time), renew and release; a stale token is exit 3,
/// as with table rights. Nothing else is the producer's: `status` is refused (exit 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outboxctl_enqueues_with_the_producer_role_alone() {
    enqueues_with_the_producer_role_alone(TestDb::postgres().await).await;
}

/// The same on SQL Server, through the procedures (`outbox.TryAcquire`, `EnqueueOps`, …).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn outboxctl_enqueues_with_the_producer_role_alone_on_sql_server() {
    let db = TestDb::mssql().await;
    if db.skip_on_babelfish(outbox_tests::babelfish::NO_OWNERSHIP_CHAINING) {
        return;
    }
    enqueues_with_the_producer_role_alone(db).await;
}

async fn enqueues_with_the_producer_role_alone(db: TestDb) {
    db.store().await;
    let url = db.login_as("outbox_producer").await;
    let acquired = ok(&ctl(
        &url,
        &[
            "lease",
            "acquire",
            "--resource",
            "statement:7",
            "--ttl",
            "30s",
            "--json",
        ],
    )
    .await);
    let lease: serde_json::Value = serde_json::from_str(&acquired).expect("JSON");
    let owner = lease["owner_id"].as_str().expect("owner id").to_owned();
    let token = lease["token"].to_string();
    let enqueue = |token: &str, key: &str| {
        let args: Vec<String> = [
            "enqueue",
            "--resource",
            "statement:7",
            "--owner-id",
            &owner,
            "--token",
            token,
            "--destination",
            "statements",
            "--method",
            "POST",
            "--path",
            "/v1/statements",
            "--body",
            "{}",
            "--idempotency-key",
            key,
            "--json",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let url = url.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ctl(&url, &args).await
        }
    };
    let first: serde_json::Value =
        serde_json::from_str(&ok(&enqueue(&token, "st-7").await)).expect("JSON");
    let again: serde_json::Value =
        serde_json::from_str(&ok(&enqueue(&token, "st-7").await)).expect("JSON");
    assert_eq!(first["op_id"], again["op_id"]);
    assert_eq!(again["duplicate"], true, "{again}");
    let stale = enqueue("99", "st-8").await;
    assert_eq!(stale.status.code(), Some(3), "{}", text(&stale));
    let lease_args = [
        "--resource",
        "statement:7",
        "--owner-id",
        owner.as_str(),
        "--token",
        token.as_str(),
    ];
    ok(&ctl(
        &url,
        &[&["lease", "renew"][..], &lease_args, &["--ttl", "30s"]].concat(),
    )
    .await);
    ok(&ctl(&url, &[&["lease", "release"][..], &lease_args].concat()).await);
    denied(&ctl(&url, &["status"]).await);
    let states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
    assert_eq!(states, ["pending"]);
}

/// A login holding a component's role does not change the schema: with a migration pending,
/// its `migrate` says which one and who must apply it, and nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_s_login_does_not_apply_a_pending_migration() {
    let db = TestDb::postgres().await;
    db.store().await;
    db.execute("DELETE FROM outbox_schema_migrations WHERE version = 16")
        .await;
    let url = db.login_as("outbox_dispatcher").await;
    let store = Store::connect(&url, TestDb::options())
        .await
        .expect("connect");
    match store.migrate().await {
        Err(outbox_store::Error::Migrate(MigrateError::Denied { version, name, .. })) => {
            assert_eq!((version, name.as_str()), (16, "component_roles"));
        }
        other => panic!("expected a refusal naming migration 16, got {other:?}"),
    }
    let e = ctl(&url, &["migrate"]).await;
    assert_eq!(e.status.code(), Some(1), "{}", text(&e));
    assert!(
        text(&e).contains("run `outboxctl migrate` as the schema's owner"),
        "{}",
        text(&e)
    );
}
