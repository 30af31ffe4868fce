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

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use outbox_producer::{Error, LeaseKeeper, Operation, Outbox, StoreOptions, TtlBounds};
use serde_json::json;

/// Generates one monthly account statement under a fenced lease.
#[derive(Debug, Parser)]
struct Args {
    /// postgres://… or sqlite://path.
    #[arg(long, env = "OUTBOX_DATABASE_URL")]
    database_url: String,
    /// Create or upgrade the outbox tables first.
    #[arg(long)]
    migrate: bool,
    /// The account whose statement to generate.
    #[arg(long, default_value_t = 1842)]
    account: u32,
    /// The statement's month, YYYY-MM.
    #[arg(long, default_value = "2026-07")]
    month: String,
    /// Lease time to live.
    #[arg(long, default_value = "5s", value_parser = humantime_duration)]
    ttl: Duration,
    /// How long generating the statement takes.
    #[arg(long, default_value = "1s", value_parser = humantime_duration)]
    work: Duration,
    /// Ignore the keeper's lost-lease signal while working, like non-cooperative code; the
    /// fenced enqueue still refuses the work if the lease was lost.
    #[arg(long)]
    uncooperative: bool,
    /// The destination (a name in the dispatcher's config).
    #[arg(long, default_value = "statements")]
    destination: String,
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
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("statement_worker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode, Error> {
    // Short leases for demos and tests: allow down to 1 s.
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(300))?,
        ..StoreOptions::default()
    };
    let outbox = Outbox::connect_with(&args.database_url, options).await?;
    if args.migrate {
        outbox.migrate().await?;
    }
    let resource = format!("statement:account-{}:{}", args.account, args.month);
    let Some(lease) = outbox.try_acquire(&resource, args.ttl).await? else {
        say(json!({"event": "busy", "resource": resource}));
        return Ok(ExitCode::from(6));
    };
    say(
        json!({"event": "acquired", "resource": resource, "token": lease.token, "owner_id": lease.owner_id}),
    );
    let keeper = LeaseKeeper::start(&outbox, lease, args.ttl);

    // Generate the statement; stop early if the keeper says the lease is gone.
    let lost = if args.uncooperative {
        tokio_util::sync::CancellationToken::new()
    } else {
        keeper.lost()
    };
    tokio::select! {
        () = tokio::time::sleep(args.work) => {}
        () = lost.cancelled() => {
            say(json!({"event": "lost", "resource": resource, "token": keeper.lease().token}));
            return Ok(ExitCode::from(3));
        }
    }
    let statement = json!({"account": args.account, "month": args.month, "currency": "EUR", "closing_balance_cents": 125_000});

    // The fenced write: refused if a newer owner exists, whatever this process believes.
    let key = format!("statement-{}-{}", args.account, args.month);
    let op = Operation::post(args.destination.as_str(), "/v1/statements")
        .json(&statement)
        .idempotency_key(key.as_str())
        .build()?;
    let lease = keeper.lease();
    let (result, code) = match outbox.enqueue(&lease, &op).await {
        Ok(done) if done.duplicate => (json!({"outcome": "duplicate", "op_id": done.op_id}), 0),
        Ok(done) => (
            json!({"outcome": "accepted", "op_id": done.op_id, "seq": done.seq}),
            0,
        ),
        Err(Error::Stale { current_token }) => (
            json!({"outcome": "stale", "current_token": current_token}),
            3,
        ),
        Err(Error::LeaseExpired) => (json!({"outcome": "expired"}), 3),
        Err(Error::NoLease) => (json!({"outcome": "no_lease"}), 3),
        Err(e) => return Err(e),
    };
    say(
        json!({"event": "enqueue", "resource": resource, "token": lease.token, "key": key, "result": result}),
    );
    let released = keeper.release().await?;
    say(
        json!({"event": "released", "resource": resource, "token": lease.token, "released": released}),
    );
    Ok(ExitCode::from(code))
}
