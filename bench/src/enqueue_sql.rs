//! `enqueue-sql`: the SQL API's fenced enqueue (migration 0004) as a worker in another language
//! calls it, against the Rust producer's `enqueue` of the same op with the same number of
//! producers, measured in the same run: `outbox.enqueue` on PostgreSQL, `outbox.Enqueue` on
//! SQL Server. SQLite has no SQL API.

use std::sync::Arc;
use std::time::Instant;

use sqlx::{Connection as _, PgConnection, Row as _};
use uuid::Uuid;

use crate::enqueue::{RESOURCES, fenced, op, row};
use crate::report::Row;
use crate::target::{Db, Target};

const PRODUCERS: u32 = 16;
const ENQUEUE_PG: &str = include_str!("../sql/postgres/op_enqueue_sql_api.sql");
const ENQUEUE_MSSQL: &str = include_str!("../sql/mssql/op_enqueue_sql_api.sql");
const TRY_ACQUIRE_PG: &str = "SELECT owner_id, token FROM outbox.try_acquire($1, interval '300 s')";
const TRY_ACQUIRE_MSSQL: &str = "EXEC outbox.TryAcquire @Resource = @P1, @TtlMs = @P2";
const HEADERS: &str = r#"[["X-Request-Source","bench"]]"#;

/// A lease taken through the SQL API: resource, owner id, token.
type SqlLease = (String, Uuid, i64);

/// `enqueue-sql`: 16 producers, each on its own connection calling the SQL API's enqueue in
/// autocommit, against the Rust `enqueue` with 16 pooled connections; the ratio is SQL / Rust.
pub(crate) async fn enqueue_sql(
    target: &Target,
    runs: usize,
    quick: bool,
) -> anyhow::Result<Vec<Row>> {
    if let Target::Sqlite = target {
        println!(
            "enqueue-sql (sqlite): not measured: SQLite has no stored functions, so there is \
             no SQL API to call (its 0004_sql_api migration is a comment); producers in other \
             languages use PostgreSQL or SQL Server"
        );
        return Ok(Vec::new());
    }
    let per_producer = if quick { 50 } else { 1_500 };
    let (mut sql, mut rust) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // Fresh databases, and the order alternating between runs, so that neither side
        // inherits the other's bloat or always runs on a warmer machine.
        let (first, second) = (target.fresh().await?, target.fresh().await?);
        let (s, r) = if run % 2 == 0 {
            let r = fenced(&first, PRODUCERS, per_producer).await?;
            (sql_path(target, &second, per_producer).await?, r)
        } else {
            let s = sql_path(target, &first, per_producer).await?;
            (s, fenced(&second, PRODUCERS, per_producer).await?)
        };
        eprintln!(
            "enqueue-sql run {}/{runs} ({}): SQL {s:.0} ops/s, Rust {r:.0} ops/s, ratio {:.2}",
            run + 1,
            target.label(),
            s / r
        );
        sql.push(s);
        rust.push(r);
    }
    Ok(vec![row(
        "enqueue-sql",
        target,
        Some(PRODUCERS),
        format!("{per_producer} ops/producer"),
        &sql,
        &rust,
        "Rust enqueue",
    )])
}

/// Runs `PRODUCERS` tasks of `per_producer` SQL enqueues each, every task on a connection of
/// its own, opened in the timed part (as the Rust path's pool opens its connections); ops/s.
async fn sql_path(target: &Target, db: &Db, per_producer: usize) -> anyhow::Result<f64> {
    let mssql = matches!(target, Target::Mssql { .. });
    let leases: Arc<[SqlLease]> = if mssql {
        mssql_leases(db).await?.into()
    } else {
        pg_leases(db).await?.into()
    };
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..PRODUCERS as usize {
        let (url, leases) = (db.url.clone(), leases.clone());
        tasks.spawn(async move {
            if mssql {
                mssql_producer(&url, p, per_producer, &leases).await
            } else {
                pg_producer(&url, p, per_producer, &leases).await
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((PRODUCERS as usize * per_producer) as f64 / started.elapsed().as_secs_f64())
}

/// One lease per bench resource, through `outbox.try_acquire`.
async fn pg_leases(db: &Db) -> anyhow::Result<Vec<SqlLease>> {
    let mut c = PgConnection::connect(&db.url).await?;
    let mut leases = Vec::with_capacity(RESOURCES);
    for r in 0..RESOURCES {
        let resource = format!("bench:{r}");
        let row = sqlx::query(TRY_ACQUIRE_PG)
            .bind(&resource)
            .fetch_optional(&mut c)
            .await?
            .ok_or_else(|| anyhow::anyhow!("bench resource busy"))?;
        leases.push((resource, row.get(0), row.get(1)));
    }
    c.close().await?;
    Ok(leases)
}

/// Producer `p` on PostgreSQL: `outbox.enqueue` in autocommit, `per_producer` times, over the
/// leases in the Rust path's order.
async fn pg_producer(
    url: &str,
    p: usize,
    per_producer: usize,
    leases: &[SqlLease],
) -> anyhow::Result<()> {
    let mut c = PgConnection::connect(url).await?;
    for i in 0..per_producer {
        let (resource, owner_id, token) = &leases[(p + i * 7) % RESOURCES];
        let key = format!("s-{p}-{i}");
        sqlx::query(ENQUEUE_PG)
            .bind(resource)
            .bind(owner_id)
            .bind(token)
            .bind("statements")
            .bind("POST")
            .bind("/v1/statements")
            .bind(HEADERS)
            .bind(op(&key).body())
            .bind("application/json")
            .bind(&key)
            .fetch_one(&mut c)
            .await?;
    }
    c.close().await?;
    Ok(())
}

/// One lease per bench resource, through `outbox.TryAcquire`.
async fn mssql_leases(db: &Db) -> anyhow::Result<Vec<SqlLease>> {
    let mut c = outbox_store::mssql::connect(&db.url).await?;
    let mut leases = Vec::with_capacity(RESOURCES);
    for r in 0..RESOURCES {
        let resource = format!("bench:{r}");
        let row = c
            .query(TRY_ACQUIRE_MSSQL, &[&resource.as_str(), &300_000_i32])
            .await?
            .into_row()
            .await?
            .ok_or_else(|| anyhow::anyhow!("bench resource busy"))?;
        let owner: Option<Uuid> = row.get("OwnerId");
        let token: Option<i64> = row.get("Token");
        let (Some(owner), Some(token)) = (owner, token) else {
            anyhow::bail!("outbox.TryAcquire returned no owner id or token");
        };
        leases.push((resource, owner, token));
    }
    c.close().await?;
    Ok(leases)
}

/// Producer `p` on SQL Server: `outbox.Enqueue` in autocommit, `per_producer` times, over the
/// leases in the Rust path's order.
async fn mssql_producer(
    url: &str,
    p: usize,
    per_producer: usize,
    leases: &[SqlLease],
) -> anyhow::Result<()> {
    let mut c = outbox_store::mssql::connect(url).await?;
    for i in 0..per_producer {
        let (resource, owner_id, token) = &leases[(p + i * 7) % RESOURCES];
        let key = format!("s-{p}-{i}");
        let body = op(&key).body().to_vec();
        c.query(
            ENQUEUE_MSSQL,
            &[
                &resource.as_str(),
                owner_id,
                token,
                &"statements",
                &"POST",
                &"/v1/statements",
                &HEADERS,
                &body.as_slice(),
                &"application/json",
                &key.as_str(),
            ],
        )
        .await?
        .into_first_result()
        .await?;
    }
    c.close().await?;
    Ok(())
}
