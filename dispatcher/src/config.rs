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
    max_connections: i64,
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
    partitions: i64,
    lease_ttl: String,
    poll_interval: String,
    max_in_flight: i64,
    claim_batch: i64,
    max_body_bytes: i64,
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
    max_in_flight: i64,
    #[serde(default)]
    rate_limit: Option<String>,
    #[serde(default)]
    proxy: Option<String>,
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
    max_attempts: i64,
    max_age: String,
    retry_statuses: Vec<i64>,
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
    pub(super) fn max_in_flight() -> i64 {
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
    /// The largest op body sent; larger ops are dead, never loaded by the batch.
    pub max_body_bytes: usize,
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
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
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
            "[dispatcher]\npartitions = {}\nlease_ttl = {:?}\npoll_interval = {:?}\nmax_in_flight = {}\nclaim_batch = {}\nmax_body_bytes = {}\nshutdown_grace = {:?}\nretention = {:?}\nlisten = {:?}\n",
            d.partitions,
            h(d.lease_ttl),
            h(d.poll_interval),
            d.max_in_flight,
            d.claim_batch,
            d.max_body_bytes,
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
                "\n[destinations.{}]\nbase_url = {:?}\ntimeout = {:?}\nmax_in_flight = {}\n{}{}headers = {{ {} }}\nidempotency_header = {:?}\n{}retry = {{ base = {:?}, cap = {:?}, max_attempts = {}, max_age = {:?}, retry_statuses = {:?} }}\n",
                dest.name,
                redact_url(dest.base_url.as_str()),
                h(dest.timeout),
                dest.max_in_flight,
                dest.rate_limit
                    .map(|(n, per)| format!(
                        "rate_limit = \"{n}/{}\"\n",
                        match per.as_secs() {
                            60 => "m",
                            3600 => "h",
                            _ => "s",
                        }
                    ))
                    .unwrap_or_default(),
                dest.proxy
                    .as_ref()
                    .map(|p| format!("proxy = {:?}\n", redact_url(p.expose())))
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

/// A URL safe to print: its whole userinfo (the user name too) and the values of password-like
/// query parameters shown as `***`. A URL that does not parse loses everything between `://`
/// and its last `@` before the path instead, so it cannot leak either.
fn redact_url(url: &str) -> String {
    let Ok(mut u) = Url::parse(url) else {
        return redact_unparsed_url(url);
    };
    if (!u.username().is_empty() || u.password().is_some())
        && (u.set_password(None).is_err() || u.set_username("***").is_err())
    {
        return redact_unparsed_url(url);
    }
    if let Some(query) = u.query().map(redact_query) {
        u.set_query(Some(&query));
    }
    u.to_string()
}

/// [`redact_url`] by text alone. The userinfo ends at the last `@` before the path; when no
/// `@` comes before the first `/`, at the last `@` of all (a password may hold a raw `/`).
fn redact_unparsed_url(url: &str) -> String {
    let (scheme, rest) = url.find("://").map_or(("", url), |i| url.split_at(i + 3));
    let path_at = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..path_at].rfind('@').or_else(|| rest.rfind('@')) {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    match rest.split_once('?') {
        Some((before, query)) => format!("{scheme}{before}?{}", redact_query(query)),
        None => format!("{scheme}{rest}"),
    }
}

/// Words that make a query parameter's value a secret, matched anywhere in its name, in any
/// case (`sslpassword`, `access_token`, `apiKey`, `X-Amz-Signature`).
const SECRET_PARAMETER_WORDS: [&str; 10] = [
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "signature",
    "sig",
];

/// `query` with the value of every password-like parameter shown as `***`.
fn redact_query(query: &str) -> String {
    let redact = |pair: &str| match pair.split_once('=') {
        Some((name, _))
            if SECRET_PARAMETER_WORDS
                .iter()
                .any(|w| name.to_ascii_lowercase().contains(w)) =>
        {
            format!("{name}=***")
        }
        _ => pair.to_owned(),
    };
    query.split('&').map(redact).collect::<Vec<_>>().join("&")
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
                .map_err(|e: toml::de::Error| syntax_error(text, &e))?;
            merge(&mut table, user);
        }
        apply_env(&mut table, env);
        interpolate_table(&mut table, env, "")?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(e.message().to_owned()))
    }
}

/// A TOML syntax error in the user's file, by line and column. Never the text around it:
/// toml's own `Display` quotes the line, and that line may hold a password.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim_end();
    let Some(span) = e.span() else {
        return ConfigError(format!("file: {message}"));
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    ConfigError(format!("file: line {line}, column {column}: {message}"))
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
        let max_connections = int(
            "database.max_connections",
            raw.database.max_connections,
            1..=1000,
        )?;
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
            max_connections,
            lease_bounds,
            dispatcher,
            destinations,
        })
    }
}

fn dispatcher(raw: &RawDispatcher, bounds: &TtlBounds) -> Result<DispatcherConfig, ConfigError> {
    let partitions = int(
        "dispatcher.partitions",
        raw.partitions,
        1..=i64::from(outbox_store::op::PARTITION_SLOTS),
    )?;
    let lease_ttl = duration("dispatcher.lease_ttl", &raw.lease_ttl)?;
    bounds
        .check(lease_ttl)
        .map_err(|e| err("dispatcher.lease_ttl", e.reason))?;
    if lease_ttl < Duration::from_secs(1) {
        return Err(err("dispatcher.lease_ttl", "must be at least 1s"));
    }
    let poll_interval = bounded_duration(
        "dispatcher.poll_interval",
        &raw.poll_interval,
        Duration::from_millis(10),
        Duration::from_secs(3600),
    )?;
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
        partitions,
        lease_ttl,
        poll_interval,
        max_in_flight: int(
            "dispatcher.max_in_flight",
            raw.max_in_flight,
            1..=MAX_IN_FLIGHT,
        )?,
        claim_batch: int("dispatcher.claim_batch", raw.claim_batch, 1..=1000)?,
        max_body_bytes: int(
            "dispatcher.max_body_bytes",
            raw.max_body_bytes,
            1..=outbox_store::request::MAX_BODY_BYTES_CEILING as i64,
        )?,
        shutdown_grace: bounded_duration(
            "dispatcher.shutdown_grace",
            &raw.shutdown_grace,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        retention: bounded_duration(
            "dispatcher.retention",
            &raw.retention,
            Duration::from_secs(1),
            DAY * 3650,
        )?,
        listen,
    })
}

/// The most attempts in flight a dispatcher or a destination may allow: far above what one
/// process can hold open, far below what a semaphore can count.
const MAX_IN_FLIGHT: i64 = 65_536;
/// One day.
const DAY: Duration = Duration::from_secs(86_400);

/// `value` when it lies in `range`, converted to the field's type; otherwise an error naming
/// `key` and the range.
fn int<T: TryFrom<i64>>(
    key: &str,
    value: i64,
    range: std::ops::RangeInclusive<i64>,
) -> Result<T, ConfigError> {
    if !range.contains(&value) {
        return Err(err(
            key,
            format!("must be {}..={}, got {value}", range.start(), range.end()),
        ));
    }
    T::try_from(value).map_err(|_| err(key, format!("{value} is out of range")))
}

/// A duration between `min` and `max`, inclusive.
fn bounded_duration(
    key: &str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    let d = duration(key, text)?;
    if d < min || d > max {
        let h = |d: Duration| humantime::format_duration(d).to_string();
        let min = if min.is_zero() {
            "0s".to_owned()
        } else {
            h(min)
        };
        return Err(err(key, format!("must be between {min} and {}", h(max))));
    }
    Ok(d)
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
    let max_in_flight = int(&key("max_in_flight"), raw.max_in_flight, 1..=MAX_IN_FLIGHT)?;
    let proxy = raw
        .proxy
        .as_deref()
        .map(|p| proxy(&key("proxy"), p))
        .transpose()?;
    let rate_limit = raw
        .rate_limit
        .as_deref()
        .map(|r| rate(&key("rate_limit"), r))
        .transpose()?;
    let idempotency_header =
        idempotency_header(&key("idempotency_header"), &raw.idempotency_header)?;
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
    let statuses = r
        .retry_statuses
        .iter()
        .map(|&s| {
            int(&key("retry.retry_statuses"), s, 100..=599).map_err(|_| {
                err(
                    &key("retry.retry_statuses"),
                    format!("{s} is not an HTTP status"),
                )
            })
        })
        .collect::<Result<Vec<u16>, _>>()?;
    let retry = RetryPolicy {
        base: bounded_duration(&key("retry.base"), &r.base, Duration::from_millis(1), DAY)?,
        // The next attempt's time is computed by the database: it must stay a time it can hold.
        cap: bounded_duration(
            &key("retry.cap"),
            &r.cap,
            Duration::from_millis(1),
            DAY * 365,
        )?,
        max_attempts: int(&key("retry.max_attempts"), r.max_attempts, 1..=10_000)?,
        max_age: bounded_duration(
            &key("retry.max_age"),
            &r.max_age,
            Duration::from_millis(1),
            DAY * 3650,
        )?,
        retry_statuses: statuses,
    };
    if retry.cap < retry.base {
        return Err(err(&key("retry"), "needs base <= cap"));
    }
    Ok(Destination {
        name: name.to_owned(),
        base_url,
        timeout,
        max_in_flight,
        rate_limit,
        proxy,
        headers,
        idempotency_header,
        signing_key,
        retry,
    })
}

/// Headers that carry credentials: never the idempotency key's.
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// The header that carries the idempotency key: a header name that is none of the
/// dispatcher's own and carries no credentials (the key would replace them, or they it).
fn idempotency_header(key: &str, name: &str) -> Result<HeaderName, ConfigError> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| err(key, format!("{name:?} is not a header name")))?;
    let lower = header.as_str();
    if RESERVED_HEADERS.contains(&lower)
        || lower.starts_with("x-outbox-")
        || lower.starts_with("webhook-")
    {
        return Err(err(key, format!("{name} is set by the dispatcher itself")));
    }
    if CREDENTIAL_HEADERS.contains(&lower) {
        return Err(err(
            key,
            format!("{name} carries credentials; name a header of its own, like Idempotency-Key"),
        ));
    }
    Ok(header)
}

/// `"100/s"`, `"600/m"` or `"3600/h"`: at most one request per microsecond.
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
    if per / n.get() < Duration::from_micros(1) {
        return Err(err(
            key,
            format!("{text:?} is more than one request per microsecond (1000000/s)"),
        ));
    }
    Ok((n, per))
}

/// A destination's own proxy: an http:// or https:// URL. Errors never quote it (it may hold
/// credentials).
fn proxy(key: &str, text: &str) -> Result<Secret, ConfigError> {
    match Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
            Ok(Secret(text.to_owned()))
        }
        _ => Err(err(key, "must be an http:// or https:// URL with a host")),
    }
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

    #[test]
    fn redacted_urls_lose_their_userinfo_and_secret_query_values() {
        let cases = [
            ("postgres://alice:pw@h/db", "postgres://***@h/db"),
            ("https://token@h/", "https://***@h/"),
            ("postgres://:pw@h/db", "postgres://***@h/db"),
            (
                "postgres://h/db?sslpassword=x&application_name=a",
                "postgres://h/db?sslpassword=***&application_name=a",
            ),
            (
                "postgres://h/db?PassWd=1&pwd=2&client_secret=3&access_token=4&apiKey=5&AUTH=6",
                "postgres://h/db?PassWd=***&pwd=***&client_secret=***&access_token=***&apiKey=***&AUTH=***",
            ),
            (
                "https://h/x?credentials=1&signature=2&sig=3&page=4",
                "https://h/x?credentials=***&signature=***&sig=***&page=4",
            ),
            ("sqlite://outbox.db", "sqlite://outbox.db"),
            (
                "sqlite:///var/lib/outbox.db?mode=rwc",
                "sqlite:///var/lib/outbox.db?mode=rwc",
            ),
            ("https://h/", "https://h/"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_that_do_not_parse_lose_everything_before_their_last_at() {
        let cases = [
            // An invalid port: everything between :// and the last @ before the path goes.
            (
                "postgres://al ice:p w@h:port/db",
                "postgres://***@h:port/db",
            ),
            // A password with an unescaped / or ? still ends at the last @.
            ("postgres://u:pa/ss@h:x/db", "postgres://***@h:x/db"),
            ("postgres://u:pa?ss@h:x/db", "postgres://***@h:x/db"),
            (
                "postgres://u:p@w@h:x/db?password=s&a=1",
                "postgres://***@h:x/db?password=***&a=1",
            ),
            ("postgres://h:x/db", "postgres://h:x/db"),
        ];
        for (url, shown) in cases {
            assert!(Url::parse(url).is_err(), "{url} parses: pick another case");
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn check_config_shows_no_database_user_or_secret_parameter() {
        let file = "[database]\nurl = \"postgres://alice:pw1@db/outbox?sslpassword=pw2&application_name=dispatcher\"\n";
        let shown = Config::load(Some(file), &HashMap::new())
            .unwrap()
            .redacted();
        for secret in ["alice", "pw1", "pw2"] {
            assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
        }
        assert!(
            shown.contains(
                "url = \"postgres://***@db/outbox?sslpassword=***&application_name=dispatcher\""
            ),
            "{shown}"
        );
    }

    #[test]
    fn toml_syntax_errors_name_line_and_column_without_quoting_the_line() {
        let cases = [
            (
                "[database]\nmigrate = true\nurl = \"postgres://u:hunter2@db/outbox\n",
                3,
            ),
            ("[database]\nurl = postgres://u:hunter2@db/outbox\n", 2),
            (
                "# first\n\n[destinations.b]\nheaders = { Authorization = hunter2 }\n",
                4,
            ),
            ("[database]\nurl = \"x\"\nurl = \"hunter2\"\n", 3),
        ];
        for (file, line) in cases {
            let e = RawConfig::load(Some(file), &HashMap::new()).unwrap_err();
            let shown = e.to_string();
            assert!(!shown.contains("hunter2"), "the line was quoted: {shown}");
            // The same place toml's own message names, which also quotes the line.
            let toml = file.parse::<toml::Table>().unwrap_err().to_string();
            assert!(toml.contains("hunter2"), "the case proves nothing: {toml}");
            let place = toml
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("TOML parse error at "))
                .unwrap_or_else(|| panic!("toml changed its message: {toml}"));
            assert!(place.starts_with(&format!("line {line}, ")), "{toml}");
            assert!(
                shown.starts_with(&format!("config: file: {place}: ")),
                "{shown} vs {toml}"
            );
        }
    }
}

/// Issue 12, item 7: values that pass a type check and then panic or stall the daemon are
/// refused, naming the key; the loader never panics, whatever the text.
#[cfg(test)]
mod bound_tests {
    use super::*;
    use proptest::prelude::*;

    const DEST: &str = "[destinations.b]\nbase_url = \"https://x.example\"\n";

    #[test]
    fn values_that_would_panic_or_stall_are_refused_naming_the_key() {
        let huge = i64::MAX;
        let cases = [
            (
                format!("[dispatcher]\nmax_in_flight = {huge}"),
                "dispatcher.max_in_flight",
            ),
            (
                "[dispatcher]\nmax_in_flight = -1".to_owned(),
                "dispatcher.max_in_flight",
            ),
            (
                format!("[dispatcher]\nclaim_batch = {huge}"),
                "dispatcher.claim_batch",
            ),
            (
                "[dispatcher]\nclaim_batch = 0".to_owned(),
                "dispatcher.claim_batch",
            ),
            (
                "[dispatcher]\npartitions = 4294967297".to_owned(),
                "dispatcher.partitions",
            ),
            (
                "[dispatcher]\nmax_body_bytes = 16777217".to_owned(),
                "dispatcher.max_body_bytes",
            ),
            (
                "[dispatcher]\nmax_body_bytes = 0".to_owned(),
                "dispatcher.max_body_bytes",
            ),
            (
                "[dispatcher]\nretention = \"10000y\"".to_owned(),
                "dispatcher.retention",
            ),
            (
                "[dispatcher]\nshutdown_grace = \"2h\"".to_owned(),
                "dispatcher.shutdown_grace",
            ),
            (
                "[dispatcher]\npoll_interval = \"0s\"".to_owned(),
                "dispatcher.poll_interval",
            ),
            (
                "[database]\nmax_connections = 100000".to_owned(),
                "database.max_connections",
            ),
            (
                "[database]\nmax_connections = 0".to_owned(),
                "database.max_connections",
            ),
            ("[lease]\nmax_ttl = \"10000y\"".to_owned(), "lease"),
            (
                format!("{DEST}max_in_flight = {huge}"),
                "destinations.b.max_in_flight",
            ),
            (
                format!("{DEST}rate_limit = \"4294967295/s\""),
                "destinations.b.rate_limit",
            ),
            (
                format!("{DEST}rate_limit = \"0/s\""),
                "destinations.b.rate_limit",
            ),
            (
                format!("{DEST}retry = {{ cap = \"10000y\" }}"),
                "destinations.b.retry.cap",
            ),
            (
                format!("{DEST}retry = {{ max_age = \"10000y\" }}"),
                "destinations.b.retry.max_age",
            ),
            (
                format!("{DEST}retry = {{ max_attempts = {huge} }}"),
                "destinations.b.retry.max_attempts",
            ),
            (
                format!("{DEST}retry = {{ base = \"0s\" }}"),
                "destinations.b.retry.base",
            ),
            (
                format!("{DEST}retry = {{ base = \"2h\", cap = \"1h\" }}"),
                "destinations.b.retry",
            ),
            (
                format!("{DEST}retry = {{ retry_statuses = [70000] }}"),
                "destinations.b.retry.retry_statuses",
            ),
            (
                format!("{DEST}proxy = \"socks5://proxy.example\""),
                "destinations.b.proxy",
            ),
            (
                format!("{DEST}proxy = \"not a url\""),
                "destinations.b.proxy",
            ),
            (
                format!("{DEST}idempotency_header = \"Authorization\""),
                "destinations.b.idempotency_header",
            ),
            (
                format!("{DEST}idempotency_header = \"Cookie\""),
                "destinations.b.idempotency_header",
            ),
            (
                format!("{DEST}idempotency_header = \"Host\""),
                "destinations.b.idempotency_header",
            ),
            (
                format!("{DEST}idempotency_header = \"X-Outbox-Op-Id\""),
                "destinations.b.idempotency_header",
            ),
            (
                format!("{DEST}idempotency_header = \"Content-Type\""),
                "destinations.b.idempotency_header",
            ),
        ];
        for (text, key) in cases {
            let e = Config::load(Some(&text), &HashMap::new()).unwrap_err();
            assert!(e.0.starts_with(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_largest_allowed_values_load() {
        let text = format!(
            "[database]\nmax_connections = 1000\n[dispatcher]\nmax_in_flight = 65536\nclaim_batch = 1000\n\
             max_body_bytes = 16777216\nretention = \"3650d\"\nshutdown_grace = \"0s\"\n\
             {DEST}max_in_flight = 65536\nrate_limit = \"1000000/s\"\nproxy = \"http://u:p@proxy.example:3128\"\n\
             idempotency_header = \"X-Request-Key\"\n\
             retry = {{ base = \"1d\", cap = \"365d\", max_attempts = 10000, max_age = \"3650d\" }}\n"
        );
        let c = Config::load(Some(&text), &HashMap::new()).unwrap();
        let b = &c.destinations["b"];
        assert_eq!(b.rate_limit.unwrap().0.get(), 1_000_000);
        assert_eq!(
            b.proxy.as_ref().unwrap().expose(),
            "http://u:p@proxy.example:3128"
        );
        let shown = c.redacted();
        assert!(
            shown.contains("proxy = \"http://***@proxy.example:3128/\""),
            "{shown}"
        );
        assert!(!shown.contains("u:p"), "{shown}");
    }

    /// TOML values of every kind the keys could be given.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "[0-9]{1,12}(ms|s|m|h|d|y|us|ns)?".prop_map(|d| format!("{d:?}")),
            "[0-9]{1,10}/(s|m|h|d)".prop_map(|r| format!("{r:?}")),
            any::<String>().prop_map(|s| format!("{s:?}")),
            Just("true".to_owned()),
            Just("[408, -1, 99999]".to_owned()),
            Just("{ base = \"1s\" }".to_owned()),
        ]
    }

    const KEYS: &[&str] = &[
        "[database]\nmax_connections",
        "[dispatcher]\npartitions",
        "[dispatcher]\nlease_ttl",
        "[dispatcher]\npoll_interval",
        "[dispatcher]\nmax_in_flight",
        "[dispatcher]\nclaim_batch",
        "[dispatcher]\nmax_body_bytes",
        "[dispatcher]\nshutdown_grace",
        "[dispatcher]\nretention",
        "[dispatcher]\nlisten",
        "[lease]\nmin_ttl",
        "[lease]\nmax_ttl",
        "[destinations.b]\nbase_url = \"http://h\"\ntimeout",
        "[destinations.b]\nbase_url = \"http://h\"\nmax_in_flight",
        "[destinations.b]\nbase_url = \"http://h\"\nrate_limit",
        "[destinations.b]\nbase_url = \"http://h\"\nproxy",
        "[destinations.b]\nbase_url = \"http://h\"\nidempotency_header",
        "[destinations.b]\nbase_url = \"http://h\"\nsigning_secret",
        "[destinations.b]\nbase_url",
        "[destinations.b.retry]\nbase",
        "[destinations.b.retry]\ncap",
        "[destinations.b.retry]\nmax_attempts",
        "[destinations.b.retry]\nmax_age",
        "[destinations.b.retry]\nretry_statuses",
    ];

    proptest! {
        #[test]
        fn the_loader_never_panics_on_any_text(text in any::<String>()) {
            let _ = Config::load(Some(&text), &HashMap::new());
        }

        #[test]
        fn the_loader_never_panics_on_any_value_of_any_key(
            key in proptest::sample::select(KEYS),
            value in value(),
        ) {
            let text = format!("{key} = {value}\n");
            if let Ok(c) = Config::load(Some(&text), &HashMap::new()) {
                let _ = c.redacted();
            }
        }
    }
}
