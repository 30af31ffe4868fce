//! The SQLite side of `outboxctl` (see `admin/`): its `sql/sqlite/admin_*` files and how it
//! binds lists (JSON arrays) and times (text), for the admin statements written once in
//! `admin/sqlx_admin.rs`; the flows of replay, cancel and purge that run them are
//! `admin/change.rs` (in one `BEGIN IMMEDIATE` transaction per batch: SQLite's one writer).

use sqlx::sqlite::{SqlitePool, SqliteRow};
use time::OffsetDateTime;

use super::{Col as _, SqliteStore, map_err, rejection_row, request_delete};
use crate::admin::sqlx_admin::{AdminDb, AdminSql, SqlxAdmin, admin_sql};
use crate::driver::Driver as _;
use crate::error::{Backend, Error};
use crate::op::RejectionRow;

impl AdminDb for sqlx::Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
    const SQL: AdminSql = admin_sql!("sqlite");
    // Keeps the planner off the (destination, key) index for a destination filter.
    const WALK_IDS: &'static str = "+";
    // Each op's state is its queue row or its finished row (0013_queue_layout.sql); the
    // partial index's predicate word for word: SQLite uses a partial index only then.
    const ATTENTION_STATES: &'static str = "\n  AND id IN (SELECT id FROM outbox_finished \
         WHERE state IN ('dead', 'cancelled', 'superseded'))";
    // Walking the requests newest first finds the unfinished ops soon (they are the newest);
    // a semi-join would read the whole queue first.
    const UNFINISHED_STATES: &'static str = "";

    type Ids = String;
    type Names = String;
    type Time = String;

    fn ids(seqs: &[i64]) -> String {
        crate::json::list(seqs)
    }

    fn names(names: &[&str]) -> String {
        crate::json::list(names)
    }

    fn time(t: OffsetDateTime) -> String {
        sqlite_time(t)
    }

    fn rejection_row(r: &SqliteRow) -> Result<RejectionRow, Error> {
        rejection_row(r)
    }

    fn map_err(e: sqlx::Error) -> Error {
        map_err(e)
    }

    fn persistent() -> bool {
        true
    }
}

impl SqlxAdmin for SqliteStore {
    type Db = sqlx::Sqlite;

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn pooled(&self) -> bool {
        false
    }
}

impl SqliteStore {
    /// `admin_purge.sql` and the requests of the ops it deleted (their attempts go with
    /// them), in one transaction: one batch, the states of its ops.
    pub(super) async fn purge_batch(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error> {
        let mut tx = self.begin().await?;
        let rows = sqlx::query(<sqlx::Sqlite as AdminDb>::SQL.purge)
            .bind(crate::json::list(states))
            .bind(older_than_ms)
            .bind(i64::try_from(batch).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut gone = Vec::with_capacity(rows.len());
        for r in &rows {
            ids.push(r.col::<i64>("id")?);
            gone.push(r.col::<String>("state")?);
        }
        request_delete(&mut tx, &ids).await?;
        Self::commit(tx).await?;
        Ok(gone)
    }
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
