//! What the production-fault runs (`disk_full.rs`, `connections.rs`, `pooler.rs`,
//! `network.rs`) measure besides the chaos checker's counts: the workers' refusals during the
//! fault and whether each said the database was unavailable, and the time from the fault's end
//! to the next stored op.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use outbox_tests::pg::{Cluster, Limits};
use outbox_tests::{Received, Rng, TestDb};
use time::OffsetDateTime;

use crate::check::{Faults, Report};
use crate::run::{Run, say};

/// Seconds with a tenth, or "none".
pub(crate) fn seconds(d: Option<Duration>) -> String {
    d.map_or("none".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// A PostgreSQL of the run's own, short of what `limits` says (`what` names that in the
/// failure message), and a migrated-to-be database on it.
pub(crate) async fn limited_cluster(limits: Limits, what: &str) -> (Cluster, TestDb) {
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_limited(limits))
        .await
        .expect("cluster start task")
        .unwrap_or_else(|e| panic!("cannot start a PostgreSQL {what}: {e}"));
    let db = TestDb::postgres_on(&cluster.url("postgres")).await;
    (cluster, db)
}

/// What a log (a server's, a pooler's) gained after it was `from` bytes long.
pub(crate) fn log_since(log: &str, from: usize) -> &str {
    log.get(from..).unwrap_or_default()
}

/// From `at` to the first op stored after it.
pub(crate) async fn first_op_after(db: &TestDb, at: OffsetDateTime) -> Option<Duration> {
    db.ops()
        .await
        .iter()
        .map(|o| o.created_at)
        .filter(|&t| t > at)
        .min()
        .map(|t| Duration::try_from(t - at).unwrap_or_default())
}

/// The workers' refusals in a stretch of their lines: enqueue outcomes and loop errors, and
/// those that did not say the database was unavailable (the Rust workers print the store's
/// error, the Python one the SQLSTATE).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Enqueue outcomes that were errors.
    pub(crate) enqueues: usize,
    /// Errors outside an enqueue (acquire, release, connect).
    pub(crate) others: usize,
    /// Those that did not say the database was unavailable.
    pub(crate) wrong: Vec<String>,
}

impl Refusals {
    /// The refusals in `lines`.
    pub(crate) fn of(lines: &[String]) -> Refusals {
        let mut r = Refusals::default();
        for line in lines {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let error = if event["result"]["outcome"] == "error" {
                r.enqueues += 1;
                event["result"]["error"].as_str().unwrap_or_default()
            } else if event["event"] == "error" {
                r.others += 1;
                event["error"].as_str().unwrap_or_default()
            } else {
                continue;
            };
            if !says_unavailable(error) {
                r.wrong.push(error.to_owned());
            }
        }
        r
    }
}

/// Whether a worker's error says the database is unavailable: the Rust store's kind, or an
/// SQLSTATE of class 53 (insufficient resources), 08 (connection) or 57P (shutdown), and no
/// server source line ("at line 486").
fn says_unavailable(error: &str) -> bool {
    let typed = error.starts_with("postgres unavailable error: ")
        || ["53", "08", "57P"].iter().any(|c| error.starts_with(c))
        || error.contains("connection");
    typed && !error.contains(" at line ")
}

/// A fault a run goes through: brought on once the workers have run a while, ended a fixed
/// time later.
pub(crate) trait Fault {
    /// What the summary calls it.
    fn name(&self) -> &'static str;
    /// Brings the fault on; what it did, for the summary.
    async fn begin(&mut self, run: &Run) -> String;
    /// Ends it; what it did, for the summary.
    async fn end(&mut self, run: &Run) -> String;
    /// Sets the run up for the fault before the workers start (a dispatcher moved into a
    /// network namespace, say); nothing by default.
    async fn prepare(&mut self, _run: &mut Run) {}
}

/// What a run through a fault showed.
pub(crate) struct Outcome {
    /// The chaos checker's findings.
    pub(crate) report: Report,
    /// The workers' refusals while the fault lasted.
    pub(crate) refusals: Refusals,
    /// From the fault's end to the next delivery of an attempt begun after it.
    pub(crate) to_delivery: Option<Duration>,
    /// From the fault's end to the next op stored.
    pub(crate) to_accept: Option<Duration>,
    /// Lines of the dispatchers' logs with an untyped database error ("other error").
    pub(crate) dispatcher_untyped: usize,
    /// Requests that reached the destination after an earlier copy of their op had been
    /// answered 2xx: what a destination must recognise by the idempotency key.
    pub(crate) late_copies: usize,
}

/// The dispatchers' partition lease in the fault runs.
pub(crate) const LEASE: Duration = Duration::from_secs(3);
/// How long the workers keep running jobs.
const PERIOD: Duration = Duration::from_secs(45);

/// Workers and two dispatchers on `db` ([`Run`]); after 8 s `fault` begins, `lasting` later it
/// ends; 5 s later a dispatcher is SIGKILLed and replaced (the checker asks for one); then the
/// workers finish, the outbox drains and the checker runs. Prints the summary; asserts that
/// the dispatchers ran through the fault.
pub(crate) async fn run_through(
    db: TestDb,
    seed: u64,
    fault: &mut impl Fault,
    lasting: Duration,
) -> Outcome {
    let _turn = crate::turn::shared().await;
    let mut run = Run::start(db, seed, LEASE).await;
    fault.prepare(&mut run).await;
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    run.start_workers("", PERIOD);
    run.pause_workers_until(start + Duration::from_secs(8), &mut rng)
        .await;
    let marks = run.line_marks();
    let began = fault.begin(&run).await;
    run.pause_workers_until(Instant::now() + lasting, &mut rng)
        .await;
    for d in &mut run.dispatchers {
        assert!(
            d.exited().is_none(),
            "dispatcher {} exited during the fault ({})",
            d.name,
            fault.name()
        );
    }
    let during: Vec<String> = run
        .workers
        .iter()
        .zip(&marks)
        .flat_map(|(w, &from)| w.lines_so_far().split_off(from.min(w.lines_so_far().len())))
        .collect();
    assert!(
        start.elapsed() + Duration::from_secs(15) < PERIOD,
        "{} took {:?} to bring on and hold: too late in the workers' {PERIOD:?} to see them \
         enqueue after it",
        fault.name(),
        start.elapsed()
    );
    let ended_at = OffsetDateTime::now_utc();
    let ended = fault.end(&run).await;
    run.pause_workers_until(Instant::now() + Duration::from_secs(5), &mut rng)
        .await;
    run.dispatchers[0].kill_and_restart();
    run.pause_workers_until(start + PERIOD - Duration::from_secs(4), &mut rng)
        .await;
    let lines = run.finish_workers().await;
    let drained = run.drain(Duration::from_secs(120)).await;
    let took = drained.took;
    let to_delivery = run.delivered_after(ended_at).await;
    let to_accept = first_op_after(&run.db, ended_at).await;
    let faults = Faults {
        pauses: run.pauses,
        dispatcher_restarts: 1,
        ..Faults::default()
    };
    let dispatcher_untyped = run
        .dispatchers
        .iter()
        .map(|d| d.logged("other error"))
        .sum();
    let late_copies = late_copies(&run.destination.received());
    let report = run.stop_and_check(&lines, drained, faults).await;
    let refusals = Refusals::of(&during);
    say(&format!(
        "{} summary (seed {seed:#x}, dispatcher lease {LEASE:?}, the fault lasting {lasting:?}; \
         drained in {:.1} s):\n  the fault: {began}; {ended}\n  during it: {} enqueue refusals \
         and {} other worker errors, of which not unavailable: {:?}\n  after it: next delivery \
         after {}, next op stored after {}; untyped errors in the dispatchers' logs: \
         {dispatcher_untyped}; copies that reached the destination after their op had been \
         answered 2xx: {late_copies}\n{report}",
        fault.name(),
        took.as_secs_f64(),
        refusals.enqueues,
        refusals.others,
        refusals.wrong,
        seconds(to_delivery),
        seconds(to_accept),
    ));
    Outcome {
        report,
        refusals,
        to_delivery,
        to_accept,
        dispatcher_untyped,
        late_copies,
    }
}

/// The requests that arrived after an earlier copy of their idempotency key was answered 2xx.
fn late_copies(requests: &[Received]) -> usize {
    let mut answered: HashMap<&str, Instant> = HashMap::new();
    let mut late = 0;
    for r in requests {
        let key = r.header("idempotency-key");
        if answered.get(key).is_some_and(|&done| done <= r.at) {
            late += 1;
        }
        if (200..300).contains(&r.status)
            && let Some(done) = r.done
        {
            let first = answered.entry(key).or_insert(done);
            *first = (*first).min(done);
        }
    }
    late
}

impl Outcome {
    /// Asserts what every fault run must show: no guarantee broke, every refusal said
    /// "unavailable" (and, when `producers_refused`, the fault refused some producer's call),
    /// and a delivery and a stored op came within `bound` of the fault's end.
    pub(crate) fn assert_recovered(&self, fault: &str, bound: Duration, producers_refused: bool) {
        let problems = self.report.problems();
        assert!(
            problems.is_empty(),
            "{fault} broke a guarantee:\n{}",
            problems.join("\n")
        );
        assert!(
            !producers_refused || self.refusals.enqueues + self.refusals.others > 0,
            "no worker was refused during {fault}: the run did not show the fault"
        );
        assert!(
            self.refusals.wrong.is_empty(),
            "refusals during {fault} that did not say the database was unavailable: {:?}",
            self.refusals.wrong
        );
        assert_eq!(
            self.dispatcher_untyped, 0,
            "the dispatchers logged untyped database errors (\"other error\") during {fault}"
        );
        for (what, took) in [
            ("delivery", self.to_delivery),
            ("stored op", self.to_accept),
        ] {
            let took = took.unwrap_or_else(|| panic!("no {what} after {fault} ended"));
            assert!(
                took <= bound,
                "the next {what} came {took:?} after {fault} ended, more than {bound:?}"
            );
        }
    }
}
