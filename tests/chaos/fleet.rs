//! 32 dispatcher processes on 256 partitions (issue 38): instances join, are SIGKILLed, are
//! SIGSTOPped past their lease and resumed, and leave gracefully, in bursts, against one
//! PostgreSQL. After each burst the run waits for a fair split, read as an operator would:
//! every running instance's `/metrics` (`outbox_partition_leader`), each instance within one
//! partition of its share (⌊256/n⌋ or ⌈256/n⌉, all 256 led once). The time from the burst to
//! the fair split, in lease periods, must be at most 3 every time. The run also measures the
//! database's CPU (its processes' user and system time) while the fleet is idle and while it
//! drains a backlog, and checks that every op of the backlog was delivered.
//!
//! `FLEET_SECONDS` (default 0: one round of bursts) repeats the rounds for at least that long;
//! `FLEET_DISPATCHER` runs another build of the dispatcher (a release one, say) instead of the
//! one cargo builds for this test; `FLEET_POLL` sets the dispatchers' `poll_interval` (default
//! the dispatcher's own, 500 ms), to measure what it costs the database idle.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_producer::Operation;
use outbox_tests::{Receiver, Reply, TestDb, signal, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::run::say;

/// Instances at most.
const INSTANCES: usize = 32;
/// Partitions.
const PARTITIONS: usize = 256;
/// The partition lease.
const LEASE: Duration = Duration::from_secs(6);
/// The longest a burst may take to settle, in lease periods.
const SETTLE_PERIODS: f64 = 3.0;
/// Ops of the backlog drained to measure the database's CPU (a debug build: 500, its drain
/// measures the build more than the database).
const BACKLOG: usize = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_dispatchers_on_256_partitions() {
    let _turn = crate::turn::alone().await;
    let db = TestDb::postgres_own_cluster()
        .await
        .expect("a PostgreSQL of the test's own (its processes' CPU is measured)");
    drop(db.outbox().await);
    let destination = Receiver::start_with(|_| Reply::status(200)).await;
    let logs = crate::Logs::new();
    let config = configure(logs.path(), db.url(), &destination.url());
    let given = std::env::var_os("FLEET_DISPATCHER");
    // A debug build starts slowly: 24 of them at once keep both cores busy for seconds.
    let debug = given.is_none() && cfg!(debug_assertions);
    let program = match given {
        Some(path) => PathBuf::from(path),
        None => tokio::task::spawn_blocking(crate::procs::binaries)
            .await
            .expect("build the binaries")
            .dispatcher
            .clone(),
    };
    let mut fleet = Fleet {
        program,
        config,
        logs: logs.path().to_owned(),
        instances: Vec::new(),
        settles: Vec::new(),
    };
    let soak = Duration::from_secs(crate::env_u64("FLEET_SECONDS", 0));
    let began = Instant::now();

    fleet.start(24);
    // 24 debug builds starting at once on two cores take tens of seconds (56 s seen).
    fleet.settle_within("24 started", LEASE * 20).await;
    let postmaster = postmaster(&db).await;
    let idle = cpu_over(postmaster, Duration::from_secs(10)).await;
    let mut round = 0;
    loop {
        round += 1;
        fleet.start(8);
        fleet.settle(&format!("round {round}: 8 joined (32)")).await;
        fleet.kill(8);
        fleet
            .settle(&format!("round {round}: 8 SIGKILLed (24)"))
            .await;
        let paused = fleet.pause(4);
        fleet
            .settle(&format!("round {round}: 4 SIGSTOPped (20 running)"))
            .await;
        fleet.resume(&paused);
        fleet
            .settle(&format!("round {round}: 4 resumed (24)"))
            .await;
        fleet.terminate(4);
        fleet.settle(&format!("round {round}: 4 left (20)")).await;
        fleet.start(12);
        fleet
            .settle(&format!("round {round}: 12 joined (32)"))
            .await;
        if began.elapsed() >= soak {
            break;
        }
        // Back to 24 for the next round.
        fleet.terminate(8);
        fleet.settle(&format!("round {round}: 8 left (24)")).await;
    }

    // A backlog over many order keys, drained by the 32.
    let outbox = db.outbox().await;
    let lease = outbox
        .try_acquire("fleet:backlog", Duration::from_secs(300))
        .await
        .expect("acquire")
        .expect("free");
    let backlog = if debug { 500 } else { BACKLOG };
    let ops: Vec<Operation> = (0..backlog)
        .map(|i| {
            Operation::post("statements", "/v1/statements")
                .json(&serde_json::json!({ "n": i }))
                .idempotency_key(format!("fleet-{i}"))
                .order_key(format!("account-{}", i % 512))
                .build()
                .expect("an op")
        })
        .collect();
    for chunk in ops.chunks(500) {
        outbox
            .enqueue_batch(&lease, chunk)
            .await
            .expect("enqueue the backlog");
    }
    let drain_began = Instant::now();
    let cpu_before = db_cpu(postmaster);
    wait_for(
        Duration::from_secs(300),
        "the fleet drains the backlog",
        || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            (destination.received().len() >= backlog).then_some(())
        },
    )
    .await;
    let drain = drain_began.elapsed();
    let draining = (db_cpu(postmaster) - cpu_before) / drain.as_secs_f64();
    let delivered = wait_for(
        Duration::from_secs(60),
        "every op recorded delivered",
        || async {
            let ops = db.ops().await;
            ops.iter()
                .all(|o| o.state == "delivered")
                .then_some(ops.len())
        },
    )
    .await;
    fleet.stop_all();

    let periods = |d: &Duration| d.as_secs_f64() / LEASE.as_secs_f64();
    let worst = fleet
        .settles
        .iter()
        .skip(1)
        .map(|(_, d)| periods(d))
        .fold(0.0, f64::max);
    let cold = periods(&fleet.settles[0].1);
    let lines: Vec<String> = fleet
        .settles
        .iter()
        .map(|(what, d)| {
            format!(
                "  {what}: fair after {:.1} s ({:.2} lease periods)",
                d.as_secs_f64(),
                d.as_secs_f64() / LEASE.as_secs_f64()
            )
        })
        .collect();
    say(&format!(
        "fleet summary ({INSTANCES} dispatchers at most, {PARTITIONS} partitions, lease {LEASE:?}, \
         {} build, {round} rounds in {:.0} s; cold start {cold:.2} lease periods, worst burst \
         {worst:.2}):\n{}\n  database CPU: \
         {:.1} % of a core while idle (24 instances), {:.1} % while draining {backlog} ops in \
         {:.1} s ({:.0} ops/s); {delivered} ops delivered, {} requests received",
        if debug { "debug" } else { "release" },
        began.elapsed().as_secs_f64(),
        lines.join("\n"),
        idle * 100.0,
        draining * 100.0,
        drain.as_secs_f64(),
        backlog as f64 / drain.as_secs_f64(),
        destination.received().len(),
    ));
    assert!(
        worst <= SETTLE_PERIODS,
        "a burst took {worst:.2} lease periods to settle to a fair split, more than {SETTLE_PERIODS}"
    );
    // 24 debug builds starting at once keep both cores busy for tens of seconds (18 to 33 s
    // seen): their start-up, not the membership, bounds that figure, so it is reported only.
    assert!(
        debug || cold <= SETTLE_PERIODS,
        "24 dispatchers started at once took {cold:.2} lease periods to settle, more than \
         {SETTLE_PERIODS}"
    );
}

/// The shared config: 256 partitions on a 6 s lease, the metrics listener per process from
/// `OUTBOX_DISPATCHER_LISTEN`.
fn configure(dir: &Path, database_url: &str, destination: &str) -> PathBuf {
    let config = dir.join("fleet.toml");
    let poll = match std::env::var("FLEET_POLL") {
        Ok(poll) => format!("poll_interval = {poll:?}\n"),
        Err(_) => String::new(),
    };
    let text = format!(
        "[database]\nurl = {database_url:?}\nmax_connections = 4\n\
         [dispatcher]\n{poll}lease_ttl = \"{}s\"\npartitions = {PARTITIONS}\nshutdown_grace = \"5s\"\n\
         [destinations.statements]\nbase_url = {destination:?}\ntimeout = \"2s\"\nmax_in_flight = 512\n\
         retry = {{ base = \"100ms\", cap = \"1s\", max_attempts = 1000, max_age = \"1h\" }}\n",
        LEASE.as_secs()
    );
    std::fs::write(&config, text).expect("write the fleet's config");
    config
}

/// One dispatcher process of the fleet.
struct Instance {
    child: Child,
    port: u16,
    paused: bool,
}

/// The fleet's processes and what each burst took to settle.
struct Fleet {
    program: PathBuf,
    config: PathBuf,
    logs: PathBuf,
    instances: Vec<Instance>,
    settles: Vec<(String, Duration)>,
}

impl Fleet {
    /// Starts `n` more instances at once.
    fn start(&mut self, n: usize) {
        for _ in 0..n {
            // A port free now and not handed to another instance still starting.
            let port = loop {
                let port = outbox_tests::pg::free_port().expect("a free port");
                if !self.instances.iter().any(|i| i.port == port) {
                    break port;
                }
            };
            let k = self.instances.len();
            let log = std::fs::File::create(self.logs.join(format!("fleet-{k}-{port}.log")))
                .expect("a log file");
            let child = Command::new(&self.program)
                .arg("--config")
                .arg(&self.config)
                .env("OUTBOX_DISPATCHER_LISTEN", format!("127.0.0.1:{port}"))
                .env(
                    "RUST_LOG",
                    std::env::var("FLEET_LOG").unwrap_or_else(|_| "warn".to_owned()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start a dispatcher");
            self.instances.push(Instance {
                child,
                port,
                paused: false,
            });
        }
    }

    /// SIGKILLs `n` running instances (the oldest first).
    fn kill(&mut self, n: usize) {
        let mut left = n;
        self.instances.retain_mut(|i| {
            if left > 0 && !i.paused {
                left -= 1;
                let _ = i.child.kill();
                let _ = i.child.wait();
                false
            } else {
                true
            }
        });
    }

    /// SIGSTOPs `n` running instances (the newest first); their indexes.
    fn pause(&mut self, n: usize) -> Vec<usize> {
        let picked: Vec<usize> = (0..self.instances.len()).rev().take(n).collect();
        for &k in &picked {
            signal(&self.instances[k].child, "-STOP");
            self.instances[k].paused = true;
        }
        picked
    }

    /// SIGCONTs the instances `paused` named.
    fn resume(&mut self, paused: &[usize]) {
        for &k in paused {
            signal(&self.instances[k].child, "-CONT");
            self.instances[k].paused = false;
        }
    }

    /// SIGTERMs `n` instances (the oldest first) and waits for each to exit 0.
    fn terminate(&mut self, n: usize) {
        let leaving: Vec<Instance> = self
            .instances
            .drain(..n.min(self.instances.len()))
            .collect();
        for i in &leaving {
            signal(&i.child, "-TERM");
        }
        for mut i in leaving {
            let status = i.child.wait().expect("wait for a leaving dispatcher");
            assert!(status.success(), "a dispatcher left with {status}");
        }
    }

    /// SIGKILLs every instance.
    fn stop_all(&mut self) {
        for i in &mut self.instances {
            if i.paused {
                signal(&i.child, "-CONT");
            }
            let _ = i.child.kill();
            let _ = i.child.wait();
        }
        self.instances.clear();
    }

    /// Waits until the running instances split the partitions fairly; notes how long that took
    /// after `what` happened (now). Ten lease periods at most.
    async fn settle(&mut self, what: &str) {
        self.settle_within(what, LEASE * 10).await;
    }

    /// As [`Fleet::settle`], `longest` at most.
    async fn settle_within(&mut self, what: &str, longest: Duration) {
        let burst = Instant::now();
        let deadline = burst + longest;
        loop {
            let counts = self.leading().await;
            if fair(&counts) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no fair split after {longest:?}; partitions led per running instance: \
                 {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let took = burst.elapsed();
        say(&format!(
            "fleet: {what}: fair after {:.1} s",
            took.as_secs_f64()
        ));
        self.settles.push((what.to_owned(), took));
    }

    /// How many partitions each running instance leads, by its `/metrics` (`None` when it did
    /// not answer).
    async fn leading(&mut self) -> Vec<Option<usize>> {
        for i in &mut self.instances {
            if let Ok(Some(status)) = i.child.try_wait() {
                panic!(
                    "the dispatcher listening on {} exited with {status}; its log is in {}",
                    i.port,
                    self.logs.display()
                );
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (k, i) in self.instances.iter().enumerate().filter(|(_, i)| !i.paused) {
            let port = i.port;
            tasks.spawn(async move { (k, led(port).await) });
        }
        let mut counts: Vec<(usize, Option<usize>)> = tasks.join_all().await;
        counts.sort_unstable();
        counts.into_iter().map(|(_, c)| c).collect()
    }
}

impl Drop for Fleet {
    /// A run that failed midway leaves no process behind: 32 debug dispatchers retrying
    /// against a stopped database would starve every test after it.
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Whether every instance answered and leads ⌊P/n⌋ or ⌈P/n⌉ partitions, all P together.
fn fair(counts: &[Option<usize>]) -> bool {
    let n = counts.len();
    if n == 0 || counts.iter().any(Option::is_none) {
        return false;
    }
    let (low, high) = (PARTITIONS / n, PARTITIONS.div_ceil(n));
    let led: Vec<usize> = counts.iter().flatten().copied().collect();
    led.iter().sum::<usize>() == PARTITIONS && led.iter().all(|&c| c == low || c == high)
}

/// The partitions the dispatcher whose metrics listen on `port` leads: its
/// `outbox_partition_leader` lines at 1.
async fn led(port: u16) -> Option<usize> {
    let read = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        Some(
            text.lines()
                .filter(|l| l.starts_with("outbox_partition_leader{") && l.ends_with(" 1"))
                .count(),
        )
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()
        .flatten()
}

/// The database server's postmaster: the parent of a backend of this connection's.
async fn postmaster(db: &TestDb) -> u32 {
    use sqlx::Connection as _;
    let mut c = sqlx::PgConnection::connect(db.url())
        .await
        .expect("connect");
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut c)
        .await
        .expect("the backend's pid");
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).expect("its stat");
    // After the command's closing parenthesis: state, then the parent's pid.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .expect("the backend's parent")
}

/// The CPU time (user and system, seconds) of the database's processes so far: the postmaster
/// and every process under it (those that ended since are not counted: the dispatchers keep
/// their connections, so few do).
fn db_cpu(postmaster: u32) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let mut pids = vec![postmaster];
    let mut next = 0;
    while let Some(&pid) = pids.get(next) {
        pids.extend(children(pid));
        next += 1;
    }
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // The fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
        })
        .sum::<f64>()
        / ticks
}

/// The children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The database's CPU over `window`, as a fraction of one core.
async fn cpu_over(postmaster: u32, window: Duration) -> f64 {
    let before = db_cpu(postmaster);
    tokio::time::sleep(window).await;
    (db_cpu(postmaster) - before) / window.as_secs_f64()
}
