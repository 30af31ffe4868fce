//! `outboxctl rejections`: enqueues rejected because the owner's lease was stale or gone.

use outbox_store::Store;

use crate::cli::RejectionArgs;
use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(store: &Store, args: &RejectionArgs, json: bool) -> Result<(), CliError> {
    let rows = store
        .admin_rejections(args.since, args.resource.as_deref(), args.limit)
        .await?;
    if json {
        for row in &rows {
            render::json_line(row);
        }
        return Ok(());
    }
    let mut table = render::table(&[
        "WHEN",
        "RESOURCE",
        "TOKEN",
        "NEWEST",
        "REASON",
        "CALL",
        "DESTINATION",
        "KEY",
    ]);
    for r in &rows {
        table.add_row(vec![
            render::relative(r.rejected_at),
            render::cell(&r.resource),
            r.token.to_string(),
            render::or_dash(r.current_token),
            render::cell(&r.reason),
            render::cell(&r.stage),
            render::or_dash(r.destination.as_deref()),
            render::clip(r.idempotency_key.as_deref().unwrap_or("-"), 40),
        ]);
    }
    println!("{table}");
    println!("{}", render::count(rows.len(), "rejection"));
    Ok(())
}
