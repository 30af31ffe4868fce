//! G10 in SQL: the shared table of enqueue inputs (tests/cases/enqueue_validation.json) run
//! against `outbox.enqueue`, and the enqueue's one-expression validity check compared with the
//! detailed checks that name the refused field.

use std::collections::HashMap;

use serde_json::{Value, json};
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use outbox_tests::{EnqueueCase, enqueue_cases};

use super::{SqlLease, SqlOp, connect, enqueue, migrated, refusal, try_acquire};

/// The enqueue arguments of one case, made as producer/tests/validation_table.rs makes the
/// builder's: the body set together with its content type.
fn case_op(case: &EnqueueCase) -> SqlOp {
    let (body, content_type) = match case.body_and_content_type() {
        Some((body, content_type)) => (Some(body), Some(content_type)),
        None => (None, None),
    };
    SqlOp {
        destination: case.text("destination").unwrap_or_default(),
        method: case.text("method").unwrap_or_default(),
        path: case.text("path").unwrap_or_default(),
        headers: case.headers_json(),
        body,
        content_type,
        idempotency_key: case.text("idempotency_key"),
        order_key: case.text("order_key"),
        unordered: case.flag("unordered"),
        not_before_ms: case.number("not_before_ms") as i64,
        supersede_pending: case.flag("supersede_pending"),
        expire_with_generation: case.flag("expire_with_generation"),
        traceparent: None,
    }
}

/// What the server said of one case: `Ok(None)` accepted, `Ok(Some(field))` refused naming
/// `field`, `Err` anything else. `nul_field` names the input holding a NUL character, if one
/// does.
fn refused_field(e: &sqlx::Error, nul_field: Option<&str>) -> Result<Option<String>, String> {
    let Some(r) = refusal(e) else {
        return Err(e.to_string());
    };
    match r.code.as_str() {
        "OB005" => match (&r.column, r.detail["field"].as_str()) {
            (Some(column), Some(field)) if column == field => Ok(Some(field.to_owned())),
            (column, field) => Err(format!("OB005 with COLUMN {column:?}, DETAIL {field:?}")),
        },
        // PostgreSQL text cannot hold a NUL character: the server refuses such a parameter
        // itself (invalid_byte_sequence) before any function runs, so the function never
        // sees that case. It counts as refused for the field holding the NUL, and for no
        // other reason.
        "22021" if nul_field.is_some() => Ok(nul_field.map(str::to_owned)),
        _ => Err(format!("{} {}", r.code, r.message)),
    }
}

/// G10 in SQL: every case of the shared table, run under a held lease inside a transaction
/// that is rolled back afterwards, is accepted (a row, and the op in the transaction) or
/// refused with OB005 naming the table's field in COLUMN and DETAIL; nothing stays behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_sql_enqueue_accepts_and_refuses_exactly_what_the_shared_table_says() {
    let db = migrated().await;
    let mut c = connect(&db).await;
    let cases = enqueue_cases();

    // A lease on every resource of the table that try_acquire grants; a resource it refuses is
    // refused by the enqueue before the lease is looked at, so the default's lease serves.
    let default_resource = cases[0].text("resource").unwrap_or_default();
    let mut leases: HashMap<String, SqlLease> = HashMap::new();
    for case in &cases {
        let resource = case.text("resource").unwrap_or_default();
        if !leases.contains_key(&resource)
            && let Ok(Some(lease)) = try_acquire(&mut c, &resource, Some("5 minutes")).await
        {
            leases.insert(resource, lease);
        }
    }
    let before = db.snapshot().await;

    let mut wrong = Vec::new();
    for case in &cases {
        let name = &case.name;
        let expected = case.expect.clone();
        let resource = case.text("resource").unwrap_or_default();
        let lease = leases.get(&resource).unwrap_or(&leases[&default_resource]);
        let mut tx = c.begin().await.unwrap();
        let got = match enqueue(&mut *tx, &resource, lease, &case_op(case)).await {
            Ok(done) => {
                let rows: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM outbox_ops WHERE op_id = $1 AND resource = $2",
                )
                .bind(done.op_id)
                .bind(&resource)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
                match (rows, done.duplicate) {
                    (1, false) => Ok(None),
                    _ => Err(format!("accepted with {rows} rows, {done:?}")),
                }
            }
            Err(e) => refused_field(&e, case.nul_field()),
        };
        tx.rollback().await.unwrap();
        if got != Ok(expected.clone()) {
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
    assert_eq!(
        db.snapshot().await,
        before,
        "the rolled-back cases left nothing, not even a rejection"
    );
}

// ---- The fast validity check against the detailed checks (G10) ----

/// One set of enqueue inputs for comparing `outbox.op_is_valid` with the detailed checks.
struct Inputs {
    name: String,
    resource: String,
    owner_id: Option<Uuid>,
    token: Option<i64>,
    op: SqlOp,
    /// The session's `outbox.max_body_bytes` ('' is unset).
    max_body_bytes: &'static str,
}

impl Inputs {
    fn new(name: impl Into<String>, resource: &str, op: SqlOp) -> Inputs {
        Inputs {
            name: name.into(),
            resource: resource.to_owned(),
            owner_id: Some(Uuid::nil()),
            token: Some(1),
            op,
            max_body_bytes: "",
        }
    }

    /// The defaults of [`SqlOp::post`] with one change.
    fn op(name: &str, change: impl FnOnce(&mut SqlOp)) -> Inputs {
        let mut op = SqlOp::post("key-1", r#"{"account":1842}"#);
        change(&mut op);
        Inputs::new(name, "statement:account-1842:2026-07", op)
    }
}

/// Edge cases of every rule, beside the shared table's cases.
fn edge_cases() -> Vec<Inputs> {
    let headers = |name: &str, h: Value| Inputs::op(name, |o| o.headers = h);
    let path = |p: &str| Inputs::op(&format!("path {p:?}"), |o| o.path = p.to_owned());
    let long_value = |n: usize| json!([["X-Note", "v".repeat(n)]]);
    let many = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| json!([format!("X-H{i}"), format!("value-{i}")]))
                .collect(),
        )
    };
    let mut cases = vec![
        headers("no headers", json!([])),
        headers("Te is reserved", json!([["Te", "x"]])),
        headers("Tes is not reserved", json!([["Tes", "x"]])),
        headers("x-outbox without its dash", json!([["x-outbox", "x"]])),
        headers("X-OUTBOX- in capitals", json!([["X-OUTBOX-ID", "x"]])),
        headers("WEBHOOK- in capitals", json!([["WEBHOOK-id", "x"]])),
        headers("Proxy-Authorization", json!([["Proxy-Authorization", "x"]])),
        headers(
            "Transfer-Encoding",
            json!([["transfer-encoding", "chunked"]]),
        ),
        headers(
            "the second header reserved",
            json!([["X-A", "b"], ["Host", "x"]]),
        ),
        headers("an empty value", json!([["X-A", ""]])),
        headers("quote and backslash in a value", json!([["X-A", "q\"\\"]])),
        headers("a DEL in a value", json!([["X-A", "a\u{7f}b"]])),
        headers("a non-ASCII name", json!([["X-é", "a"]])),
        headers("a pair of one", json!([["X-A"]])),
        headers("a number as value", json!([["X-A", 1]])),
        headers("a null name", json!([[null, "x"]])),
        headers("a number as header", json!([1])),
        headers("a string as header", json!(["ab"])),
        headers("an empty pair", json!([[]])),
        headers("a null header", json!([null])),
        headers("a triple", json!([["a", "b", "c"]])),
        headers("an object", json!({"X-A": "b"})),
        headers("a string", json!("X-A")),
        headers("a name of 128 characters", json!([["X".repeat(128), "v"]])),
        headers("a name of 129 characters", json!([["X".repeat(129), "v"]])),
        headers("header value of 128 characters", long_value(128)),
        headers("header value of 129 characters", long_value(129)),
        headers("header value of 8192 bytes", long_value(8192)),
        headers("header value of 8193 bytes", long_value(8193)),
        headers("10 headers, JSON over 128 bytes", many(10)),
        headers("64 headers", many(64)),
        headers("65 headers", many(65)),
    ];
    for p in [
        "/",
        "/a/.",
        "/.../",
        "/a/%2e%2e%2e",
        "/a?/../",
        "/a/..%2f",
        "/a/..",
        "/..",
        "/a/.%2E/b",
        "/a/%2E.",
        "/%2e%2E",
        "/a/..?x",
        "/a\\b",
        "/a#b",
        "//x",
        "/a b",
        "/é",
        "x/a",
        "",
    ] {
        cases.push(path(p));
    }
    cases.push(path(&format!("/{}", "p".repeat(2047))));
    cases.push(path(&format!("/{}", "p".repeat(2048))));
    let text_field = |field: &str, value: Option<String>, set: fn(&mut SqlOp, Option<String>)| {
        let name = format!(
            "{field} {:?}",
            value.as_deref().map(|v| if v.len() > 20 {
                format!("{} chars", v.chars().count())
            } else {
                v.to_owned()
            })
        );
        Inputs::op(&name, |o| set(o, value))
    };
    let ct = |v: &str| {
        text_field("content type", Some(v.to_owned()), |o, v| {
            o.content_type = v
        })
    };
    let key = |v: Option<String>| text_field("key", v, |o, v| o.idempotency_key = v);
    let dest = |v: String| text_field("destination", Some(v), |o, v| o.destination = v.unwrap());
    let method = |v: &str| text_field("method", Some(v.to_owned()), |o, v| o.method = v.unwrap());
    let order = |v: String| text_field("order key", Some(v), |o, v| o.order_key = v);
    let trace = |v: String| text_field("traceparent", Some(v), |o, v| o.traceparent = v);
    cases.extend([" \t", " a", "a\tb", "text/é", "text/plain\u{7f}"].map(ct));
    cases.push(ct(&"a".repeat(8192)));
    cases.push(ct(&"a".repeat(8193)));
    cases.push(Inputs::op("no body, no content type", |o| {
        (o.body, o.content_type) = (None, None)
    }));
    cases.extend(
        [
            Some("k".repeat(255)),
            Some("k".repeat(256)),
            Some("a b".into()),
            Some("é".into()),
            Some(String::new()),
            None,
        ]
        .map(key),
    );
    cases.extend(
        [
            "d".repeat(64),
            "d".repeat(65),
            "a-b_c".into(),
            "A".into(),
            String::new(),
        ]
        .map(dest),
    );
    cases.extend(["get", "GeT", "pOsT", "delete", "TRACE", "póst", "PO ST", ""].map(method));
    cases.extend(
        [
            String::new(),
            "é".repeat(255),
            "é".repeat(256),
            "a\u{7f}b".into(),
            "a\u{85}b".into(),
            "relevé".into(),
        ]
        .map(order),
    );
    cases.push(Inputs::op("order key and unordered", |o| {
        (o.order_key, o.unordered) = (Some("a".into()), true)
    }));
    for ms in [-1, 0, 31_536_000_000, 31_536_000_001] {
        cases.push(Inputs::op(&format!("not before {ms} ms"), |o| {
            o.not_before_ms = ms
        }));
    }
    let (trace_id, span_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    cases.extend(
        [
            format!("00-{trace_id}-{span_id}-01"),
            format!("00-{}-{span_id}-01", "0".repeat(32)),
            format!("00-{trace_id}-{}-01", "0".repeat(16)),
            format!("00-{}-{span_id}-01", trace_id.to_uppercase()),
            format!("00-{trace_id}-{span_id}-1"),
            format!(
                "00-{}-{}{}-01",
                &trace_id[..31],
                &trace_id[31..],
                &span_id[..15]
            ),
            format!("01-{trace_id}-{span_id}-01"),
            format!("00-{trace_id}-{span_id}-01-"),
        ]
        .map(trace),
    );
    for resource in [
        "dispatcher/0".to_owned(),
        "Dispatcher/0".into(),
        "r".repeat(200),
        "r".repeat(201),
        "é".repeat(200),
        "a\u{7f}".into(),
        "a\u{85}".into(),
        "a\u{9f}".into(),
        "a\u{a0}".into(),
        String::new(),
    ] {
        let name = format!(
            "resource of {} chars {:?}",
            resource.chars().count(),
            resource.chars().last()
        );
        cases.push(Inputs::new(name, &resource, SqlOp::post("k", "{}")));
    }
    let mut no_owner = Inputs::op("no owner id", |_| {});
    no_owner.owner_id = None;
    let mut no_token = Inputs::op("no token", |_| {});
    no_token.token = None;
    cases.extend([no_owner, no_token]);
    for (limit, body_len) in [
        ("10", 10),
        ("10", 11),
        ("16777216", 2),
        ("", 1_048_576),
        ("", 1_048_577),
        ("abc", 2),
        ("0", 2),
        ("16777217", 2),
        ("1234567890", 2),
        ("-5", 2),
    ] {
        let mut inputs = Inputs::op(
            &format!("{body_len} bytes under max_body_bytes {limit:?}"),
            |o| o.body = Some(vec![b'x'; body_len]),
        );
        inputs.max_body_bytes = limit;
        cases.push(inputs);
    }
    cases
}

/// What `outbox.op_is_valid` says of `inputs`, passed as `outbox.enqueue` passes them; NULL
/// counts as false, as it does there.
async fn fast_verdict(c: &mut PgConnection, i: &Inputs) -> Result<bool, String> {
    sqlx::query_scalar::<_, Option<bool>>(
        "SELECT outbox.op_is_valid($1, $2, $3, $4, $5, $6, $7::jsonb, coalesce($8, ''::bytea), \
         $9, $10, $11, $12, $13::bigint * interval '1 millisecond', $14)",
    )
    .bind(&i.resource)
    .bind(i.owner_id)
    .bind(i.token)
    .bind(&i.op.destination)
    .bind(&i.op.method)
    .bind(&i.op.path)
    .bind(i.op.headers.to_string())
    .bind(i.op.body.as_deref())
    .bind(i.op.content_type.as_deref())
    .bind(i.op.idempotency_key.as_deref())
    .bind(i.op.order_key.as_deref())
    .bind(i.op.unordered)
    .bind(i.op.not_before_ms)
    .bind(i.op.traceparent.as_deref())
    .fetch_one(c)
    .await
    .map(|v| v.unwrap_or(false))
    .map_err(|e| e.to_string())
}

/// What the detailed checks say of `inputs`: `None` when all pass, else the refused field.
async fn detailed_verdict(c: &mut PgConnection, i: &Inputs) -> Result<Option<String>, String> {
    let checks = async {
        sqlx::query("SELECT outbox.check_resource($1), outbox.check_owner($2, $3)")
            .bind(&i.resource)
            .bind(i.owner_id)
            .bind(i.token)
            .execute(&mut *c)
            .await?;
        sqlx::query(
            "SELECT outbox.check_op($1, $2, $3, $4::jsonb, coalesce($5, ''::bytea), $6, $7, \
             $8, $9, $10::bigint * interval '1 millisecond', $11)",
        )
        .bind(&i.op.destination)
        .bind(&i.op.method)
        .bind(&i.op.path)
        .bind(i.op.headers.to_string())
        .bind(i.op.body.as_deref())
        .bind(i.op.content_type.as_deref())
        .bind(i.op.idempotency_key.as_deref())
        .bind(i.op.order_key.as_deref())
        .bind(i.op.unordered)
        .bind(i.op.not_before_ms)
        .bind(i.op.traceparent.as_deref())
        .execute(&mut *c)
        .await
    };
    match checks.await {
        Ok(_) => Ok(None),
        Err(e) => refused_field(&e, None),
    }
}

/// `outbox.op_is_valid` is the fast path of the enqueue's validation: wherever it answers true
/// the detailed checks pass, and it answers false exactly where they refuse, except for the
/// inputs it is documented to leave to them (header values over 128 characters). Run on every
/// case of the shared table (but the NUL one, which cannot be sent) and on edge cases of each
/// rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_sql_fast_validity_check_agrees_with_the_detailed_checks() {
    let db = migrated().await;
    let mut c = connect(&db).await;
    let mut all: Vec<Inputs> = enqueue_cases()
        .iter()
        .filter(|case| case.nul_field().is_none())
        .map(|case| {
            let resource = case.text("resource").unwrap_or_default();
            Inputs::new(case.name.clone(), &resource, case_op(case))
        })
        .collect();
    all.extend(edge_cases());
    let left_to_the_detailed_checks = [
        "header value of 129 characters",
        "header value of 8192 bytes",
    ];
    let mut wrong = Vec::new();
    for i in &all {
        sqlx::query("SELECT set_config('outbox.max_body_bytes', $1, false)")
            .bind(i.max_body_bytes)
            .execute(&mut c)
            .await
            .unwrap();
        let fast = fast_verdict(&mut c, i).await;
        let detailed = detailed_verdict(&mut c, i).await;
        let accepted = match &detailed {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(e) => {
                wrong.push(format!("{}: the detailed checks failed: {e}", i.name));
                continue;
            }
        };
        let expected = accepted && !left_to_the_detailed_checks.contains(&i.name.as_str());
        if fast != Ok(expected) {
            wrong.push(format!(
                "{}: op_is_valid {fast:?}, detailed checks {detailed:?}",
                i.name
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} inputs:\n{}",
        wrong.len(),
        all.len(),
        wrong.join("\n")
    );
}
