//! Destination health on SQLite: the breaker rows and the holds, read for the dispatchers'
//! view and `outboxctl destination list`, and locked and written in a change's transaction
//! (`crate::health`).

use super::*;
use crate::health::health_row;
use crate::model::{DestinationHealth, Hold};

const DESTINATION_ENSURE: &str = include_str!("../../sql/sqlite/destination_ensure.sql");
const DESTINATION_LOCK: &str = include_str!("../../sql/sqlite/destination_lock.sql");
const DESTINATION_WRITE: &str = include_str!("../../sql/sqlite/destination_write.sql");
const DESTINATION_HOLD_INSERT: &str = include_str!("../../sql/sqlite/destination_hold_insert.sql");
const DESTINATION_LIST: &str = include_str!("../../sql/sqlite/destination_list.sql");
const DESTINATION_HOLD_LIST: &str = include_str!("../../sql/sqlite/destination_hold_list.sql");
const DESTINATION_HOLD_PURGE: &str = include_str!("../../sql/sqlite/destination_hold_purge.sql");

impl SqliteStore {
    pub(crate) async fn destination_list(&self) -> Result<Vec<DestinationHealth>, Error> {
        let rows = sqlx::query(DESTINATION_LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| Ok(health_row!(r))).collect()
    }

    pub(crate) async fn destination_hold_purge(&self, older_than_ms: i64) -> Result<u64, Error> {
        let done = sqlx::query(DESTINATION_HOLD_PURGE)
            .bind(older_than_ms)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    pub(crate) async fn destination_hold_list(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<(String, Hold)>, Error> {
        let rows = sqlx::query(DESTINATION_HOLD_LIST)
            .bind(super::admin::sqlite_time(since))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
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
pub(super) async fn ensure(c: &mut SqliteConnection, name: &str) -> Result<(), Error> {
    sqlx::query(DESTINATION_ENSURE)
        .bind(name)
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// `destination_lock.sql`: the row and the database clock.
pub(super) async fn lock(
    c: &mut SqliteConnection,
    name: &str,
) -> Result<(DestinationHealth, OffsetDateTime), Error> {
    let r = sqlx::query(DESTINATION_LOCK)
        .bind(name)
        .fetch_one(c)
        .await
        .map_err(map_err)?;
    Ok((health_row!(r), r.col("now")?))
}

/// `destination_write.sql`.
pub(super) async fn write(c: &mut SqliteConnection, h: &DestinationHealth) -> Result<(), Error> {
    let time = |t: Option<OffsetDateTime>| t.map(super::admin::sqlite_time);
    let pause = h.paused.as_ref();
    sqlx::query(DESTINATION_WRITE)
        .bind(&h.destination)
        .bind(h.state.as_str())
        .bind(h.consecutive_failures.min(i32::MAX as u32) as i32)
        .bind(h.openings.min(i32::MAX as u32) as i32)
        .bind(time(h.opened_at))
        .bind(time(h.next_probe_at))
        .bind(time(h.probe_started_at))
        .bind(h.last_error.as_deref())
        .bind(time(h.last_failure_at))
        .bind(time(pause.map(|p| p.at)))
        .bind(pause.map(|p| p.by.as_str()))
        .bind(pause.map(|p| p.reason.as_str()))
        .bind(time(Some(h.changed_at)))
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// `destination_hold_insert.sql`.
pub(super) async fn hold_insert(
    c: &mut SqliteConnection,
    name: &str,
    hold: Hold,
) -> Result<(), Error> {
    let time = super::admin::sqlite_time;
    sqlx::query(DESTINATION_HOLD_INSERT)
        .bind(name)
        .bind(time(hold.from))
        .bind(time(hold.until))
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}
