//! `outbox-bench`: the benchmark program. Each scenario runs on SQLite and PostgreSQL (a
//! throwaway cluster with default durability, or `--database-url`), or with `--backend mssql`
//! (or `all`) on the SQL Server `--mssql-url` names, `--runs` times, and reports the median,
//! the spread and the ratio against a baseline measured in the same run.
//! Machines are shared and noisy: compare ratios, not absolute figures.

mod cost;
mod destination;
mod dispatch;
mod encryption;
mod enqueue;
mod enqueue_role;
mod enqueue_sql;
mod graphile;
mod instances;
mod peer;
mod report;
mod sweep;
mod target;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::target::Target;

/// Measures the fenced outbox against same-run baselines.
#[derive(Debug, Parser)]
#[command(name = "outbox-bench", version, about)]
struct Args {
    #[command(subcommand)]
    scenario: Scenario,
    /// PostgreSQL server to use instead of a throwaway cluster (databases are created on it).
    #[arg(long, global = true, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// SQL Server for `--backend mssql|all`: a database where `CREATE DATABASE` may run (e.g.
    /// mssql://sa:PASSWORD@localhost:1433/master?TrustServerCertificate=true).
    #[arg(long, global = true, env = "OUTBOX_MSSQL_URL", hide_env_values = true)]
    mssql_url: Option<String>,
    /// Which backends to run (`both`: SQLite and PostgreSQL; `all`: those and SQL Server).
    #[arg(long, global = true, value_enum, default_value = "both")]
    backend: Which,
    /// Runs per scenario; the median is reported.
    #[arg(long, global = true, default_value_t = 5)]
    runs: usize,
    /// Write the results as JSON here.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Small sizes and one run: a smoke test that finishes in under a minute.
    #[arg(long, global = true)]
    quick: bool,
    /// Backlog size for `dispatch` (default 200000; with `--instances` 20000, a quarter of it
    /// under each destination limit) and for each round of `peer` (default 50000).
    #[arg(long, global = true)]
    backlog: Option<usize>,
}

/// The options of `dispatch`.
#[derive(Debug, Clone, clap::Args)]
struct DispatchArgs {
    /// Scale-out instead: drain one backlog with each of these numbers of dispatcher processes
    /// sharing 8 partitions (32 in flight each) into a destination that answers after 20 ms,
    /// then again under a destination limit below one process's capacity, which must hold.
    /// Alone, 1,2,3. PostgreSQL (and SQL Server) only.
    #[arg(
        long,
        value_name = "N,N,..",
        value_delimiter = ',',
        num_args = 0..=1,
        default_missing_value = "1,2,3",
        value_parser = clap::value_parser!(u32).range(1..=8)
    )]
    instances: Option<Vec<u32>>,
}

/// The options of `sweep`.
#[derive(Debug, Clone, clap::Args)]
struct SweepArgs {
    /// The destination's answer delays in ms (0: a server that answers at once).
    #[arg(long, value_name = "MS,MS,..", value_delimiter = ',', default_value = "0,20",
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    delays_ms: Vec<u64>,
    /// Destination `max_in_flight` values, each with the default `claim_batch`.
    #[arg(long, value_name = "N,N,..", value_delimiter = ',', default_value = "8,16,32,64,128,256",
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    in_flight: Vec<u32>,
    /// `claim_batch` values, each with the default destination `max_in_flight`.
    #[arg(long, value_name = "N,N,..", value_delimiter = ',', default_value = "8,16,128,512",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    claim_batches: Vec<u32>,
}

/// The options of `peer`.
#[derive(Debug, Clone, clap::Args)]
struct PeerArgs {
    /// Ours: the destination's `max_in_flight` per pairing (32: the dispatcher's defaults; 256:
    /// `dispatch`'s 256-in-flight setting).
    #[arg(long, value_name = "N,N,..", value_delimiter = ',', default_value = "32,256",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    in_flight: Vec<u32>,
    /// graphile-worker's concurrency per pairing, by position (its pool is concurrency + 2
    /// connections, at least 10; the throwaway cluster allows 400).
    #[arg(long, value_name = "N,N,..", value_delimiter = ',', default_value = "64,256",
          value_parser = clap::value_parser!(u32).range(1..=384))]
    concurrency: Vec<u32>,
    /// graphile-worker's completion batching: `completeJobBatchDelay` and `failJobBatchDelay`
    /// in milliseconds (0 batches what finished in the same tick). Off unless given, as by
    /// graphile-worker's default.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(0..=1000))]
    complete_batch_delay: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Sqlite,
    Postgres,
    Both,
    Mssql,
    All,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Fenced enqueue with 1, 4 and 16 producers vs plain INSERT.
    Enqueue,
    /// enqueue_batch of 100 ops vs a plain 100-row INSERT.
    EnqueueBatch,
    /// The SQL API's outbox.enqueue from 16 connections vs the Rust enqueue (PostgreSQL).
    EnqueueSql,
    /// The Rust enqueue as a login holding outbox_producer alone makes it (through
    /// outbox.enqueue_batch) vs through the statements, 1 and 16 producers and batches of 100
    /// (PostgreSQL).
    EnqueueRole,
    /// Ops' bodies and header values sealed (a key configured) vs in clear: the Rust enqueue
    /// from 1 and 16 producers, and a backlog (--backlog, default 50000) drained by the
    /// dispatcher, which opens each op.
    Encryption,
    /// Drain a backlog with the real dispatcher to a local 204 server vs the claim+complete
    /// SQL loop and vs the server's own request rate (with --instances: scale-out).
    Dispatch(DispatchArgs),
    /// The dispatcher over a grid of a destination's `max_in_flight` and `claim_batch`, against
    /// a destination answering at once and one answering after a delay, vs the defaults
    /// (--backlog: most ops per point, default 20000). Not part of `all`.
    Sweep(SweepArgs),
    /// The dispatcher side by side with graphile-worker 0.18 on Node 22 (installed with npm on
    /// first use): the same backlog (--backlog, default 50000) into the same sink, rounds
    /// interleaved; PostgreSQL only, not part of `all` (issue 36).
    Peer(PeerArgs),
    /// Enqueue-commit to destination-receipt latency at a fixed offered rate.
    Latency,
    /// Claim+complete cost per op at 10k vs 1M pending (and with 1M delivered rows kept).
    Backlog,
    /// Every scenario.
    All,
    /// (internal) The destination process: answers 204 to everything on --port.
    #[command(hide = true, name = "serve-204")]
    Serve204 {
        #[arg(long)]
        port: u16,
    },
    /// (internal) The destination of `dispatch --instances`: 204 after --delay-ms on --port,
    /// its peak concurrency and arrival times on GET /_bench/seen.
    #[command(hide = true, name = "serve-delay")]
    ServeDelay {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        delay_ms: u64,
    },
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    match args.scenario {
        Scenario::Serve204 { port } => return dispatch::serve_204(port).await,
        Scenario::ServeDelay { port, delay_ms } => {
            return destination::serve_delay(port, delay_ms).await;
        }
        _ => {}
    }
    let runs = if args.quick { 1 } else { args.runs.max(1) };
    // Checked before a cluster starts.
    let (pairings, batch_delay) = match &args.scenario {
        Scenario::Peer(p) => (
            peer::Pairing::zip(&p.in_flight, &p.concurrency)?,
            p.complete_batch_delay,
        ),
        _ => (Vec::new(), None),
    };
    // SQL Server first, so a missing --mssql-url is reported before a cluster starts.
    let mssql = match args.backend {
        Which::Mssql | Which::All => Some(Target::mssql(args.mssql_url.as_deref()).await?),
        _ => None,
    };
    let mut targets = Vec::new();
    if matches!(args.backend, Which::Sqlite | Which::Both | Which::All) {
        targets.push(Target::Sqlite);
    }
    if matches!(args.backend, Which::Postgres | Which::Both | Which::All) {
        targets.push(Target::postgres(args.database_url.as_deref())?);
    }
    targets.extend(mssql);
    let all = matches!(args.scenario, Scenario::All);
    // `dispatch --instances`, and in `all` a small form when quick (1 and 2 instances).
    let scale_out = match &args.scenario {
        Scenario::Dispatch(DispatchArgs { instances }) => instances.clone(),
        _ if all => Some(if args.quick {
            vec![1, 2]
        } else {
            vec![1, 2, 3]
        }),
        _ => None,
    }
    .map(|counts| instances::Plan::new(counts, args.backlog, args.quick));
    let plain_dispatch = all
        || matches!(
            args.scenario,
            Scenario::Dispatch(DispatchArgs { instances: None })
        );
    let (mut rows, mut findings, mut tables) = (Vec::new(), Vec::new(), Vec::new());
    for target in &targets {
        if all || matches!(args.scenario, Scenario::Enqueue) {
            rows.extend(enqueue::enqueue(target, runs, args.quick).await?);
        }
        if all || matches!(args.scenario, Scenario::EnqueueBatch) {
            rows.extend(enqueue::enqueue_batch(target, runs, args.quick).await?);
        }
        if all || matches!(args.scenario, Scenario::EnqueueSql) {
            rows.extend(enqueue_sql::enqueue_sql(target, runs, args.quick).await?);
        }
        if all || matches!(args.scenario, Scenario::EnqueueRole) {
            rows.extend(enqueue_role::enqueue_role(target, runs, args.quick).await?);
        }
        if all || matches!(args.scenario, Scenario::Encryption) {
            rows.extend(encryption::encryption(target, runs, args.quick, args.backlog).await?);
        }
        if plain_dispatch {
            let backlog = args
                .backlog
                .unwrap_or(if args.quick { 500 } else { 200_000 });
            rows.extend(dispatch::dispatch(target, runs, backlog).await?);
        }
        if let Some(plan) = &scale_out {
            let (r, f) = instances::instances(target, runs, plan).await?;
            rows.extend(r);
            findings.extend(f);
        }
        if let Scenario::Sweep(sweep) = &args.scenario {
            let grid = sweep::Grid {
                delays_ms: sweep.delays_ms.clone(),
                in_flight: sweep.in_flight.clone(),
                claim_batches: sweep.claim_batches.clone(),
                backlog: args
                    .backlog
                    .unwrap_or(if args.quick { 2_000 } else { 20_000 }),
            };
            rows.extend(sweep::sweep(target, runs, &grid).await?);
        }
        if !pairings.is_empty() {
            let backlog = args
                .backlog
                .unwrap_or(if args.quick { 2_000 } else { 50_000 });
            let (r, table) = peer::peer(target, runs, backlog, &pairings, batch_delay).await?;
            rows.extend(r);
            tables.push(table);
        }
        if all || matches!(args.scenario, Scenario::Latency) {
            rows.extend(dispatch::latency(target, runs, args.quick).await?);
        }
        if all || matches!(args.scenario, Scenario::Backlog) {
            rows.extend(dispatch::backlog(target, runs, args.quick).await?);
        }
    }
    println!("{}", report::table(&rows));
    for f in &findings {
        println!("{}", f.line);
    }
    for t in tables.iter().filter(|t| !t.is_empty()) {
        println!("{t}");
    }
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&rows)?)?;
    }
    let exceeded = findings.iter().filter(|f| f.exceeded).count();
    anyhow::ensure!(
        exceeded == 0,
        "{exceeded} destination limit(s) exceeded across dispatcher instances (LIMIT EXCEEDED above)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::{Args, DispatchArgs, PeerArgs, Scenario};

    fn instances(argv: &[&str]) -> Result<Option<Vec<u32>>, clap::Error> {
        let args = Args::try_parse_from([&["outbox-bench", "dispatch"], argv].concat())?;
        match args.scenario {
            Scenario::Dispatch(DispatchArgs { instances }) => Ok(instances),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn instances_is_a_list_and_alone_means_one_two_three() {
        assert_eq!(instances(&[]).unwrap(), None);
        assert_eq!(instances(&["--instances"]).unwrap(), Some(vec![1, 2, 3]));
        assert_eq!(
            instances(&["--instances", "--quick"]).unwrap(),
            Some(vec![1, 2, 3])
        );
        assert_eq!(
            instances(&["--instances", "1,2"]).unwrap(),
            Some(vec![1, 2])
        );
        assert_eq!(instances(&["--instances=3"]).unwrap(), Some(vec![3]));
        for bad in ["0", "9", "1,x"] {
            assert!(instances(&["--instances", bad]).is_err(), "{bad}");
        }
    }

    fn peer(argv: &[&str]) -> Result<(Vec<u32>, Vec<u32>), clap::Error> {
        let args = Args::try_parse_from([&["outbox-bench", "peer"], argv].concat())?;
        match args.scenario {
            Scenario::Peer(PeerArgs {
                in_flight,
                concurrency,
                ..
            }) => Ok((in_flight, concurrency)),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn peer_batches_graphile_workers_completions_only_when_told() {
        let delay = |argv: &[&str]| {
            let args = Args::try_parse_from([&["outbox-bench", "peer"], argv].concat())?;
            match args.scenario {
                Scenario::Peer(p) => Ok(p.complete_batch_delay),
                other => panic!("parsed as {other:?}"),
            }
        };
        assert_eq!(delay(&[]).unwrap(), None);
        assert_eq!(delay(&["--complete-batch-delay", "0"]).unwrap(), Some(0));
        assert_eq!(delay(&["--complete-batch-delay", "5"]).unwrap(), Some(5));
        for bad in ["-1", "1001", "x"] {
            let parsed: Result<Option<u32>, clap::Error> = delay(&["--complete-batch-delay", bad]);
            assert!(parsed.is_err(), "{bad}");
        }
    }

    #[test]
    fn peer_pairs_the_defaults_with_64_and_256_with_256_unless_told() {
        assert_eq!(peer(&[]).unwrap(), (vec![32, 256], vec![64, 256]));
        assert_eq!(
            peer(&["--in-flight", "32", "--concurrency", "64", "--runs", "2"]).unwrap(),
            (vec![32], vec![64])
        );
        for bad in [
            ["--in-flight", "0"],
            ["--in-flight", "257"],
            ["--concurrency", "385"],
        ] {
            assert!(peer(&bad).is_err(), "{bad:?}");
        }
    }
}
