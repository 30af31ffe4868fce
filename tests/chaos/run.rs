//! One fault run's parts, shared by the failover runs (`failover.rs`) and the production faults
//! (`faults/`): a migrated database, four Rust workers and a Python one over the SQL API racing
//! for four accounts, stopped past their leases now and then so that stale owners try to
//! enqueue, two dispatchers delivering to a destination that mostly answers 200, and at the
//! end the drain and the chaos checker.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use outbox_tests::{Received, Receiver, Reply, Rng, TestDb, wait_for};
use sqlx::{Connection, PgConnection};
use time::OffsetDateTime;

use crate::check::{Evidence, Faults, Grant, Report, StoredOp, WorkerLog, tokens_granted_twice};
use crate::procs::{Dispatcher, Worker, WorkerSpec};
use crate::{Logs, MAX_LEASE};

/// Rust workers (the Python one comes on top).
const RUST_WORKERS: usize = 4;

/// The parts of one run.
pub(crate) struct Run {
    pub(crate) db: TestDb,
    /// The URL the workers connect with (the database's, or a pooler's in front of it).
    pub(crate) url: String,
    pub(crate) logs: Logs,
    pub(crate) destination: Receiver,
    pub(crate) config: PathBuf,
    pub(crate) dispatchers: Vec<Dispatcher>,
    pub(crate) workers: Vec<Worker>,
    pub(crate) seed: u64,
    /// Workers stopped past their lease so far.
    pub(crate) pauses: usize,
    /// Grants logged by workers stopped before a runbook step, and by those started after it.
    pub(crate) grants_before_bump: Vec<Grant>,
    pub(crate) grants_after_bump: Vec<Grant>,
}

/// What the drain found.
pub(crate) struct Drained {
    /// The outbox's ops, every one delivered or dead.
    pub(crate) ops: Vec<StoredOp>,
    /// How long the drain took.
    pub(crate) took: Duration,
}

impl Run {
    /// Migrates `db`, starts the destination and two dispatchers on two partitions with a
    /// partition lease of `lease`.
    pub(crate) async fn start(db: TestDb, seed: u64, lease: Duration) -> Run {
        tokio::task::spawn_blocking(crate::procs::binaries)
            .await
            .expect("build the binaries");
        drop(db.outbox().await);
        let logs = Logs::new();
        let destination = Receiver::start_with(mostly_ok(seed)).await;
        let config =
            Dispatcher::configure_with_lease(logs.path(), db.url(), &destination.url(), 2, lease);
        let dispatchers = (0..2)
            .map(|i| Dispatcher::start(&config, &format!("d{i}")))
            .collect();
        Run {
            url: db.url().to_owned(),
            db,
            logs,
            destination,
            config,
            dispatchers,
            workers: Vec::new(),
            seed,
            pauses: 0,
            grants_before_bump: Vec::new(),
            grants_after_bump: Vec::new(),
        }
    }

    /// Four Rust workers (`w0{tag}`…) and a Python one (`py{tag}`), for `period`.
    pub(crate) fn start_workers(&mut self, tag: &str, period: Duration) {
        let url = self.url.clone();
        for i in 0..=RUST_WORKERS {
            let spec = WorkerSpec {
                name: if i < RUST_WORKERS {
                    format!("w{i}{tag}")
                } else {
                    format!("py{tag}")
                },
                seed: self
                    .seed
                    .wrapping_add(1 + i as u64 + tag.len() as u64 * 100),
                uncooperative: i % 2 == 0,
                run_for: period,
            };
            let log = self.logs.path().join(format!("{}.log", spec.name));
            self.workers.push(if i < RUST_WORKERS {
                Worker::start(&url, &spec, &log)
            } else {
                Worker::start_python(&url, &spec, &log)
            });
        }
    }

    /// Until `until`, stops a running worker past its lease now and then (SIGSTOP, at most
    /// two at once), as the chaos run does, so stale owners try to enqueue; every worker runs
    /// again when it returns.
    pub(crate) async fn pause_workers_until(&mut self, until: Instant, rng: &mut Rng) {
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(300 + rng.below(500))).await;
            let now = Instant::now();
            for w in &mut self.workers {
                w.proc.resume_if_due(now);
            }
            let running: Vec<usize> = (0..self.workers.len())
                .filter(|&i| !self.workers[i].proc.is_paused())
                .collect();
            if rng.below(10) < 4 && running.len() + 2 > self.workers.len() {
                let pick = running[rng.below(running.len() as u64) as usize];
                let pause = MAX_LEASE + Duration::from_millis(500 + rng.below(1500));
                self.workers[pick].proc.pause(now + pause);
                self.pauses += 1;
            }
        }
        for w in self.workers.iter_mut().filter(|w| w.proc.is_paused()) {
            w.proc.resume();
        }
    }

    /// How many lines each running worker printed so far, in start order.
    pub(crate) fn line_marks(&self) -> Vec<usize> {
        self.workers
            .iter()
            .map(|w| w.lines_so_far().len())
            .collect()
    }

    /// Every line the running workers printed so far.
    pub(crate) fn lines_now(&self) -> Vec<String> {
        self.workers.iter().flat_map(Worker::lines_so_far).collect()
    }

    /// The (resource, token) pairs granted to two owners so far, by every worker.
    pub(crate) fn tokens_granted_twice(&self) -> Vec<String> {
        let logs: Vec<WorkerLog> = self
            .workers
            .iter()
            .map(|w| WorkerLog::parse(&w.name, &w.lines_so_far()))
            .collect();
        tokens_granted_twice(
            logs.iter()
                .flat_map(|l| l.grants.iter())
                .chain(&self.grants_before_bump),
        )
    }

    /// Stops the workers at once (SIGKILL) and returns their lines; their grants are the
    /// grants before the runbook.
    pub(crate) fn kill_workers(&mut self) -> Vec<(String, Vec<String>)> {
        let lines: Vec<(String, Vec<String>)> = std::mem::take(&mut self.workers)
            .into_iter()
            .map(|w| (w.name.clone(), w.kill()))
            .collect();
        for (name, l) in &lines {
            self.grants_before_bump
                .extend(WorkerLog::parse(name, l).grants);
        }
        lines
    }

    /// Waits for the workers to end their loop and returns their lines.
    pub(crate) async fn finish_workers(&mut self) -> Vec<(String, Vec<String>)> {
        let workers = std::mem::take(&mut self.workers);
        let lines: Vec<(String, Vec<String>)> = tokio::task::spawn_blocking(move || {
            workers
                .into_iter()
                .map(|w| (w.name.clone(), w.finish(Duration::from_secs(90))))
                .collect()
        })
        .await
        .expect("workers finished");
        if !self.grants_before_bump.is_empty() {
            for (name, l) in &lines {
                self.grants_after_bump
                    .extend(WorkerLog::parse(name, l).grants);
            }
        }
        lines
    }

    /// Two new dispatchers named `d{i}-{tag}` in place of the stopped ones.
    pub(crate) fn restart_dispatchers(&mut self, tag: &str) {
        self.dispatchers = (0..2)
            .map(|i| Dispatcher::start(&self.config, &format!("d{i}-{tag}")))
            .collect();
    }

    /// From `at` to the first delivery of an attempt begun after it, on the database clock
    /// (the same machine's); `None` when there is none yet or the database does not answer.
    pub(crate) async fn delivered_after(&self, at: OffsetDateTime) -> Option<Duration> {
        let mut c = PgConnection::connect(self.db.url()).await.ok()?;
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM min(finished_at) - $1)::float8 FROM outbox_attempts \
             WHERE outcome = 'delivered' AND started_at > $1",
        )
        .bind(at)
        .fetch_one(&mut c)
        .await
        .ok()?;
        seconds.map(Duration::from_secs_f64)
    }

    /// Waits (up to `within`) until every op is delivered or dead.
    pub(crate) async fn drain(&self, within: Duration) -> Drained {
        let started = Instant::now();
        let ops = wait_for(within, "the dispatchers drain the outbox", || async {
            let ops = self.db.ops().await;
            ops.iter()
                .all(|o| o.state == "delivered" || o.state == "dead")
                .then_some(ops)
        })
        .await;
        Drained {
            ops: ops.into_iter().map(StoredOp::from).collect(),
            took: started.elapsed(),
        }
    }

    /// Stops the dispatchers (SIGTERM, each must exit 0) and runs the chaos checker over the
    /// workers' `lines`, the drained ops and the destination's record.
    pub(crate) async fn stop_and_check(
        &mut self,
        lines: &[(String, Vec<String>)],
        drained: Drained,
        faults: Faults,
    ) -> Report {
        for d in std::mem::take(&mut self.dispatchers) {
            d.stop();
        }
        let failed_attempts = self
            .db
            .attempts()
            .await
            .iter()
            .filter(|a| a.outcome.as_deref() != Some("delivered"))
            .count();
        let workers: Vec<WorkerLog> = lines
            .iter()
            .map(|(name, l)| WorkerLog::parse(name, l))
            .collect();
        Report::new(&Evidence {
            workers,
            ops: drained.ops,
            failed_attempts,
            requests: self.destination.received(),
            faults,
        })
    }
}

/// Writes `text` to stderr past the test harness's capture: a run's figures are its evidence.
pub(crate) fn say(text: &str) {
    let _ = std::io::Write::write_all(
        &mut std::io::stderr().lock(),
        format!("{text}\n").as_bytes(),
    );
}

/// The destination: 5 % of requests answered 503 (so retries happen), the rest 200 at once.
fn mostly_ok(seed: u64) -> impl FnMut(&Received) -> Reply + Send + 'static {
    let mut rng = Rng::new(seed);
    move |_| {
        if rng.below(100) < 5 {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    }
}
