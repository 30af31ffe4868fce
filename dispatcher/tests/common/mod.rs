//! What the in-process dispatcher tests share: a dispatcher started on a test database with
//! destinations given as TOML, the destination tables, the ops they send, and waiting for the
//! ops' states. Each test binary uses its own part; the rest is allowed to go unused.

use std::collections::HashMap;
use std::time::Duration;

use outbox_dispatcher::Config;
use outbox_producer::Operation;
use outbox_tests::{Receiver, TestDb, wait_until, wait_until_explained};
use tokio_util::sync::CancellationToken;

/// A dispatcher running in this process until stopped.
pub(crate) struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), outbox_dispatcher::Error>>,
}

impl Running {
    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        self.task
            .await
            .expect("dispatcher task")
            .expect("dispatcher run");
    }
}

/// Starts a dispatcher on `db` whose destinations are `destinations` (TOML tables).
#[allow(dead_code)] // console.rs starts its dispatchers with dispatch_with
pub(crate) fn dispatch(db: &TestDb, destinations: &str) -> Running {
    dispatch_listening(db, destinations, "")
}

/// As [`dispatch`], serving /metrics, /healthz and /readyz on `listen`.
#[allow(dead_code)] // console.rs starts its dispatchers with dispatch_with
pub(crate) fn dispatch_listening(db: &TestDb, destinations: &str, listen: &str) -> Running {
    dispatch_with(db, destinations, &format!("listen = {listen:?}\n"))
}

/// A dispatcher with extra `[dispatcher]` keys (`poll_interval` and `listen` replace the
/// defaults of 100 ms and none).
pub(crate) fn dispatch_with(db: &TestDb, destinations: &str, dispatcher_keys: &str) -> Running {
    let listen = if dispatcher_keys.contains("listen") {
        ""
    } else {
        "listen = \"\"\n"
    };
    let poll = if dispatcher_keys.contains("poll_interval") {
        ""
    } else {
        "poll_interval = \"100ms\"\n"
    };
    let text = format!(
        "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\n{poll}shutdown_grace = \"5s\"\n{listen}{dispatcher_keys}{destinations}",
        url = db.url()
    );
    let env = HashMap::from([("TEST_TOKEN".to_owned(), "s3cret-token".to_owned())]);
    let config = Config::load(Some(&text), &env).expect("test config");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(outbox_dispatcher::run(config, shutdown.clone()));
    Running { shutdown, task }
}

/// Three in-process dispatchers on four partitions with `dest` (TOML) and extra
/// `[dispatcher]` keys, once they lead 2/1/1 partitions. Migrated first, so they do not queue
/// behind each other for the migration lock: on a slow server (Babelfish) four migrators at
/// once outwait its 20 s.
#[allow(dead_code)] // used by delivery.rs and operator.rs
pub(crate) async fn three_settled(db: &TestDb, dest: &str, keys: &str) -> Vec<Running> {
    let store = db.outbox().await.store().clone();
    let running: Vec<Running> = (0..3)
        .map(|_| dispatch_with(db, dest, &format!("partitions = 4\n{keys}")))
        .collect();
    wait_until(
        Duration::from_secs(60),
        "three dispatchers lead 2/1/1 partitions",
        || async { outbox_tests::split(&store).await == [2, 1, 1] },
    )
    .await;
    running
}

/// Destination `name` at `receiver`'s `/api` (see [`destination_at`]).
#[allow(dead_code)] // hostile.rs has destinations of its own
pub(crate) fn destination(name: &str, receiver: &Receiver, extra: &str) -> String {
    destination_at(name, &format!("{}/api", receiver.url()), extra)
}

/// Destination `name` at `base_url` with `extra` keys (one a line): a 1 s timeout, a fast
/// retry of at most 5 attempts and no circuit breaker (the tests of scripted failures count
/// attempts; breaker.rs tests the breaker), unless `extra` sets `timeout`, `retry` or
/// `breaker` itself.
pub(crate) fn destination_at(name: &str, base_url: &str, extra: &str) -> String {
    let sets = |key: &str| {
        extra
            .lines()
            .any(|l| l.split('=').next().map(str::trim) == Some(key))
    };
    let timeout = if sets("timeout") {
        ""
    } else {
        "timeout = \"1s\"\n"
    };
    let retry = if sets("retry") {
        ""
    } else {
        "retry = { base = \"50ms\", cap = \"200ms\", max_attempts = 5 }\n"
    };
    let breaker = if sets("breaker") {
        ""
    } else {
        "breaker = { enabled = false }\n"
    };
    format!("[destinations.{name}]\nbase_url = \"{base_url}\"\n{timeout}{retry}{breaker}{extra}\n")
}

/// A POST of `{"key": key}` to `path` at `destination`, with `key` as its idempotency key.
#[allow(dead_code)] // breaker.rs builds unordered ops of its own
pub(crate) fn post(destination: &str, path: &str, key: &str) -> Operation {
    Operation::post(destination, path)
        .json(&serde_json::json!({"key": key}))
        .idempotency_key(key)
        .build()
        .unwrap()
}

/// Waits (30 s at most) until the states of every op, in enqueue order, satisfy `done`; a
/// timeout shows the database's sessions and the partition leases.
#[allow(dead_code)] // operator.rs waits for what the destination received
pub(crate) async fn until_states(db: &TestDb, what: &str, done: impl Fn(&[String]) -> bool) {
    wait_until_explained(
        Duration::from_secs(30),
        what,
        || async {
            let states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
            done(&states)
        },
        || db.explain_activity(),
    )
    .await;
}

/// There are ops, and every one is in `state`.
#[allow(dead_code)] // hostile.rs waits for mixed states
pub(crate) fn all(state: &'static str) -> impl Fn(&[String]) -> bool {
    move |states| !states.is_empty() && states.iter().all(|s| s == state)
}
