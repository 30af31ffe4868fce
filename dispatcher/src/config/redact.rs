//! The effective configuration as TOML for `check-config`, every secret shown as `***`:
//! header values, signing secrets, and the userinfo and password-like query parameters of
//! every URL, parsed or not.

use std::num::NonZeroU32;
use std::time::Duration;

use url::Url;

use super::{
    Config, ConsoleConfig, Destination, DispatcherConfig, EncryptionConfig, Secret, TelemetryConfig,
};

/// What [`Config::redacted`] prints: one table per section, then one per destination.
pub(super) fn config_toml(c: &Config) -> String {
    let mut out = database_and_lease(c);
    out += &dispatcher(&c.dispatcher);
    out += &console(&c.console);
    out += &telemetry(c.telemetry.as_ref());
    out += &encryption(&c.encryption);
    for dest in c.destinations.values() {
        out += &destination(dest);
    }
    out
}

/// A duration as the config writes it (`15s`, `1h 30m`).
fn h(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn database_and_lease(c: &Config) -> String {
    let url = redact_url(c.database_url.expose());
    let listen_url = c
        .database_listen_url
        .as_ref()
        .map(|u| redact_url(u.expose()))
        .unwrap_or_default();
    format!(
        "[database]\nurl = {url:?}\nlisten_url = {listen_url:?}\nmigrate = {}\nmax_connections = {}\n\n[lease]\nmin_ttl = {:?}\nmax_ttl = {:?}\n\n",
        c.migrate,
        c.max_connections,
        h(c.lease_bounds.min()),
        h(c.lease_bounds.max())
    )
}

fn dispatcher(d: &DispatcherConfig) -> String {
    format!(
        "[dispatcher]\npartitions = {}\nlease_ttl = {:?}\npoll_interval = {:?}\nmax_in_flight = {}\nclaim_batch = {}\nclaim_ahead = {}\nmax_body_bytes = {}\nshutdown_grace = {:?}\nretention = {:?}\nerase_after = {:?}\nlisten = {:?}\n",
        d.partitions,
        h(d.lease_ttl),
        h(d.poll_interval),
        d.max_in_flight,
        d.claim_batch,
        d.claim_ahead,
        d.max_body_bytes,
        h(d.shutdown_grace),
        h(d.retention),
        h(d.erase_after.unwrap_or_default()),
        d.listen.map(|a| a.to_string()).unwrap_or_default()
    )
}

/// Where each key comes from (a path or a variable's name), never the key.
fn encryption(e: &EncryptionConfig) -> String {
    let keys: Vec<String> = e
        .sources
        .iter()
        .map(|(id, source)| format!("{id} = {source:?}"))
        .collect();
    format!("\n[encryption]\nkeys = {{ {} }}\n", keys.join(", "))
}

/// `[console]`: its database URL redacted like the others, the session key as `***` (or its
/// file's path), each user's password hash as `***`.
fn console(c: &ConsoleConfig) -> String {
    let database_url = c
        .database_url
        .as_ref()
        .map(|u| redact_url(u.expose()))
        .unwrap_or_default();
    let source = c.session_key_source.as_deref().unwrap_or("");
    let (key, file) = match source.strip_prefix("file:") {
        Some(path) => ("", path),
        None if source.is_empty() => ("", ""),
        None => ("***", ""),
    };
    let mut out = format!(
        "\n[console]\nenabled = {}\nrefresh = {:?}\ndatabase_url = {database_url:?}\ntrusted_header = {:?}\ntrusted_operators = {:?}\nsession_key = {key:?}\nsession_key_file = {file:?}\nsession_ttl = {:?}\nsecure_cookie = {}\n",
        c.enabled,
        h(c.refresh),
        c.trusted_header.as_ref().map_or("", |h| h.as_str()),
        c.trusted_operators,
        h(c.session_ttl),
        c.secure_cookie
    );
    for u in &c.users {
        out += &format!(
            "\n[[console.users]]\nname = {:?}\npassword_hash = \"***\"\nrole = {:?}\n",
            u.name,
            u.role.as_str()
        );
    }
    out
}

/// The effective `[telemetry]`: the endpoint spans go to (after the `OTEL_*` variables), or
/// an empty one while traces are off.
fn telemetry(t: Option<&TelemetryConfig>) -> String {
    let Some(t) = t else {
        return "\n[telemetry]\n# traces are off\notlp_endpoint = \"\"\n".to_owned();
    };
    let ratio = t
        .sampler
        .ratio()
        .map(|r| format!("sampling_ratio = {r:?}\n"))
        .unwrap_or_default();
    format!(
        "\n[telemetry]\notlp_endpoint = {:?}\nservice_name = {:?}\nsampler = {:?}\n{ratio}queue_size = {}\nexport_timeout = {:?}\n",
        redact_url(t.endpoint.expose()),
        t.service_name,
        t.sampler.name(),
        t.queue_size,
        h(t.export_timeout)
    )
}

fn destination(dest: &Destination) -> String {
    let headers: Vec<String> = dest
        .headers
        .iter()
        .map(|(n, _)| format!("{:?} = \"***\"", n.as_str()))
        .collect();
    let r = &dest.retry;
    format!(
        "\n[destinations.{}]\nbase_url = {:?}\ntimeout = {:?}\nmax_in_flight = {}\n{}{}headers = {{ {} }}\nidempotency_header = {:?}\n{}retry = {{ base = {:?}, cap = {:?}, max_attempts = {}, max_age = {:?}, retry_statuses = {:?} }}\n",
        dest.name,
        redact_url(dest.base_url.as_str()),
        h(dest.timeout),
        dest.max_in_flight,
        rate_limit_line(dest.rate_limit),
        proxy_line(dest.proxy.as_ref()),
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
    )
}

/// `rate_limit = "100/s"` and its newline, or nothing when unlimited.
fn rate_limit_line(rate_limit: Option<(NonZeroU32, Duration)>) -> String {
    rate_limit
        .map(|(n, per)| {
            format!(
                "rate_limit = \"{n}/{}\"\n",
                match per.as_secs() {
                    60 => "m",
                    3600 => "h",
                    _ => "s",
                }
            )
        })
        .unwrap_or_default()
}

/// `proxy = "…"` with its credentials redacted and its newline, or nothing without a proxy.
fn proxy_line(proxy: Option<&Secret>) -> String {
    proxy
        .map(|p| format!("proxy = {:?}\n", redact_url(p.expose())))
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::fixtures::{FULL, env};

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
                "mssql://sa:pw@h:1433/outbox?TrustServerCertificate=true&Encrypt=strict",
                "mssql://***@h:1433/outbox?TrustServerCertificate=true&Encrypt=strict",
            ),
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
    fn check_config_shows_the_console_and_it_loads_again() {
        let file = "[console]\nenabled = true\nrefresh = \"0s\"\n";
        let c = Config::load(Some(file), &HashMap::new()).unwrap();
        let shown = c.redacted();
        assert!(
            shown.contains("\n[console]\nenabled = true\nrefresh = \"0s\"\n"),
            "{shown}"
        );
        let again = Config::load(Some(&shown), &HashMap::new()).unwrap();
        assert_eq!(again.console, c.console);
        assert!(
            Config::load(None, &HashMap::new())
                .unwrap()
                .redacted()
                .contains("[console]\nenabled = false\nrefresh = \"10s\"\n")
        );
    }

    #[test]
    fn check_config_shows_no_console_secret() {
        let hash = "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$4b1M3uRoUm0nWbS4n5p3vA";
        let file = format!(
            "[database]\nurl = \"postgres://dispatcher:pw1@db/outbox\"\n[console]\ndatabase_url = \"postgres://operator:pw2@db/outbox?password=pw3\"\n\
             session_key = \"pw4-0123456789abcdef0123456789abcdef\"\n\
             [[console.users]]\nname = \"alice\"\npassword_hash = \"{hash}\"\nrole = \"operator\"\n"
        );
        let c = Config::load(Some(&file), &HashMap::new()).unwrap();
        let shown = c.redacted();
        for secret in ["pw1", "pw2", "pw3", "pw4", "operator:", "c2FsdHNhbHRz"] {
            assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
            assert!(!format!("{c:?}").contains(secret), "{secret} in Debug");
        }
        assert!(
            shown.contains("database_url = \"postgres://***@db/outbox?password=***\"\n"),
            "{shown}"
        );
        assert!(shown.contains("session_key = \"***\"\n"), "{shown}");
        assert!(
            shown.contains("[[console.users]]\nname = \"alice\"\npassword_hash = \"***\"\nrole = \"operator\"\n"),
            "{shown}"
        );
    }

    #[test]
    fn check_config_shows_the_telemetry_endpoint_without_its_credentials() {
        let file = "[telemetry]\notlp_endpoint = \"https://tenant:pw1@otel.example/otlp?api_key=pw2&region=eu\"\nsampling_ratio = 0.5\n";
        let c = Config::load(Some(file), &HashMap::new()).unwrap();
        let shown = c.redacted();
        for secret in ["tenant", "pw1", "pw2"] {
            assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
            assert!(!format!("{c:?}").contains(secret), "{secret} in Debug");
        }
        assert!(
            shown.contains(
                "otlp_endpoint = \"https://***@otel.example/otlp/v1/traces?api_key=***&region=eu\"\n"
            ) && shown.contains("sampling_ratio = 0.5\n"),
            "{shown}"
        );
        // What it prints loads again, to the same settings.
        let again = Config::load(Some(&shown.replace("***", "x")), &HashMap::new()).unwrap();
        assert_eq!(
            again.telemetry.unwrap().sampler,
            c.telemetry.unwrap().sampler
        );
        let off = Config::load(None, &HashMap::new()).unwrap().redacted();
        assert!(
            off.contains("[telemetry]\n# traces are off\notlp_endpoint = \"\"\n"),
            "{off}"
        );
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
}
