//! The PostgreSQL backend: a sqlx pool and one function per SQL file in `sql/postgres/`.
//! Lease time is `clock_timestamp()` inside the SQL; the application clock never decides (G2).
//! This file holds the connection, the enqueue strategy (a first statement without a
//! transaction), rejections, row reading and error mapping; `lease.rs`, `dispatch.rs`,
//! `driver.rs` (the statements of the flows) and `admin.rs` the other statements.

mod admin;
mod dispatch;
mod driver;
mod failure;
mod health;
mod lease;
mod membership;
mod partitioning;
mod pooler;
mod probe;
mod producer;
mod stats;

use pooler::OnStore as _;
pub(crate) use pooler::query;
use probe::{Reached, Route};

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::Row as _;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreOptions;
use crate::admin::sqlx_admin::SqlxAdmin;
use crate::dispatch::{
    ClaimRoom, Claimed, ClaimedOp, Completion, OpStats, Unreadable, parse_headers,
};
use crate::driver::Driver;
use crate::enqueue::{self, check_lease};
use crate::error::{Backend, Error, StoreError};
use crate::model::{
    AppliedMigration, Change, DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow,
    Migration, OrderKey, OwnerId, Partition, ResourceName,
};
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, Rejection, RejectionRow};
use crate::rows::{FoundOp, LeaseSeen, Locked};

const OP_INSERT_BATCH_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_batch_if_lease_held.sql");
const OP_INSERT_NEW_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_new_if_lease_held.sql");
const OP_INSERT_BATCH_NEW_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_batch_new_if_lease_held.sql");
const REJECTION_INSERT: &str = include_str!("../../sql/postgres/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../../sql/postgres/rejection_list.sql");

/// A connection pool to one PostgreSQL database.
#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
    /// How this store's transactions begin: `BEGIN`, and for a dispatcher a `SET LOCAL` in
    /// the same round trip.
    begin: Arc<str>,
    /// Whether a connection pooler in transaction mode is in between, or may be: found at
    /// connect, probed again while unknown (`probe.rs`).
    route: Arc<Route>,
    /// Where LISTEN runs when not on `pool` (`StoreOptions::listen_url`).
    listen: Option<PgPool>,
    /// How a producer's calls reach the tables (`producer.rs`).
    producer: crate::calls::CallsChoice,
}

impl PgStore {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, Error> {
        let (url, pooler) = pooler::split_url(url)?;
        let connect: PgConnectOptions = url.parse().map_err(map_err)?;
        // No startup options and no session-level SET: a connection pooler in transaction mode
        // refuses the one and leaks the other to whichever client gets the server connection
        // next (issue 27). What a statement needs rides with it: the claim's planner settings
        // are its function's (0010_pooler_safe_sessions.sql), a transaction's with its BEGIN.
        let connect = connect.application_name(&options.application_name);
        // A dispatcher paused (SIGSTOP, a VM freeze) between two statements of a transaction
        // would keep that transaction's row locks and block the standby taking over: the
        // session ends once it has idled in a transaction for a third of the shortest lease
        // (at least a second), so its locks go with it and the fence decides the rest. Set in
        // the same round trip as the BEGIN, for that transaction only.
        let begin: Arc<str> = if options.dispatcher_sessions {
            let idle_ms = (options.lease_ttl.min() / 3).as_millis().max(1000);
            format!("BEGIN; SET LOCAL idle_in_transaction_session_timeout = {idle_ms}").into()
        } else {
            "BEGIN".into()
        };
        // Connections first, outside the pool: a pool retries failed connects until its
        // timeout and then reports only that it timed out; this reports the real cause at
        // once. They also tell whether a transaction pooler is in between.
        let route = Route::find(&connect, pooler.declared()).await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect);
        let listen = match &options.listen_url {
            Some(url) => listen_pool(url, options).await?,
            None => None,
        };
        Ok(PgStore {
            pool,
            begin,
            route,
            listen,
            producer: crate::calls::CallsChoice::new(options.producer_calls),
        })
    }

    pub(crate) async fn close(&self) {
        self.route.close();
        self.pool.close().await;
    }

    /// Whether this store behaves as through a transaction pooler: one is in between, or it
    /// is not known yet (`probe.rs`).
    pub(crate) fn pooled(&self) -> bool {
        self.route.pooled()
    }

    /// The fenced enqueue inside the caller's transaction `c`: the statements' flow, or for a
    /// login holding `outbox_producer` alone the function in a savepoint, so a refusal leaves
    /// the caller's transaction as the statements leave it (usable, nothing written).
    pub(crate) async fn op_enqueue_in(
        &self,
        c: &mut PgConnection,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        if !self.producer_functions().await? {
            return enqueue::on::<Self>(c, lease, op).await;
        }
        use sqlx::Connection as _;
        let mut savepoint = c.begin().await.map_err(map_err)?;
        let done = producer::enqueue(&mut savepoint, lease, std::slice::from_ref(op)).await;
        match &done {
            Ok(Ok(_)) => savepoint.commit().await.map_err(map_err)?,
            _ => savepoint.rollback().await.map_err(map_err)?,
        }
        crate::calls::the_one(Backend::Postgres, done?)
    }

    /// Enqueues on a pooled connection: one statement, or a transaction when older pending
    /// ops must be superseded atomically with the insert.
    pub(crate) async fn op_enqueue(
        &self,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        if self.producer_functions().await? {
            let one = self
                .op_enqueue_batch(lease, std::slice::from_ref(op))
                .await?;
            return crate::calls::the_one(Backend::Postgres, one);
        }
        // Through a transaction pooler the first try's unique violation would end the
        // transaction its fallback needs: the transaction's path, which cannot violate.
        if op.supersede_pending || self.pooled() {
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
        if self.producer_functions().await? {
            let mut conn = self.pool.acquire().await.map_err(map_err)?;
            return producer::enqueue(&mut conn, lease, ops).await;
        }
        // A key that exists already, or twice in the batch, fails this statement with a unique
        // violation and nothing written; the transaction below then sorts it out.
        if !self.pooled() && !ops.iter().any(|o| o.supersede_pending) {
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
        if self.producer_functions().await? {
            // outbox.enqueue_batch kept it (a login holding outbox_producer cannot).
            return Ok(());
        }
        query(REJECTION_INSERT)
            .bind(r.resource.as_str())
            .bind(r.owner_id.as_uuid())
            .bind(r.token.get())
            .bind(r.current_token.map(FencingToken::get))
            .bind(r.destination.as_ref().map(DestinationName::as_str))
            .bind(r.idempotency_key.as_ref().map(IdempotencyKey::as_str))
            .bind(r.stage)
            .bind(r.reason)
            .execute_on(self)
            .await?;
        Ok(())
    }

    pub(crate) async fn rejection_list(&self, limit: i64) -> Result<Vec<RejectionRow>, Error> {
        let rows = query(REJECTION_LIST).bind(limit).all_on(self).await?;
        rows.iter().map(rejection_row).collect()
    }
}

/// A one-connection pool on `url` for LISTEN; `None`, after saying why, when that URL goes
/// through a transaction pooler too (a LISTEN there would hear nothing). Used when the probe
/// cannot tell: the URL is configured to be direct, and through a pooler after all its LISTEN
/// would only hear nothing (the dispatcher polls anyway).
async fn listen_pool(url: &str, options: &StoreOptions) -> Result<Option<PgPool>, Error> {
    let (url, pooler) = pooler::split_url(url)?;
    let connect: PgConnectOptions = url.parse().map_err(map_err)?;
    let connect = connect.application_name(&options.application_name);
    let (found, why) = match pooler.declared() {
        Some(declared) => {
            // One connection: a connect failure's real cause, now.
            use sqlx::Connection as _;
            let first = PgConnection::connect_with(&connect)
                .await
                .map_err(map_err)?;
            first.close().await.map_err(map_err)?;
            (declared, "the URL says so")
        }
        None => probe::probe(&connect).await?,
    };
    match found {
        Reached::Server => {}
        Reached::Pooler => {
            tracing::warn!(
                "the LISTEN URL goes through a connection pooler in transaction mode as well \
                 ({why}), where a LISTEN hears nothing: not used"
            );
            return Ok(None);
        }
        Reached::Unknown => tracing::warn!(
            "cannot tell whether the LISTEN URL goes through a connection pooler in transaction \
             mode ({why}): used, as database.listen_url is meant to be direct"
        ),
    }
    Ok(Some(
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect),
    ))
}

/// An enqueue statement (`op_insert_if_lease_held.sql`, with or without its arbiter) bound to
/// `op` under `lease`.
fn insert_query<'q>(sql: &'static str, lease: &'q Lease, op: &'q NewOp) -> Query<'q> {
    query(sql)
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
        .bind(op.trace_state.as_deref())
}

/// The batch enqueue statement (`op_insert_batch_if_lease_held.sql`, with or without its
/// arbiter) bound to `ops` under `lease`.
fn batch_query<'q>(sql: &'static str, lease: &'q Lease, ops: &'q [NewOp]) -> Query<'q> {
    fn each<'q, T>(ops: &'q [NewOp], f: impl Fn(&'q NewOp) -> T) -> Vec<T> {
        ops.iter().map(f).collect()
    }
    query(sql)
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
        .bind(each(ops, |o| o.trace_state.as_deref()))
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
    query(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(part.count() as i32)
        .bind(part.index() as i32)
}

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

/// Maps a driver error to its portable kind (`failure.rs`), worded as callers read it.
pub(crate) fn map_err(e: sqlx::Error) -> Error {
    let kind = failure::kind(&e);
    match pooler::hint(&e) {
        Some(hint) => Error::Store(StoreError::new(
            Backend::Postgres,
            kind,
            pooler::Hinted::new(e, hint),
        )),
        None => Error::Store(StoreError::new(
            Backend::Postgres,
            kind,
            failure::Failure(e),
        )),
    }
}
