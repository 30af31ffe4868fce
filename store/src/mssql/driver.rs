//! SQL Server's statements for the flows written once over [`Driver`]: transactions and
//! migrations, the enqueue decision, the re-queue on takeover, and operators' changes
//! (`admin.rs` holds those).

use super::*;
use crate::model::{ContentRewrite, StoredContent};

const OP_INSERT_IF_LEASE_HELD: &str = include_str!("../../sql/mssql/op_insert_if_lease_held.sql");
const LEASE_CHECK: &str = include_str!("../../sql/mssql/lease_check.sql");
const OP_SUPERSEDE_OLDER_PENDING: &str =
    include_str!("../../sql/mssql/op_supersede_older_pending.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/mssql/op_find_by_key.sql");
const ATTEMPT_RECORD_ABANDONED: &str = include_str!("../../sql/mssql/attempt_record_abandoned.sql");
const OP_REQUEUE_ABANDONED: &str = include_str!("../../sql/mssql/op_requeue_abandoned.sql");
const MIGRATION_BEGIN: &str = include_str!("../../sql/mssql/migration_begin.sql");
const MIGRATION_TABLE_CREATE: &str = include_str!("../../sql/mssql/migration_table_create.sql");
const MIGRATION_LIST: &str = include_str!("../../sql/mssql/migration_list.sql");
const MIGRATION_RECORD: &str = include_str!("../../sql/mssql/migration_record.sql");
const ADMIN_CONTENT_PAGE: &str = include_str!("../../sql/mssql/admin_content_page.sql");
const ADMIN_CONTENT_REPLACE: &str = include_str!("../../sql/mssql/admin_content_replace.sql");

/// "The ROLLBACK TRANSACTION request has no corresponding BEGIN TRANSACTION": the server
/// already rolled back (an error under `XACT_ABORT ON` does), which is what was asked.
const NO_TRANSACTION: u32 = 3903;

impl Driver for MsStore {
    const BACKEND: Backend = Backend::Mssql;
    type Conn = Client;
    type Tx = Tx;

    async fn begin(&self) -> Result<Tx, Error> {
        let mut conn = self.conn().await?;
        // Set first: a begin that fails or is cancelled leaves it set, so the pool discards
        // the connection.
        conn.in_transaction = true;
        conn.client.begin_transaction().await.map_err(map_err)?;
        Ok(Tx { conn })
    }

    async fn begin_migration(&self) -> Result<Tx, Error> {
        let mut tx = self.begin().await?;
        Stmt::new(MIGRATION_BEGIN).execute(&mut tx).await?;
        Ok(tx)
    }

    async fn commit(mut tx: Tx) -> Result<(), Error> {
        tx.conn.client.commit_transaction().await.map_err(map_err)?;
        tx.conn.in_transaction = false;
        Ok(())
    }

    async fn rollback(mut tx: Tx) -> Result<(), Error> {
        match tx.conn.client.rollback_transaction().await {
            Ok(()) => {}
            Err(e) if e.code() == Some(NO_TRANSACTION) => {}
            Err(e) => return Err(map_err(e)),
        }
        tx.conn.in_transaction = false;
        Ok(())
    }

    async fn migration_table_create(c: &mut Client) -> Result<(), Error> {
        Stmt::new(MIGRATION_TABLE_CREATE).execute(c).await
    }

    async fn migration_list(c: &mut Client) -> Result<Vec<AppliedMigration>, Error> {
        Stmt::new(MIGRATION_LIST)
            .fetch_all(c)
            .await?
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

    async fn migration_apply(c: &mut Client, m: &Migration) -> Result<(), Error> {
        // A migration is a script of DDL statements, no parameters, in batches separated by
        // `GO` lines (CREATE SCHEMA and CREATE PROCEDURE must each open a batch), sent in order
        // inside the migration transaction. The checksum stays over the whole file.
        for batch in batches(m.sql) {
            c.simple_query(batch)
                .await
                .map_err(map_err)?
                .into_results()
                .await
                .map_err(map_err)?;
        }
        Stmt::new(MIGRATION_RECORD)
            .bind(m.version)
            .bind(m.name)
            .bind(m.checksum())
            .execute(c)
            .await
    }

    async fn op_insert(c: &mut Client, lease: &Lease, op: &NewOp) -> Result<Option<i64>, Error> {
        insert_stmt(lease, op)
            .fetch_optional(c)
            .await?
            .map(|r| r.col("id"))
            .transpose()
    }

    async fn lease_seen(
        c: &mut Client,
        resource: &ResourceName,
    ) -> Result<Option<LeaseSeen>, Error> {
        let row = Stmt::new(LEASE_CHECK)
            .bind(resource.as_str())
            .fetch_optional(c)
            .await?;
        lease_seen(row)
    }

    async fn op_find_by_key(
        c: &mut Client,
        destination: &str,
        key: &str,
    ) -> Result<Option<FoundOp>, Error> {
        Stmt::new(OP_FIND_BY_KEY)
            .bind(destination)
            .bind(key)
            .fetch_optional(c)
            .await?
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

    async fn op_supersede_older(c: &mut Client, lease: &Lease, op: &NewOp) -> Result<(), Error> {
        Stmt::new(OP_SUPERSEDE_OLDER_PENDING)
            .bind(lease.resource.as_str())
            .bind(op.destination.as_str())
            .bind(lease.token.get())
            .execute(c)
            .await
    }

    async fn attempt_record_abandoned(
        c: &mut Client,
        lease: &Lease,
        part: Partition,
    ) -> Result<(), Error> {
        with_partition_lease(ATTEMPT_RECORD_ABANDONED, lease, part)
            .execute(c)
            .await
    }

    async fn op_requeue_abandoned(
        c: &mut Client,
        lease: &Lease,
        part: Partition,
    ) -> Result<u64, Error> {
        with_partition_lease(OP_REQUEUE_ABANDONED, lease, part)
            .affected(c)
            .await
    }

    async fn admin_op_lock(c: &mut Client, seqs: &[i64]) -> Result<Vec<Locked>, Error> {
        admin::op_lock(c, seqs).await
    }

    async fn admin_op_replay(c: &mut Client, seqs: &[i64]) -> Result<(), Error> {
        admin::op_replay(c, seqs).await
    }

    async fn admin_op_cancel(c: &mut Client, seqs: &[i64], note: &str) -> Result<(), Error> {
        admin::op_cancel(c, seqs, note).await
    }

    async fn admin_log_insert(
        c: &mut Client,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        admin::log_insert(c, change, action, details).await
    }

    async fn admin_content_page(
        c: &mut Client,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredContent>, Error> {
        let rows = Stmt::new(ADMIN_CONTENT_PAGE)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(c)
            .await?;
        rows.iter()
            .map(|r| {
                let headers_json: String = r.col("headers")?;
                Ok(StoredContent {
                    seq: r.col("id")?,
                    destination: r.col("destination")?,
                    headers: parse_headers(&headers_json, Backend::Mssql)?,
                    headers_json,
                    body: r.col("body")?,
                })
            })
            .collect()
    }

    async fn admin_content_replace(c: &mut Client, r: &ContentRewrite) -> Result<bool, Error> {
        let done = Stmt::new(ADMIN_CONTENT_REPLACE)
            .bind(r.seq)
            .bind(r.headers_json_read.as_str())
            .bind(r.body_read.as_slice())
            .bind(crate::json::list(&r.headers))
            .bind(r.body.as_slice())
            .affected(c)
            .await?;
        Ok(done == 1)
    }

    async fn partition_count_lock(c: &mut Client) -> Result<Option<u32>, Error> {
        partitioning::lock(c).await
    }

    async fn partition_count_write(
        c: &mut Client,
        partitions: u32,
        change: &Change,
    ) -> Result<(), Error> {
        partitioning::write(c, partitions, change).await
    }

    async fn destination_ensure(c: &mut Client, name: &str) -> Result<(), Error> {
        health::ensure(c, name).await
    }

    async fn destination_lock(
        c: &mut Client,
        name: &str,
    ) -> Result<(crate::model::DestinationHealth, OffsetDateTime), Error> {
        health::lock(c, name).await
    }

    async fn destination_write(
        c: &mut Client,
        health: &crate::model::DestinationHealth,
    ) -> Result<(), Error> {
        health::write(c, health).await
    }

    async fn destination_hold_insert(
        c: &mut Client,
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
        admin::purge_count(self, states, older_than_ms).await
    }

    async fn admin_purge(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error> {
        admin::purge(self, states, older_than_ms, batch).await
    }
}

/// The batches of a T-SQL script, in order: the text between lines that hold only `GO`
/// (ignoring case and surrounding white space), the separator `sqlcmd` and SSMS use; batches of
/// white space alone are left out. Deliberately line-based: a `GO` line inside a multi-line
/// string literal or `/* */` comment splits there too (as in `sqlcmd`), and `GO 5` (a repeat
/// count) or `GO -- note` are not separators. The outbox's migrations use neither.
fn batches(script: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(script);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            if line.trim().eq_ignore_ascii_case("GO") {
                rest = Some(&text[offset + line.len()..]);
                return Some(&text[..offset]);
            }
            offset += line.len();
        }
        rest = None;
        Some(text)
    })
    .filter(|batch| !batch.trim().is_empty())
}

/// `op_insert_if_lease_held.sql` bound to `op` under `lease`.
pub(crate) fn insert_stmt<'q>(lease: &'q Lease, op: &'q NewOp) -> Stmt<'q> {
    Stmt::new(OP_INSERT_IF_LEASE_HELD)
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
        .bind(op.path.as_str())
        .bind(op.headers_json.as_str())
        .bind(op.content_type.as_deref())
        .bind(op.body.as_slice())
        .bind(op.expire_with_generation)
        .bind(op.delay_ms)
        .bind(op.trace_context.as_deref())
        .bind(op.trace_state.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mssql::stmt::tests::params_used;
    use crate::op::Method;

    #[test]
    fn scripts_split_on_go_lines_only() {
        let script = "-- header\r\nCREATE SCHEMA s;\r\nGO\r\n\
                      CREATE PROCEDURE s.p AS SELECT 'GO' AS go;\n  go  \n\
                      GOTO done;\nGO;\nSELECT 1 -- GO\ndone:\n\tGo\t\n\nGO\n   \n";
        let got: Vec<&str> = batches(script).collect();
        assert_eq!(
            got,
            [
                "-- header\r\nCREATE SCHEMA s;\r\n",
                "CREATE PROCEDURE s.p AS SELECT 'GO' AS go;\n",
                "GOTO done;\nGO;\nSELECT 1 -- GO\ndone:\n",
            ]
        );
        // A script without separators is one batch; one of nothing but separators is none.
        assert_eq!(batches("SELECT 1;").collect::<Vec<_>>(), ["SELECT 1;"]);
        assert_eq!(batches("GO\n\ngo").count(), 0);
    }

    #[test]
    fn the_sql_api_migration_opens_a_batch_for_each_create() {
        let api = crate::migrate::migrations(Backend::Mssql)
            .iter()
            .find(|m| m.name == "sql_api")
            .expect("0004_sql_api");
        // CREATE SCHEMA, CREATE PROCEDURE and CREATE FUNCTION must each be the first statement
        // of a batch: one CREATE per batch, and no batch without one.
        let mut count = 0;
        for batch in batches(api.sql) {
            let creates = batch.lines().filter(|l| l.starts_with("CREATE ")).count();
            assert_eq!(creates, 1, "one CREATE per batch:\n{batch}");
            count += 1;
        }
        assert!(count > 10, "{count} batches");
    }

    #[test]
    fn the_enqueue_binds_every_parameter_its_statement_uses() {
        let lease = Lease {
            resource: ResourceName::new("r").unwrap(),
            owner_id: OwnerId::new_random(),
            token: FencingToken::new(3),
            expires_at: OffsetDateTime::UNIX_EPOCH,
        };
        let op = NewOp {
            op_id: Uuid::now_v7(),
            destination: DestinationName::new("billing").unwrap(),
            idempotency_key: IdempotencyKey::new("k-1").unwrap(),
            request_hash: [7; 32],
            order_key: None,
            partition: 12,
            method: Method::Post,
            path: "/invoices".into(),
            headers_json: "[]".into(),
            content_type: Some("application/json".into()),
            body: b"{}".to_vec(),
            expire_with_generation: false,
            supersede_pending: false,
            delay_ms: 1500,
            trace_context: None,
            trace_state: None,
        };
        let stmt = insert_stmt(&lease, &op);
        assert_eq!(
            stmt.params.len(),
            params_used(OP_INSERT_IF_LEASE_HELD).len()
        );
        assert!(matches!(stmt.params[2], tiberius::ColumnData::I64(Some(3))));
        assert!(matches!(stmt.params[8], tiberius::ColumnData::I32(Some(_))));
        assert!(matches!(
            stmt.params[14],
            tiberius::ColumnData::Bit(Some(false))
        ));
        assert!(matches!(
            stmt.params[15],
            tiberius::ColumnData::I64(Some(_))
        ));
    }
}
