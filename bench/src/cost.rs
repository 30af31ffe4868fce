//! What a measured stretch of work cost: the CPU seconds of each process involved (the
//! dispatcher, PostgreSQL's server processes, the destination, this process), of the whole
//! machine, and PostgreSQL's WAL bytes; per op, and the machine limit they imply (the cores
//! divided by the whole machine's CPU per op). Read from /proc and `pg_current_wal_lsn()`.

use std::time::Instant;

use crate::target::{Db, Plain};

/// Where a process's CPU time is read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// One process (and the children it reaped): the dispatcher, the destination.
    Process(u32),
    /// A server and every process it forked: PostgreSQL's postmaster, its backends and its
    /// background workers, those that exited meanwhile included.
    Server(u32),
    /// This process: the benchmark's producers and its SQL loops.
    This,
}

/// CPU seconds so far, per process measured, the whole machine's busy time, and the WAL
/// position, at one instant.
#[derive(Debug, Clone)]
struct Snapshot {
    processes: Vec<f64>,
    machine: f64,
    wal: Option<i64>,
}

/// Measures from [`Meter::start`] to [`Meter::stop`].
#[derive(Debug)]
pub(crate) struct Meter {
    who: Vec<(&'static str, Source)>,
    start: Snapshot,
    started: Instant,
}

/// What the measured stretch cost per op.
#[derive(Debug, Clone)]
pub(crate) struct Cost {
    /// CPU seconds per 10k ops of each process measured, by name.
    pub(crate) cpu_per_10k: Vec<(&'static str, f64)>,
    /// The whole machine's busy CPU seconds per 10k ops (every process, this benchmark's too).
    pub(crate) machine_per_10k: f64,
    /// PostgreSQL's WAL bytes per op; `None` on other backends.
    pub(crate) wal_bytes_per_op: Option<f64>,
    /// Ops per second the machine could do if all its cores went to this work.
    pub(crate) machine_limit: f64,
    /// The ops per second measured over the same stretch.
    pub(crate) ops_per_s: f64,
}

impl Meter {
    /// Starts measuring the processes `who`, and the WAL of the PostgreSQL `pool` points at.
    pub(crate) async fn start(who: Vec<(&'static str, Source)>, pool: &Plain) -> Meter {
        let start = snapshot(&who, pool).await;
        Meter {
            who,
            start,
            started: Instant::now(),
        }
    }

    /// Stops measuring: `ops` ops were done since the start.
    pub(crate) async fn stop(self, ops: usize, pool: &Plain) -> Cost {
        let seconds = self.started.elapsed().as_secs_f64();
        let end = snapshot(&self.who, pool).await;
        let per_10k = |s: f64| s * 10_000.0 / ops.max(1) as f64;
        let machine_per_op = (end.machine - self.start.machine) / ops.max(1) as f64;
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        Cost {
            cpu_per_10k: self
                .who
                .iter()
                .zip(end.processes.iter().zip(&self.start.processes))
                .map(|((name, _), (e, s))| (*name, per_10k(e - s)))
                .collect(),
            machine_per_10k: machine_per_op * 10_000.0,
            wal_bytes_per_op: match (end.wal, self.start.wal) {
                (Some(e), Some(s)) => Some((e - s) as f64 / ops.max(1) as f64),
                _ => None,
            },
            machine_limit: if machine_per_op > 0.0 {
                cores / machine_per_op
            } else {
                f64::INFINITY
            },
            ops_per_s: ops as f64 / seconds,
        }
    }
}

impl Cost {
    /// The figures as a row's extra columns: `cpu_s_per_10k_<process>`, `..._machine`,
    /// `wal_bytes_per_op`, `machine_limit_ops_s` and `of_machine_limit` (ops/s ÷ the limit).
    pub(crate) fn extra(&self) -> Vec<(String, f64)> {
        let mut extra: Vec<(String, f64)> = self
            .cpu_per_10k
            .iter()
            .map(|(name, s)| (format!("cpu_s_per_10k_{name}"), *s))
            .collect();
        extra.push(("cpu_s_per_10k_machine".into(), self.machine_per_10k));
        if let Some(wal) = self.wal_bytes_per_op {
            extra.push(("wal_bytes_per_op".into(), wal));
        }
        extra.push(("machine_limit_ops_s".into(), self.machine_limit));
        extra.push((
            "of_machine_limit".into(),
            self.ops_per_s / self.machine_limit,
        ));
        extra
    }

    /// The median of each figure over `costs` (one per run, measured alike), by position.
    pub(crate) fn median_extra(costs: &[Cost]) -> Vec<(String, f64)> {
        let all: Vec<Vec<(String, f64)>> = costs.iter().map(Cost::extra).collect();
        let Some(first) = all.first() else {
            return Vec::new();
        };
        first
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let values: Vec<f64> = all.iter().filter_map(|e| e.get(i)).map(|e| e.1).collect();
                (name.clone(), crate::report::median(&values))
            })
            .collect()
    }
}

/// The postmaster of the PostgreSQL server `pool` is connected to, when it runs on this
/// machine (the parent of this session's backend); `None` elsewhere or on other backends.
async fn postmaster(pool: &Plain) -> Option<u32> {
    let Plain::Postgres(p) = pool else {
        return None;
    };
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(p)
        .await
        .ok()?;
    let stat = Stat::read(u32::try_from(backend).ok()?)?;
    Some(stat.ppid)
}

/// The processes to meter: `processes` (by name and pid), PostgreSQL's server when `pool`
/// reaches one on this machine, and this process (`bench`).
pub(crate) async fn measured(
    pool: &Plain,
    processes: &[(&'static str, u32)],
) -> Vec<(&'static str, Source)> {
    let mut who: Vec<(&'static str, Source)> = processes
        .iter()
        .map(|(name, pid)| (*name, Source::Process(*pid)))
        .collect();
    if let Some(pid) = postmaster(pool).await {
        who.push(("postgres", Source::Server(pid)));
    }
    who.push(("bench", Source::This));
    who
}

/// Runs `work` (which does `ops` ops on `db`, this process's and the database's) metered.
pub(crate) async fn metered<T>(
    db: &Db,
    ops: usize,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, Cost)> {
    let pool = Plain::connect(db, 1).await?;
    let meter = Meter::start(measured(&pool, &[]).await, &pool).await;
    let done = work.await?;
    Ok((done, meter.stop(ops, &pool).await))
}

async fn snapshot(who: &[(&'static str, Source)], pool: &Plain) -> Snapshot {
    let wal = match pool {
        Plain::Postgres(p) => {
            sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
                .fetch_one(p)
                .await
                .ok()
        }
        _ => None,
    };
    // Read after the WAL position: the query's own backend work lands before the start.
    let processes = who.iter().map(|(_, source)| cpu_seconds(*source)).collect();
    Snapshot {
        processes,
        machine: machine_busy_seconds(),
        wal,
    }
}

/// The fields of /proc/PID/stat this module reads.
#[derive(Debug)]
struct Stat {
    ppid: u32,
    /// utime + stime, in clock ticks.
    own: u64,
    /// cutime + cstime: the children it waited for, in clock ticks.
    reaped: u64,
}

impl Stat {
    fn read(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: fields start after the
        // last ')', with field 3 (the state) first.
        let rest = &text[text.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        Some(Stat {
            ppid: u32::try_from(num(1)?).ok()?,
            own: num(11)? + num(12)?,
            reaped: num(13)? + num(14)?,
        })
    }
}

/// The unit of /proc's CPU times: USER_HZ, which is 100 on the architectures Linux runs this
/// on (x86-64, arm64); a test checks it against the uptime.
fn ticks_per_second() -> f64 {
    100.0
}

/// CPU seconds `source` has used so far; 0 when it cannot be read (it is gone, or not here).
fn cpu_seconds(source: Source) -> f64 {
    let ticks = match source {
        Source::Process(pid) => Stat::read(pid).map_or(0, |s| s.own + s.reaped),
        Source::This => Stat::read(std::process::id()).map_or(0, |s| s.own + s.reaped),
        Source::Server(pid) => {
            // The server's own time, what its exited children used (reaped), and the live
            // children's time so far.
            let server = Stat::read(pid).map_or(0, |s| s.own + s.reaped);
            let children: u64 = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(Stat::read)
                .filter(|s| s.ppid == pid)
                .map(|s| s.own + s.reaped)
                .sum();
            server + children
        }
    };
    ticks as f64 / ticks_per_second()
}

/// The whole machine's busy CPU seconds so far (all cores; everything but idle and iowait).
fn machine_busy_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    busy as f64 / ticks_per_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_the_machine_are_read() {
        let before = (cpu_seconds(Source::This), machine_busy_seconds());
        let mut x = 0u64;
        let spin = Instant::now();
        while spin.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        let after = (cpu_seconds(Source::This), machine_busy_seconds());
        assert!(after.0 - before.0 >= 0.1, "{before:?} {after:?}");
        assert!(after.1 - before.1 >= 0.1, "{before:?} {after:?}");
        // Every CPU's ticks since boot, over the CPUs and the uptime, is USER_HZ.
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let cpus = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
            .count();
        let total: u64 = stat
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse::<u64>().ok())
            .take(8)
            .sum();
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let hz = total as f64 / cpus as f64 / uptime;
        assert!(
            (hz / ticks_per_second() - 1.0).abs() < 0.1,
            "USER_HZ looks like {hz}"
        );
        let me = Stat::read(std::process::id()).expect("own stat");
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
    }
}
