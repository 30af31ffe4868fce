//! Configuration in two stages: the TOML layers (embedded defaults, the user's file, `OUTBOX_*`
//! environment overrides, `${NAME}` interpolation) make a [`RawConfig`], and
//! [`Config::try_from`] validates it into typed values. The loader takes the file text and an
//! environment map, so tests never touch the process environment.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use outbox_store::{DestinationName, TtlBounds};
use reqwest::Url;
use reqwest::header::HeaderName;
use serde::Deserialize;

use crate::signing::SigningKey;

/// The embedded first layer: every key with its default, documented.
pub const DEFAULT_TOML: &str = include_str!("../config.default.toml");

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

/// The configuration as written, after layering and interpolation; nothing checked yet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    database: RawDatabase,
    lease: RawLease,
    dispatcher: RawDispatcher,
    #[serde(default)]
    destinations: BTreeMap<String, RawDestination>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: String,
    migrate: bool,
    max_connections: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLease {
    min_ttl: String,
    max_ttl: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDispatcher {
    partitions: u32,
    lease_ttl: String,
    poll_interval: String,
    max_in_flight: usize,
    claim_batch: u32,
    shutdown_grace: String,
    retention: String,
    listen: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDestination {
    base_url: String,
    #[serde(default = "defaults::timeout")]
    timeout: String,
    #[serde(default = "defaults::max_in_flight")]
    max_in_flight: usize,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default = "defaults::idempotency_header")]
    idempotency_header: String,
    #[serde(default)]
    signing_secret: Option<String>,
    #[serde(default)]
    retry: RawRetry,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    base: String,
    cap: String,
    max_attempts: u32,
    max_age: String,
    retry_statuses: Vec<u16>,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            base: "1s".into(),
            cap: "1h".into(),
            max_attempts: 20,
            max_age: "3d".into(),
            retry_statuses: vec![408, 409, 425, 429, 500, 502, 503, 504],
        }
    }
}

/// Destination defaults, as documented in `config.default.toml`.
mod defaults {
    pub(super) fn timeout() -> String {
        "10s".into()
    }
    pub(super) fn max_in_flight() -> usize {
        32
    }
    pub(super) fn idempotency_header() -> String {
        "Idempotency-Key".into()
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Database URL (may hold a password).
    pub database_url: Secret,
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
    /// How long shutdown waits for attempts in flight.
    pub shutdown_grace: Duration,
    /// How long finished ops are kept.
    pub retention: Duration,
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
    /// Most attempts in flight to it.
    pub max_in_flight: usize,
    /// Requests allowed per period, if limited.
    pub rate_limit: Option<(NonZeroU32, Duration)>,
    /// Headers added to every request; values are secrets.
    pub headers: Vec<(HeaderName, Secret)>,
    /// The header carrying the idempotency key.
    pub idempotency_header: HeaderName,
    /// Standard Webhooks signing key, if set.
    pub signing_key: Option<SigningKey>,
    /// Retry policy.
    pub retry: RetryPolicy,
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

/// Headers the dispatcher sets itself, which a destination's `headers` may not replace.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "content-type",
    "x-fencing-token",
    "traceparent",
    "tracestate",
];

impl Config {
    /// Loads the configuration: embedded defaults, then `file` (TOML text), then `OUTBOX_*`
    /// overrides and `${NAME}` interpolation from `env`.
    pub fn load(file: Option<&str>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
        Config::try_from(RawConfig::load(file, env)?)
    }

    /// The effective configuration as TOML, with every secret shown as `***`.
    pub fn redacted(&self) -> String {
        let mut out = String::new();
        let url = redact_url(self.database_url.expose());
        let d = &self.dispatcher;
        let h = |d: Duration| humantime::format_duration(d).to_string();
        out += &format!(
            "[database]\nurl = {url:?}\nmigrate = {}\nmax_connections = {}\n\n[lease]\nmin_ttl = {:?}\nmax_ttl = {:?}\n\n",
            self.migrate,
            self.max_connections,
            h(self.lease_bounds.min()),
            h(self.lease_bounds.max())
        );
        out += &format!(
            "[dispatcher]\npartitions = {}\nlease_ttl = {:?}\npoll_interval = {:?}\nmax_in_flight = {}\nclaim_batch = {}\nshutdown_grace = {:?}\nretention = {:?}\nlisten = {:?}\n",
            d.partitions,
            h(d.lease_ttl),
            h(d.poll_interval),
            d.max_in_flight,
            d.claim_batch,
            h(d.shutdown_grace),
            h(d.retention),
            d.listen.map(|a| a.to_string()).unwrap_or_default()
        );
        for dest in self.destinations.values() {
            let headers: Vec<String> = dest
                .headers
                .iter()
                .map(|(n, _)| format!("{:?} = \"***\"", n.as_str()))
                .collect();
            let r = &dest.retry;
            out += &format!(
                "\n[destinations.{}]\nbase_url = {:?}\ntimeout = {:?}\nmax_in_flight = {}\n{}headers = {{ {} }}\nidempotency_header = {:?}\n{}retry = {{ base = {:?}, cap = {:?}, max_attempts = {}, max_age = {:?}, retry_statuses = {:?} }}\n",
                dest.name,
                redact_url(dest.base_url.as_str()),
                h(dest.timeout),
                dest.max_in_flight,
                dest.rate_limit
                    .map(|(n, per)| format!(
                        "rate_limit = \"{n}/{}\"\n",
                        if per.as_secs() == 60 { "m" } else { "s" }
                    ))
                    .unwrap_or_default(),
                headers.join(", "),
                dest.idempotency_header.as_str(),
                if dest.signing_key.is_some() {
                    "signing_secret = \"***\"\n"
                } else {
                    ""
                },
                h(r.base),
                h(r.cap),
                r.max_attempts,
                h(r.max_age),
                r.retry_statuses
            );
        }
        out
    }
}

/// A URL with its password, if any, replaced by `***`.
fn redact_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

impl RawConfig {
    /// Layers the TOML texts and the environment, then deserializes.
    pub fn load(
        file: Option<&str>,
        env: &HashMap<String, String>,
    ) -> Result<RawConfig, ConfigError> {
        let mut table: toml::Table = DEFAULT_TOML.parse().map_err(|e| err("default config", e))?;
        if let Some(text) = file {
            let user: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError(format!("file: {e}")))?;
            merge(&mut table, user);
        }
        apply_env(&mut table, env);
        interpolate_table(&mut table, env, "")?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(e.message().to_owned()))
    }
}

/// Deep-merges `over` into `base`: tables merge, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// `OUTBOX_DATABASE_URL` → `database.url`, `OUTBOX_DISPATCHER_LISTEN` → `dispatcher.listen`,
/// `OUTBOX_LEASE_MIN_TTL` → `lease.min_ttl`. Numbers and booleans keep their type.
fn apply_env(table: &mut toml::Table, env: &HashMap<String, String>) {
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("OUTBOX_") else {
            continue;
        };
        let Some((section, key)) = ["DATABASE", "DISPATCHER", "LEASE"].iter().find_map(|s| {
            rest.strip_prefix(s)
                .and_then(|k| k.strip_prefix('_'))
                .map(|k| (s.to_ascii_lowercase(), k.to_ascii_lowercase()))
        }) else {
            continue;
        };
        let typed = match value.parse::<i64>() {
            Ok(n) => toml::Value::Integer(n),
            Err(_) => match value.as_str() {
                "true" => toml::Value::Boolean(true),
                "false" => toml::Value::Boolean(false),
                _ => toml::Value::String(value.clone()),
            },
        };
        if let Some(toml::Value::Table(t)) = table.get_mut(&section) {
            t.insert(key, typed);
        }
    }
}

fn interpolate_table(
    table: &mut toml::Table,
    env: &HashMap<String, String>,
    path: &str,
) -> Result<(), ConfigError> {
    for (key, value) in table.iter_mut() {
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        interpolate_value(value, env, &here)?;
    }
    Ok(())
}

fn interpolate_value(
    value: &mut toml::Value,
    env: &HashMap<String, String>,
    path: &str,
) -> Result<(), ConfigError> {
    match value {
        toml::Value::String(s) => *s = interpolate(s, env, path)?,
        toml::Value::Table(t) => interpolate_table(t, env, path)?,
        toml::Value::Array(items) => {
            for item in items {
                interpolate_value(item, env, path)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Replaces `${NAME}` with `env[NAME]`; `$${` is a literal `${`. A missing variable is an
/// error naming it and the key, never its (absent) value.
fn interpolate(
    text: &str,
    env: &HashMap<String, String>,
    path: &str,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out += &rest[..i];
        let after = &rest[i..];
        if let Some(tail) = after.strip_prefix("$${") {
            out += "${";
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail
                .find('}')
                .ok_or_else(|| err(path, "has an unclosed ${"))?;
            let name = &tail[..end];
            let value = env.get(name).ok_or_else(|| {
                err(
                    path,
                    format!("uses ${{{name}}}, which is not set in the environment"),
                )
            })?;
            out += value;
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out += rest;
    Ok(out)
}

fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text).map_err(|e| {
        err(
            key,
            format!("{text:?} is not a duration like 500ms, 15s or 3d: {e}"),
        )
    })
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Config, ConfigError> {
        outbox_store::backend_of(&raw.database.url).map_err(|e| err("database.url", e.reason))?;
        if raw.database.max_connections == 0 {
            return Err(err("database.max_connections", "must be at least 1"));
        }
        let lease_bounds = TtlBounds::new(
            duration("lease.min_ttl", &raw.lease.min_ttl)?,
            duration("lease.max_ttl", &raw.lease.max_ttl)?,
        )
        .map_err(|e| err("lease", e))?;
        let dispatcher = dispatcher(&raw.dispatcher, &lease_bounds)?;
        let mut destinations = BTreeMap::new();
        for (name, d) in &raw.destinations {
            destinations.insert(name.clone(), destination(name, d, &dispatcher)?);
        }
        Ok(Config {
            database_url: Secret(raw.database.url),
            migrate: raw.database.migrate,
            max_connections: raw.database.max_connections,
            lease_bounds,
            dispatcher,
            destinations,
        })
    }
}

fn dispatcher(raw: &RawDispatcher, bounds: &TtlBounds) -> Result<DispatcherConfig, ConfigError> {
    outbox_store::Partition::new(0, raw.partitions)
        .map_err(|e| err("dispatcher.partitions", e.reason))?;
    let lease_ttl = duration("dispatcher.lease_ttl", &raw.lease_ttl)?;
    bounds
        .check(lease_ttl)
        .map_err(|e| err("dispatcher.lease_ttl", e.reason))?;
    if lease_ttl < Duration::from_secs(1) {
        return Err(err("dispatcher.lease_ttl", "must be at least 1s"));
    }
    let poll_interval = duration("dispatcher.poll_interval", &raw.poll_interval)?;
    if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&poll_interval) {
        return Err(err(
            "dispatcher.poll_interval",
            "must be between 10ms and 1h",
        ));
    }
    if raw.max_in_flight == 0 {
        return Err(err("dispatcher.max_in_flight", "must be at least 1"));
    }
    if !(1..=1000).contains(&raw.claim_batch) {
        return Err(err("dispatcher.claim_batch", "must be 1..=1000"));
    }
    let listen = if raw.listen.is_empty() {
        None
    } else {
        Some(raw.listen.parse().map_err(|e| {
            err(
                "dispatcher.listen",
                format!("{:?} is not host:port: {e}", raw.listen),
            )
        })?)
    };
    Ok(DispatcherConfig {
        partitions: raw.partitions,
        lease_ttl,
        poll_interval,
        max_in_flight: raw.max_in_flight,
        claim_batch: raw.claim_batch,
        shutdown_grace: duration("dispatcher.shutdown_grace", &raw.shutdown_grace)?,
        retention: duration("dispatcher.retention", &raw.retention)?,
        listen,
    })
}

fn destination(
    name: &str,
    raw: &RawDestination,
    dispatcher: &DispatcherConfig,
) -> Result<Destination, ConfigError> {
    let key = |k: &str| format!("destinations.{name}.{k}");
    DestinationName::new(name).map_err(|e| err(&format!("destinations.{name}"), e.reason))?;
    let base_url = Url::parse(&raw.base_url)
        .map_err(|e| err(&key("base_url"), format!("is not a URL: {e}")))?;
    if !matches!(base_url.scheme(), "http" | "https") || base_url.host().is_none() {
        return Err(err(
            &key("base_url"),
            "must be an http:// or https:// URL with a host",
        ));
    }
    if base_url.query().is_some() || base_url.fragment().is_some() {
        return Err(err(
            &key("base_url"),
            "must not have a query or fragment (ops bring their own query)",
        ));
    }
    let timeout = duration(&key("timeout"), &raw.timeout)?;
    // An attempt must fit in the window the dispatcher trusts its lease (see partition.rs).
    let longest = crate::partition::longest_attempt(dispatcher.lease_ttl);
    if timeout < Duration::from_millis(100) || timeout > longest {
        return Err(err(
            &key("timeout"),
            format!(
                "must be between 100ms and {} (what dispatcher.lease_ttl {} leaves for one attempt)",
                humantime::format_duration(longest),
                humantime::format_duration(dispatcher.lease_ttl)
            ),
        ));
    }
    if raw.max_in_flight == 0 {
        return Err(err(&key("max_in_flight"), "must be at least 1"));
    }
    let rate_limit = raw
        .rate_limit
        .as_deref()
        .map(|r| rate(&key("rate_limit"), r))
        .transpose()?;
    let idempotency_header = HeaderName::from_bytes(raw.idempotency_header.as_bytes())
        .map_err(|_| err(&key("idempotency_header"), "is not a header name"))?;
    let mut headers = Vec::new();
    for (n, v) in &raw.headers {
        let header = HeaderName::from_bytes(n.as_bytes())
            .map_err(|_| err(&key("headers"), format!("{n:?} is not a header name")))?;
        let lower = header.as_str();
        if RESERVED_HEADERS.contains(&lower)
            || lower == idempotency_header.as_str()
            || lower.starts_with("x-outbox-")
            || lower.starts_with("webhook-")
        {
            return Err(err(
                &key("headers"),
                format!("{n} is set by the dispatcher itself"),
            ));
        }
        if reqwest::header::HeaderValue::from_str(v).is_err() {
            return Err(err(
                &key("headers"),
                format!("the value of {n} is not a valid header value"),
            ));
        }
        headers.push((header, Secret(v.clone())));
    }
    let signing_key = raw
        .signing_secret
        .as_deref()
        .map(|s| SigningKey::parse(s).map_err(|e| err(&key("signing_secret"), e)))
        .transpose()?;
    let r = &raw.retry;
    let retry = RetryPolicy {
        base: duration(&key("retry.base"), &r.base)?,
        cap: duration(&key("retry.cap"), &r.cap)?,
        max_attempts: r.max_attempts,
        max_age: duration(&key("retry.max_age"), &r.max_age)?,
        retry_statuses: r.retry_statuses.clone(),
    };
    if retry.base.is_zero() || retry.cap < retry.base {
        return Err(err(&key("retry"), "needs 0 < base <= cap"));
    }
    if retry.max_attempts == 0 || retry.max_age.is_zero() {
        return Err(err(
            &key("retry"),
            "needs max_attempts >= 1 and a max_age above zero",
        ));
    }
    if let Some(bad) = retry
        .retry_statuses
        .iter()
        .find(|s| !(100..=599).contains(*s))
    {
        return Err(err(
            &key("retry.retry_statuses"),
            format!("{bad} is not an HTTP status"),
        ));
    }
    Ok(Destination {
        name: name.to_owned(),
        base_url,
        timeout,
        max_in_flight: raw.max_in_flight,
        rate_limit,
        headers,
        idempotency_header,
        signing_key,
        retry,
    })
}

/// `"100/s"`, `"600/m"` or `"3600/h"`.
fn rate(key: &str, text: &str) -> Result<(NonZeroU32, Duration), ConfigError> {
    let bad = || err(key, format!("{text:?} is not like 100/s, 600/m or 3600/h"));
    let (n, per) = text.split_once('/').ok_or_else(bad)?;
    let n: NonZeroU32 = n.trim().parse().map_err(|_| bad())?;
    let per = match per.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    Ok((n, per))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const FULL: &str = r#"
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

    #[test]
    fn defaults_alone_make_a_valid_config() {
        let c = Config::load(None, &HashMap::new()).unwrap();
        assert_eq!(c.database_url.expose(), "sqlite://outbox.db");
        assert_eq!(c.dispatcher.lease_ttl, Duration::from_secs(15));
        assert_eq!(c.dispatcher.listen, Some("127.0.0.1:9187".parse().unwrap()));
        assert!(c.destinations.is_empty());
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

    #[test]
    fn check_config_output_never_shows_secrets() {
        let c = Config::load(
            Some(FULL),
            &env(&[("DB_PASSWORD", "pw1"), ("BILLING_TOKEN", "tok2")]),
        )
        .unwrap();
        let shown = c.redacted();
        for secret in ["pw1", "tok2", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] {
            assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
        }
        assert!(format!("{c:?}").find("tok2").is_none());
        assert!(
            shown.contains("[destinations.billing]") && shown.contains("***"),
            "{shown}"
        );
        // The redacted text is itself a loadable config shape.
        assert!(shown.parse::<toml::Table>().is_ok(), "{shown}");
    }

    #[test]
    fn environment_overrides_keys_by_name_and_type() {
        let e = env(&[
            ("OUTBOX_DATABASE_URL", "sqlite:///var/lib/outbox.db"),
            ("OUTBOX_DISPATCHER_PARTITIONS", "4"),
            ("OUTBOX_DISPATCHER_LISTEN", ""),
            ("OUTBOX_LEASE_MIN_TTL", "1s"),
            ("OUTBOX_CONFIG", "/etc/outbox.toml"),
            ("OUTBOX_MSSQL_URL", "ignored"),
        ]);
        let c = Config::load(None, &e).unwrap();
        assert_eq!(c.database_url.expose(), "sqlite:///var/lib/outbox.db");
        assert_eq!(c.dispatcher.partitions, 4);
        assert_eq!(c.dispatcher.listen, None);
        assert_eq!(c.lease_bounds.min(), Duration::from_secs(1));
    }

    #[test]
    fn missing_variables_and_bad_values_name_the_key() {
        let e = Config::load(Some(FULL), &env(&[("DB_PASSWORD", "x")])).unwrap_err();
        assert!(
            e.0.contains("destinations.billing.headers") && e.0.contains("BILLING_TOKEN"),
            "{e}"
        );
        let cases = [
            ("[dispatcher]\nlease_ttl = \"1d\"", "dispatcher.lease_ttl"),
            ("[dispatcher]\npartitions = 0", "dispatcher.partitions"),
            ("[dispatcher]\nlisten = \"nowhere\"", "dispatcher.listen"),
            ("[database]\nurl = \"mysql://x\"", "database.url"),
            (
                "[destinations.billing]\nbase_url = \"ftp://x\"",
                "destinations.billing.base_url",
            ),
            (
                "[destinations.billing]\nbase_url = \"https://x/?a=1\"",
                "destinations.billing.base_url",
            ),
            (
                "[destinations.Billing]\nbase_url = \"https://x\"",
                "destinations.Billing",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\ntimeout = \"14s\"",
                "destinations.b.timeout",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nrate_limit = \"fast\"",
                "destinations.b.rate_limit",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nheaders = { Host = \"evil\" }",
                "destinations.b.headers",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nheaders = { X-Outbox-Op-Id = \"1\" }",
                "destinations.b.headers",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nsigning_secret = \"whsec_***\"",
                "destinations.b.signing_secret",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nretry = { max_attempts = 0 }",
                "destinations.b.retry",
            ),
            (
                "[destinations.b]\nbase_url = \"https://x\"\nretry = { retry_statuses = [99] }",
                "destinations.b.retry.retry_statuses",
            ),
        ];
        for (text, key) in cases {
            let e = Config::load(Some(text), &HashMap::new()).unwrap_err();
            assert!(e.0.starts_with(key), "{text}: {e}");
        }
        let unknown =
            Config::load(Some("[dispatcher]\npartitons = 2"), &HashMap::new()).unwrap_err();
        assert!(unknown.0.contains("partitons"), "{unknown}");
    }

    #[test]
    fn interpolation_escapes_and_rejects_unclosed_references() {
        let e = env(&[("A", "1")]);
        assert_eq!(interpolate("x${A}y$${A}z$", &e, "k").unwrap(), "x1y${A}z$");
        assert!(interpolate("${A", &e, "k").is_err());
    }
}
