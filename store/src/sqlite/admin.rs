//! The SQLite side of `outboxctl` (see `admin/`): one function per `sql/sqlite/admin_*` file;
//! the flows of replay, cancel and purge that run them are `admin/change.rs` (in one
//! `BEGIN IMMEDIATE` transaction per batch: SQLite's one writer).

use sqlx::Row;
use time::OffsetDateTime;
use uuid::Uuid;

use sqlx::sqlite::{SqliteConnection, SqlitePool};

use super::{Col as _, SqliteStore, map_err, rejection_row};
use crate::admin::rows::{attempt_row, locked_op, op_detail, op_summary, push_filter};
use crate::admin::{AttemptRow, Change, Locked, OpDetail, OpFilter, OpSummary, StateCount, Status};
use crate::dispatch::parse_headers;
use crate::error::{Backend, Error};
use crate::op::RejectionRow;

const ADMIN_STATUS_COUNTS: &str = include_str!("../../sql/sqlite/admin_status_counts.sql");
const ADMIN_STATUS_SUMMARY: &str = include_str!("../../sql/sqlite/admin_status_summary.sql");
const ADMIN_OP_LIST: &str = include_str!("../../sql/sqlite/admin_op_list.sql");
const ADMIN_DESTINATION_LIST: &str = include_str!("../../sql/sqlite/admin_destination_list.sql");
const ADMIN_OP_SHOW: &str = include_str!("../../sql/sqlite/admin_op_show.sql");
const ADMIN_OP_FIND: &str = include_str!("../../sql/sqlite/admin_op_find.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/sqlite/op_find_by_key.sql");
const ADMIN_ATTEMPT_LIST: &str = include_str!("../../sql/sqlite/admin_attempt_list.sql");
const ADMIN_ATTEMPT_TAIL: &str = include_str!("../../sql/sqlite/admin_attempt_tail.sql");
const ADMIN_ATTEMPT_LAST_ID: &str = include_str!("../../sql/sqlite/admin_attempt_last_id.sql");
const ADMIN_OP_LOCK: &str = include_str!("../../sql/sqlite/admin_op_lock.sql");
const ADMIN_OP_REPLAY: &str = include_str!("../../sql/sqlite/admin_op_replay.sql");
const ADMIN_OP_CANCEL: &str = include_str!("../../sql/sqlite/admin_op_cancel.sql");
const ADMIN_LOG_INSERT: &str = include_str!("../../sql/sqlite/admin_log_insert.sql");
const ADMIN_PURGE_COUNT: &str = include_str!("../../sql/sqlite/admin_purge_count.sql");
const ADMIN_PURGE: &str = include_str!("../../sql/sqlite/admin_purge.sql");
const ADMIN_REJECTION_LIST: &str = include_str!("../../sql/sqlite/admin_rejection_list.sql");

impl SqliteStore {
    /// Everything `status` reports but the partition leases (the caller adds them).
    pub(crate) async fn admin_status(&self) -> Result<Status, Error> {
        let counts = sqlx::query(ADMIN_STATUS_COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| {
                Ok(StateCount {
                    state: r.try_get("state")?,
                    destination: r.try_get("destination")?,
                    ops: r.try_get("ops")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(map_err)?;
        let r = sqlx::query(ADMIN_STATUS_SUMMARY)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        (|| {
            Ok::<_, sqlx::Error>(Status {
                counts,
                oldest_pending_ms: r.try_get("oldest_pending_ms")?,
                due_now: r.try_get("due_now")?,
                dead_last_day: r.try_get("dead_last_day")?,
                rejections_last_hour: r.try_get("rejections_last_hour")?,
                partitions: Vec::new(),
                instances: Vec::new(),
                partition_count: None,
            })
        })()
        .map_err(map_err)
    }

    pub(crate) async fn admin_op_list(&self, filter: &OpFilter) -> Result<Vec<OpSummary>, Error> {
        let destinations: Vec<String> =
            if filter.idempotency_key.is_some() && filter.destination.is_none() {
                sqlx::query_scalar(ADMIN_DESTINATION_LIST)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(map_err)?
            } else {
                Vec::new()
            };
        let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new(ADMIN_OP_LIST);
        push_filter!(qb, filter, &destinations, sqlite_time, "+");
        qb.build()
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Ok(op_summary!(r)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(map_err)
    }

    pub(crate) async fn admin_op_find(&self, op_id: Uuid) -> Result<Option<i64>, Error> {
        sqlx::query_scalar(ADMIN_OP_FIND)
            .bind(op_id.hyphenated().to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)
    }

    pub(crate) async fn admin_op_find_by_key(
        &self,
        destination: &str,
        key: &str,
    ) -> Result<Option<i64>, Error> {
        let row = sqlx::query(OP_FIND_BY_KEY)
            .bind(destination)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|r| r.col("id")).transpose()
    }

    pub(crate) async fn admin_op_show(&self, seq: i64) -> Result<Option<OpDetail>, Error> {
        let Some(r) = sqlx::query(ADMIN_OP_SHOW)
            .bind(seq)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?
        else {
            return Ok(None);
        };
        let mut detail = (|| Ok::<_, sqlx::Error>(op_detail!(r)))().map_err(map_err)?;
        detail.headers = parse_headers(&r.col::<String>("headers")?, Backend::Sqlite)?;
        detail.attempt_history = sqlx::query(ADMIN_ATTEMPT_LIST)
            .bind(seq)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Ok(attempt_row!(r)))
            .collect::<Result<Vec<AttemptRow>, sqlx::Error>>()
            .map_err(map_err)?;
        Ok(Some(detail))
    }

    pub(crate) async fn admin_attempt_last_id(&self) -> Result<i64, Error> {
        sqlx::query_scalar(ADMIN_ATTEMPT_LAST_ID)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)
    }

    pub(crate) async fn admin_attempts_after(
        &self,
        last_id: i64,
        limit: u32,
    ) -> Result<Vec<AttemptRow>, Error> {
        sqlx::query(ADMIN_ATTEMPT_TAIL)
            .bind(last_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Ok(attempt_row!(r)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(map_err)
    }

    pub(crate) async fn admin_rejections(
        &self,
        since_ms: i64,
        resource: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RejectionRow>, Error> {
        let rows = sqlx::query(ADMIN_REJECTION_LIST)
            .bind(since_ms)
            .bind(resource)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(rejection_row).collect()
    }
}

/// `admin_op_lock.sql`.
pub(super) async fn op_lock(c: &mut SqliteConnection, seqs: &[i64]) -> Result<Vec<Locked>, Error> {
    sqlx::query(ADMIN_OP_LOCK)
        .bind(crate::json::list(seqs))
        .fetch_all(c)
        .await
        .map_err(map_err)?
        .iter()
        .map(|r| Ok(locked_op!(r)))
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(map_err)
}

/// `admin_op_replay.sql`.
pub(super) async fn op_replay(c: &mut SqliteConnection, seqs: &[i64]) -> Result<(), Error> {
    sqlx::query(ADMIN_OP_REPLAY)
        .bind(crate::json::list(seqs))
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// `admin_op_cancel.sql`.
pub(super) async fn op_cancel(
    c: &mut SqliteConnection,
    seqs: &[i64],
    note: &str,
) -> Result<(), Error> {
    sqlx::query(ADMIN_OP_CANCEL)
        .bind(crate::json::list(seqs))
        .bind(note)
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// `admin_log_insert.sql`.
pub(super) async fn log_insert(
    c: &mut SqliteConnection,
    change: &Change,
    action: &str,
    details: &str,
) -> Result<(), Error> {
    sqlx::query(ADMIN_LOG_INSERT)
        .bind(&change.actor)
        .bind(action)
        .bind(&change.reason)
        .bind(details)
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// `admin_purge_count.sql`.
pub(super) async fn purge_count(
    pool: &SqlitePool,
    states: &[&str],
    older_than_ms: i64,
) -> Result<Vec<(String, i64)>, Error> {
    sqlx::query(ADMIN_PURGE_COUNT)
        .bind(crate::json::list(states))
        .bind(older_than_ms)
        .fetch_all(pool)
        .await
        .map_err(map_err)?
        .iter()
        .map(|r| Ok((r.col("state")?, r.col("ops")?)))
        .collect()
}

/// `admin_purge.sql`: one batch.
pub(super) async fn purge(
    pool: &SqlitePool,
    states: &[&str],
    older_than_ms: i64,
    batch: usize,
) -> Result<Vec<String>, Error> {
    sqlx::query_scalar(ADMIN_PURGE)
        .bind(crate::json::list(states))
        .bind(older_than_ms)
        .bind(batch as i64)
        .fetch_all(pool)
        .await
        .map_err(map_err)
}

/// A time as SQLite stores it (`strftime('%Y-%m-%dT%H:%M:%fZ')`), so text comparisons order
/// correctly.
pub(super) fn sqlite_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::sqlite_time;

    #[test]
    fn times_compare_like_stored_ones() {
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(1_782_889_503_250_000_000)
            .unwrap()
            .to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(sqlite_time(t), "2026-07-01T07:05:03.250Z");
    }
}
