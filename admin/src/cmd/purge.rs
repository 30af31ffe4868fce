//! `outboxctl purge`: delete finished ops older than a cut-off, in batches, logged.

use outbox_store::admin::Change;
use outbox_store::{OpState, Store};

use crate::cli::PurgeArgs;
use crate::cmd::select;
use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(store: &Store, args: &PurgeArgs, json: bool) -> Result<(), CliError> {
    let states = if args.states.is_empty() {
        vec![OpState::Delivered, OpState::Cancelled, OpState::Superseded]
    } else {
        select::states(&args.states)?
    };
    let change = Change {
        actor: args.actor.clone().unwrap_or_else(|| "unknown".to_owned()),
        reason: args.reason.clone(),
        force: false,
        dry_run: args.dry_run,
    };
    let report = store.admin_purge(&states, args.older_than, &change).await?;
    if json {
        render::json_line(&report);
        return Ok(());
    }
    for (state, n) in &report.by_state {
        println!("{state}: {n}");
    }
    let what = render::count(report.total as usize, "op");
    if report.dry_run {
        println!("dry run: would delete {what}; nothing deleted");
    } else {
        println!("deleted {what}");
    }
    Ok(())
}
