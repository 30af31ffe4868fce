//! Erase after delivery (issue 37, item 4): the body and header values of delivered,
//! cancelled and superseded ops are cleared once they are old enough, while their rows, header
//! names, attempts and request hash stay; dead and unfinished ops keep their content.

use std::time::Duration;

use outbox_producer::Operation;
use outbox_store::admin::Change;
use outbox_tests::{TestDb, lease};

const DAY: Duration = Duration::from_secs(86_400);
const LONG_AGO: &str = "2000-01-01T00:00:00.000Z";
const SECRET: &str = "sort code 12-34-56";

fn op(key: &str) -> Operation {
    Operation::post("ledger", "/v1/statements")
        .header("X-Account-Holder", SECRET)
        .body(format!("{{\"note\":\"{SECRET}\"}}"), "application/json")
        .idempotency_key(key)
        .build()
        .unwrap()
}

async fn issue37_erasure_clears_finished_content_and_keeps_the_record(db: TestDb) {
    let outbox = db.outbox().await;
    let store = db.store().await;
    let producer = lease(&outbox, "statements:7").await;
    let keys = [
        "delivered",
        "cancelled",
        "superseded",
        "dead",
        "recent",
        "pending",
    ];
    for key in keys {
        outbox.enqueue(&producer, &op(key)).await.unwrap();
    }
    for (key, state) in [
        ("delivered", "delivered"),
        ("cancelled", "cancelled"),
        ("superseded", "superseded"),
        ("dead", "dead"),
    ] {
        db.force_state(Some(key), state, Some(LONG_AGO), None).await;
    }
    db.force_state(Some("recent"), "delivered", None, None)
        .await;

    // Only what finished within the window before the cut-off is looked at.
    let none = store
        .op_erase_finished(DAY, Some(Duration::from_secs(3600)), 10)
        .await
        .unwrap();
    assert_eq!(none, 0, "the old ops finished long before the window");
    // In batches: one at a time, until none is left.
    let mut erased = 0;
    for _ in 0..5 {
        erased += store.op_erase_finished(DAY, None, 1).await.unwrap();
    }
    assert_eq!(erased, 3, "delivered, cancelled and superseded");
    assert_eq!(store.op_erase_finished(DAY, None, 10).await.unwrap(), 0);

    for key in keys {
        let seq = store
            .admin_op_find_by_key("ledger", key)
            .await
            .unwrap()
            .unwrap();
        let detail = store.admin_op_show(seq).await.unwrap().unwrap();
        let content = store.admin_op_content(seq).await.unwrap().unwrap();
        assert_eq!(detail.header_names, ["X-Account-Holder"], "{key}");
        let gone = matches!(key, "delivered" | "cancelled" | "superseded");
        if gone {
            assert!(detail.erased_at.is_some(), "{key}");
            assert_eq!(detail.summary.body_bytes, 0, "{key}");
            assert!(content.body.is_empty(), "{key}");
            assert_eq!(
                content.headers,
                [("X-Account-Holder".to_owned(), String::new())],
                "{key}"
            );
        } else {
            assert_eq!(detail.erased_at, None, "{key}");
            assert_eq!(content.headers[0].1, SECRET, "{key}");
            assert!(
                String::from_utf8_lossy(&content.body).contains(SECRET),
                "{key}"
            );
        }
    }

    // An erased op has nothing left to send: even a forced replay refuses it, and the
    // refusal says why.
    let seq = store
        .admin_op_find_by_key("ledger", "delivered")
        .await
        .unwrap()
        .unwrap();
    let change = Change {
        actor: "test".into(),
        reason: "resend".into(),
        force: true,
        dry_run: false,
    };
    let report = store.admin_replay(&[seq], &change).await.unwrap();
    assert!(report.changed.is_empty(), "{report:?}");
    assert!(report.skipped[0].why.contains("erased"), "{report:?}");
    // The request hash stays: the same request again is the same op (G7), not a new one.
    let again = outbox.enqueue(&producer, &op("delivered")).await.unwrap();
    assert!(again.duplicate);
}

conformance!(issue37_erasure_clears_finished_content_and_keeps_the_record);
