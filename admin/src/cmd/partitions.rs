//! `outboxctl partitions show|set`: the partition count in force, and changing it as an
//! operation (locked, written and logged in one transaction; running dispatchers follow).

use std::collections::BTreeMap;

use outbox_store::Store;
use outbox_store::dispatch::Partition;
use outbox_store::partitioning::PartitionCount;
use serde::Serialize;

use crate::cli::PartitionsSetArgs;
use crate::exit::CliError;
use crate::render;

/// What `partitions show` reports.
#[derive(Debug, Serialize)]
struct Shown {
    in_force: Option<PartitionCount>,
    /// Live dispatcher instances by the count they serve.
    live_instances: BTreeMap<u32, usize>,
    /// Held partition leases by the count their holders serve.
    held_leases: BTreeMap<u32, usize>,
}

pub(crate) async fn show(store: &Store, json: bool) -> Result<(), CliError> {
    let in_force = store.partition_count().await?;
    let mut live_instances = BTreeMap::new();
    for i in store.instance_list().await?.iter().filter(|i| i.live) {
        *live_instances.entry(i.partitions).or_insert(0) += 1;
    }
    let mut held_leases = BTreeMap::new();
    for l in store.lease_list().await? {
        if l.held && l.resource.as_str().starts_with(Partition::LEASE_PREFIX) {
            *held_leases.entry(l.partitions.unwrap_or(0)).or_insert(0) += 1;
        }
    }
    let shown = Shown {
        in_force,
        live_instances,
        held_leases,
    };
    if json {
        render::json_line(&shown);
        return Ok(());
    }
    println!("{}", in_force_line(shown.in_force.as_ref()));
    let by_count = |m: &BTreeMap<u32, usize>, noun: &str| {
        if m.is_empty() {
            return "none".to_owned();
        }
        m.iter()
            .map(|(count, n)| format!("{} serving {count}", render::count(*n, noun)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "live dispatchers: {}",
        by_count(&shown.live_instances, "instance")
    );
    println!(
        "held partition leases: {}",
        by_count(&shown.held_leases, "lease")
    );
    Ok(())
}

/// The count in force, who set it, when and why, on one line.
pub(crate) fn in_force_line(c: Option<&PartitionCount>) -> String {
    match c {
        Some(c) => format!(
            "partition count in force: {} (set by {} {}: {})",
            c.partitions,
            render::cell(&c.changed_by),
            render::relative(c.changed_at),
            render::cell(&c.reason)
        ),
        None => "partition count in force: none yet (the first dispatcher to start records its dispatcher.partitions)".to_owned(),
    }
}

pub(crate) async fn set(
    store: &Store,
    args: &PartitionsSetArgs,
    json: bool,
) -> Result<(), CliError> {
    let change = args.log.change(false);
    let report = store.partition_count_set(args.count, &change).await?;
    if json {
        render::json_line(&report);
        return Ok(());
    }
    let before = render::or_dash(report.before);
    if !report.changed {
        println!(
            "the partition count in force already is {}; nothing changed",
            report.after
        );
    } else if args.log.dry_run {
        println!(
            "dry run: would change the partition count in force from {before} to {}; nothing changed",
            report.after
        );
    } else {
        println!(
            "partition count in force: {before} -> {} (logged in outbox_admin_log)",
            report.after
        );
        println!(
            "running dispatchers step down at their next heartbeat (a third of lease_ttl): no new claims, attempts finish, leases released; they serve {} once no partition lease of another count is live. Ops keep their slots.",
            report.after
        );
        println!(
            "set dispatcher.partitions = {} in every dispatcher's config: one started with another count refuses to serve",
            report.after
        );
    }
    Ok(())
}
