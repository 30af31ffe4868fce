//! Who may use the console, as configured: users with password hashes and a role each, a
//! trusted header set by an authenticating proxy, the key sessions are signed with. With
//! neither users nor a trusted header the console is read-only and open, as it always was.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use axum::http::HeaderName;

use crate::password;

/// What a signed-in user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads every page; no forms.
    Viewer,
    /// Reads, and replays, cancels, pauses and resumes, each logged with a reason.
    Operator,
}

impl Role {
    /// `viewer` or `operator`, as the configuration writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }

    /// The role named `text`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

/// A configuration of logins that cannot be used, and why. Never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessError(String);

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AccessError {}

/// The key sessions and form tokens are signed with (HMAC-SHA-256): at least
/// [`SessionKey::MIN_BYTES`] bytes. `Debug` shows no byte of it.
#[derive(Clone)]
pub struct SessionKey(Vec<u8>);

impl SessionKey {
    /// The shortest key accepted: HMAC-SHA-256's own strength.
    pub const MIN_BYTES: usize = 32;

    /// `bytes` as the key; refused when shorter than [`SessionKey::MIN_BYTES`].
    pub fn new(bytes: Vec<u8>) -> Result<SessionKey, AccessError> {
        if bytes.len() < SessionKey::MIN_BYTES {
            return Err(AccessError(format!(
                "the session key has {} bytes; it needs at least {}",
                bytes.len(),
                SessionKey::MIN_BYTES
            )));
        }
        Ok(SessionKey(bytes))
    }

    /// A random key of 32 bytes from the system: sessions signed with it end with the process.
    pub fn random() -> Result<SessionKey, AccessError> {
        let mut bytes = vec![0u8; SessionKey::MIN_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| AccessError(format!("no random session key from the system: {e}")))?;
        Ok(SessionKey(bytes))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(***)")
    }
}

/// A user who signs in with a password.
#[derive(Clone)]
pub(crate) struct User {
    /// The PHC string of the password's argon2 hash.
    pub(crate) password_hash: String,
    pub(crate) role: Role,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User {{ role: {:?}, password_hash: *** }}", self.role)
    }
}

/// Who may use the console. [`Access::read_only`] (the default) has no logins: every page is
/// open and nothing can be changed. [`Access::logins`] with users or a trusted header makes
/// every page need a signed-in viewer or operator, and gives operators the action forms.
#[derive(Debug, Clone)]
pub struct Access {
    pub(crate) users: BTreeMap<String, User>,
    pub(crate) trusted_header: Option<HeaderName>,
    pub(crate) trusted_operators: Vec<String>,
    pub(crate) key: Option<SessionKey>,
    pub(crate) session_ttl: Duration,
    pub(crate) secure_cookie: bool,
}

impl Default for Access {
    fn default() -> Self {
        Access::read_only()
    }
}

impl Access {
    /// How long a session lasts unless configured: 12 hours, a working day.
    pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

    /// No logins: the console reads and changes nothing, as `outboxctl web` always did.
    pub fn read_only() -> Access {
        Access {
            users: BTreeMap::new(),
            trusted_header: None,
            trusted_operators: Vec::new(),
            key: None,
            session_ttl: Access::DEFAULT_SESSION_TTL,
            secure_cookie: false,
        }
    }

    /// Logins whose sessions and form tokens are signed with `key`; add users with
    /// [`Access::user`] or a proxy's header with [`Access::trusted_header`].
    pub fn logins(key: SessionKey) -> Access {
        Access {
            key: Some(key),
            ..Access::read_only()
        }
    }

    /// Adds a user who signs in with the password `password_hash` (an argon2 PHC string) was
    /// made from. Names are 1 to 64 letters, digits, `.`, `_`, `@` or `-`, each once.
    pub fn user(
        mut self,
        name: &str,
        password_hash: &str,
        role: Role,
    ) -> Result<Access, AccessError> {
        check_name(name)?;
        password::check(password_hash)
            .map_err(|why| AccessError(format!("user {name}: the password hash is {why}")))?;
        if self.users.contains_key(name) {
            return Err(AccessError(format!("user {name} is listed twice")));
        }
        let user = User {
            password_hash: password_hash.to_owned(),
            role,
        };
        self.users.insert(name.to_owned(), user);
        Ok(self)
    }

    /// Trusts `header`, set by an authenticating proxy in front of the console, to name the
    /// user: `operators` are operators, anyone else a viewer. Only behind a proxy that removes
    /// the header from what clients send: otherwise anyone can claim any name.
    pub fn trusted_header(mut self, header: HeaderName, operators: Vec<String>) -> Access {
        self.trusted_header = Some(header);
        self.trusted_operators = operators;
        self
    }

    /// How long a session lasts after signing in (then the user signs in again).
    pub fn session_ttl(mut self, ttl: Duration) -> Access {
        self.session_ttl = ttl;
        self
    }

    /// Whether the session cookie is `Secure` (sent over HTTPS only): set it when the
    /// console is reached over HTTPS, as it should be from anywhere but loopback.
    pub fn secure_cookie(mut self, secure: bool) -> Access {
        self.secure_cookie = secure;
        self
    }

    /// Whether anyone must sign in: some user or a trusted header is configured.
    pub fn enabled(&self) -> bool {
        self.key.is_some() && (!self.users.is_empty() || self.trusted_header.is_some())
    }

    /// Whether the login form is offered (some user signs in with a password).
    pub(crate) fn has_passwords(&self) -> bool {
        !self.users.is_empty()
    }
}

/// A user name as configured or as a trusted header gives it.
fn check_name(name: &str) -> Result<(), AccessError> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(fine) {
        return Err(AccessError(format!(
            "user name {:?} must be 1 to 64 letters, digits, '.', '_', '@' or '-'",
            crate::text::clip(name, 80)
        )));
    }
    Ok(())
}

/// Whether `name` is a user name the console accepts (from a trusted header too).
pub(crate) fn valid_name(name: &str) -> bool {
    check_name(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_need_a_long_key_valid_names_and_hashes() {
        assert!(SessionKey::new(vec![7; 31]).is_err());
        let key = SessionKey::new(vec![7; 32]).unwrap();
        assert_eq!(format!("{key:?}"), "SessionKey(***)");
        assert!(!Access::read_only().enabled());
        assert!(!Access::logins(key.clone()).enabled(), "no user, no header");
        let hash = "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$8d8hXyQfH6X8b0r6mKq5ZQ";
        for bad in ["", "a b", "<x>", &"a".repeat(65)] {
            assert!(
                Access::logins(key.clone())
                    .user(bad, hash, Role::Viewer)
                    .is_err(),
                "{bad}"
            );
        }
        let e = Access::logins(key.clone())
            .user("alice", "hunter2", Role::Viewer)
            .unwrap_err();
        assert!(e.to_string().contains("password hash") && !e.to_string().contains("hunter2"));
        assert!(Role::parse("admin").is_none());
        assert_eq!(Role::parse("operator"), Some(Role::Operator));
    }
}
