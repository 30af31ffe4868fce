//! Signing in and out: `GET <base>/login` (the form, with a token bound to a nonce cookie, as
//! there is no session yet), `POST <base>/login` (checks the token, then the password against
//! the user's argon2 hash, then sets the session cookie) and `POST <base>/logout`.
//!
//! A failed sign-in says one thing whatever was wrong, and answers only after a fixed delay;
//! at most two password checks run at once in the process, the delay included, so guessing is
//! slow and the hashing cannot take every core.

use std::sync::LazyLock;
use std::time::Duration;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use tokio::sync::Semaphore;

use crate::Console;
use crate::access::Role;
use crate::auth::{self, LOGIN_COOKIE, Principal, SESSION_COOKIE, Session};
use crate::error::PageError;
use crate::pages::{self, Chrome, LoginPage};

/// How long a failed sign-in waits before it answers.
const FAILURE_DELAY: Duration = Duration::from_millis(500);
/// How long the login form's nonce cookie lives: an hour to type a password.
const LOGIN_COOKIE_SECS: u64 = 3600;

/// Password checks running at once, in this process.
static CHECKS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(2));
/// How long a sign-in waits for a check's turn before it fails: a flood of wrong passwords
/// slows sign-ins down but never queues them without end.
const CHECK_WAIT: Duration = Duration::from_secs(5);
/// The longest password checked; longer ones fail without hashing.
const PASSWORD_MAX_BYTES: usize = 1024;

/// The sign-in form's fields.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct LoginForm {
    csrf: Option<String>,
    user: Option<String>,
    password: Option<String>,
}

/// `GET <base>/login`: the form (404 when no user signs in with a password: the proxy's
/// header is then the only way in).
pub(crate) async fn form(State(c): State<Console>, headers: HeaderMap) -> Response {
    if !c.access().has_passwords() {
        return pages::error(
            &c,
            &PageError::not_found("no user signs in with a password here"),
        );
    }
    let existing = auth::cookie(&headers, LOGIN_COOKIE).filter(|n| is_nonce(n));
    let nonce = match existing {
        Some(n) => n.to_owned(),
        None => match auth::random_hex() {
            Ok(n) => n,
            Err(e) => return pages::error(&c, &e),
        },
    };
    login_page(&c, &nonce, "", false, StatusCode::OK)
}

/// `POST <base>/login`: the token first, then the user and password.
pub(crate) async fn submit(
    State(c): State<Console>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let Some(key) = c
        .access()
        .key
        .as_ref()
        .filter(|_| c.access().has_passwords())
    else {
        return pages::error(
            &c,
            &PageError::not_found("no user signs in with a password here"),
        );
    };
    let Ok(Form(form)) = form else {
        return pages::error(&c, &PageError::bad_request("the sign-in form is malformed"));
    };
    let nonce = auth::cookie(&headers, LOGIN_COOKIE).filter(|n| is_nonce(n));
    let Some(nonce) = nonce.filter(|n| auth::csrf_ok(key, &scope(n), form.csrf.as_deref())) else {
        return pages::error(
            &c,
            &PageError::forbidden(
                "the sign-in form's token is missing or wrong (are cookies on?): load the sign-in page again",
            ),
        );
    };
    let user = form.user.unwrap_or_default();
    let password = form.password.unwrap_or_default();
    match check(&c, &user, password).await {
        Some(role) => signed_in(&c, &user, role),
        None => {
            tracing::warn!(user = %crate::text::clip(&user, 64), "console: a sign-in failed");
            let shown = if crate::access::valid_name(&user) {
                user.as_str()
            } else {
                ""
            };
            login_page(&c, nonce, shown, true, StatusCode::UNAUTHORIZED)
        }
    }
}

/// `POST <base>/logout`: deletes the session cookie (the gate let only someone signed in
/// through; the form's token is checked here) and goes to the sign-in page.
pub(crate) async fn logout(
    State(c): State<Console>,
    principal: Option<axum::Extension<Principal>>,
    form: Result<Form<auth::TokenForm>, FormRejection>,
) -> Response {
    let token = form.ok().and_then(|Form(f)| f.csrf);
    match principal {
        Some(axum::Extension(p)) if p.accepts(c.access(), token.as_deref()) => {}
        _ => {
            let e = PageError::forbidden("the sign-out form's token is missing or wrong");
            return pages::error(&c, &e);
        }
    }
    let base = c.base();
    let target = if c.access().has_passwords() {
        format!("{base}/login")
    } else {
        format!("{base}/")
    };
    let mut answer = Redirect::to(&target).into_response();
    let gone = auth::set_cookie(c.access(), base, SESSION_COOKIE, "", 0);
    answer.headers_mut().append(header::SET_COOKIE, gone);
    answer
}

/// The user's role when `password` is theirs; `None` otherwise, after [`FAILURE_DELAY`].
async fn check(c: &Console, user: &str, password: String) -> Option<Role> {
    let turn = tokio::time::timeout(CHECK_WAIT, CHECKS.acquire()).await;
    let (Ok(Ok(permit)), true) = (turn, password.len() <= PASSWORD_MAX_BYTES) else {
        tokio::time::sleep(FAILURE_DELAY).await;
        return None;
    };
    let access = c.access();
    // An unknown user costs the same hashing as a known one, so timing names no user.
    let known = access.users.get(user);
    let phc = known
        .or_else(|| access.users.values().next())
        .map(|u| u.password_hash.clone())?;
    let matched = tokio::task::spawn_blocking(move || crate::password::verify(&password, &phc))
        .await
        .unwrap_or(false);
    // The turn is the hashing's only: a failure's delay below holds no one else up.
    drop(permit);
    match known {
        Some(u) if matched => Some(u.role),
        _ => {
            tokio::time::sleep(FAILURE_DELAY).await;
            None
        }
    }
}

/// A 303 to the overview with a new session's cookie, and the login nonce's cookie deleted.
fn signed_in(c: &Console, user: &str, role: Role) -> Response {
    let access = c.access();
    let (Some(key), ttl) = (access.key.as_ref(), access.session_ttl.as_secs()) else {
        return pages::error(c, &PageError::internal("the console has no session key"));
    };
    let session = match Session::start(user, role, ttl) {
        Ok(s) => s,
        Err(e) => return pages::error(c, &e),
    };
    tracing::info!(user, role = role.as_str(), "console: signed in");
    let base = c.base();
    let mut answer = Redirect::to(&format!("{base}/")).into_response();
    let cookies = answer.headers_mut();
    let Some(credential) = access.users.get(user).map(|u| u.password_hash.as_str()) else {
        return pages::error(c, &PageError::internal("the user is no longer configured"));
    };
    let value = session.encode(key, credential);
    cookies.append(
        header::SET_COOKIE,
        auth::set_cookie(access, base, SESSION_COOKIE, &value, ttl),
    );
    cookies.append(
        header::SET_COOKIE,
        auth::set_cookie(access, base, LOGIN_COOKIE, "", 0),
    );
    answer
}

/// The sign-in page for `nonce` (its cookie set again), with `user` filled in.
fn login_page(c: &Console, nonce: &str, user: &str, failed: bool, status: StatusCode) -> Response {
    let access = c.access();
    let Some(key) = access.key.as_ref() else {
        return pages::error(c, &PageError::internal("the console has no session key"));
    };
    let action = format!("{}/login", c.base());
    let csrf = auth::csrf_token(key, &scope(nonce));
    let mut chrome = Chrome::new(c, "Sign in");
    chrome.refresh_seconds = 0;
    let page = LoginPage {
        chrome,
        action: &action,
        csrf: &csrf,
        user,
        failed,
    };
    let mut answer = pages::html(status, &page);
    let cookie = auth::set_cookie(access, c.base(), LOGIN_COOKIE, nonce, LOGIN_COOKIE_SECS);
    answer.headers_mut().append(header::SET_COOKIE, cookie);
    answer
}

/// What the login form's token is bound to.
fn scope(nonce: &str) -> String {
    format!("login\n{nonce}")
}

/// Whether a login cookie's value is one of ours (32 hex digits).
fn is_nonce(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}
