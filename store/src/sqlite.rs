//! The SQLite backend (the embedded default): one database file in WAL mode with a busy
//! timeout and full fsync, and one function per SQL file in `sql/sqlite/`. SQLite has a single
//! writer, so every write statement is atomic against every other; multi-statement writes run
//! in `BEGIN IMMEDIATE` transactions. Lease time is SQLite's `'now'` inside the SQL (G2).

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection as _, Row};
use time::OffsetDateTime;

use crate::StoreOptions;
use crate::error::{Backend, Error, InvalidInput, StoreError, StoreErrorKind};
use crate::migrate::{self, AppliedMigration, MigrationReport};
use crate::model::{FencingToken, LeaseRow, OwnerId, ResourceName};

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../sql/sqlite/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../sql/sqlite/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../sql/sqlite/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../sql/sqlite/lease_list.sql");
const MIGRATION_BEGIN: &str = include_str!("../sql/sqlite/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../sql/sqlite/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../sql/sqlite/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../sql/sqlite/migration_record.sql");

/// A connection pool to one SQLite database file.
#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, Error> {
        if !names_a_file(url) {
            // An in-memory database is a different database per pooled connection and is gone
            // with the process: nothing accepted there would survive (G6).
            return Err(InvalidInput::new(
                "database_url",
                "sqlite needs a file path, as in sqlite://outbox.db",
            )
            .into());
        }
        let connect: SqliteConnectOptions = url.parse().map_err(map_err)?;
        let connect = connect
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.sqlite_busy_timeout)
            .foreign_keys(true);
        // One direct connection first: it creates the file and switches it to WAL, and a
        // failure (a missing folder, no permission) is reported at once with its cause
        // instead of as a pool timeout.
        SqliteConnection::connect_with(&connect)
            .await
            .map_err(map_err)?
            .close()
            .await
            .map_err(map_err)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect);
        Ok(SqliteStore { pool })
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) async fn migrate(&self) -> Result<MigrationReport, Error> {
        let mut tx = self
            .pool
            .begin_with(MIGRATION_BEGIN)
            .await
            .map_err(map_err)?;
        sqlx::query(MIGRATION_TABLE_CREATE)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let applied: Vec<AppliedMigration> = sqlx::query(MIGRATION_LIST)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| AppliedMigration {
                version: r.get("version"),
                name: r.get("name"),
                checksum: r.get("checksum"),
            })
            .collect();
        let (pending, mut report) = migrate::plan(migrate::migrations(Backend::Sqlite), &applied)?;
        for m in pending {
            sqlx::raw_sql(m.sql)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            sqlx::query(MIGRATION_RECORD)
                .bind(m.version)
                .bind(m.name)
                .bind(m.checksum())
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            report.applied.push(migrate::label(m));
        }
        tx.commit().await.map_err(map_err)?;
        Ok(report)
    }

    pub(crate) async fn lease_acquire(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        ttl_ms: i64,
    ) -> Result<Option<(FencingToken, OffsetDateTime)>, Error> {
        let row = sqlx::query(LEASE_ACQUIRE_IF_FREE)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row.map(|r| (FencingToken::new(r.get("fence")), r.get("expires_at"))))
    }

    pub(crate) async fn lease_renew(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<Option<OffsetDateTime>, Error> {
        let row = sqlx::query(LEASE_RENEW_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(token.get())
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row.map(|r| r.get("expires_at")))
    }

    pub(crate) async fn lease_release(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        let done = sqlx::query(LEASE_RELEASE_IF_OWNER)
            .bind(resource.as_str())
            .bind(owner.as_uuid().hyphenated())
            .bind(token.get())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_list(&self) -> Result<Vec<LeaseRow>, Error> {
        let rows = sqlx::query(LEASE_LIST)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let owner_id = r
                    .get::<Option<String>, _>("owner_id")
                    .map(|s| s.parse::<OwnerId>())
                    .transpose()?;
                Ok(LeaseRow {
                    resource: ResourceName::new(r.get::<String, _>("resource"))?,
                    owner_id,
                    token: FencingToken::new(r.get("fence")),
                    expires_at: r.get("expires_at"),
                    held: r.get("held"),
                    remaining_ms: r.get("remaining_ms"),
                })
            })
            .collect()
    }

    /// Checks that the file can be read; used by readiness probes.
    pub(crate) async fn ping(&self) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        conn.ping().await.map_err(map_err)
    }
}

/// Whether a `sqlite:` URL names a file rather than an in-memory database.
fn names_a_file(url: &str) -> bool {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    !path.is_empty() && path != ":memory:" && !query.split('&').any(|p| p == "mode=memory")
}

/// Maps a driver error to its portable kind, by SQLite's primary result code.
pub(crate) fn map_err(e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
            match code & 0xff {
                // SQLITE_CONSTRAINT with the unique / primary key extended codes
                19 if matches!(code, 1555 | 2067) => StoreErrorKind::UniqueViolation,
                // SQLITE_BUSY, SQLITE_LOCKED: another writer held the lock past the busy timeout
                5 | 6 => StoreErrorKind::Retryable,
                // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_FULL
                10 | 14 | 13 => StoreErrorKind::Unavailable,
                _ => StoreErrorKind::Other,
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    };
    Error::Store(StoreError::new(Backend::Sqlite, kind, e))
}

#[cfg(test)]
mod tests {
    use super::names_a_file;

    #[test]
    fn only_file_urls_are_accepted() {
        assert!(names_a_file("sqlite://outbox.db"));
        assert!(names_a_file("sqlite:///var/lib/outbox/outbox.db?mode=rwc"));
        for memory in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://",
            "sqlite://x.db?mode=memory",
        ] {
            assert!(!names_a_file(memory), "{memory}");
        }
    }
}
