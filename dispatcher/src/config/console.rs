//! `[console]` checked: where it is served, how often it reloads, the login its pool uses, and
//! who signs in (users with argon2 password hashes, a trusted proxy header) with the key their
//! sessions are signed with. Errors name the key and never quote a hash, a key or a URL.

use std::time::Duration;

use argon2::PasswordHash;
use http::HeaderName;

use super::parse::{bounded_duration, duration};
use super::raw::{RawConsole, RawConsoleUser};
use super::{ConfigError, ConsoleConfig, ConsoleRole, ConsoleUser, DispatcherConfig, Secret, err};

/// The shortest session key: HMAC-SHA-256's own strength.
const MIN_KEY_BYTES: usize = 32;

/// `[console]`: served on `dispatcher.listen`, so it needs one; `refresh` 0s, or 1s..=1h; its
/// logins. `read_keys`: whether `session_key_file` is read (not by `outboxctl`, whose user may
/// not read it).
pub(super) fn console(
    raw: &RawConsole,
    dispatcher: &DispatcherConfig,
    backend: outbox_store::Backend,
    read_keys: bool,
) -> Result<ConsoleConfig, ConfigError> {
    if raw.enabled && dispatcher.listen.is_none() {
        return Err(err(
            "console.enabled",
            "the console is served on dispatcher.listen, which is empty: set both, or neither",
        ));
    }
    let refresh = duration("console.refresh", &raw.refresh)?;
    if !refresh.is_zero()
        && !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&refresh)
    {
        return Err(err(
            "console.refresh",
            "must be 0s (no reloads) or between 1s and 1h",
        ));
    }
    let mut users: Vec<ConsoleUser> = Vec::new();
    for (i, u) in raw.users.iter().enumerate() {
        let user = user(i, u)?;
        if users.iter().any(|other| other.name == user.name) {
            return Err(err(
                &format!("console.users[{i}].name"),
                format!("{} is listed twice", user.name),
            ));
        }
        users.push(user);
    }
    let (trusted_header, trusted_operators) = trusted(raw)?;
    let (session_key, session_key_source) = session_key(raw, read_keys)?;
    Ok(ConsoleConfig {
        enabled: raw.enabled,
        refresh,
        database_url: database_url(&raw.database_url, backend)?,
        users,
        trusted_header,
        trusted_operators,
        session_key,
        session_key_source,
        session_ttl: bounded_duration(
            "console.session_ttl",
            &raw.session_ttl,
            Duration::from_secs(60),
            Duration::from_secs(30 * 86_400),
        )?,
        secure_cookie: raw.secure_cookie,
    })
}

/// `[[console.users]]` number `i`.
fn user(i: usize, raw: &RawConsoleUser) -> Result<ConsoleUser, ConfigError> {
    let key = |field: &str| format!("console.users[{i}].{field}");
    name(&key("name"), &raw.name)?;
    let role = match raw.role.as_str() {
        "viewer" => ConsoleRole::Viewer,
        "operator" => ConsoleRole::Operator,
        _ => return Err(err(&key("role"), "must be viewer or operator")),
    };
    password_hash(&raw.password_hash).map_err(|why| {
        err(
            &key("password_hash"),
            format!("{why}; make one with `outboxctl console hash-password`"),
        )
    })?;
    Ok(ConsoleUser {
        name: raw.name.clone(),
        password_hash: Secret(raw.password_hash.clone()),
        role,
    })
}

/// A user's name as the console accepts it: 1 to 64 letters, digits, `.`, `_`, `@`, `-`.
fn name(key: &str, text: &str) -> Result<(), ConfigError> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-');
    if text.is_empty() || text.len() > 64 || !text.chars().all(fine) {
        return Err(err(
            key,
            "must be 1 to 64 letters, digits, '.', '_', '@' or '-'",
        ));
    }
    Ok(())
}

/// Whether `phc` is an argon2 PHC string the console can verify against, or why not.
fn password_hash(phc: &str) -> Result<(), String> {
    let parsed = PasswordHash::new(phc).map_err(|_| "is not a PHC string ($argon2id$…)")?;
    argon2::Algorithm::try_from(parsed.algorithm.as_str())
        .map_err(|_| "is not an argon2 hash ($argon2id$…)")?;
    argon2::Params::try_from(&parsed)
        .map_err(|e| format!("has parameters argon2 refuses ({e})"))?;
    if parsed.salt.is_none() || parsed.hash.is_none() {
        return Err("has no salt or no hash".to_owned());
    }
    Ok(())
}

/// `trusted_header` (empty: none) and `trusted_operators` (only beside a header).
fn trusted(raw: &RawConsole) -> Result<(Option<HeaderName>, Vec<String>), ConfigError> {
    let header = match raw.trusted_header.trim() {
        "" => None,
        text => Some(
            HeaderName::from_bytes(text.as_bytes())
                .map_err(|_| err("console.trusted_header", "is not an HTTP header name"))?,
        ),
    };
    if header.as_ref().is_some_and(|h| {
        matches!(
            h.as_str(),
            "cookie" | "host" | "authorization" | "content-type" | "content-length"
        )
    }) {
        return Err(err(
            "console.trusted_header",
            "must be a header of the proxy's own, such as X-Forwarded-User",
        ));
    }
    if header.is_none() && !raw.trusted_operators.is_empty() {
        return Err(err(
            "console.trusted_operators",
            "names operators of console.trusted_header, which is not set",
        ));
    }
    for (i, n) in raw.trusted_operators.iter().enumerate() {
        name(&format!("console.trusted_operators[{i}]"), n)?;
    }
    Ok((header, raw.trusted_operators.clone()))
}

/// `session_key` (or `OUTBOX_CONSOLE_SESSION_KEY`) or `session_key_file`, not both; at least
/// 32 bytes (surrounding whitespace trimmed). The file is read only when `read`.
fn session_key(
    raw: &RawConsole,
    read: bool,
) -> Result<(Option<Secret>, Option<String>), ConfigError> {
    let inline = raw.session_key.trim();
    let path = raw.session_key_file.trim();
    let (text, source) = match (inline.is_empty(), path.is_empty()) {
        (true, true) => return Ok((None, None)),
        (false, false) => {
            return Err(err(
                "console.session_key",
                "set session_key (or OUTBOX_CONSOLE_SESSION_KEY) or session_key_file, not both",
            ));
        }
        (false, true) => (inline.to_owned(), "session_key".to_owned()),
        (true, false) if !read => return Ok((None, Some(format!("file:{path}")))),
        (true, false) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                err(
                    "console.session_key_file",
                    format!("cannot read {path}: {}", e.kind()),
                )
            })?;
            (text.trim().to_owned(), format!("file:{path}"))
        }
    };
    if text.len() < MIN_KEY_BYTES {
        let key = if source == "session_key" {
            "console.session_key"
        } else {
            "console.session_key_file"
        };
        return Err(err(
            key,
            format!(
                "the key has {} bytes; it needs at least {MIN_KEY_BYTES} (e.g. `openssl rand -base64 32`)",
                text.len()
            ),
        ));
    }
    Ok((Some(Secret(text)), Some(source)))
}

/// `console.database_url`: empty for `database.url`; otherwise a URL of the same backend.
fn database_url(text: &str, backend: outbox_store::Backend) -> Result<Option<Secret>, ConfigError> {
    const KEY: &str = "console.database_url";
    if text.is_empty() {
        return Ok(None);
    }
    match outbox_store::backend_of(text) {
        Ok(b) if b == backend => Ok(Some(Secret(text.to_owned()))),
        Ok(_) => Err(err(
            KEY,
            "must be a URL of the database of database.url (the same backend), as another login",
        )),
        Err(e) => Err(err(KEY, e.reason)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::Config;
    use crate::config::fixtures::env;

    /// A real argon2id hash (cheap parameters) of "correct horse".
    const HASH: &str = "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$4b1M3uRoUm0nWbS4n5p3vA";
    const KEY: &str = "0123456789abcdef0123456789abcdef";

    fn load(console: &str, pairs: &[(&str, &str)]) -> Result<Config, String> {
        Config::load(Some(console), &env(pairs)).map_err(|e| e.to_string())
    }

    #[test]
    fn users_a_trusted_header_and_a_session_key_load() {
        let c = load(
            &format!(
                "[console]\ntrusted_header = \"X-Forwarded-User\"\ntrusted_operators = [\"bob\"]\nsession_ttl = \"1h\"\nsecure_cookie = true\n\
                 [[console.users]]\nname = \"alice\"\npassword_hash = \"{HASH}\"\nrole = \"operator\"\n\
                 [[console.users]]\nname = \"vic\"\npassword_hash = \"{HASH}\"\nrole = \"viewer\"\n"
            ),
            &[("OUTBOX_CONSOLE_SESSION_KEY", KEY)],
        )
        .unwrap();
        let k = &c.console;
        let users: Vec<(&str, &str)> = k
            .users
            .iter()
            .map(|u| (u.name.as_str(), u.role.as_str()))
            .collect();
        assert_eq!(users, [("alice", "operator"), ("vic", "viewer")]);
        assert_eq!(
            k.trusted_header.as_ref().map(|h| h.as_str()),
            Some("x-forwarded-user")
        );
        assert_eq!(k.trusted_operators, ["bob"]);
        assert_eq!(k.session_key.as_ref().map(|s| s.expose()), Some(KEY));
        assert_eq!(k.session_ttl, std::time::Duration::from_secs(3600));
        assert!(k.secure_cookie);
        let debug = format!("{c:?}");
        assert!(
            !debug.contains(KEY) && !debug.contains("c2FsdHNhbHRz"),
            "{debug}"
        );
    }

    #[test]
    fn the_session_key_file_is_read_by_the_dispatcher_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("session.key");
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        let text = format!("[console]\nsession_key_file = \"{}\"\n", file.display());
        let c = load(&text, &[]).unwrap();
        assert_eq!(
            c.console.session_key.as_ref().map(|s| s.expose()),
            Some(KEY)
        );
        let source = format!("file:{}", file.display());
        assert_eq!(
            c.console.session_key_source.as_deref(),
            Some(source.as_str())
        );
        let unreadable = "[console]\nsession_key_file = \"/nonexistent/session.key\"\n";
        let c = Config::load_without_keys(Some(unreadable), &HashMap::new()).unwrap();
        assert!(c.console.session_key.is_none());
        assert!(
            load(unreadable, &[])
                .unwrap_err()
                .contains("console.session_key_file: cannot read")
        );
    }

    #[test]
    fn bad_logins_are_refused_naming_the_key() {
        let user = |name: &str, hash: &str, role: &str| {
            format!(
                "[[console.users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\nrole = \"{role}\"\n"
            )
        };
        let cases = [
            (
                user("alice", "hunter2", "viewer"),
                "console.users[0].password_hash: is not a PHC string",
            ),
            (
                user(
                    "alice",
                    "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW",
                    "viewer",
                ),
                "console.users[0].password_hash",
            ),
            (
                user("alice", HASH, "admin"),
                "console.users[0].role: must be viewer or operator",
            ),
            (user("al ice", HASH, "viewer"), "console.users[0].name"),
            (
                format!(
                    "{}{}",
                    user("a", HASH, "viewer"),
                    user("a", HASH, "operator")
                ),
                "console.users[1].name: a is listed twice",
            ),
            (
                "[console]\nsession_key = \"short\"".to_owned(),
                "console.session_key: the key has 5 bytes; it needs at least 32",
            ),
            (
                format!("[console]\nsession_key = \"{KEY}\"\nsession_key_file = \"/k\""),
                "not both",
            ),
            (
                "[console]\ntrusted_operators = [\"bob\"]".to_owned(),
                "console.trusted_operators",
            ),
            (
                "[console]\ntrusted_header = \"bad header\"".to_owned(),
                "console.trusted_header",
            ),
            (
                "[console]\ntrusted_header = \"Cookie\"".to_owned(),
                "console.trusted_header",
            ),
            (
                "[console]\nsession_ttl = \"10s\"".to_owned(),
                "console.session_ttl",
            ),
            (
                "[console]\ndatabase_url = \"postgres://u:hunter2@db/outbox\"".to_owned(),
                "console.database_url: must be a URL of the database",
            ),
        ];
        for (text, says) in cases {
            let e = load(&text, &[]).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("hunter2") && !e.contains("$2b$"), "{e}");
        }
    }

    #[test]
    fn the_console_database_url_comes_from_the_environment_too() {
        let c = load(
            "[database]\nurl = \"postgres://dispatcher@db/outbox\"\n",
            &[(
                "OUTBOX_CONSOLE_DATABASE_URL",
                "postgres://operator:pw1@db/outbox",
            )],
        )
        .unwrap();
        assert_eq!(
            c.console.database_url.as_ref().map(|u| u.expose()),
            Some("postgres://operator:pw1@db/outbox")
        );
    }
}
