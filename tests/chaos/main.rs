//! The chaos suite: six real worker processes (the example `statement_worker`) race over four
//! accounts with 1–2 s leases while a driver stops them past their leases (SIGSTOP/SIGCONT),
//! SIGKILLs and restarts dispatchers (a leader and a standby), stops one past its partition
//! lease and, on PostgreSQL, restarts the database (not on SQLite or SQL Server); the
//! destination answers 503 or stalls at random. After the drain, the checker proves nothing
//! was lost, no stale or unexpected call was sent, order held, duplicates were identical, and
//! the faults really happened.
//!
//! The membership variant (`*_membership`) runs the same faults with up to three dispatchers
//! on four partitions: one at first, a second and a third joining over time, one leaving
//! gracefully (SIGTERM, exit 0) and starting again; the checker also proves those changes
//! happened (the split changed, three instances led at once, a leave and a start again).
//!
//! `CHAOS_SECONDS` (default 60, 40 for the membership variant; at least 15) sets how long the
//! faults go on, for longer soaks; `CHAOS_SEED` replaces the fixed seed of the driver, the
//! workers and the destination.

mod check;
mod membership;
mod procs;

use std::path::Path;
use std::time::{Duration, Instant};

use outbox_tests::{Received, Receiver, Reply, Rng, TestDb, wait_for};

use check::{Evidence, Faults, Report, STALL, StoredOp, WorkerLog};
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

/// A run on a PostgreSQL cluster of the test's own, restarted halfway; on the `DATABASE_URL`
/// server, without the restart.
async fn on_postgres(variant: Variant) {
    match TestDb::postgres_own_cluster().await {
        Some(db) => chaos("postgres", db, true, variant).await,
        None => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr().lock(),
                b"chaos: the database restart is skipped: DATABASE_URL names a server this test cannot restart\n",
            );
            chaos("postgres", TestDb::postgres().await, false, variant).await;
        }
    }
}

/// One chaos run on `db`; panics with the checker's report when a guarantee broke.
async fn chaos(backend: &str, db: TestDb, restart_database: bool, variant: Variant) {
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

    let destination = Receiver::start_with(flaky(seed)).await;
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

    let faults = drive(
        &db,
        &mut workers,
        &mut dispatchers,
        fleet,
        period,
        seed,
        restart_database,
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

    let evidence = Evidence {
        workers: lines
            .iter()
            .map(|(name, lines)| WorkerLog::parse(name, lines))
            .collect(),
        ops: ops
            .into_iter()
            .map(|o| StoredOp {
                key: o.idempotency_key,
                resource: o.resource,
                order_key: o.order_key,
                seq: o.seq,
                fence: o.fence,
                state: o.state,
                body: o.body,
            })
            .collect(),
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

/// The third-party API's moods, from `seed`: 10 % of requests get 503, 4 % are held past the
/// dispatcher's timeout (then answered 200), the rest get 200 at once.
fn flaky(seed: u64) -> impl FnMut(&Received) -> Reply + Send + 'static {
    let mut rng = Rng::new(seed);
    move |_| match rng.below(100) {
        0..10 => Reply::status(503),
        10..14 => Reply::status(200).after(STALL),
        _ => Reply::status(200),
    }
}

/// Injects faults for `period`: pauses workers past their lease, kills and restarts a
/// dispatcher, pauses one past its partition lease, restarts the database once halfway when
/// asked, and lets `fleet` (the membership variant) add, stop and start dispatchers. Every
/// process is running again when it returns.
async fn drive(
    db: &TestDb,
    workers: &mut [Worker],
    dispatchers: &mut Vec<Dispatcher>,
    mut fleet: Option<Fleet>,
    period: Duration,
    seed: u64,
    restart_database: bool,
) -> Faults {
    let mut rng = Rng::new(seed);
    let mut faults = Faults::default();
    let start = Instant::now();
    // Stop injecting a little before the workers stop, so the last pauses end in their run.
    let end = start + period.saturating_sub(MAX_LEASE * 2);
    let mut last_kill = start;
    let mut restart_due = restart_database;
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
        if restart_due && now.duration_since(start) > period / 2 {
            restart_due = false;
            tokio::task::block_in_place(|| {
                db.stop_server();
                std::thread::sleep(Duration::from_secs(1));
                db.start_server();
            });
            faults.database_restarts += 1;
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

/// The checker itself: it must see the violations it exists to catch.
mod checker {
    use std::time::{Duration, Instant};

    use outbox_tests::Received;

    use crate::check::{
        Enqueue, Evidence, Membership, Outcome, Report, STALL, StoredOp, WorkerLog,
    };

    /// How the destination answered, in the tests below.
    #[derive(Clone, Copy)]
    enum Answer {
        Ok,
        Unavailable,
        Stalled,
    }

    fn enqueue(key: &str, token: i64, outcome: Outcome) -> Enqueue {
        Enqueue {
            worker: "w0".to_owned(),
            token,
            key: key.to_owned(),
            outcome,
            batch: false,
        }
    }

    fn op(key: &str, seq: i64, fence: i64) -> StoredOp {
        StoredOp {
            key: key.to_owned(),
            resource: "statement:1".to_owned(),
            order_key: Some("statement:1".to_owned()),
            seq,
            fence,
            state: "delivered".to_owned(),
            body: key.as_bytes().to_vec(),
        }
    }

    fn request(key: &str, token: i64, answer: Answer) -> Received {
        let (status, delay) = match answer {
            Answer::Ok => (200, Duration::ZERO),
            Answer::Unavailable => (503, Duration::ZERO),
            Answer::Stalled => (200, STALL),
        };
        let at = Instant::now();
        Received {
            method: "POST".to_owned(),
            path: "/v1/statements".to_owned(),
            headers: [
                ("idempotency-key".to_owned(), key.to_owned()),
                ("x-fencing-token".to_owned(), token.to_string()),
            ]
            .into(),
            body: key.as_bytes().to_vec(),
            at,
            status,
            delay,
            done: Some(at + delay),
        }
    }

    /// Two accepted ops and one stale refusal, delivered correctly after a 503 and a stall.
    fn healthy() -> Evidence {
        Evidence {
            workers: vec![WorkerLog {
                enqueues: vec![
                    enqueue("k1", 1, Outcome::Accepted),
                    enqueue("k2", 2, Outcome::Accepted),
                    enqueue("k3", 1, Outcome::Stale),
                ],
                jobs: 2,
                ..WorkerLog::default()
            }],
            ops: vec![op("k1", 1, 1), op("k2", 2, 2)],
            failed_attempts: 1,
            requests: vec![
                request("k1", 1, Answer::Unavailable),
                request("k1", 1, Answer::Stalled),
                request("k1", 1, Answer::Ok),
                request("k2", 2, Answer::Ok),
            ],
            faults: crate::check::Faults {
                pauses: 1,
                dispatcher_restarts: 1,
                ..crate::check::Faults::default()
            },
        }
    }

    fn problems(evidence: &Evidence) -> String {
        Report::new(evidence).problems().join("\n")
    }

    #[test]
    fn a_correct_run_has_no_problems() {
        assert_eq!(problems(&healthy()), "");
    }

    #[test]
    fn it_catches_a_lost_op() {
        let mut e = healthy();
        e.requests.retain(|r| r.header("idempotency-key") != "k2");
        assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
        // Answered only after the dispatcher gave up: it never learnt; not delivered either.
        e.requests.push(request("k2", 2, Answer::Stalled));
        assert!(problems(&e).contains("(a) lost: 1"), "{}", problems(&e));
    }

    #[test]
    fn it_catches_a_stale_send_and_a_refused_op_in_the_table() {
        let mut e = healthy();
        e.requests.push(request("k3", 1, Answer::Ok));
        e.ops.push(op("k3", 3, 1));
        let found = problems(&e);
        assert!(found.contains("(b) stale sends: 1"), "{found}");
        assert!(found.contains("(b) refused ops in the table: 1"), "{found}");
    }

    #[test]
    fn it_catches_an_op_accepted_after_a_newer_tokens_op() {
        let mut e = healthy();
        e.workers[0]
            .enqueues
            .push(enqueue("k4", 1, Outcome::Accepted));
        e.ops.push(op("k4", 3, 1));
        e.requests.push(request("k4", 1, Answer::Ok));
        let found = problems(&e);
        assert!(found.contains("(b) stale accepts: 1"), "{found}");
    }

    #[test]
    fn it_catches_an_unexpected_request_and_a_wrong_token() {
        let mut e = healthy();
        e.requests.push(request("nobody", 7, Answer::Ok));
        e.requests.push(request("k2", 9, Answer::Ok));
        assert!(
            problems(&e).contains("(c) unexpected: 2"),
            "{}",
            problems(&e)
        );
    }

    #[test]
    fn it_catches_first_deliveries_out_of_enqueue_order() {
        let mut e = healthy();
        e.requests.insert(0, request("k2", 2, Answer::Unavailable));
        assert!(
            problems(&e).contains("(d) out of order: 1"),
            "{}",
            problems(&e)
        );
    }

    #[test]
    fn it_catches_duplicates_that_differ() {
        let mut e = healthy();
        let mut copy = request("k2", 2, Answer::Ok);
        copy.body = b"something else".to_vec();
        e.requests.push(copy);
        assert!(
            problems(&e).contains("(e) differing duplicates: 1"),
            "{}",
            problems(&e)
        );
    }

    #[test]
    fn a_run_without_faults_proves_nothing() {
        let mut e = healthy();
        e.workers[0].enqueues.pop();
        e.failed_attempts = 0;
        e.faults.dispatcher_restarts = 0;
        let found = problems(&e);
        for what in ["stale rejections", "dispatcher restarts", "retries"] {
            assert!(found.contains(&format!("(f) {what} = 0")), "{found}");
        }
    }

    /// The membership variant's record of a run where everything it must exercise happened.
    fn membership() -> Membership {
        Membership {
            joined: 2,
            left: 1,
            unclean_leaves: Vec::new(),
            rejoined: 1,
            splits: vec![
                vec![4],
                vec![2, 2],
                vec![2, 1, 1],
                vec![2, 2],
                vec![2, 1, 1],
            ],
        }
    }

    #[test]
    fn a_membership_run_that_changed_nothing_proves_nothing() {
        let mut e = healthy();
        e.faults.membership = Some(membership());
        assert_eq!(problems(&e), "");
        e.faults.membership = Some(Membership {
            joined: 0,
            left: 0,
            rejoined: 0,
            splits: vec![vec![4]],
            ..membership()
        });
        let found = problems(&e);
        for what in [
            "joins",
            "graceful leaves",
            "starts after a leave",
            "split changes",
            "splits with three leaders",
        ] {
            assert!(found.contains(&format!("(g) {what} = 0")), "{found}");
        }
    }

    #[test]
    fn it_catches_a_graceful_leave_that_did_not_exit_cleanly() {
        let mut e = healthy();
        e.faults.membership = Some(Membership {
            unclean_leaves: vec!["d1 exited with exit status: 1".to_owned()],
            ..membership()
        });
        let found = problems(&e);
        assert!(
            found.contains("(g) graceful leaves that did not exit 0: 1"),
            "{found}"
        );
    }

    #[test]
    fn an_unknown_outcome_is_resolved_by_the_table() {
        let mut e = healthy();
        e.workers[0].enqueues.push(enqueue("k4", 2, Outcome::Error));
        e.workers[0].enqueues.push(enqueue("k5", 2, Outcome::Error));
        e.ops.push(op("k4", 3, 2));
        e.requests.push(request("k4", 2, Answer::Ok));
        assert_eq!(problems(&e), "");
        e.requests.push(request("k5", 2, Answer::Ok));
        assert!(
            problems(&e).contains("(b) stale sends: 1"),
            "{}",
            problems(&e)
        );
    }
}
