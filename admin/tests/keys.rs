//! Encryption keys from `outboxctl` (issue 37, item 3), the real binary on every backend:
//! `enqueue` encrypting with `--encrypt-with`, `show --body` decrypting with the key and saying
//! which key seals it without, and `keys rotate` moving every op to a new key in batches while a
//! dispatcher delivers them: nothing lost, nothing sent twice, nothing sent sealed.

mod common;

use std::collections::{HashMap, HashSet};
use std::process::Output;
use std::time::Duration;

use outbox_dispatcher::Config;
use outbox_producer::Operation;
use outbox_tests::{KeyFiles, Receiver, TestDb, conformance, lease, wait_until};
use tokio_util::sync::CancellationToken;

use common::{json, text};

const SECRET: &str = "sort code 40-47-84";
const OPS: usize = 240;

async fn ctl(db: &TestDb, args: &[&str]) -> Output {
    common::ctl(db.url(), args).await
}

/// A dispatcher holding both keys, sending at most 80 requests a second: the ops are still
/// being delivered while the rotation runs.
fn dispatcher(
    db: &TestDb,
    receiver: &Receiver,
    files: &KeyFiles,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), outbox_dispatcher::Error>>,
) {
    let text = format!(
        "[database]\nurl = {:?}\n[lease]\nmin_ttl = \"1s\"\n[dispatcher]\nlease_ttl = \"3s\"\npoll_interval = \"100ms\"\nlisten = \"\"\n\
         [encryption]\nkeys = {{ k1 = {:?}, k2 = {:?} }}\n\
         [destinations.statements]\nbase_url = \"{}\"\ntimeout = \"2s\"\nrate_limit = \"80/s\"\nbreaker = {{ enabled = false }}\n",
        db.url(),
        files.source("k1"),
        files.source("k2"),
        receiver.url()
    );
    let config = Config::load(Some(&text), &HashMap::new()).expect("config");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(outbox_dispatcher::run(config, shutdown.clone()));
    (shutdown, task)
}

fn statement(i: usize) -> Operation {
    Operation::post("statements", format!("/v1/statements/{i}"))
        .header("X-Holder", SECRET)
        .json(&serde_json::json!({"statement": i, "note": SECRET}))
        .idempotency_key(format!("st-{i}"))
        .unordered()
        .build()
        .unwrap()
}

async fn keys_rotate_under_a_live_dispatcher_loses_and_repeats_nothing(db: TestDb) {
    let files = KeyFiles::new();
    let outbox = db
        .outbox()
        .await
        .with_keys(files.keys(&["k1"], Some("k1")))
        .unwrap();
    let l = lease(&outbox, "statements:rotation").await;
    // One by one: Babelfish's OPENJSON keeps the escapes of a batch's nested header JSON.
    for i in 0..OPS {
        outbox.enqueue(&l, &statement(i)).await.unwrap();
    }
    let (k1, k2) = (files.arg("k1"), files.arg("k2"));

    // Without a key, show says which key seals the content; with it, shows it.
    let sealed = json(&ctl(&db, &["show", "1", "--body", "--json"]).await);
    assert_eq!(
        sealed["encrypted_with"],
        serde_json::json!(["k1"]),
        "{sealed}"
    );
    assert!(!sealed.to_string().contains(SECRET), "{sealed}");
    let opened = json(
        &ctl(
            &db,
            &["show", "1", "--body", "--json", "--encryption-key", &k1],
        )
        .await,
    );
    assert!(
        opened["body"].as_str().unwrap().contains(SECRET),
        "{opened}"
    );
    assert_eq!(opened["headers"][0][1], SECRET);

    let receiver = Receiver::start().await;
    let (shutdown, task) = dispatcher(&db, &receiver, &files);
    wait_until(Duration::from_secs(30), "deliveries under way", || async {
        !receiver.received().is_empty()
    })
    .await;
    let rotation = ctl(
        &db,
        &[
            "keys",
            "rotate",
            "--to",
            "k2",
            "--batch",
            "25",
            "--encryption-key",
            &k1,
            "--encryption-key",
            &k2,
            "--reason",
            "yearly rotation",
            "--json",
        ],
    )
    .await;
    let report = json(&rotation);
    assert_eq!(report["read"], OPS, "{report}");
    assert_eq!(
        report["rewritten"].as_u64().unwrap() + report["changed_meanwhile"].as_u64().unwrap(),
        OPS as u64,
        "{report}"
    );
    assert!(
        receiver.received().len() < OPS,
        "the rotation ran while ops were still being delivered"
    );
    wait_until(Duration::from_secs(60), "every op delivered", || async {
        db.ops().await.iter().all(|o| o.state == "delivered")
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();

    // Each op sent once, clear, with its own content.
    let got = receiver.received();
    assert_eq!(got.len(), OPS);
    let keys: HashSet<String> = got
        .iter()
        .map(|r| r.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys.len(), OPS, "no op sent twice");
    for r in &got {
        assert_eq!(r.headers["x-holder"], SECRET);
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["note"], SECRET);
        assert_eq!(format!("/v1/statements/{}", body["statement"]), r.path);
    }
    // Every op is now under k2 alone: k1 is no longer needed.
    for op in db.ops().await {
        assert!(op.body.starts_with(b"OBX1\x02k2"), "op {}", op.seq);
    }
    let again = json(
        &ctl(
            &db,
            &[
                "keys",
                "rotate",
                "--to",
                "k2",
                "--encryption-key",
                &k2,
                "--reason",
                "check",
                "--dry-run",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(again["rewritten"], 0, "{again}");
    let log = db.admin_log().await;
    assert!(log.iter().any(|l| l.contains("rotate")), "{log:?}");

    // outboxctl enqueue encrypts with --encrypt-with.
    let acquired = json(
        &ctl(
            &db,
            &[
                "lease",
                "acquire",
                "--resource",
                "statements:cli",
                "--ttl",
                "30s",
                "--json",
            ],
        )
        .await,
    );
    let enqueued = json(
        &ctl(
            &db,
            &[
                "enqueue",
                "--resource",
                "statements:cli",
                "--owner-id",
                acquired["owner_id"].as_str().unwrap(),
                "--token",
                &acquired["token"].to_string(),
                "--destination",
                "statements",
                "--path",
                "/v1/cli",
                "--header",
                &format!("X-Holder: {SECRET}"),
                "--body",
                SECRET,
                "--idempotency-key",
                "cli-1",
                "--encryption-key",
                &k2,
                "--encrypt-with",
                "k2",
                "--json",
            ],
        )
        .await,
    );
    let seq = enqueued["seq"].to_string();
    let stored = db
        .ops()
        .await
        .into_iter()
        .find(|o| o.seq.to_string() == seq)
        .unwrap();
    assert!(stored.body.starts_with(b"OBX1\x02k2") && !stored.headers.contains(SECRET));
    let shown = ctl(&db, &["show", &seq, "--body", "--encryption-key", &k2]).await;
    assert!(
        text(&shown).contains(SECRET) && text(&shown).contains("decrypted with k2"),
        "{}",
        text(&shown)
    );
}

conformance!(keys_rotate_under_a_live_dispatcher_loses_and_repeats_nothing);
