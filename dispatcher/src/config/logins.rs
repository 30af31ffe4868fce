//! `[console]`'s logins as the console serves them: the one place a checked `ConsoleConfig`
//! becomes the console's `Access`, for the dispatcher's listener and for `outboxctl web`.

use outbox_console::{Access, AccessError, Role, SessionKey};

use super::{ConsoleConfig, ConsoleRole};

impl ConsoleConfig {
    /// Who may sign in: read-only without users and trusted header; with logins, sessions
    /// signed with `session_key`, or with a random key (they then end with the process: see
    /// [`ConsoleConfig::random_session_key`]).
    pub fn access(&self) -> Result<Access, AccessError> {
        if self.users.is_empty() && self.trusted_header.is_none() {
            return Ok(Access::read_only());
        }
        let key = match &self.session_key {
            Some(k) => SessionKey::new(k.expose().as_bytes().to_vec())?,
            None => SessionKey::random()?,
        };
        let mut access = Access::logins(key)
            .session_ttl(self.session_ttl)
            .secure_cookie(self.secure_cookie);
        for u in &self.users {
            let role = match u.role {
                ConsoleRole::Viewer => Role::Viewer,
                ConsoleRole::Operator => Role::Operator,
            };
            access = access.user(&u.name, u.password_hash.expose(), role)?;
        }
        if let Some(header) = &self.trusted_header {
            access = access.trusted_header(header.clone(), self.trusted_operators.clone());
        }
        Ok(access)
    }

    /// Whether [`ConsoleConfig::access`] signs sessions with a random key: logins are on and
    /// no session key is configured, so sessions end when the process stops.
    pub fn random_session_key(&self) -> bool {
        (!self.users.is_empty() || self.trusted_header.is_some()) && self.session_key.is_none()
    }
}
