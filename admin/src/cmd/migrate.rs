//! `outboxctl migrate`: apply the migrations this build carries and say what was done.

use outbox_store::Store;

use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(store: &Store, json: bool) -> Result<(), CliError> {
    let report = store.migrate().await?;
    if json {
        let value = serde_json::json!({
            "backend": store.backend().name(),
            "applied": report.applied,
            "already_applied": report.already_applied,
        });
        render::json_line(&value);
        return Ok(());
    }
    for name in &report.applied {
        println!("applied {name}");
    }
    let total = report.applied.len() + report.already_applied.len();
    if report.applied.is_empty() {
        println!(
            "{} schema is up to date ({total} migrations applied)",
            store.backend()
        );
    } else {
        println!("{} schema is now at {total} migrations", store.backend());
    }
    Ok(())
}
