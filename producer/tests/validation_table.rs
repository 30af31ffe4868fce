//! The shared table of enqueue inputs (`tests/cases/enqueue_validation.json`) run against the
//! Rust producer API: each case is accepted, or refused naming the field the table names. The
//! SQL entry points for other languages run the same table (`tests/it/sql_api/`), so the rules
//! cannot drift apart.

use std::time::Duration;

use outbox_producer::{DEFAULT_MAX_BODY_BYTES, InvalidInput, Method, Operation, ResourceName};
use outbox_tests::{EnqueueCase, enqueue_cases};

/// What the producer API says of one case: `Ok` or the refused field.
fn check(case: &EnqueueCase) -> Result<(), InvalidInput> {
    ResourceName::new(case.text("resource").unwrap_or_default())?;
    let method: Method = case.text("method").unwrap_or_default().parse()?;
    let mut op = Operation::builder(
        case.text("destination").unwrap_or_default(),
        method,
        case.text("path").unwrap_or_default(),
    );
    for (name, value) in case.headers() {
        op = op.header(name, value);
    }
    if let Some((body, content_type)) = case.body_and_content_type() {
        op = op.body(body, content_type);
    }
    if let Some(key) = case.text("idempotency_key") {
        op = op.idempotency_key(key);
    }
    if let Some(key) = case.text("order_key") {
        op = op.order_key(key);
    }
    if case.flag("unordered") {
        op = op.unordered();
    }
    op = op.not_before(Duration::from_millis(case.number("not_before_ms")));
    if case.flag("supersede_pending") {
        op = op.supersede_pending();
    }
    if case.flag("expire_with_generation") {
        op = op.expire_with_generation();
    }
    let op = op.build()?;
    // The body limit is the enqueue's (Outbox::with_max_body_bytes); the default applies here.
    outbox_store::request::check_body(op.body().len(), DEFAULT_MAX_BODY_BYTES)
}

#[test]
fn the_producer_api_accepts_and_refuses_exactly_what_the_shared_table_says() {
    let cases = enqueue_cases();
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let got = check(case);
            let got_field = got.as_ref().err().map(|e| e.field.to_owned());
            (got_field != case.expect)
                .then(|| format!("{}: expected {:?}, got {got:?}", case.name, case.expect))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}
