//! The SQLite side of `outboxctl` (see `admin/`): its `sql/sqlite/admin_*` files and how it
//! binds lists (JSON arrays) and times (text), for the admin statements written once in
//! `admin/sqlx_admin.rs`; the flows of replay, cancel and purge that run them are
//! `admin/change.rs` (in one `BEGIN IMMEDIATE` transaction per batch: SQLite's one writer).

use sqlx::sqlite::{SqlitePool, SqliteRow};
use time::OffsetDateTime;

use super::{SqliteStore, map_err, rejection_row};
use crate::admin::sqlx_admin::{AdminDb, AdminSql, SqlxAdmin, admin_sql};
use crate::error::{Backend, Error};
use crate::op::RejectionRow;

impl AdminDb for sqlx::Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
    const SQL: AdminSql = admin_sql!("sqlite");
    // Keeps the planner off the (destination, key) index for a destination filter.
    const WALK_IDS: &'static str = "+";
    // The partial index's predicate, word for word: SQLite uses a partial index only then.
    const ATTENTION_STATES: &'static str = "\n  AND state IN ('dead', 'cancelled', 'superseded')";
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
