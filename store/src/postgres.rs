//! The PostgreSQL backend: a sqlx pool and one function per SQL file in `sql/postgres/`.
//! Lease time is `clock_timestamp()` inside the SQL; the application clock never decides (G2).

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreOptions;
use crate::error::{Backend, Error, StoreError, StoreErrorKind};
use crate::migrate::{self, AppliedMigration, MigrationReport};
use crate::model::{
    DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow, OrderKey, OwnerId, ResourceName,
};
use crate::op::{
    EnqueueResult, Enqueued, LeaseSeen, NewOp, OpState, Refusal, Rejection, RejectionRow,
    check_lease, duplicate_or_conflict,
};

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../sql/postgres/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../sql/postgres/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../sql/postgres/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../sql/postgres/lease_list.sql");
const LEASE_CHECK: &str = include_str!("../sql/postgres/lease_check.sql");
const OP_INSERT_IF_LEASE_HELD: &str = include_str!("../sql/postgres/op_insert_if_lease_held.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../sql/postgres/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../sql/postgres/op_find_by_key.sql");
const REJECTION_INSERT: &str = include_str!("../sql/postgres/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../sql/postgres/rejection_list.sql");
const MIGRATION_BEGIN: &str = include_str!("../sql/postgres/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../sql/postgres/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../sql/postgres/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../sql/postgres/migration_record.sql");

/// A connection pool to one PostgreSQL database.
#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pool: PgPool,
}

impl PgStore {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, Error> {
        let connect: PgConnectOptions = url.parse().map_err(map_err)?;
        let connect = connect.application_name(&options.application_name);
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

    pub(crate) async fn migrate(&self) -> Result<MigrationReport, Error> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(MIGRATION_BEGIN)
            .execute(&mut *tx)
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
        let (pending, mut report) =
            migrate::plan(migrate::migrations(Backend::Postgres), &applied)?;
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
            .bind(owner.as_uuid())
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
            .bind(owner.as_uuid())
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
                    resource: ResourceName::new(r.get::<String, _>("resource"))?,
                    owner_id: r.get::<Option<Uuid>, _>("owner_id").map(OwnerId::from),
                    token: FencingToken::new(r.get("fence")),
                    expires_at: r.get("expires_at"),
                    held: r.get("held"),
                    remaining_ms: r.get("remaining_ms"),
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
        if !op.supersede_pending {
            let mut conn = self.pool.acquire().await.map_err(map_err)?;
            return enqueue_on(&mut conn, lease, op).await;
        }
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let result = enqueue_on(&mut tx, lease, op).await?;
        finish(tx, result.is_ok()).await?;
        Ok(result)
    }

    /// All or nothing: the lease row stays share-locked for the whole transaction.
    pub(crate) async fn op_enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[NewOp],
    ) -> Result<Result<Vec<Enqueued>, Refusal>, Error> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let seen = lease_seen(
            sqlx::query(LEASE_CHECK)
                .bind(lease.resource.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?,
        );
        let mut done = Vec::with_capacity(ops.len());
        let mut outcome = check_lease(seen, lease).map_err(Refusal::Rejected);
        for op in ops {
            if outcome.is_err() {
                break;
            }
            match enqueue_on(&mut tx, lease, op).await? {
                Ok(enqueued) => done.push(enqueued),
                Err(refusal) => outcome = Err(refusal),
            }
        }
        finish(tx, outcome.is_ok()).await?;
        Ok(outcome.map(|()| done))
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
        Ok(rows
            .iter()
            .map(|r| RejectionRow {
                id: r.get("id"),
                resource: r.get("resource"),
                owner_id: OwnerId::from(r.get::<Uuid, _>("owner_id")),
                token: FencingToken::new(r.get("fence")),
                current_token: r
                    .get::<Option<i64>, _>("current_fence")
                    .map(FencingToken::new),
                destination: r.get("destination"),
                idempotency_key: r.get("idempotency_key"),
                stage: r.get("stage"),
                reason: r.get("reason"),
                rejected_at: r.get("rejected_at"),
            })
            .collect())
    }

    /// Checks that the server answers; used by readiness probes.
    pub(crate) async fn ping(&self) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        conn.ping().await.map_err(map_err)
    }
}

/// The fenced enqueue on one connection: the caller's transaction, or ours.
pub(crate) async fn enqueue_on(
    conn: &mut PgConnection,
    lease: &Lease,
    op: &NewOp,
) -> Result<EnqueueResult, Error> {
    let row = sqlx::query(OP_INSERT_IF_LEASE_HELD)
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
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(seq) = row.get::<Option<i64>, _>("id") {
        if op.supersede_pending {
            sqlx::query(OP_SUPERSEDE_OLDER_PENDING)
                .bind(lease.resource.as_str())
                .bind(op.destination.as_str())
                .bind(lease.token.get())
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
        }
        return Ok(Ok(Enqueued {
            op_id: op.op_id,
            seq,
            duplicate: false,
            state: OpState::Pending,
        }));
    }
    if let Err(reason) = check_lease(lease_seen(Some(row)), lease) {
        return Ok(Err(Refusal::Rejected(reason)));
    }
    let found = sqlx::query(OP_FIND_BY_KEY)
        .bind(op.destination.as_str())
        .bind(op.idempotency_key.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .map(|r| {
            (
                r.get("id"),
                r.get("op_id"),
                r.get("request_hash"),
                r.get("state"),
            )
        });
    duplicate_or_conflict(found, op, Backend::Postgres)
}

/// The lease columns of a row from `lease_check.sql` or `op_insert_if_lease_held.sql`;
/// `None` when the resource was never leased.
fn lease_seen(row: Option<PgRow>) -> Option<LeaseSeen> {
    let row = row?;
    let fence = row.get::<Option<i64>, _>("fence")?;
    Some(LeaseSeen {
        owner_id: row.get::<Option<Uuid>, _>("owner_id").map(OwnerId::from),
        fence: FencingToken::new(fence),
        live: row.get::<Option<bool>, _>("live").unwrap_or(false),
    })
}

/// Commits when the work was accepted, rolls back otherwise.
async fn finish(tx: sqlx::Transaction<'_, sqlx::Postgres>, commit: bool) -> Result<(), Error> {
    if commit {
        tx.commit().await
    } else {
        tx.rollback().await
    }
    .map_err(map_err)
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
