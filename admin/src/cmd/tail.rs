//! `outboxctl tail`: follow attempts as they are recorded (polling), one line each.

use outbox_store::Store;
use outbox_store::admin::AttemptRow;

use crate::cli::TailArgs;
use crate::exit::CliError;
use crate::render;

/// Attempts fetched per poll.
const PAGE: u32 = 500;

pub(crate) async fn run(store: &Store, args: &TailArgs, json: bool) -> Result<(), CliError> {
    let mut last = if args.from_start {
        0
    } else {
        store.admin_attempt_last_id().await?
    };
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let rows = store.admin_attempts_after(last, PAGE).await?;
        for a in &rows {
            print(a, json);
            last = a.id;
        }
        if rows.len() == PAGE as usize {
            continue;
        }
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
    }
}

fn print(a: &AttemptRow, json: bool) {
    if json {
        render::json_line(a);
        return;
    }
    println!(
        "{} seq {} {} attempt {} {} {} {} {}",
        render::exact(a.started_at),
        a.seq,
        render::cell(&a.destination),
        a.attempt,
        render::or_dash(a.outcome.as_deref()),
        a.http_status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".to_owned()),
        a.duration_ms
            .map(|ms| format!("{ms}ms"))
            .unwrap_or_else(|| "-".to_owned()),
        render::clip(a.error.as_deref().unwrap_or(""), 80),
    );
}
