//! `outboxctl destination list|pause|resume`: every destination's health as the dispatchers
//! share it (breaker state, failures, last error, next probe) beside its ops by state, and an
//! operator's pause and resume, logged with who and why.

use std::collections::BTreeMap;

use outbox_store::Store;
use outbox_store::health::DestinationHealth;
use serde::Serialize;
use time::OffsetDateTime;

use crate::cli::DestinationChangeArgs;
use crate::exit::CliError;
use crate::render;

/// One line of `destination list`.
#[derive(Debug, Serialize)]
struct Listed {
    destination: String,
    /// closed, open, half_open or paused.
    state: &'static str,
    /// The breaker's row; `null` for a destination that never failed nor was paused.
    health: Option<DestinationHealth>,
    /// Its ops by state.
    ops: BTreeMap<String, i64>,
    /// Its pending ops (due or not).
    pending: i64,
}

pub(crate) async fn list(store: &Store, json: bool) -> Result<(), CliError> {
    let status = store.admin_status().await?;
    let mut listed: BTreeMap<String, Listed> = BTreeMap::new();
    let entry = |listed: &mut BTreeMap<String, Listed>, name: &str| {
        listed.entry(name.to_owned()).or_insert_with(|| Listed {
            destination: name.to_owned(),
            state: "closed",
            health: None,
            ops: BTreeMap::new(),
            pending: 0,
        });
    };
    for h in store.destination_list().await? {
        entry(&mut listed, &h.destination);
        if let Some(l) = listed.get_mut(&h.destination) {
            l.state = h.shown_state();
            l.health = Some(h);
        }
    }
    for c in &status.counts {
        entry(&mut listed, &c.destination);
        if let Some(l) = listed.get_mut(&c.destination) {
            l.ops.insert(c.state.clone(), c.ops);
            if c.state == "pending" {
                l.pending = c.ops;
            }
        }
    }
    let listed: Vec<Listed> = listed.into_values().collect();
    if json {
        render::json_line(&listed);
        return Ok(());
    }
    if listed.is_empty() {
        println!("no destinations yet: none has ops or a breaker row");
        return Ok(());
    }
    let mut table = render::table(&[
        "DESTINATION",
        "STATE",
        "FAILURES",
        "LAST ERROR",
        "OPENED",
        "NEXT PROBE",
        "PENDING",
        "PAUSED",
    ]);
    let when = |t: Option<OffsetDateTime>| t.map(render::relative).unwrap_or_else(|| "-".into());
    for l in &listed {
        let h = l.health.as_ref();
        table.add_row(vec![
            render::cell(&l.destination),
            l.state.to_owned(),
            h.map_or(0, |h| h.consecutive_failures).to_string(),
            render::clip(h.and_then(|h| h.last_error.as_deref()).unwrap_or("-"), 60),
            when(h.and_then(|h| h.opened_at)),
            when(
                h.and_then(|h| h.next_probe_at)
                    .filter(|_| l.state == "open"),
            ),
            l.pending.to_string(),
            h.and_then(|h| h.paused.as_ref()).map_or_else(
                || "-".to_owned(),
                |p| {
                    format!(
                        "{} by {}: {}",
                        render::relative(p.at),
                        render::cell(&p.by),
                        render::clip(&p.reason, 60)
                    )
                },
            ),
        ]);
    }
    println!("{table}");
    Ok(())
}

/// What `destination pause|resume` reports.
#[derive(Debug, Serialize)]
struct Changed {
    destination: String,
    /// The state before and after (`null` when nothing changed).
    before: Option<&'static str>,
    after: Option<&'static str>,
    changed: bool,
    dry_run: bool,
}

pub(crate) async fn change(
    store: &Store,
    args: &DestinationChangeArgs,
    pause: bool,
    json: bool,
) -> Result<(), CliError> {
    let change = args.log.change(false);
    let done = store
        .destination_set_paused(&args.name, pause, &change)
        .await?;
    let report = Changed {
        destination: args.name.clone(),
        before: done.as_ref().map(|t| t.from),
        after: done.as_ref().map(|t| t.to),
        changed: done.is_some() && !args.log.dry_run,
        dry_run: args.log.dry_run,
    };
    if json {
        render::json_line(&report);
        return Ok(());
    }
    let name = render::cell(&args.name);
    match (&done, args.log.dry_run, pause) {
        (None, _, true) => println!("{name} already is paused; nothing changed"),
        (None, _, false) => println!("{name} is neither paused nor open; nothing changed"),
        (Some(t), true, _) => println!(
            "dry run: would change {name} from {} to {}; nothing changed",
            t.from, t.to
        ),
        (Some(t), false, true) => {
            println!("{name}: {} -> paused (logged in outbox_admin_log)", t.from);
            println!(
                "its ops stay pending and it is never probed until `outboxctl destination resume {name} --reason …`; attempts already in flight finish"
            );
        }
        (Some(t), false, false) => {
            println!("{name}: {} -> closed (logged in outbox_admin_log)", t.from);
            println!("dispatchers claim its ops again within a poll interval");
        }
    }
    Ok(())
}
