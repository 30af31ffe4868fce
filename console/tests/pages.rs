//! The console's pages in-process, without a browser (axum's testing example: the router
//! called as a service): every value from the database escaped, the security headers, GET
//! only, 400, 404 and 503 pages, links under a base path. On SQLite: the pages read the store's
//! admin calls, which the store's own tests run on every backend; the browser test
//! (`admin/tests/console.rs`) renders them on PostgreSQL too.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use outbox_console::{Console, Options};
use outbox_producer::{Error as ProducerError, Operation};
use outbox_store::{
    AttemptOutcome, ClaimRoom, Completion, NextState, Partition, ResourceName, Store,
    StoreErrorKind,
};
use outbox_tests::{TestDb, lease};
use tower::ServiceExt as _;

/// Text that would run if a page ever let it through unescaped.
const SCRIPT: &str = "<script>window.__pwned=1</script>";

/// An answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn call(router: &axum::Router, method: Method, uri: &str) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
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

async fn get(router: &axum::Router, uri: &str) -> Answer {
    call(router, Method::GET, uri).await
}

/// One op of a resource holding [`SCRIPT`], made dead by an attempt whose error and answer
/// hold script too, and a stale enqueue of another such resource: what a hostile producer and
/// a hostile destination can put in the tables. Returns the dead op's id.
async fn hostile_rows(db: &TestDb, store: &Store) -> uuid::Uuid {
    let outbox = db.outbox().await;
    let resource = format!("statement:{SCRIPT}");
    let producer = lease(&outbox, &resource).await;
    let op = Operation::post("statements", "/v1/statements")
        .header("X-Secret-Note", "hunter2")
        .json(&serde_json::json!({"pin": "b0dy-s3cret"}))
        .idempotency_key(format!("key-{SCRIPT}"))
        .build()
        .unwrap();
    let enqueued = outbox.enqueue(&producer, &op).await.unwrap();

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
            &[ClaimRoom::new("statements", 10)],
            &[],
            10,
            1 << 20,
        )
        .await
        .unwrap();
    let c = &claimed.ops[0];
    let completion = Completion {
        seq: c.seq,
        op_id: c.op_id,
        attempt: c.attempt,
        started_at: c.claimed_at,
        outcome: AttemptOutcome::Failed,
        http_status: Some(400),
        error: Some(format!("HTTP 400 {SCRIPT}")),
        excerpt: Some(format!("{SCRIPT}<img src=x onerror=\"window.__pwned=2\">")),
        next: NextState::Dead,
        trace_context: None,
    };
    assert_eq!(
        store.op_complete_batch(&held, &[completion]).await.unwrap(),
        [true]
    );

    let rejected = format!("invoice:<img src=x onerror=\"window.__pwned=3\">{SCRIPT}");
    let old = lease(&outbox, &rejected).await;
    outbox.release(&old).await.unwrap();
    let _newer = lease(&outbox, &rejected).await;
    let late = Operation::post("invoices", "/v1/invoices")
        .idempotency_key("late")
        .build()
        .unwrap();
    assert!(matches!(
        outbox.enqueue(&old, &late).await,
        Err(ProducerError::Stale { .. })
    ));
    enqueued.op_id
}

/// No markup from the rows: the page holds no script element or event handler at all (the
/// console has no JavaScript), and the rows' text is there, escaped.
fn assert_escaped(page: &Answer) {
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let lower = page.body.to_lowercase();
    assert!(!lower.contains("<script"), "{}", page.body);
    assert!(!lower.contains("<img"), "{}", page.body);
    assert!(!lower.contains("onerror=\""), "{}", page.body);
    assert!(
        page.body
            .contains("&#60;script&#62;window.__pwned=1&#60;/script&#62;"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn every_value_from_the_database_is_escaped_on_every_page() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let op_id = hostile_rows(&db, &store).await;
    let router = outbox_console::router(store, Options::default());

    let overview = get(&router, "/").await;
    assert_escaped(&overview);
    assert!(overview.body.contains("invoice:&#60;img src=x onerror="));
    let dead = get(&router, "/ops?state=dead").await;
    assert_escaped(&dead);
    assert!(
        dead.body.contains(&format!("href=\"/ops/{op_id}\"")),
        "{}",
        dead.body
    );
    let op = get(&router, &format!("/ops/{op_id}")).await;
    assert_escaped(&op);
    assert!(op.body.contains("&#60;img src=x onerror="), "{}", op.body);
    assert!(op.body.contains("X-Secret-Note"), "header names are shown");
    assert!(!op.body.contains("hunter2"), "a header value was shown");
    assert!(!op.body.contains("b0dy-s3cret"), "the body was shown");
}

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let db = TestDb::sqlite().await;
    let router = outbox_console::router(db.store().await, Options::default());
    for uri in ["/", "/ops", "/charts", "/style.css", "/nowhere", "/ops/x"] {
        let a = get(&router, uri).await;
        let h = |name| {
            a.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
        };
        let csp = h(header::CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("default-src 'none'") && !csp.contains("script-src"),
            "{uri}: {csp}"
        );
        assert_eq!(h(header::X_CONTENT_TYPE_OPTIONS), "nosniff", "{uri}");
        assert_eq!(h(header::REFERRER_POLICY), "no-referrer", "{uri}");
        assert_eq!(h(header::CACHE_CONTROL), "no-store", "{uri}");
    }
    let css = get(&router, "/style.css").await;
    assert_eq!(css.status, StatusCode::OK);
    assert!(
        css.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}

#[tokio::test]
async fn only_get_is_answered_and_other_methods_get_405() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let op_id = hostile_rows(&db, &store).await;
    let router = outbox_console::router(store, Options::default());
    let op = format!("/ops/{op_id}");
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        for uri in [
            "/",
            "/ops?state=dead",
            "/charts",
            op.as_str(),
            "/style.css",
            "/nowhere",
        ] {
            let a = call(&router, method.clone(), uri).await;
            assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
            assert_eq!(a.headers[header::ALLOW], "GET, HEAD", "{method} {uri}");
            assert!(a.body.contains("outboxctl"), "{}", a.body);
        }
    }
    let head = call(&router, Method::HEAD, "/").await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(db.ops().await[0].state, "dead", "nothing changed");
}

#[tokio::test]
async fn malformed_names_get_400_and_unknown_ones_404_pages() {
    let db = TestDb::sqlite().await;
    let router = outbox_console::router(db.store().await, Options::default());
    for (uri, status, words) in [
        (
            "/ops/not-an-id",
            StatusCode::BAD_REQUEST,
            "not-an-id is not an op id",
        ),
        (
            "/ops/%3Cscript%3E",
            StatusCode::BAD_REQUEST,
            "&#60;script&#62; is not an op id",
        ),
        (
            "/ops?state=bogus",
            StatusCode::BAD_REQUEST,
            "state=bogus is not an op state",
        ),
        ("/ops?after=x", StatusCode::BAD_REQUEST, "after=x is not"),
        (
            "/ops/0190a5c2-8c3e-7f00-8000-000000000001",
            StatusCode::NOT_FOUND,
            "there is no op 0190a5c2",
        ),
        ("/ops/42", StatusCode::NOT_FOUND, "there is no op 42"),
        ("/nowhere", StatusCode::NOT_FOUND, "no such page"),
    ] {
        let a = get(&router, uri).await;
        assert_eq!(a.status, status, "{uri}: {}", a.body);
        assert!(a.body.contains(words), "{uri}: {}", a.body);
        assert!(a.body.contains("<title>"), "an HTML page: {}", a.body);
        assert!(
            !a.body.contains("http-equiv=\"refresh\""),
            "{uri}: no reload of a 4xx"
        );
    }
}

#[tokio::test]
async fn a_store_that_fails_gives_a_503_page_with_the_error_class() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let router = outbox_console::router(store.clone(), Options::default());
    store.close().await;
    for uri in ["/", "/ops?state=dead", "/ops/1"] {
        let a = get(&router, uri).await;
        assert_eq!(
            a.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{uri}: {}",
            a.body
        );
        assert!(
            a.body
                .contains("the outbox database did not answer (sqlite "),
            "{uri}: {}",
            a.body
        );
        assert!(
            a.body.contains("http-equiv=\"refresh\""),
            "a 503 page retries by itself"
        );
    }
    // Which class a closed pool is, so the words above are the real ones.
    let e = store.admin_status().await.unwrap_err();
    assert!(matches!(
        e,
        outbox_store::Error::Store(ref s) if matches!(s.kind(), StoreErrorKind::Unavailable | StoreErrorKind::Other)
    ));

    let detached = Console::new(Options::default()).router();
    let a = get(&detached, "/").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        a.body
            .contains("has not connected to the outbox database yet")
    );
}

#[tokio::test]
async fn under_a_base_path_every_link_stays_under_it() {
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let op_id = hostile_rows(&db, &store).await;
    let options = Options {
        base_path: "/console".to_owned(),
        refresh: Duration::from_secs(7),
        configured_destinations: Some(vec!["statements".to_owned()]),
    };
    let router = outbox_console::router(store, options);
    let overview = get(&router, "/console/").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        overview
            .body
            .contains("<meta http-equiv=\"refresh\" content=\"7\">")
    );
    let dead = get(&router, "/console/ops?state=dead").await;
    for page in [&overview, &dead] {
        for link in page.body.split("href=\"").skip(1) {
            let target = link.split('"').next().unwrap();
            assert!(target.starts_with("/console/"), "{target} in {}", page.body);
        }
    }
    assert!(dead.body.contains(&format!("/console/ops/{op_id}")));
    // invoices holds a rejection only, not an op; statements is configured.
    assert!(
        overview.body.contains("<td class=\"configured\">yes</td>"),
        "{}",
        overview.body
    );
    let bare = get(&router, "/console").await;
    assert_eq!(bare.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(bare.headers[header::LOCATION], "/console/");
    assert_eq!(get(&router, "/").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&router, "/console/ops/{op_id}").await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn the_charts_draw_the_dispatchers_counts_of_the_window() {
    use outbox_store::stats::{BacklogSample, Counts, MinuteCounts, minute_of};
    let db = TestDb::sqlite().await;
    let store = db.store().await;
    let router = outbox_console::router(store.clone(), Options::default());
    let empty = get(&router, "/charts").await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(empty.body.contains("id=\"no-counts\""), "{}", empty.body);

    let minute = minute_of(time::OffsetDateTime::now_utc()) - time::Duration::minutes(5);
    let mut counts = Counts {
        retried: 2,
        dead: 1,
        ..Counts::default()
    };
    for _ in 0..7 {
        counts.delivered_after(std::time::Duration::from_millis(300));
    }
    let rows = [MinuteCounts {
        minute,
        destination: "billing".to_owned(),
        counts,
    }];
    let backlog = BacklogSample {
        minute,
        pending: 12,
        in_flight: 3,
        oldest_pending_ms: Some(4_000),
    };
    for instance in [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()] {
        store
            .stats_write(instance, &rows, Some(&backlog))
            .await
            .unwrap();
    }
    let hour = get(&router, "/charts").await;
    assert_eq!(hour.status, StatusCode::OK);
    let body = &hour.body;
    assert!(!body.to_lowercase().contains("<script"), "{body}");
    // Two dispatchers' rows of the minute, summed.
    for (what, n) in [("delivered", 14), ("retried", 4), ("dead", 2)] {
        assert!(
            body.contains(&format!("data-total=\"{what}\">{n}<")),
            "{what}: {body}"
        );
    }
    let at = minute
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    assert!(
        body.contains(&format!("data-at=\"{at}\" data-value=\"14\"")),
        "{body}"
    );
    assert!(body.contains("≤ 500 ms p50"), "{body}");
    assert!(body.contains("data-value=\"12\""), "the backlog: {body}");
    assert!(body.contains("<svg"), "{body}");
    let day = get(&router, "/charts?window=day").await;
    assert_eq!(day.status, StatusCode::OK);
    assert!(
        day.body.contains("data-total=\"delivered\">14<"),
        "{}",
        day.body
    );
    for bad in ["/charts?window=week", "/charts?window=%3Cscript%3E"] {
        let a = get(&router, bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(!a.body.contains("<script>"), "{}", a.body);
    }
}
