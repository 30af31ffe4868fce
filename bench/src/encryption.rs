//! `encryption`: what sealing ops' bodies and header values costs (issue 37), each way in the
//! same run: the Rust producer's enqueue with a key against without one (1 and 16 producers),
//! and the real dispatcher draining a backlog of sealed ops against one of clear ops (it opens
//! every op right before sending). The bench's op has one header and a ~110-byte JSON body;
//! the backlog's ops are unordered, as the `dispatch` scenario's are.

use std::future::Future;

use outbox_producer::{Keys, Operation, Outbox};

use crate::cost::{Cost, metered};
use crate::dispatch::{destination, drain_with};
use crate::enqueue::{BATCH, RESOURCES, fenced_on, leases, row, with_baseline};
use crate::report::Row;
use crate::target::{Db, Target, store};

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
            50
        } else {
            16_000 / producers as usize
        };
        let ops = producers as usize * per_producer;
        let ways = both_ways(runs, |seal| {
            let keys = seal.then(|| keys.clone());
            async move {
                let db = target.fresh().await?;
                let outbox = outbox(&db, producers, keys).await?;
                metered(&db, ops, fenced_on(outbox, producers, per_producer)).await
            }
        })
        .await?;
        let setting = format!("{per_producer} ops/producer, body and header sealed");
        rows.push(ways.row(
            "encryption enqueue",
            target,
            Some(producers),
            setting,
            "the same ops in clear",
        ));
    }
    let backlog = backlog.unwrap_or(if quick { 500 } else { 50_000 });
    let (server, base_url) = destination().await?;
    let ways = both_ways(runs, |seal| {
        let keys = seal.then(|| keys.clone());
        let (source, base_url, server) = (&source, &base_url, server.pid());
        async move {
            let db = target.fresh().await?;
            fill(&db, backlog, keys).await?;
            let dir = tempfile::tempdir()?;
            let config = dir.path().join("dispatcher.toml");
            std::fs::write(
                &config,
                format!(
                    "[database]\nurl = {:?}\n[dispatcher]\nlisten = \"\"\npoll_interval = \"100ms\"\n\
                     [encryption]\nkeys = {{ bench = {source:?} }}\n\
                     [destinations.statements]\nbase_url = {base_url:?}\ntimeout = \"5s\"\n",
                    db.url
                ),
            )?;
            let drained = drain_with(&db, backlog, &config, server).await?;
            Ok((drained.ops_per_s, drained.cost))
        }
    })
    .await?;
    let setting = format!("backlog {backlog} drained by the dispatcher, which opens each op");
    let mut r = ways.row(
        "encryption dispatch",
        target,
        None,
        setting,
        "a backlog of clear ops",
    );
    for (name, v) in Cost::median_extra(&ways.clear.1) {
        if name == "cpu_s_per_10k_dispatcher" {
            r.extra.push((format!("baseline_{name}"), v));
        }
    }
    rows.push(r);
    Ok(rows)
}

/// Rates and costs measured with the key and without, `runs` times each.
struct BothWays {
    sealed: (Vec<f64>, Vec<Cost>),
    clear: (Vec<f64>, Vec<Cost>),
}

impl BothWays {
    fn row(
        &self,
        scenario: &str,
        target: &Target,
        producers: Option<u32>,
        setting: String,
        baseline: &str,
    ) -> Row {
        let mut r = row(
            scenario,
            target,
            producers,
            setting,
            &self.sealed.0,
            &self.clear.0,
            baseline,
        );
        r.extra = with_baseline(&self.sealed.1, &self.clear.1);
        r
    }
}

/// `work(seal)` `runs` times each way, the order alternating run by run.
async fn both_ways<F, Fut>(runs: usize, work: F) -> anyhow::Result<BothWays>
where
    F: Fn(bool) -> Fut,
    Fut: Future<Output = anyhow::Result<(f64, Cost)>>,
{
    let mut ways = BothWays {
        sealed: (Vec::new(), Vec::new()),
        clear: (Vec::new(), Vec::new()),
    };
    for run in 0..runs {
        for seal in [run % 2 == 0, run % 2 == 1] {
            let (rate, cost) = work(seal).await?;
            let way = if seal {
                &mut ways.sealed
            } else {
                &mut ways.clear
            };
            way.0.push(rate);
            way.1.push(cost);
        }
    }
    Ok(ways)
}

/// An outbox on `db` with a pool of `connections`, sealing with `keys` when given.
async fn outbox(db: &Db, connections: u32, keys: Option<Keys>) -> anyhow::Result<Outbox> {
    let outbox = Outbox::from_store(store(db, connections).await?);
    Ok(match keys {
        Some(keys) => outbox.with_keys(keys)?,
        None => outbox,
    })
}

/// `backlog` unordered ops in `db`, in batches, sealed with `keys` when given.
async fn fill(db: &Db, backlog: usize, keys: Option<Keys>) -> anyhow::Result<()> {
    let outbox = outbox(db, 2, keys).await?;
    let leases = leases(&outbox).await?;
    for b in 0..backlog.div_ceil(BATCH) {
        let n = BATCH.min(backlog - b * BATCH);
        let ops: Vec<Operation> = (0..n).map(|i| unordered(&format!("d-{b}-{i}"))).collect();
        outbox.enqueue_batch(&leases[b % RESOURCES], &ops).await?;
    }
    outbox.store().close().await;
    Ok(())
}

/// The bench's op without an order key, as the `dispatch` scenario's backlog is: the drain
/// measures sending, not ordering.
fn unordered(key: &str) -> Operation {
    crate::enqueue::op_builder(key)
        .unordered()
        .build()
        .expect("valid op")
}
