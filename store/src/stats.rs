//! The per-minute counts behind the console's charts (`migrations/*/0019_minute_stats.sql`):
//! what each dispatcher finished in a minute, by destination and outcome, with a histogram of
//! the ops' enqueue-to-delivery latency, and the backlog it sampled. A dispatcher keeps them in
//! memory and writes a minute's rows once the minute has ended, never a write per op; the
//! console reads them summed over the dispatchers.

use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

/// The upper bounds of the latency buckets, in milliseconds; a last bucket holds the rest
/// (over an hour). The columns `latency_le_100ms` … `latency_le_1h`, `latency_over_1h`.
pub const LATENCY_BOUNDS_MS: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000,
];

/// How many latency buckets a minute has: one per bound and the one above the last.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// How long the rows are kept: the console charts the last day at most.
pub const STATS_KEPT: Duration = Duration::from_secs(2 * 24 * 3600);

/// What was finished in one minute (for one destination, by one dispatcher or all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Counts {
    /// Ops delivered.
    pub delivered: u64,
    /// Attempts that failed, the op due again later.
    pub retried: u64,
    /// Ops that became dead.
    pub dead: u64,
    /// The delivered ops by enqueue-to-delivery latency, bucket `i` holding those above bound
    /// `i - 1` and up to bound `i` of [`LATENCY_BOUNDS_MS`], the last those above an hour.
    pub latency: [u64; LATENCY_BUCKETS],
}

impl Counts {
    /// Counts an op delivered `latency` after its enqueue.
    pub fn delivered_after(&mut self, latency: Duration) {
        self.delivered = self.delivered.saturating_add(1);
        let slot = &mut self.latency[bucket(latency)];
        *slot = slot.saturating_add(1);
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Counts) {
        self.delivered = self.delivered.saturating_add(other.delivered);
        self.retried = self.retried.saturating_add(other.retried);
        self.dead = self.dead.saturating_add(other.dead);
        for (mine, theirs) in self.latency.iter_mut().zip(other.latency) {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == Counts::default()
    }

    /// The bucket holding the `q`-quantile (0 < q ≤ 1) of the delivered ops' latencies: the
    /// latency is at most its bound. `None` when none was delivered.
    pub fn latency_quantile(&self, q: f64) -> Option<LatencyBound> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest rank covering q of the ops.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(LatencyBound::of_bucket(i));
            }
        }
        Some(LatencyBound::of_bucket(LATENCY_BUCKETS - 1))
    }
}

/// Where a latency quantile lies, as the histogram can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LatencyBound {
    /// At most this long.
    AtMost(Duration),
    /// Longer than this (the last bucket has no upper bound).
    Over(Duration),
}

impl LatencyBound {
    fn of_bucket(i: usize) -> LatencyBound {
        match LATENCY_BOUNDS_MS.get(i) {
            Some(&ms) => LatencyBound::AtMost(Duration::from_millis(ms)),
            None => LatencyBound::Over(Duration::from_millis(
                LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1],
            )),
        }
    }

    /// The bound as a duration (the lower one for [`LatencyBound::Over`]).
    pub fn duration(self) -> Duration {
        match self {
            LatencyBound::AtMost(d) | LatencyBound::Over(d) => d,
        }
    }
}

/// The bucket of `latency`.
pub fn bucket(latency: Duration) -> usize {
    let ms = latency.as_millis();
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&bound| ms <= u128::from(bound))
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// The start of `t`'s minute, in UTC.
pub fn minute_of(t: OffsetDateTime) -> OffsetDateTime {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.replace_second(0)
        .and_then(|t| t.replace_nanosecond(0))
        .unwrap_or(t)
}

/// One destination's counts for one minute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteCounts {
    /// The minute's start, UTC.
    #[serde(with = "time::serde::rfc3339")]
    pub minute: OffsetDateTime,
    /// The destination.
    pub destination: String,
    /// What was finished.
    pub counts: Counts,
}

/// The outbox's backlog as sampled in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BacklogSample {
    /// The minute's start, UTC.
    #[serde(with = "time::serde::rfc3339")]
    pub minute: OffsetDateTime,
    /// Pending ops, due or not.
    pub pending: i64,
    /// Ops in flight.
    pub in_flight: i64,
    /// How long the oldest pending op had waited, in milliseconds; `None` with none pending.
    pub oldest_pending_ms: Option<i64>,
}

/// What the charts read for a window: the counts per minute and destination, summed over the
/// dispatchers, and the backlog per minute, both oldest first. Minutes nobody wrote are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatsWindow {
    /// Counts per minute and destination.
    pub counts: Vec<MinuteCounts>,
    /// The backlog per minute.
    pub backlog: Vec<BacklogSample>,
}

/// A column's count as the tables keep it (a minute's count by one dispatcher fits easily).
pub(crate) fn column(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A summed column read back; a negative sum (a row written by hand) counts as none.
pub(crate) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The latency columns' names, in bucket order.
pub(crate) const LATENCY_COLUMNS: [&str; LATENCY_BUCKETS] = [
    "latency_le_100ms",
    "latency_le_250ms",
    "latency_le_500ms",
    "latency_le_1s",
    "latency_le_2500ms",
    "latency_le_5s",
    "latency_le_10s",
    "latency_le_30s",
    "latency_le_1m",
    "latency_le_5m",
    "latency_le_15m",
    "latency_le_1h",
    "latency_over_1h",
];

/// A [`MinuteCounts`] from a row of `minute_stats_read.sql`, on any backend (each has a `col`
/// reader).
macro_rules! minute_counts_row {
    ($r:expr) => {{
        let mut latency = [0u64; $crate::stats::LATENCY_BUCKETS];
        for (slot, name) in latency.iter_mut().zip($crate::stats::LATENCY_COLUMNS) {
            *slot = $crate::stats::count($r.col::<i64>(name)?);
        }
        $crate::stats::MinuteCounts {
            minute: $r.col("minute")?,
            destination: $r.col("destination")?,
            counts: $crate::stats::Counts {
                delivered: $crate::stats::count($r.col::<i64>("delivered")?),
                retried: $crate::stats::count($r.col::<i64>("retried")?),
                dead: $crate::stats::count($r.col::<i64>("dead")?),
                latency,
            },
        }
    }};
}
pub(crate) use minute_counts_row;

/// A [`BacklogSample`] from a row of `backlog_minute_read.sql`, on any backend.
macro_rules! backlog_row {
    ($r:expr) => {{
        $crate::stats::BacklogSample {
            minute: $r.col("minute")?,
            pending: $r.col::<i64>("pending")?.max(0),
            in_flight: $r.col::<i64>("in_flight")?.max(0),
            oldest_pending_ms: $r.col::<Option<i64>>("oldest_pending_ms")?,
        }
    }};
}
pub(crate) use backlog_row;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_the_bucket_whose_bound_they_do_not_exceed() {
        assert_eq!(bucket(Duration::ZERO), 0);
        assert_eq!(bucket(Duration::from_millis(100)), 0);
        assert_eq!(bucket(Duration::from_millis(101)), 1);
        assert_eq!(bucket(Duration::from_secs(1)), 3);
        assert_eq!(bucket(Duration::from_secs(3600)), 11);
        assert_eq!(bucket(Duration::from_secs(3601)), 12);
        assert_eq!(bucket(Duration::MAX), 12);
    }

    #[test]
    fn quantiles_name_the_bucket_holding_their_rank() {
        let mut c = Counts::default();
        assert_eq!(c.latency_quantile(0.5), None);
        for _ in 0..98 {
            c.delivered_after(Duration::from_millis(40));
        }
        c.delivered_after(Duration::from_millis(700));
        c.delivered_after(Duration::from_secs(7200));
        assert_eq!(c.delivered, 100);
        let at_most = |ms| Some(LatencyBound::AtMost(Duration::from_millis(ms)));
        assert_eq!(c.latency_quantile(0.5), at_most(100));
        assert_eq!(c.latency_quantile(0.98), at_most(100));
        assert_eq!(c.latency_quantile(0.99), at_most(1000));
        assert_eq!(
            c.latency_quantile(1.0),
            Some(LatencyBound::Over(Duration::from_secs(3600)))
        );
    }

    #[test]
    fn counts_add_up_and_saturate() {
        let mut a = Counts {
            delivered: u64::MAX,
            retried: 1,
            ..Counts::default()
        };
        let b = Counts {
            delivered: 1,
            retried: 2,
            dead: 3,
            latency: [1; LATENCY_BUCKETS],
        };
        a.add(&b);
        assert_eq!((a.delivered, a.retried, a.dead), (u64::MAX, 3, 3));
        assert_eq!(a.latency, [1; LATENCY_BUCKETS]);
        assert!(!a.is_empty() && Counts::default().is_empty());
        assert_eq!(column(u64::MAX), i32::MAX);
        assert_eq!(count(-5), 0);
    }

    #[test]
    fn a_minute_starts_on_its_zeroth_second_in_utc() {
        // 2026-12-07 17:42:17.5 UTC, seen from UTC+2.
        let utc = OffsetDateTime::from_unix_timestamp(1_796_665_337).unwrap()
            + time::Duration::milliseconds(500);
        let t = utc.to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        let start = OffsetDateTime::from_unix_timestamp(1_796_665_320).unwrap();
        assert_eq!(minute_of(t), start);
        assert_eq!(minute_of(t).offset(), time::UtcOffset::UTC);
    }
}
