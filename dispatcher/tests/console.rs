//! The read-only console on the dispatcher's listener (issue 18, item 3): served under
//! `/console/` beside the probes only with `[console] enabled = true`, reading real data the
//! dispatcher delivered, with its links under the prefix; off by default.

mod common;

use std::time::Duration;

use common::{all, destination, dispatch_with, post, until_states};
use outbox_tests::{Receiver, TestDb, conformance, lease, wait_for};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn get(url: &str) -> (u16, String) {
    let answer = reqwest::get(url).await.expect("GET");
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

async fn the_console_is_served_under_console_only_when_enabled(db: TestDb) {
    let outbox = db.outbox().await;
    let receiver = Receiver::start().await;
    let producer = lease(&outbox, "statement:1842").await;
    let op = outbox
        .enqueue(&producer, &post("statements", "/s", "s-1"))
        .await
        .unwrap();

    let port = free_port();
    let console = "[console]\nenabled = true\nrefresh = \"3s\"\n";
    let running = dispatch_with(
        &db,
        &format!("{console}{}", destination("statements", &receiver, "")),
        &format!("listen = \"127.0.0.1:{port}\"\n"),
    );
    until_states(&db, "the op is delivered", all("delivered")).await;
    let base = format!("http://127.0.0.1:{port}");
    // The console's own pool attaches once the database answers: 503 until then.
    let overview = wait_for(
        Duration::from_secs(30),
        "the console shows the overview",
        || {
            let url = format!("{base}/console/");
            async move {
                let (status, body) = get(&url).await;
                (status == 200 && body.contains("id=\"count-delivered\"")).then_some(body)
            }
        },
    )
    .await;
    assert!(
        overview.contains("id=\"count-delivered\" data-state=\"delivered\" data-count=\"1\""),
        "{overview}"
    );
    assert!(overview.contains("<meta http-equiv=\"refresh\" content=\"3\">"));
    assert!(
        overview.contains("<td class=\"configured\">yes</td>"),
        "the dispatcher tells the console its destinations: {overview}"
    );
    assert!(
        overview.contains("data-partition=\"dispatcher/0\""),
        "{overview}"
    );
    let answer = reqwest::get(format!("{base}/console/")).await.unwrap();
    let csp = answer.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");

    let (status, list) = get(&format!("{base}/console/ops?state=delivered")).await;
    assert_eq!(status, 200);
    let link = format!("href=\"/console/ops/{}\"", op.op_id);
    assert!(list.contains(&link), "{list}");
    let (status, page) = get(&format!("{base}/console/ops/{}", op.op_id)).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("class=\"attempt\" data-attempt=\"1\""),
        "{page}"
    );
    for link in overview.split("href=\"").skip(1) {
        let target = link.split('"').next().unwrap();
        assert!(target.starts_with("/console/"), "{target}");
    }

    let client = reqwest::Client::new();
    let post = client
        .post(format!("{base}/console/"))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
    assert_eq!(get(&format!("{base}/metrics")).await.0, 200);
    running.stop().await;

    // The same dispatcher without [console]: the probes only.
    let port = free_port();
    let running = dispatch_with(
        &db,
        &destination("statements", &receiver, ""),
        &format!("listen = \"127.0.0.1:{port}\"\n"),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for(Duration::from_secs(30), "the listener answers", || {
        let url = format!("{base}/healthz");
        async move { (reqwest::get(&url).await.ok()?.status() == 200).then_some(()) }
    })
    .await;
    assert_eq!(get(&format!("{base}/console/")).await.0, 404);
    assert_eq!(get(&format!("{base}/console/ops?state=dead")).await.0, 404);
    running.stop().await;
}

conformance!(the_console_is_served_under_console_only_when_enabled);
