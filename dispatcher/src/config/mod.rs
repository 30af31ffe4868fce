//! Configuration in two stages: the TOML layers (embedded defaults, the user's file, `OUTBOX_*`
//! environment overrides, `${NAME}` interpolation) make a [`RawConfig`] (`raw`), and
//! [`Config::try_from`] validates it into the typed values below (`validate`, `[telemetry]` in
//! `telemetry`, the value parsers both use in `parse`). The loader takes the file text and an
//! environment map, so tests never touch the process environment.

mod console;
mod encryption;
mod logins;
mod parse;
mod raw;
mod redact;
mod telemetry;
mod validate;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use http::HeaderName;
use outbox_store::TtlBounds;
use url::Url;

use crate::signing::SigningKey;

pub use raw::RawConfig;

/// The embedded first layer: every key with its default, documented.
pub const DEFAULT_TOML: &str = include_str!("../../config.default.toml");

/// A configuration that could not be loaded, with the key it concerns. Never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config: {0}")]
pub struct ConfigError(String);

fn err(key: &str, reason: impl fmt::Display) -> ConfigError {
    ConfigError(format!("{key}: {reason}"))
}

/// A value that must not be printed: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Database URL (may hold a password).
    pub database_url: Secret,
    /// A direct URL to the same PostgreSQL database for LISTEN, when `database_url` goes
    /// through a connection pooler in transaction mode (may hold a password).
    pub database_listen_url: Option<Secret>,
    /// Apply migrations at start-up.
    pub migrate: bool,
    /// Most pooled database connections.
    pub max_connections: u32,
    /// The lease durations the store accepts.
    pub lease_bounds: TtlBounds,
    /// The dispatcher's own settings.
    pub dispatcher: DispatcherConfig,
    /// The destinations by name.
    pub destinations: BTreeMap<String, Destination>,
    /// The web console on the dispatcher's listener.
    pub console: ConsoleConfig,
    /// Traces: `None` while off (no `telemetry.otlp_endpoint` and `OTEL_TRACES_EXPORTER` is
    /// not `otlp`, or it is `none`).
    pub telemetry: Option<TelemetryConfig>,
    /// The keys sealed content is opened with (`[encryption] keys`); none by default.
    pub encryption: EncryptionConfig,
}

/// `[encryption]`: the keys, by id, that ops' bodies and header values may be sealed with.
/// The dispatcher only opens (right before sending); producers seal.
#[derive(Debug, Clone, Default)]
pub struct EncryptionConfig {
    /// The keys, read and checked at load.
    pub keys: outbox_seal::Keys,
    /// Where each came from, `(id, "file:/path" | "env:NAME")`: shown by `check-config`.
    pub sources: Vec<(String, String)>,
}

/// `[console]`: the web console under `/console/` on `dispatcher.listen`, and its logins
/// (also read by `outboxctl web --config`). Without users and without a trusted header it is
/// read-only and open, as it always was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Whether the listener serves it. Default: false. Needs `dispatcher.listen`.
    pub enabled: bool,
    /// How often its pages reload themselves; zero: never. Default: 10 s.
    pub refresh: Duration,
    /// The login the dispatcher's console pool connects as (its actions need the
    /// `outbox_operator` role's rights); `None` (default): `database.url`. A secret.
    pub database_url: Option<Secret>,
    /// Who signs in with a password. Default: nobody.
    pub users: Vec<ConsoleUser>,
    /// The header an authenticating proxy sets to the user's name; `None` (default): not
    /// trusted. Only behind a proxy that removes it from what clients send.
    pub trusted_header: Option<HeaderName>,
    /// Which names of the trusted header are operators; the others are viewers.
    pub trusted_operators: Vec<String>,
    /// The key sessions are signed with (32 bytes or more); `None`: a random key per process
    /// (sessions end at a restart), or not read (`Config::load_without_keys`).
    pub session_key: Option<Secret>,
    /// Where the key came from: `file:<path>` or `session_key` (the key, or
    /// `OUTBOX_CONSOLE_SESSION_KEY`); `None`: none configured.
    pub session_key_source: Option<String>,
    /// How long a session lasts after signing in. Default: 12 h.
    pub session_ttl: Duration,
    /// Whether the session cookie is `Secure` (HTTPS only). Default: false.
    pub secure_cookie: bool,
}

/// One `[[console.users]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleUser {
    /// The name they sign in with, and log as (`console:<name>`).
    pub name: String,
    /// The argon2 PHC string of their password (`outboxctl console hash-password`).
    pub password_hash: Secret,
    /// What they may do.
    pub role: ConsoleRole,
}

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleRole {
    /// Reads the pages.
    Viewer,
    /// Reads, replays, cancels, pauses and resumes (logged).
    Operator,
}

impl ConsoleRole {
    /// `viewer` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleRole::Viewer => "viewer",
            ConsoleRole::Operator => "operator",
        }
    }
}

/// `[telemetry]` with the `OTEL_*` variables applied: where and how spans are exported. See
/// `config.default.toml` for each key, and docs/observability.md for the spans themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The URL spans are POSTed to (OTLP/HTTP, protobuf), `/v1/traces` included. A secret: it
    /// may hold credentials in its userinfo or query.
    pub endpoint: Secret,
    /// The spans' `service.name`.
    pub service_name: String,
    /// Which traces are kept.
    pub sampler: Sampler,
    /// Most finished spans waiting for export; more are dropped and counted.
    pub queue_size: usize,
    /// How long one export may take, retries included; then its spans are dropped and counted.
    pub export_timeout: Duration,
}

/// Which traces are kept, by the names of `OTEL_TRACES_SAMPLER`. The parent-based ones keep
/// the producer's decision (its traceparent's sampled flag) and apply the rest to new traces
/// only (claims, completions, and attempts of ops without a trace context).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// This share of traces (0.0..=1.0), by trace id.
    TraceIdRatio(f64),
    /// The parent's decision; every new trace.
    ParentBasedAlwaysOn,
    /// The parent's decision; no new trace.
    ParentBasedAlwaysOff,
    /// The parent's decision; this share of new traces.
    ParentBasedTraceIdRatio(f64),
}

impl Sampler {
    /// Its `OTEL_TRACES_SAMPLER` name.
    pub fn name(self) -> &'static str {
        match self {
            Sampler::AlwaysOn => "always_on",
            Sampler::AlwaysOff => "always_off",
            Sampler::TraceIdRatio(_) => "traceidratio",
            Sampler::ParentBasedAlwaysOn => "parentbased_always_on",
            Sampler::ParentBasedAlwaysOff => "parentbased_always_off",
            Sampler::ParentBasedTraceIdRatio(_) => "parentbased_traceidratio",
        }
    }

    /// The ratio of the ratio samplers.
    pub fn ratio(self) -> Option<f64> {
        match self {
            Sampler::TraceIdRatio(r) | Sampler::ParentBasedTraceIdRatio(r) => Some(r),
            _ => None,
        }
    }
}

/// `[dispatcher]`: see `config.default.toml` for each key's meaning and default.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Number of partitions (1..=1024).
    pub partitions: u32,
    /// The partition lease's time to live.
    pub lease_ttl: Duration,
    /// Polling fallback when no notification arrives.
    pub poll_interval: Duration,
    /// Most attempts in flight over all destinations.
    pub max_in_flight: usize,
    /// Most ops claimed in one statement.
    pub claim_batch: u32,
    /// Most ops a partition's leader claims beyond what it can start at once, held in memory
    /// and started as slots free (0: a claim takes only what it can start).
    pub claim_ahead: u32,
    /// The largest op body sent; larger ops are dead, never loaded by the batch.
    pub max_body_bytes: usize,
    /// How long shutdown waits for attempts in flight.
    pub shutdown_grace: Duration,
    /// How long finished ops are kept.
    pub retention: Duration,
    /// How long after a delivered, cancelled or superseded op finished its body and header
    /// values are erased; `None`: kept until `retention` deletes the op.
    pub erase_after: Option<Duration>,
    /// Where /metrics, /healthz and /readyz listen; `None`: nowhere.
    pub listen: Option<SocketAddr>,
}

/// One `[destinations.<name>]`.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Its name, as producers give it.
    pub name: String,
    /// The base URL; an op's path is appended.
    pub base_url: Url,
    /// Whole-attempt timeout.
    pub timeout: Duration,
    /// Most attempts in flight to it, from all dispatcher processes together (each holds the
    /// part of the partitions it leads, `limits`).
    pub max_in_flight: usize,
    /// Requests allowed per period, if limited, from all dispatcher processes together.
    pub rate_limit: Option<(NonZeroU32, Duration)>,
    /// The proxy every request to it goes through, if any (never one from the environment).
    pub proxy: Option<Secret>,
    /// Headers added to every request; values are secrets.
    pub headers: Vec<(HeaderName, Secret)>,
    /// The header carrying the idempotency key.
    pub idempotency_header: HeaderName,
    /// Standard Webhooks signing key, if set.
    pub signing_key: Option<SigningKey>,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// The circuit breaker, `None` when it is off (`breaker = { enabled = false }`).
    pub breaker: Option<outbox_store::health::BreakerPolicy>,
}

/// How failed attempts are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff window.
    pub base: Duration,
    /// Largest delay, also the ceiling for `Retry-After`.
    pub cap: Duration,
    /// Attempts before the op is dead.
    pub max_attempts: u32,
    /// Age (since enqueue) after which the op is dead rather than retried.
    pub max_age: Duration,
    /// Statuses that are retried; other non-2xx statuses are permanent.
    pub retry_statuses: Vec<u16>,
}

/// The longest attempt timeout a partition lease of `ttl` allows: two thirds of it. A leader's
/// trusted window (see `partition`) always covers it after a renewal, so a destination's
/// `timeout` may not be longer.
pub fn longest_attempt(ttl: Duration) -> Duration {
    ttl * 2 / 3
}

impl Config {
    /// Loads the configuration: embedded defaults, then `file` (TOML text), then `OUTBOX_*`
    /// overrides and `${NAME}` interpolation from `env`.
    pub fn load(file: Option<&str>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
        Config::try_from(RawConfig::load(file, env)?)
    }

    /// [`Config::load`] without reading the keys of `[encryption]` (their ids and sources are
    /// checked, `encryption.keys` stays empty): for a tool that reads the file for its
    /// database, whose user need not be able to read the keys.
    pub fn load_without_keys(
        file: Option<&str>,
        env: &HashMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let mut raw = RawConfig::load(file, env)?;
        raw.read_keys = false;
        Config::try_from(raw)
    }

    /// The effective configuration as TOML, with every secret shown as `***`.
    pub fn redacted(&self) -> String {
        redact::config_toml(self)
    }
}

/// What the tests of several stages share.
#[cfg(test)]
mod fixtures {
    use std::collections::HashMap;

    pub(super) fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub(super) const FULL: &str = r#"
        [database]
        url = "postgres://outbox:${DB_PASSWORD}@db.internal/outbox"
        [dispatcher]
        partitions = 2
        [destinations.billing]
        base_url = "https://billing.example.com/api"
        timeout = "5s"
        max_in_flight = 8
        rate_limit = "100/s"
        headers = { Authorization = "Bearer ${BILLING_TOKEN}" }
        signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        retry = { base = "2s", max_attempts = 5 }
    "#;
}

#[cfg(test)]
mod tests {
    use super::fixtures::{FULL, env};
    use super::*;

    #[test]
    fn defaults_alone_make_a_valid_config() {
        let c = Config::load(None, &HashMap::new()).unwrap();
        assert_eq!(c.database_url.expose(), "sqlite://outbox.db");
        assert_eq!(c.dispatcher.lease_ttl, Duration::from_secs(15));
        assert_eq!(c.dispatcher.listen, Some("127.0.0.1:9187".parse().unwrap()));
        assert!(c.destinations.is_empty());
        assert_eq!(
            c.console,
            ConsoleConfig {
                enabled: false,
                refresh: Duration::from_secs(10),
                database_url: None,
                users: Vec::new(),
                trusted_header: None,
                trusted_operators: Vec::new(),
                session_key: None,
                session_key_source: None,
                session_ttl: Duration::from_secs(12 * 3600),
                secure_cookie: false,
            },
            "the console is off unless asked for, and read-only without logins"
        );
    }

    #[test]
    fn a_file_layers_over_the_defaults_and_secrets_come_from_the_environment() {
        let c = Config::load(
            Some(FULL),
            &env(&[("DB_PASSWORD", "pw1"), ("BILLING_TOKEN", "tok2")]),
        )
        .unwrap();
        assert_eq!(
            c.database_url.expose(),
            "postgres://outbox:pw1@db.internal/outbox"
        );
        assert_eq!(
            (c.dispatcher.partitions, c.dispatcher.max_in_flight),
            (2, 256)
        );
        let b = &c.destinations["billing"];
        assert_eq!(b.headers[0].1.expose(), "Bearer tok2");
        assert_eq!(
            (b.retry.base, b.retry.cap, b.retry.max_attempts),
            (Duration::from_secs(2), Duration::from_secs(3600), 5)
        );
        assert_eq!(
            b.rate_limit,
            Some((NonZeroU32::new(100).unwrap(), Duration::from_secs(1)))
        );
        assert_eq!(b.idempotency_header.as_str(), "idempotency-key");
    }
}
