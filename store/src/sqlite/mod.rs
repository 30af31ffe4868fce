//! The SQLite backend (the embedded default): one database file in WAL mode with a busy
//! timeout and full fsync, and one function per SQL file in `sql/sqlite/`. SQLite has a single
//! writer, so every write statement is atomic against every other; multi-statement writes run
//! in `BEGIN IMMEDIATE` transactions. Lease time is SQLite's `'now'` inside the SQL (G2).
//! This file holds the connection, the enqueue strategy, rejections, row reading and error
//! mapping; `lease.rs`, `dispatch.rs`, `driver.rs` (the statements of the flows) and
//! `admin.rs` the other statements; `wakeup.rs` how an idle dispatcher notices commits.

mod admin;
mod dispatch;
mod driver;
mod file;
mod health;
mod lease;
mod membership;
mod partitioning;
mod stats;
mod wakeup;

use backon::{ExponentialBuilder, Retryable as _};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection as _, Row as _};
use time::OffsetDateTime;

use std::collections::HashMap;
use std::time::Duration;

use crate::StoreOptions;
use crate::admin::sqlx_admin::SqlxAdmin;
use crate::dispatch::{
    ClaimRoom, Claimed, ClaimedOp, Completion, OpStats, Unreadable, parse_headers,
};
use crate::driver::Driver;
use crate::enqueue::{self, check_lease};
use crate::error::{Backend, Error, InvalidInput, StoreError, StoreErrorKind};
use crate::json::list as json_list;
use crate::model::{
    AppliedMigration, Change, DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow,
    Migration, OrderKey, OwnerId, Partition, ResourceName,
};
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, Rejection, RejectionRow};
use crate::rows::{FoundOp, LeaseSeen, Locked};
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use uuid::fmt::Hyphenated;

const OP_INSERT_BATCH_IF_LEASE_HELD: &str =
    include_str!("../../sql/sqlite/op_insert_batch_if_lease_held.sql");
const OP_QUEUE_INSERT: &str = include_str!("../../sql/sqlite/op_queue_insert.sql");
const OP_REQUEST_DELETE: &str = include_str!("../../sql/sqlite/op_request_delete.sql");
const REJECTION_INSERT: &str = include_str!("../../sql/sqlite/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../../sql/sqlite/rejection_list.sql");

/// A connection pool to one SQLite database file.
#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pub(crate) pool: SqlitePool,
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
        // A new file is its owner's alone: op bodies are in it.
        file::prepare(connect.get_filename());
        // One direct connection first: it creates the file and switches it to WAL, and a
        // failure (a missing folder, no permission) is reported at once with its cause
        // instead of as a pool timeout. Processes starting together on a new file (a
        // dispatcher migrating it, a producer connecting) can find it locked while it changes
        // journal mode, where SQLite answers busy without waiting: tried again for as long as
        // the busy timeout would have waited.
        let first = || async {
            SqliteConnection::connect_with(&connect)
                .await
                .map_err(map_err)?
                .close()
                .await
                .map_err(map_err)
        };
        first
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(20))
                    .with_max_delay(Duration::from_millis(500))
                    .with_total_delay(Some(options.sqlite_busy_timeout))
                    .without_max_times(),
            )
            // Busy or locked only: a missing folder or a refused permission is said at once.
            .when(|e| matches!(e, Error::Store(s) if s.kind() == StoreErrorKind::Retryable))
            .await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect);
        Ok(SqliteStore { pool })
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// Enqueues in a `BEGIN IMMEDIATE` transaction.
    pub(crate) async fn op_enqueue(
        &self,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        enqueue::in_transaction(self, lease, op).await
    }

    /// All or nothing, in one `BEGIN IMMEDIATE` transaction.
    pub(crate) async fn op_enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[NewOp],
    ) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
        let mut tx = self.begin().await?;
        if let Err(reason) = check_lease(Self::lease_seen(&mut tx, &lease.resource).await?, lease) {
            Self::rollback(tx).await?;
            return Ok(Err(NotEnqueued::Rejected(reason)));
        }
        // One statement for every op: per-op statements cost the batch two thirds of its time.
        let inserted: HashMap<Uuid, i64> = sqlx::query(OP_INSERT_BATCH_IF_LEASE_HELD)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(crate::json::batch(ops))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Ok((r.col::<Hyphenated>("op_id")?.into_uuid(), r.col("id")?)))
            .collect::<Result<_, Error>>()?;
        let queued: Vec<(i64, i64)> = ops
            .iter()
            .filter_map(|o| inserted.get(&o.op_id).map(|&id| (id, o.delay_ms)))
            .collect();
        queue_insert(&mut tx, &queued).await?;
        enqueue::assemble::<Self>(tx, lease, ops, &inserted).await
    }

    pub(crate) async fn rejection_insert(&self, r: &Rejection) -> Result<(), Error> {
        sqlx::query(REJECTION_INSERT)
            .bind(r.resource.as_str())
            .bind(r.owner_id.as_uuid().hyphenated())
            .bind(r.token.get())
            .bind(r.current_token.map(FencingToken::get))
            .bind(r.destination.as_ref().map(DestinationName::as_str))
            .bind(r.idempotency_key.as_ref().map(IdempotencyKey::as_str))
            .bind(r.stage)
            .bind(r.reason)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub(crate) async fn rejection_list(&self, limit: i64) -> Result<Vec<RejectionRow>, Error> {
        let rows = sqlx::query(REJECTION_LIST)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(rejection_row).collect()
    }
}

/// The queue rows of requests just inserted: (op row id, delay in milliseconds) each
/// (`op_queue_insert.sql`; SQLite has no data-modifying WITH to write both in one statement).
async fn queue_insert(c: &mut SqliteConnection, queued: &[(i64, i64)]) -> Result<(), Error> {
    if queued.is_empty() {
        return Ok(());
    }
    sqlx::query(OP_QUEUE_INSERT)
        .bind(json_list(queued))
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Deletes the requests of finished ops a purge deleted, and their attempts with them (none:
/// no statement).
async fn request_delete(c: &mut SqliteConnection, ids: &[i64]) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(OP_REQUEST_DELETE)
        .bind(json_list(ids))
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Opens a savepoint: the statements up to [`savepoint_end`] take effect together or not at
/// all. A failed statement does not end a SQLite transaction, so a caller's transaction
/// (`enqueue_in`) that goes on after an error must not keep half of a write: a request
/// without its queue row (issue 36).
async fn savepoint_begin(c: &mut SqliteConnection) -> Result<(), Error> {
    sqlx::query("SAVEPOINT outbox_write")
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Closes the savepoint [`savepoint_begin`] opened, keeping its writes or undoing them.
async fn savepoint_end(c: &mut SqliteConnection, keep: bool) -> Result<(), Error> {
    if !keep {
        sqlx::query("ROLLBACK TO outbox_write")
            .execute(&mut *c)
            .await
            .map_err(map_err)?;
    }
    sqlx::query("RELEASE outbox_write")
        .execute(c)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// A statement whose parameters are a partition's lease and the partition: ?1 resource,
/// ?2 owner id, ?3 token, ?4 partition count, ?5 partition index.
fn with_partition_lease<'q>(
    sql: &'static str,
    lease: &'q Lease,
    part: Partition,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    sqlx::query(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid().hyphenated())
        .bind(lease.token.get())
        .bind(part.count())
        .bind(part.index())
}

/// Whether a `sqlite:` URL names a file rather than an in-memory database.
fn names_a_file(url: &str) -> bool {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    !path.is_empty() && path != ":memory:" && !query.split('&').any(|p| p == "mode=memory")
}

/// A row of `rejection_list.sql` or `admin_rejection_list.sql`.
pub(crate) fn rejection_row(r: &SqliteRow) -> Result<RejectionRow, Error> {
    Ok(RejectionRow {
        id: r.col("id")?,
        resource: r.col("resource")?,
        owner_id: r.col::<String>("owner_id")?.parse()?,
        token: FencingToken::new(r.col("fence")?),
        current_token: r
            .col::<Option<i64>>("current_fence")?
            .map(FencingToken::new),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        stage: r.col("stage")?,
        reason: r.col("reason")?,
        rejected_at: r.col("rejected_at")?,
    })
}

/// Reads a column, or says which one could not be read: a row written by hand can hold
/// anything (SQLite keeps any value in any column), and `Row::get` would panic.
pub(crate) trait Col {
    /// The column `name`, decoded as `T`.
    fn col<'r, T>(&'r self, name: &str) -> Result<T, Error>
    where
        T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>;
}

impl Col for SqliteRow {
    fn col<'r, T>(&'r self, name: &str) -> Result<T, Error>
    where
        T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
    {
        self.try_get(name).map_err(map_err)
    }
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
                // SQLITE_READONLY (a file this process may read but not write), SQLITE_AUTH
                8 | 23 => StoreErrorKind::Denied,
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
