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
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the outbox tables.
    ///
    /// Example: outboxctl migrate --database-url sqlite://outbox.db
    Migrate,
    /// Inspect leases.
    #[command(subcommand)]
    Lease(LeaseCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// List every lease with its token, owner and expiry (database clock).
    ///
    /// Example: outboxctl lease list --database-url sqlite://outbox.db --json
    List,
}

/// Durations as people write them: 500ms, 30s, 5m, 1h.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 30s or 5m: {e}"))
}
