//! Destination health on SQL Server: the breaker rows and the holds, read for the dispatchers'
//! view and `outboxctl destination list`, and locked and written in a change's transaction
//! (`crate::health`).

use super::dispatch::iso_time;
use super::*;
use crate::health::health_row;
use crate::model::{DestinationHealth, Hold};

const DESTINATION_ENSURE: &str = include_str!("../../sql/mssql/destination_ensure.sql");
const DESTINATION_LOCK: &str = include_str!("../../sql/mssql/destination_lock.sql");
const DESTINATION_WRITE: &str = include_str!("../../sql/mssql/destination_write.sql");
const DESTINATION_HOLD_INSERT: &str = include_str!("../../sql/mssql/destination_hold_insert.sql");
const DESTINATION_LIST: &str = include_str!("../../sql/mssql/destination_list.sql");
const DESTINATION_HOLD_LIST: &str = include_str!("../../sql/mssql/destination_hold_list.sql");
const DESTINATION_HOLD_PURGE: &str = include_str!("../../sql/mssql/destination_hold_purge.sql");

impl MsStore {
    pub(crate) async fn destination_list(&self) -> Result<Vec<DestinationHealth>, Error> {
        let rows = self.fetch_all(Stmt::new(DESTINATION_LIST)).await?;
        rows.iter().map(|r| Ok(health_row!(r))).collect()
    }

    pub(crate) async fn destination_hold_purge(&self, older_than_ms: i64) -> Result<u64, Error> {
        self.affected(
            Stmt::new(DESTINATION_HOLD_PURGE)
                .bind(older_than_ms.clamp(0, super::dispatch::MAX_AGE_MS)),
        )
        .await
    }

    pub(crate) async fn destination_hold_list(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<(String, Hold)>, Error> {
        let rows = self
            .fetch_all(Stmt::new(DESTINATION_HOLD_LIST).bind(iso_time(since)))
            .await?;
        rows.iter()
            .map(|r| {
                let hold = Hold {
                    from: r.col("held_from")?,
                    until: r.col("held_until")?,
                };
                Ok((r.col("destination")?, hold))
            })
            .collect()
    }
}

/// `destination_ensure.sql`.
pub(super) async fn ensure(c: &mut Client, name: &str) -> Result<(), Error> {
    Stmt::new(DESTINATION_ENSURE).bind(name).execute(c).await
}

/// `destination_lock.sql`: the row and the database clock.
pub(super) async fn lock(
    c: &mut Client,
    name: &str,
) -> Result<(DestinationHealth, OffsetDateTime), Error> {
    let r = Stmt::new(DESTINATION_LOCK).bind(name).fetch_one(c).await?;
    Ok((health_row!(r), r.col("now")?))
}

/// `destination_write.sql`.
pub(super) async fn write(c: &mut Client, h: &DestinationHealth) -> Result<(), Error> {
    let pause = h.paused.as_ref();
    Stmt::new(DESTINATION_WRITE)
        .bind(h.destination.as_str())
        .bind(h.state.as_str())
        .bind(h.consecutive_failures.min(i32::MAX as u32) as i32)
        .bind(h.openings.min(i32::MAX as u32) as i32)
        .bind(h.opened_at.map(iso_time))
        .bind(h.next_probe_at.map(iso_time))
        .bind(h.probe_started_at.map(iso_time))
        .bind(h.last_error.as_deref())
        .bind(h.last_failure_at.map(iso_time))
        .bind(pause.map(|p| iso_time(p.at)))
        .bind(pause.map(|p| p.by.as_str()))
        .bind(pause.map(|p| p.reason.as_str()))
        .bind(iso_time(h.changed_at))
        .execute(c)
        .await
}

/// `destination_hold_insert.sql`.
pub(super) async fn hold_insert(c: &mut Client, name: &str, hold: Hold) -> Result<(), Error> {
    Stmt::new(DESTINATION_HOLD_INSERT)
        .bind(name)
        .bind(iso_time(hold.from))
        .bind(iso_time(hold.until))
        .execute(c)
        .await
}
