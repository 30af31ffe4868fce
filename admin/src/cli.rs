//! The command line: global options and one subcommand per verb, with an example each.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Inspect and operate the fenced outbox.
#[derive(Debug, Parser)]
#[command(name = "outboxctl", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Database URL: postgres://…, sqlite://path (created when missing) or mssql://….
    #[arg(
        long,
        env = "OUTBOX_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub(crate) database_url: Option<String>,

    /// Print JSON for scripts (one object; one object per line for lists).
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// Shortest lease time to live accepted, e.g. 1s.
    #[arg(long, env = "OUTBOX_LEASE_MIN_TTL", global = true, value_parser = parse_duration, default_value = "5s")]
    pub(crate) lease_min_ttl: Duration,

    /// Longest lease time to live accepted, e.g. 10m.
    #[arg(long, env = "OUTBOX_LEASE_MAX_TTL", global = true, value_parser = parse_duration, default_value = "300s")]
    pub(crate) lease_max_ttl: Duration,

    /// Largest op body accepted by `enqueue`, in bytes.
    #[arg(long, env = "OUTBOX_MAX_BODY_BYTES", global = true, default_value_t = outbox_producer::DEFAULT_MAX_BODY_BYTES)]
    pub(crate) max_body_bytes: usize,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the outbox tables.
    ///
    /// Example: outboxctl migrate --database-url sqlite://outbox.db
    Migrate,
    /// Acquire, renew, release and list leases.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Record an op for delivery, fenced by a lease you hold (exit 3 when the lease is stale,
    /// expired or released; 5 when the key holds a different request).
    ///
    /// Example: outboxctl enqueue --resource statement:1842 --owner-id "$OWNER" --token "$TOKEN"
    ///   --destination statements --method POST --path /v1/statements
    ///   --body '{"account":1842}' --idempotency-key statement-1842-2026-07 --json
    Enqueue(Box<EnqueueArgs>),
}

/// Which lease: the values `outboxctl lease acquire` printed.
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    /// The resource the lease is on.
    #[arg(long)]
    pub(crate) resource: String,
    /// The owner id the acquisition returned.
    #[arg(long)]
    pub(crate) owner_id: String,
    /// The fencing token the acquisition returned.
    #[arg(long)]
    pub(crate) token: String,
}

#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
    /// The destination's name in the dispatcher's config (not a URL).
    #[arg(long)]
    pub(crate) destination: String,
    /// GET, POST, PUT, PATCH or DELETE.
    #[arg(long, default_value = "POST")]
    pub(crate) method: String,
    /// Path and query below the destination's base URL, starting with /.
    #[arg(long)]
    pub(crate) path: String,
    /// A header as 'Name: value'; repeat for more.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub(crate) headers: Vec<String>,
    /// The body as text.
    #[arg(long, conflicts_with = "body_file")]
    pub(crate) body: Option<String>,
    /// Read the body from a file ('-' for standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) body_file: Option<String>,
    /// The body's content type [default: application/json when the body is JSON, else
    /// application/octet-stream].
    #[arg(long)]
    pub(crate) content_type: Option<String>,
    /// Unique per destination; sent as Idempotency-Key on every attempt.
    #[arg(long)]
    pub(crate) idempotency_key: String,
    /// Deliver in order with other ops of this key [default: the resource].
    #[arg(long, conflicts_with = "unordered")]
    pub(crate) order_key: Option<String>,
    /// Deliver beside any other op, without ordering.
    #[arg(long)]
    pub(crate) unordered: bool,
    /// Delay the first attempt, e.g. 10s.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) not_before: Option<Duration>,
    /// Mark pending ops of older tokens for this resource and destination superseded.
    #[arg(long)]
    pub(crate) supersede_pending: bool,
    /// Deliver only while this token is the newest of its resource.
    #[arg(long)]
    pub(crate) expire_with_generation: bool,
    /// W3C traceparent to continue the caller's trace.
    #[arg(long)]
    pub(crate) traceparent: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// List every lease with its token, owner and expiry (database clock).
    ///
    /// Example: outboxctl lease list --database-url sqlite://outbox.db --json
    List,
    /// Acquire a lease if nobody holds it; prints resource, owner_id, token, expires_at
    /// (exit 6 when another owner holds it).
    ///
    /// Example: outboxctl lease acquire --resource statement:1842 --ttl 30s --json
    Acquire {
        /// The resource to lease.
        #[arg(long)]
        resource: String,
        /// How long the lease lasts unless renewed, e.g. 30s.
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Extend a lease you hold, keeping its token (exit 3 when it is lost or expired).
    ///
    /// Example: outboxctl lease renew --resource statement:1842 --owner-id "$OWNER" --token 7 --ttl 30s
    Renew {
        #[command(flatten)]
        lease: LeaseArgs,
        /// The new time to live from now, e.g. 30s.
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Release a lease you hold (exit 3 when this owner and token no longer hold it).
    ///
    /// Example: outboxctl lease release --resource statement:1842 --owner-id "$OWNER" --token 7
    Release {
        #[command(flatten)]
        lease: LeaseArgs,
    },
}

/// Durations as people write them: 500ms, 30s, 5m, 1h.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 30s or 5m: {e}"))
}
