//! The dispatcher through a real PgBouncer (issue 27), with nothing changed but the URL's host
//! and port (`admin/tests/poolers.rs` runs `outboxctl` the same way): the store sends no startup options and no session-level `SET`, so the pooler lets it in and
//! nothing of one client's session reaches another.
//!
//! In transaction mode the store finds the pooler at connect, so every statement is unnamed and
//! runs in a transaction, and the dispatcher polls instead of LISTENing, or LISTENs on its
//! direct `database.listen_url`. A SIGKILLed dispatcher is replaced through PgBouncer too. These
//! run in their own test binary, apart from the timing-sensitive `processes.rs`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_producer::{Operation, Outbox};
use outbox_store::Store;
use outbox_tests::pgbouncer::{PgBouncer, PoolMode};
use outbox_tests::{Receiver, Reply, TestDb, wait_until};

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

/// A dispatcher process on the database at `url` with one destination `statements` at
/// `receiver`, LISTENing on `listen_url` when given; killed if the test ends without stopping
/// it.
struct Dispatcher {
    child: Child,
    _config: tempfile::NamedTempFile,
}

impl Dispatcher {
    fn start(url: &str, receiver: &Receiver, poll: &str, listen_url: Option<&str>) -> Dispatcher {
        let listen_url = listen_url.unwrap_or_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let text = format!(
            "[database]\nurl = {url:?}\nlisten_url = {listen_url:?}\n[lease]\nmin_ttl = \"1s\"\n\
             [dispatcher]\nlease_ttl = \"3s\"\npoll_interval = {poll:?}\nlisten = \"127.0.0.1:{port}\"\n\
             shutdown_grace = \"5s\"\n[destinations.statements]\nbase_url = \"{base}\"\n\
             timeout = \"2s\"\nretry = {{ base = \"100ms\", cap = \"500ms\" }}\n",
            base = receiver.url()
        );
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), text).unwrap();
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

    fn signal(&self, sig: &str) {
        outbox_tests::signal(&self.child, sig);
    }

    /// SIGTERM and wait for a clean exit.
    fn stop(mut self) {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "dispatcher exited with {status}");
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Leases `resource` and enqueues one op to `statements` per key.
async fn enqueue(outbox: &Outbox, resource: &str, keys: &[&str]) {
    let lease = outbox
        .try_acquire(resource, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    for key in keys {
        let op = Operation::post("statements", "/v1/statements")
            .json(&serde_json::json!({"key": key}))
            .idempotency_key(*key)
            .unordered()
            .build()
            .unwrap();
        outbox.enqueue(&lease, &op).await.unwrap();
    }
}

async fn all_delivered(db: &TestDb, n: usize) {
    wait_until(Duration::from_secs(60), "every op is delivered", || async {
        let ops = db.ops().await;
        ops.len() == n && ops.iter().all(|o| o.state == "delivered")
    })
    .await;
}

/// A new PostgreSQL database behind a real PgBouncer in transaction mode: the database, the
/// PgBouncer, its URL through PgBouncer, and a producer connected through it (issue 27).
async fn through_pgbouncer() -> (TestDb, PgBouncer, String, Outbox) {
    let db = TestDb::postgres().await;
    let pgbouncer = PgBouncer::start(db.url(), PoolMode::Transaction)
        .unwrap_or_else(|e| panic!("cannot start PgBouncer: {e}"));
    let url = pgbouncer.in_front_of(db.url());
    let store = Store::connect(&url, TestDb::options()).await.unwrap();
    store.migrate().await.unwrap();
    (db, pgbouncer, url, Outbox::from_store(store))
}

/// Through PgBouncer in transaction mode (issue 27), producer and dispatchers alike: the leader
/// is SIGKILLed mid-attempt, a second process takes over, and every op is delivered, the
/// interrupted one again with its key; nothing else is sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g6_through_pgbouncer_a_killed_dispatcher_is_replaced_and_nothing_is_lost() {
    let (db, pgbouncer, url, outbox) = through_pgbouncer().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/v1/statements",
        [Reply::status(200).after(Duration::from_millis(1500))],
    );
    enqueue(&outbox, "statement:1", &["st-1"]).await;
    let first = Dispatcher::start(&url, &receiver, "100ms", None);
    wait_until(
        Duration::from_secs(30),
        "the request reached the destination",
        || async { !receiver.received().is_empty() },
    )
    .await;
    first.signal("-KILL");
    drop(first);
    let second = Dispatcher::start(&url, &receiver, "100ms", None);
    enqueue(&outbox, "statement:2", &["st-2", "st-3"]).await;
    all_delivered(&db, 3).await;
    second.stop();
    let mut keys = receiver.idempotency_keys();
    keys.sort();
    assert_eq!(
        keys,
        ["st-1", "st-1", "st-2", "st-3"],
        "{}",
        pgbouncer.log()
    );
}

/// Through PgBouncer in transaction mode a LISTEN hears nothing; with `database.listen_url`
/// (here `OUTBOX_DATABASE_LISTEN_URL`) the dispatcher LISTENs on that direct URL and an idle one
/// wakes for an enqueue long before its 30 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_an_idle_dispatcher_wakes_by_its_direct_listen_url() {
    let (db, _pgbouncer, url, outbox) = through_pgbouncer().await;
    let receiver = Receiver::start().await;
    let dispatcher = Dispatcher::start(&url, &receiver, "30s", Some(db.url()));
    wait_until(Duration::from_secs(30), "the dispatcher leads", || async {
        outbox
            .list_leases()
            .await
            .unwrap()
            .iter()
            .any(|l| l.resource.as_str() == "dispatcher/0" && l.held)
    })
    .await;
    // Past the first claims, so the loop is idle and waiting for a notification or its poll.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    enqueue(&outbox, "statement:1", &["woken-1"]).await;
    all_delivered(&db, 1).await;
    let took = started.elapsed();
    println!("delivered through PgBouncer in {took:?}, woken by LISTEN on the direct URL");
    assert!(
        took < Duration::from_secs(20),
        "took {took:?}: no LISTEN (poll is 30 s)"
    );
    dispatcher.stop();
}

/// Issue 34, item 5: the probe decides on certain evidence only, and a real PgBouncer gives it:
/// in transaction mode it is found at connect (no LISTEN, not even one waiting for a later
/// probe), in session mode the server is found direct (LISTEN at once). A probe that could not
/// tell would return a LISTEN task that waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_finds_pgbouncer_for_certain_in_both_modes() {
    let db = TestDb::postgres().await;
    for (mode, listens) in [(PoolMode::Transaction, false), (PoolMode::Session, true)] {
        let pgbouncer = bouncer(&db, mode);
        let store = Store::connect(&pgbouncer.in_front_of(db.url()), TestDb::options())
            .await
            .unwrap();
        let wake = std::sync::Arc::new(tokio::sync::Notify::new());
        let listener = store.listen_for_enqueues(wake.clone());
        assert_eq!(listener.is_some(), listens, "{mode:?}");
        if let Some(listener) = listener {
            // A LISTEN that started wakes once at once.
            tokio::time::timeout(Duration::from_secs(10), wake.notified())
                .await
                .unwrap_or_else(|_| panic!("{mode:?}: the LISTEN did not start"));
            listener.abort();
        }
        store.close().await;
    }
}
