//! What the outboxctl test binaries share: running the real binary against a database, and
//! reading what it printed. Each binary uses its own part; the rest is allowed to go unused.

#![allow(dead_code)]

use std::process::Output;

/// Runs outboxctl on the database of `url` (as its login) with `args`, as the operator `ana`,
/// without blocking the runtime an in-process dispatcher uses.
pub(crate) async fn ctl(url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxctl"))
        .args(args)
        .env("OUTBOX_DATABASE_URL", url)
        .env("USER", "ana")
        .env_remove("OUTBOX_KEYS")
        .output()
        .await
        .expect("run outboxctl")
}

/// The exit code and both outputs, for a failed assertion to show.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The one JSON object a successful `--json` call printed.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}
