//! PostgreSQL's statements for the flows written once over [`Driver`]: migrations, the enqueue
//! decision, the re-queue on takeover, and operators' changes (`admin.rs` holds those).

use super::*;
use crate::model::{ContentRewrite, StoredContent};

const OP_INSERT_IF_LEASE_HELD: &str =
    include_str!("../../sql/postgres/op_insert_if_lease_held.sql");
const LEASE_CHECK: &str = include_str!("../../sql/postgres/lease_check.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../../sql/postgres/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/postgres/op_find_by_key.sql");
const ATTEMPT_RECORD_ABANDONED: &str =
    include_str!("../../sql/postgres/attempt_record_abandoned.sql");
const OP_REQUEUE_ABANDONED: &str = include_str!("../../sql/postgres/op_requeue_abandoned.sql");
const MIGRATION_BEGIN: &str = include_str!("../../sql/postgres/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../../sql/postgres/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../../sql/postgres/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../../sql/postgres/migration_record.sql");

const ADMIN_CONTENT_PAGE: &str = include_str!("../../sql/postgres/admin_content_page.sql");
const ADMIN_CONTENT_REPLACE: &str = include_str!("../../sql/postgres/admin_content_replace.sql");
impl Driver for PgStore {
    const BACKEND: Backend = Backend::Postgres;
    type Conn = PgConnection;
    type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

    async fn begin(&self) -> Result<Self::Tx, Error> {
        // The statement is this store's own (`PgStore::connect`), with no input in it.
        self.pool
            .begin_with(sqlx::AssertSqlSafe(self.begin.clone()))
            .await
            .map_err(map_err)
    }

    async fn begin_migration(&self) -> Result<Self::Tx, Error> {
        let mut tx = self.begin().await?;
        query(MIGRATION_BEGIN)
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
        query(MIGRATION_TABLE_CREATE)
            .execute(c)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn migration_list(c: &mut PgConnection) -> Result<Vec<AppliedMigration>, Error> {
        query(MIGRATION_LIST)
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
        query(MIGRATION_RECORD)
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
        let row = query(LEASE_CHECK)
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
        query(OP_FIND_BY_KEY)
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
        query(OP_SUPERSEDE_OLDER_PENDING)
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
        <Self as SqlxAdmin>::op_lock(c, seqs).await
    }

    async fn admin_op_replay(c: &mut PgConnection, seqs: &[i64]) -> Result<(), Error> {
        <Self as SqlxAdmin>::op_replay(c, seqs).await
    }

    async fn admin_op_cancel(c: &mut PgConnection, seqs: &[i64], note: &str) -> Result<(), Error> {
        <Self as SqlxAdmin>::op_cancel(c, seqs, note).await
    }

    async fn admin_log_insert(
        c: &mut PgConnection,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        <Self as SqlxAdmin>::log_insert(c, change, action, details).await
    }

    async fn admin_content_page(
        c: &mut PgConnection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredContent>, Error> {
        let rows = query(ADMIN_CONTENT_PAGE)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(c)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let headers_json: String = r.try_get("headers").map_err(map_err)?;
                Ok(StoredContent {
                    seq: r.try_get("id").map_err(map_err)?,
                    destination: r.try_get("destination").map_err(map_err)?,
                    headers: parse_headers(&headers_json, Backend::Postgres)?,
                    headers_json,
                    body: r.try_get("body").map_err(map_err)?,
                })
            })
            .collect()
    }

    async fn admin_content_replace(
        c: &mut PgConnection,
        r: &ContentRewrite,
    ) -> Result<bool, Error> {
        let headers = crate::json::list(&r.headers);
        let done = query(ADMIN_CONTENT_REPLACE)
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

    async fn partition_count_lock(c: &mut PgConnection) -> Result<Option<u32>, Error> {
        partitioning::lock(c).await
    }

    async fn partition_count_write(
        c: &mut PgConnection,
        partitions: u32,
        change: &Change,
    ) -> Result<(), Error> {
        partitioning::write(c, partitions, change).await
    }

    async fn destination_ensure(c: &mut PgConnection, name: &str) -> Result<(), Error> {
        health::ensure(c, name).await
    }

    async fn destination_lock(
        c: &mut PgConnection,
        name: &str,
    ) -> Result<(crate::model::DestinationHealth, OffsetDateTime), Error> {
        health::lock(c, name).await
    }

    async fn destination_write(
        c: &mut PgConnection,
        health: &crate::model::DestinationHealth,
    ) -> Result<(), Error> {
        health::write(c, health).await
    }

    async fn destination_hold_insert(
        c: &mut PgConnection,
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
        self.purge(states, older_than_ms, batch).await
    }
}
