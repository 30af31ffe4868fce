//! `enqueue-role`: the Rust producer's enqueue as a login holding `outbox_producer` alone makes
//! it (`ProducerCalls::Functions`: `outbox.enqueue_batch`, run with its owner's rights) against
//! the statements a login with table rights runs, in the same run: single enqueues from 1 and
//! 16 producers, and batches of 100. PostgreSQL only (the other backends have one way).

use std::sync::Arc;
use std::time::Instant;

use outbox_producer::{Operation, Outbox};
use outbox_store::ProducerCalls;

use crate::cost::metered;
use crate::enqueue::{BATCH, RESOURCES, fenced_by, leases, op, row};
use crate::report::Row;
use crate::target::{Db, Target, producer_store};

/// `enqueue-role`: the ratio is functions / statements.
pub(crate) async fn enqueue_role(
    target: &Target,
    runs: usize,
    quick: bool,
) -> anyhow::Result<Vec<Row>> {
    if !matches!(target, Target::Postgres { .. }) {
        println!(
            "enqueue-role ({}): not measured: only PostgreSQL's producers have two ways to \
             the tables (a login holding outbox_producer alone calls functions)",
            target.label()
        );
        return Ok(Vec::new());
    }
    let mut rows = Vec::new();
    for producers in [1u32, 16] {
        let per_producer = if quick {
            200
        } else {
            24_000 / producers as usize
        };
        let setting = format!("{per_producer} ops/producer through outbox.enqueue_batch");
        let work =
            |db: Arc<Db>, way| async move { fenced_by(&db, producers, per_producer, way).await };
        let ops = producers as usize * per_producer;
        rows.push(both_ways(target, runs, Some(producers), setting, ops, work).await?);
    }
    let batches = if quick { 20 } else { 300 };
    let setting = format!("{batches} batches of {BATCH} through outbox.enqueue_batch");
    let work = |db: Arc<Db>, way| async move { batched(&db, batches, way).await };
    rows.push(both_ways(target, runs, Some(1), setting, batches * BATCH, work).await?);
    Ok(rows)
}

/// `work` on a fresh database each way, `runs` times, the order alternating; the row of
/// the functions against the statements.
async fn both_ways<F, Fut>(
    target: &Target,
    runs: usize,
    producers: Option<u32>,
    setting: String,
    ops: usize,
    work: F,
) -> anyhow::Result<Row>
where
    F: Fn(Arc<Db>, ProducerCalls) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>>,
{
    let (mut functions, mut statements) = (Vec::new(), Vec::new());
    let (mut f_costs, mut s_costs) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for way in order(run) {
            let db = Arc::new(target.fresh().await?);
            let (rate, cost) = metered(&db, ops, work(db.clone(), way)).await?;
            if way == ProducerCalls::Functions {
                functions.push(rate);
                f_costs.push(cost);
            } else {
                statements.push(rate);
                s_costs.push(cost);
            }
        }
    }
    let mut r = row(
        "enqueue-role",
        target,
        producers,
        setting,
        &functions,
        &statements,
        "the statements",
    );
    r.extra = crate::enqueue::with_baseline(&f_costs, &s_costs);
    Ok(r)
}

/// Which way goes first in run `run`.
fn order(run: usize) -> [ProducerCalls; 2] {
    if run.is_multiple_of(2) {
        [ProducerCalls::Functions, ProducerCalls::Statements]
    } else {
        [ProducerCalls::Statements, ProducerCalls::Functions]
    }
}

/// `batches` batches of [`BATCH`] ops, one after another; ops/s.
async fn batched(db: &Db, batches: usize, calls: ProducerCalls) -> anyhow::Result<f64> {
    let outbox = Outbox::from_store(producer_store(db, 2, calls).await?);
    let leases = leases(&outbox).await?;
    let started = Instant::now();
    for b in 0..batches {
        let ops: Vec<Operation> = (0..BATCH).map(|i| op(&format!("b-{b}-{i}"))).collect();
        outbox.enqueue_batch(&leases[b % RESOURCES], &ops).await?;
    }
    let rate = (batches * BATCH) as f64 / started.elapsed().as_secs_f64();
    outbox.store().close().await;
    Ok(rate)
}
