//! The SQL Server backend: a bb8 pool of tiberius connections and one function per T-SQL file
//! in `sql/mssql/`. Lease time is `SYSUTCDATETIME()` inside the SQL; the application clock never
//! decides (G2). Checks that must hold against a takeover read the lease row `WITH (HOLDLOCK)`
//! in the same statement or transaction: a shared lock the takeover's UPDATE waits for, under
//! both locking read committed and read committed snapshot (each file's header says how).
//! This file holds the connection, the enqueue strategy, rejections and row reading;
//! `config.rs` the URL, `pool.rs` connections, `stmt.rs` statements and columns, `error.rs`
//! error numbers, and `lease.rs`, `dispatch.rs`, `driver.rs` and `admin.rs` the statements.

mod admin;
mod config;
mod dispatch;
mod driver;
mod error;
mod health;
mod lease;
mod membership;
mod partitioning;
mod pool;
mod producer;
mod stats;
mod stmt;
#[cfg(test)]
mod subset_tests;

use std::collections::HashMap;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreOptions;
use crate::dispatch::{
    ClaimRoom, Claimed, ClaimedOp, Completion, OpStats, Unreadable, parse_headers,
};
use crate::driver::Driver;
use crate::enqueue;
use crate::error::{Backend, Error, InvalidInput};
use crate::json::list as json_list;
use crate::model::{
    AppliedMigration, Change, DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow,
    Migration, OrderKey, OwnerId, Partition, ResourceName,
};
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, Rejection, RejectionRow};
use crate::rows::{FoundOp, LeaseSeen, Locked};

use config::MssqlUrl;
use error::{Thrown, map_err, map_pool_err, thrown_by};
pub use pool::Client;
use pool::{Manager, PoolConn, Tx};
use stmt::{Col, Stmt};

const OP_INSERT_BATCH_IF_LEASE_HELD: &str =
    include_str!("../../sql/mssql/op_insert_batch_if_lease_held.sql");
const REJECTION_INSERT: &str = include_str!("../../sql/mssql/rejection_insert.sql");
const REJECTION_LIST: &str = include_str!("../../sql/mssql/rejection_list.sql");
const SERVER_PRODUCT: &str = include_str!("../../sql/mssql/server_product.sql");

/// Opens one connection to the SQL Server database `url` names, with the session options the
/// outbox runs with (`XACT_ABORT ON` among them): for a caller's own transactions that enqueue
/// with `Store::op_enqueue_in`, and for tools. Like a store, it refuses Babelfish for
/// PostgreSQL, where the fenced enqueue's lease check takes no lock (G4), unless the URL
/// allows it for tests, and then it warns at every connect (issue 34). The URL is never
/// echoed in errors.
pub async fn connect(url: &str) -> Result<Client, Error> {
    let url = MssqlUrl::parse(url, &StoreOptions::default().application_name)?;
    open_checked(&url).await
}

/// Opens one connection and asks which server answers: Babelfish is refused unless `url`
/// allows it for tests, and allowed, it is said at warn on every connect, since the fence
/// does not hold there. The store's first connection and a caller's own go through here.
async fn open_checked(url: &MssqlUrl) -> Result<Client, Error> {
    let mut client = pool::open(url).await.map_err(map_err)?;
    let server = server_product(&mut client).await?;
    if let Some(warning) = judge(&server, url.allow_babelfish)? {
        tracing::warn!(server = %server.version, "{warning}");
    }
    Ok(client)
}

/// A connection pool to one SQL Server database.
#[derive(Debug, Clone)]
pub(crate) struct MsStore {
    pub(crate) pool: bb8::Pool<Manager>,
    /// How a producer's calls reach the tables (`producer.rs`).
    producer: crate::calls::CallsChoice,
}

impl MsStore {
    pub(crate) async fn connect(url: &str, options: &StoreOptions) -> Result<Self, Error> {
        let url = MssqlUrl::parse(url, &options.application_name)?;
        // One direct connection first: a pool retries failed connects until its timeout and
        // then reports only that it timed out; this reports the real cause at once. It also
        // asks which server answers.
        let first = open_checked(&url).await?;
        first.close().await.map_err(map_err)?;
        let pool = bb8::Pool::builder()
            .max_size(options.max_connections.max(1))
            .connection_timeout(
                options
                    .acquire_timeout
                    .max(std::time::Duration::from_millis(1)),
            )
            // Validity is judged by what the last use saw (broken, in_transaction), not by a
            // round trip before every checkout.
            .test_on_check_out(false)
            .build_unchecked(Manager { url });
        Ok(MsStore {
            pool,
            producer: crate::calls::CallsChoice::new(options.producer_calls),
        })
    }

    /// bb8 closes idle connections as the pool is dropped; nothing waits here.
    pub(crate) async fn close(&self) {}

    /// A pooled connection.
    pub(crate) async fn conn(&self) -> Result<PoolConn, Error> {
        self.pool.get_owned().await.map_err(map_pool_err)
    }

    /// Runs `stmt` on a pooled connection and returns its rows; a connection the failure
    /// left in an unknown state is not reused.
    pub(crate) async fn fetch_all(&self, stmt: Stmt<'_>) -> Result<Vec<tiberius::Row>, Error> {
        let mut conn = self.conn().await?;
        // Broken until the exchange completes: a caller's timeout may drop this future
        // mid-statement, and a connection left mid-response must not be lent again.
        conn.broken = true;
        let rows = stmt.rows(&mut conn.client).await;
        conn.broken = rows.as_ref().err().is_some_and(pool::breaks_connection);
        rows.map_err(map_err)
    }

    /// [`MsStore::fetch_all`]'s first row.
    pub(crate) async fn fetch_optional(
        &self,
        stmt: Stmt<'_>,
    ) -> Result<Option<tiberius::Row>, Error> {
        Ok(self.fetch_all(stmt).await?.into_iter().next())
    }

    /// The one row a statement run on a pooled connection always returns.
    pub(crate) async fn fetch_one(&self, stmt: Stmt<'_>) -> Result<tiberius::Row, Error> {
        self.fetch_optional(stmt)
            .await?
            .ok_or_else(|| error::column_err("(row)", "the statement returned no row"))
    }

    /// Runs a statement on a pooled connection for its effect only.
    pub(crate) async fn execute(&self, stmt: Stmt<'_>) -> Result<(), Error> {
        self.fetch_all(stmt).await.map(drop)
    }

    /// The `affected` count of a statement run on a pooled connection.
    pub(crate) async fn affected(&self, stmt: Stmt<'_>) -> Result<u64, Error> {
        stmt::affected(&self.fetch_one(stmt).await?)
    }

    /// Enqueues on a pooled connection: one statement, or a transaction when older pending
    /// ops must be superseded atomically with the insert. The statement holds its lease
    /// lock until it ends, so alone it is atomic.
    pub(crate) async fn op_enqueue(
        &self,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        if self.producer_procedures().await? {
            let one = Box::pin(self.enqueue_by_procedure(
                lease,
                std::slice::from_ref(op),
                crate::op::EnqueueStage::Enqueue,
            ))
            .await?;
            return crate::calls::the_one(Backend::Mssql, one);
        }
        if op.supersede_pending {
            return enqueue::in_transaction(self, lease, op).await;
        }
        let mut conn = self.conn().await?;
        // As in fetch_all: unusable unless the exchange completes.
        conn.broken = true;
        let mut result = enqueue::on::<Self>(&mut conn.client, lease, op).await;
        if let Err(Error::Store(e)) = &result
            && e.kind() == crate::StoreErrorKind::UniqueViolation
        {
            // The key's range lock makes this rare; the statement failed whole, so the
            // second try finds the op that holds the key.
            result = enqueue::on::<Self>(&mut conn.client, lease, op).await;
        }
        // An error may have come from anywhere in the exchange: that connection is not reused.
        conn.broken = result.is_err();
        result
    }

    /// All or nothing, in one transaction: the batch statement checks the lease under a
    /// shared lock held to the commit and THROWs the reason when it is not held.
    pub(crate) async fn op_enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[NewOp],
    ) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
        if self.producer_procedures().await? {
            return Box::pin(self.enqueue_by_procedure(lease, ops, crate::op::EnqueueStage::Batch))
                .await;
        }
        let mut tx = self.begin().await?;
        let (batch, bytes) = crate::json::batch_bytes_apart(ops, false);
        let rows = Stmt::new(OP_INSERT_BATCH_IF_LEASE_HELD)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(batch)
            .bind(bytes)
            .rows(&mut tx)
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                if let Some(Thrown::Rejected(reason)) = thrown_by(&e) {
                    // XACT_ABORT ON has rolled the transaction back with the THROW. Should the
                    // rollback request fail anyway, the connection is dropped unreturned
                    // (in_transaction is still set), which is just as safe: the rejection
                    // stands either way.
                    let _ = Self::rollback(tx).await;
                    return Ok(Err(NotEnqueued::Rejected(reason)));
                }
                // Dropped uncommitted: the connection is closed, the server rolls back.
                return Err(map_err(e));
            }
        };
        let inserted: HashMap<Uuid, i64> = rows
            .iter()
            .map(|r| Ok((r.col::<Uuid>("op_id")?, r.col::<i64>("id")?)))
            .collect::<Result<_, Error>>()?;
        enqueue::assemble::<Self>(tx, lease, ops, &inserted).await
    }

    /// The fenced enqueue inside the caller's transaction `c`: the statements' flow, or for a
    /// user holding `outbox_producer` alone the procedure, which answers a rejection or a
    /// conflict without an error, so the caller's transaction stays usable either way.
    pub(crate) async fn op_enqueue_in(
        &self,
        c: &mut Client,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        if !self.producer_procedures().await? {
            return enqueue::on::<Self>(c, lease, op).await;
        }
        let one = Box::pin(producer::enqueue(
            c,
            lease,
            std::slice::from_ref(op),
            crate::op::EnqueueStage::InCallerTransaction,
        ))
        .await?;
        crate::calls::the_one(Backend::Mssql, one)
    }

    pub(crate) async fn rejection_insert(&self, r: &Rejection) -> Result<(), Error> {
        if self.producer_procedures().await? {
            // outbox.EnqueueOps kept it (a user holding outbox_producer cannot).
            return Ok(());
        }
        self.execute(
            Stmt::new(REJECTION_INSERT)
                .bind(r.resource.as_str())
                .bind(r.owner_id.as_uuid())
                .bind(r.token.get())
                .bind(r.current_token.map(FencingToken::get))
                .bind(r.destination.as_ref().map(DestinationName::as_str))
                .bind(r.idempotency_key.as_ref().map(IdempotencyKey::as_str))
                .bind(r.stage)
                .bind(r.reason),
        )
        .await
    }

    pub(crate) async fn rejection_list(&self, limit: i64) -> Result<Vec<RejectionRow>, Error> {
        let rows = self
            .fetch_all(Stmt::new(REJECTION_LIST).bind(limit))
            .await?;
        rows.iter().map(rejection_row).collect()
    }
}

/// What `server_product.sql` says of the server a connection reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProduct {
    /// Babelfish for PostgreSQL, not SQL Server: table hints take no lock there.
    pub babelfish: bool,
    /// The first line of `@@VERSION`.
    pub version: String,
}

/// Which server `c` is connected to: SQL Server (or Azure SQL), or Babelfish for PostgreSQL.
pub async fn server_product(c: &mut Client) -> Result<ServerProduct, Error> {
    let row = Stmt::new(SERVER_PRODUCT).fetch_one(c).await?;
    let version: String = row.col("version")?;
    Ok(ServerProduct {
        babelfish: row.col("babelfish")?,
        version: version.lines().next().unwrap_or("").trim().to_owned(),
    })
}

/// What to do on the server `server` says it is: go on (`None`), go on saying why the fence
/// does not hold there (Babelfish, allowed for tests by `allow_babelfish`), or refuse
/// (Babelfish otherwise).
fn judge(
    server: &ServerProduct,
    allow_babelfish: bool,
) -> Result<Option<&'static str>, InvalidInput> {
    match (server.babelfish, allow_babelfish) {
        (false, _) => Ok(None),
        (true, true) => Ok(Some(BABELFISH_ALLOWED)),
        (true, false) => Err(babelfish_refused()),
    }
}

/// What every connect to Babelfish allowed for tests says: the promise it breaks.
const BABELFISH_ALLOWED: &str = "connected to Babelfish for PostgreSQL because the URL says \
AllowBabelfishForTests=true: it ignores locking hints (UPDLOCK, HOLDLOCK, READPAST take no \
lock), so the fence does not hold here (a stale owner's enqueue can be accepted during a \
takeover, G4; a stale dispatcher can claim, G9). For tests only, never for data that matters";

/// Why a store is not opened on Babelfish: the fence needs the locks its hints ask for.
fn babelfish_refused() -> InvalidInput {
    InvalidInput::new(
        "database_url",
        "names a Babelfish for PostgreSQL server, which runs T-SQL but ignores locking hints \
         (UPDLOCK, HOLDLOCK, READPAST take no lock): a stale owner's enqueue could be accepted \
         during a takeover (G4) and a stale dispatcher could claim (G9). Use SQL Server or \
         PostgreSQL in production; for tests only, add AllowBabelfishForTests=true to the URL",
    )
}

/// A statement whose parameters are a partition's lease and the partition: @P1 resource,
/// @P2 owner id, @P3 token, @P4 partition count, @P5 partition index.
fn with_partition_lease<'q>(sql: &'static str, lease: &'q Lease, part: Partition) -> Stmt<'q> {
    Stmt::new(sql)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(part.count() as i32)
        .bind(part.index() as i32)
}

/// The lease columns of a row from `lease_check.sql`; `None` when the resource was never
/// leased.
fn lease_seen(row: Option<tiberius::Row>) -> Result<Option<LeaseSeen>, Error> {
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

/// A row of `rejection_list.sql` or `admin_rejection_list.sql`.
pub(crate) fn rejection_row(r: &tiberius::Row) -> Result<RejectionRow, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn product(version: &str) -> ServerProduct {
        ServerProduct {
            babelfish: version.contains("Babelfish"),
            version: version.to_owned(),
        }
    }

    /// Issue 34, item 6: SQL Server goes on in silence; Babelfish is refused, and allowed for
    /// tests it goes on with a warning that the fence does not hold (it once went on
    /// silently). `connect` and the store's first connection both decide here.
    #[test]
    fn babelfish_is_refused_or_allowed_for_tests_with_a_warning() {
        let sql_server = product("Microsoft SQL Server 2022 (RTM) - 16.0.1000.6 (X64)");
        let babelfish =
            product("Babelfish for PostgreSQL with SQL Server Compatibility - 12.0.2000.8");
        for allowed in [false, true] {
            assert_eq!(judge(&sql_server, allowed), Ok(None));
        }
        let refused = judge(&babelfish, false).unwrap_err();
        assert_eq!(refused.field, "database_url");
        for says in ["Babelfish", "locking hints", "AllowBabelfishForTests=true"] {
            assert!(refused.reason.contains(says), "{refused}");
        }
        let warning = judge(&babelfish, true)
            .unwrap()
            .expect("allowed for tests, with a warning");
        for says in ["Babelfish", "fence does not hold", "G4", "For tests only"] {
            assert!(warning.contains(says), "{warning}");
        }
    }
}
