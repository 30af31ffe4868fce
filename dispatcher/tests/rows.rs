//! Hostile rows (issue 12, G11): the dispatcher trusts no row. Ops whose path, method or
//! headers were changed by SQL after the enqueue are never sent and end `dead` with the rule
//! named; a row that cannot be read at all is made dead instead of stalling (or panicking) the
//! partition; a destination's configured headers are the only values sent under their names;
//! and a completion the database refuses is recorded without its optional parts, or given up,
//! while the rest of the partition moves on.

mod common;

use std::time::Duration;

use common::{destination_at, dispatch, post, until_states};
use outbox_producer::{Operation, Outbox};
use outbox_tests::{Kind, Receiver, Reply, TestDb, conformance, lease, wait_until};

/// Enqueues `op` under a resource of its own (no op waits on another's order key).
async fn enqueue(outbox: &Outbox, op: &Operation) {
    let resource = format!("rows:{}", op.idempotency_key());
    let lease = lease(outbox, &resource).await;
    outbox.enqueue(&lease, op).await.expect("enqueue");
}

/// Runs `pg` on PostgreSQL (and on SQL Server, whose T-SQL they are too) or `sqlite` on
/// SQLite, one statement each, written against the queue layout's tables ([`TestDb::layout`]).
async fn plant(db: &TestDb, pg: &[&'static str], sqlite: &[&'static str]) {
    let statements = match db.kind() {
        Kind::Postgres | Kind::Mssql => pg,
        Kind::Sqlite => sqlite,
    };
    for sql in statements {
        db.execute(sql).await;
    }
}

/// The state and last error of the op holding `key`.
async fn fate(db: &TestDb, key: &str) -> (String, String) {
    let op = db
        .ops()
        .await
        .into_iter()
        .find(|o| o.idempotency_key == key)
        .unwrap_or_else(|| panic!("no op {key}"));
    (op.state, op.last_error.unwrap_or_default())
}

/// Each planted key, with the words its op's last error must hold (the rule it breaks).
const PLANTED: &[(&str, &str)] = &[
    ("p-at", "path"),
    ("p-dot-host", "path"),
    ("p-port", "path"),
    ("p-climb", ".. segment"),
    ("p-encoded-climb", ".. segment"),
    ("h-host", "Host is reserved"),
    ("h-auth", "Authorization is reserved"),
    ("h-crlf", "CR or LF"),
    ("h-not-pairs", "cannot be read"),
    ("m-trace", "method"),
    ("k-space", "idempotency_key"),
];

async fn g11_planted_rows_are_never_sent_and_dead_with_the_rule_named(db: TestDb) {
    let outbox = db.outbox().await;
    let api = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    for (key, _) in PLANTED {
        enqueue(&outbox, &post("api", "/v1/items", key)).await;
    }
    // The table's own rules refuse most of these (0003_hardening.sql): take them away, as an
    // older schema or a careless migration would, so that only the dispatcher stands between
    // these rows and the network.
    let drop_rules: &[&'static str] = match db.kind() {
        // The same rules, under SQL Server's constraint names (migrations/mssql).
        Kind::Mssql => &[
            "ALTER TABLE outbox_requests DROP CONSTRAINT CK_outbox_ops_path_format",
            "ALTER TABLE outbox_requests DROP CONSTRAINT CK_outbox_ops_method",
            "ALTER TABLE outbox_requests DROP CONSTRAINT CK_outbox_ops_headers_array",
        ],
        // PostgreSQL keeps them in one row trigger (0014_request_rules.sql).
        Kind::Postgres => &["DROP TRIGGER outbox_requests_rules ON outbox_requests"],
        // SQLite's are taken away by the statements below instead.
        Kind::Sqlite => &[],
    };
    plant(
        &db,
        drop_rules,
        &["DROP TRIGGER outbox_ops_row_rules_update"],
    )
    .await;
    let at = format!(
        "UPDATE outbox_requests SET path = '@{}/stolen' WHERE idempotency_key = 'p-at'",
        elsewhere.url().trim_start_matches("http://")
    );
    db.execute(Box::leak(at.into_boxed_str())).await;
    for sql in [
        "UPDATE outbox_requests SET path = '.evil.example/x' WHERE idempotency_key = 'p-dot-host'",
        "UPDATE outbox_requests SET path = ':8443/x' WHERE idempotency_key = 'p-port'",
        "UPDATE outbox_requests SET path = '/v1/../../admin' WHERE idempotency_key = 'p-climb'",
        "UPDATE outbox_requests SET path = '/v1/%2e%2e/%2E%2e/admin' WHERE idempotency_key = 'p-encoded-climb'",
        "UPDATE outbox_requests SET headers = '[[\"Host\",\"evil.example\"]]' WHERE idempotency_key = 'h-host'",
        "UPDATE outbox_requests SET headers = '[[\"Authorization\",\"Bearer stolen\"]]' WHERE idempotency_key = 'h-auth'",
        "UPDATE outbox_requests SET headers = '[[\"X-Evil\",\"a\\r\\nInjected: 1\"]]' WHERE idempotency_key = 'h-crlf'",
        "UPDATE outbox_requests SET headers = '{\"X-Evil\":\"1\"}' WHERE idempotency_key = 'h-not-pairs'",
        "UPDATE outbox_requests SET idempotency_key = 'k space' WHERE idempotency_key = 'k-space'",
    ] {
        db.execute(sql).await;
    }
    plant(
        &db,
        &["UPDATE outbox_requests SET method = 'TRACE' WHERE idempotency_key = 'm-trace'"],
        // SQLite cannot drop a CHECK constraint; this connection ignores them instead.
        &[
            "PRAGMA ignore_check_constraints = ON; UPDATE outbox_requests SET method = 'TRACE' WHERE idempotency_key = 'm-trace'",
        ],
    )
    .await;
    enqueue(&outbox, &post("api", "/v1/items", "good")).await;
    let running = dispatch(
        &db,
        &destination_at(
            "api",
            &api.url(),
            "headers = { Authorization = \"Bearer ${TEST_TOKEN}\" }",
        ),
    );
    until_states(
        &db,
        "every planted op is dead and the good one delivered",
        |s| s.len() == PLANTED.len() + 1 && s.iter().all(|s| s == "dead" || s == "delivered"),
    )
    .await;
    running.stop().await;

    let sent: Vec<String> = api.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        sent,
        ["/v1/items"],
        "only the good op reached the destination"
    );
    assert_eq!(api.received()[0].header("idempotency-key"), "good");
    assert!(
        elsewhere.received().is_empty(),
        "nothing went to another host"
    );
    for (key, rule) in PLANTED {
        let key = if *key == "k-space" { "k space" } else { key };
        let (state, error) = fate(&db, key).await;
        assert_eq!(state, "dead", "{key}: {error}");
        assert!(
            error.contains(rule) && error.contains("never sent"),
            "{key}: the error names the rule {rule:?}: {error}"
        );
    }
    // Nothing was sent, and every planted op's attempt says so.
    let attempts = db.attempts().await;
    assert_eq!(attempts.len(), PLANTED.len() + 1);
    assert!(
        attempts
            .iter()
            .filter(|a| a.outcome.as_deref() == Some("failed"))
            .all(|a| a.http_status.is_none()),
        "{attempts:?}"
    );
}

async fn g11_the_table_refuses_rows_that_break_the_rules_it_can_check(db: TestDb) {
    let outbox = db.outbox().await;
    enqueue(&outbox, &post("api", "/v1/items", "k")).await;
    for sql in [
        "UPDATE outbox_requests SET path = 'v1/items'",
        "UPDATE outbox_requests SET path = '//evil.example/x'",
        "UPDATE outbox_requests SET path = '/a b'",
        "UPDATE outbox_requests SET headers = '{\"X\":\"1\"}'",
    ] {
        let refused = db.try_execute(sql).await;
        assert!(refused.is_err(), "{sql} was accepted");
    }
    let refused = match db.kind() {
        Kind::Postgres => {
            db.try_execute("UPDATE outbox_requests SET body = decode(repeat('00', 16777217), 'hex')")
                .await
        }
        Kind::Sqlite => {
            db.try_execute("UPDATE outbox_requests SET body = zeroblob(16777217)")
                .await
        }
        Kind::Mssql => {
            db.try_execute("UPDATE outbox_requests SET body = CAST(REPLICATE(CAST('0' AS varchar(max)), 16777217) AS varbinary(max))")
            .await
        }
    };
    assert!(refused.is_err(), "a body above 16 MiB was accepted");
    if db.kind() == Kind::Postgres {
        // A direct INSERT too, each broken rule named as its CHECK constraint was
        // (0014_request_rules.sql keeps the names in a trigger).
        for (set, rule) in [
            ("'TRACE' AS method, path", "outbox_ops_method"),
            ("method, 'no-slash' AS path", "outbox_ops_path_format"),
        ] {
            let sql = format!(
                "INSERT INTO outbox_requests (op_id, resource, fence, owner_id, destination, \
                     idempotency_key, request_hash, partition, method, path, headers, body) \
                 SELECT gen_random_uuid(), resource, fence, owner_id, destination, 'direct', \
                     request_hash, partition, {set}, headers, body FROM outbox_requests"
            );
            let refused = db.try_execute(Box::leak(sql.into_boxed_str())).await;
            let error = refused.expect_err("a direct INSERT broke a rule");
            assert!(error.contains(rule), "{error}");
        }
    }
    let op = &db.ops().await[0];
    assert_eq!(
        (op.state.as_str(), op.body.as_slice()),
        ("pending", &br#"{"key":"k"}"#[..])
    );
}

async fn g11_a_row_that_cannot_be_read_is_dead_and_the_partition_goes_on(db: TestDb) {
    let outbox = db.outbox().await;
    let api = Receiver::start().await;
    enqueue(&outbox, &post("api", "/v1/items", "unreadable")).await;
    enqueue(&outbox, &post("api", "/v1/items", "no-uuid")).await;
    enqueue(&outbox, &post("api", "/v1/items", "good")).await;
    // Headers that are a JSON array, as the table requires, but not of pairs: before, the
    // whole claim failed on it and was retried forever, the claimed ops stuck in flight.
    db.execute(
        "UPDATE outbox_requests SET headers = '[1, 2]' WHERE idempotency_key = 'unreadable'",
    )
    .await;
    // An op id that is no UUID (SQLite stores it as text): before, reading it panicked the
    // partition's loop, and its lease went on being renewed with nobody claiming (a zombie
    // leader no standby could replace). PostgreSQL's uuid column cannot hold one, nor SQL
    // Server's uniqueidentifier.
    plant(
        &db,
        &[],
        &["UPDATE outbox_requests SET op_id = 'not-a-uuid' WHERE idempotency_key = 'no-uuid'"],
    )
    .await;
    let running = dispatch(&db, &destination_at("api", &api.url(), ""));
    until_states(&db, "the good op is delivered, the others dead", |s| {
        s.len() == 3
            && s.iter().filter(|s| *s == "dead").count()
                == 1 + usize::from(db.kind() == Kind::Sqlite)
            && s.contains(&"delivered".to_owned())
    })
    .await;
    running.stop().await;
    let (state, error) = fate(&db, "unreadable").await;
    assert_eq!(state, "dead");
    assert!(error.contains("cannot be read, never sent"), "{error}");
    if db.kind() == Kind::Sqlite {
        let (state, error) = fate(&db, "no-uuid").await;
        assert_eq!(state, "dead");
        assert!(error.contains("op_id"), "{error}");
    }
    let mut sent: Vec<String> = api
        .received()
        .iter()
        .map(|r| r.header("idempotency-key").to_owned())
        .collect();
    sent.sort();
    let expected: &[&str] = match db.kind() {
        Kind::Sqlite => &["good"],
        Kind::Postgres | Kind::Mssql => &["good", "no-uuid"],
    };
    assert_eq!(sent, expected);
}

async fn g11_configured_headers_are_the_only_values_sent(db: TestDb) {
    let outbox = db.outbox().await;
    let api = Receiver::start().await;
    let op = Operation::post("api", "/v1/items")
        .header("X-Api-Key", "from-the-producer")
        .header("x-tenant", "from-the-producer")
        .header("X-Request-Source", "job-7")
        .json(&serde_json::json!({}))
        .idempotency_key("k")
        .build()
        .unwrap();
    enqueue(&outbox, &op).await;
    let running = dispatch(
        &db,
        &destination_at(
            "api",
            &api.url(),
            "headers = { X-Api-Key = \"${TEST_TOKEN}\", X-Tenant = \"acme\" }",
        ),
    );
    until_states(&db, "the op is delivered", |s| s == ["delivered"]).await;
    running.stop().await;
    let got = &api.received()[0];
    // The recorder joins repeated headers with ", ": one value each means one header each.
    assert_eq!(got.header("x-api-key"), "s3cret-token");
    assert_eq!(got.header("x-tenant"), "acme");
    assert_eq!(got.header("x-request-source"), "job-7");
}

async fn g11_unstorable_completions_never_stall_the_partition(db: TestDb) {
    let outbox = db.outbox().await;
    // The destination's answers for these paths are refused by the database: the first one
    // only with its excerpt, the second one in any form.
    let api = Receiver::start_with(|r| match r.path.as_str() {
        "/api/v1/excerpt" => Reply::status(200).body("poison excerpt"),
        "/api/v1/status" => Reply::status(299),
        _ => Reply::status(200).body("fine"),
    })
    .await;
    plant(
        &db,
        &[
            "ALTER TABLE outbox_attempts ADD CONSTRAINT test_poison CHECK (response_excerpt NOT LIKE '%poison%')",
            "ALTER TABLE outbox_attempts ADD CONSTRAINT test_no_299 CHECK (http_status <> 299)",
        ],
        &[
            "CREATE TRIGGER test_poison BEFORE INSERT ON outbox_attempts WHEN NEW.response_excerpt LIKE '%poison%' OR NEW.http_status = 299 BEGIN SELECT RAISE(ABORT, 'poison'); END",
        ],
    )
    .await;
    for (path, key) in [
        ("/v1/excerpt", "excerpt"),
        ("/v1/status", "status"),
        ("/v1/a", "a"),
        ("/v1/b", "b"),
        ("/v1/c", "c"),
    ] {
        enqueue(&outbox, &post("api", path, key)).await;
    }
    let running = dispatch(&db, &common::destination("api", &api, ""));
    wait_until(
        Duration::from_secs(30),
        "every op but the unstorable one is delivered",
        || async {
            let ops = db.ops().await;
            ops.iter()
                .filter(|o| o.idempotency_key != "status")
                .all(|o| o.state == "delivered")
        },
    )
    .await;
    // Enqueued after the refusals: the partition still delivers.
    enqueue(&outbox, &post("api", "/v1/later", "later")).await;
    wait_until(
        Duration::from_secs(30),
        "the later op is delivered",
        || async { fate(&db, "later").await.0 == "delivered" },
    )
    .await;
    running.stop().await;
    let attempts = db.attempts().await;
    let excerpt = attempts
        .iter()
        .find(|a| a.http_status == Some(200) && a.excerpt.is_none())
        .expect("the refused excerpt's attempt is recorded without it");
    assert!(
        excerpt
            .error
            .as_deref()
            .is_some_and(|e| e.contains("could not be stored")),
        "{excerpt:?}"
    );
    // The one refused in every form is not recorded; its op waits in flight for the next
    // leader, which re-queues it.
    assert_eq!(fate(&db, "status").await.0, "in_flight");
    assert!(!attempts.iter().any(|a| a.http_status == Some(299)));
}

conformance!(
    g11_planted_rows_are_never_sent_and_dead_with_the_rule_named,
    g11_the_table_refuses_rows_that_break_the_rules_it_can_check,
    g11_a_row_that_cannot_be_read_is_dead_and_the_partition_goes_on,
    g11_configured_headers_are_the_only_values_sent,
    g11_unstorable_completions_never_stall_the_partition,
);
