//! `encryption`: what sealing ops' bodies and header values costs (issue 37), each way in the
//! same run: the Rust producer's enqueue with a key against without one (1 and 16 producers),
//! and the real dispatcher draining a backlog of sealed ops against one of clear ops (it opens
//! every op right before sending). The bench's op has one header and a ~110-byte JSON body;
//! the backlog's ops are unordered, as the `dispatch` scenario's are.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_producer::{Keys, Operation, Outbox};

use crate::cost::{Cost, Meter, measured, metered};
use crate::dispatch::{count, destination, settled, spawn_dispatcher};
use crate::enqueue::{BATCH, RESOURCES, leases, op, row, with_baseline};
use crate::report::Row;
use crate::target::{Db, Plain, Target, store};

/// The bench's key: 32 bytes of 0x07, in base64.
const KEY: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// `encryption`: each row's ratio is sealed / clear.
pub(crate) async fn encryption(
    target: &Target,
    runs: usize,
    quick: bool,
    backlog: Option<usize>,
) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let key_file = dir.path().join("bench.key");
    std::fs::write(&key_file, KEY)?;
    let source = format!("file:{}", key_file.display());
    let keys = Keys::load(&[("bench".into(), source.clone())], Some("bench"), &|_| {
        None
    })?;
    let mut rows = Vec::new();
    for producers in [1u32, 16] {
        let per_producer = if quick {
            200
        } else {
            16_000 / producers as usize
        };
        let ops = producers as usize * per_producer;
        let (mut sealed, mut clear) = (Vec::new(), Vec::new());
        let (mut s_costs, mut c_costs) = (Vec::new(), Vec::new());
        for run in 0..runs {
            for seal in [run % 2 == 0, run % 2 == 1] {
                let db = Arc::new(target.fresh().await?);
                let keys = seal.then(|| keys.clone());
                let work = enqueued(&db, producers, per_producer, keys);
                let (rate, cost) = metered(&db, ops, work).await?;
                if seal {
                    sealed.push(rate);
                    s_costs.push(cost);
                } else {
                    clear.push(rate);
                    c_costs.push(cost);
                }
            }
        }
        let setting = format!("{per_producer} ops/producer, body and header sealed");
        let mut r = row(
            "encryption enqueue",
            target,
            Some(producers),
            setting,
            &sealed,
            &clear,
            "the same ops in clear",
        );
        r.extra = with_baseline(&s_costs, &c_costs);
        rows.push(r);
    }
    let backlog = backlog.unwrap_or(if quick { 2_000 } else { 50_000 });
    let (mut sealed, mut clear) = (Vec::new(), Vec::new());
    let (mut s_costs, mut c_costs) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let (server, base_url) = destination().await?;
        for seal in [run % 2 == 0, run % 2 == 1] {
            let keys = seal.then(|| keys.clone());
            let (rate, cost) =
                drained(target, backlog, keys, &source, (server.pid(), &base_url)).await?;
            if seal {
                sealed.push(rate);
                s_costs.push(cost);
            } else {
                clear.push(rate);
                c_costs.push(cost);
            }
        }
    }
    let setting = format!("backlog {backlog} drained by the dispatcher, which opens each op");
    let mut r = row(
        "encryption dispatch",
        target,
        None,
        setting,
        &sealed,
        &clear,
        "a backlog of clear ops",
    );
    r.extra = with_baseline(&s_costs, &c_costs);
    for (name, v) in Cost::median_extra(&c_costs) {
        if name == "cpu_s_per_10k_dispatcher" {
            r.extra.push((format!("baseline_{name}"), v));
        }
    }
    rows.push(r);
    Ok(rows)
}

/// `producers` tasks of `per_producer` enqueues each, sealing with `keys` when given; ops/s.
async fn enqueued(
    db: &Db,
    producers: u32,
    per_producer: usize,
    keys: Option<Keys>,
) -> anyhow::Result<f64> {
    let mut outbox = Outbox::from_store(store(db, producers).await?);
    if let Some(keys) = keys {
        outbox = outbox.with_keys(keys)?;
    }
    let leases = Arc::new(leases(&outbox).await?);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..producers as usize {
        let (outbox, leases) = (outbox.clone(), leases.clone());
        tasks.spawn(async move {
            for i in 0..per_producer {
                let lease = &leases[(p + i * 7) % RESOURCES];
                outbox.enqueue(lease, &op(&format!("e-{p}-{i}"))).await?;
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

/// The bench's op without an order key, as the `dispatch` scenario's backlog is: the drain
/// measures sending, not ordering.
fn unordered(key: &str) -> Operation {
    Operation::post("statements", "/v1/statements")
        .header("X-Request-Source", "bench")
        .json(&serde_json::json!({"account": 1842, "month": "2026-07", "closing_balance_cents": 125000, "key": key}))
        .idempotency_key(key)
        .unordered()
        .build()
        .expect("valid op")
}

/// A fresh database filled with `backlog` ops (sealed with `keys` when given, in batches, not
/// measured), drained by the dispatcher binary holding the key into the destination at
/// `base_url`, metered; ops/s and the cost.
async fn drained(
    target: &Target,
    backlog: usize,
    keys: Option<Keys>,
    source: &str,
    (server_pid, base_url): (u32, &str),
) -> anyhow::Result<(f64, Cost)> {
    let db = target.fresh().await?;
    let mut outbox = Outbox::from_store(store(&db, 2).await?);
    if let Some(keys) = keys {
        outbox = outbox.with_keys(keys)?;
    }
    let leases = leases(&outbox).await?;
    for b in 0..backlog.div_ceil(BATCH) {
        let n = BATCH.min(backlog - b * BATCH);
        let ops: Vec<Operation> = (0..n).map(|i| unordered(&format!("d-{b}-{i}"))).collect();
        outbox.enqueue_batch(&leases[b % RESOURCES], &ops).await?;
    }
    outbox.store().close().await;
    let pool = Plain::connect(&db, 1).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("dispatcher.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = {:?}\n[dispatcher]\nlisten = \"\"\npoll_interval = \"100ms\"\n\
             [encryption]\nkeys = {{ bench = {source:?} }}\n\
             [destinations.statements]\nbase_url = {base_url:?}\ntimeout = \"5s\"\n",
            db.url
        ),
    )?;
    let started = Instant::now();
    let mut process = spawn_dispatcher(&path)?;
    let who = [("dispatcher", process.pid()), ("destination", server_pid)];
    let meter = Meter::start(measured(&pool, &who).await, &pool).await;
    while !settled(&pool).await? {
        process.ensure_running("the dispatcher")?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();
    let cost = meter.stop(backlog, &pool).await;
    let delivered = count(&pool, "delivered").await?;
    anyhow::ensure!(
        delivered == backlog as i64,
        "{delivered} of {backlog} ops were delivered"
    );
    Ok((backlog as f64 / elapsed.as_secs_f64(), cost))
}
