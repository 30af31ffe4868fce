//! The first stage: the embedded defaults, the user's TOML file and the `OUTBOX_*` environment
//! layered into one table, `${NAME}` interpolated, then read into a [`RawConfig`] whose values
//! are still unchecked text and numbers.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::{ConfigError, DEFAULT_TOML, err};

/// The configuration as written, after layering and interpolation; nothing checked yet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub(super) database: RawDatabase,
    pub(super) lease: RawLease,
    pub(super) dispatcher: RawDispatcher,
    #[serde(default)]
    pub(super) destinations: BTreeMap<String, RawDestination>,
    pub(super) telemetry: RawTelemetry,
    pub(super) console: RawConsole,
    #[serde(default)]
    pub(super) encryption: RawEncryption,
    /// The environment variables `[encryption] keys` name (`env:NAME`), read with the rest of
    /// the environment.
    #[serde(skip)]
    pub(super) key_env: HashMap<String, String>,
    /// Whether the keys are read (the dispatcher), or only their sources checked (`outboxctl`
    /// reading the file for its database, whose user may not read the keys).
    #[serde(skip)]
    pub(super) read_keys: bool,
    /// The standard OpenTelemetry variables of the environment, which `validate` weighs
    /// against `[telemetry]` (they are not keys of one table, so they are not layered).
    #[serde(skip)]
    pub(super) otel: OtelEnv,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) url: String,
    pub(super) listen_url: String,
    pub(super) migrate: bool,
    pub(super) max_connections: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLease {
    pub(super) min_ttl: String,
    pub(super) max_ttl: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDispatcher {
    pub(super) partitions: i64,
    pub(super) lease_ttl: String,
    pub(super) poll_interval: String,
    pub(super) max_in_flight: i64,
    pub(super) claim_batch: i64,
    pub(super) claim_ahead: i64,
    pub(super) max_body_bytes: i64,
    pub(super) shutdown_grace: String,
    pub(super) retention: String,
    pub(super) erase_after: String,
    pub(super) listen: String,
}

/// `[console]`: the web console on the dispatcher's listener, and who may sign in to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsole {
    pub(super) enabled: bool,
    pub(super) refresh: String,
    pub(super) database_url: String,
    pub(super) users: Vec<RawConsoleUser>,
    pub(super) trusted_header: String,
    pub(super) trusted_operators: Vec<String>,
    pub(super) session_key: String,
    pub(super) session_key_file: String,
    pub(super) session_ttl: String,
    pub(super) secure_cookie: bool,
}

/// One `[[console.users]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsoleUser {
    pub(super) name: String,
    pub(super) password_hash: String,
    pub(super) role: String,
}

/// `[encryption]`: the keys ops' bodies and header values may be sealed with, by id, each
/// `file:/path` or `env:NAME`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEncryption {
    #[serde(default)]
    pub(super) keys: BTreeMap<String, String>,
}

/// `[telemetry]`: traces over OTLP/HTTP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) otlp_endpoint: String,
    pub(super) service_name: String,
    pub(super) sampler: String,
    pub(super) sampling_ratio: f64,
    pub(super) queue_size: i64,
    pub(super) export_timeout: String,
}

/// The OpenTelemetry variables `[telemetry]` heeds; an empty value counts as unset, as the
/// specification says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct OtelEnv {
    /// `OTEL_TRACES_EXPORTER`: `otlp` turns traces on, `none` off.
    pub(super) traces_exporter: Option<String>,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the URL spans are POSTed to, used as it is.
    pub(super) traces_endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: a base URL, `/v1/traces` is appended.
    pub(super) endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME`.
    pub(super) service_name: Option<String>,
    /// `OTEL_TRACES_SAMPLER`.
    pub(super) sampler: Option<String>,
    /// `OTEL_TRACES_SAMPLER_ARG`.
    pub(super) sampler_arg: Option<String>,
}

impl OtelEnv {
    fn from_env(env: &HashMap<String, String>) -> OtelEnv {
        let get = |name: &str| env.get(name).filter(|v| !v.trim().is_empty()).cloned();
        OtelEnv {
            traces_exporter: get("OTEL_TRACES_EXPORTER"),
            traces_endpoint: get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            endpoint: get("OTEL_EXPORTER_OTLP_ENDPOINT"),
            service_name: get("OTEL_SERVICE_NAME"),
            sampler: get("OTEL_TRACES_SAMPLER"),
            sampler_arg: get("OTEL_TRACES_SAMPLER_ARG"),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDestination {
    pub(super) base_url: String,
    #[serde(default = "defaults::timeout")]
    pub(super) timeout: String,
    #[serde(default = "defaults::max_in_flight")]
    pub(super) max_in_flight: i64,
    #[serde(default)]
    pub(super) rate_limit: Option<String>,
    #[serde(default)]
    pub(super) proxy: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    #[serde(default = "defaults::idempotency_header")]
    pub(super) idempotency_header: String,
    #[serde(default)]
    pub(super) signing_secret: Option<String>,
    #[serde(default)]
    pub(super) retry: RawRetry,
    #[serde(default)]
    pub(super) breaker: RawBreaker,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBreaker {
    pub(super) enabled: bool,
    pub(super) failures: i64,
    pub(super) cooldown: String,
    pub(super) cooldown_max: String,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker {
            enabled: true,
            failures: 5,
            cooldown: "30s".into(),
            cooldown_max: "10m".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetry {
    pub(super) base: String,
    pub(super) cap: String,
    pub(super) max_attempts: i64,
    pub(super) max_age: String,
    pub(super) retry_statuses: Vec<i64>,
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
        let mut raw: RawConfig = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError(e.message().to_owned()))?;
        raw.otel = OtelEnv::from_env(env);
        raw.read_keys = true;
        raw.key_env = raw
            .encryption
            .keys
            .values()
            .filter_map(|source| source.strip_prefix("env:"))
            .filter_map(|name| env.get(name).map(|v| (name.to_owned(), v.clone())))
            .collect();
        Ok(raw)
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
/// `OUTBOX_LEASE_MIN_TTL` → `lease.min_ttl`, `OUTBOX_TELEMETRY_SAMPLING_RATIO` →
/// `telemetry.sampling_ratio`, `OUTBOX_CONSOLE_ENABLED` → `console.enabled`,
/// `OUTBOX_CONSOLE_SESSION_KEY` → `console.session_key`. Numbers (`4`, `0.25`) and booleans
/// keep their type.
fn apply_env(table: &mut toml::Table, env: &HashMap<String, String>) {
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("OUTBOX_") else {
            continue;
        };
        let sections = ["DATABASE", "DISPATCHER", "LEASE", "TELEMETRY", "CONSOLE"];
        let Some((section, key)) = sections.iter().find_map(|s| {
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
                _ => match decimal(value) {
                    Some(x) => toml::Value::Float(x),
                    None => toml::Value::String(value.clone()),
                },
            },
        };
        if let Some(toml::Value::Table(t)) = table.get_mut(&section) {
            t.insert(key, typed);
        }
    }
}

/// `value` as a number when it is written like `0.25` (digits, one point, digits): never
/// `inf`, `nan` or `1e5`, which are more likely text.
fn decimal(value: &str) -> Option<f64> {
    let (whole, part) = value.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && digits(part))
        .then(|| value.parse().ok())
        .flatten()
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::config::fixtures::env;

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
        let console = env(&[("OUTBOX_CONSOLE_ENABLED", "true")]);
        let raw = RawConfig::load(None, &console).unwrap();
        assert!(
            raw.console.enabled,
            "OUTBOX_CONSOLE_ENABLED is read as a boolean"
        );
    }

    #[test]
    fn telemetry_keys_come_from_the_environment_too() {
        let e = env(&[
            ("OUTBOX_TELEMETRY_OTLP_ENDPOINT", "http://collector:4318"),
            ("OUTBOX_TELEMETRY_SAMPLING_RATIO", "0.25"),
            ("OUTBOX_TELEMETRY_QUEUE_SIZE", "64"),
            ("OTEL_SERVICE_NAME", ""),
        ]);
        let raw = RawConfig::load(None, &e).unwrap();
        assert_eq!(raw.telemetry.otlp_endpoint, "http://collector:4318");
        assert_eq!(raw.telemetry.sampling_ratio, 0.25);
        assert_eq!(raw.telemetry.queue_size, 64);
        assert_eq!(
            raw.otel,
            OtelEnv::default(),
            "an empty variable counts as unset"
        );
        for text in ["1e5", "inf", "nan", ".5", "1.", "1.2.3"] {
            assert_eq!(decimal(text), None, "{text}");
        }
    }

    #[test]
    fn interpolation_escapes_and_rejects_unclosed_references() {
        let e = env(&[("A", "1")]);
        assert_eq!(interpolate("x${A}y$${A}z$", &e, "k").unwrap(), "x1y${A}z$");
        assert!(interpolate("${A", &e, "k").is_err());
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
