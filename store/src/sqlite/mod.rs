//! The SQLite backend (the embedded default): one database file in WAL mode with a busy
//! timeout and full fsync, and one function per SQL file in `sql/sqlite/`. SQLite has a single
//! writer, so every write statement is atomic against every other; multi-statement writes run
//! in `BEGIN IMMEDIATE` transactions. Lease time is SQLite's `'now'` inside the SQL (G2).

mod admin;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection as _, Row as _};
use time::OffsetDateTime;

use std::collections::HashMap;

use crate::StoreOptions;
use crate::admin::{Change, Locked};
use crate::dispatch::{
    Claimed, ClaimedOp, Completion, OpStats, Partition, Unreadable, parse_headers,
};
use crate::driver::Driver;
use crate::enqueue::{self, FoundOp, LeaseSeen, check_lease};
use crate::error::{Backend, Error, InvalidInput, StoreError, StoreErrorKind};
use crate::migrate::AppliedMigration;
use crate::migrate::Migration;
use crate::model::{
    DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow, OrderKey, OwnerId, ResourceName,
};
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, Rejection, RejectionRow};
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use uuid::fmt::Hyphenated;

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../../sql/sqlite/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../../sql/sqlite/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../../sql/sqlite/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../../sql/sqlite/lease_list.sql");
const LEASE_CHECK: &str = include_str!("../../sql/sqlite/lease_check.sql");
const OP_INSERT_IF_LEASE_HELD: &str = include_str!("../../sql/sqlite/op_insert_if_lease_held.sql");
const OP_INSERT_BATCH_IF_LEASE_HELD: &str =
    include_str!("../../sql/sqlite/op_insert_batch_if_lease_held.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../../sql/sqlite/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/sqlite/op_find_by_key.sql");
const REJECTION_INSERT: &str = include_str!("../../sql/sqlite/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../../sql/sqlite/rejection_list.sql");
/// Enqueues take the write lock at BEGIN, so the lease check and the insert see one state and
/// no other writer can slip between them.
pub(crate) const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";
const OP_CLAIM_DUE: &str = include_str!("../../sql/sqlite/op_claim_due.sql");
const OP_SUPERSEDE_STALE_GENERATION: &str =
    include_str!("../../sql/sqlite/op_supersede_stale_generation.sql");
const OP_COMPLETE_IF_CLAIMED: &str = include_str!("../../sql/sqlite/op_complete_if_claimed.sql");
const ATTEMPT_INSERT: &str = include_str!("../../sql/sqlite/attempt_insert.sql");
const ATTEMPT_RECORD_ABANDONED: &str =
    include_str!("../../sql/sqlite/attempt_record_abandoned.sql");
const OP_REQUEUE_ABANDONED: &str = include_str!("../../sql/sqlite/op_requeue_abandoned.sql");
const OP_RELEASE_CLAIM: &str = include_str!("../../sql/sqlite/op_release_claim.sql");
const LEASE_SET_PARTITIONS_IF_OWNER: &str =
    include_str!("../../sql/sqlite/lease_set_partitions_if_owner.sql");
const LEASE_LIST_PARTITION_CONFLICTS: &str =
    include_str!("../../sql/sqlite/lease_list_partition_conflicts.sql");
const OP_STATS: &str = include_str!("../../sql/sqlite/op_stats.sql");
const WAKEUP_SET: &str = include_str!("../../sql/sqlite/wakeup_set.sql");
const OP_NEXT_DUE: &str = include_str!("../../sql/sqlite/op_next_due.sql");
const OP_PURGE_FINISHED: &str = include_str!("../../sql/sqlite/op_purge_finished.sql");
const OP_UNROUTED_LIST: &str = include_str!("../../sql/sqlite/op_unrouted_list.sql");
const MIGRATION_BEGIN: &str = include_str!("../../sql/sqlite/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../../sql/sqlite/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../../sql/sqlite/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../../sql/sqlite/migration_record.sql");

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
        row.map(|r| Ok((FencingToken::new(r.col("fence")?), r.col("expires_at")?)))
            .transpose()
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
        row.map(|r| r.col("expires_at")).transpose()
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
                    .col::<Option<String>>("owner_id")?
                    .map(|s| s.parse::<OwnerId>())
                    .transpose()?;
                Ok(LeaseRow {
                    resource: ResourceName::new(r.col::<String>("resource")?)?,
                    owner_id,
                    token: FencingToken::new(r.col("fence")?),
                    expires_at: r.col("expires_at")?,
                    held: r.col("held")?,
                    remaining_ms: r.col("remaining_ms")?,
                    partitions: r.col::<Option<u32>>("partitions")?,
                })
            })
            .collect()
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
            .bind(batch_json(ops))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Ok((r.col::<Hyphenated>("op_id")?.into_uuid(), r.col("id")?)))
            .collect::<Result<_, Error>>()?;
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

    pub(crate) async fn op_claim(
        &self,
        lease: &Lease,
        part: Partition,
        destinations: &[String],
        limit: u32,
        max_body_bytes: usize,
    ) -> Result<Claimed, Error> {
        let destinations = json_list(destinations);
        let mut tx = self
            .pool
            .begin_with(BEGIN_IMMEDIATE)
            .await
            .map_err(map_err)?;
        let superseded = with_partition_lease(OP_SUPERSEDE_STALE_GENERATION, lease, part)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        let rows = sqlx::query(OP_CLAIM_DUE)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(part.count())
            .bind(part.index())
            .bind(destinations)
            .bind(limit)
            .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        // Read before commit: a claim is never committed with rows nobody has looked at.
        let decoded = rows
            .iter()
            .map(|r| claimed_op(r).map_err(|e| unreadable(r, e)))
            .collect();
        tx.commit().await.map_err(map_err)?;
        Ok(Claimed::new(decoded, superseded))
    }

    /// Records completions in one transaction (one commit, one fsync); each is checked on
    /// its own, so a discarded one does not hold back the others.
    pub(crate) async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let mut tx = self
            .pool
            .begin_with(BEGIN_IMMEDIATE)
            .await
            .map_err(map_err)?;
        let mut applied = Vec::with_capacity(completions.len());
        for c in completions {
            applied.push(complete_on(&mut tx, lease, c).await?);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(applied)
    }

    pub(crate) async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        let done = sqlx::query(OP_RELEASE_CLAIM)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(seq)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn op_stats(&self) -> Result<OpStats, Error> {
        let r = sqlx::query(OP_STATS)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(OpStats {
            pending: r.col("pending")?,
            in_flight: r.col("in_flight")?,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
        })
    }

    pub(crate) async fn wakeup_set(&self, part: Partition, listening: bool) -> Result<(), Error> {
        sqlx::query(WAKEUP_SET)
            .bind(part.index() as i32)
            .bind(listening)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub(crate) async fn op_next_due(
        &self,
        part: Partition,
        destinations: &[String],
    ) -> Result<Option<i64>, Error> {
        let row = sqlx::query(OP_NEXT_DUE)
            .bind(part.count())
            .bind(part.index())
            .bind(json_list(destinations))
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        row.col("due_in_ms")
    }

    pub(crate) async fn op_purge_finished(
        &self,
        older_than_ms: i64,
        batch: u32,
    ) -> Result<u64, Error> {
        let done = sqlx::query(OP_PURGE_FINISHED)
            .bind(older_than_ms)
            .bind(batch)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    pub(crate) async fn op_unrouted_list(
        &self,
        destinations: &[String],
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        let rows = sqlx::query(OP_UNROUTED_LIST)
            .bind(json_list(destinations))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.col("destination")?, r.col("pending")?)))
            .collect()
    }

    pub(crate) async fn lease_set_partitions(
        &self,
        lease: &Lease,
        partitions: u32,
    ) -> Result<bool, Error> {
        let done = sqlx::query(LEASE_SET_PARTITIONS_IF_OWNER)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(partitions)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn lease_partition_conflicts(
        &self,
        resources: &[String],
        partitions: u32,
    ) -> Result<Vec<(String, u32)>, Error> {
        let rows = sqlx::query(LEASE_LIST_PARTITION_CONFLICTS)
            .bind(json_list(resources))
            .bind(partitions)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.col("resource")?, r.col("partitions")?)))
            .collect()
    }
}

impl Driver for SqliteStore {
    const BACKEND: Backend = Backend::Sqlite;
    type Conn = SqliteConnection;
    type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;

    /// `BEGIN IMMEDIATE`: the write lock is taken at once, so the reads and writes of the
    /// transaction see one state and no other writer slips between them.
    async fn begin(&self) -> Result<Self::Tx, Error> {
        self.pool.begin_with(BEGIN_IMMEDIATE).await.map_err(map_err)
    }

    async fn begin_migration(&self) -> Result<Self::Tx, Error> {
        self.pool.begin_with(MIGRATION_BEGIN).await.map_err(map_err)
    }

    async fn commit(tx: Self::Tx) -> Result<(), Error> {
        tx.commit().await.map_err(map_err)
    }

    async fn rollback(tx: Self::Tx) -> Result<(), Error> {
        tx.rollback().await.map_err(map_err)
    }

    async fn migration_table_create(c: &mut SqliteConnection) -> Result<(), Error> {
        sqlx::query(MIGRATION_TABLE_CREATE)
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn migration_list(c: &mut SqliteConnection) -> Result<Vec<AppliedMigration>, Error> {
        sqlx::query(MIGRATION_LIST)
            .fetch_all(c)
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| {
                Ok(AppliedMigration {
                    version: r.col("version")?,
                    name: r.col("name")?,
                    checksum: r.col("checksum")?,
                })
            })
            .collect()
    }

    async fn migration_apply(c: &mut SqliteConnection, m: &Migration) -> Result<(), Error> {
        sqlx::raw_sql(m.sql)
            .execute(&mut *c)
            .await
            .map_err(map_err)?;
        sqlx::query(MIGRATION_RECORD)
            .bind(m.version)
            .bind(m.name)
            .bind(m.checksum())
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn op_insert(
        c: &mut SqliteConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<Option<i64>, Error> {
        sqlx::query(OP_INSERT_IF_LEASE_HELD)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(op.op_id.hyphenated())
            .bind(op.destination.as_str())
            .bind(op.idempotency_key.as_str())
            .bind(&op.request_hash[..])
            .bind(op.order_key.as_ref().map(OrderKey::as_str))
            .bind(op.partition)
            .bind(op.method.as_str())
            .bind(&op.path)
            .bind(&op.headers_json)
            .bind(op.content_type.as_deref())
            .bind(&op.body)
            .bind(op.expire_with_generation)
            .bind(op.delay_ms)
            .bind(op.trace_context.as_deref())
            .fetch_optional(c)
            .await
            .map_err(map_err)?
            .map(|r| r.col("id"))
            .transpose()
    }

    async fn lease_seen(
        c: &mut SqliteConnection,
        resource: &ResourceName,
    ) -> Result<Option<LeaseSeen>, Error> {
        let row = sqlx::query(LEASE_CHECK)
            .bind(resource.as_str())
            .fetch_optional(c)
            .await
            .map_err(map_err)?;
        row.map(|r| {
            Ok(LeaseSeen {
                owner_id: r
                    .col::<Option<String>>("owner_id")?
                    .map(|s| s.parse::<OwnerId>())
                    .transpose()?,
                fence: FencingToken::new(r.col("fence")?),
                live: r.col::<Option<bool>>("live")?.unwrap_or(false),
            })
        })
        .transpose()
    }

    async fn op_find_by_key(
        c: &mut SqliteConnection,
        destination: &str,
        key: &str,
    ) -> Result<Option<FoundOp>, Error> {
        sqlx::query(OP_FIND_BY_KEY)
            .bind(destination)
            .bind(key)
            .fetch_optional(c)
            .await
            .map_err(map_err)?
            .map(|r| -> Result<FoundOp, Error> {
                let op_id: Hyphenated = r.col("op_id")?;
                Ok((
                    r.col("id")?,
                    op_id.into_uuid(),
                    r.col("request_hash")?,
                    r.col("state")?,
                ))
            })
            .transpose()
    }

    async fn op_supersede_older(
        c: &mut SqliteConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<(), Error> {
        sqlx::query(OP_SUPERSEDE_OLDER_PENDING)
            .bind(lease.resource.as_str())
            .bind(op.destination.as_str())
            .bind(lease.token.get())
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn attempt_record_abandoned(
        c: &mut SqliteConnection,
        lease: &Lease,
        part: Partition,
    ) -> Result<(), Error> {
        with_partition_lease(ATTEMPT_RECORD_ABANDONED, lease, part)
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn op_requeue_abandoned(
        c: &mut SqliteConnection,
        lease: &Lease,
        part: Partition,
    ) -> Result<u64, Error> {
        Ok(with_partition_lease(OP_REQUEUE_ABANDONED, lease, part)
            .execute(c)
            .await
            .map_err(map_err)?
            .rows_affected())
    }

    async fn admin_op_lock(c: &mut SqliteConnection, seqs: &[i64]) -> Result<Vec<Locked>, Error> {
        admin::op_lock(c, seqs).await
    }

    async fn admin_op_replay(c: &mut SqliteConnection, seqs: &[i64]) -> Result<(), Error> {
        admin::op_replay(c, seqs).await
    }

    async fn admin_op_cancel(
        c: &mut SqliteConnection,
        seqs: &[i64],
        note: &str,
    ) -> Result<(), Error> {
        admin::op_cancel(c, seqs, note).await
    }

    async fn admin_log_insert(
        c: &mut SqliteConnection,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        admin::log_insert(c, change, action, details).await
    }

    async fn admin_purge_count(
        &self,
        states: &[&str],
        older_than_ms: i64,
    ) -> Result<Vec<(String, i64)>, Error> {
        admin::purge_count(&self.pool, states, older_than_ms).await
    }

    async fn admin_purge(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error> {
        admin::purge(&self.pool, states, older_than_ms, batch).await
    }
}

/// A batch as the JSON array `op_insert_batch_if_lease_held.sql` reads, bytes in hex.
fn batch_json(ops: &[NewOp]) -> String {
    fn hex(bytes: &[u8]) -> String {
        use std::fmt::Write as _;
        bytes
            .iter()
            .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
    }
    let ops: Vec<serde_json::Value> = ops
        .iter()
        .map(|o| {
            serde_json::json!({
                "op_id": o.op_id.hyphenated().to_string(),
                "destination": o.destination.as_str(),
                "key": o.idempotency_key.as_str(),
                "hash": hex(&o.request_hash),
                "order_key": o.order_key.as_ref().map(OrderKey::as_str),
                "partition": o.partition,
                "method": o.method.as_str(),
                "path": o.path,
                "headers": o.headers_json,
                "content_type": o.content_type,
                "body": hex(&o.body),
                "expire": o.expire_with_generation,
                "delay_ms": o.delay_ms,
                "trace": o.trace_context,
            })
        })
        .collect();
    serde_json::Value::Array(ops).to_string()
}

/// One completion inside a transaction: the guarded update, then the attempt's row if it
/// applied.
async fn complete_on(
    conn: &mut SqliteConnection,
    lease: &Lease,
    c: &Completion,
) -> Result<bool, Error> {
    let error = c.stored_error();
    let applied = sqlx::query(OP_COMPLETE_IF_CLAIMED)
        .bind(c.seq)
        .bind(lease.token.get())
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid().hyphenated())
        .bind(c.next.state())
        .bind(c.next.delay_ms())
        .bind(error.as_deref())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(applied) = applied else {
        return Ok(false);
    };
    // The row's own op id, as stored: the attempt references it whatever the claim read.
    let op_id: String = applied.col("op_id")?;
    sqlx::query(ATTEMPT_INSERT)
        .bind(op_id)
        .bind(c.attempt)
        .bind(lease.token.get())
        .bind(c.started_at.format(&Rfc3339).unwrap_or_default())
        .bind(c.outcome.as_str())
        .bind(c.http_status.map(i32::from))
        .bind(error.as_deref())
        .bind(c.stored_excerpt())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(true)
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

/// A list of names as the JSON array `json_each` reads (SQLite has no array parameters).
fn json_list(names: &[String]) -> String {
    serde_json::to_string(names).unwrap_or_else(|_| "[]".to_owned())
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

/// A row of `op_claim_due.sql`.
fn claimed_op(r: &SqliteRow) -> Result<ClaimedOp, Error> {
    Ok(ClaimedOp {
        seq: r.col("id")?,
        op_id: r.col::<Hyphenated>("op_id")?.into_uuid(),
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Sqlite)?,
        content_type: r.col("content_type")?,
        body: r.col("body")?,
        body_bytes: r.col("body_bytes")?,
        attempt: r.col("attempts")?,
        created_at: r.col("created_at")?,
        claimed_at: r.col("claimed_at")?,
        trace_context: r.col("trace_context")?,
        budget_attempt: r.col("budget_attempt")?,
        budget_since: r.col("budget_since")?,
    })
}

/// What can still be read of a claimed row that [`claimed_op`] could not read.
fn unreadable(r: &SqliteRow, e: Error) -> Unreadable {
    Unreadable {
        seq: r.col("id").unwrap_or(0),
        op_id: r
            .col::<Hyphenated>("op_id")
            .map(Hyphenated::into_uuid)
            .unwrap_or_default(),
        attempt: r.col("attempts").unwrap_or(0),
        claimed_at: r
            .col("claimed_at")
            .unwrap_or_else(|_| OffsetDateTime::now_utc()),
        reason: e.to_string(),
    }
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
