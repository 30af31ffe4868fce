//! The counts behind the console's charts (`outbox_store::stats`): every recorded completion is
//! counted in memory under its minute and destination, and once a minute the minutes that
//! ended are written with a sample of the backlog, a few rows per minute whatever the traffic.
//! On shutdown, once every attempt has ended, what is left (the current minute too) is written.
//! A write that fails is kept and tried again with the next one; minutes older than the rows'
//! retention are dropped instead, so an unreachable database cannot grow this process.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use outbox_store::Store;
use outbox_store::stats::{self, BacklogSample, Counts, MinuteCounts};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

/// Seconds after a minute's end before it is written: attempts recorded right at its end are
/// in, and dispatchers started together do not write at the same instant forever.
const AFTER_MINUTE: Duration = Duration::from_secs(2);
/// How often rows past their retention are deleted.
const PURGE_EVERY: u32 = 10;
/// The most destinations counted in one minute: names come from producers (an op for a
/// destination no dispatcher is configured for is never completed, so in practice these are
/// the configured ones), and the bound keeps a hostile name flood from growing memory.
const DESTINATIONS_PER_MINUTE: usize = 1000;

/// Counts per (minute, destination), not yet written.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    open: Mutex<BTreeMap<(OffsetDateTime, String), Counts>>,
}

/// What a completion made of its op, as the charts count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Delivered this long after its enqueue.
    Delivered(Duration),
    /// Failed, due again.
    Retried,
    /// Dead.
    Dead,
}

impl Tally {
    /// Counts `what` for `destination` in the current minute.
    pub(crate) fn count(&self, destination: &str, what: Finished) {
        self.count_at(OffsetDateTime::now_utc(), destination, what);
    }

    fn count_at(&self, at: OffsetDateTime, destination: &str, what: Finished) {
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        let key = (stats::minute_of(at), destination.to_owned());
        if !open.contains_key(&key)
            && open.range((key.0, String::new())..).count() >= DESTINATIONS_PER_MINUTE
        {
            return;
        }
        let c = open.entry(key).or_default();
        match what {
            Finished::Delivered(latency) => c.delivered_after(latency),
            Finished::Retried => c.retried = c.retried.saturating_add(1),
            Finished::Dead => c.dead = c.dead.saturating_add(1),
        }
    }

    /// Takes the minutes before `until` (all of them with `None`).
    fn take(&self, until: Option<OffsetDateTime>) -> Vec<MinuteCounts> {
        let Ok(mut open) = self.open.lock() else {
            return Vec::new();
        };
        let kept = match until {
            Some(until) => open.split_off(&(until, String::new())),
            None => BTreeMap::new(),
        };
        let taken = std::mem::replace(&mut *open, kept);
        taken
            .into_iter()
            .filter(|(_, counts)| !counts.is_empty())
            .map(|((minute, destination), counts)| MinuteCounts {
                minute,
                destination,
                counts,
            })
            .collect()
    }

    /// Puts back what could not be written, but for minutes before `oldest`.
    fn put_back(&self, rows: Vec<MinuteCounts>, oldest: OffsetDateTime) {
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        let mut dropped = 0usize;
        for m in rows {
            if m.minute < oldest {
                dropped += 1;
                continue;
            }
            open.entry((m.minute, m.destination))
                .or_default()
                .add(&m.counts);
        }
        if dropped > 0 {
            tracing::warn!(
                rows = dropped,
                "dropping the console's counts of minutes past their retention: the database refused them that long"
            );
        }
    }
}

/// Writes the tally's ended minutes once a minute until `stop`, then everything left. The
/// caller cancels `stop` once no attempt can end any more.
pub(crate) async fn run(
    store: Store,
    tally: std::sync::Arc<Tally>,
    instance: uuid::Uuid,
    stop: CancellationToken,
) {
    let mut writes = 0u32;
    loop {
        let now = OffsetDateTime::now_utc();
        let next = stats::minute_of(now) + time::Duration::MINUTE;
        let wait = (next - now).unsigned_abs() + AFTER_MINUTE;
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
        }
        let until = stats::minute_of(OffsetDateTime::now_utc());
        write(&store, &tally, instance, Some(until)).await;
        writes = writes.wrapping_add(1);
        if writes % PURGE_EVERY == 1 {
            purge(&store).await;
        }
    }
    write(&store, &tally, instance, None).await;
}

/// Writes the minutes before `until` (all with `None`) and a backlog sample for the last one
/// that ended.
async fn write(store: &Store, tally: &Tally, instance: uuid::Uuid, until: Option<OffsetDateTime>) {
    let now = OffsetDateTime::now_utc();
    let rows = tally.take(until);
    let backlog = match store.op_stats().await {
        Ok(s) => Some(BacklogSample {
            minute: stats::minute_of(now - time::Duration::MINUTE),
            pending: s.pending,
            in_flight: s.in_flight,
            oldest_pending_ms: s.oldest_pending_ms,
        }),
        Err(e) => {
            tracing::warn!(error = %e, "could not count the backlog for the console's charts");
            None
        }
    };
    if rows.is_empty() && backlog.is_none() {
        return;
    }
    if let Err(e) = store.stats_write(instance, &rows, backlog.as_ref()).await {
        tracing::warn!(error = %e, rows = rows.len(), "could not write the console's counts; trying again in a minute");
        tally.put_back(rows, now - stats::STATS_KEPT);
    }
}

/// Deletes the rows past their retention.
async fn purge(store: &Store) {
    let before = OffsetDateTime::now_utc() - stats::STATS_KEPT;
    match store.stats_purge(before).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(rows = n, "purged the console's counts past their retention"),
        Err(e) => tracing::warn!(error = %e, "could not purge the console's old counts"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_796_665_320 + secs).unwrap()
    }

    #[test]
    fn completions_are_counted_by_minute_and_destination_and_taken_once_ended() {
        let t = Tally::default();
        t.count_at(at(1), "api", Finished::Delivered(Duration::from_millis(30)));
        t.count_at(at(59), "api", Finished::Retried);
        t.count_at(at(30), "mail", Finished::Dead);
        t.count_at(at(61), "api", Finished::Delivered(Duration::from_secs(2)));
        let ended = t.take(Some(at(60)));
        assert_eq!(ended.len(), 2);
        assert_eq!(
            (ended[0].destination.as_str(), ended[0].minute),
            ("api", at(0))
        );
        assert_eq!((ended[0].counts.delivered, ended[0].counts.retried), (1, 1));
        assert_eq!(ended[0].counts.latency[0], 1);
        assert_eq!(
            (ended[1].destination.as_str(), ended[1].counts.dead),
            ("mail", 1)
        );
        assert!(t.take(Some(at(60))).is_empty(), "taken once");
        let rest = t.take(None);
        assert_eq!(
            (rest.len(), rest[0].minute, rest[0].counts.latency[4]),
            (1, at(60), 1)
        );
    }

    #[test]
    fn rows_put_back_add_to_new_counts_and_old_ones_are_dropped() {
        let t = Tally::default();
        t.count_at(at(5), "api", Finished::Retried);
        let taken = t.take(None);
        t.count_at(at(6), "api", Finished::Retried);
        t.put_back(taken.clone(), at(0));
        assert_eq!(t.take(None)[0].counts.retried, 2);
        t.put_back(taken, at(60));
        assert!(t.take(None).is_empty(), "past retention");
    }

    #[test]
    fn a_flood_of_destination_names_is_bounded_per_minute() {
        let t = Tally::default();
        for i in 0..DESTINATIONS_PER_MINUTE + 10 {
            t.count_at(at(1), &format!("d{i}"), Finished::Dead);
        }
        t.count_at(at(1), "d0", Finished::Dead);
        let taken = t.take(None);
        assert_eq!(taken.len(), DESTINATIONS_PER_MINUTE);
        assert_eq!(
            taken.iter().map(|m| m.counts.dead).sum::<u64>(),
            DESTINATIONS_PER_MINUTE as u64 + 1
        );
    }
}
