//! The chaos suite: six real worker processes (the example `statement_worker`), and on
//! PostgreSQL a seventh in Python over the SQL API (`examples/python`), race over four
//! accounts with 1–2 s leases while a driver stops them past their leases (SIGSTOP/SIGCONT),
//! SIGKILLs and restarts dispatchers (a leader and a standby), stops one past its partition
//! lease and, on PostgreSQL, crashes the database once halfway (SIGKILL to the postmaster and
//! all its processes, then a start with crash recovery; not on SQLite or SQL Server).
//!
//! The destination answers as a hostile third party would (G11), at random: 503, a stall past
//! the dispatcher's timeout, bodies of NUL, bytes that are not UTF-8 and terminal escapes under
//! odd headers, bodies that never end (quickly or in a trickle) or are far larger than the
//! dispatcher reads, no answer at all (the connection reset once the request was read), and
//! redirects to another recording server on 127.0.0.1, which must receive nothing: redirects
//! are not followed, and a redirected op is dead (3xx is permanent). After the drain, the
//! checker proves nothing was lost (every op delivered, or dead after a redirect), no stale or
//! unexpected call was sent, nothing left the destination's origin, order held, duplicates were
//! identical, and the faults really happened.
//!
//! The membership variant (`*_membership`) runs the same faults with up to three dispatchers
//! on four partitions: one at first, a second and a third joining over time, one leaving
//! gracefully (SIGTERM, exit 0) and starting again; the checker also proves those changes
//! happened (the split changed, three instances led at once, a leave and a start again).
//!
//! The failover variant (`failover::*`, `failover.rs`) runs workers and dispatchers through
//! HAProxy in front of two PostgreSQL nodes under Patroni and SIGKILLs the primary.
//!
//! The production faults (`fault.rs` runs each through the same workers, dispatchers and
//! checker): a full disk (`disk_full.rs`, the tables' and the WAL's), no connections left
//! (`connections.rs`), a pooler's pool exhausted (`pooler.rs`), a dispatcher cut from the
//! database or the destination or behind a slow link (`network.rs`); and 32 dispatchers on 256
//! partitions in bursts (`fleet.rs`).
//!
//! `CHAOS_SECONDS` (default 60, 40 for the membership variant; at least 15) sets how long the
//! faults go on, for longer soaks; `CHAOS_SEED` replaces the fixed seed of the driver, the
//! workers and the destination.

mod check;
mod checker;
mod connections;
mod disk_full;
mod failover;
mod fault;
mod fleet;
mod membership;
mod network;
mod pooler;
mod procs;
mod run;
mod turn;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_tests::{Received, Receiver, Reply, Rng, TestDb, wait_for};

use check::{Evidence, Faults, Hostile, Report, STALL, StoredOp, WorkerLog};
use membership::Fleet;
use procs::{Dispatcher, Worker, WorkerSpec};

/// The seed of every random choice when `CHAOS_SEED` is not set.
const SEED: u64 = 0x5EED_0007;
/// Worker processes.
const WORKERS: usize = 6;
/// Dispatcher instances of the standby run: a leader and a standby.
const DISPATCHERS: usize = 2;
/// The dispatchers' partition lease; their pauses last longer than this.
const DISPATCHER_LEASE: Duration = Duration::from_secs(3);
/// Longest worker lease; pauses last longer than this.
const MAX_LEASE: Duration = Duration::from_secs(2);

/// The run's folder of process logs: removed after a passing run, kept and named when the run
/// panics, whatever the panic.
struct Logs(Option<tempfile::TempDir>);

impl Logs {
    fn new() -> Logs {
        Logs(Some(
            tempfile::Builder::new()
                .prefix("chaos-")
                .tempdir()
                .expect("log dir"),
        ))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().expect("log dir").path()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "chaos: the processes' logs are kept in {}",
                dir.keep().display()
            );
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|e| panic!("{name}={text:?} is not a whole number: {e}")),
        Err(_) => default,
    }
}

/// Which dispatchers a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// A leader and a standby on one partition, from start to end.
    Standby,
    /// Up to three instances on [`membership::PARTITIONS`] partitions, joining and leaving.
    Membership,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    chaos("sqlite", TestDb::sqlite().await, false, Variant::Standby).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    on_postgres(Variant::Standby).await;
}

/// The same run on SQL Server, without the database restart: the tests do not run that server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn mssql() {
    let db = TestDb::mssql().await;
    // The standby must drain what the killed leader left within the run's deadline.
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    chaos("mssql", db, false, Variant::Standby).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_membership() {
    chaos("sqlite", TestDb::sqlite().await, false, Variant::Membership).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_membership() {
    on_postgres(Variant::Membership).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
async fn mssql_membership() {
    let db = TestDb::mssql().await;
    // Its rounds must see splits change within their time; on Babelfish they did not.
    if db.skip_on_babelfish(outbox_tests::babelfish::SLOW_BATCHES) {
        return;
    }
    chaos("mssql", db, false, Variant::Membership).await;
}

/// A run on a PostgreSQL cluster of the test's own, crashed halfway; on the `DATABASE_URL`
/// server, without the crash.
async fn on_postgres(variant: Variant) {
    match TestDb::postgres_own_cluster().await {
        Some(db) => chaos("postgres", db, true, variant).await,
        None => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr().lock(),
                b"chaos: the database crash is skipped: DATABASE_URL names a server this test cannot crash\n",
            );
            chaos("postgres", TestDb::postgres().await, false, variant).await;
        }
    }
}

/// One chaos run on `db`, crashing its server halfway when `crash_database`; panics with the
/// checker's report when a guarantee broke.
async fn chaos(backend: &str, db: TestDb, crash_database: bool, variant: Variant) {
    let _turn = turn::shared().await;
    let default_seconds = match variant {
        Variant::Standby => 60,
        Variant::Membership => 40,
    };
    let seconds = env_u64("CHAOS_SECONDS", default_seconds);
    assert!(
        seconds >= 15,
        "CHAOS_SECONDS={seconds}: at least 15, or the run cannot exercise every fault"
    );
    let seed = env_u64("CHAOS_SEED", SEED);
    let period = Duration::from_secs(seconds);
    tokio::task::spawn_blocking(procs::binaries)
        .await
        .expect("build the binaries");
    let logs = Logs::new();
    drop(db.outbox().await); // migrated before anyone starts

    // Where the destination's redirects point: a real server, which must receive nothing.
    let elsewhere = Receiver::start().await;
    let moods = Arc::new(Mutex::new(Hostile::default()));
    let destination = Receiver::start_with(flaky(seed, elsewhere.url(), moods.clone())).await;
    let (partitions, first) = match variant {
        Variant::Standby => (1, DISPATCHERS),
        Variant::Membership => (membership::PARTITIONS, 1),
    };
    let config = Dispatcher::configure(logs.path(), db.url(), &destination.url(), partitions);
    let mut dispatchers: Vec<Dispatcher> = (0..first)
        .map(|i| Dispatcher::start(&config, &format!("d{i}")))
        .collect();
    let fleet = match variant {
        Variant::Standby => None,
        Variant::Membership => Some(Fleet::new(
            &config,
            db.store().await,
            seed,
            Instant::now(),
            period,
        )),
    };
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| {
            let spec = WorkerSpec {
                name: format!("w{i}"),
                seed: seed.wrapping_add(1 + i as u64),
                uncooperative: i % 2 == 0,
                run_for: period,
            };
            Worker::start(db.url(), &spec, &logs.path().join(format!("w{i}.log")))
        })
        .collect();
    // On PostgreSQL, a Python worker over the SQL API races the Rust ones for the same accounts.
    if backend == "postgres" {
        let spec = WorkerSpec {
            name: "py".to_owned(),
            seed: seed.wrapping_add(1 + WORKERS as u64),
            uncooperative: true,
            run_for: period,
        };
        workers.push(Worker::start_python(
            db.url(),
            &spec,
            &logs.path().join("py.log"),
        ));
    }

    let mut faults = drive(
        &db,
        &mut workers,
        &mut dispatchers,
        fleet,
        period,
        seed,
        crash_database,
    )
    .await;

    let lines: Vec<(String, Vec<String>)> = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .map(|w| (w.name.clone(), w.finish(Duration::from_secs(60))))
            .collect()
    })
    .await
    .expect("workers finished");
    let drained = Instant::now();
    let ops = wait_for(
        Duration::from_secs(150),
        "the dispatcher drains the outbox",
        || async {
            let ops = db.ops().await;
            ops.iter()
                .all(|o| o.state == "delivered" || o.state == "dead")
                .then_some(ops)
        },
    )
    .await;
    let drain = drained.elapsed();
    let logged = |text: &str| dispatchers.iter().map(|d| d.logged(text)).sum::<usize>();
    let database_retries = logged("database call failed") + logged("database unreachable");
    let discarded = logged("completion discarded");
    for d in dispatchers {
        d.stop();
    }
    let failed_attempts = db
        .attempts()
        .await
        .iter()
        .filter(|a| a.outcome.as_deref() != Some("delivered"))
        .count();

    faults.hostile = Some(Hostile {
        off_origin: elsewhere.received(),
        ..moods.lock().unwrap().clone()
    });
    let evidence = Evidence {
        workers: lines
            .iter()
            .map(|(name, lines)| WorkerLog::parse(name, lines))
            .collect(),
        ops: ops.into_iter().map(StoredOp::from).collect(),
        failed_attempts,
        requests: destination.received(),
        faults,
    };
    let report = Report::new(&evidence);
    // Straight to stderr, past the test harness's capture: the summary is the evidence, so
    // it is printed whether the run passes or fails.
    let summary = format!(
        "chaos summary ({backend}, {variant:?}, seed {seed:#x}, {seconds} s of faults, drained in {:.1} s; \
         dispatchers retried {database_retries} database calls and discarded {discarded} \
         completions after losing their lease):\n{report}\n",
        drain.as_secs_f64()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), summary.as_bytes());
    let problems = report.problems();
    if !problems.is_empty() {
        panic!(
            "chaos on {backend} broke a guarantee:\n{}",
            problems.join("\n")
        );
    }
}

/// A body of NUL, bytes that are not UTF-8, terminal escapes (colour, bell, carriage return).
const HOSTILE_BODY: &[u8] =
    b"before\0nul \xff\xfe not utf-8 \x1b[31mred\x1b[0m bell\x07 cr\r line\nnext\ttab end";

/// The third-party API's moods, from `seed`, per thousand requests: 100 get 503; 40 are held
/// past the dispatcher's timeout (then answered 200); 30 get [`HOSTILE_BODY`] under odd headers
/// ([`hostile_bytes`]); 30 get a body that never ends or is huge ([`endless`]); 30 get no
/// answer (the connection is reset once the request was read); 15 are redirected to the same
/// path at `elsewhere`, another server (the op is dead: 3xx is permanent); the rest get 200
/// at once. `moods` counts the hostile bodies, which the destination's record cannot tell.
fn flaky(
    seed: u64,
    elsewhere: String,
    moods: Arc<Mutex<Hostile>>,
) -> impl FnMut(&Received) -> Reply + Send + 'static {
    let mut rng = Rng::new(seed);
    move |request| match rng.below(1000) {
        0..100 => Reply::status(503),
        100..140 => Reply::status(200).after(STALL),
        140..170 => {
            moods.lock().unwrap().bytes += 1;
            hostile_bytes(&mut rng)
        }
        170..200 => {
            moods.lock().unwrap().endless += 1;
            endless(&mut rng)
        }
        200..230 => Reply::reset(),
        230..245 => {
            let status = [301, 302, 303, 307, 308][rng.below(5) as usize];
            Reply::status(status).header("location", &format!("{elsewhere}{}", request.path))
        }
        _ => Reply::status(200),
    }
}

/// [`HOSTILE_BODY`] as a 200, 500 or 503, under headers whose values are bytes that are not
/// UTF-8, empty, repeated or 4 KiB long, a name of odd token characters, a `Retry-After` that
/// is no number, and a content type that lies about the charset.
fn hostile_bytes(rng: &mut Rng) -> Reply {
    let status = [200, 500, 503][rng.below(3) as usize];
    Reply::status(status)
        .body_bytes(HOSTILE_BODY)
        .header_bytes("x-not-utf8", b"caf\xe9 \xff\xfe\tend")
        .header("x-empty", "")
        .header("x-twice", "one")
        .header("x-twice", "two")
        .header("x-long", &"a".repeat(4096))
        .header("x-!#$%&'*+.^_`|~", "odd token characters")
        .header_bytes("retry-after", b"\xff soon")
        .header("content-type", "text/plain; charset=utf-8")
}

/// A 200 or 503 whose body never ends, fast (chunked, or until a close that never comes) or in
/// a trickle that outlasts the dispatcher's timeout; or a complete body of 4 MiB.
fn endless(rng: &mut Rng) -> Reply {
    let status = [200, 503][rng.below(2) as usize];
    match rng.below(4) {
        0 => Reply::endless(status, 16 * 1024, Duration::ZERO, true),
        1 => Reply::endless(status, 16 * 1024, Duration::ZERO, false),
        2 => Reply::endless(status, 64, Duration::from_millis(20), true),
        _ => Reply::status(status).body_bytes(&vec![b'x'; 4 << 20]),
    }
}

/// Injects faults for `period`: pauses workers past their lease, kills and restarts a
/// dispatcher, pauses one past its partition lease, crashes the database once halfway when
/// asked (SIGKILL to all its processes, a second down, then a start with crash recovery), and
/// lets `fleet` (the membership variant) add, stop and start dispatchers. Every process is
/// running again when it returns.
async fn drive(
    db: &TestDb,
    workers: &mut [Worker],
    dispatchers: &mut Vec<Dispatcher>,
    mut fleet: Option<Fleet>,
    period: Duration,
    seed: u64,
    crash_database: bool,
) -> Faults {
    let mut rng = Rng::new(seed);
    let mut faults = Faults::default();
    let start = Instant::now();
    // Stop injecting a little before the workers stop, so the last pauses end in their run.
    let end = start + period.saturating_sub(MAX_LEASE * 2);
    let mut last_kill = start;
    let mut crash_due = crash_database;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(300 + rng.below(500))).await;
        let now = Instant::now();
        for w in workers.iter_mut() {
            w.proc.resume_if_due(now);
        }
        for d in dispatchers.iter_mut() {
            d.proc.resume_if_due(now);
        }
        if let Some(fleet) = fleet.as_mut() {
            fleet.step(now, dispatchers).await;
        }
        // The dispatcher faults below pick among the instances that run: all of them, but
        // for one leaving or left in the membership variant, which may also hold them back.
        let held_back = fleet.as_ref().is_some_and(|f| f.holds_faults(now));
        let up: Vec<usize> = (0..dispatchers.len())
            .filter(|&i| !held_back && !dispatchers[i].is_down())
            .collect();
        let paused = workers.iter().filter(|w| w.proc.is_paused()).count();
        let choice = rng.below(10);
        if choice < 4 && paused < WORKERS / 2 {
            let running: Vec<usize> = (0..workers.len())
                .filter(|&i| !workers[i].proc.is_paused())
                .collect();
            let pick = running[rng.below(running.len() as u64) as usize];
            let pause = MAX_LEASE + Duration::from_millis(500 + rng.below(1500));
            workers[pick].proc.pause(now + pause);
            faults.pauses += 1;
        }
        // Kill one at random, at most every 5 s; and surely once by a third of the run.
        let kill = (choice == 4 && now.duration_since(last_kill) > Duration::from_secs(5))
            || (faults.dispatcher_restarts == 0 && now.duration_since(start) > period / 3);
        if kill && !up.is_empty() {
            let pick = up[rng.below(up.len() as u64) as usize];
            dispatchers[pick].kill_and_restart();
            faults.dispatcher_restarts += 1;
            last_kill = now;
        }
        // Pause one past its partition lease (the leader or the standby), one at a time.
        if choice == 5 && !up.is_empty() && !dispatchers.iter().any(|d| d.proc.is_paused()) {
            let pick = up[rng.below(up.len() as u64) as usize];
            let pause = DISPATCHER_LEASE + Duration::from_millis(500 + rng.below(1500));
            dispatchers[pick].proc.pause(now + pause);
            faults.dispatcher_pauses += 1;
        }
        if crash_due && now.duration_since(start) > period / 2 {
            crash_due = false;
            tokio::task::block_in_place(|| {
                db.crash_server();
                std::thread::sleep(Duration::from_secs(1));
                db.start_server();
            });
            faults.database_crashes += 1;
        }
    }
    for w in workers.iter_mut().filter(|w| w.proc.is_paused()) {
        w.proc.resume();
    }
    for d in dispatchers.iter_mut().filter(|d| d.proc.is_paused()) {
        d.proc.resume();
    }
    if let Some(fleet) = fleet {
        faults.membership = Some(fleet.finish(dispatchers).await);
    }
    faults
}
