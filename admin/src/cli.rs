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

    /// The dispatcher's config file: its database is used (with the same OUTBOX_* overrides
    /// and ${ENV} interpolation). --database-url wins when both are given.
    #[arg(long, env = "OUTBOX_CONFIG", global = true, value_name = "FILE")]
    pub(crate) config: Option<String>,

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

    /// A key ops' content is encrypted with, ID=file:/path or ID=env:NAME (repeat it, or list
    /// them comma-separated in OUTBOX_KEYS); with --config, the file's `[encryption]` keys too.
    /// `show --body` decrypts with them, `keys rotate` reads with them.
    #[arg(long = "encryption-key", env = "OUTBOX_KEYS", global = true, value_delimiter = ',', value_name = "ID=SOURCE", value_parser = parse_key_source)]
    pub(crate) keys: Vec<(String, String)>,

    /// The key `enqueue` encrypts the body and header values with (one of the keys).
    #[arg(long, env = "OUTBOX_ENCRYPT_WITH", global = true, value_name = "ID")]
    pub(crate) encrypt_with: Option<String>,
}

/// `ID=SOURCE`, the source checked by the key loader.
fn parse_key_source(text: &str) -> Result<(String, String), String> {
    let (id, source) = text
        .split_once('=')
        .ok_or_else(|| "expected ID=file:/path or ID=env:NAME".to_owned())?;
    Ok((id.trim().to_owned(), source.trim().to_owned()))
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
    /// Counts by state and destination, oldest pending age, ops due now, dead ops of the last
    /// 24 h, each partition's dispatcher lease and stale enqueues of the last hour.
    ///
    /// Example: outboxctl status --config /etc/outbox/dispatcher.toml
    Status,
    /// Ops newest first, filtered; page on with --after (the last SEQ shown).
    ///
    /// Example: outboxctl list --state dead --destination statements --since 2h --limit 20
    List(ListArgs),
    /// One op (by SEQ or op id, or by destination and key) with its attempt history.
    ///
    /// Example: outboxctl show 1842 --body    or    outboxctl show --destination statements
    ///   --key statement-1842-2026-07
    Show(ShowArgs),
    /// Move dead or cancelled ops back to pending, due now, with a fresh retry budget, their
    /// history and idempotency key kept. Refuses delivered ops and ops of superseded tokens
    /// unless --force, and in-flight ops always. Logged with who and why.
    ///
    /// Example: outboxctl replay --state dead --destination statements --since 1h
    ///   --reason "statement API outage INC-311 is over" --dry-run
    Replay(ChangeArgs),
    /// Cancel pending or dead ops: they are never sent afterwards. Logged with who and why.
    ///
    /// Example: outboxctl cancel 1842 1843 --reason "customer closed the account"
    Cancel(ChangeArgs),
    /// Delete finished ops (and their attempts) older than a cut-off, in batches.
    ///
    /// Example: outboxctl purge --older-than 7d --state delivered --state cancelled --dry-run
    Purge(PurgeArgs),
    /// The partition count in force (who set it, when and why) and the dispatchers and
    /// partition leases by the count they serve; or change it.
    ///
    /// Example: outboxctl partitions set 16 --reason "three dispatcher hosts from today"
    #[command(subcommand)]
    Partitions(PartitionsCommand),
    /// Destinations' health: the circuit breaker's state, failures, last error, next probe and
    /// pending ops; or pause and resume one. A paused destination's ops stay pending and it is
    /// never probed until resumed. Logged with who and why.
    ///
    /// Example: outboxctl destination pause billing --reason "vendor maintenance until 14:00"
    #[command(subcommand)]
    Destination(DestinationCommand),
    /// Enqueues refused because the owner's lease was stale, expired or gone.
    ///
    /// Example: outboxctl rejections --since 1h --resource statement:1842
    Rejections(RejectionArgs),
    /// Serve the web console until Ctrl-C or SIGTERM: counts by state and destination,
    /// oldest pending, dead ops with their last error, each op's attempts (never its body or
    /// its header values), recent rejections, partitions with their leaders and the dispatcher
    /// instances. Without logins it changes nothing (replay and cancel stay in outboxctl,
    /// logged) and has NO AUTHENTICATION: anyone who reaches the address reads every op's
    /// resource, path, key and errors, so keep it on loopback or behind a proxy of your own.
    /// With --config, the destinations table says which destinations the dispatcher lacks, and
    /// the file's `[console]` users or trusted_header turn logins on: every page then needs a
    /// viewer or an operator, and operators may replay, cancel, pause and resume (logged as
    /// `console:NAME`, over this command's own database login).
    ///
    /// Example: outboxctl web --config /etc/outbox/dispatcher.toml --listen 127.0.0.1:8080
    Web(WebArgs),
    /// The web console's logins: make the password hash of a [[console.users]] entry.
    #[command(subcommand)]
    Console(ConsoleCommand),
    /// Follow attempts as they are recorded, one line each, until Ctrl-C.
    ///
    /// Example: outboxctl tail --config /etc/outbox/dispatcher.toml
    Tail(TailArgs),
    /// Encryption keys: move the ops' encrypted content to another key, in batches, while
    /// dispatchers keep running (give them both keys first).
    ///
    /// Example: outboxctl keys rotate --to k2027 --encryption-key k2026=file:/etc/outbox/k2026.key
    ///   --encryption-key k2027=file:/etc/outbox/k2027.key --reason "yearly rotation"
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print a shell completion script.
    ///
    /// Example: outboxctl completions bash > /etc/bash_completion.d/outboxctl
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// Which ops: the filters `list` takes, also used by `replay` and `cancel`.
#[derive(Debug, Args, Default)]
pub(crate) struct FilterArgs {
    /// Only ops in this state (pending, in_flight, delivered, dead, cancelled, superseded);
    /// repeat for more.
    #[arg(long = "state", value_name = "STATE")]
    pub(crate) states: Vec<String>,
    /// Only ops for this destination.
    #[arg(long)]
    pub(crate) destination: Option<String>,
    /// Only ops of this resource.
    #[arg(long)]
    pub(crate) resource: Option<String>,
    /// Only ops with this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only ops enqueued within this long (e.g. 2h) or since this RFC 3339 time.
    #[arg(long, value_name = "AGE|TIME")]
    pub(crate) since: Option<String>,
    /// Only ops enqueued before this RFC 3339 time (or this long ago, e.g. 1d).
    #[arg(long, value_name = "AGE|TIME")]
    pub(crate) before: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Show ops older than this SEQ (the last one of the previous page).
    #[arg(long, value_name = "SEQ")]
    pub(crate) after: Option<i64>,
    /// How many at most.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The op's SEQ or op id (UUID).
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub(crate) op: Option<String>,
    /// With --key: the op's destination.
    #[arg(long, requires = "key")]
    pub(crate) destination: Option<String>,
    /// The op's idempotency key (with --destination).
    #[arg(long, requires = "destination")]
    pub(crate) key: Option<String>,
    /// Print the content too: the header values and the body (a role that may read them:
    /// not outbox_viewer). Without it only the header names and the body's size are shown.
    #[arg(long)]
    pub(crate) body: bool,
}

/// Who makes a logged change and why, and whether only to show it.
#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// Why (required): recorded in outbox_admin_log.
    #[arg(long)]
    pub(crate) reason: String,
    /// Who: recorded in outbox_admin_log [default: $USER].
    #[arg(long, env = "USER", hide_env_values = true)]
    pub(crate) actor: Option<String>,
    /// Show what would change, change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

impl LogArgs {
    /// The change as the store records it; `force` only for replay.
    pub(crate) fn change(&self, force: bool) -> outbox_store::admin::Change {
        outbox_store::admin::Change {
            actor: self.actor.clone().unwrap_or_else(|| "unknown".to_owned()),
            reason: self.reason.clone(),
            force,
            dry_run: self.dry_run,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ChangeArgs {
    /// The ops, by SEQ or op id. Or select them with the filters below.
    pub(crate) ops: Vec<String>,
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
    /// replay only: also delivered ops and ops of superseded tokens.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `outboxctl keys …`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Re-encrypt every op's content sealed with another key under --to, a batch of requests
    /// per transaction, each written only if unchanged since read (an erase or purge meanwhile
    /// wins). Needs every key the content names, and --to. Logged with who and why.
    ///
    /// Example: outboxctl keys rotate --to k2027 --reason "yearly rotation" --dry-run
    Rotate(RotateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    /// The key to move the content to (one of the keys).
    #[arg(long, value_name = "ID")]
    pub(crate) to: String,
    /// Also encrypt content stored in clear (by producers without a key).
    #[arg(long)]
    pub(crate) include_clear: bool,
    /// Requests read and written per transaction (1..=5000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub(crate) batch: u32,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

/// `outboxctl console …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ConsoleCommand {
    /// Read a password from standard input (never from the command line: the process list
    /// and shell history would show it) and print its argon2id hash, a PHC string for
    /// `password_hash` in [[console.users]]. One trailing newline is not part of it. Needs no
    /// database.
    ///
    /// Example: outboxctl console hash-password < password.txt
    HashPassword,
}

/// `outboxctl partitions …`.
#[derive(Debug, Subcommand)]
pub(crate) enum PartitionsCommand {
    /// The partition count in force, and the live dispatchers and held partition leases by
    /// the count they serve.
    ///
    /// Example: outboxctl partitions show
    Show,
    /// Change the partition count in force. Running dispatchers step down (no new claims,
    /// attempts finish, leases released) and serve the new count once no partition lease of
    /// the old one is live; ops keep their slots. Logged with who and why. Set the new count in
    /// every dispatcher's config too: one started with another count refuses to serve.
    ///
    /// Example: outboxctl partitions set 16 --reason "three dispatcher hosts from today"
    Set(PartitionsSetArgs),
}

/// `outboxctl destination …`.
#[derive(Debug, Subcommand)]
pub(crate) enum DestinationCommand {
    /// Every destination with a breaker row or ops: state (closed, open, half_open, paused),
    /// consecutive failures, last error, when it opened, the next probe, and its ops by state.
    ///
    /// Example: outboxctl destination list --json
    List,
    /// Pause a destination: its ops are not claimed (they stay pending, their max_age does not
    /// run) and it is never probed, on every dispatcher, until resumed.
    ///
    /// Example: outboxctl destination pause billing --reason "vendor maintenance (CHG-12)"
    Pause(DestinationChangeArgs),
    /// Resume a paused destination, or close an open breaker without waiting for its probe:
    /// closed again, its failures forgotten; its ops are claimed at the dispatchers' next poll.
    ///
    /// Example: outboxctl destination resume billing --reason "vendor confirmed the fix"
    Resume(DestinationChangeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DestinationChangeArgs {
    /// The destination's name, as producers give it.
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PartitionsSetArgs {
    /// The new count, 1..=1024.
    pub(crate) count: u32,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Delete ops that finished longer ago than this, e.g. 7d.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) older_than: Duration,
    /// delivered, dead, cancelled or superseded; repeat for more [default: delivered,
    /// cancelled, superseded].
    #[arg(long = "state", value_name = "STATE")]
    pub(crate) states: Vec<String>,
    /// Why: recorded in outbox_admin_log [default: "retention"].
    #[arg(long, default_value = "retention")]
    pub(crate) reason: String,
    /// Who: recorded in outbox_admin_log [default: $USER].
    #[arg(long, env = "USER", hide_env_values = true)]
    pub(crate) actor: Option<String>,
    /// Count what would be deleted, delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RejectionArgs {
    /// How far back, e.g. 1h.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub(crate) since: Duration,
    /// Only this resource.
    #[arg(long)]
    pub(crate) resource: Option<String>,
    /// How many at most.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct WebArgs {
    /// Where to listen, IP:PORT (port 0 picks a free one; the address is printed on stderr).
    /// Any address but loopback lets other hosts reach the console, which has no
    /// authentication unless --config's `[console]` configures logins.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "IP:PORT")]
    pub(crate) listen: std::net::SocketAddr,
    /// How often the pages reload themselves, 1s..=1h, or 0s for never. Each reload of the
    /// overview counts the ops table by state and destination, as `status` does.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub(crate) refresh: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct TailArgs {
    /// How often to look for new attempts.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    pub(crate) interval: Duration,
    /// Start with every recorded attempt instead of only new ones.
    #[arg(long)]
    pub(crate) from_start: bool,
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
    /// W3C tracestate sent on with the traceparent (needs --traceparent).
    #[arg(long, requires = "traceparent")]
    pub(crate) tracestate: Option<String>,
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
