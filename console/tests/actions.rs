//! The console with logins (issue 39, part 2), in-process through its router: signing in and
//! out, what a viewer, a forged form, a tampered or expired cookie and an empty reason may not
//! do (403 or 400, nothing changed), and what an operator does (replay and cancel one op,
//! replay the dead ops of a destination after a preview, pause and resume a destination), each
//! through the store's admin calls and logged in `outbox_admin_log` as `console:<user>`. The
//! changes run on SQLite and PostgreSQL; a database login without the operator's rights gets an
//! explained 403 on PostgreSQL. Without logins the console stays read-only: no forms, 405.

use std::time::Duration;

use argon2::PasswordHasher as _;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit as _, Mac as _};
use outbox_console::{Access, Console, Options, Role, SessionKey};
use outbox_producer::Operation;
use outbox_store::{
    AttemptOutcome, ClaimRoom, Completion, NextState, Partition, ResourceName, Store,
};
use outbox_tests::{TestDb, conformance, lease};
use tower::ServiceExt as _;

/// The key sessions are signed with in these tests (so a test can forge an expired one).
const KEY: &[u8; 32] = b"0123456789abcdef0123456789abcdef";
const PASSWORD: &str = "correct horse battery staple";

/// A cheap argon2id hash of `password` (8 KiB, one pass): quick in a debug build.
fn cheap_hash(password: &str) -> String {
    let params = argon2::Params::new(8, 1, 1, None).unwrap();
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    a.hash_password_with_salt(password.as_bytes(), b"0123456789abcdef")
        .unwrap()
        .to_string()
}

/// alice (operator) and vic (viewer), both with [`PASSWORD`].
fn logins() -> Access {
    let hash = cheap_hash(PASSWORD);
    Access::logins(SessionKey::new(KEY.to_vec()).unwrap())
        .user("alice", &hash, Role::Operator)
        .unwrap()
        .user("vic", &hash, Role::Viewer)
        .unwrap()
}

fn router(store: Store, access: Access) -> axum::Router {
    let console = Console::with_access(Options::default(), access);
    console.attach(store);
    console.router()
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The value the answer's `Set-Cookie` gives `name`, and the whole header.
    fn cookie(&self, name: &str) -> Option<(String, String)> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                let value = v.strip_prefix(&format!("{name}="))?.split(';').next()?;
                Some((value.to_owned(), v.to_owned()))
            })
    }

    /// The CSRF token of the page's first form.
    fn csrf(&self) -> String {
        let after = self
            .body
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .unwrap_or_else(|| panic!("no form on the page: {}", self.body));
        after.split('"').next().unwrap().to_owned()
    }
}

async fn call(
    router: &axum::Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    form: Option<&[(&str, &str)]>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = match form {
        Some(fields) => {
            request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(
                fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", encode(v)))
                    .collect::<Vec<_>>()
                    .join("&"),
            )
        }
        None => Body::empty(),
    };
    let response = router
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A signed-in browser: its session cookie.
struct Browser {
    cookie: String,
}

impl Browser {
    async fn get(&self, router: &axum::Router, uri: &str) -> Answer {
        call(router, Method::GET, uri, &[("cookie", &self.cookie)], None).await
    }

    async fn post(&self, router: &axum::Router, uri: &str, form: &[(&str, &str)]) -> Answer {
        call(
            router,
            Method::POST,
            uri,
            &[("cookie", &self.cookie)],
            Some(form),
        )
        .await
    }

    /// The CSRF token of this browser's forms, from the page `uri`.
    async fn csrf(&self, router: &axum::Router, uri: &str) -> String {
        self.get(router, uri).await.csrf()
    }
}

/// Signs in as `user` with `password` as a browser does: the form, then the post.
async fn sign_in(router: &axum::Router, user: &str, password: &str) -> Result<Browser, Answer> {
    let form = call(router, Method::GET, "/login", &[], None).await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    let (nonce, _) = form
        .cookie("outbox_console_login")
        .expect("the login cookie");
    let cookie = format!("outbox_console_login={nonce}");
    let fields = [
        ("csrf", form.csrf()),
        ("user", user.to_owned()),
        ("password", password.to_owned()),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let answer = call(
        router,
        Method::POST,
        "/login",
        &[("cookie", &cookie)],
        Some(&fields),
    )
    .await;
    match answer.cookie("outbox_console_session") {
        Some((value, _)) if answer.status == StatusCode::SEE_OTHER => Ok(Browser {
            cookie: format!("outbox_console_session={value}"),
        }),
        _ => Err(answer),
    }
}

/// `n` dead ops of `statements`, made dead by a failed attempt each. Their sequences.
async fn dead_ops(db: &TestDb, store: &Store, n: usize) -> Vec<i64> {
    let seqs = pending_ops(db, "statement:1842", n).await;
    let one = Partition::new(0, 1).unwrap();
    let name = ResourceName::new(one.lease_resource()).unwrap();
    let held = store
        .lease_try_acquire(&name, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let claimed = store
        .op_claim(
            &held,
            one,
            &[ClaimRoom::new("statements", 100)],
            &[],
            100,
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(claimed.ops.len(), n);
    let completions: Vec<Completion> = claimed
        .ops
        .iter()
        .map(|c| Completion {
            seq: c.seq,
            op_id: c.op_id,
            attempt: c.attempt,
            started_at: c.claimed_at,
            outcome: AttemptOutcome::Failed,
            http_status: Some(400),
            error: Some("HTTP 400".to_owned()),
            excerpt: None,
            next: NextState::Dead,
            trace_context: None,
        })
        .collect();
    store.op_complete_batch(&held, &completions).await.unwrap();
    store.lease_release(&held).await.unwrap();
    seqs
}

/// `n` pending ops of `statements` under `resource`, unordered. Their sequences.
async fn pending_ops(db: &TestDb, resource: &str, n: usize) -> Vec<i64> {
    let outbox = db.outbox().await;
    let producer = lease(&outbox, resource).await;
    let before = db.ops().await.len();
    for i in 0..n {
        let op = Operation::post("statements", "/v1/statements")
            .idempotency_key(format!("{resource}-{i}"))
            .unordered()
            .build()
            .unwrap();
        outbox.enqueue(&producer, &op).await.unwrap();
    }
    outbox.release(&producer).await.unwrap();
    db.ops().await[before..].iter().map(|o| o.seq).collect()
}

async fn state_of(db: &TestDb, seq: i64) -> String {
    db.ops()
        .await
        .into_iter()
        .find(|o| o.seq == seq)
        .unwrap()
        .state
}

#[tokio::test]
async fn a_user_signs_in_with_the_right_password_only_and_signs_out() {
    let db = TestDb::sqlite().await;
    let router = router(db.store().await, logins());

    // Not signed in: pages send to the sign-in form, posts are refused.
    let page = call(&router, Method::GET, "/", &[], None).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location(), "/login");
    let posted = call(
        &router,
        Method::POST,
        "/ops/1/replay",
        &[],
        Some(&[("reason", "x")]),
    )
    .await;
    assert_eq!(posted.status, StatusCode::FORBIDDEN, "{}", posted.body);
    assert_eq!(
        call(&router, Method::GET, "/style.css", &[], None)
            .await
            .status,
        StatusCode::OK
    );

    // A wrong password and an unknown user get the same words, and no session.
    for (user, password) in [("alice", "wrong"), ("nobody", PASSWORD), ("alice", "")] {
        let failed = sign_in(&router, user, password)
            .await
            .err()
            .expect("refused");
        assert_eq!(failed.status, StatusCode::UNAUTHORIZED, "{user}");
        assert!(
            failed.body.contains("Wrong user name or password."),
            "{}",
            failed.body
        );
        assert!(failed.cookie("outbox_console_session").is_none());
    }

    // The login form's token is checked first.
    let no_token = call(
        &router,
        Method::POST,
        "/login",
        &[(
            "cookie",
            "outbox_console_login=00112233445566778899aabbccddeeff",
        )],
        Some(&[
            ("user", "alice"),
            ("password", PASSWORD),
            ("csrf", "forged"),
        ]),
    )
    .await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN, "{}", no_token.body);

    // The right password: a session cookie, HttpOnly, SameSite=Strict, under the base path.
    let form = call(&router, Method::GET, "/login", &[], None).await;
    let (nonce, _) = form.cookie("outbox_console_login").unwrap();
    let cookie = format!("outbox_console_login={nonce}");
    let ok = call(
        &router,
        Method::POST,
        "/login",
        &[("cookie", &cookie)],
        Some(&[
            ("csrf", &form.csrf()),
            ("user", "alice"),
            ("password", PASSWORD),
        ]),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(ok.location(), "/");
    let (value, set) = ok.cookie("outbox_console_session").unwrap();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Secure"), "not configured: {set}");
    let alice = Browser {
        cookie: format!("outbox_console_session={value}"),
    };
    let overview = alice.get(&router, "/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    assert!(
        overview
            .body
            .contains("id=\"signed-in\" data-role=\"operator\">alice</strong>"),
        "{}",
        overview.body
    );
    let csp = overview.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(
        csp.contains("form-action 'self'") && !csp.contains("script-src"),
        "{csp}"
    );
    assert_eq!(overview.headers[header::CACHE_CONTROL], "no-store");

    // The actions' addresses take their forms' POST only.
    let get = alice.get(&router, "/replay").await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get.headers[header::ALLOW], "POST");

    // Signing out needs the token too, then deletes the cookie.
    let forged = alice.post(&router, "/logout", &[("csrf", "x")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let out = alice
        .post(&router, "/logout", &[("csrf", &overview.csrf())])
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/login");
    let (gone, set) = out.cookie("outbox_console_session").unwrap();
    assert!(gone.is_empty() && set.contains("Max-Age=0"), "{set}");
}

#[tokio::test]
async fn a_viewer_reads_but_cannot_act() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    let router = router(store, logins());
    let vic = sign_in(&router, "vic", PASSWORD).await.ok().unwrap();
    let page = vic.get(&router, &format!("/ops/{seq}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        !page.body.contains("replay-form"),
        "no action form for a viewer"
    );
    assert!(page.body.contains("outboxctl replay"), "{}", page.body);
    let csrf = page.csrf(); // the sign-out form's
    let refused = vic
        .post(
            &router,
            &format!("/ops/{seq}/replay"),
            &[("csrf", &csrf), ("reason", "viewer tries")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert!(
        refused.body.contains("viewers may not change anything"),
        "{}",
        refused.body
    );
    let pause = vic
        .post(
            &router,
            "/destinations/pause",
            &[
                ("csrf", &csrf),
                ("reason", "x"),
                ("destination", "statements"),
            ],
        )
        .await;
    assert_eq!(pause.status, StatusCode::FORBIDDEN);
    assert_eq!(state_of(&db, seq).await, "dead");
    assert!(db.admin_log().await.is_empty(), "nothing logged");
}

#[tokio::test]
async fn a_form_without_its_token_or_with_an_empty_reason_changes_nothing() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    let router = router(store, logins());
    let alice = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();
    let other = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();
    let others_token = other.csrf(&router, "/").await;
    let uri = format!("/ops/{seq}/replay");
    for fields in [
        vec![("reason", "no token")],
        vec![("reason", "empty token"), ("csrf", "")],
        vec![
            ("reason", "another session's"),
            ("csrf", others_token.as_str()),
        ],
    ] {
        let a = alice.post(&router, &uri, &fields).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{fields:?}: {}", a.body);
        assert!(a.body.contains("token is missing or wrong"), "{}", a.body);
    }
    let csrf = alice.csrf(&router, &format!("/ops/{seq}")).await;
    for reason in ["", "   ", "bell\x07"] {
        let a = alice
            .post(&router, &uri, &[("csrf", &csrf), ("reason", reason)])
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{reason:?}: {}", a.body);
        assert!(a.body.contains("reason"), "{}", a.body);
    }
    let long = "x".repeat(2001);
    let a = alice
        .post(&router, &uri, &[("csrf", &csrf), ("reason", &long)])
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let malformed = alice
        .post(
            &router,
            "/ops/x/replay",
            &[("csrf", &csrf), ("reason", "r")],
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(state_of(&db, seq).await, "dead");
    assert!(
        db.admin_log().await.is_empty(),
        "{:?}",
        db.admin_log().await
    );
    // An op that does not exist: 404, logged as outboxctl logs it (nothing changed).
    let missing = alice
        .post(
            &router,
            "/ops/999/replay",
            &[("csrf", &csrf), ("reason", "r")],
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.body);
    let log = db.admin_log().await;
    assert!(
        log.len() == 1 && log[0].replace(' ', "").contains("\"changed\":[]"),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_tampered_or_expired_session_is_refused() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    let router = router(store, logins());
    let vic = sign_in(&router, "vic", PASSWORD).await.ok().unwrap();
    let value = vic.cookie.strip_prefix("outbox_console_session=").unwrap();
    let (payload, tag) = value.split_once('.').unwrap();
    let text = String::from_utf8(B64.decode(payload).unwrap()).unwrap();
    assert!(text.ends_with("\nviewer\nvic"), "{text}");

    // A viewer who makes themselves an operator: the signature no longer matches.
    let promoted = B64.encode(text.replace("\nviewer\nvic", "\noperator\nalice"));
    let expired = {
        let mut fields: Vec<&str> = text.split('\n').collect();
        fields[2] = "1000";
        let payload = fields.join("\n");
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(KEY).unwrap();
        mac.update(b"session\0");
        mac.update(payload.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{}.{}", B64.encode(payload), B64.encode(tag))
    };
    for cookie in [
        format!("{promoted}.{tag}"),
        format!("{payload}.{}", B64.encode([0u8; 32])),
        format!("{payload}x.{tag}"),
        expired,
        "garbage".to_owned(),
    ] {
        let b = Browser {
            cookie: format!("outbox_console_session={cookie}"),
        };
        let page = b.get(&router, "/").await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{cookie}");
        assert_eq!(page.location(), "/login");
        let post = b
            .post(
                &router,
                &format!("/ops/{seq}/replay"),
                &[("reason", "r"), ("csrf", "x")],
            )
            .await;
        assert_eq!(post.status, StatusCode::FORBIDDEN, "{cookie}");
    }
    assert_eq!(state_of(&db, seq).await, "dead");
}

#[tokio::test]
async fn a_session_forged_with_the_key_is_accepted_until_its_expiry_or_a_new_password() {
    // Proves the expired cookie of the test above was refused for its expiry alone, and that
    // a session is signed over its user's password hash as configured.
    let db = TestDb::sqlite().await;
    let hash = cheap_hash(PASSWORD);
    let access = Access::logins(SessionKey::new(KEY.to_vec()).unwrap())
        .user("vic", &hash, Role::Viewer)
        .unwrap();
    let router = router(db.store().await, access);
    let forge = |expires: u64, credential: &str| {
        let payload = format!("1\n00112233445566778899aabbccddeeff\n{expires}\nviewer\nvic");
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(KEY).unwrap();
        mac.update(b"session\0");
        mac.update(payload.as_bytes());
        mac.update(b"\n");
        mac.update(credential.as_bytes());
        let tag = mac.finalize().into_bytes();
        Browser {
            cookie: format!(
                "outbox_console_session={}.{}",
                B64.encode(payload),
                B64.encode(tag)
            ),
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        forge(now + 600, &hash).get(&router, "/").await.status,
        StatusCode::OK
    );
    assert_eq!(
        forge(now - 1, &hash).get(&router, "/").await.status,
        StatusCode::SEE_OTHER
    );
    // Signed over the password hash vic had before: refused.
    let before = cheap_hash("vic's old password");
    assert_eq!(
        forge(now + 600, &before).get(&router, "/").await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn without_logins_the_console_stays_read_only() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    for router in [
        outbox_console::router(store.clone(), Options::default()),
        // Logins with a key but neither users nor a trusted header: still read-only.
        router(
            store.clone(),
            Access::logins(SessionKey::new(KEY.to_vec()).unwrap()),
        ),
    ] {
        for uri in ["/", &format!("/ops/{seq}"), "/ops?state=dead"] {
            let page = call(&router, Method::GET, uri, &[], None).await;
            assert_eq!(page.status, StatusCode::OK, "{uri}");
            assert!(!page.body.contains("<form"), "{uri}: {}", page.body);
            assert!(page.body.contains("Read-only."), "{uri}");
            let csp = page.headers[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap();
            assert!(csp.contains("form-action 'none'"), "{csp}");
        }
        for uri in [
            "/login",
            "/logout",
            &format!("/ops/{seq}/replay"),
            "/replay",
            "/destinations/pause",
        ] {
            let a = call(&router, Method::POST, uri, &[], Some(&[("reason", "r")])).await;
            assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{uri}");
        }
        assert_eq!(
            call(&router, Method::GET, "/login", &[], None).await.status,
            StatusCode::NOT_FOUND
        );
    }
    assert_eq!(state_of(&db, seq).await, "dead");
}

#[tokio::test]
async fn a_trusted_header_names_the_user_and_its_operators() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    let access = Access::logins(SessionKey::new(KEY.to_vec()).unwrap()).trusted_header(
        axum::http::HeaderName::from_static("x-forwarded-user"),
        vec!["bob".to_owned()],
    );
    let router = router(store, access);
    let anonymous = call(&router, Method::GET, "/", &[], None).await;
    assert_eq!(
        anonymous.status,
        StatusCode::FORBIDDEN,
        "no login form: the proxy signs in"
    );
    assert_eq!(
        call(&router, Method::GET, "/login", &[], None).await.status,
        StatusCode::NOT_FOUND
    );
    let carol = call(
        &router,
        Method::GET,
        &format!("/ops/{seq}"),
        &[("x-forwarded-user", "carol")],
        None,
    )
    .await;
    assert!(
        carol.body.contains("data-role=\"viewer\">carol<"),
        "{}",
        carol.body
    );
    assert!(!carol.body.contains("replay-form"));
    let uri = format!("/ops/{seq}/replay");
    let refused = call(
        &router,
        Method::POST,
        &uri,
        &[("x-forwarded-user", "carol")],
        Some(&[("csrf", &carol.csrf()), ("reason", "r")]),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let bob = call(
        &router,
        Method::GET,
        &format!("/ops/{seq}"),
        &[("x-forwarded-user", "bob")],
        None,
    )
    .await;
    assert!(bob.body.contains("replay-form"), "{}", bob.body);
    // carol's token is not bob's.
    let forged = call(
        &router,
        Method::POST,
        &uri,
        &[("x-forwarded-user", "bob")],
        Some(&[("csrf", &carol.csrf()), ("reason", "r")]),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let done = call(
        &router,
        Method::POST,
        &uri,
        &[("x-forwarded-user", "bob")],
        Some(&[("csrf", &bob.csrf()), ("reason", "proxy user replays")]),
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(state_of(&db, seq).await, "pending");
    let log = db.admin_log().await;
    assert!(
        log.last()
            .unwrap()
            .starts_with("console:bob|replay|proxy user replays|"),
        "{log:?}"
    );
    // A header sent twice (a proxy that appends instead of replacing lets the client's own
    // value come first) names nobody.
    let twice = call(
        &router,
        Method::GET,
        "/",
        &[("x-forwarded-user", "bob"), ("x-forwarded-user", "carol")],
        None,
    )
    .await;
    assert_eq!(twice.status, StatusCode::FORBIDDEN, "{}", twice.body);
    assert!(!twice.body.contains("data-role"), "{}", twice.body);
}

/// A form is a few fields: a body past the limit is refused before it is read or checked.
#[tokio::test]
async fn a_huge_form_is_refused_unread() {
    let db = TestDb::sqlite().await;
    let router = router(db.store().await, logins());
    let huge = "x".repeat(100 * 1024);
    let answer = call(
        &router,
        Method::POST,
        "/login",
        &[],
        Some(&[("user", "alice"), ("password", &huge)]),
    )
    .await;
    // The form's extractor fails on the limit: the handler answers its malformed-form page.
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert!(answer.body.contains("malformed"), "{}", answer.body);
}

/// PostgreSQL: a console whose database login is the dispatcher's (issue 37's least privilege)
/// gets an explained 403 for an action, naming the role and docs/security.md; nothing changes.
#[tokio::test]
async fn a_database_login_without_the_operators_rights_is_explained() {
    let db = TestDb::postgres().await;
    let store = db.store().await;
    let seq = dead_ops(&db, &store, 1).await[0];
    let url = db.login_as("outbox_dispatcher").await;
    let limited = Store::connect(&url, TestDb::options()).await.unwrap();
    let router = router(limited, logins());
    let alice = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();
    let csrf = alice.csrf(&router, "/").await;
    for (uri, fields) in [
        (
            format!("/ops/{seq}/replay"),
            vec![("reason", "operator tries")],
        ),
        (
            "/destinations/pause".to_owned(),
            vec![("reason", "operator tries"), ("destination", "statements")],
        ),
    ] {
        let mut fields = fields;
        fields.push(("csrf", &csrf));
        let a = alice.post(&router, &uri, &fields).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{uri}: {}", a.body);
        assert!(
            a.body.contains("outbox_operator") && a.body.contains("docs/security.md"),
            "{uri}: {}",
            a.body
        );
    }
    assert_eq!(state_of(&db, seq).await, "dead");
}

async fn an_operator_replays_and_cancels_one_op_each_logged(db: TestDb) {
    let store = db.store().await;
    let dead = dead_ops(&db, &store, 1).await[0];
    let pending = pending_ops(&db, "statement:77", 1).await[0];
    let router = router(store, logins());
    let alice = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();

    let page = alice.get(&router, &format!("/ops/{dead}")).await;
    assert!(
        page.body.contains("id=\"replay-form\"") && page.body.contains("id=\"cancel-form\""),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("http-equiv=\"refresh\""),
        "an operator's page with forms does not reload"
    );
    let replayed = alice
        .post(
            &router,
            &format!("/ops/{dead}/replay"),
            &[("csrf", &page.csrf()), ("reason", "INC-311 is over")],
        )
        .await;
    assert_eq!(replayed.status, StatusCode::SEE_OTHER, "{}", replayed.body);
    assert_eq!(
        replayed.location(),
        format!("/ops/{dead}?done=replayed&n=1&skipped=0")
    );
    assert_eq!(state_of(&db, dead).await, "pending");
    let back = alice.get(&router, replayed.location()).await;
    assert!(
        back.body
            .contains("id=\"done\" role=\"status\">Replayed 1 op.</p>"),
        "{}",
        back.body
    );

    let page = alice.get(&router, &format!("/ops/{pending}")).await;
    assert!(!page.body.contains("replay-form") && page.body.contains("cancel-form"));
    let cancelled = alice
        .post(
            &router,
            &format!("/ops/{pending}/cancel"),
            &[
                ("csrf", &page.csrf()),
                ("reason", "customer closed the account"),
            ],
        )
        .await;
    assert_eq!(
        cancelled.status,
        StatusCode::SEE_OTHER,
        "{}",
        cancelled.body
    );
    assert_eq!(state_of(&db, pending).await, "cancelled");
    // A second cancel finds it cancelled: skipped, said so, nothing else changes.
    let again = alice
        .post(
            &router,
            &format!("/ops/{pending}/cancel"),
            &[("csrf", &page.csrf()), ("reason", "again")],
        )
        .await;
    assert_eq!(
        again.location(),
        format!("/ops/{pending}?done=cancelled&n=0&skipped=1")
    );

    let log = db.admin_log().await;
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(
        log[0].starts_with("console:alice|replay|INC-311 is over|"),
        "{log:?}"
    );
    assert!(
        log[0]
            .replace(' ', "")
            .contains(&format!("\"changed\":[{dead}]")),
        "{log:?}"
    );
    assert!(
        log[1].starts_with("console:alice|cancel|customer closed the account|"),
        "{log:?}"
    );
    let op = db
        .ops()
        .await
        .into_iter()
        .find(|o| o.seq == pending)
        .unwrap();
    assert_eq!(
        op.last_error.as_deref(),
        Some("cancelled by console:alice: customer closed the account")
    );
}

async fn an_operator_previews_then_replays_the_dead_ops_of_a_destination(db: TestDb) {
    let store = db.store().await;
    let dead = dead_ops(&db, &store, 3).await;
    let router = router(store, logins());
    let alice = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();
    let list = alice
        .get(&router, "/ops?state=dead&destination=statements")
        .await;
    assert!(
        list.body.contains("id=\"replay-dead-form\""),
        "{}",
        list.body
    );
    let csrf = list.csrf();
    let filter = [
        ("csrf", csrf.as_str()),
        ("state", "dead"),
        ("destination", "statements"),
        ("reason", "vendor fixed <it>"),
    ];

    let preview = alice.post(&router, "/replay", &filter).await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    assert!(
        preview.body.contains("data-would-replay=\"3\""),
        "{}",
        preview.body
    );
    assert!(
        preview.body.contains("vendor fixed &#60;it&#62;"),
        "the reason is escaped: {}",
        preview.body
    );
    for seq in &dead {
        assert_eq!(
            state_of(&db, *seq).await,
            "dead",
            "a preview changes nothing"
        );
    }
    assert!(db.admin_log().await.is_empty(), "a dry run logs nothing");

    // The confirmation carries the same filter and reason.
    assert!(
        preview
            .body
            .contains("name=\"destination\" value=\"statements\"")
    );
    let mut confirm = filter.to_vec();
    confirm.push(("confirm", "yes"));
    let done = alice.post(&router, "/replay", &confirm).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(
        done.location(),
        "/ops?state=dead&destination=statements&done=replayed&n=3&skipped=0"
    );
    for seq in &dead {
        assert_eq!(state_of(&db, *seq).await, "pending");
    }
    let log = db.admin_log().await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].starts_with("console:alice|replay|vendor fixed <it>|"),
        "{log:?}"
    );

    // Any state but dead is refused; another destination has none.
    let mut other = filter.to_vec();
    other[1] = ("state", "delivered");
    assert_eq!(
        alice.post(&router, "/replay", &other).await.status,
        StatusCode::BAD_REQUEST
    );
    let mut elsewhere = filter.to_vec();
    elsewhere[2] = ("destination", "invoices");
    let none = alice.post(&router, "/replay", &elsewhere).await;
    assert!(
        none.body.contains("data-would-replay=\"0\"") && !none.body.contains("id=\"confirm\""),
        "{}",
        none.body
    );
}

async fn an_operator_pauses_and_resumes_a_destination(db: TestDb) {
    let store = db.store().await;
    pending_ops(&db, "statement:1", 1).await;
    let router = router(store.clone(), logins());
    let alice = sign_in(&router, "alice", PASSWORD).await.ok().unwrap();
    let overview = alice.get(&router, "/").await;
    assert!(
        overview.body.contains("action=\"/destinations/pause\""),
        "{}",
        overview.body
    );
    let csrf = overview.csrf();
    let paused = alice
        .post(
            &router,
            "/destinations/pause",
            &[
                ("csrf", &csrf),
                ("destination", "statements"),
                ("reason", "vendor maintenance"),
            ],
        )
        .await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER, "{}", paused.body);
    assert_eq!(paused.location(), "/?done=paused&destination=statements");
    let listed = store.destination_list().await.unwrap();
    let h = listed
        .iter()
        .find(|h| h.destination == "statements")
        .unwrap();
    assert_eq!(h.shown_state(), "paused");
    let pause = h.paused.as_ref().unwrap();
    assert_eq!(
        (pause.by.as_str(), pause.reason.as_str()),
        ("console:alice", "vendor maintenance")
    );
    let page = alice.get(&router, paused.location()).await;
    assert!(page.body.contains("Paused statements:"), "{}", page.body);
    assert!(
        page.body.contains("action=\"/destinations/resume\""),
        "{}",
        page.body
    );

    let again = alice
        .post(
            &router,
            "/destinations/pause",
            &[
                ("csrf", &csrf),
                ("destination", "statements"),
                ("reason", "twice"),
            ],
        )
        .await;
    assert_eq!(again.location(), "/?done=unchanged&destination=statements");
    let resumed = alice
        .post(
            &router,
            "/destinations/resume",
            &[
                ("csrf", &csrf),
                ("destination", "statements"),
                ("reason", "vendor is back"),
            ],
        )
        .await;
    assert_eq!(resumed.location(), "/?done=resumed&destination=statements");
    let listed = store.destination_list().await.unwrap();
    let h = listed
        .iter()
        .find(|h| h.destination == "statements")
        .unwrap();
    assert_eq!(h.shown_state(), "closed");
    let empty = alice
        .post(
            &router,
            "/destinations/resume",
            &[("csrf", &csrf), ("reason", "r")],
        )
        .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    let log = db.admin_log().await;
    let actions: Vec<String> = log
        .iter()
        .map(|l| l.split('|').take(3).collect::<Vec<_>>().join("|"))
        .collect();
    assert_eq!(
        actions,
        [
            "console:alice|pause|vendor maintenance",
            "console:alice|resume|vendor is back"
        ],
        "{log:?}"
    );
}

conformance!(
    an_operator_replays_and_cancels_one_op_each_logged,
    an_operator_previews_then_replays_the_dead_ops_of_a_destination,
    an_operator_pauses_and_resumes_a_destination,
);
