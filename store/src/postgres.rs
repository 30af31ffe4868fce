//! The PostgreSQL backend: a sqlx pool and one function per SQL file in `sql/postgres/`.
//! Lease time is `clock_timestamp()` inside the SQL; the application clock never decides (G2).

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection as _, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreOptions;
use crate::error::{Backend, Error, StoreError, StoreErrorKind};
use crate::migrate::{self, AppliedMigration, MigrationReport};
use crate::model::{FencingToken, LeaseRow, OwnerId, ResourceName};

const LEASE_ACQUIRE_IF_FREE: &str = include_str!("../sql/postgres/lease_acquire_if_free.sql");
const LEASE_RENEW_IF_OWNER: &str = include_str!("../sql/postgres/lease_renew_if_owner.sql");
const LEASE_RELEASE_IF_OWNER: &str = include_str!("../sql/postgres/lease_release_if_owner.sql");
const LEASE_LIST: &str = include_str!("../sql/postgres/lease_list.sql");
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

    /// Checks that the server answers; used by readiness probes.
    pub(crate) async fn ping(&self) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        conn.ping().await.map_err(map_err)
    }
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
