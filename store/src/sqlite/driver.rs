//! SQLite's statements for the flows written once over [`Driver`]: migrations, the enqueue
//! decision, the re-queue on takeover, and operators' changes (`admin.rs` holds those).

use super::*;
use crate::model::{ContentRewrite, StoredContent};

/// Enqueues take the write lock at BEGIN, so the lease check and the insert see one state and
/// no other writer can slip between them.
const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";

const LEASE_CHECK: &str = include_str!("../../sql/sqlite/lease_check.sql");
const OP_INSERT_IF_LEASE_HELD: &str = include_str!("../../sql/sqlite/op_insert_if_lease_held.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../../sql/sqlite/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/sqlite/op_find_by_key.sql");
const ATTEMPT_RECORD_ABANDONED: &str =
    include_str!("../../sql/sqlite/attempt_record_abandoned.sql");
const OP_REQUEUE_ABANDONED: &str = include_str!("../../sql/sqlite/op_requeue_abandoned.sql");
const MIGRATION_BEGIN: &str = include_str!("../../sql/sqlite/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../../sql/sqlite/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../../sql/sqlite/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../../sql/sqlite/migration_record.sql");

const ADMIN_CONTENT_PAGE: &str = include_str!("../../sql/sqlite/admin_content_page.sql");
const ADMIN_CONTENT_REPLACE: &str = include_str!("../../sql/sqlite/admin_content_replace.sql");
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

    /// The request and its queue row in one savepoint: the caller's transaction
    /// (`enqueue_in`) outlives a failed statement on SQLite, and must not keep a request
    /// without its queue row.
    async fn op_insert(
        c: &mut SqliteConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<Option<i64>, Error> {
        savepoint_begin(c).await?;
        let inserted = request_and_queue_insert(c, lease, op).await;
        savepoint_end(c, inserted.is_ok()).await?;
        inserted
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

    /// In a savepoint, as [`Self::op_insert`]: the script's insert and delete go together.
    async fn op_supersede_older(
        c: &mut SqliteConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<(), Error> {
        savepoint_begin(c).await?;
        let done = sqlx::query(OP_SUPERSEDE_OLDER_PENDING)
            .bind(lease.resource.as_str())
            .bind(op.destination.as_str())
            .bind(lease.token.get())
            .execute(&mut *c)
            .await
            .map_err(map_err);
        savepoint_end(c, done.is_ok()).await?;
        done.map(drop)
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
        <Self as SqlxAdmin>::op_lock(c, seqs).await
    }

    async fn admin_op_replay(c: &mut SqliteConnection, seqs: &[i64]) -> Result<(), Error> {
        <Self as SqlxAdmin>::op_replay(c, seqs).await
    }

    async fn admin_op_cancel(
        c: &mut SqliteConnection,
        seqs: &[i64],
        note: &str,
    ) -> Result<(), Error> {
        <Self as SqlxAdmin>::op_cancel(c, seqs, note).await
    }

    async fn admin_log_insert(
        c: &mut SqliteConnection,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        <Self as SqlxAdmin>::log_insert(c, change, action, details).await
    }

    async fn admin_content_page(
        c: &mut SqliteConnection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredContent>, Error> {
        let rows = sqlx::query(ADMIN_CONTENT_PAGE)
            .bind(after)
            .bind(limit)
            .fetch_all(c)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let headers_json: String = r.try_get("headers").map_err(map_err)?;
                Ok(StoredContent {
                    seq: r.try_get("id").map_err(map_err)?,
                    destination: r.try_get("destination").map_err(map_err)?,
                    headers: parse_headers(&headers_json, Backend::Sqlite)?,
                    headers_json,
                    body: r.try_get("body").map_err(map_err)?,
                })
            })
            .collect()
    }

    async fn admin_content_replace(
        c: &mut SqliteConnection,
        r: &ContentRewrite,
    ) -> Result<bool, Error> {
        let headers = crate::json::list(&r.headers);
        let done = sqlx::query(ADMIN_CONTENT_REPLACE)
            .bind(r.seq)
            .bind(&r.headers_json_read)
            .bind(&r.body_read)
            .bind(headers)
            .bind(&r.body)
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn partition_count_lock(c: &mut SqliteConnection) -> Result<Option<u32>, Error> {
        partitioning::lock(c).await
    }

    async fn partition_count_write(
        c: &mut SqliteConnection,
        partitions: u32,
        change: &Change,
    ) -> Result<(), Error> {
        partitioning::write(c, partitions, change).await
    }

    async fn destination_ensure(c: &mut SqliteConnection, name: &str) -> Result<(), Error> {
        health::ensure(c, name).await
    }

    async fn destination_lock(
        c: &mut SqliteConnection,
        name: &str,
    ) -> Result<(crate::model::DestinationHealth, OffsetDateTime), Error> {
        health::lock(c, name).await
    }

    async fn destination_write(
        c: &mut SqliteConnection,
        health: &crate::model::DestinationHealth,
    ) -> Result<(), Error> {
        health::write(c, health).await
    }

    async fn destination_hold_insert(
        c: &mut SqliteConnection,
        name: &str,
        hold: crate::model::Hold,
    ) -> Result<(), Error> {
        health::hold_insert(c, name, hold).await
    }

    async fn admin_purge_count(
        &self,
        states: &[&str],
        older_than_ms: i64,
    ) -> Result<Vec<(String, i64)>, Error> {
        self.purge_count(states, older_than_ms).await
    }

    async fn admin_purge(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error> {
        self.purge_batch(states, older_than_ms, batch).await
    }
}

/// `op_insert_if_lease_held.sql`, then the queue row of the request it inserted.
async fn request_and_queue_insert(
    c: &mut SqliteConnection,
    lease: &Lease,
    op: &NewOp,
) -> Result<Option<i64>, Error> {
    let id: Option<i64> = sqlx::query(OP_INSERT_IF_LEASE_HELD)
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
        .bind(op.trace_context.as_deref())
        .bind(op.trace_state.as_deref())
        .fetch_optional(&mut *c)
        .await
        .map_err(map_err)?
        .map(|r| r.col("id"))
        .transpose()?;
    if let Some(id) = id {
        queue_insert(c, &[(id, op.delay_ms)]).await?;
    }
    Ok(id)
}
