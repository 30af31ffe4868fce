//! The console's per-minute counts on PostgreSQL (`crate::stats`): written by each dispatcher
//! once a minute, read summed, purged after two days.

use super::*;
use crate::stats::{
    BacklogSample, MinuteCounts, StatsWindow, backlog_row, column, minute_counts_row,
};

const MINUTE_STATS_INSERT: &str = include_str!("../../sql/postgres/minute_stats_insert.sql");
const BACKLOG_MINUTE_INSERT: &str = include_str!("../../sql/postgres/backlog_minute_insert.sql");
const MINUTE_STATS_READ: &str = include_str!("../../sql/postgres/minute_stats_read.sql");
const BACKLOG_MINUTE_READ: &str = include_str!("../../sql/postgres/backlog_minute_read.sql");
const MINUTE_STATS_PURGE: &str = include_str!("../../sql/postgres/minute_stats_purge.sql");

impl PgStore {
    pub(crate) async fn stats_write(
        &self,
        instance: Uuid,
        counts: &[MinuteCounts],
        backlog: Option<&BacklogSample>,
    ) -> Result<(), Error> {
        for m in counts {
            let c = &m.counts;
            let mut q = query(MINUTE_STATS_INSERT)
                .bind(m.minute)
                .bind(instance)
                .bind(m.destination.as_str())
                .bind(column(c.delivered))
                .bind(column(c.retried))
                .bind(column(c.dead));
            for n in c.latency {
                q = q.bind(column(n));
            }
            q.execute_on(self).await?;
        }
        if let Some(b) = backlog {
            query(BACKLOG_MINUTE_INSERT)
                .bind(b.minute)
                .bind(instance)
                .bind(b.pending.max(0))
                .bind(b.in_flight.max(0))
                .bind(b.oldest_pending_ms.map(|ms| ms.max(0)))
                .execute_on(self)
                .await?;
        }
        Ok(())
    }

    pub(crate) async fn stats_read(&self, since: OffsetDateTime) -> Result<StatsWindow, Error> {
        let rows = query(MINUTE_STATS_READ).bind(since).all_on(self).await?;
        let counts = rows
            .iter()
            .map(|r| Ok(minute_counts_row!(r)))
            .collect::<Result<_, Error>>()?;
        let rows = query(BACKLOG_MINUTE_READ).bind(since).all_on(self).await?;
        let backlog = rows
            .iter()
            .map(|r| Ok(backlog_row!(r)))
            .collect::<Result<_, Error>>()?;
        Ok(StatsWindow { counts, backlog })
    }

    pub(crate) async fn stats_purge(&self, before: OffsetDateTime) -> Result<u64, Error> {
        let r = query(MINUTE_STATS_PURGE).bind(before).one_on(self).await?;
        Ok(r.col::<i64>("deleted")?.max(0) as u64)
    }
}
