//! The PostgreSQL backend: a sqlx pool and one function per SQL file in `sql/postgres/`.
//! Lease time is `clock_timestamp()` inside the SQL; the application clock never decides (G2).

mod admin;

use std::collections::HashMap;

use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreOptions;
use crate::admin::{Change, Locked};
use crate::dispatch::{
    Claimed, ClaimedOp, Completion, OpStats, Partition, Unreadable, parse_headers,
};
use crate::driver::Driver;
use crate::enqueue::{self, FoundOp, LeaseSeen, check_lease};
use crate::error::{Backend, Error, StoreError, StoreErrorKind};
use crate::migrate::AppliedMigration;
use crate::migrate::Migration;
use crate::model::{
    DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow, OrderKey, OwnerId, ResourceName,
};
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, Rejection, RejectionRow};

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../../sql/postgres/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../../sql/postgres/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../../sql/postgres/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../../sql/postgres/lease_list.sql");
const OP_INSERT_BATCH_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_batch_if_lease_held.sql");
const OP_INSERT_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_if_lease_held.sql");
const OP_INSERT_NEW_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_new_if_lease_held.sql");
const OP_INSERT_BATCH_NEW_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_batch_new_if_lease_held.sql");
const LEASE_CHECK: &str = include_str!("../../sql/postgres/lease_check.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../../sql/postgres/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/postgres/op_find_by_key.sql");
const REJECTION_INSERT: &str = include_str!("../../sql/postgres/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../../sql/postgres/rejection_list.sql");
const OP_CLAIM_DUE: &str = include_str!("../../sql/postgres/op_claim_due.sql");
const OP_SUPERSEDE_STALE_GENERATION: &str =
    include_str!("../../sql/postgres/op_supersede_stale_generation.sql");
const OP_COMPLETE_BATCH_IF_CLAIMED: &str =
    include_str!("../../sql/postgres/op_complete_batch_if_claimed.sql");
const ATTEMPT_RECORD_ABANDONED: &str =
    include_str!("../../sql/postgres/attempt_record_abandoned.sql");
const OP_REQUEUE_ABANDONED: &str = include_str!("../../sql/postgres/op_requeue_abandoned.sql");
const OP_RELEASE_CLAIM: &str = include_str!("../../sql/postgres/op_release_claim.sql");
const LEASE_SET_PARTITIONS_IF_OWNER: &str =
    include_str!("../../sql/postgres/lease_set_partitions_if_owner.sql");
const LEASE_LIST_PARTITION_CONFLICTS: &str =
    include_str!("../../sql/postgres/lease_list_partition_conflicts.sql");
const OP_STATS: &str = include_str!("../../sql/postgres/op_stats.sql");
const WAKEUP_SET: &str = include_str!("../../sql/postgres/wakeup_set.sql");
const OP_NEXT_DUE: &str = include_str!("../../sql/postgres/op_next_due.sql");
const OP_PURGE_FINISHED: &str = include_str!("../../sql/postgres/op_purge_finished.sql");
const OP_UNROUTED_LIST: &str = include_str!("../../sql/postgres/op_unrouted_list.sql");
const MIGRATION_BEGIN: &str = include_str!("../../sql/postgres/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../../sql/postgres/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../../sql/postgres/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../../sql/postgres/migration_record.sql");

/// A connection pool to one PostgreSQL database.
#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
}

impl PgStore {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, Error> {
        let connect: PgConnectOptions = url.parse().map_err(map_err)?;
        // JIT compiles any statement the planner costs high, which a claim over a large backlog
        // is (its filters are hard to estimate): hundreds of milliseconds per claim, for
        // statements that run in well under one. OLTP statements never gain from it.
        let connect = connect
            .application_name(&options.application_name)
            .options([("jit", "off")]);
        // A dispatcher's claim must walk outbox_ops_due_idx in order. Without fresh statistics
        // (a new table, or a burst of ops after a quiet period, until autovacuum analyzes) the
        // planner estimates one due op, reads every due op through another index and sorts
        // them: 216 ms per claim of 128 at 200k pending, against 4.7 ms walking the index
        // (EXPLAIN ANALYZE, PostgreSQL 15). Nothing a dispatcher runs needs a sort it could
        // not do without, so its sessions forbid them. Set per session, not per transaction:
        // a claim stays one autocommit statement that holds no lock between statements.
        let connect = if options.dispatcher_sessions {
            connect.options([("enable_sort", "off")])
        } else {
            connect
        };
        // One direct connection first: a pool retries failed connects until its timeout and
        // then reports only that it timed out; this reports the real cause at once.
        PgConnection::connect_with(&connect)
            .await
            .map_err(map_err)?
            .close()
            .await
            .map_err(map_err)?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect);
        Ok(PgStore { pool })
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
            .bind(owner.as_uuid())
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
            .bind(owner.as_uuid())
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
            .bind(owner.as_uuid())
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
                Ok(LeaseRow {
                    resource: ResourceName::new(r.col::<String>("resource")?)?,
                    owner_id: r.col::<Option<Uuid>>("owner_id")?.map(OwnerId::from),
                    token: FencingToken::new(r.col("fence")?),
                    expires_at: r.col("expires_at")?,
                    held: r.col("held")?,
                    remaining_ms: r.col("remaining_ms")?,
                    partitions: r.col::<Option<i32>>("partitions")?.map(|n| n as u32),
                })
            })
            .collect()
    }

    /// Enqueues on a pooled connection: one statement, or a transaction when older pending
    /// ops must be superseded atomically with the insert.
    pub(crate) async fn op_enqueue(
        &self,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        if op.supersede_pending {
            return enqueue::in_transaction(self, lease, op).await;
        }
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        match insert_query(OP_INSERT_NEW_IF_LEASE_HELD, lease, op)
            .fetch_optional(&mut *conn)
            .await
        {
            Ok(row) => {
                let inserted = row.map(|r| r.col("id")).transpose()?;
                enqueue::settle::<Self>(&mut conn, lease, op, inserted).await
            }
            Err(e) if is_unique_violation(&e) => enqueue::on::<Self>(&mut conn, lease, op).await,
            Err(e) => Err(map_err(e)),
        }
    }

    /// All or nothing: one statement inserts the whole batch under the share-locked lease.
    /// Keys that exist already (a retried batch) and `supersede_pending` take a transaction,
    /// where each op that was not inserted costs one more read.
    pub(crate) async fn op_enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[NewOp],
    ) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
        // A key that exists already, or twice in the batch, fails this statement with a unique
        // violation and nothing written; the transaction below then sorts it out.
        if !ops.iter().any(|o| o.supersede_pending) {
            match batch_query(OP_INSERT_BATCH_NEW_IF_LEASE_HELD, lease, ops)
                .fetch_one(&self.pool)
                .await
            {
                Ok(row) => {
                    let inserted = batch_inserted(&row)?;
                    if let Err(reason) = check_lease(lease_seen(Some(row))?, lease) {
                        return Ok(Err(NotEnqueued::Rejected(reason)));
                    }
                    return Ok(Ok(ops
                        .iter()
                        .filter_map(|op| inserted.get(&op.op_id).map(|&seq| op.inserted(seq)))
                        .collect()));
                }
                Err(e) if is_unique_violation(&e) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        let mut tx = self.begin().await?;
        let row = batch_query(OP_INSERT_BATCH_IF_LEASE_HELD, lease, ops)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        let inserted = batch_inserted(&row)?;
        if let Err(reason) = check_lease(lease_seen(Some(row))?, lease) {
            Self::rollback(tx).await?;
            return Ok(Err(NotEnqueued::Rejected(reason)));
        }
        enqueue::assemble::<Self>(tx, lease, ops, &inserted).await
    }

    pub(crate) async fn rejection_insert(&self, r: &Rejection) -> Result<(), Error> {
        sqlx::query(REJECTION_INSERT)
            .bind(r.resource.as_str())
            .bind(r.owner_id.as_uuid())
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
        // Two autocommit statements, never one transaction: a dispatcher paused between
        // statements must not hold row locks a standby needs to take over.
        let superseded = with_partition_lease(OP_SUPERSEDE_STALE_GENERATION, lease, part)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        let rows = sqlx::query(OP_CLAIM_DUE)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(part.count() as i32)
            .bind(part.index() as i32)
            .bind(destinations)
            .bind(i64::from(limit))
            .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        let decoded = rows
            .iter()
            .map(|r| claimed_op(r).map_err(|e| unreadable(r, e)))
            .collect();
        Ok(Claimed::new(decoded, superseded))
    }

    /// Records completions in one statement; each is checked on its own, so a discarded one
    /// does not hold back the others.
    pub(crate) async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let errors: Vec<Option<String>> =
            completions.iter().map(Completion::stored_error).collect();
        let excerpts: Vec<Option<String>> =
            completions.iter().map(Completion::stored_excerpt).collect();
        let applied: Vec<i64> = sqlx::query_scalar(OP_COMPLETE_BATCH_IF_CLAIMED)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(completions.iter().map(|c| c.seq).collect::<Vec<_>>())
            .bind(
                completions
                    .iter()
                    .map(|c| c.next.state())
                    .collect::<Vec<_>>(),
            )
            .bind(
                completions
                    .iter()
                    .map(|c| c.next.delay_ms())
                    .collect::<Vec<_>>(),
            )
            .bind(errors)
            .bind(completions.iter().map(|c| c.attempt).collect::<Vec<_>>())
            .bind(completions.iter().map(|c| c.started_at).collect::<Vec<_>>())
            .bind(
                completions
                    .iter()
                    .map(|c| c.outcome.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                completions
                    .iter()
                    .map(|c| c.http_status.map(i32::from))
                    .collect::<Vec<_>>(),
            )
            .bind(excerpts)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(completions
            .iter()
            .map(|c| applied.contains(&c.seq))
            .collect())
    }

    pub(crate) async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        let done = sqlx::query(OP_RELEASE_CLAIM)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
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
            .bind(part.count() as i32)
            .bind(part.index() as i32)
            .bind(destinations)
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
            .bind(i64::from(batch))
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
            .bind(destinations)
            .bind(i64::from(limit))
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
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(partitions as i32)
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
            .bind(resources)
            .bind(partitions as i32)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.col("resource")?, r.col::<i32>("partitions")? as u32)))
            .collect()
    }

    pub(crate) fn listen_for_enqueues(
        &self,
        wake: std::sync::Arc<tokio::sync::Notify>,
    ) -> tokio::task::JoinHandle<()> {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            let mut backoff = std::time::Duration::from_millis(100);
            loop {
                match listen_once(&pool, &wake).await {
                    Ok(()) => backoff = std::time::Duration::from_millis(100),
                    Err(e) => {
                        tracing::warn!(error = %e, "enqueue notifications interrupted; reconnecting")
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
            }
        })
    }
}

impl Driver for PgStore {
    const BACKEND: Backend = Backend::Postgres;
    type Conn = PgConnection;
    type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

    async fn begin(&self) -> Result<Self::Tx, Error> {
        self.pool.begin().await.map_err(map_err)
    }

    async fn begin_migration(&self) -> Result<Self::Tx, Error> {
        let mut tx = self.begin().await?;
        sqlx::query(MIGRATION_BEGIN)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        Ok(tx)
    }

    async fn commit(tx: Self::Tx) -> Result<(), Error> {
        tx.commit().await.map_err(map_err)
    }

    async fn rollback(tx: Self::Tx) -> Result<(), Error> {
        tx.rollback().await.map_err(map_err)
    }

    async fn migration_table_create(c: &mut PgConnection) -> Result<(), Error> {
        sqlx::query(MIGRATION_TABLE_CREATE)
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn migration_list(c: &mut PgConnection) -> Result<Vec<AppliedMigration>, Error> {
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

    async fn migration_apply(c: &mut PgConnection, m: &Migration) -> Result<(), Error> {
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
        c: &mut PgConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<Option<i64>, Error> {
        insert_query(OP_INSERT_IF_LEASE_HELD, lease, op)
            .fetch_optional(c)
            .await
            .map_err(map_err)?
            .map(|r| r.col("id"))
            .transpose()
    }

    async fn lease_seen(
        c: &mut PgConnection,
        resource: &ResourceName,
    ) -> Result<Option<LeaseSeen>, Error> {
        let row = sqlx::query(LEASE_CHECK)
            .bind(resource.as_str())
            .fetch_optional(c)
            .await
            .map_err(map_err)?;
        lease_seen(row)
    }

    async fn op_find_by_key(
        c: &mut PgConnection,
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
                Ok((
                    r.col("id")?,
                    r.col("op_id")?,
                    r.col("request_hash")?,
                    r.col("state")?,
                ))
            })
            .transpose()
    }

    async fn op_supersede_older(
        c: &mut PgConnection,
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
        c: &mut PgConnection,
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
        c: &mut PgConnection,
        lease: &Lease,
        part: Partition,
    ) -> Result<u64, Error> {
        Ok(with_partition_lease(OP_REQUEUE_ABANDONED, lease, part)
            .execute(c)
            .await
            .map_err(map_err)?
            .rows_affected())
    }

    async fn admin_op_lock(c: &mut PgConnection, seqs: &[i64]) -> Result<Vec<Locked>, Error> {
        admin::op_lock(c, seqs).await
    }

    async fn admin_op_replay(c: &mut PgConnection, seqs: &[i64]) -> Result<(), Error> {
        admin::op_replay(c, seqs).await
    }

    async fn admin_op_cancel(c: &mut PgConnection, seqs: &[i64], note: &str) -> Result<(), Error> {
        admin::op_cancel(c, seqs, note).await
    }

    async fn admin_log_insert(
        c: &mut PgConnection,
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

/// An enqueue statement (`op_insert_if_lease_held.sql`, with or without its arbiter) bound to
/// `op` under `lease`.
fn insert_query<'q>(sql: &'static str, lease: &'q Lease, op: &'q NewOp) -> Query<'q> {
    sqlx::query(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(op.op_id)
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
}

/// The batch enqueue statement (`op_insert_batch_if_lease_held.sql`, with or without its
/// arbiter) bound to `ops` under `lease`.
fn batch_query<'q>(sql: &'static str, lease: &'q Lease, ops: &'q [NewOp]) -> Query<'q> {
    fn each<'q, T>(ops: &'q [NewOp], f: impl Fn(&'q NewOp) -> T) -> Vec<T> {
        ops.iter().map(f).collect()
    }
    sqlx::query(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(each(ops, |o| o.op_id))
        .bind(each(ops, |o| o.destination.as_str()))
        .bind(each(ops, |o| o.idempotency_key.as_str()))
        .bind(each(ops, |o| &o.request_hash[..]))
        .bind(each(ops, |o| o.order_key.as_ref().map(OrderKey::as_str)))
        .bind(each(ops, |o| o.partition))
        .bind(each(ops, |o| o.method.as_str()))
        .bind(each(ops, |o| o.path.as_str()))
        .bind(each(ops, |o| o.headers_json.as_str()))
        .bind(each(ops, |o| o.content_type.as_deref()))
        .bind(each(ops, |o| o.body.as_slice()))
        .bind(each(ops, |o| o.expire_with_generation))
        .bind(each(ops, |o| o.delay_ms))
        .bind(each(ops, |o| o.trace_context.as_deref()))
}

/// The ops a batch statement inserted: op id to row id.
fn batch_inserted(row: &PgRow) -> Result<HashMap<Uuid, i64>, Error> {
    let ids: Vec<i64> = row.col("ids")?;
    let op_ids: Vec<Uuid> = row.col("op_ids")?;
    Ok(op_ids.into_iter().zip(ids).collect())
}

/// A unique violation: the statement failed whole and wrote nothing.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A row of `rejection_list.sql` or `admin_rejection_list.sql`.
pub(crate) fn rejection_row(r: &PgRow) -> Result<RejectionRow, Error> {
    Ok(RejectionRow {
        id: r.col("id")?,
        resource: r.col("resource")?,
        owner_id: OwnerId::from(r.col::<Uuid>("owner_id")?),
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
fn claimed_op(r: &PgRow) -> Result<ClaimedOp, Error> {
    Ok(ClaimedOp {
        seq: r.col("id")?,
        op_id: r.col("op_id")?,
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Postgres)?,
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
fn unreadable(r: &PgRow, e: Error) -> Unreadable {
    Unreadable {
        seq: r.col("id").unwrap_or(0),
        op_id: r.col("op_id").unwrap_or_default(),
        attempt: r.col("attempts").unwrap_or(0),
        claimed_at: r
            .col("claimed_at")
            .unwrap_or_else(|_| OffsetDateTime::now_utc()),
        reason: e.to_string(),
    }
}

/// Reads a column, or says which one could not be read: a row written by hand can hold
/// anything, and `Row::get` would panic.
pub(crate) trait Col {
    /// The column `name`, decoded as `T`.
    fn col<'r, T>(&'r self, name: &str) -> Result<T, Error>
    where
        T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>;
}

impl Col for PgRow {
    fn col<'r, T>(&'r self, name: &str) -> Result<T, Error>
    where
        T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.try_get(name).map_err(map_err)
    }
}

/// A PostgreSQL statement with its parameters bound.
type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

/// A statement whose parameters are a partition's lease and the partition: $1 resource,
/// $2 owner id, $3 token, $4 partition count, $5 partition index.
fn with_partition_lease<'q>(sql: &'static str, lease: &'q Lease, part: Partition) -> Query<'q> {
    sqlx::query(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(part.count() as i32)
        .bind(part.index() as i32)
}

/// One LISTEN session: wakes once on connect (anything enqueued while not listening), then on
/// every notification, until the connection fails.
async fn listen_once(pool: &PgPool, wake: &tokio::sync::Notify) -> Result<(), Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .map_err(map_err)?;
    listener.listen(ENQUEUE_CHANNEL).await.map_err(map_err)?;
    wake.notify_one();
    loop {
        // try_recv() yields None when the connection was lost (the next call reconnects and
        // listens again): waking then covers anything enqueued in the gap.
        listener.try_recv().await.map_err(map_err)?;
        wake.notify_one();
    }
}

/// The channel `op_insert_if_lease_held.sql` notifies on commit.
const ENQUEUE_CHANNEL: &str = "outbox_ops";

/// The lease columns of a row from `lease_check.sql` or `op_insert_batch_if_lease_held.sql`;
/// `None` when the resource was never leased.
fn lease_seen(row: Option<PgRow>) -> Result<Option<LeaseSeen>, Error> {
    let Some(row) = row else { return Ok(None) };
    let Some(fence) = row.col::<Option<i64>>("fence")? else {
        return Ok(None);
    };
    Ok(Some(LeaseSeen {
        owner_id: row.col::<Option<Uuid>>("owner_id")?.map(OwnerId::from),
        fence: FencingToken::new(fence),
        live: row.col::<Option<bool>>("live")?.unwrap_or(false),
    }))
}

/// Maps a driver error to its portable kind, by SQLSTATE where there is one.
pub(crate) fn map_err(e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("23505") => StoreErrorKind::UniqueViolation,
            // serialization_failure, deadlock_detected, lock_not_available
            Some("40001" | "40P01" | "55P03") => StoreErrorKind::Retryable,
            // admin/crash shutdown, cannot connect now, too many connections, connection exceptions
            Some("57P01" | "57P02" | "57P03" | "53300") => StoreErrorKind::Unavailable,
            Some(code) if code.starts_with("08") => StoreErrorKind::Unavailable,
            _ => StoreErrorKind::Other,
        },
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    };
    Error::Store(StoreError::new(Backend::Postgres, kind, e))
}
