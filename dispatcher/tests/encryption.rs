//! Encryption at rest (issue 37, item 3), through the real dispatcher on every backend: a
//! producer holding a key stores ops' header values and bodies sealed, the database (a dump of
//! it) holds none of them in clear, and the dispatcher sends them clear; an older producer's
//! clear op still goes; an op sealed with a key the dispatcher lacks is retried, one that does
//! not open is never sent; a rerun sealed under another key is still the same op (G7).

mod common;

use common::{destination, dispatch_with, until_states};
use outbox_producer::{Operation, Outbox};
use outbox_tests::{KeyFiles, Receiver, TestDb, conformance, lease};

const SECRET_HEADER: &str = "holder Ada Lovelace";
const SECRET_BODY: &str = "IBAN GB29 NWBK 6016 1331 9268 19";
const OLD_PRODUCER_BODY: &str = "written in clear by an older producer";

fn statement(key: &str, body: &str) -> Operation {
    let holder = if body == OLD_PRODUCER_BODY {
        "an older producer's holder"
    } else {
        SECRET_HEADER
    };
    Operation::post("ledger", format!("/statements/{key}"))
        .header("X-Holder", holder)
        .body(body.to_owned(), "text/plain")
        .idempotency_key(key)
        .unordered()
        .build()
        .unwrap()
}

async fn sealed_ops_are_stored_sealed_and_sent_clear(db: TestDb) {
    let files = KeyFiles::new();
    let plain = db.outbox().await;
    let sealing: Outbox = plain
        .clone()
        .with_keys(files.keys(&["k1"], Some("k1")))
        .unwrap();
    let lease = lease(&plain, "statements:42").await;
    sealing
        .enqueue(&lease, &statement("sealed", SECRET_BODY))
        .await
        .unwrap();
    plain
        .enqueue(&lease, &statement("clear", OLD_PRODUCER_BODY))
        .await
        .unwrap();
    // A producer sealing with a key the dispatcher is not given.
    let other = plain
        .clone()
        .with_keys(files.keys(&["k2"], Some("k2")))
        .unwrap();
    other
        .enqueue(&lease, &statement("unknown-key", SECRET_BODY))
        .await
        .unwrap();
    // An envelope moved to another destination's op: written as a clear body by a producer
    // without keys, it names k1 but does not open there.
    let moved = files
        .keys(&["k1"], Some("k1"))
        .seal_content("billing", &[], SECRET_BODY.as_bytes())
        .unwrap()
        .body;
    plain
        .enqueue(
            &lease,
            &Operation::post("ledger", "/statements/moved")
                .body(moved, "application/octet-stream")
                .idempotency_key("moved")
                .unordered()
                .build()
                .unwrap(),
        )
        .await
        .unwrap();

    // What the database keeps: the sealed ops' content is nowhere in clear.
    for op in db.ops().await {
        if op.idempotency_key == "clear" {
            continue;
        }
        assert!(op.body.starts_with(b"OBX1"), "{}", op.idempotency_key);
        assert!(!String::from_utf8_lossy(&op.body).contains("GB29"));
        if op.idempotency_key != "moved" {
            assert!(op.headers.contains("obx1:"), "{}", op.headers);
            assert!(!op.headers.contains("Lovelace"), "{}", op.headers);
        }
    }
    if let Some(dump) = db.dump().await {
        let dump = String::from_utf8_lossy(&dump);
        assert!(dump.contains("X-Holder"), "the dump holds the ops");
        // pg_dump writes a bytea as hex: look for both forms.
        let hex = |text: &str| text.bytes().map(|b| format!("{b:02x}")).collect::<String>();
        for secret in ["GB29 NWBK", "Lovelace"] {
            assert!(!dump.contains(secret), "{secret} in clear in the dump");
            assert!(
                !dump.contains(&hex(secret)),
                "{secret} in clear (hex) in the dump"
            );
        }
        assert!(
            dump.contains(OLD_PRODUCER_BODY) || dump.contains(&hex(OLD_PRODUCER_BODY)),
            "the older producer's op is clear, and the dump would show it"
        );
    }

    let receiver = Receiver::start().await;
    let dest = format!(
        "{}{}",
        files.table(&["k1"]),
        destination("ledger", &receiver, "")
    );
    let running = dispatch_with(&db, &dest, "");
    until_states(&db, "every op delivered or dead", |states| {
        states.len() == 4 && states.iter().all(|s| s == "delivered" || s == "dead")
    })
    .await;
    running.stop().await;

    let got = receiver.received();
    let sealed: Vec<_> = got.iter().filter(|r| r.path.ends_with("/sealed")).collect();
    assert_eq!(sealed.len(), 1);
    assert_eq!(sealed[0].body, SECRET_BODY.as_bytes());
    assert_eq!(sealed[0].headers["x-holder"], SECRET_HEADER);
    let clear: Vec<_> = got.iter().filter(|r| r.path.ends_with("/clear")).collect();
    assert_eq!(clear[0].body, OLD_PRODUCER_BODY.as_bytes());
    assert!(
        !got.iter()
            .any(|r| r.path.ends_with("/unknown-key") || r.path.ends_with("/moved")),
        "nothing that does not open is sent"
    );
    let ops = db.ops().await;
    let by_key = |k: &str| ops.iter().find(|o| o.idempotency_key == k).unwrap();
    let unknown = by_key("unknown-key");
    assert_eq!(unknown.state, "dead");
    assert_eq!(unknown.attempts, 5, "retried: the key can be added");
    let why = unknown.last_error.as_deref().unwrap_or_default();
    assert!(
        why.contains("key k2, which is not configured here"),
        "{why}"
    );
    let moved = by_key("moved");
    assert_eq!(moved.state, "dead");
    assert_eq!(moved.attempts, 1, "never retried");
    let why = moved.last_error.as_deref().unwrap_or_default();
    assert!(why.contains("does not decrypt with key k1"), "{why}");

    // A rerun after a rotation (the producer now seals with k2) is the same op: the request
    // hash is over the clear request.
    let rotated = plain
        .clone()
        .with_keys(files.keys(&["k1", "k2"], Some("k2")))
        .unwrap();
    let again = rotated
        .enqueue(&lease, &statement("sealed", SECRET_BODY))
        .await
        .unwrap();
    assert!(again.duplicate);
}

conformance!(sealed_ops_are_stored_sealed_and_sent_clear);
