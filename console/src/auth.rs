//! Who is asking: a session cookie signed with the server's key (HMAC-SHA-256 over its id,
//! expiry, role and user), or a trusted proxy's header; the form tokens (CSRF) derived from
//! the session under the same key; and the gate that sends whoever is not signed in to the
//! login page. Signatures and tokens are compared in constant time (`Mac::verify_slice`).
//!
//! Sessions are stateless: signing out deletes the cookie in that browser only; a copied cookie
//! stays valid until it expires, or until the key changes (a restart, without a configured key).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit as _, Mac as _};

use crate::Console;
use crate::access::{Access, Role, SessionKey, valid_name};
use crate::error::PageError;
use crate::pages;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "outbox_console_session";
/// The login form's cookie: a random nonce its token is derived from (no session yet).
pub(crate) const LOGIN_COOKIE: &str = "outbox_console_login";

/// Someone signed in, for one request: who, with which role, and the token their forms carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    /// The user's name: checked, so safe in the admin log as `console:<user>`.
    pub(crate) user: String,
    pub(crate) role: Role,
    /// The CSRF token of this session's forms.
    pub(crate) csrf: String,
    /// What the token is bound to: the session's id, or the trusted header's user.
    scope: String,
}

/// A form that carries only its CSRF token (sign-out).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct TokenForm {
    pub(crate) csrf: Option<String>,
}

impl Principal {
    /// The actor recorded in `outbox_admin_log` for this user's actions.
    pub(crate) fn actor(&self) -> String {
        format!("console:{}", self.user)
    }

    /// Whether `token` is this session's CSRF token (constant time).
    pub(crate) fn accepts(&self, access: &Access, token: Option<&str>) -> bool {
        access
            .key
            .as_ref()
            .is_some_and(|key| csrf_ok(key, &self.scope, token))
    }

    /// What a page's chrome says about them.
    pub(crate) fn signed_in(&self, base: &str) -> pages::SignedIn {
        pages::SignedIn {
            user: self.user.clone(),
            role: self.role.as_str(),
            operator: self.role == Role::Operator,
            csrf: self.csrf.clone(),
            logout_action: format!("{base}/logout"),
        }
    }
}

/// A session as its cookie carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// 16 random bytes, hex: what the session's CSRF token is derived from.
    pub(crate) id: String,
    /// Seconds since the Unix epoch after which it is refused.
    pub(crate) expires: u64,
    pub(crate) role: Role,
    pub(crate) user: String,
}

impl Session {
    /// A new session of `user` with `role`, ending `ttl` seconds from now.
    pub(crate) fn start(user: &str, role: Role, ttl_secs: u64) -> Result<Session, PageError> {
        Ok(Session {
            id: random_hex()?,
            expires: now().saturating_add(ttl_secs),
            role,
            user: user.to_owned(),
        })
    }

    /// The cookie's value: the payload and its signature, each base64url. The signature also
    /// covers `credential`, the user's password hash as configured (not in the cookie): a new
    /// password ends every session signed before it.
    pub(crate) fn encode(&self, key: &SessionKey, credential: &str) -> String {
        let payload = format!(
            "1\n{}\n{}\n{}\n{}",
            self.id,
            self.expires,
            self.role.as_str(),
            self.user
        );
        let tag = sign(key, "session", &signed(payload.as_bytes(), credential));
        format!("{}.{}", B64.encode(payload), B64.encode(tag))
    }

    /// The session a cookie's value carries, if its signature is the key's over the payload
    /// and `credential_of` its user (the configured password hash), and it has not expired at
    /// `now`; `None` for anything else.
    pub(crate) fn decode<'a>(
        value: &str,
        key: &SessionKey,
        now: u64,
        credential_of: impl FnOnce(&str) -> Option<&'a str>,
    ) -> Option<Session> {
        let (payload, tag) = value.split_once('.')?;
        let payload = B64.decode(payload).ok()?;
        let tag = B64.decode(tag).ok()?;
        // The user is read to find its credential; nothing else is trusted before the check.
        let user = std::str::from_utf8(&payload).ok()?.splitn(5, '\n').nth(4)?;
        let credential = credential_of(user)?;
        verify(key, "session", &signed(&payload, credential), &tag).then_some(())?;
        let text = String::from_utf8(payload).ok()?;
        let mut fields = text.splitn(5, '\n');
        let (version, id, expires, role, user) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let expires: u64 = expires.parse().ok()?;
        if version != "1" || expires <= now {
            return None;
        }
        Some(Session {
            id: id.to_owned(),
            expires,
            role: Role::parse(role)?,
            user: user.to_owned(),
        })
    }
}

/// What a session's signature covers: its payload, then the user's credential.
fn signed(payload: &[u8], credential: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(payload.len() + 1 + credential.len());
    bytes.extend_from_slice(payload);
    bytes.push(b'\n');
    bytes.extend_from_slice(credential.as_bytes());
    bytes
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// 16 random bytes as hex.
pub(crate) fn random_hex() -> Result<String, PageError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(error = %e, "console: the system gave no random bytes");
        PageError::internal("the console could not make a random session id")
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// HMAC-SHA-256 of `purpose` and `data` under `key`: a purpose per use, so a token of one
/// kind is never accepted as another.
fn sign(key: &SessionKey, purpose: &str, data: &[u8]) -> Vec<u8> {
    mac(key, purpose, data).map_or_else(Vec::new, |m| m.finalize().into_bytes().to_vec())
}

fn verify(key: &SessionKey, purpose: &str, data: &[u8], tag: &[u8]) -> bool {
    mac(key, purpose, data).is_some_and(|m| m.verify_slice(tag).is_ok())
}

/// `None` never happens (HMAC takes keys of any length); if it did, nothing would verify.
fn mac(key: &SessionKey, purpose: &str, data: &[u8]) -> Option<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(key.bytes()).ok()?;
    mac.update(purpose.as_bytes());
    mac.update(&[0]);
    mac.update(data);
    Some(mac)
}

/// The CSRF token of forms bound to `scope` (a session id, a trusted user, a login nonce).
pub(crate) fn csrf_token(key: &SessionKey, scope: &str) -> String {
    B64.encode(sign(key, "csrf", scope.as_bytes()))
}

/// Whether `token` is the CSRF token of `scope`, compared in constant time.
pub(crate) fn csrf_ok(key: &SessionKey, scope: &str, token: Option<&str>) -> bool {
    let Some(tag) = token.and_then(|t| B64.decode(t.trim()).ok()) else {
        return false;
    };
    verify(key, "csrf", scope.as_bytes(), &tag)
}

/// The value of the cookie `name` among the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, under the console's base path,
/// `Secure` when configured; `max_age` 0 deletes it.
pub(crate) fn set_cookie(
    access: &Access,
    base: &str,
    name: &str,
    value: &str,
    max_age: u64,
) -> HeaderValue {
    let secure = if access.secure_cookie { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path={base}/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    );
    // The value is base64url or hex, the path the console's own: always a valid header.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
}

/// Who is asking, if anyone: the trusted header's user when one is configured and sent, else
/// the session cookie's (when its user is still configured; with the lower of the two roles,
/// so a demotion applies at once).
pub(crate) fn principal(access: &Access, headers: &HeaderMap) -> Option<Principal> {
    let key = access.key.as_ref()?;
    if let Some(name) = &access.trusted_header {
        // Once only: a proxy that adds its header instead of replacing the client's would
        // otherwise let the client's own value, which comes first, name the user.
        let mut values = headers.get_all(name).iter();
        let user = match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().map(str::trim).filter(|u| valid_name(u)),
            (Some(_), Some(_)) => return None,
            (None, _) => None,
        };
        if let Some(user) = user {
            let role = if access.trusted_operators.iter().any(|o| o == user) {
                Role::Operator
            } else {
                Role::Viewer
            };
            let scope = format!("header\n{user}");
            return Some(Principal {
                user: user.to_owned(),
                role,
                csrf: csrf_token(key, &scope),
                scope,
            });
        }
    }
    let session = Session::decode(cookie(headers, SESSION_COOKIE)?, key, now(), |user| {
        access.users.get(user).map(|u| u.password_hash.as_str())
    })?;
    let configured = access.users.get(&session.user)?;
    let scope = format!("session\n{}", session.id);
    Some(Principal {
        role: session.role.min(configured.role),
        csrf: csrf_token(key, &scope),
        scope,
        user: session.user,
    })
}

/// The gate in front of every route when logins are configured: the login page and the
/// stylesheet are open; anything else needs someone signed in (a GET without is sent to the
/// login page, any other method refused with 403). The principal goes into the request's
/// extensions for the handlers.
pub(crate) async fn gate(
    State(console): State<Console>,
    mut request: Request,
    next: Next,
) -> Response {
    let access = console.access();
    if !access.enabled() {
        return next.run(request).await;
    }
    let base = console.base();
    let path = request.uri().path();
    if path == format!("{base}/login") || path == format!("{base}/style.css") {
        return next.run(request).await;
    }
    match principal(access, request.headers()) {
        Some(p) => {
            request.extensions_mut().insert(p);
            next.run(request).await
        }
        None if access.has_passwords()
            && matches!(*request.method(), Method::GET | Method::HEAD) =>
        {
            Redirect::to(&format!("{base}/login")).into_response()
        }
        None => {
            let message = if access.has_passwords() {
                "sign in first"
            } else {
                "the console expects the authenticating proxy's header naming the user, and it is missing"
            };
            pages::error(&console, &PageError::forbidden(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SessionKey {
        SessionKey::new(vec![b; 32]).unwrap()
    }

    fn session(expires: u64) -> Session {
        Session {
            id: "00112233445566778899aabbccddeeff".into(),
            expires,
            role: Role::Operator,
            user: "alice".into(),
        }
    }

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2g";

    fn hash(_user: &str) -> Option<&'static str> {
        Some(HASH)
    }

    #[test]
    fn a_session_round_trips_until_it_expires_or_its_password_changes() {
        let s = session(1_000);
        let cookie = s.encode(&key(1), HASH);
        assert_eq!(Session::decode(&cookie, &key(1), 999, hash), Some(s));
        assert_eq!(
            Session::decode(&cookie, &key(1), 1_000, hash),
            None,
            "expired"
        );
        assert_eq!(
            Session::decode(&cookie, &key(2), 999, hash),
            None,
            "another key"
        );
        let changed = |_: &str| Some("$argon2id$v=19$m=19456,t=2,p=1$bmV3c2FsdA$bmV3aGFzaA");
        assert_eq!(
            Session::decode(&cookie, &key(1), 999, changed),
            None,
            "a new password"
        );
        assert_eq!(
            Session::decode(&cookie, &key(1), 999, |_| None),
            None,
            "no such user"
        );
    }

    #[test]
    fn a_tampered_or_malformed_cookie_is_refused() {
        let cookie = session(1_000).encode(&key(1), HASH);
        let (payload, tag) = cookie.split_once('.').unwrap();
        let forged = B64.encode(
            String::from_utf8(B64.decode(payload).unwrap())
                .unwrap()
                .replace("alice", "mallory"),
        );
        assert_eq!(
            Session::decode(&format!("{forged}.{tag}"), &key(1), 0, hash),
            None
        );
        for bad in ["", ".", "x.y", "%%%.%%%", &format!("{payload}."), payload] {
            assert_eq!(Session::decode(bad, &key(1), 0, hash), None, "{bad}");
        }
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_scope_and_key() {
        let t = csrf_token(&key(1), "session\nabc");
        assert!(csrf_ok(&key(1), "session\nabc", Some(&t)));
        assert!(!csrf_ok(&key(1), "session\nabd", Some(&t)));
        assert!(!csrf_ok(&key(2), "session\nabc", Some(&t)));
        assert!(!csrf_ok(&key(1), "session\nabc", None));
        assert!(!csrf_ok(&key(1), "session\nabc", Some("")));
        assert!(!csrf_ok(&key(1), "session\nabc", Some("not base64!")));
    }

    #[test]
    fn cookies_are_found_among_several_headers() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        h.append(
            header::COOKIE,
            HeaderValue::from_static("outbox_console_session=xyz"),
        );
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
