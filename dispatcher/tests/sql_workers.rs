//! Issue 15: the seed's statement worker written in Python (psycopg 3, `examples/python`) and in
//! Node.js (node-postgres, `examples/node`), real programs over PostgreSQL's `outbox.*`
//! functions, each case run for both, with the real dispatcher delivering to a recording
//! destination. The interpreters come from `ops/test.sh` (`OUTBOX_EXAMPLES_PYTHON`,
//! `OUTBOX_EXAMPLES_NODE`); without them every test fails saying how to set them up.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use outbox_tests::{Receiver, TestDb, wait_until};
use sqlx::{Connection, PgConnection};

/// What to do when an interpreter or the examples' dependencies are missing.
const SET_UP: &str = "the SQL worker tests run examples/python and examples/node: run \
`bash ops/test.sh`, which creates the virtualenv target/examples-venv \
(`pip install -r examples/python/requirements.txt`) and runs `npm ci --prefix examples/node`, \
or do those two steps yourself and set OUTBOX_EXAMPLES_PYTHON=<venv>/bin/python (default \
target/examples-venv/bin/python) and OUTBOX_EXAMPLES_NODE=<node 20> (default node)";

/// How long one worker run may take before the test fails (the slowest waits 1 s of lease).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The statement every test generates.
const ACCOUNT: &str = "1842";
const PERIOD: &str = "2026-07";
const RESOURCE: &str = "statement:account-1842:2026-07";

/// The workspace root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
}

/// An interpreter from `var`, or `default` (relative to the workspace root when it has a /).
fn interpreter(var: &str, default: &str) -> PathBuf {
    let value = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    if value.components().count() > 1 && value.is_relative() {
        root().join(value)
    } else {
        value
    }
}

/// Runs `program args` in `dir`, to prove the examples can start: the error's line if not.
fn check_runs(program: &Path, args: &[&str], dir: &Path, what: &str) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = stderr
        .lines()
        .find(|l| l.contains("Error"))
        .or_else(|| stderr.lines().next())
        .unwrap_or("no message");
    Err(format!(
        "{} cannot {what}: {}",
        program.display(),
        error.trim()
    ))
}

/// One of the two example programs.
#[derive(Debug, Clone)]
struct Worker {
    program: PathBuf,
    script: PathBuf,
}

impl Worker {
    /// `examples/python/statement_worker.py` under the virtualenv's Python.
    fn python() -> Worker {
        static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let program = CHECKED.get_or_init(|| {
            let python = interpreter("OUTBOX_EXAMPLES_PYTHON", "target/examples-venv/bin/python");
            check_runs(&python, &["-c", "import psycopg"], root(), "import psycopg")?;
            Ok(python)
        });
        Worker::checked(program, "examples/python/statement_worker.py")
    }

    /// `examples/node/statement_worker.js` with the `pg` of its `node_modules`.
    fn node() -> Worker {
        static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let program = CHECKED.get_or_init(|| {
            let node = interpreter("OUTBOX_EXAMPLES_NODE", "node");
            let dir = root().join("examples/node");
            check_runs(&node, &["-e", "require('pg')"], &dir, "load pg")?;
            Ok(node)
        });
        Worker::checked(program, "examples/node/statement_worker.js")
    }

    fn checked(program: &Result<PathBuf, String>, script: &str) -> Worker {
        match program {
            Ok(program) => Worker {
                program: program.clone(),
                script: root().join(script),
            },
            Err(e) => panic!("{e}\n{SET_UP}"),
        }
    }

    /// Runs the worker with `args` against `url`; panics if it does not end in time.
    async fn run_on(&self, url: &str, args: &[&str]) -> Outcome {
        let run = tokio::process::Command::new(&self.program)
            .arg(&self.script)
            .args(args)
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(RUN_TIMEOUT, run)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} {args:?} ran past {RUN_TIMEOUT:?}",
                    self.script.display()
                )
            })
            .expect("start the worker");
        Outcome {
            args: args.join(" "),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the worker on `db` for the test's statement, with `args` after the command.
    async fn run(&self, db: &TestDb, command: &str, args: &[&str]) -> Outcome {
        let mut all = vec![command, "--account", ACCOUNT, "--period", PERIOD];
        all.extend_from_slice(args);
        self.run_on(db.url(), &all).await
    }
}

/// What one run printed and how it ended.
#[derive(Debug)]
struct Outcome {
    args: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` exited {:?}\n--- stdout\n{}--- stderr\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }
}

impl Outcome {
    /// Asserts the exit code.
    fn exits(&self, code: i32) -> &Outcome {
        assert_eq!(self.code, Some(code), "{self}");
        self
    }

    /// The stdout line that starts with `start`.
    fn line(&self, start: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in {self}"))
    }

    /// Asserts that lines starting with `starts` appear in this order.
    fn in_order(&self, starts: &[&str]) -> &Outcome {
        let lines: Vec<&str> = self.stdout.lines().collect();
        let mut from = 0;
        for start in starts {
            let at = lines[from..]
                .iter()
                .position(|l| l.starts_with(start))
                .unwrap_or_else(|| {
                    panic!("no line starting {start:?} after line {from} in {self}")
                });
            from += at + 1;
        }
        self
    }

    /// The token of the lease acquired on the line starting with `start`.
    fn token(&self, start: &str) -> i64 {
        word_after(self.line(start), "token")
            .parse()
            .unwrap_or_else(|e| panic!("token in {self}: {e}"))
    }

    /// The op id, sequence and duplicate flag of the `enqueued op` line.
    fn enqueued(&self) -> (String, i64, bool) {
        let line = self.line("enqueued op ");
        let seq = word_after(line, "seq").parse().expect("seq");
        let duplicate = if line.ends_with(" duplicate=true") {
            true
        } else if line.ends_with(" duplicate=false") {
            false
        } else {
            panic!("no duplicate= at the end of {line:?}")
        };
        (word_after(line, "op").to_owned(), seq, duplicate)
    }
}

/// The word after `key` in `line`.
fn word_after<'a>(line: &'a str, key: &str) -> &'a str {
    let mut words = line.split_whitespace();
    words.find(|w| *w == key);
    words
        .next()
        .unwrap_or_else(|| panic!("no word after {key:?} in {line:?}"))
}

/// A fresh PostgreSQL database with the outbox migrated (migration 0004 is the SQL API).
async fn migrated() -> TestDb {
    let db = TestDb::postgres().await;
    db.store().await;
    db
}

/// The examples' business rows: (account, period, content, last accepted fence).
async fn statements(db: &TestDb) -> Vec<(String, String, Vec<u8>, i64)> {
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    sqlx::query_as(
        "SELECT account, period, content, last_accepted_fence FROM account_statements \
         ORDER BY account, period",
    )
    .fetch_all(&mut c)
    .await
    .expect("account_statements")
}

/// The kept rejections: (resource, token, current token, reason).
async fn rejections(db: &TestDb) -> Vec<(String, i64, Option<i64>, String)> {
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    sqlx::query_as(
        "SELECT resource, fence, current_fence, reason FROM outbox_rejections ORDER BY id",
    )
    .fetch_all(&mut c)
    .await
    .expect("outbox_rejections")
}

/// Rows of the business table, the ops and the rejections: what a refused call must not change.
async fn counts(db: &TestDb) -> (usize, usize, usize) {
    (
        statements(db).await.len(),
        db.ops().await.len(),
        rejections(db).await.len(),
    )
}

/// The real `outbox-dispatcher` on `db`, destination `statements` at `receiver`; killed if the
/// test ends without stopping it.
struct Dispatcher {
    child: Child,
    _config: tempfile::NamedTempFile,
}

impl Dispatcher {
    fn start(db: &TestDb, receiver: &Receiver) -> Dispatcher {
        Dispatcher::start_with(db, receiver, "")
    }

    /// [`Dispatcher::start`] with `more` config (an `[encryption]` table).
    fn start_with(db: &TestDb, receiver: &Receiver, more: &str) -> Dispatcher {
        let text = format!(
            "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\n\
             poll_interval = \"100ms\"\nlisten = \"\"\nshutdown_grace = \"5s\"\n{more}\n\
             [destinations.statements]\nbase_url = \"{base}\"\ntimeout = \"2s\"\n",
            url = db.url(),
            base = receiver.url()
        );
        let config = tempfile::NamedTempFile::new().expect("config file");
        std::fs::write(config.path(), text).expect("write config");
        let child = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
            .arg("--config")
            .arg(config.path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start outbox-dispatcher");
        Dispatcher {
            child,
            _config: config,
        }
    }

    /// SIGTERM and wait for a clean exit.
    fn stop(mut self) {
        outbox_tests::signal(&self.child, "-TERM");
        let status = self.child.wait().expect("wait for the dispatcher");
        assert!(status.success(), "dispatcher exited with {status}");
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the op `op_id` is delivered.
async fn delivered(db: &TestDb, op_id: &str) {
    wait_until(Duration::from_secs(60), "the op is delivered", || async {
        db.ops()
            .await
            .iter()
            .any(|o| o.op_id == op_id && o.state == "delivered")
    })
    .await;
}

/// A login of the test cluster (a unique name: roles are the cluster's) holding only the role
/// `outbox_producer` and the worker's rights on its business table, which is created here as
/// the examples create it; the URL of `db` as that login.
async fn producer_login(db: &TestDb) -> String {
    let name = format!("worker_{}", uuid::Uuid::new_v4().simple());
    let mut c = PgConnection::connect(db.url()).await.expect("connect");
    for sql in [
        "CREATE TABLE account_statements (account text NOT NULL, period text NOT NULL, \
         content bytea NOT NULL, last_accepted_fence bigint NOT NULL DEFAULT 0, \
         PRIMARY KEY (account, period))"
            .to_owned(),
        format!("CREATE ROLE {name} LOGIN"),
        format!("GRANT outbox_producer TO {name}"),
        format!("GRANT SELECT, INSERT, UPDATE ON account_statements TO {name}"),
    ] {
        // The name is this test's own (a UUID).
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("set up the login");
    }
    let mut url = reqwest::Url::parse(db.url()).expect("the database URL");
    url.set_username(&name).expect("a user name");
    url.set_password(None).expect("no password");
    url.to_string()
}

/// Issue 37: the worked examples need no right on any outbox table. With a login holding only
/// `outbox_producer` (and its business table's rights) the worker acquires, writes its row,
/// enqueues, commits and releases; the op is delivered with the lease's token; a rerun is a
/// duplicate (G7), read through the same functions.
async fn the_seed_story_runs_with_the_producer_role_alone(worker: Worker) {
    let db = migrated().await;
    let url = producer_login(&db).await;
    let receiver = Receiver::start().await;
    let dispatcher = Dispatcher::start(&db, &receiver);
    let args = ["run", "--account", ACCOUNT, "--period", PERIOD];
    let out = worker.run_on(&url, &args).await;
    out.exits(0)
        .in_order(&["enqueued op ", "committed", "released "]);
    let token = out.token("acquired ");
    let (op_id, _, duplicate) = out.enqueued();
    assert!(!duplicate, "{out}");
    delivered(&db, &op_id).await;
    let sent = receiver.received().remove(0);
    assert_eq!(sent.header("x-fencing-token"), token.to_string());
    let again = worker.run_on(&url, &args).await;
    again.exits(0);
    let (again_id, _, duplicate) = again.enqueued();
    assert!(duplicate && again_id == op_id, "{again}");
    dispatcher.stop();
}

/// Issue 37, item 3: the worked encryption. With `--encryption-key` the worker stores the op's
/// body sealed (outbox_seal.py / outbox_seal.js, the envelope the Rust producer writes), the
/// dispatcher holding the key sends it clear, and a rerun is still a duplicate: the sealing is
/// deterministic, so `outbox.enqueue` hashes the same envelope twice.
async fn an_encrypted_body_is_stored_sealed_and_sent_clear(worker: Worker) {
    let db = migrated().await;
    let dir = tempfile::tempdir().expect("a key folder");
    let key = dir.path().join("k1.key");
    std::fs::write(&key, "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n").expect("key file");
    let receiver = Receiver::start().await;
    let dispatcher = Dispatcher::start_with(
        &db,
        &receiver,
        &format!("[encryption]\nkeys = {{ k1 = \"file:{}\" }}", key.display()),
    );
    let spec = format!("k1=file:{}", key.display());
    let out = worker.run(&db, "run", &["--encryption-key", &spec]).await;
    out.exits(0);
    let (op_id, _, duplicate) = out.enqueued();
    assert!(!duplicate, "{out}");
    let stored = db.ops().await.remove(0);
    assert!(stored.body.starts_with(b"OBX1\x02k1"), "{out}");
    assert!(!String::from_utf8_lossy(&stored.body).contains(ACCOUNT));
    delivered(&db, &op_id).await;
    let sent = receiver.received().remove(0);
    let body: serde_json::Value = serde_json::from_slice(&sent.body).expect("a clear JSON body");
    assert_eq!(body["account"], serde_json::json!(ACCOUNT));
    let again = worker.run(&db, "run", &["--encryption-key", &spec]).await;
    again.exits(0);
    assert_eq!(again.enqueued(), (op_id, stored.seq, true), "{again}");
    dispatcher.stop();
}

/// The seed's story (G4, G7): the worker acquires, builds, writes its row and enqueues in one
/// transaction, commits and releases; the dispatcher POSTs the statement with the idempotency
/// key and the lease's token, and the op ends delivered.
async fn g4_the_seed_story_is_delivered_with_the_lease_token(worker: Worker) {
    let db = migrated().await;
    let receiver = Receiver::start().await;
    let dispatcher = Dispatcher::start(&db, &receiver);

    let out = worker.run(&db, "run", &[]).await;
    out.exits(0).in_order(&[
        "connected to ",
        &format!("acquired {RESOURCE} token "),
        "built statement account 1842 period 2026-07: 4 entries",
        "wrote account_statements account 1842 period 2026-07 last_accepted_fence ",
        "enqueued op ",
        "committed",
        &format!("released {RESOURCE} token "),
    ]);
    let token = out.token("acquired ");
    let (op_id, _, duplicate) = out.enqueued();
    assert!(!duplicate, "{out}");

    wait_until(
        Duration::from_secs(60),
        "the statement is POSTed",
        || async { !receiver.received().is_empty() },
    )
    .await;
    let sent = receiver.received().remove(0);
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/statements/1842/2026-07")
    );
    assert_eq!(sent.header("idempotency-key"), "statement-1842-2026-07");
    assert_eq!(sent.header("x-fencing-token"), token.to_string());
    assert_eq!(sent.header("x-outbox-op-id"), op_id);
    assert_eq!(sent.header("content-type"), "application/json");
    let body: serde_json::Value = serde_json::from_slice(&sent.body).expect("a JSON body");
    assert_eq!(
        (&body["account"], &body["period"]),
        (&serde_json::json!(ACCOUNT), &serde_json::json!(PERIOD))
    );
    assert_eq!(body["entries"].as_array().map(Vec::len), Some(4), "{body}");

    delivered(&db, &op_id).await;
    let rows = statements(&db).await;
    assert_eq!(
        rows,
        [(
            ACCOUNT.to_owned(),
            PERIOD.to_owned(),
            sent.body.clone(),
            token
        )],
        "the business row holds what was sent, with the lease's token"
    );
    dispatcher.stop();
    assert_eq!(receiver.received().len(), 1, "one POST");
}

/// G7: running the same statement again (a new lease, a larger token) returns the same op as a
/// duplicate; the same key with another body is a conflict naming that op, and its
/// transaction, business write included, is rolled back.
async fn g7_a_rerun_is_a_duplicate_and_another_body_a_conflict(worker: Worker) {
    let db = migrated().await;
    let first = worker.run(&db, "run", &[]).await;
    first.exits(0);
    let (op_id, seq, duplicate) = first.enqueued();
    assert!(!duplicate, "{first}");

    let again = worker.run(&db, "run", &[]).await;
    again.exits(0);
    assert_eq!(again.enqueued(), (op_id.clone(), seq, true), "{again}");
    let token = again.token("acquired ");
    assert_eq!(token, first.token("acquired ") + 1, "{again}");
    let before = statements(&db).await;
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].3, token, "the re-run wrote with its own token");

    let other = worker.run(&db, "run", &["--note", "corrected"]).await;
    other.exits(5);
    let line = other.line("idempotency conflict: ");
    assert!(
        line.contains(&format!("already belongs to op {op_id} ")) && line.contains("(OB004)"),
        "{other}"
    );
    assert!(other.stdout.contains("released "), "{other}");
    assert_eq!(
        statements(&db).await,
        before,
        "the conflicting run changed the business row"
    );
    let ops = db.ops().await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].op_id, op_id);
}

/// G4: a failure after the enqueue and before commit rolls back both writes; the lease is
/// released, so the next run goes ahead at once with a new op.
async fn g4_a_failure_before_commit_keeps_neither_the_statement_nor_the_op(worker: Worker) {
    let db = migrated().await;
    let failed = worker.run(&db, "run", &["--fail-after-enqueue"]).await;
    failed.exits(1).in_order(&[
        "wrote account_statements ",
        "enqueued op ",
        "failed before commit (--fail-after-enqueue): rolled back",
        &format!("released {RESOURCE} token 1"),
    ]);
    let (rolled_back, _, _) = failed.enqueued();
    assert!(!failed.stdout.contains("\ncommitted"), "{failed}");
    assert_eq!(counts(&db).await, (0, 0, 0), "{failed}");

    let next = worker.run(&db, "run", &[]).await;
    next.exits(0);
    assert_eq!(next.token("acquired "), 2, "{next}");
    let (op_id, _, duplicate) = next.enqueued();
    assert!(op_id != rolled_back && !duplicate, "{next}");
    assert_eq!(counts(&db).await, (1, 1, 0));
}

/// G4, the seed's failure: A is paused past its lease, B takes the resource over, A's enqueue
/// with the old token is rejected with B's token (OB001), nothing of A's is kept but the
/// rejection record, and A cannot release B's lease.
async fn g4_a_stale_owner_is_rejected_with_the_current_token(worker: Worker) {
    let db = migrated().await;
    let out = worker.run(&db, "stale-demo", &[]).await;
    out.exits(3).in_order(&[
        &format!("A acquired {RESOURCE} token 1 "),
        "A built statement ",
        "A pauses past its lease",
        &format!("B acquired {RESOURCE} token 2 "),
        "A resumes",
        "A wrote account_statements ",
        &format!("A stale owner: token 1 rejected for {RESOURCE}, current token 2 (OB001)"),
        &format!("A not released: {RESOURCE} is no longer held by token 1"),
        &format!("B released {RESOURCE} token 2"),
    ]);
    assert!(!out.stdout.contains("enqueued op"), "{out}");
    assert!(
        statements(&db).await.is_empty(),
        "A's business write was rolled back"
    );
    assert!(db.ops().await.is_empty(), "no op of A's");
    assert_eq!(
        rejections(&db).await,
        [(RESOURCE.to_owned(), 1, Some(2), "stale".to_owned())],
        "the rejection is kept for operators (by the dblink loopback): {out}"
    );
}

/// G4, G2: a worker paused past its lease with no one taking over gets OB002 (expired by the
/// database clock) and writes nothing.
async fn g4_an_expired_lease_is_rejected_and_nothing_is_written(worker: Worker) {
    let db = migrated().await;
    let args = ["--ttl", "1s", "--min-ttl", "1s", "--pause-past-lease"];
    let out = worker.run(&db, "run", &args).await;
    out.exits(4).in_order(&[
        &format!("acquired {RESOURCE} token 1 "),
        "pausing past the lease",
        &format!("lease expired: token 1 on {RESOURCE} expired by the database clock"),
    ]);
    assert!(out.line("lease expired: ").contains("(OB002)"), "{out}");
    assert_eq!(counts(&db).await, (0, 0, 1), "only the rejection record");
    assert_eq!(rejections(&db).await[0].3, "expired");
}

/// G10: a destination that is a URL, a path with a `..` segment and a TTL below the bound are
/// refused with OB005 naming the field, and write nothing (counted before and after).
async fn g10_invalid_input_is_refused_by_field_and_writes_nothing(worker: Worker) {
    let db = migrated().await;
    worker.run(&db, "run", &[]).await.exits(0);
    let before = counts(&db).await;
    assert_eq!(before, (1, 1, 0));
    let url = db.url().to_owned();
    let cases: [(&[&str], &str); 3] = [
        (
            &["run", "--destination", "https://statements.example/v1"],
            "invalid input: destination: ",
        ),
        (&["run", "--account", ".."], "invalid input: path: "),
        (&["run", "--ttl", "100ms"], "invalid input: ttl: "),
    ];
    for (args, line) in cases {
        let out = worker.run_on(&url, args).await;
        out.exits(2);
        assert!(
            out.line(line).ends_with("(OB005); nothing was written"),
            "{out}"
        );
        assert_eq!(counts(&db).await, before, "{out}");
    }
}

/// No secrets: a password in DATABASE_URL never appears in what the worker prints when the
/// connection fails, even where the driver quotes the whole URL back (libpq does for a broken
/// host).
async fn a_failed_connection_never_prints_the_password(worker: Worker) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    for url in [
        format!("postgres://statements:hunter2-secret@127.0.0.1:{port}/outbox"),
        "postgres://statements:hunter2-secret@[::1/outbox".to_owned(),
    ] {
        let out = worker.run_on(&url, &["run"]).await;
        out.exits(1).line("cannot connect: ");
        assert!(
            !out.stdout.contains("hunter2") && !out.stderr.contains("hunter2"),
            "{out}"
        );
    }
}

/// Through PgBouncer in transaction mode (issue 27), with only the URL's host and port changed:
/// the seed's race (A paused past its lease, B takes over, A's enqueue refused with B's token,
/// the rejection kept) and then a run that enqueues, each worker connection's statements
/// spread over whichever server connections PgBouncer hands out.
async fn g4_through_pgbouncer_the_race_is_refused_and_a_run_enqueues(worker: Worker) {
    use outbox_tests::pgbouncer::{PgBouncer, PoolMode};
    let db = migrated().await;
    let pgbouncer = PgBouncer::start(db.url(), PoolMode::Transaction)
        .unwrap_or_else(|e| panic!("cannot start PgBouncer: {e}"));
    let url = pgbouncer.in_front_of(db.url());
    let args = |command| [command, "--account", ACCOUNT, "--period", PERIOD];
    let out = worker.run_on(&url, &args("stale-demo")).await;
    out.exits(3).in_order(&[
        &format!("A acquired {RESOURCE} token 1 "),
        &format!("B acquired {RESOURCE} token 2 "),
        &format!("A stale owner: token 1 rejected for {RESOURCE}, current token 2 (OB001)"),
        &format!("B released {RESOURCE} token 2"),
    ]);
    assert!(db.ops().await.is_empty(), "no op of A's: {out}");
    assert_eq!(
        rejections(&db).await,
        [(RESOURCE.to_owned(), 1, Some(2), "stale".to_owned())],
        "{out}\nPgBouncer's log:\n{}",
        pgbouncer.log()
    );
    let out = worker.run_on(&url, &args("run")).await;
    out.exits(0).in_order(&[
        &format!("acquired {RESOURCE} token 3 "),
        "enqueued op ",
        "committed",
    ]);
    assert_eq!(counts(&db).await, (1, 1, 1), "{out}");
}

/// One test per case and language: `python::case` and `node::case`.
macro_rules! each_worker {
    ($($test:ident),* $(,)?) => {
        mod python {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Worker::python()).await
                }
            )*
        }
        mod node {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Worker::node()).await
                }
            )*
        }
    };
}

each_worker!(
    g4_the_seed_story_is_delivered_with_the_lease_token,
    the_seed_story_runs_with_the_producer_role_alone,
    g7_a_rerun_is_a_duplicate_and_another_body_a_conflict,
    g4_a_failure_before_commit_keeps_neither_the_statement_nor_the_op,
    g4_a_stale_owner_is_rejected_with_the_current_token,
    g4_an_expired_lease_is_rejected_and_nothing_is_written,
    g10_invalid_input_is_refused_by_field_and_writes_nothing,
    a_failed_connection_never_prints_the_password,
    g4_through_pgbouncer_the_race_is_refused_and_a_run_enqueues,
    an_encrypted_body_is_stored_sealed_and_sent_clear,
);

/// G7 across languages: the two workers build the same request byte for byte, so a statement
/// recorded by the Python worker is a duplicate (the same op) for the Node worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g7_a_statement_recorded_in_python_is_a_duplicate_in_node() {
    let db = migrated().await;
    let python = Worker::python().run(&db, "run", &[]).await;
    python.exits(0);
    let (op_id, seq, _) = python.enqueued();
    let node = Worker::node().run(&db, "run", &[]).await;
    node.exits(0);
    assert_eq!(node.enqueued(), (op_id, seq, true), "{node}");
    assert_eq!(
        node.line("built statement "),
        python.line("built statement "),
        "the same statement"
    );
}
