//! How a worker calls the SQL Server procedures, over a tiberius client of its own: each
//! procedure as one parameterised `EXEC`, its row read by column name, a `THROW` as its number
//! and message.

use std::borrow::Cow;

use outbox_store::mssql::Client;
use outbox_tests::TestDb;
use tiberius::{ColumnData, Query, Row};
use time::OffsetDateTime;
use uuid::Uuid;

const TRY_ACQUIRE: &str = "EXEC outbox.TryAcquire @Resource = @P1, @TtlMs = @P2";
/// `outbox.Renew`, its parameters bound by name.
pub(super) const RENEW: &str =
    "EXEC outbox.Renew @Resource = @P1, @OwnerId = @P2, @Token = @P3, @TtlMs = @P4";
const RELEASE: &str = "EXEC outbox.Release @Resource = @P1, @OwnerId = @P2, @Token = @P3";
const ENQUEUE: &str = "EXEC outbox.Enqueue @Resource = @P1, @OwnerId = @P2, @Token = @P3, \
     @Destination = @P4, @Method = @P5, @Path = @P6, @Headers = @P7, @Body = @P8, \
     @ContentType = @P9, @IdempotencyKey = @P10, @OrderKey = @P11, @Unordered = @P12, \
     @NotBeforeMs = @P13, @SupersedePending = @P14, @ExpireWithGeneration = @P15, \
     @Traceparent = @P16";

/// A `THROW` (or any server error): its number and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Thrown {
    pub(super) number: u32,
    pub(super) message: String,
}

impl Thrown {
    /// The field a `THROW 51000` names: `invalid <field>: <reason>`.
    pub(super) fn invalid_field(&self) -> Option<&str> {
        if self.number != 51000 {
            return None;
        }
        self.message.strip_prefix("invalid ")?.split(':').next()
    }
}

/// A lease as `outbox.TryAcquire` returned it.
#[derive(Debug, Clone)]
pub(super) struct SqlLease {
    pub(super) resource: String,
    pub(super) owner: Uuid,
    pub(super) token: i64,
    pub(super) expires_at: OffsetDateTime,
}

/// An op as `outbox.Enqueue` returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SqlEnqueued {
    pub(super) op_id: Uuid,
    pub(super) seq: i64,
    pub(super) duplicate: bool,
}

/// A text parameter (nvarchar).
pub(super) fn text(s: &str) -> ColumnData<'static> {
    ColumnData::String(Some(Cow::Owned(s.to_owned())))
}

/// A text parameter, NULL for `None`.
fn opt_text(s: Option<&str>) -> ColumnData<'static> {
    ColumnData::String(s.map(|s| Cow::Owned(s.to_owned())))
}

/// A connection of the caller's own, with the outbox's session options.
pub(super) async fn connect(db: &TestDb) -> Client {
    outbox_store::mssql::connect(db.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Runs `sql` with `params` and returns its first result's rows, or what it threw.
pub(super) async fn call(
    c: &mut Client,
    sql: &str,
    params: Vec<ColumnData<'static>>,
) -> Result<Vec<Row>, Thrown> {
    let mut q = Query::new(sql);
    for p in params {
        q.bind(p);
    }
    let rows = async { q.query(c).await?.into_first_result().await }.await;
    rows.map_err(|e| match e {
        tiberius::error::Error::Server(t) => Thrown {
            number: t.code(),
            message: t.message().to_owned(),
        },
        other => panic!("{sql}: not a server error: {other}"),
    })
}

/// Runs one T-SQL batch without parameters (BEGIN, COMMIT, test fixtures).
pub(super) async fn batch(c: &mut Client, sql: &str) -> Vec<Row> {
    let rows = async { c.simple_query(sql).await?.into_first_result().await }.await;
    rows.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// One bigint a query answers.
pub(super) async fn scalar(c: &mut Client, sql: &str, params: Vec<ColumnData<'static>>) -> i64 {
    let rows = call(c, sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    rows[0].get::<i64, _>(0).expect("a bigint")
}

/// `outbox.TryAcquire`: the lease, `None` while another owner holds it, or what it threw.
pub(super) async fn try_acquire(
    c: &mut Client,
    resource: &str,
    ttl_ms: i32,
) -> Result<Option<SqlLease>, Thrown> {
    let rows = call(
        c,
        TRY_ACQUIRE,
        vec![text(resource), ColumnData::I32(Some(ttl_ms))],
    )
    .await?;
    assert!(rows.len() <= 1, "TryAcquire returned {} rows", rows.len());
    Ok(rows.first().map(|r| SqlLease {
        resource: resource.to_owned(),
        owner: r.get("OwnerId").expect("OwnerId"),
        token: r.get("Token").expect("Token"),
        expires_at: r.get("ExpiresAt").expect("ExpiresAt"),
    }))
}

/// A lease on a resource the test expects to be free.
pub(super) async fn acquire(c: &mut Client, resource: &str) -> SqlLease {
    try_acquire(c, resource, 30_000)
        .await
        .expect("TryAcquire")
        .expect("a free resource")
}

/// `outbox.Renew`: the new expiry, `None` when the lease is lost, or what it threw.
pub(super) async fn renew(
    c: &mut Client,
    l: &SqlLease,
    ttl_ms: i32,
) -> Result<Option<OffsetDateTime>, Thrown> {
    let params = vec![
        text(&l.resource),
        ColumnData::Guid(Some(l.owner)),
        ColumnData::I64(Some(l.token)),
        ColumnData::I32(Some(ttl_ms)),
    ];
    let rows = call(c, RENEW, params).await?;
    assert!(rows.len() <= 1, "Renew returned {} rows", rows.len());
    Ok(rows.first().map(|r| r.get("ExpiresAt").expect("ExpiresAt")))
}

/// `outbox.Release`: whether this owner and token released the lease.
pub(super) async fn release(c: &mut Client, l: &SqlLease) -> bool {
    let params = vec![
        text(&l.resource),
        ColumnData::Guid(Some(l.owner)),
        ColumnData::I64(Some(l.token)),
    ];
    let rows = call(c, RELEASE, params).await.expect("Release");
    assert_eq!(rows.len(), 1, "Release returns one row");
    rows[0].get("Released").expect("Released")
}

/// Every argument of `outbox.Enqueue`, in its order; `None` is NULL.
#[derive(Debug, Clone)]
pub(super) struct Args {
    pub(super) resource: String,
    pub(super) owner: Option<Uuid>,
    pub(super) token: Option<i64>,
    pub(super) destination: Option<String>,
    pub(super) method: Option<String>,
    pub(super) path: Option<String>,
    pub(super) headers: Option<String>,
    pub(super) body: Option<Vec<u8>>,
    pub(super) content_type: Option<String>,
    pub(super) idempotency_key: Option<String>,
    pub(super) order_key: Option<String>,
    pub(super) unordered: bool,
    pub(super) not_before_ms: Option<i64>,
    pub(super) supersede_pending: bool,
    pub(super) expire_with_generation: bool,
    pub(super) traceparent: Option<String>,
}

impl Args {
    /// The seed's op under `lease`: a statement POSTed to billing with key `key`.
    pub(super) fn statement(lease: &SqlLease, key: &str) -> Args {
        Args {
            resource: lease.resource.clone(),
            owner: Some(lease.owner),
            token: Some(lease.token),
            destination: Some("billing".into()),
            method: Some("POST".into()),
            path: Some("/statements".into()),
            headers: None,
            body: Some(br#"{"account":1842}"#.to_vec()),
            content_type: Some("application/json".into()),
            idempotency_key: Some(key.into()),
            order_key: None,
            unordered: false,
            not_before_ms: None,
            supersede_pending: false,
            expire_with_generation: false,
            traceparent: None,
        }
    }

    /// These arguments with `change` applied.
    pub(super) fn with(&self, change: impl FnOnce(&mut Args)) -> Args {
        let mut args = self.clone();
        change(&mut args);
        args
    }

    fn params(&self) -> Vec<ColumnData<'static>> {
        vec![
            text(&self.resource),
            ColumnData::Guid(self.owner),
            ColumnData::I64(self.token),
            opt_text(self.destination.as_deref()),
            opt_text(self.method.as_deref()),
            opt_text(self.path.as_deref()),
            opt_text(self.headers.as_deref()),
            ColumnData::Binary(self.body.clone().map(Cow::Owned)),
            opt_text(self.content_type.as_deref()),
            opt_text(self.idempotency_key.as_deref()),
            opt_text(self.order_key.as_deref()),
            ColumnData::Bit(Some(self.unordered)),
            ColumnData::I64(self.not_before_ms),
            ColumnData::Bit(Some(self.supersede_pending)),
            ColumnData::Bit(Some(self.expire_with_generation)),
            opt_text(self.traceparent.as_deref()),
        ]
    }
}

/// `outbox.Enqueue` with `args`: the op, or what it threw.
pub(super) async fn enqueue(c: &mut Client, args: &Args) -> Result<SqlEnqueued, Thrown> {
    let rows = call(c, ENQUEUE, args.params()).await?;
    assert_eq!(rows.len(), 1, "Enqueue returns one row");
    Ok(SqlEnqueued {
        op_id: rows[0].get("OpId").expect("OpId"),
        seq: rows[0].get("Seq").expect("Seq"),
        duplicate: rows[0].get("Duplicate").expect("Duplicate"),
    })
}

/// How many rows `dbo.<table>` holds.
pub(super) async fn count(c: &mut Client, table: &str) -> i64 {
    let sql = match table {
        "outbox_ops" => "SELECT COUNT_BIG(*) FROM dbo.outbox_ops",
        "outbox_rejections" => "SELECT COUNT_BIG(*) FROM dbo.outbox_rejections",
        "account_statements" => "SELECT COUNT_BIG(*) FROM dbo.account_statements",
        other => panic!("no count for {other}"),
    };
    scalar(c, sql, vec![]).await
}

/// Whether this server has the loopback linked server set up so that a rejection record
/// outlives the caller's transaction (see the migration's header).
pub(super) async fn loopback_set_up(c: &mut Client) -> bool {
    let sql = "SELECT COUNT_BIG(*) FROM sys.servers WHERE name = N'OUTBOX_LOOPBACK' \
               AND is_linked = 1 AND is_rpc_out_enabled = 1 \
               AND is_remote_proc_transaction_promotion_enabled = 0";
    scalar(c, sql, vec![]).await == 1
}

/// The seed's business table, written in the same transaction as the op.
pub(super) async fn create_business_table(c: &mut Client) {
    batch(
        c,
        "CREATE TABLE dbo.account_statements (id int NOT NULL PRIMARY KEY, content nvarchar(100) NOT NULL)",
    )
    .await;
}

/// Asserts that `got` is `THROW number` with exactly `message`.
pub(super) fn expect_thrown<T: std::fmt::Debug>(
    got: Result<T, Thrown>,
    number: u32,
    message: &str,
) {
    match got {
        Err(t) => assert_eq!((t.number, t.message.as_str()), (number, message)),
        Ok(v) => panic!("expected THROW {number} {message:?}, got {v:?}"),
    }
}

/// Asserts that `got` is `THROW 51000` naming `field`.
pub(super) fn expect_invalid<T: std::fmt::Debug>(got: Result<T, Thrown>, field: &str) {
    match got {
        Err(t) => assert_eq!(t.invalid_field(), Some(field), "{t:?}"),
        Ok(v) => panic!("expected invalid {field}, got {v:?}"),
    }
}
