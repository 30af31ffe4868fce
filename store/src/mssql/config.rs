//! `mssql://user:password@host:port/database?Key=value&…` to a tiberius [`Config`]: the URL's
//! parts give the server, the login and the database; its query takes the keys of an ADO.NET
//! connection string (`TrustServerCertificate`, `Encrypt`, `Application Name`, timeouts…).
//! Unknown keys are refused by name, never echoed with their values: a URL may hold a password.

use std::time::Duration;

use tiberius::{AuthMethod, Config};
use url::Url;

use crate::error::InvalidInput;

/// What a SQL Server URL says: the driver's configuration and the timeouts it does not keep.
#[derive(Debug, Clone)]
pub(crate) struct MssqlUrl {
    /// Server, login, database, TLS and command timeout.
    pub(crate) config: Config,
    /// How long opening a connection (TCP, TLS and login) may take. ADO.NET's
    /// `Connect Timeout`; default 15 s, as there.
    pub(crate) connect_timeout: Duration,
    /// `AllowBabelfishForTests=true`: the store may run on Babelfish for PostgreSQL, which
    /// ignores locking hints, so the fence does not hold there (G4, G9). Off by default:
    /// connecting to Babelfish is refused (see `MsStore::connect`). For test servers only.
    pub(crate) allow_babelfish: bool,
}

/// The ADO.NET keys a URL's query may carry, lowercased, and what they set.
const PASSED_TO_DRIVER: &[&str] = &[
    "trustservercertificate",
    "trust server certificate",
    "trustservercertificateca",
    "hostnameincertificate",
    "hostname in certificate",
    "encrypt",
    "application name",
    "applicationname",
    "applicationintent",
    "application intent",
    "workstation id",
    "workstationid",
    "multisubnetfailover",
    "multi subnet failover",
];

/// Keys that belong in the URL's own parts.
const IN_THE_URL: &[&str] = &[
    "server",
    "data source",
    "address",
    "addr",
    "network address",
    "user",
    "user id",
    "uid",
    "username",
    "password",
    "pwd",
    "database",
    "initial catalog",
    "databasename",
];

impl MssqlUrl {
    /// Parses `url`; `application_name` is used unless the URL names one.
    pub(crate) fn parse(url: &str, application_name: &str) -> Result<MssqlUrl, InvalidInput> {
        let invalid = |reason: &str| InvalidInput::new("database_url", reason.to_owned());
        let parsed = Url::parse(url).map_err(|e| {
            InvalidInput::new("database_url", format!("is not a valid mssql:// URL ({e})"))
        })?;
        if !matches!(parsed.scheme(), "mssql" | "sqlserver") {
            return Err(invalid("expected a URL starting with mssql://"));
        }
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid("names no server: mssql://user:password@host:1433/database"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let user = decode(parsed.username(), "the user name")?;
        let password = decode(parsed.password().unwrap_or(""), "the password")?;
        let database = decode(parsed.path().trim_start_matches('/'), "the database name")?;
        if database.contains('/') {
            return Err(invalid(
                "has a path with more than one part: only /database",
            ));
        }

        let mut ado = String::new();
        let mut connect_timeout = Duration::from_secs(15);
        let mut command_timeout = Some(Duration::from_secs(30));
        let mut packet_size = None;
        let mut named_application = false;
        let mut allow_babelfish = false;
        for (key, value) in parsed.query_pairs() {
            let name = key.trim().to_ascii_lowercase();
            let value = value.trim();
            match name.as_str() {
                "connect timeout" | "connection timeout" | "connecttimeout" | "timeout" => {
                    connect_timeout = seconds(&key, value)?
                        .ok_or_else(|| invalid("Connect Timeout must be at least 1 second"))?;
                }
                "command timeout" | "commandtimeout" => command_timeout = seconds(&key, value)?,
                "packet size" | "packetsize" => {
                    let size = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (512..=32767).contains(n))
                        .ok_or_else(|| invalid("Packet Size must be 512..=32767 bytes"))?;
                    packet_size = Some(size);
                }
                "allowbabelfishfortests" | "allow babelfish for tests" => {
                    allow_babelfish = match value.to_ascii_lowercase().as_str() {
                        "true" | "yes" => true,
                        "false" | "no" => false,
                        _ => return Err(invalid("AllowBabelfishForTests must be true or false")),
                    };
                }
                n if PASSED_TO_DRIVER.contains(&n) => {
                    named_application |=
                        n.starts_with("application name") || n == "applicationname";
                    ado.push_str(&ado_pair(n, &normalise(n, value)));
                }
                n if IN_THE_URL.contains(&n) => {
                    return Err(InvalidInput::new(
                        "database_url",
                        format!(
                            "sets {key} in its query: the server, user, password and database \
                             are the URL's own parts (mssql://user:password@host:1433/database)"
                        ),
                    ));
                }
                _ => {
                    return Err(InvalidInput::new(
                        "database_url",
                        format!(
                            "has the unknown key {}; known: TrustServerCertificate, Encrypt, \
                             TrustServerCertificateCA, HostNameInCertificate, Application Name, \
                             ApplicationIntent, Workstation ID, MultiSubnetFailover, \
                             Connect Timeout, Command Timeout, Packet Size, \
                             AllowBabelfishForTests",
                            shown_key(&key)
                        ),
                    ));
                }
            }
        }
        // The driver parses the ADO.NET keys itself, so they mean what they mean there; the
        // secrets never pass through that text.
        let mut config = Config::from_ado_string(&ado).map_err(|e| {
            InvalidInput::new(
                "database_url",
                format!("has a connection option the driver refuses: {e}"),
            )
        })?;
        config.host(host);
        config.port(parsed.port().unwrap_or(1433));
        if !database.is_empty() {
            config.database(&database);
        }
        config.authentication(AuthMethod::sql_server(&user, &password));
        if !named_application {
            config.application_name(application_name);
        }
        config.command_timeout(command_timeout);
        if let Some(size) = packet_size {
            config.packet_size(size);
        }
        Ok(MssqlUrl {
            config,
            connect_timeout,
            allow_babelfish,
        })
    }
}

/// A percent-decoded URL part.
fn decode(part: &str, what: &str) -> Result<String, InvalidInput> {
    percent_decode(part).ok_or_else(|| {
        InvalidInput::new(
            "database_url",
            format!("has {what} percent-encoded as bytes that are not UTF-8"),
        )
    })
}

/// `%XX` sequences to bytes, the result as UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// ADO.NET's newer `Encrypt` words, in the driver's: `Mandatory` is `true`, `Optional` `false`.
fn normalise(key: &str, value: &str) -> String {
    if key == "encrypt" {
        if value.eq_ignore_ascii_case("mandatory") {
            return "true".to_owned();
        }
        if value.eq_ignore_ascii_case("optional") {
            return "false".to_owned();
        }
    }
    value.to_owned()
}

/// `key="value";` with the value quoted as an ADO.NET connection string quotes it.
fn ado_pair(key: &str, value: &str) -> String {
    format!("{key}=\"{}\";", value.replace('"', "\"\""))
}

/// A timeout in whole seconds; `0` means none.
fn seconds(key: &str, value: &str) -> Result<Option<Duration>, InvalidInput> {
    let n: u64 = value.parse().map_err(|_| {
        InvalidInput::new(
            "database_url",
            format!("{} must be a whole number of seconds", shown_key(key)),
        )
    })?;
    Ok((n > 0).then(|| Duration::from_secs(n)))
}

/// A key as an error may show it: letters, digits and spaces only, else a placeholder (a
/// mistyped URL could have put a secret where a key belongs).
fn shown_key(key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 40
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '_');
    if plain {
        key.to_owned()
    } else {
        "(a key that is not shown)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<MssqlUrl, InvalidInput> {
        MssqlUrl::parse(url, "fenced-outbox")
    }

    #[test]
    fn the_url_parts_give_server_login_and_database() {
        let u =
            parse("mssql://sa:p%40ss%3Bw%3Drd@db.example:14330/outbox?TrustServerCertificate=true")
                .unwrap();
        assert_eq!(u.config.get_addr(), "db.example:14330");
        let debug = format!("{:?}", u.config);
        assert!(debug.contains("outbox"), "{debug}");
        assert!(
            !debug.contains("p@ss"),
            "the password must not show in Debug: {debug}"
        );
        assert_eq!(u.connect_timeout, Duration::from_secs(15));
        assert_eq!(
            u.config.get_command_timeout(),
            Some(Duration::from_secs(30))
        );
        let default_port = parse("sqlserver://sa:x@localhost/outbox").unwrap();
        assert_eq!(default_port.config.get_addr(), "localhost:1433");
    }

    #[test]
    fn ado_net_keys_are_read_as_ado_net_reads_them() {
        for url in [
            "mssql://sa:x@h/db?TrustServerCertificate=true&Encrypt=false",
            "mssql://sa:x@h/db?trustservercertificate=yes&encrypt=Optional",
            "mssql://sa:x@h/db?Encrypt=Mandatory&Application%20Name=billing",
            "mssql://sa:x@h/db?Encrypt=strict&HostNameInCertificate=db.example",
            "mssql://sa:x@h/db?ApplicationIntent=ReadOnly&MultiSubnetFailover=true",
        ] {
            parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        let u =
            parse("mssql://sa:x@h/db?Connect%20Timeout=3&Command%20Timeout=0&Packet%20Size=8192")
                .unwrap();
        assert_eq!(u.connect_timeout, Duration::from_secs(3));
        assert_eq!(u.config.get_command_timeout(), None);
        assert_eq!(u.config.get_packet_size(), Some(8192));
        assert!(!u.allow_babelfish);
        for (url, allowed) in [
            ("mssql://sa:x@h/db?AllowBabelfishForTests=true", true),
            (
                "mssql://sa:x@h/db?allow%20babelfish%20for%20tests=Yes",
                true,
            ),
            ("mssql://sa:x@h/db?AllowBabelfishForTests=false", false),
        ] {
            assert_eq!(parse(url).unwrap().allow_babelfish, allowed, "{url}");
        }
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_secrets() {
        let cases = [
            ("mssql:///db", "names no server"),
            (
                "mssql://sa:hunter2@h/db?Password=hunter2",
                "URL's own parts",
            ),
            (
                "mssql://sa:hunter2@h/db?TrustServerCertifcate=true",
                "unknown key TrustServerCertifcate",
            ),
            ("mssql://sa:hunter2@h/db?hunter2%3Bx=1", "not shown"),
            (
                "mssql://sa:hunter2@h/db?Encrypt=sometimes",
                "driver refuses",
            ),
            (
                "mssql://sa:hunter2@h/db?Connect%20Timeout=soon",
                "whole number",
            ),
            ("mssql://sa:hunter2@h/db/extra", "more than one part"),
            ("mssql://sa:hunter2@h/db?Packet%20Size=1", "Packet Size"),
            (
                "mssql://sa:hunter2@h/db?AllowBabelfishForTests=1",
                "true or false",
            ),
            (
                "mssql://sa:hunter2@h/db?TrustServerCertificate=true&TrustServerCertificateCA=/ca.pem",
                "driver refuses",
            ),
        ];
        for (url, expected) in cases {
            let err = parse(url).expect_err(url);
            assert_eq!(err.field, "database_url");
            assert!(err.reason.contains(expected), "{url}: {}", err.reason);
            assert!(!err.reason.contains("hunter2"), "{url}: {}", err.reason);
        }
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("a%20b%2").as_deref(), Some("a b%2"));
        assert_eq!(percent_decode("%zz").as_deref(), Some("%zz"));
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
        assert_eq!(percent_decode("%FF"), None);
    }
}
