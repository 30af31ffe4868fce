//! The console's per-minute counts on SQLite (`crate::stats`): written by each dispatcher once
//! a minute, read summed, purged after two days. Minutes are text as `sqlite_time` writes them.

use super::admin::sqlite_time;
use super::*;
use crate::stats::{
    BacklogSample, MinuteCounts, StatsWindow, backlog_row, column, minute_counts_row,
};

const MINUTE_STATS_INSERT: &str = include_str!("../../sql/sqlite/minute_stats_insert.sql");
const BACKLOG_MINUTE_INSERT: &str = include_str!("../../sql/sqlite/backlog_minute_insert.sql");
const MINUTE_STATS_READ: &str = include_str!("../../sql/sqlite/minute_stats_read.sql");
const BACKLOG_MINUTE_READ: &str = include_str!("../../sql/sqlite/backlog_minute_read.sql");
const MINUTE_STATS_PURGE: &str = include_str!("../../sql/sqlite/minute_stats_purge.sql");
const BACKLOG_MINUTE_PURGE: &str = include_str!("../../sql/sqlite/backlog_minute_purge.sql");

impl SqliteStore {
    pub(crate) async fn stats_write(
        &self,
        instance: Uuid,
        counts: &[MinuteCounts],
        backlog: Option<&BacklogSample>,
    ) -> Result<(), Error> {
        let instance = instance.to_string();
        for m in counts {
            let c = &m.counts;
            let mut q = sqlx::query(MINUTE_STATS_INSERT)
                .bind(sqlite_time(m.minute))
                .bind(instance.as_str())
                .bind(m.destination.as_str())
                .bind(column(c.delivered))
                .bind(column(c.retried))
                .bind(column(c.dead));
            for n in c.latency {
                q = q.bind(column(n));
            }
            q.execute(&self.pool).await.map_err(map_err)?;
        }
        if let Some(b) = backlog {
            sqlx::query(BACKLOG_MINUTE_INSERT)
                .bind(sqlite_time(b.minute))
                .bind(instance.as_str())
                .bind(b.pending.max(0))
                .bind(b.in_flight.max(0))
                .bind(b.oldest_pending_ms.map(|ms| ms.max(0)))
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    pub(crate) async fn stats_read(&self, since: OffsetDateTime) -> Result<StatsWindow, Error> {
        let since = sqlite_time(since);
        let rows = sqlx::query(MINUTE_STATS_READ)
            .bind(since.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        let counts = rows
            .iter()
            .map(|r| Ok(minute_counts_row!(r)))
            .collect::<Result<_, Error>>()?;
        let rows = sqlx::query(BACKLOG_MINUTE_READ)
            .bind(since.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        let backlog = rows
            .iter()
            .map(|r| Ok(backlog_row!(r)))
            .collect::<Result<_, Error>>()?;
        Ok(StatsWindow { counts, backlog })
    }

    pub(crate) async fn stats_purge(&self, before: OffsetDateTime) -> Result<u64, Error> {
        let before = sqlite_time(before);
        let mut deleted = 0;
        for sql in [MINUTE_STATS_PURGE, BACKLOG_MINUTE_PURGE] {
            let done = sqlx::query(sql)
                .bind(before.as_str())
                .execute(&self.pool)
                .await
                .map_err(map_err)?;
            deleted += done.rows_affected();
        }
        Ok(deleted)
    }
}
