//! `enqueue` and `enqueue-batch`: the fenced enqueue against the same rows inserted with a
//! plain `INSERT` (no lease check), same pool size, same durability settings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_producer::{Lease, Operation, Outbox};
use outbox_store::op::partition_slot;
use outbox_store::{OrderKey, ProducerCalls, ResourceName};

use crate::cost::{Cost, metered};
use crate::report::{Row, median, spread};
use crate::target::{Db, Plain, Target, producer_store, store};

pub(crate) const RESOURCES: usize = 64;
pub(crate) const BATCH: usize = 100;

const PLAIN_PG: &str = include_str!("../sql/postgres/op_insert_plain.sql");
const PLAIN_SQLITE: &str = include_str!("../sql/sqlite/op_insert_plain.sql");
const PLAIN_BATCH_PG: &str = include_str!("../sql/postgres/op_insert_plain_batch.sql");
const PLAIN_BATCH_SQLITE: &str = include_str!("../sql/sqlite/op_insert_plain_batch.sql");
const PLAIN_MSSQL: &str = include_str!("../sql/mssql/op_insert_plain.sql");
const PLAIN_BATCH_MSSQL: &str = include_str!("../sql/mssql/op_insert_plain_batch.sql");

/// One op of the workload: a statement POST, about 100 bytes of JSON.
pub(crate) fn op(key: &str) -> Operation {
    op_builder(key).build().expect("valid op")
}

/// [`op`] before it is built, for a scenario that changes it.
pub(crate) fn op_builder(key: &str) -> outbox_producer::OperationBuilder {
    Operation::post("statements", "/v1/statements")
        .header("X-Request-Source", "bench")
        .json(&serde_json::json!({"account": 1842, "month": "2026-07", "closing_balance_cents": 125000, "key": key}))
        .idempotency_key(key)
}

pub(crate) async fn leases(outbox: &Outbox) -> anyhow::Result<Vec<Lease>> {
    let mut leases = Vec::with_capacity(RESOURCES);
    for r in 0..RESOURCES {
        let lease = outbox
            .try_acquire(&format!("bench:{r}"), Duration::from_secs(300))
            .await?;
        leases.push(lease.ok_or_else(|| anyhow::anyhow!("bench resource busy"))?);
    }
    Ok(leases)
}

/// Runs `producers` tasks of `per_producer` fenced enqueues each; ops/s.
pub(crate) async fn fenced(db: &Db, producers: u32, per_producer: usize) -> anyhow::Result<f64> {
    fenced_by(db, producers, per_producer, ProducerCalls::Auto).await
}

/// [`fenced`] with the producer's calls going `calls`' way.
pub(crate) async fn fenced_by(
    db: &Db,
    producers: u32,
    per_producer: usize,
    calls: ProducerCalls,
) -> anyhow::Result<f64> {
    let outbox = Outbox::from_store(producer_store(db, producers, calls).await?);
    fenced_on(outbox, producers, per_producer).await
}

/// [`fenced`] through `outbox` (its pool of `producers` connections, its keys); ops/s.
pub(crate) async fn fenced_on(
    outbox: Outbox,
    producers: u32,
    per_producer: usize,
) -> anyhow::Result<f64> {
    let leases = Arc::new(leases(&outbox).await?);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..producers as usize {
        let (outbox, leases) = (outbox.clone(), leases.clone());
        tasks.spawn(async move {
            for i in 0..per_producer {
                let lease = &leases[(p + i * 7) % RESOURCES];
                outbox.enqueue(lease, &op(&format!("f-{p}-{i}"))).await?;
            }
            Ok::<_, outbox_producer::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let rate = (producers as usize * per_producer) as f64 / started.elapsed().as_secs_f64();
    outbox.store().close().await;
    Ok(rate)
}

/// The same rows with a plain INSERT each; ops/s.
async fn plain(db: &Db, producers: u32, per_producer: usize) -> anyhow::Result<f64> {
    let pool = Plain::connect(db, producers).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..producers as usize {
        let pool = pool.clone();
        tasks.spawn(async move {
            for i in 0..per_producer {
                insert_plain(&pool, p, (p + i * 7) % RESOURCES, &format!("p-{p}-{i}")).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((producers as usize * per_producer) as f64 / started.elapsed().as_secs_f64())
}

/// Inserts the row `op(key)` would make, for resource `r`, with no fence check; `producer`
/// picks the SQL Server client (a sqlx pool hands out its own connections).
async fn insert_plain(pool: &Plain, producer: usize, r: usize, key: &str) -> anyhow::Result<()> {
    let o = op(key);
    let resource = format!("bench:{r}");
    let order = OrderKey::from(&ResourceName::new(resource.as_str()).expect("name"));
    let op_id = uuid::Uuid::now_v7();
    let slot = partition_slot(Some(&order), op_id);
    macro_rules! bind {
        ($q:expr, $owner:expr, $op_id:expr) => {
            $q.bind(resource.as_str())
                .bind($owner)
                .bind(1_i64)
                .bind($op_id)
                .bind("statements")
                .bind(key)
                .bind(&o.request_hash()[..])
                .bind(resource.as_str())
                .bind(slot)
                .bind("POST")
                .bind("/v1/statements")
                .bind(r#"[["X-Request-Source","bench"]]"#)
                .bind("application/json")
                .bind(o.body())
        };
    }
    match pool {
        Plain::Postgres(p) => {
            bind!(sqlx::query(PLAIN_PG), uuid::Uuid::nil(), op_id)
                .execute(p)
                .await?;
        }
        Plain::Sqlite(p) => {
            // Two statements (the request, its queue row), one transaction as the enqueue's.
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            bind!(
                sqlx::query(PLAIN_SQLITE),
                uuid::Uuid::nil().hyphenated(),
                op_id.hyphenated()
            )
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        }
        Plain::Mssql(clients) => {
            let hash = o.request_hash();
            let mut c = clients[producer % clients.len()].lock().await;
            c.execute(
                PLAIN_MSSQL,
                &[
                    &resource.as_str(),
                    &uuid::Uuid::nil(),
                    &1_i64,
                    &op_id,
                    &"statements",
                    &key,
                    &&hash[..],
                    &resource.as_str(),
                    &slot,
                    &"POST",
                    &"/v1/statements",
                    &r#"[["X-Request-Source","bench"]]"#,
                    &"application/json",
                    &o.body(),
                ],
            )
            .await?;
        }
    }
    Ok(())
}

/// `enqueue`: 1, 4 and 16 producers over 64 resources.
pub(crate) async fn enqueue(target: &Target, runs: usize, quick: bool) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for producers in [1u32, 4, 16] {
        let per_producer = if quick {
            50
        } else {
            (24_000 / producers as usize).max(1_500)
        };
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        let (mut costs, mut base_costs) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            // Fresh databases, alternating order, so neither side inherits the other's bloat.
            let ops = producers as usize * per_producer;
            let db = target.fresh().await?;
            let (rate, cost) = metered(&db, ops, plain(&db, producers, per_producer)).await?;
            base.push(rate);
            base_costs.push(cost);
            let db = target.fresh().await?;
            let (rate, cost) = metered(&db, ops, fenced(&db, producers, per_producer)).await?;
            ours.push(rate);
            costs.push(cost);
        }
        let mut r = row(
            "enqueue",
            target,
            Some(producers),
            format!("{per_producer} ops/producer"),
            &ours,
            &base,
            "plain INSERT",
        );
        r.extra = with_baseline(&costs, &base_costs);
        rows.push(r);
    }
    Ok(rows)
}

/// `enqueue-batch`: batches of 100 ops in one transaction against a plain 100-row insert.
pub(crate) async fn enqueue_batch(
    target: &Target,
    runs: usize,
    quick: bool,
) -> anyhow::Result<Vec<Row>> {
    let batches = if quick { 20 } else { 300 };
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let (mut costs, mut base_costs) = (Vec::new(), Vec::new());
    let ops = batches * BATCH;
    for _ in 0..runs {
        let db = target.fresh().await?;
        let (rate, cost) = metered(&db, ops, plain_batches(&db, batches)).await?;
        base.push(rate);
        base_costs.push(cost);
        let db = target.fresh().await?;
        let outbox = Outbox::from_store(store(&db, 2).await?);
        let leases = leases(&outbox).await?;
        let work = async {
            let started = Instant::now();
            for b in 0..batches {
                let ops: Vec<Operation> = (0..BATCH).map(|i| op(&format!("b-{b}-{i}"))).collect();
                outbox.enqueue_batch(&leases[b % RESOURCES], &ops).await?;
            }
            Ok(ops as f64 / started.elapsed().as_secs_f64())
        };
        let (rate, cost) = metered(&db, ops, work).await?;
        ours.push(rate);
        costs.push(cost);
        outbox.store().close().await;
    }
    let mut r = row(
        "enqueue-batch",
        target,
        Some(1),
        format!("{batches} batches of {BATCH}"),
        &ours,
        &base,
        "plain 100-row INSERT",
    );
    r.extra = with_baseline(&costs, &base_costs);
    Ok(vec![r])
}

/// The metered figures of `ours` and, prefixed `baseline_`, the baseline's database figures
/// (its PostgreSQL CPU and WAL per op), medians over the runs.
pub(crate) fn with_baseline(ours: &[Cost], baseline: &[Cost]) -> Vec<(String, f64)> {
    let mut extra = Cost::median_extra(ours);
    extra.extend(
        Cost::median_extra(baseline)
            .into_iter()
            .filter(|(name, _)| name == "cpu_s_per_10k_postgres" || name == "wal_bytes_per_op")
            .map(|(name, v)| (format!("baseline_{name}"), v)),
    );
    extra
}

/// Plain batches: 100 rows in one INSERT statement each (autocommit).
async fn plain_batches(db: &Db, batches: usize) -> anyhow::Result<f64> {
    let pool = Plain::connect(db, 2).await?;
    let started = Instant::now();
    for b in 0..batches {
        insert_plain_batch(&pool, b, BATCH, Layout::Ordered).await?;
    }
    Ok((batches * BATCH) as f64 / started.elapsed().as_secs_f64())
}

/// How the ops of a plain batch are keyed, which decides their partition slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Ordered by their resource (the order key), so all in the resource's slot.
    Ordered,
    /// Unordered, but all in the resource's slot: one partition's worth, for the fills that
    /// a single partition drains.
    Unordered,
    /// Unordered, each in its own id's slot as the producer places unordered ops: spread
    /// evenly over every partition.
    Spread,
}

/// Inserts `n` op rows of batch `b` in one plain statement, keyed as `layout` says.
pub(crate) async fn insert_plain_batch(
    pool: &Plain,
    b: usize,
    n: usize,
    layout: Layout,
) -> anyhow::Result<()> {
    let resource = format!("bench:{}", b % RESOURCES);
    let order_key = (layout == Layout::Ordered).then(|| resource.clone());
    let order = OrderKey::from(&ResourceName::new(resource.as_str())?);
    let slot_key = (layout != Layout::Spread).then_some(&order);
    let ops: Vec<(uuid::Uuid, String, Operation)> = (0..n)
        .map(|i| {
            let key = format!("pb-{b}-{i}");
            (uuid::Uuid::now_v7(), key.clone(), op(&key))
        })
        .collect();
    let slots: Vec<i32> = ops
        .iter()
        .map(|(id, _, _)| partition_slot(slot_key, *id))
        .collect();
    match &pool {
        Plain::Postgres(p) => {
            sqlx::query(PLAIN_BATCH_PG)
                .bind(&resource)
                .bind(uuid::Uuid::nil())
                .bind(1_i64)
                .bind(ops.iter().map(|o| o.0).collect::<Vec<_>>())
                .bind(ops.iter().map(|o| o.1.clone()).collect::<Vec<_>>())
                .bind(
                    ops.iter()
                        .map(|o| o.2.request_hash().to_vec())
                        .collect::<Vec<_>>(),
                )
                .bind(&slots)
                .bind(ops.iter().map(|o| o.2.body().to_vec()).collect::<Vec<_>>())
                .bind(order_key.as_deref())
                .execute(p)
                .await?;
        }
        Plain::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query(PLAIN_BATCH_SQLITE)
                .bind(&resource)
                .bind(uuid::Uuid::nil().hyphenated())
                .bind(1_i64)
                .bind(batch_json(&ops, &slots))
                .bind(order_key.as_deref())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Plain::Mssql(clients) => {
            let (json, bytes) = batch_json_bytes_apart(&ops, &slots);
            let mut c = clients[0].lock().await;
            c.execute(
                PLAIN_BATCH_MSSQL,
                &[
                    &resource.as_str(),
                    &uuid::Uuid::nil(),
                    &1_i64,
                    &json,
                    &order_key.as_deref().unwrap_or(""),
                    &bytes,
                ],
            )
            .await?;
        }
    }
    Ok(())
}

/// SQL Server's form of a plain batch: the JSON array {op_id, key, at, body_bytes, partition}
/// and the bytes (each op's hash, then its body; `at` counts from 1, as SUBSTRING does).
fn batch_json_bytes_apart(
    ops: &[(uuid::Uuid, String, Operation)],
    slots: &[i32],
) -> (String, Vec<u8>) {
    let mut bytes = Vec::new();
    let rows: Vec<serde_json::Value> = ops
        .iter()
        .zip(slots)
        .map(|((id, key, o), slot)| {
            let at = bytes.len() + 1;
            bytes.extend_from_slice(&o.request_hash());
            bytes.extend_from_slice(o.body());
            serde_json::json!({"op_id": id.to_string(), "key": key, "at": at, "body_bytes": o.body().len(), "partition": slot})
        })
        .collect();
    (serde_json::Value::Array(rows).to_string(), bytes)
}

/// The ops of a plain batch as the JSON array the SQLite statement reads:
/// {op_id, key, hash (hex), partition, body (hex)}.
fn batch_json(ops: &[(uuid::Uuid, String, Operation)], slots: &[i32]) -> String {
    let rows: Vec<serde_json::Value> = ops
            .iter()
            .zip(slots)
            .map(|((id, key, o), slot)| {
                serde_json::json!({"op_id": id.to_string(), "key": key, "hash": hex(&o.request_hash()), "partition": slot, "body": hex(o.body())})
            })
            .collect();
    serde_json::Value::Array(rows).to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn row(
    scenario: &str,
    target: &Target,
    producers: Option<u32>,
    setting: String,
    ours: &[f64],
    base: &[f64],
    baseline: &str,
) -> Row {
    let (o, b) = (median(ours), median(base));
    Row {
        scenario: scenario.to_owned(),
        backend: target.label().to_owned(),
        producers,
        setting,
        ops_per_s: o,
        spread: spread(ours),
        baseline_ops_per_s: b,
        baseline: baseline.to_owned(),
        ratio: o / b,
        extra: Vec::new(),
    }
}
