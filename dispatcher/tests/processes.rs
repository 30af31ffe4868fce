//! The real `outbox-dispatcher` binary under real faults: SIGKILL mid-attempt, two instances
//! with SIGSTOP/SIGCONT on the leader, and (PostgreSQL) a database restart. Destinations are
//! real HTTP servers on 127.0.0.1 recording what they receive.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_producer::{Operation, Outbox};
use outbox_tests::{Receiver, Reply, TestDb, conformance, wait_until};

/// A dispatcher process, killed if the test ends without stopping it.
struct Dispatcher {
    child: Child,
    metrics: String,
    _config: tempfile::NamedTempFile,
}

/// A config file for a dispatcher on `db` with one destination `statements` at `receiver`,
/// `/metrics` on `port`, and `dispatcher_keys` (whole lines) in `[dispatcher]`.
fn config_file(
    db: &TestDb,
    receiver: &Receiver,
    dispatcher_keys: &str,
    port: u16,
) -> tempfile::NamedTempFile {
    let text = format!(
        "[database]\nurl = {url:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\n{dispatcher_keys}\
         listen = \"127.0.0.1:{port}\"\nshutdown_grace = \"5s\"\n[destinations.statements]\nbase_url = \"{base}\"\n\
         timeout = \"2s\"\nretry = {{ base = \"100ms\", cap = \"500ms\" }}\n",
        url = db.url(),
        base = receiver.url()
    );
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), text).unwrap();
    config
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The dispatcher binary with `config`, logging warnings.
fn command(config: &tempfile::NamedTempFile) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"));
    command
        .arg("--config")
        .arg(config.path())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    command
}

impl Dispatcher {
    /// Starts the binary on `db` with one destination `statements` at `receiver`.
    fn start(db: &TestDb, receiver: &Receiver, poll: &str) -> Dispatcher {
        Dispatcher::launch(
            db,
            receiver,
            &format!("poll_interval = {poll:?}\n"),
            &[],
            &[],
        )
    }

    /// Starts the binary with `dispatcher_keys` in `[dispatcher]`, `env` set for the process
    /// and `unset` removed from it.
    fn launch(
        db: &TestDb,
        receiver: &Receiver,
        dispatcher_keys: &str,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Dispatcher {
        let port = free_port();
        let config = config_file(db, receiver, dispatcher_keys, port);
        let mut command = command(&config);
        command.envs(env.iter().copied());
        for name in unset {
            command.env_remove(name);
        }
        let child = command.spawn().expect("start outbox-dispatcher");
        Dispatcher {
            child,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
            _config: config,
        }
    }

    fn signal(&self, sig: &str) {
        outbox_tests::signal(&self.child, sig);
    }

    /// A counter's value from this process's /metrics (0 when absent).
    async fn counter(&self, name: &str) -> f64 {
        let text = reqwest::get(&self.metrics)
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
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

/// SIGKILL while the destination holds the request open; a restarted dispatcher takes over after
/// the lease expires and delivers the op again, with the same idempotency key.
async fn g6_a_killed_dispatcher_is_replaced_and_the_op_is_sent_again(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/v1/statements",
        [Reply::status(200).after(Duration::from_millis(1500))],
    );
    enqueue(&outbox, "statement:1", &["st-1"]).await;
    let first = Dispatcher::start(&db, &receiver, "100ms");
    wait_until(
        Duration::from_secs(30),
        "the request reached the destination",
        || async { !receiver.received().is_empty() },
    )
    .await;
    first.signal("-KILL");
    drop(first);

    let second = Dispatcher::start(&db, &receiver, "100ms");
    all_delivered(&db, 1).await;
    second.stop();
    let keys = receiver.idempotency_keys();
    assert_eq!(keys, ["st-1", "st-1"], "sent twice, with the same key");
    let outcomes: Vec<(i32, Option<String>)> = db
        .attempts()
        .await
        .into_iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, Some("unknown".to_owned())),
            (2, Some("delivered".to_owned()))
        ]
    );
}

/// Two instances: one leads and delivers. The leader is stopped (SIGSTOP) past its lease in the
/// middle of an attempt; the standby takes over and delivers everything; the old leader is
/// resumed and its completion is discarded. Every op ends delivered, exactly once in the table.
async fn g9_a_paused_leader_is_replaced_and_its_completion_is_discarded(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/v1/statements",
        [Reply::status(200).after(Duration::from_millis(1500))],
    );
    let a = Dispatcher::start(&db, &receiver, "100ms");
    wait_until(Duration::from_secs(30), "one instance leads", || async {
        outbox
            .list_leases()
            .await
            .unwrap()
            .iter()
            .any(|l| l.resource.as_str() == "dispatcher/0" && l.held)
    })
    .await;
    let b = Dispatcher::start(&db, &receiver, "100ms");
    enqueue(&outbox, "statement:2", &["first"]).await;
    wait_until(
        Duration::from_secs(30),
        "the leader's request reached the destination",
        || async { !receiver.received().is_empty() },
    )
    .await;
    // The leader is whichever sent it; pause it mid-attempt.
    let leader_token = db.attempts().await.len();
    assert_eq!(
        leader_token, 0,
        "no attempt recorded yet: the request is still open"
    );
    let lease_before = outbox
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.resource.as_str() == "dispatcher/0")
        .unwrap();
    let (leader, standby) = if a.counter("outbox_partition_leader").await >= 1.0 {
        (a, b)
    } else {
        (b, a)
    };
    leader.signal("-STOP");
    enqueue(
        &outbox,
        "statement:3",
        &["backlog-1", "backlog-2", "backlog-3"],
    )
    .await;
    all_delivered(&db, 4).await;
    let lease_after = outbox
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.resource.as_str() == "dispatcher/0")
        .unwrap();
    assert!(
        lease_after.token > lease_before.token,
        "the standby took the partition over"
    );

    leader.signal("-CONT");
    wait_until(
        Duration::from_secs(30),
        "the old leader's completion was refused",
        || async { leader.counter("outbox_stale_completions_total").await >= 1.0 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ops = db.ops().await;
    assert!(ops.iter().all(|o| o.state == "delivered"), "{ops:?}");
    let first = ops.iter().find(|o| o.idempotency_key == "first").unwrap();
    let attempts: Vec<(i32, i64, Option<String>)> = db
        .attempts()
        .await
        .into_iter()
        .filter(|a| a.op_id == first.op_id)
        .map(|a| (a.attempt, a.dispatcher_fence, a.outcome))
        .collect();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(
        (attempts[0].1, attempts[0].2.as_deref()),
        (lease_before.token.get(), Some("unknown"))
    );
    assert_eq!(
        (attempts[1].1, attempts[1].2.as_deref()),
        (lease_after.token.get(), Some("delivered"))
    );
    standby.stop();
    leader.stop();
}

/// Membership: two dispatcher processes register and heartbeat (on the database clock) with
/// how many partitions each leads, both see the other (`outbox_dispatcher_instances`), a
/// SIGTERMed one leaves at once, and a SIGKILLed one stays as `gone` once its ttl has passed.
async fn membership_dispatchers_register_lead_and_leave(db: TestDb) {
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let keys = "poll_interval = \"100ms\"\npartitions = 2\n";
    let first = Dispatcher::launch(&db, &receiver, keys, &[], &[]);
    let second = Dispatcher::launch(&db, &receiver, keys, &[], &[]);
    wait_until(
        Duration::from_secs(30),
        "two live instances that lead both partitions between them",
        || async {
            let rows = store.instance_list().await.unwrap();
            rows.len() == 2
                && rows.iter().all(|r| r.live && r.partitions == 2)
                && rows.iter().map(|r| r.led).sum::<u32>() == 2
        },
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        "each sees two instances",
        || async {
            first.counter("outbox_dispatcher_instances").await == 2.0
                && second.counter("outbox_dispatcher_instances").await == 2.0
        },
    )
    .await;
    let led_by_first = first.counter("outbox_partitions_led").await;
    let led_by_second = second.counter("outbox_partitions_led").await;
    assert_eq!(
        led_by_first + led_by_second,
        2.0,
        "{led_by_first} + {led_by_second}"
    );

    first.stop();
    let rows = store.instance_list().await.unwrap();
    assert_eq!(
        rows.len(),
        1,
        "a graceful shutdown leaves the membership: {rows:?}"
    );
    let survivor = rows[0].instance_id;
    outbox_tests::signal(&second.child, "-KILL");
    wait_until(
        Duration::from_secs(30),
        "the killed instance counts as gone",
        || async {
            let rows = store.instance_list().await.unwrap();
            rows.len() == 1 && rows[0].instance_id == survivor && !rows[0].live
        },
    )
    .await;
}

/// Scale-out: three dispatcher processes join one by one while ops stream in on 8 partitions;
/// the leaders settle to a 3/3/2 split (each instance leads its fair share), the partitions a
/// newcomer takes are handed over gracefully, and no op is sent twice.
async fn scale_out_three_dispatchers_settle_to_a_fair_split_without_resending(db: TestDb) {
    let outbox = db.outbox().await;
    let store = outbox.store().clone();
    let receiver =
        Receiver::start_with(|_| Reply::status(200).after(Duration::from_millis(20))).await;
    let keys = "poll_interval = \"100ms\"\npartitions = 8\n";
    let split = |store: outbox_store::Store| async move {
        let mut led: Vec<u32> = store
            .instance_list()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.live)
            .map(|r| r.led)
            .collect();
        led.sort_unstable();
        led
    };
    let total = 240;
    let producer = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            for i in 0..total {
                let key = format!("scale-{i}");
                enqueue(&outbox, &format!("account-{i}"), &[key.as_str()]).await;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    let mut running = Vec::new();
    for expected in [vec![8], vec![4, 4], vec![2, 3, 3]] {
        running.push(Dispatcher::launch(&db, &receiver, keys, &[], &[]));
        let what = format!("the leaders settle to {expected:?}");
        wait_until(Duration::from_secs(60), &what, || {
            let (store, expected) = (store.clone(), expected.clone());
            async move { split(store).await == expected }
        })
        .await;
    }
    producer.await.unwrap();
    all_delivered(&db, total).await;
    let mut sent = receiver.idempotency_keys();
    sent.sort();
    let before = sent.len();
    sent.dedup();
    assert_eq!(
        before,
        sent.len(),
        "an op was sent twice during the handovers"
    );
    assert_eq!(sent.len(), total);
    for d in running {
        d.stop();
    }
}

conformance!(
    g6_a_killed_dispatcher_is_replaced_and_the_op_is_sent_again,
    g9_a_paused_leader_is_replaced_and_its_completion_is_discarded,
    g12_a_dispatcher_of_another_partition_count_refuses_to_serve,
    membership_dispatchers_register_lead_and_leave,
    scale_out_three_dispatchers_settle_to_a_fair_split_without_resending,
);

/// PostgreSQL restarts under a running dispatcher: it reconnects, loses nothing, and LISTEN
/// resumes (the poll interval is 30 s, so prompt deliveries after the restart prove it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g6_postgres_restart_mid_run_loses_nothing_and_listen_resumes() {
    let Some(db) = TestDb::postgres_own_cluster().await else {
        return;
    };
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let dispatcher = Dispatcher::start(&db, &receiver, "30s");
    wait_until(Duration::from_secs(30), "the dispatcher leads", || async {
        outbox
            .list_leases()
            .await
            .unwrap()
            .iter()
            .any(|l| l.resource.as_str() == "dispatcher/0" && l.held)
    })
    .await;
    enqueue(&outbox, "before", &["before-1", "before-2"]).await;
    all_delivered(&db, 2).await;

    db.restart_server().await;
    let outbox = db.outbox().await;
    let started = std::time::Instant::now();
    wait_until(
        Duration::from_secs(60),
        "an enqueue succeeds after the restart",
        || async {
            let lease = outbox
                .try_acquire("after", Duration::from_secs(60))
                .await
                .ok()
                .flatten();
            let Some(lease) = lease else { return false };
            let op = Operation::post("statements", "/v1/statements")
                .idempotency_key("after-1")
                .unordered()
                .build()
                .unwrap();
            outbox.enqueue(&lease, &op).await.is_ok()
        },
    )
    .await;
    all_delivered(&db, 3).await;
    let took = started.elapsed();
    println!("delivered the first op after the restart in {took:?}");
    assert!(
        took < Duration::from_secs(25),
        "took {took:?}: LISTEN did not resume (poll is 30 s)"
    );
    dispatcher.stop();
    assert_eq!(receiver.received().len(), 3);
}

/// `check-config` validates and prints the effective configuration with secrets as ***; an
/// invalid file exits non-zero naming the key.
#[test]
fn check_config_prints_the_effective_config_without_secrets() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        "[database]\nurl = \"postgres://outbox:${DB_PASSWORD}@db/outbox\"\n[destinations.billing]\nbase_url = \"https://billing.example\"\nheaders = { Authorization = \"Bearer ${TOKEN}\" }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
        .args(["--config", file.path().to_str().unwrap(), "check-config"])
        .env("DB_PASSWORD", "pw-123")
        .env("TOKEN", "tok-456")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("[destinations.billing]") && text.contains("lease_ttl = \"15s\""),
        "{text}"
    );
    assert!(
        !text.contains("pw-123") && !text.contains("tok-456"),
        "{text}"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
        .args(["--config", file.path().to_str().unwrap(), "check-config"])
        .env_remove("DB_PASSWORD")
        .env("TOKEN", "tok-456")
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("database.url") && err.contains("DB_PASSWORD"),
        "{err}"
    );
}

/// Issue 12, item 12: `--config` is accepted after the subcommand as well as before it.
#[test]
fn check_config_takes_the_config_before_or_after_the_subcommand() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        "[database]\nurl = \"sqlite:///tmp/item-12.db\"\n[destinations.billing]\nbase_url = \"https://billing.example\"\n",
    )
    .unwrap();
    let path = file.path().to_str().unwrap();
    for args in [
        ["check-config", "--config", path],
        ["--config", path, "check-config"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
            .args(args)
            .env_remove("OUTBOX_CONFIG")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("sqlite:///tmp/item-12.db") && text.contains("[destinations.billing]"),
            "{args:?} did not read the file:\n{text}"
        );
    }
}

/// Issue 11: a TOML syntax error names its line and column, never the line itself, which may
/// hold a secret.
#[test]
fn a_toml_syntax_error_names_the_line_without_echoing_it() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        "[database]\nmigrate = true\nurl = \"postgres://outbox:hunter2@db/outbox\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
        .args(["--config", file.path().to_str().unwrap(), "check-config"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("line 3, column "), "{err}");
    assert!(!err.contains("hunter2"), "the line was echoed: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2"));
}

/// Without a config file the dispatcher runs on the defaults and says so; SIGTERM stops it
/// cleanly with exit 0.
#[test]
fn without_a_config_file_it_runs_on_the_defaults_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_outbox-dispatcher"))
        .current_dir(dir.path())
        .env_remove("OUTBOX_CONFIG")
        .env("OUTBOX_DISPATCHER_LISTEN", "")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !dir.path().join("outbox.db").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the default database was not created"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("no config file"), "{stderr}");
    assert!(
        stderr.contains("no destinations are configured"),
        "{stderr}"
    );
}

/// A second signal exits at once, without waiting for the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/v1/statements",
        [Reply::status(200).after(Duration::from_secs(30))],
    );
    enqueue(&outbox, "slow", &["slow-1"]).await;
    let mut dispatcher = Dispatcher::start(&db, &receiver, "100ms");
    wait_until(
        Duration::from_secs(30),
        "the request is in flight",
        || async { !receiver.received().is_empty() },
    )
    .await;
    dispatcher.signal("-TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        dispatcher.child.try_wait().unwrap().is_none(),
        "the first signal waits for the attempt"
    );
    let second = std::time::Instant::now();
    dispatcher.signal("-TERM");
    let status = dispatcher.child.wait().unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "took {:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130));
}

/// G11, no ambient proxy: with every proxy variable pointing at a recording server (and no
/// NO_PROXY), the op goes straight to its destination and the "proxy" receives nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g11_the_ambient_proxy_is_never_used() {
    let db = TestDb::sqlite().await;
    let outbox = db.outbox().await;
    let (proxy, destination) = (Receiver::start().await, Receiver::start().await);
    let url = proxy.url();
    let variables = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ];
    let env: Vec<(&str, &str)> = variables.iter().map(|v| (*v, url.as_str())).collect();
    enqueue(&outbox, "proxied", &["proxied-1"]).await;
    let dispatcher = Dispatcher::launch(
        &db,
        &destination,
        "poll_interval = \"100ms\"\n",
        &env,
        &["NO_PROXY", "no_proxy"],
    );
    all_delivered(&db, 1).await;
    dispatcher.stop();
    let through_proxy: Vec<String> = proxy.received().into_iter().map(|r| r.path).collect();
    assert!(
        through_proxy.is_empty(),
        "the dispatcher went through the ambient proxy, which received {through_proxy:?}"
    );
    assert_eq!(destination.received().len(), 1, "sent to the destination");
}

/// G12: a dispatcher started with another `dispatcher.partitions` than a running one refuses
/// to serve, naming both counts, and nothing is sent twice. Before, it took the partitions its
/// count gave it and re-queued ops the running one still had in flight.
async fn g12_a_dispatcher_of_another_partition_count_refuses_to_serve(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver =
        Receiver::start_with(|_| Reply::status(200).after(Duration::from_millis(300))).await;
    let running = Dispatcher::launch(
        &db,
        &receiver,
        "poll_interval = \"100ms\"\npartitions = 1\n",
        &[],
        &[],
    );
    let store = outbox.store().clone();
    wait_until(
        Duration::from_secs(30),
        "the first dispatcher leads",
        || async {
            store
                .lease_list()
                .await
                .unwrap()
                .iter()
                .any(|l| l.resource.as_str() == "dispatcher/0" && l.held && l.partitions == Some(1))
        },
    )
    .await;
    let keys: Vec<String> = (0..20).map(|i| format!("count-{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    enqueue(&outbox, "counted", &keys).await;
    let config = config_file(
        &db,
        &receiver,
        "poll_interval = \"100ms\"\npartitions = 2\n",
        free_port(),
    );
    let refused = tokio::task::spawn_blocking(move || command(&config).output())
        .await
        .unwrap()
        .expect("run the second dispatcher");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    for words in [
        "dispatcher.partitions is 2",
        "dispatcher/0 is held with partitions = 1",
        "stop every dispatcher",
    ] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
    all_delivered(&db, keys.len()).await;
    running.stop();
    let mut sent = receiver.idempotency_keys();
    sent.sort();
    let mut expected: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(sent, expected, "every op sent exactly once");
}
