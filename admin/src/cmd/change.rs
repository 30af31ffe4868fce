//! `outboxctl replay` and `outboxctl cancel`: change ops named on the command line or
//! selected by filters, in logged transactions, skipping what is unsafe.

use outbox_store::Store;
use outbox_store::admin::ChangeReport;

use crate::cli::ChangeArgs;
use crate::cmd::select;
use crate::exit::{self, CliError};
use crate::render;

/// Which change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Replay,
    Cancel,
}

impl Verb {
    fn past(self) -> &'static str {
        match self {
            Verb::Replay => "replayed",
            Verb::Cancel => "cancelled",
        }
    }
}

pub(crate) async fn run(
    store: &Store,
    verb: Verb,
    args: &ChangeArgs,
    json: bool,
) -> Result<(), CliError> {
    if verb == Verb::Cancel && args.force {
        return Err(CliError::invalid("--force is for replay only"));
    }
    let change = args.log.change(args.force);
    change.validate()?;
    let seqs = match (args.ops.is_empty(), select::any(&args.filter)) {
        (false, false) => {
            let mut seqs = Vec::with_capacity(args.ops.len());
            for op in &args.ops {
                seqs.push(select::resolve(store, op).await?);
            }
            seqs
        }
        (true, true) => {
            if verb == Verb::Replay && args.filter.states.is_empty() {
                return Err(CliError::invalid(
                    "replay by filter needs --state (dead or cancelled)",
                ));
            }
            select::all_matching(store, &args.filter).await?
        }
        (false, true) => {
            return Err(CliError::invalid("name ops or give filters, not both"));
        }
        (true, false) => {
            return Err(CliError::invalid(
                "name the ops (SEQ or op id) or select them with filters such as --state",
            ));
        }
    };
    let report = match verb {
        Verb::Replay => store.admin_replay(&seqs, &change).await?,
        Verb::Cancel => store.admin_cancel(&seqs, &change).await?,
    };
    print(verb, &report, json);
    if !report.missing.is_empty() {
        return Err(CliError::new(
            exit::NOT_FOUND,
            format!("no op {}", join(&report.missing)),
        ));
    }
    if !report.skipped.is_empty() {
        return Err(CliError::other(format!(
            "{} skipped",
            render::count(report.skipped.len(), "op")
        )));
    }
    Ok(())
}

fn print(verb: Verb, report: &ChangeReport, json: bool) {
    if json {
        render::json_line(report);
        return;
    }
    for r in &report.skipped {
        println!(
            "skipped {} (seq {}, {}): {}",
            r.op_id, r.seq, r.state, r.why
        );
    }
    let what = render::count(report.changed.len(), "op");
    if report.dry_run {
        println!(
            "dry run: would have {} {what}; nothing changed",
            verb.past()
        );
    } else {
        println!("{} {what}", verb.past());
    }
}

fn join(seqs: &[i64]) -> String {
    seqs.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
