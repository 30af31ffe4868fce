//! The seed's account-statement worker: acquire the statement's lease, keep it alive while
//! working, record the statement POST in the fenced outbox, release.
//!
//! If this worker is paused past its lease and another worker takes over, its enqueue is
//! refused as stale and its statement is never sent. Each step prints one JSON line.
//!
//! ```sh
//! cargo run -p outbox-producer --example statement_worker -- \
//!     --database-url sqlite://outbox.db --migrate --account 1842 --month 2026-07
//! ```
//!
//! With `--loop-for`, it keeps running jobs (the chaos suite runs six of these): each job takes
//! the next free account of `--accounts`, a lease of a TTL between `--ttl` and `--ttl-max`,
//! and records 1 to `--max-ops` statement parts, each under a fresh idempotency key, one by one
//! or (a third of the time) in one batch. Every op's enqueue attempt is printed with its
//! outcome, so a checker can tell what was accepted.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use outbox_producer::{Enqueued, Error, LeaseKeeper, Operation, Outbox, StoreOptions, TtlBounds};
use outbox_tests::Rng;
use serde_json::json;

/// Generates monthly account statements under a fenced lease.
#[derive(Debug, Parser)]
struct Args {
    /// postgres://… or sqlite://path.
    #[arg(long, env = "OUTBOX_DATABASE_URL")]
    database_url: String,
    /// Create or upgrade the outbox tables first.
    #[arg(long)]
    migrate: bool,
    /// The account whose statement to generate (one job).
    #[arg(long, default_value_t = 1842)]
    account: u32,
    /// The statement's month, YYYY-MM.
    #[arg(long, default_value = "2026-07")]
    month: String,
    /// Lease time to live (in loop mode, the shortest).
    #[arg(long, default_value = "5s", value_parser = humantime_duration)]
    ttl: Duration,
    /// Loop mode: the longest lease time to live (default: --ttl).
    #[arg(long, value_parser = humantime_duration)]
    ttl_max: Option<Duration>,
    /// How long generating the statement takes (in loop mode, at most, per part).
    #[arg(long, default_value = "1s", value_parser = humantime_duration)]
    work: Duration,
    /// Ignore the keeper's lost-lease signal while working, like non-cooperative code; the
    /// fenced enqueue still refuses the work if the lease was lost.
    #[arg(long)]
    uncooperative: bool,
    /// The destination (a name in the dispatcher's config).
    #[arg(long, default_value = "statements")]
    destination: String,
    /// Keep running jobs for this long, then exit 0; database errors are printed and the
    /// worker carries on.
    #[arg(long, value_parser = humantime_duration)]
    loop_for: Option<Duration>,
    /// Loop mode: accounts 1..=N are the resources.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    accounts: u32,
    /// Loop mode: most statement parts (ops) per job.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    max_ops: u32,
    /// Loop mode: this worker's name, part of every idempotency key.
    #[arg(long, default_value = "w")]
    name: String,
    /// Loop mode: seeds the choices of account, TTL, work time and op count.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 500ms or 5s: {e}"))
}

fn say(event: serde_json::Value) {
    println!("{event}");
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    let result = match args.loop_for {
        Some(period) => run_loop(&args, period).await,
        None => run_once(&args).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("statement_worker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(args: &Args) -> Result<Outbox, Error> {
    // Short leases for demos and tests: allow down to 1 s.
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(300))?,
        ..StoreOptions::default()
    };
    let outbox = Outbox::connect_with(&args.database_url, options).await?;
    if args.migrate {
        outbox.migrate().await?;
    }
    Ok(outbox)
}

/// One job: the statement of `account`, in `parts.len()` parts, each under its own
/// idempotency key, recorded one by one after its share of work, or all in one batch.
struct Job<'a> {
    args: &'a Args,
    account: u32,
    ttl: Duration,
    /// (idempotency key, work before recording it) per part.
    parts: Vec<(String, Duration)>,
    /// Record every part with one all-or-nothing `enqueue_batch`.
    batch: bool,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobEnd {
    /// Another owner holds the resource.
    Busy,
    /// Every part was accepted.
    Done,
    /// The keeper lost the lease, or an enqueue was refused: the rest was not recorded.
    Refused,
    /// An enqueue failed in the database: its outcome is unknown.
    Failed,
}

async fn run_job(outbox: &Outbox, job: &Job<'_>) -> Result<JobEnd, Error> {
    let args = job.args;
    let resource = format!("statement:account-{}:{}", job.account, args.month);
    let Some(lease) = outbox.try_acquire(&resource, job.ttl).await? else {
        say(json!({"event": "busy", "resource": resource}));
        return Ok(JobEnd::Busy);
    };
    say(
        json!({"event": "acquired", "resource": resource, "token": lease.token, "owner_id": lease.owner_id}),
    );
    let keeper = LeaseKeeper::start(outbox, lease, job.ttl);
    // Generate the statement; stop early if the keeper says the lease is gone.
    let lost = if args.uncooperative {
        tokio_util::sync::CancellationToken::new()
    } else {
        keeper.lost()
    };
    let groups: Vec<&[(String, Duration)]> = if job.batch {
        vec![&job.parts[..]]
    } else {
        job.parts.chunks(1).collect()
    };
    let mut end = JobEnd::Done;
    let mut part = 0;
    for group in groups {
        tokio::select! {
            () = tokio::time::sleep(group.iter().map(|(_, work)| *work).sum()) => {}
            () = lost.cancelled() => {
                say(json!({"event": "lost", "resource": resource, "token": keeper.lease().token}));
                end = JobEnd::Refused;
                break;
            }
        }
        let mut ops = Vec::with_capacity(group.len());
        for (key, _) in group {
            let statement = json!({
                "account": job.account, "month": args.month, "part": part, "by": args.name,
                "currency": "EUR", "closing_balance_cents": 125_000,
            });
            part += 1;
            ops.push(
                Operation::post(args.destination.as_str(), "/v1/statements")
                    .json(&statement)
                    .idempotency_key(key.as_str())
                    .build()?,
            );
        }
        // The fenced write: refused if a newer owner exists, whatever this process believes.
        let lease = keeper.lease();
        let result = match ops.as_slice() {
            [op] => outbox.enqueue(&lease, op).await.map(|done| vec![done]),
            ops => outbox.enqueue_batch(&lease, ops).await,
        };
        let (results, group_end) = outcomes(result, ops.len())?;
        for ((key, _), result) in group.iter().zip(results) {
            say(json!({
                "event": "enqueue", "resource": resource, "token": lease.token, "key": key,
                "batch": group.len() > 1, "result": result,
            }));
        }
        if group_end != JobEnd::Done {
            end = group_end;
            break;
        }
    }
    let token = keeper.lease().token;
    let released = keeper.release().await?;
    say(json!({"event": "released", "resource": resource, "token": token, "released": released}));
    Ok(end)
}

/// What an enqueue of `n` ops returned, one JSON result per op, and how the job goes on.
fn outcomes(
    result: Result<Vec<Enqueued>, Error>,
    n: usize,
) -> Result<(Vec<serde_json::Value>, JobEnd), Error> {
    let every = |result: serde_json::Value, end: JobEnd| Ok((vec![result; n], end));
    match result {
        Ok(done) => Ok((
            done.iter()
                .map(|d| {
                    if d.duplicate {
                        json!({"outcome": "duplicate", "op_id": d.op_id})
                    } else {
                        json!({"outcome": "accepted", "op_id": d.op_id, "seq": d.seq})
                    }
                })
                .collect(),
            JobEnd::Done,
        )),
        Err(Error::Stale { current_token }) => every(
            json!({"outcome": "stale", "current_token": current_token}),
            JobEnd::Refused,
        ),
        Err(Error::LeaseExpired) => every(json!({"outcome": "expired"}), JobEnd::Refused),
        Err(Error::NoLease) => every(json!({"outcome": "no_lease"}), JobEnd::Refused),
        // The commit may or may not have happened; a checker resolves it in the table.
        Err(Error::Store(e)) => every(
            json!({"outcome": "error", "error": e.to_string()}),
            JobEnd::Failed,
        ),
        Err(e) => Err(e),
    }
}

/// One statement for `--account`; exit 0 when recorded, 3 when refused, 6 when busy.
async fn run_once(args: &Args) -> Result<ExitCode, Error> {
    let outbox = connect(args).await?;
    let job = Job {
        args,
        account: args.account,
        ttl: args.ttl,
        parts: vec![(
            format!("statement-{}-{}", args.account, args.month),
            args.work,
        )],
        batch: false,
    };
    Ok(match run_job(&outbox, &job).await? {
        JobEnd::Done => ExitCode::SUCCESS,
        JobEnd::Refused => ExitCode::from(3),
        JobEnd::Failed => ExitCode::FAILURE,
        JobEnd::Busy => ExitCode::from(6),
    })
}

/// Jobs over accounts 1..=--accounts until `period` has passed.
async fn run_loop(args: &Args, period: Duration) -> Result<ExitCode, Error> {
    let outbox = connect(args).await?;
    let until = Instant::now() + period;
    let mut rng = Rng::new(args.seed);
    let mut account = 1 + pick(&mut rng, args.accounts);
    let ttl_max = args.ttl_max.unwrap_or(args.ttl).max(args.ttl);
    // Counts tries, busy ones included; with the name it makes every key fresh.
    let mut round = 0u64;
    while Instant::now() < until {
        // Leases are whole milliseconds.
        let spread = u64::try_from((ttl_max - args.ttl).as_millis()).unwrap_or(u64::MAX);
        let ttl = args.ttl + Duration::from_millis(rng.below(spread.saturating_add(1)));
        let parts: Vec<(String, Duration)> = (0..=pick(&mut rng, args.max_ops))
            .map(|part| {
                let key = format!(
                    "statement-{account}-{}-{}-{round}-{part}",
                    args.month, args.name
                );
                (key, args.work.mul_f64(0.5 + fraction(&mut rng) / 2.0))
            })
            .collect();
        // A third of the jobs with several parts record them in one batch.
        let batch = parts.len() > 1 && rng.chance(33);
        let job = Job {
            args,
            account,
            ttl,
            parts,
            batch,
        };
        match run_job(&outbox, &job).await {
            Ok(_) => {}
            Err(Error::Store(e)) => {
                say(json!({"event": "error", "account": account, "error": e.to_string()}));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
        round += 1;
        account = account % args.accounts + 1;
        tokio::time::sleep(Duration::from_millis(rng.below(50))).await;
    }
    say(json!({"event": "finished", "rounds": round}));
    Ok(ExitCode::SUCCESS)
}

/// A number in `0..n`.
fn pick(rng: &mut Rng, n: u32) -> u32 {
    u32::try_from(rng.below(u64::from(n))).expect("below n")
}

/// A number in `[0, 1)`.
fn fraction(rng: &mut Rng) -> f64 {
    (rng.below(1 << 20) as f64) / f64::from(1u32 << 20)
}
