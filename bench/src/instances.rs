//! `dispatch --instances`: scale-out. The same backlog drained by 1, 2, 3… dispatcher processes
//! sharing `dispatcher.partitions` (each bounded by its own `max_in_flight`) into a destination
//! that answers after 20 ms, against the first count's rate in the same run; then the same under
//! a destination limit below one process's capacity, which must hold across the processes.
//!
//! Each step starts the processes on an empty database and waits until the membership shows
//! them all live and the partition leases split fairly; only then is the backlog inserted and
//! the clock started, so the figure is a steady-state drain with no hand-over inside it.

use std::time::{Duration, Instant};

use outbox_store::{Partition, Store};

use crate::destination::{self, Seen};
use crate::dispatch::{Process, count, spawn_dispatcher};
use crate::enqueue::{Layout, insert_plain_batch};
use crate::report::{Row, median, spread};
use crate::target::{Db, Plain, Target, store};

/// `dispatcher.partitions`: enough that three processes split it 3-3-2.
const PARTITIONS: u32 = 8;
/// `dispatcher.lease_ttl`: short, so that a split settles in a second or two (heartbeats and
/// partition tries run every third of it).
const LEASE_TTL: &str = "3s";
/// Each process's `dispatcher.max_in_flight`: the bound of one process's capacity, at most
/// `PER_PROCESS / DELAY` (400 ops/s). It must stay the bound with three processes on a
/// 2-core machine: PostgreSQL spends about a millisecond of CPU per op (claim, complete), and
/// with 32 in flight one process already kept it 70% busy, so two processes were bounded by
/// the machine's cores, not by their own capacity (BENCHMARKS.md).
const PER_PROCESS: u32 = 8;
/// How long the destination takes to answer.
const DELAY: Duration = Duration::from_millis(20);
/// The destination's `max_in_flight` when it is not the limit under test: well above
/// instances × `PER_PROCESS`.
const ROOMY: u32 = 1024;
/// The destination's `max_in_flight` in the in-flight limit part: half of one process's.
const IN_FLIGHT_LIMIT: u32 = 4;
/// Ops per statement while filling.
const FILL_CHUNK: usize = 20_000;
/// How much of the rate, on top of the limiter's burst, the destination may see in excess
/// before the limit counts as exceeded: it stamps arrivals, not admissions, and scheduling on
/// a loaded machine delays some requests and bunches them with later ones.
const ARRIVAL_JITTER: Duration = Duration::from_millis(50);

/// What `dispatch --instances` runs.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Dispatcher process counts, in order; the first is the baseline of the others.
    pub(crate) instances: Vec<u32>,
    /// Ops drained per step without a destination limit.
    pub(crate) backlog: usize,
    /// Ops drained per step under each limit.
    pub(crate) limit_backlog: usize,
    /// The destination's `rate_limit` (per second) in the rate part.
    pub(crate) rate_limit: u32,
}

impl Plan {
    /// `instances` processes; the backlog `backlog` (default 20,000, quick 600), a quarter of it
    /// (at least 400) under each limit; 150/s as the rate limit (quick 100/s), below one
    /// process's capacity.
    pub(crate) fn new(instances: Vec<u32>, backlog: Option<usize>, quick: bool) -> Plan {
        let backlog = backlog.unwrap_or(if quick { 600 } else { 20_000 }).max(1);
        Plan {
            instances,
            backlog,
            limit_backlog: (backlog / 4).max(400),
            rate_limit: if quick { 100 } else { 150 },
        }
    }
}

/// The destination's limits in one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// `max_in_flight` ROOMY and no rate limit: each process's own bound decides.
    None,
    /// `max_in_flight` at this.
    InFlight(u32),
    /// `rate_limit` at this many per second (`max_in_flight` ROOMY).
    Rate(u32),
}

impl Limit {
    fn destination_toml(self) -> String {
        match self {
            Limit::None => format!("max_in_flight = {ROOMY}\n"),
            Limit::InFlight(n) => format!("max_in_flight = {n}\n"),
            Limit::Rate(r) => format!("max_in_flight = {ROOMY}\nrate_limit = \"{r}/s\"\n"),
        }
    }

    fn describe(self) -> String {
        match self {
            Limit::None => format!("destination max_in_flight {ROOMY}"),
            Limit::InFlight(n) => {
                format!("destination max_in_flight {n} (each process {PER_PROCESS})")
            }
            Limit::Rate(r) => format!("destination rate_limit {r}/s"),
        }
    }
}

/// One step's measurement: `instances` processes draining one backlog.
#[derive(Debug, Clone)]
struct Step {
    /// Ops per second from the backlog's commit until every op was recorded delivered.
    drain_rps: f64,
    /// From starting the processes until the split was seen.
    settle: Duration,
    seen: Seen,
}

/// A check of a limit (or of the scale-out target), printed after the table.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) line: String,
    /// The destination saw more than its limit allows.
    pub(crate) exceeded: bool,
}

/// Runs `plan` on `target` `runs` times; the rows and the findings.
pub(crate) async fn instances(
    target: &Target,
    runs: usize,
    plan: &Plan,
) -> anyhow::Result<(Vec<Row>, Vec<Finding>)> {
    if let Target::Sqlite = target {
        println!(
            "dispatch --instances (sqlite): not measured: an SQLite file has one writer on one \
             machine, so dispatchers on other hosts cannot share it; scale-out is measured on \
             PostgreSQL (and SQL Server)"
        );
        return Ok((Vec::new(), Vec::new()));
    }
    let limits = [
        (Limit::None, plan.backlog),
        (Limit::InFlight(IN_FLIGHT_LIMIT), plan.limit_backlog),
        (Limit::Rate(plan.rate_limit), plan.limit_backlog),
    ];
    // steps[limit][instance count] holds one Step per run.
    let mut steps = vec![vec![Vec::new(); plan.instances.len()]; limits.len()];
    for run in 0..runs {
        for (l, (limit, backlog)) in limits.iter().enumerate() {
            for (i, n) in plan.instances.iter().enumerate() {
                let s = step(target, *n, *backlog, *limit).await?;
                let steady = s.seen.steady().map_or_else(
                    || "too short to judge its rate past its first second".to_owned(),
                    |(rps, busiest)| {
                        format!("{rps:.0}/s past its first second, busiest second {busiest}")
                    },
                );
                eprintln!(
                    "dispatch --instances run {}/{runs} ({}): {n} instance{}, {}: split in \
                     {:.1} s, {backlog} ops drained at {:.0} ops/s; destination: peak {} in \
                     flight, {steady}",
                    run + 1,
                    target.label(),
                    plural(*n),
                    limit.describe(),
                    s.settle.as_secs_f64(),
                    s.drain_rps,
                    s.seen.peak_in_flight,
                );
                steps[l][i].push(s);
            }
        }
    }
    let mut rows = Vec::new();
    let mut findings = Vec::new();
    for ((limit, backlog), by_count) in limits.iter().zip(&steps) {
        let part = Part {
            target,
            plan,
            limit: *limit,
            backlog: *backlog,
            by_count,
        };
        rows.extend(part.rows());
        findings.extend(part.finding());
    }
    Ok((rows, findings))
}

/// One part's steps, by instance count, and what to make of them.
struct Part<'a> {
    target: &'a Target,
    plan: &'a Plan,
    limit: Limit,
    backlog: usize,
    by_count: &'a [Vec<Step>],
}

/// `f` of every step.
fn each(steps: &[Step], f: impl Fn(&Step) -> f64) -> Vec<f64> {
    steps.iter().map(f).collect()
}

/// The largest `f` over the steps.
fn most(steps: &[Step], f: impl Fn(&Step) -> f64) -> f64 {
    spread(&each(steps, f)).1
}

fn drain(s: &Step) -> f64 {
    s.drain_rps
}

fn peak(s: &Step) -> f64 {
    s.seen.peak_in_flight as f64
}

impl Part<'_> {
    fn rows(&self) -> Vec<Row> {
        let first = self.plan.instances[0];
        let base = median(&each(&self.by_count[0], drain));
        let mut rows = Vec::new();
        for (n, steps) in self.plan.instances.iter().zip(self.by_count) {
            let (ours, baseline, baseline_ops_per_s, mut extra) = match self.limit {
                Limit::None => (
                    each(steps, drain),
                    format!("{first} instance{}, same run", plural(first)),
                    base,
                    vec![("peak_in_flight", median(&each(steps, peak)))],
                ),
                Limit::InFlight(l) => (
                    each(steps, drain),
                    format!("what {l} in flight × {DELAY:?} allow"),
                    f64::from(l) / DELAY.as_secs_f64(),
                    vec![("peak_in_flight_max", most(steps, peak))],
                ),
                // The rate the destination saw past its first second (the limiter's burst),
                // or over the whole drain where that part is too short.
                Limit::Rate(r) => (
                    each(steps, |s| {
                        s.seen.steady().map_or(s.drain_rps, |(rps, _)| rps)
                    }),
                    format!("rate_limit {r}/s"),
                    f64::from(r),
                    vec![
                        (
                            "excess_max",
                            most(steps, |s| s.seen.excess_over(f64::from(r))),
                        ),
                        (
                            "busiest_second_max",
                            most(steps, |s| s.seen.steady().map_or(0.0, |(_, b)| b as f64)),
                        ),
                        ("peak_in_flight_max", most(steps, peak)),
                    ],
                ),
            };
            extra.push(("split_s", median(&each(steps, |s| s.settle.as_secs_f64()))));
            rows.push(Row {
                scenario: "dispatch-instances".into(),
                backend: self.target.label().into(),
                producers: None,
                setting: format!(
                    "{n} instance{}, {PARTITIONS} partitions, {} ops, 204 after {DELAY:?}, {}",
                    plural(*n),
                    self.backlog,
                    self.limit.describe()
                ),
                ops_per_s: median(&ours),
                spread: spread(&ours),
                baseline_ops_per_s,
                baseline,
                ratio: median(&ours) / baseline_ops_per_s,
                extra: extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            });
        }
        rows
    }

    /// Whether the limit held for every instance count and run, or how the scale-out target
    /// fared when there is no limit.
    fn finding(&self) -> Option<Finding> {
        let (figure, allowed, what) = match self.limit {
            Limit::None => return self.scale_target(),
            Limit::InFlight(l) => (
                self.worst(peak),
                f64::from(l),
                "peak in flight at the destination".to_owned(),
            ),
            Limit::Rate(r) => {
                let r = f64::from(r);
                // A "<n>/s" limit lets n through at once after a pause (the dispatcher's
                // governor quota, split over the instances by the partitions they lead).
                let burst = r;
                (
                    self.worst(|s| s.seen.excess_over(r)),
                    burst + r * ARRIVAL_JITTER.as_secs_f64(),
                    format!(
                        "requests above {r}/s over any stretch of the drain (allowed: the \
                         limiter's burst of {burst}, plus {ARRIVAL_JITTER:?} of arrival jitter)"
                    ),
                )
            }
        };
        let exceeded = figure.iter().any(|f| *f > allowed);
        let shown: Vec<String> = figure.iter().map(|f| format!("{f:.0}")).collect();
        let counts: Vec<String> = self.plan.instances.iter().map(u32::to_string).collect();
        Some(Finding {
            line: format!(
                "{}: {}: {what}: {} with {} instance{}, the most over the runs (at most \
                 {allowed:.0})",
                verdict(exceeded),
                self.limit.describe(),
                shown.join(", "),
                counts.join(", "),
                if self.plan.instances == [1] { "" } else { "s" },
            ),
            exceeded,
        })
    }

    /// The largest `f` over the runs, for each instance count.
    fn worst(&self, f: impl Fn(&Step) -> f64 + Copy) -> Vec<f64> {
        self.by_count.iter().map(|steps| most(steps, f)).collect()
    }

    /// The scale-out target: 2 instances at least 1.7 × one.
    fn scale_target(&self) -> Option<Finding> {
        let at = |n: u32| {
            let i = self.plan.instances.iter().position(|c| *c == n)?;
            Some(median(&each(&self.by_count[i], drain)))
        };
        let ratio = at(2)? / at(1)?;
        let met = if ratio >= 1.7 { "met" } else { "not met" };
        Some(Finding {
            line: format!("target 2 instances ≥ 1.7 × one: {ratio:.2} ({met})"),
            exceeded: false,
        })
    }
}

fn verdict(exceeded: bool) -> &'static str {
    if exceeded {
        "LIMIT EXCEEDED"
    } else {
        "limit held"
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// One step: a fresh database and destination, `instances` dispatcher processes, the split
/// awaited, then `backlog` ops inserted and drained.
async fn step(
    target: &Target,
    instances: u32,
    backlog: usize,
    limit: Limit,
) -> anyhow::Result<Step> {
    let (mut destination, base_url) = destination::start(DELAY).await?;
    let db = target.fresh().await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("dispatcher.toml");
    std::fs::write(&path, config(&db, &base_url, limit))?;
    let started = Instant::now();
    let mut processes = (0..instances)
        .map(|_| spawn_dispatcher(&path))
        .collect::<anyhow::Result<Vec<Process>>>()?;
    let s = store(&db, 2).await?;
    split(&s, &mut processes).await?;
    let settle = started.elapsed();
    s.close().await;
    let pool = Plain::connect(&db, 2).await?;
    let committed = fill_spread(&pool, backlog).await?;
    drained(&pool, backlog, &mut processes).await?;
    let drain_rps = backlog as f64 / committed.elapsed().as_secs_f64();
    destination.ensure_running("the destination")?;
    let seen = destination::seen(&base_url).await?;
    anyhow::ensure!(
        seen.requests() >= backlog,
        "the destination saw {} requests for {backlog} delivered ops",
        seen.requests()
    );
    Ok(Step {
        drain_rps,
        settle,
        seen,
    })
}

/// Every process's configuration: the same file for all.
fn config(db: &Db, base_url: &str, limit: Limit) -> String {
    format!(
        "[database]\nurl = {:?}\n[lease]\nmin_ttl = \"1s\"\n\
         [dispatcher]\nlisten = \"\"\npartitions = {PARTITIONS}\nlease_ttl = {LEASE_TTL:?}\n\
         poll_interval = \"100ms\"\nmax_in_flight = {PER_PROCESS}\nshutdown_grace = \"1s\"\n\
         [destinations.statements]\nbase_url = {base_url:?}\ntimeout = \"2s\"\n{}",
        db.url,
        limit.destination_toml()
    )
}

/// Waits until every process is live in the membership and the partitions are split: every
/// partition lease held, each instance leading its fair share.
async fn split(store: &Store, processes: &mut [Process]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for p in processes.iter_mut() {
            p.ensure_running("a dispatcher")?;
        }
        let led: Vec<u32> = store
            .instance_list()
            .await?
            .iter()
            .filter(|r| r.live)
            .map(|r| r.led)
            .collect();
        let held = store
            .lease_list()
            .await?
            .iter()
            .filter(|l| l.held && l.resource.as_str().starts_with(Partition::LEASE_PREFIX))
            .count();
        if is_split(&led, processes.len(), held) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} dispatchers did not split {PARTITIONS} partitions within 60 s (live instances \
             leading {led:?}, {held} partition leases held)",
            processes.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `n` live instances leading `led` partitions (as their heartbeats say) with `held`
/// partition leases held are the fair split of PARTITIONS: ⌊P/n⌋ or ⌈P/n⌉ each, P in all.
fn is_split(led: &[u32], n: usize, held: usize) -> bool {
    let (p, n32) = (PARTITIONS, n as u32);
    led.len() == n
        && held == p as usize
        && led.iter().sum::<u32>() == p
        && led.iter().all(|l| (p / n32..=p.div_ceil(n32)).contains(l))
}

/// Inserts `n` unordered ops spread over every partition, FILL_CHUNK per statement; returns
/// when the first statement committed: from then on every partition has work.
async fn fill_spread(pool: &Plain, n: usize) -> anyhow::Result<Instant> {
    let (mut done, mut b, mut first) = (0, 0, None);
    while done < n {
        let size = (n - done).min(FILL_CHUNK);
        insert_plain_batch(pool, b, size, Layout::Spread).await?;
        first.get_or_insert_with(Instant::now);
        done += size;
        b += 1;
    }
    Ok(first.unwrap_or_else(Instant::now))
}

/// Waits until `backlog` ops are delivered; an error when the count stops moving for 30 s or
/// a process exits.
async fn drained(pool: &Plain, backlog: usize, processes: &mut [Process]) -> anyhow::Result<()> {
    let mut last = (0, Instant::now());
    loop {
        let done = count(pool, "delivered").await?;
        if done >= backlog as i64 {
            return Ok(());
        }
        for p in processes.iter_mut() {
            p.ensure_running("a dispatcher")?;
        }
        if done > last.0 {
            last = (done, Instant::now());
        }
        anyhow::ensure!(
            last.1.elapsed() < Duration::from_secs(30),
            "the drain stalled at {done} of {backlog} delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_fair_complete_and_seen_by_every_instance() {
        assert!(is_split(&[8], 1, 8));
        assert!(is_split(&[4, 4], 2, 8));
        assert!(is_split(&[3, 2, 3], 3, 8));
        // A newcomer not yet seen, a leader that has not stepped down, a lease in hand-over.
        assert!(!is_split(&[8], 2, 8));
        assert!(!is_split(&[5, 3], 2, 8));
        assert!(!is_split(&[4, 4], 2, 7));
        assert!(!is_split(&[4, 3], 2, 8));
        assert!(!is_split(&[4, 4, 0], 3, 8));
    }

    #[test]
    fn a_quarter_of_the_backlog_is_drained_under_each_limit() {
        let plan = Plan::new(vec![1, 2, 3], None, false);
        assert_eq!((plan.backlog, plan.limit_backlog), (20_000, 5_000));
        let quick = Plan::new(vec![1, 2], None, true);
        assert_eq!((quick.backlog, quick.limit_backlog), (600, 400));
    }
}
