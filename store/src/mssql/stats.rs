//! The console's per-minute counts on SQL Server (`crate::stats`): written by each dispatcher
//! once a minute, read summed, purged after two days.

use super::dispatch::iso_time;
use super::*;
use crate::stats::{
    BacklogSample, MinuteCounts, StatsWindow, backlog_row, column, minute_counts_row,
};

const MINUTE_STATS_INSERT: &str = include_str!("../../sql/mssql/minute_stats_insert.sql");
const BACKLOG_MINUTE_INSERT: &str = include_str!("../../sql/mssql/backlog_minute_insert.sql");
const MINUTE_STATS_READ: &str = include_str!("../../sql/mssql/minute_stats_read.sql");
const BACKLOG_MINUTE_READ: &str = include_str!("../../sql/mssql/backlog_minute_read.sql");
const MINUTE_STATS_PURGE: &str = include_str!("../../sql/mssql/minute_stats_purge.sql");

impl MsStore {
    pub(crate) async fn stats_write(
        &self,
        instance: Uuid,
        counts: &[MinuteCounts],
        backlog: Option<&BacklogSample>,
    ) -> Result<(), Error> {
        for m in counts {
            let c = &m.counts;
            let mut stmt = Stmt::new(MINUTE_STATS_INSERT)
                .bind(iso_time(m.minute))
                .bind(instance)
                .bind(m.destination.as_str())
                .bind(column(c.delivered))
                .bind(column(c.retried))
                .bind(column(c.dead));
            for n in c.latency {
                stmt = stmt.bind(column(n));
            }
            self.execute(stmt).await?;
        }
        if let Some(b) = backlog {
            self.execute(
                Stmt::new(BACKLOG_MINUTE_INSERT)
                    .bind(iso_time(b.minute))
                    .bind(instance)
                    .bind(b.pending.max(0))
                    .bind(b.in_flight.max(0))
                    .bind(b.oldest_pending_ms.map(|ms| ms.max(0))),
            )
            .await?;
        }
        Ok(())
    }

    pub(crate) async fn stats_read(&self, since: OffsetDateTime) -> Result<StatsWindow, Error> {
        let rows = self
            .fetch_all(Stmt::new(MINUTE_STATS_READ).bind(iso_time(since)))
            .await?;
        let counts = rows
            .iter()
            .map(|r| Ok(minute_counts_row!(r)))
            .collect::<Result<_, Error>>()?;
        let rows = self
            .fetch_all(Stmt::new(BACKLOG_MINUTE_READ).bind(iso_time(since)))
            .await?;
        let backlog = rows
            .iter()
            .map(|r| Ok(backlog_row!(r)))
            .collect::<Result<_, Error>>()?;
        Ok(StatsWindow { counts, backlog })
    }

    pub(crate) async fn stats_purge(&self, before: OffsetDateTime) -> Result<u64, Error> {
        let r = self
            .fetch_one(Stmt::new(MINUTE_STATS_PURGE).bind(iso_time(before)))
            .await?;
        Ok(r.col::<i64>("deleted")?.max(0) as u64)
    }
}
