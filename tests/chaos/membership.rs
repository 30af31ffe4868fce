//! The membership variant's part of the driver: dispatcher instances join one by one, leave
//! gracefully (SIGTERM, exit 0) and start again a little later, besides the faults of every
//! run; the split of the partitions is read from the membership table whenever it changes, so
//! the checker can tell that the changes really happened.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_store::Store;
use outbox_tests::Rng;

use crate::check::Membership;
use crate::procs::Dispatcher;

/// The variant's partitions: 4, then 2/2, then 2/1/1 as instances join.
pub(crate) const PARTITIONS: u32 = 4;
/// The most instances of the variant at once.
const INSTANCES: usize = 3;
/// How long a graceful leave may take on a loaded machine: the 5 s shutdown grace, releasing
/// the leases and leaving the membership (2 s each at most), and slack.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(30);
/// At least this long between two graceful leaves, so the split settles in between.
const LEAVE_EVERY: Duration = Duration::from_secs(8);
/// The longest the driver holds back dispatcher kills and pauses for the third instance to
/// lead alongside the others.
const SETTLE: Duration = Duration::from_secs(20);

/// Joins, leaves and starts of the dispatchers, and what the driver saw of them.
pub(crate) struct Fleet {
    rng: Rng,
    config: PathBuf,
    store: Store,
    start: Instant,
    period: Duration,
    /// When each instance leaving now was sent SIGTERM (by index).
    leaving: Vec<Option<Instant>>,
    /// When each instance that left starts again (by index).
    back_at: Vec<Option<Instant>>,
    last_leave: Instant,
    /// Whether a graceful leave has begun yet.
    began_leaving: bool,
    seen: Membership,
}

impl Fleet {
    /// A fleet on `config` whose first instance started at `start`; membership changes go on
    /// for `period`.
    pub(crate) fn new(
        config: &Path,
        store: Store,
        seed: u64,
        start: Instant,
        period: Duration,
    ) -> Fleet {
        Fleet {
            rng: Rng::new(seed ^ 0x4D45_4D42),
            config: config.to_owned(),
            store,
            start,
            period,
            leaving: vec![None; INSTANCES],
            back_at: vec![None; INSTANCES],
            last_leave: start,
            began_leaving: false,
            seen: Membership::default(),
        }
    }

    /// One step of the driver at `now`: a join when due (the second instance at a tenth of
    /// the period, the third at a fifth), the end of a leave, a start after a leave when due,
    /// sometimes a graceful leave (surely one by 40 % of the period), and the split as the
    /// table says.
    pub(crate) async fn step(&mut self, now: Instant, dispatchers: &mut Vec<Dispatcher>) {
        let elapsed = now.duration_since(self.start);
        let n = dispatchers.len();
        if n < INSTANCES && elapsed >= self.period * n as u32 / 10 {
            dispatchers.push(Dispatcher::start(&self.config, &format!("d{n}")));
            self.seen.joined += 1;
        }
        for (i, d) in dispatchers.iter_mut().enumerate() {
            if let Some(since) = self.leaving[i] {
                self.end_leave(i, d, now, since);
            } else if self.back_at[i].is_some_and(|at| at <= now) {
                d.start_again();
                self.back_at[i] = None;
                self.seen.rejoined += 1;
            }
        }
        let due = self.first_leave_due(elapsed) || self.rng.chance(10);
        // One change at a time, none while a dispatcher is stopped, and not in the last fifth
        // of the period: the instance starts again, and settles, within it.
        let allowed = dispatchers.len() == INSTANCES
            && dispatchers
                .iter()
                .all(|d| !d.is_down() && !d.proc.is_paused())
            && now.duration_since(self.last_leave) > LEAVE_EVERY
            && elapsed < self.period * 4 / 5;
        if due && allowed {
            let pick = self.rng.below(dispatchers.len() as u64) as usize;
            dispatchers[pick].terminate();
            self.leaving[pick] = Some(now);
            self.last_leave = now;
            self.began_leaving = true;
        }
        self.look(dispatchers).await;
    }

    /// Whether the first graceful leave is due (from 40 % of the period) and has not begun.
    fn first_leave_due(&self, elapsed: Duration) -> bool {
        !self.began_leaving && elapsed > self.period * 2 / 5
    }

    /// Whether the driver should hold back dispatcher kills and pauses now: from the third
    /// join until three instances led at once (for [`SETTLE`] at most), and while the first
    /// graceful leave is due, so that both surely happen whatever the other faults do.
    pub(crate) fn holds_faults(&self, now: Instant) -> bool {
        let elapsed = now.duration_since(self.start);
        let third = self.period / 5;
        let settling = elapsed >= third && elapsed < third + SETTLE && self.seen.most_leaders() < 3;
        settling || (self.first_leave_due(elapsed) && elapsed < self.period * 4 / 5)
    }

    /// Once instance `i`, sent SIGTERM at `since`, has exited: records how, and schedules its
    /// start 2–4 s later; kills it if it overran [`LEAVE_TIMEOUT`].
    fn end_leave(&mut self, i: usize, d: &mut Dispatcher, now: Instant, since: Instant) {
        let status = d.exited();
        match status {
            Some(status) if status.success() => self.seen.left += 1,
            Some(status) => self
                .seen
                .unclean_leaves
                .push(format!("{} exited with {status}", d.name)),
            None if now.duration_since(since) > LEAVE_TIMEOUT => {
                d.kill();
                self.seen
                    .unclean_leaves
                    .push(format!("{} did not exit within {LEAVE_TIMEOUT:?}", d.name));
            }
            None => return,
        }
        self.leaving[i] = None;
        self.back_at[i] = Some(now + Duration::from_millis(2000 + self.rng.below(2000)));
    }

    /// Reads the split (partitions led per instance, largest first) and keeps it when it
    /// changed. Only rows of the `dispatchers` that run and are not stopped count: a killed or
    /// stopped process's row stays live, with its last count, until its ttl has passed.
    /// Heartbeats are a third of the lease apart, so a read in the middle of a handover may
    /// count a partition twice or not at all: only splits that account for every partition
    /// once are kept. A database that is down (restarting) is asked again at the next step.
    async fn look(&mut self, dispatchers: &[Dispatcher]) {
        let running: Vec<i64> = dispatchers
            .iter()
            .filter(|d| !d.is_down() && !d.proc.is_paused())
            .map(|d| i64::from(d.pid()))
            .collect();
        let rows = tokio::time::timeout(Duration::from_secs(2), self.store.instance_list()).await;
        let Ok(Ok(rows)) = rows else { return };
        let mut split: Vec<u32> = rows
            .iter()
            .filter(|r| r.live && running.contains(&r.pid))
            .map(|r| r.led)
            .collect();
        split.sort_unstable_by(|a, b| b.cmp(a));
        if split.iter().sum::<u32>() == PARTITIONS && self.seen.splits.last() != Some(&split) {
            self.seen.splits.push(split);
        }
    }

    /// Waits for the leave in progress to end, starts every instance still down, and says
    /// what happened.
    pub(crate) async fn finish(mut self, dispatchers: &mut [Dispatcher]) -> Membership {
        for (i, d) in dispatchers.iter_mut().enumerate() {
            while let Some(since) = self.leaving[i] {
                self.end_leave(i, d, Instant::now(), since);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if self.back_at[i].take().is_some() {
                d.start_again();
                self.seen.rejoined += 1;
            }
        }
        self.look(dispatchers).await;
        self.seen
    }
}
