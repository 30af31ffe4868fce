//! `outboxctl web` in a real browser (issue 18, item 3): the real binary serves the console of
//! data a real dispatcher (in this process) delivered to a recording destination, and Debian's
//! chromium, headless over WebDriver, reads it. The overview's numbers equal `outboxctl status
//! --json`; the dead list links to the op's page, which shows its attempts and neither its body
//! nor its header values; a resource and a destination's answer holding `<script>` show as
//! text and run nothing. A screenshot of the overview is kept in `target/artifacts/`.

mod browser;
mod common;

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use browser::attr;
use common::{Dispatcher, Web};
use fantoccini::{Client, Locator};
use outbox_producer::{Error as ProducerError, Operation};
use outbox_tests::{Receiver, Reply, TestDb, conformance, lease, wait_until};

/// Would set a flag and retitle the page if it ever ran.
const RESOURCE: &str = "statement:<script>window.__pwned=1;document.title='pwned'</script>";
/// The destination's answer to the op that dies: script, and an image whose error handler runs.
const ANSWER: &str =
    "<script>window.__pwned=2;alert(2)</script><img src=x onerror=\"window.__pwned=3\">";
/// The resource of the rejected enqueue.
const REJECTED: &str = "invoice:<script>window.__pwned=4</script>";
/// Why an operator paused a destination: shown beside its breaker state.
const PAUSE_REASON: &str = "vendor says <script>window.__pwned=5</script> until 14:00";

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

/// Three delivered ops, one dead op of [`RESOURCE`] answered with [`ANSWER`] (and a header and
/// body the pages must not show), one op waiting for a destination nobody configured, and a
/// stale enqueue of [`REJECTED`].
async fn make_history(db: &TestDb, receiver: &Receiver) {
    let outbox = db.outbox().await;
    receiver.script("/v1/reject", [Reply::status(400).body(ANSWER)]);
    let worker = lease(&outbox, "statement:account-1842:2026-07").await;
    for key in ["s-1", "s-2", "s-3"] {
        let op = Operation::post("statements", "/v1/statements")
            .json(&serde_json::json!({ "key": key }))
            .idempotency_key(key)
            .build()
            .unwrap();
        outbox.enqueue(&worker, &op).await.unwrap();
    }
    let hostile = lease(&outbox, RESOURCE).await;
    let dying = Operation::post("statements", "/v1/reject")
        .header("X-Secret-Note", "hunter2")
        .json(&serde_json::json!({ "pin": "b0dy-s3cret" }))
        .idempotency_key("dead-1")
        .build()
        .unwrap();
    outbox.enqueue(&hostile, &dying).await.unwrap();
    let waiting = Operation::post("invoices", "/v1/invoices")
        .idempotency_key("inv-1")
        .build()
        .unwrap();
    outbox.enqueue(&worker, &waiting).await.unwrap();

    let old = lease(&outbox, REJECTED).await;
    outbox.release(&old).await.unwrap();
    let _newer = lease(&outbox, REJECTED).await;
    assert!(matches!(
        outbox.enqueue(&old, &waiting).await,
        Err(ProducerError::Stale { .. })
    ));
}

/// Runs outboxctl with `args` on `db`, without blocking the runtime the dispatcher uses.
async fn ctl(db: &TestDb, args: &[&str]) -> serde_json::Value {
    let out: Output = tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(args)
        .args(["--json", "--database-url", db.url()])
        .env_remove("OUTBOX_CONFIG")
        .output()
        .await
        .expect("run outboxctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// `outboxctl web --config` serving `db` with the `statements` destination configured.
async fn web(db: &TestDb, receiver: &Receiver) -> Web {
    let config = format!("[database]\nurl = {:?}\n{}", db.url(), statements(receiver));
    Web::start(&config, "30s").await
}

async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .text()
        .await
        .unwrap()
}

async fn count_of(client: &Client, css: &str) -> i64 {
    let shown = attr(client, css, "data-count").await;
    shown.parse().unwrap_or_else(|_| panic!("{css}: {shown}"))
}

/// Nothing the rows carried ran: no flag, no new title, no alert open.
async fn nothing_ran(client: &Client, title: &str) {
    let flag = client
        .execute("return typeof window.__pwned;", Vec::new())
        .await
        .unwrap();
    assert_eq!(flag, "undefined", "a script from the database ran");
    assert_eq!(client.title().await.unwrap(), title);
    assert!(
        client.get_alert_text().await.is_err(),
        "an alert is open: a script from the database ran"
    );
}

/// The overview's numbers are `status`'s: every state, every destination and state, the
/// summary counts, the partitions and their leaders, the live instances.
async fn overview_matches_status(client: &Client, status: &serde_json::Value) {
    let mut by_pair: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut by_state: BTreeMap<String, i64> = BTreeMap::new();
    for c in status["counts"].as_array().unwrap() {
        let (state, destination) = (
            c["state"].as_str().unwrap(),
            c["destination"].as_str().unwrap(),
        );
        let ops = c["ops"].as_i64().unwrap();
        by_pair.insert((destination.to_owned(), state.to_owned()), ops);
        *by_state.entry(state.to_owned()).or_default() += ops;
    }
    let states = [
        "pending",
        "in_flight",
        "delivered",
        "dead",
        "cancelled",
        "superseded",
    ];
    for state in states {
        let expected = by_state.get(state).copied().unwrap_or(0);
        let css = format!("#count-{state}");
        assert_eq!(count_of(client, &css).await, expected, "{state}");
        assert_eq!(text(client, &css).await, expected.to_string(), "{state}");
    }
    assert_eq!(
        count_of(client, "#count-all").await,
        by_state.values().sum::<i64>()
    );

    let mut shown: BTreeMap<(String, String), i64> = BTreeMap::new();
    for cell in client
        .find_all(Locator::Css("td[data-destination][data-state]"))
        .await
        .unwrap()
    {
        let destination = cell.attr("data-destination").await.unwrap().unwrap();
        let state = cell.attr("data-state").await.unwrap().unwrap();
        let ops: i64 = cell
            .attr("data-count")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(cell.text().await.unwrap(), ops.to_string());
        shown.insert((destination, state), ops);
    }
    for (pair, ops) in &shown {
        assert_eq!(by_pair.get(pair).copied().unwrap_or(0), *ops, "{pair:?}");
    }
    for (pair, ops) in &by_pair {
        assert_eq!(
            shown.get(pair),
            Some(ops),
            "{pair:?} is not on the overview"
        );
    }
    assert_eq!(
        shown.len(),
        2 * states.len(),
        "statements and invoices, every state"
    );

    for (css, key) in [
        ("#due-now", "due_now"),
        ("#dead-last-day", "dead_last_day"),
        ("#rejections-last-hour", "rejections_last_hour"),
    ] {
        assert_eq!(
            count_of(client, css).await,
            status[key].as_i64().unwrap(),
            "{key}"
        );
    }
    assert!(status["oldest_pending_ms"].as_i64().is_some());
    attr(client, "#oldest-pending", "data-ms").await;
    let live = status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["live"] == true)
        .count();
    assert_eq!(count_of(client, "#live-instances").await, live as i64);
    assert!(live >= 1, "the running dispatcher is live");

    let partitions = status["partitions"].as_array().unwrap();
    let rows = client
        .find_all(Locator::Css("tr[data-partition]"))
        .await
        .unwrap();
    assert_eq!(rows.len(), partitions.len());
    for p in partitions {
        let name = p["resource"].as_str().unwrap();
        let row = format!("tr[data-partition=\"{name}\"]");
        assert_eq!(
            text(client, &format!("{row} .owner")).await,
            p["owner_id"].as_str().unwrap()
        );
        assert_eq!(attr(client, &row, "data-state").await, "held");
    }
}

/// Keeps a screenshot of the page shown as `target/artifacts/console-<page>.png` (SQLite) or
/// `console-<page>-<backend>.png`.
async fn screenshot(client: &Client, db: &TestDb, page: &str) {
    let name = match db.kind() {
        outbox_tests::Kind::Sqlite => format!("console-{page}.png"),
        other => format!("console-{page}-{}.png", format!("{other:?}").to_lowercase()),
    };
    browser::screenshot(client, &name).await;
}

async fn the_console_shows_real_data_in_a_browser_and_runs_nothing_from_the_database(db: TestDb) {
    if !browser::available() {
        return;
    }
    // The destination's answer holds `"`, and the completion batch carries it in JSON.
    if db.skip_on_babelfish(outbox_tests::babelfish::OPENJSON_KEEPS_ESCAPES) {
        return;
    }
    let receiver = Receiver::start().await;
    make_history(&db, &receiver).await;
    let dispatcher = start_dispatcher(&db, &receiver);
    wait_until(
        Duration::from_secs(30),
        "3 delivered, 1 dead, 1 waiting",
        || async {
            let mut states: Vec<String> = db.ops().await.into_iter().map(|o| o.state).collect();
            states.sort();
            states == ["dead", "delivered", "delivered", "delivered", "pending"]
        },
    )
    .await;
    // The destination nobody configured is paused by an operator, for a reason holding a script.
    let paused = ctl(
        &db,
        &[
            "destination",
            "pause",
            "invoices",
            "--reason",
            PAUSE_REASON,
            "--actor",
            "ana",
        ],
    )
    .await;
    assert_eq!(paused["after"], "paused");
    let web = web(&db, &receiver).await;
    let browser = browser::Browser::start().await;
    let client = &browser.client;

    // The overview, against status --json read just before it.
    let status = ctl(&db, &["status"]).await;
    client.goto(&web.url).await.unwrap();
    assert_eq!(client.title().await.unwrap(), "Overview · fenced outbox");
    overview_matches_status(client, &status).await;
    assert_eq!(
        attr(client, "meta[http-equiv=\"refresh\"]", "content").await,
        "30"
    );
    assert_eq!(
        text(client, "tr[data-destination=\"invoices\"] .configured").await,
        "no"
    );
    assert_eq!(
        text(client, "#rejections tr.rejection .resource").await,
        REJECTED
    );
    // Destinations with their breaker state: the paused one says who and why, as text.
    assert_eq!(
        text(client, "tr[data-destination=\"invoices\"] .breaker").await,
        "paused"
    );
    let detail = text(client, "tr[data-destination=\"invoices\"] .detail").await;
    assert!(
        detail.contains(&format!("by ana: {PAUSE_REASON}")),
        "{detail}"
    );
    assert_eq!(
        text(client, "tr[data-destination=\"statements\"] .breaker").await,
        "closed"
    );
    nothing_ran(client, "Overview · fenced outbox").await;
    screenshot(client, &db, "overview").await;

    // The dead list, by its link, and the dead op's page, by its.
    client
        .find(Locator::Id("dead-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        client
            .current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("/ops?state=dead")
    );
    let rows = client
        .find_all(Locator::Css("#ops tr[data-seq]"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one dead op");
    assert_eq!(text(client, "#ops tr[data-seq] .resource").await, RESOURCE);
    let error = text(client, "#ops tr[data-seq] .last-error").await;
    assert!(error.contains("400"), "{error}");
    nothing_ran(client, "dead ops · fenced outbox").await;
    let seq = attr(client, "#ops tr[data-seq]", "data-seq").await;
    client
        .find(Locator::Css("a.op-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    let title = format!("Op {seq} · fenced outbox");
    assert_eq!(client.title().await.unwrap(), title);
    let shown = ctl(&db, &["show", &seq]).await;
    assert!(
        client
            .current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with(shown["op_id"].as_str().unwrap()),
        "linked by op id"
    );
    assert_eq!(text(client, "#field-resource").await, RESOURCE);
    assert_eq!(text(client, "#field-state").await, "dead");
    let attempts = client
        .find_all(Locator::Css("#attempts tr.attempt"))
        .await
        .unwrap();
    assert_eq!(
        attempts.len(),
        shown["attempt_history"].as_array().unwrap().len()
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(text(client, "#attempts tr.attempt .excerpt").await, ANSWER);
    assert!(
        text(client, "#field-headers")
            .await
            .contains("X-Secret-Note")
    );
    let source = client.source().await.unwrap();
    assert!(!source.contains("hunter2"), "a header value is on the page");
    assert!(!source.contains("b0dy-s3cret"), "the body is on the page");
    nothing_ran(client, &title).await;
    screenshot(client, &db, "op").await;

    // An op that does not exist, and one named wrongly.
    client
        .goto(&format!(
            "{}ops/00000000-0000-0000-0000-000000000000",
            web.url
        ))
        .await
        .unwrap();
    assert_eq!(text(client, "#status").await, "404 Not Found");
    client
        .goto(&format!("{}ops/%3Cscript%3E", web.url))
        .await
        .unwrap();
    assert_eq!(text(client, "#status").await, "400 Bad Request");
    nothing_ran(client, "400 Bad Request · fenced outbox").await;

    browser.close().await;
    web.stop();
    dispatcher.stop().await;
    let after = ctl(&db, &["status"]).await;
    assert_eq!(
        after["counts"], status["counts"],
        "the console changed nothing"
    );
}

conformance!(the_console_shows_real_data_in_a_browser_and_runs_nothing_from_the_database);

/// Bad arguments exit 2 and a taken address exits 1, each with a message, before serving.
#[tokio::test]
async fn outboxctl_web_refuses_bad_arguments_and_a_taken_address() {
    let db = TestDb::sqlite().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (args, code, words) in [
        (vec!["--refresh", "500ms"], 2, "--refresh must be 0s"),
        (
            vec!["--listen", "localhost"],
            2,
            "invalid value 'localhost'",
        ),
        (vec!["--listen", taken.as_str()], 1, "cannot listen on"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
            .arg("web")
            .args(&args)
            .args(["--database-url", db.url()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
}
