//! The console's charts and actions in a real browser (issue 39, item 3): `outboxctl web` as a
//! real process with two logins from its config (an operator and a viewer, their argon2 hashes
//! made by `outboxctl console hash-password`), Debian's chromium over WebDriver, and a real
//! dispatcher (in this process) delivering to a recording destination, on PostgreSQL.
//!
//! The operator signs in; the charts' points add up to what the dispatcher finished (read from
//! the ops table); replaying the dead op from its page gets it delivered; pausing the
//! destination from the overview holds a new op until the resume. A form posted without its
//! CSRF token or with a forged one, and the viewer's post of the same form with its own valid
//! token, are refused with 403 and change nothing (the op's state, the admin log). Screenshots
//! of the overview and the charts are kept in `target/artifacts/`.

mod browser;
mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use browser::attr;
use common::{Dispatcher, Web};
use fantoccini::{Client, Locator};
use outbox_producer::Operation;
use outbox_tests::{Receiver, Reply, TestDb, lease, wait_until};

const OPERATOR: (&str, &str) = ("ana", "ana's long passphrase");
const VIEWER: (&str, &str) = ("vic", "vic's long passphrase");
/// Delivered before the charts are read.
const DELIVERED: usize = 7;

/// A dispatcher in this process delivering `statements` ops to `receiver`.
fn start_dispatcher(db: &TestDb, receiver: &Receiver) -> Dispatcher {
    Dispatcher::start(&format!(
        "[database]\nurl = {:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\npoll_interval = \"100ms\"\nlisten = \"\"\n{}",
        db.url(),
        statements(receiver)
    ))
}

/// The `statements` destination at `receiver`: a 400 is final, so an op dies at once.
fn statements(receiver: &Receiver) -> String {
    format!(
        "[destinations.statements]\nbase_url = \"{}\"\ntimeout = \"2s\"\nretry = {{ base = \"50ms\", cap = \"100ms\", max_attempts = 3 }}\n",
        receiver.url()
    )
}

/// `outboxctl console hash-password`'s hash of `password`, given on standard input.
fn hash_password(password: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(["console", "hash-password"])
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("OUTBOX_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run outboxctl");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{password}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `outboxctl web --config` with the two logins, as a real process.
async fn web(db: &TestDb, receiver: &Receiver) -> Web {
    let config = format!(
        "[database]\nurl = {:?}\n{}\n[console]\nsession_key = \"{}\"\n\
         [[console.users]]\nname = \"{}\"\npassword_hash = \"{}\"\nrole = \"operator\"\n\
         [[console.users]]\nname = \"{}\"\npassword_hash = \"{}\"\nrole = \"viewer\"\n",
        db.url(),
        statements(receiver),
        "k".repeat(48),
        OPERATOR.0,
        hash_password(OPERATOR.1),
        VIEWER.0,
        hash_password(VIEWER.1),
    );
    Web::start(&config, "0s").await
}

/// The element `css` finds, waiting up to 10 s for it (a submitted form's answer may still be
/// loading).
async fn find(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
}

/// Signs in as `(user, password)` on the login page.
async fn sign_in(client: &Client, web: &Web, (user, password): (&str, &str)) {
    client.goto(&format!("{}login", web.url)).await.unwrap();
    find(client, "#user").await.send_keys(user).await.unwrap();
    find(client, "#password")
        .await
        .send_keys(password)
        .await
        .unwrap();
    find(client, "form.login button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    assert_eq!(
        find(client, "#signed-in").await.text().await.unwrap(),
        user,
        "signed in"
    );
}

/// Fills the reason of the form `form`, submits it, and waits for the answer's result line
/// (`#done`; the page the form was on has none).
async fn submit(client: &Client, form: &str, reason: &str) {
    find(client, &format!("{form} input[name=reason]"))
        .await
        .send_keys(reason)
        .await
        .unwrap();
    find(client, &format!("{form} button[type=submit]"))
        .await
        .click()
        .await
        .unwrap();
    find(client, "#done").await;
}

/// The browser's session cookie, as a `Cookie:` header's value.
async fn session_cookie(client: &Client) -> String {
    let cookies = client.get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "outbox_console_session")
        .expect("a session cookie");
    assert_eq!(session.http_only(), Some(true), "HttpOnly");
    format!("{}={}", session.name(), session.value())
}

/// The sum of the `data-value`s of the points of `series` in destination `d`'s charts.
async fn points_sum(client: &Client, d: &str, series: &str) -> f64 {
    let css = format!("section[data-destination=\"{d}\"] g[data-series=\"{series}\"] circle");
    let mut sum = 0.0;
    for point in client.find_all(Locator::Css(&css)).await.unwrap() {
        let v = point.attr("data-value").await.unwrap().unwrap();
        sum += v.parse::<f64>().unwrap();
    }
    sum
}

async fn state_of(db: &TestDb, seq: i64) -> String {
    db.ops()
        .await
        .into_iter()
        .find(|o| o.seq == seq)
        .map(|o| o.state)
        .unwrap_or_default()
}

fn op(path: &str, key: &str) -> Operation {
    Operation::post("statements", path)
        .json(&serde_json::json!({ "key": key }))
        .idempotency_key(key)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_reads_the_charts_and_acts_and_forged_or_viewer_posts_change_nothing()
{
    if !browser::available() {
        return;
    }
    let db = TestDb::postgres().await;
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    // The first attempt of the op to /v1/locked is refused for good; its replay gets a 200.
    receiver.script("/v1/locked", [Reply::status(400).body("locked")]);
    let worker = lease(&outbox, "statement:account-1842").await;
    for i in 0..DELIVERED {
        outbox
            .enqueue(&worker, &op("/v1/statements", &format!("s-{i}")))
            .await
            .unwrap();
    }
    let dead = outbox
        .enqueue(&worker, &op("/v1/locked", "locked-1"))
        .await
        .unwrap()
        .seq;
    // An op for a destination nobody configured: pending for good, what the forged posts try
    // to cancel. Under a resource of its own: ops of one resource are delivered in order.
    let invoicing = lease(&outbox, "invoice:2026-12").await;
    let waiting = outbox
        .enqueue(
            &invoicing,
            &Operation::post("invoices", "/v1/invoices")
                .idempotency_key("inv-1")
                .build()
                .unwrap(),
        )
        .await
        .unwrap()
        .seq;

    // What the charts must show is what the ops table says was finished.
    let dispatcher = start_dispatcher(&db, &receiver);
    wait_until(Duration::from_secs(30), "delivered and dead", || async {
        let ops = db.ops().await;
        ops.iter().filter(|o| o.state == "delivered").count() == DELIVERED
            && ops.iter().any(|o| o.seq == dead && o.state == "dead")
    })
    .await;
    dispatcher.stop().await;
    let ops = db.ops().await;
    let delivered = ops.iter().filter(|o| o.state == "delivered").count();
    let died = ops.iter().filter(|o| o.state == "dead").count();
    assert_eq!((delivered, died), (DELIVERED, 1));

    let dispatcher = start_dispatcher(&db, &receiver);
    let web = web(&db, &receiver).await;
    let browser = browser::Browser::start().await;
    let client = &browser.client;

    // Pages need a login; a wrong password is refused with one message for every failure.
    client.goto(&web.url).await.unwrap();
    assert!(
        client
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/login")
    );
    sign_in(client, &web, OPERATOR).await;
    assert_eq!(attr(client, "#signed-in", "data-role").await, "operator");

    // The charts: the totals and the points of the hour add up to what was finished.
    client
        .goto(&format!("{}charts?window=hour", web.url))
        .await
        .unwrap();
    let total = |what: &'static str| {
        let css = format!("section[data-destination=\"statements\"] [data-total=\"{what}\"]");
        async move { find(client, &css).await.text().await.unwrap() }
    };
    assert_eq!(total("delivered").await, delivered.to_string());
    assert_eq!(total("dead").await, died.to_string());
    assert_eq!(total("retried").await, "0");
    assert_eq!(
        points_sum(client, "statements", "delivered").await,
        delivered as f64
    );
    assert_eq!(points_sum(client, "statements", "dead").await, died as f64);
    let p50 = client
        .find_all(Locator::Css(
            "section[data-destination=\"statements\"] g[data-series=\"p50\"] circle",
        ))
        .await
        .unwrap();
    assert!(!p50.is_empty(), "a latency point");
    // Tall enough for the backlog and the destination's charts in one picture.
    client.set_window_size(1280, 2200).await.unwrap();
    browser::screenshot(client, "console-charts.png").await;
    client.set_window_size(1280, 1200).await.unwrap();

    // Replay the dead op from its page: it is delivered, and the log says who and why.
    client
        .goto(&format!("{}ops/{dead}", web.url))
        .await
        .unwrap();
    submit(client, "#replay-form", "vendor unlocked the account").await;
    wait_until(
        Duration::from_secs(30),
        "the replayed op delivered",
        || async { state_of(&db, dead).await == "delivered" },
    )
    .await;
    let log = db.admin_log().await;
    assert!(
        log.iter()
            .any(|l| l.starts_with("console:ana|replay|vendor unlocked the account|")),
        "{log:?}"
    );

    // Pause the destination from the overview: a new op is held until the resume.
    client.goto(&web.url).await.unwrap();
    submit(
        client,
        "tr[data-destination=\"statements\"] form.pause",
        "vendor maintenance until 14:00",
    )
    .await;
    assert_eq!(
        attr(
            client,
            "tr[data-destination=\"statements\"] td.breaker",
            "data-breaker"
        )
        .await,
        "paused"
    );
    let held = outbox
        .enqueue(&worker, &op("/v1/statements", "held-1"))
        .await
        .unwrap()
        .seq;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(state_of(&db, held).await, "pending", "paused: held");
    client.goto(&web.url).await.unwrap();
    browser::screenshot(client, "console-operator-overview.png").await;
    submit(
        client,
        "tr[data-destination=\"statements\"] form.resume",
        "maintenance over",
    )
    .await;
    wait_until(Duration::from_secs(30), "the held op delivered", || async {
        state_of(&db, held).await == "delivered"
    })
    .await;

    // Forged posts: the operator's own cookie, without the form's token or with another.
    let operator = session_cookie(client).await;
    let cancel = format!("/ops/{waiting}/cancel");
    let log_before = db.admin_log().await;
    for form in [
        "reason=forged".to_owned(),
        format!("csrf={}&reason=forged", "A".repeat(43)),
    ] {
        let (status, answer) = web.post(&cancel, &operator, &form).await;
        assert_eq!(status, 403, "{form}: {answer}");
    }
    // The viewer: no forms on its pages, and its post with its own valid token is refused.
    find(client, "form.session button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
    sign_in(client, &web, VIEWER).await;
    client
        .goto(&format!("{}ops/{waiting}", web.url))
        .await
        .unwrap();
    assert!(
        client
            .find_all(Locator::Css("form.action"))
            .await
            .unwrap()
            .is_empty(),
        "a viewer's page has no action forms"
    );
    let viewer = session_cookie(client).await;
    let token = attr(client, "form.session input[name=csrf]", "value").await;
    let (status, answer) = web
        .post(
            &cancel,
            &viewer,
            &format!("csrf={token}&reason=viewer+tries"),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(state_of(&db, waiting).await, "pending", "nothing changed");
    assert_eq!(db.admin_log().await, log_before, "nothing logged");

    browser.close().await;
    web.stop();
    dispatcher.stop().await;
}
