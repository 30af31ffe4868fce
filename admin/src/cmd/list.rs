//! `outboxctl list`: ops newest first, filtered, paged by SEQ.

use outbox_store::Store;

use crate::cli::ListArgs;
use crate::cmd::select;
use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(store: &Store, args: &ListArgs, json: bool) -> Result<(), CliError> {
    if args.limit == 0 || args.limit > 10_000 {
        return Err(CliError::invalid("--limit must be between 1 and 10000"));
    }
    let ops = store
        .admin_op_list(&select::filter(&args.filter, args.after, args.limit)?)
        .await?;
    if json {
        for op in &ops {
            render::json_line(op);
        }
        return Ok(());
    }
    let mut table = render::table(&[
        "SEQ",
        "STATE",
        "DESTINATION",
        "RESOURCE",
        "TOKEN",
        "KEY",
        "ATTEMPTS",
        "ENQUEUED",
        "LAST ERROR",
    ]);
    for op in &ops {
        table.add_row(vec![
            op.seq.to_string(),
            render::cell(&op.state),
            render::cell(&op.destination),
            render::cell(&op.resource),
            op.token.to_string(),
            render::clip(&op.idempotency_key, 40),
            op.attempts.to_string(),
            render::relative(op.created_at),
            render::clip(op.last_error.as_deref().unwrap_or("-"), 50),
        ]);
    }
    println!("{table}");
    match ops.last() {
        Some(last) if ops.len() == args.limit as usize => println!(
            "{} (more: --after {})",
            render::count(ops.len(), "op"),
            last.seq
        ),
        _ => println!("{}", render::count(ops.len(), "op")),
    }
    Ok(())
}
