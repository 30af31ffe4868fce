//! The shared table of enqueue inputs (`tests/cases/enqueue_validation.json`) run against the
//! Rust producer API: each case is accepted, or refused naming the field the table names. The
//! SQL entry points for other languages run the same table, so the rules cannot drift apart.

use std::time::Duration;

use outbox_producer::{DEFAULT_MAX_BODY_BYTES, InvalidInput, Method, Operation, ResourceName};
use serde_json::{Map, Value};

const TABLE: &str = include_str!("../../tests/cases/enqueue_validation.json");

/// One case's inputs: the defaults with the case's `set` applied.
fn inputs(defaults: &Map<String, Value>, set: &Map<String, Value>) -> Map<String, Value> {
    let mut all = defaults.clone();
    for (k, v) in set {
        assert!(all.contains_key(k), "the table sets an unknown field {k}");
        all.insert(k.clone(), v.clone());
    }
    all
}

fn text(v: &Map<String, Value>, k: &str) -> Option<String> {
    v[k].as_str().map(str::to_owned)
}

/// What the producer API says of one case: `Ok` or the refused field.
fn check(v: &Map<String, Value>) -> Result<(), InvalidInput> {
    ResourceName::new(text(v, "resource").unwrap_or_default())?;
    let method: Method = text(v, "method").unwrap_or_default().parse()?;
    let mut op = Operation::builder(
        text(v, "destination").unwrap_or_default(),
        method,
        text(v, "path").unwrap_or_default(),
    );
    for h in v["headers"].as_array().expect("headers is a list") {
        let pair = h.as_array().expect("a header is [name, value]");
        op = op.header(pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
    }
    let body = text(v, "body").map(|b| b.repeat(v["body_repeat"].as_u64().unwrap() as usize));
    if let (Some(body), Some(content_type)) = (&body, text(v, "content_type")) {
        op = op.body(body.clone().into_bytes(), content_type);
    }
    if let Some(key) = text(v, "idempotency_key") {
        op = op.idempotency_key(key);
    }
    if let Some(key) = text(v, "order_key") {
        op = op.order_key(key);
    }
    if v["unordered"].as_bool().unwrap() {
        op = op.unordered();
    }
    op = op.not_before(Duration::from_millis(v["not_before_ms"].as_u64().unwrap()));
    if v["supersede_pending"].as_bool().unwrap() {
        op = op.supersede_pending();
    }
    if v["expire_with_generation"].as_bool().unwrap() {
        op = op.expire_with_generation();
    }
    let op = op.build()?;
    // The body limit is the enqueue's (Outbox::with_max_body_bytes); the default applies here.
    outbox_store::request::check_body(op.body().len(), DEFAULT_MAX_BODY_BYTES)
}

#[test]
fn the_producer_api_accepts_and_refuses_exactly_what_the_shared_table_says() {
    let table: Value = serde_json::from_str(TABLE).expect("the table is JSON");
    let defaults = table["defaults"].as_object().unwrap();
    let cases = table["cases"].as_array().unwrap();
    let mut wrong = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let got = check(&inputs(defaults, case["set"].as_object().unwrap()));
        let expected = match &case["expect"] {
            Value::String(s) if s == "ok" => None,
            other => Some(other["invalid"].as_str().unwrap().to_owned()),
        };
        let got_field = got.as_ref().err().map(|e| e.field.to_owned());
        if got_field != expected {
            wrong.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    assert!(cases.len() >= 50, "the table lost cases: {}", cases.len());
}
