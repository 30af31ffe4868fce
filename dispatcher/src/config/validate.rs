//! The second stage: a [`RawConfig`] checked key by key into a [`Config`]. Every error names
//! the key it concerns and never quotes a secret; every bound keeps the daemon from panicking
//! or stalling on a value that passed the type check.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use outbox_store::{DestinationName, TtlBounds};
use url::Url;

use super::parse::{bounded_duration, duration, int};
use super::raw::{RawBreaker, RawConfig, RawDestination, RawDispatcher, RawRetry};
use super::{
    Config, ConfigError, Destination, DispatcherConfig, RetryPolicy, Secret, err, longest_attempt,
};
use crate::signing::SigningKey;

/// The most attempts in flight a dispatcher or a destination may allow: far above what one
/// process can hold open, far below what a semaphore can count.
const MAX_IN_FLIGHT: i64 = 65_536;
/// One day.
const DAY: Duration = Duration::from_secs(86_400);

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

/// Headers that carry credentials: never the idempotency key's.
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Config, ConfigError> {
        let backend = outbox_store::backend_of(&raw.database.url)
            .map_err(|e| err("database.url", e.reason))?;
        let database_listen_url = listen_url(&raw.database.listen_url, backend)?;
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
        let telemetry = super::telemetry::telemetry(&raw.telemetry, &raw.otel)?;
        let console = super::console::console(&raw.console, &dispatcher, backend, raw.read_keys)?;
        let encryption =
            super::encryption::encryption(&raw.encryption, &raw.key_env, raw.read_keys)?;
        Ok(Config {
            database_url: Secret(raw.database.url),
            database_listen_url,
            migrate: raw.database.migrate,
            max_connections,
            lease_bounds,
            dispatcher,
            destinations,
            console,
            telemetry,
            encryption,
        })
    }
}

fn dispatcher(raw: &RawDispatcher, bounds: &TtlBounds) -> Result<DispatcherConfig, ConfigError> {
    let partitions = int(
        "dispatcher.partitions",
        raw.partitions,
        1..=i64::from(outbox_store::op::PARTITION_SLOTS),
    )?;
    let lease_ttl = lease_ttl(&raw.lease_ttl, bounds)?;
    let poll_interval = bounded_duration(
        "dispatcher.poll_interval",
        &raw.poll_interval,
        Duration::from_millis(10),
        Duration::from_secs(3600),
    )?;
    let listen = listen(&raw.listen)?;
    let retention = bounded_duration(
        "dispatcher.retention",
        &raw.retention,
        Duration::from_secs(1),
        DAY * 3650,
    )?;
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
        claim_ahead: int("dispatcher.claim_ahead", raw.claim_ahead, 0..=1000)?,
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
        retention,
        erase_after: erase_after(&raw.erase_after, retention)?,
        listen,
    })
}

/// `dispatcher.erase_after`: `0s` (off), or at least a second and shorter than `retention`,
/// which would delete the op first.
fn erase_after(text: &str, retention: Duration) -> Result<Option<Duration>, ConfigError> {
    let key = "dispatcher.erase_after";
    let erase_after = bounded_duration(key, text, Duration::ZERO, DAY * 3650)?;
    if erase_after.is_zero() {
        return Ok(None);
    }
    if erase_after < Duration::from_secs(1) {
        return Err(err(key, "must be 0s (off) or at least 1s"));
    }
    if erase_after >= retention {
        return Err(err(
            key,
            "must be shorter than dispatcher.retention, which deletes finished ops with their content",
        ));
    }
    Ok(Some(erase_after))
}

/// `dispatcher.lease_ttl`: within the lease bounds, and at least a second.
fn lease_ttl(text: &str, bounds: &TtlBounds) -> Result<Duration, ConfigError> {
    let lease_ttl = duration("dispatcher.lease_ttl", text)?;
    bounds
        .check(lease_ttl)
        .map_err(|e| err("dispatcher.lease_ttl", e.reason))?;
    if lease_ttl < Duration::from_secs(1) {
        return Err(err("dispatcher.lease_ttl", "must be at least 1s"));
    }
    Ok(lease_ttl)
}

/// `dispatcher.listen`: `host:port`, or empty for no listener.
fn listen(text: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if text.is_empty() {
        return Ok(None);
    }
    let addr = text.parse().map_err(|e| {
        err(
            "dispatcher.listen",
            format!("{text:?} is not host:port: {e}"),
        )
    })?;
    Ok(Some(addr))
}

fn destination(
    name: &str,
    raw: &RawDestination,
    dispatcher: &DispatcherConfig,
) -> Result<Destination, ConfigError> {
    let key = |k: &str| format!("destinations.{name}.{k}");
    DestinationName::new(name).map_err(|e| err(&format!("destinations.{name}"), e.reason))?;
    let base_url = base_url(&key("base_url"), &raw.base_url)?;
    let timeout = timeout(&key("timeout"), &raw.timeout, dispatcher.lease_ttl)?;
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
    let headers = headers(&key("headers"), &raw.headers, &idempotency_header)?;
    let signing_key = raw
        .signing_secret
        .as_deref()
        .map(|s| SigningKey::parse(s).map_err(|e| err(&key("signing_secret"), e)))
        .transpose()?;
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
        retry: retry_policy(&key("retry"), &raw.retry)?,
        breaker: breaker(
            &key("breaker"),
            &raw.breaker,
            timeout + dispatcher.lease_ttl,
        )?,
    })
}

/// A destination's `breaker` table; `table` is its key. A probe whose outcome never came (its
/// dispatcher crashed) may be taken again after `probe_timeout`: the attempt's timeout and a
/// lease TTL, by when its partition's next leader has re-queued it.
fn breaker(
    table: &str,
    b: &RawBreaker,
    probe_timeout: Duration,
) -> Result<Option<outbox_store::health::BreakerPolicy>, ConfigError> {
    let key = |k: &str| format!("{table}.{k}");
    let policy = outbox_store::health::BreakerPolicy {
        failures: int(&key("failures"), b.failures, 1..=10_000)?,
        cooldown: bounded_duration(
            &key("cooldown"),
            &b.cooldown,
            Duration::from_millis(10),
            DAY,
        )?,
        cooldown_max: bounded_duration(
            &key("cooldown_max"),
            &b.cooldown_max,
            Duration::from_millis(10),
            DAY * 7,
        )?,
        probe_timeout,
    };
    if policy.cooldown_max < policy.cooldown {
        return Err(err(table, "needs cooldown <= cooldown_max"));
    }
    Ok(b.enabled.then_some(policy))
}

/// A destination's base URL: http:// or https://, with a host, without query or fragment.
fn base_url(key: &str, text: &str) -> Result<Url, ConfigError> {
    let base_url = Url::parse(text).map_err(|e| err(key, format!("is not a URL: {e}")))?;
    if !matches!(base_url.scheme(), "http" | "https") || base_url.host().is_none() {
        return Err(err(key, "must be an http:// or https:// URL with a host"));
    }
    if base_url.query().is_some() || base_url.fragment().is_some() {
        return Err(err(
            key,
            "must not have a query or fragment (ops bring their own query)",
        ));
    }
    Ok(base_url)
}

/// A destination's whole-attempt timeout: at least 100 ms, and short enough to fit the window
/// the dispatcher trusts its partition lease (see partition.rs).
fn timeout(key: &str, text: &str, lease_ttl: Duration) -> Result<Duration, ConfigError> {
    let timeout = duration(key, text)?;
    let longest = longest_attempt(lease_ttl);
    if timeout < Duration::from_millis(100) || timeout > longest {
        return Err(err(
            key,
            format!(
                "must be between 100ms and {} (what dispatcher.lease_ttl {} leaves for one attempt)",
                humantime::format_duration(longest),
                humantime::format_duration(lease_ttl)
            ),
        ));
    }
    Ok(timeout)
}

/// A destination's `headers`: header names the dispatcher does not set itself, valid values.
fn headers(
    key: &str,
    raw: &BTreeMap<String, String>,
    idempotency_header: &HeaderName,
) -> Result<Vec<(HeaderName, Secret)>, ConfigError> {
    let mut headers = Vec::new();
    for (n, v) in raw {
        let header = HeaderName::from_bytes(n.as_bytes())
            .map_err(|_| err(key, format!("{n:?} is not a header name")))?;
        let lower = header.as_str();
        if set_by_dispatcher(lower) || lower == idempotency_header.as_str() {
            return Err(err(key, format!("{n} is set by the dispatcher itself")));
        }
        if HeaderValue::from_str(v).is_err() {
            return Err(err(
                key,
                format!("the value of {n} is not a valid header value"),
            ));
        }
        headers.push((header, Secret(v.clone())));
    }
    Ok(headers)
}

/// Whether the dispatcher sets the header named `lower` (lowercase) on every request itself.
fn set_by_dispatcher(lower: &str) -> bool {
    RESERVED_HEADERS.contains(&lower)
        || lower.starts_with("x-outbox-")
        || lower.starts_with("webhook-")
}

/// The header that carries the idempotency key: a header name that is none of the
/// dispatcher's own and carries no credentials (the key would replace them, or they it).
fn idempotency_header(key: &str, name: &str) -> Result<HeaderName, ConfigError> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| err(key, format!("{name:?} is not a header name")))?;
    let lower = header.as_str();
    if set_by_dispatcher(lower) {
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

/// A destination's `retry` table; `table` is its key, `destinations.<name>.retry`.
fn retry_policy(table: &str, r: &RawRetry) -> Result<RetryPolicy, ConfigError> {
    let key = |k: &str| format!("{table}.{k}");
    let statuses = r
        .retry_statuses
        .iter()
        .map(|&s| {
            int(&key("retry_statuses"), s, 100..=599)
                .map_err(|_| err(&key("retry_statuses"), format!("{s} is not an HTTP status")))
        })
        .collect::<Result<Vec<u16>, _>>()?;
    let retry = RetryPolicy {
        base: bounded_duration(&key("base"), &r.base, Duration::from_millis(1), DAY)?,
        // The next attempt's time is computed by the database: it must stay a time it can hold.
        cap: bounded_duration(&key("cap"), &r.cap, Duration::from_millis(1), DAY * 365)?,
        max_attempts: int(&key("max_attempts"), r.max_attempts, 1..=10_000)?,
        max_age: bounded_duration(
            &key("max_age"),
            &r.max_age,
            Duration::from_millis(1),
            DAY * 3650,
        )?,
        retry_statuses: statuses,
    };
    if retry.cap < retry.base {
        return Err(err(table, "needs base <= cap"));
    }
    Ok(retry)
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

/// `database.listen_url`: empty for none; otherwise a PostgreSQL URL, and only beside a
/// PostgreSQL `database.url` (the other backends have no LISTEN).
fn listen_url(text: &str, backend: outbox_store::Backend) -> Result<Option<Secret>, ConfigError> {
    const KEY: &str = "database.listen_url";
    if text.is_empty() {
        return Ok(None);
    }
    match outbox_store::backend_of(text) {
        Ok(outbox_store::Backend::Postgres) if backend == outbox_store::Backend::Postgres => {
            Ok(Some(Secret(text.to_owned())))
        }
        Ok(_) => Err(err(
            KEY,
            "must be a postgres:// URL to the PostgreSQL database of database.url (it is only \
             for LISTEN, which only PostgreSQL has)",
        )),
        Err(e) => Err(err(KEY, e.reason)),
    }
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
    use std::collections::HashMap;

    use super::*;
    use crate::config::fixtures::{FULL, env};

    #[test]
    fn a_listen_url_beside_a_postgres_url_is_kept_and_none_by_default() {
        let c = Config::load(None, &HashMap::new()).unwrap();
        assert!(c.database_listen_url.is_none());
        let text = "[database]\nurl = \"postgres://u@pooler:6432/db\"\n\
                    listen_url = \"postgres://u:hunter2@db:5432/db\"";
        let c = Config::load(Some(text), &HashMap::new()).unwrap();
        let listen = c.database_listen_url.expect("kept");
        assert_eq!(listen.expose(), "postgres://u:hunter2@db:5432/db");
        assert_eq!(format!("{listen:?}"), "***");
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
            (
                "[dispatcher]\nlisten = \"\"\n[console]\nenabled = true",
                "console.enabled",
            ),
            ("[console]\nrefresh = \"500ms\"", "console.refresh"),
            ("[console]\nrefresh = \"2h\"", "console.refresh"),
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
}

/// Issue 12, item 7: values that pass a type check and then panic or stall the daemon are
/// refused, naming the key; the loader never panics, whatever the text.
#[cfg(test)]
mod bound_tests {
    use std::collections::HashMap;

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
                "[dispatcher]\nclaim_ahead = -1".to_owned(),
                "dispatcher.claim_ahead",
            ),
            (
                "[dispatcher]\nclaim_ahead = 1001".to_owned(),
                "dispatcher.claim_ahead",
            ),
            (
                "[dispatcher]\nerase_after = \"500ms\"".to_owned(),
                "dispatcher.erase_after",
            ),
            (
                "[dispatcher]\nerase_after = \"7d\"".to_owned(),
                "dispatcher.erase_after",
            ),
            (
                "[dispatcher]\nretention = \"1h\"\nerase_after = \"2h\"".to_owned(),
                "dispatcher.erase_after",
            ),
            (
                "[dispatcher]\nerase_after = \"soon\"".to_owned(),
                "dispatcher.erase_after",
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
            (
                "[database]\nlisten_url = \"sqlite://x.db\"".to_owned(),
                "database.listen_url",
            ),
            (
                "[database]\nlisten_url = \"postgres://u@h/db\"".to_owned(),
                "database.listen_url",
            ),
            (
                "[database]\nurl = \"postgres://u@h/db\"\nlisten_url = \"mysql://u@h/db\""
                    .to_owned(),
                "database.listen_url",
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

    /// Issue 37, item 4: erasure is off unless asked for, and then shorter than retention.
    #[test]
    fn erase_after_is_off_by_default_and_shorter_than_retention() {
        let c = Config::load(Some(DEST), &HashMap::new()).unwrap();
        assert_eq!(c.dispatcher.erase_after, None);
        let text = format!("[dispatcher]\nretention = \"30d\"\nerase_after = \"1h\"\n{DEST}");
        let c = Config::load(Some(&text), &HashMap::new()).unwrap();
        assert_eq!(c.dispatcher.erase_after, Some(Duration::from_secs(3600)));
        assert!(
            c.redacted().contains("erase_after = \"1h\""),
            "{}",
            c.redacted()
        );
    }

    #[test]
    fn the_largest_allowed_values_load() {
        let text = format!(
            "[database]\nmax_connections = 1000\n[dispatcher]\nmax_in_flight = 65536\nclaim_batch = 1000\nclaim_ahead = 1000\n\
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
        "[dispatcher]\nclaim_ahead",
        "[dispatcher]\nmax_body_bytes",
        "[dispatcher]\nshutdown_grace",
        "[dispatcher]\nretention",
        "[dispatcher]\nerase_after",
        "[dispatcher]\nlisten",
        "[console]\nenabled",
        "[console]\nrefresh",
        "[console]\ndatabase_url",
        "[console]\ntrusted_header",
        "[console]\ntrusted_operators",
        "[console]\nsession_key",
        "[console]\nsession_key_file",
        "[console]\nsession_ttl",
        "[console]\nsecure_cookie",
        "[[console.users]]\nname = \"a\"\nrole = \"viewer\"\npassword_hash",
        "[[console.users]]\nname = \"a\"\npassword_hash = \"x\"\nrole",
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
