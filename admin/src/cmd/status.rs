//! `outboxctl status`: the outbox at a glance.

use outbox_store::Store;
use outbox_store::membership::InstanceRow;

use crate::exit::CliError;
use crate::render;

pub(crate) async fn run(store: &Store, json: bool) -> Result<(), CliError> {
    let status = store.admin_status().await?;
    if json {
        render::json_line(&status);
        return Ok(());
    }
    let mut table = render::table(&["STATE", "DESTINATION", "OPS"]);
    for c in &status.counts {
        table.add_row(vec![
            render::cell(&c.state),
            render::cell(&c.destination),
            c.ops.to_string(),
        ]);
    }
    println!("{table}");
    let oldest = status
        .oldest_pending_ms
        .map(|ms| render::relative_ms(-ms))
        .unwrap_or_else(|| "none pending".to_owned());
    println!("oldest pending: {oldest}");
    println!("due now: {}", status.due_now);
    println!("dead in the last 24 h: {}", status.dead_last_day);
    println!(
        "stale enqueues rejected in the last hour: {}",
        status.rejections_last_hour
    );
    if status.partitions.is_empty() {
        println!("dispatcher partitions: none has ever run");
    } else {
        let mut table = render::table(&["PARTITION", "TOKEN", "STATE", "OWNER", "EXPIRES"]);
        for p in &status.partitions {
            table.add_row(render::lease_cells(p));
        }
        println!("{table}");
    }
    println!(
        "{}",
        crate::cmd::partitions::in_force_line(status.partition_count.as_ref())
    );
    print_instances(&status.instances);
    Ok(())
}

/// The dispatcher processes: live ones and those whose heartbeat stopped (crashed, paused or
/// cut off; a graceful shutdown removes its row).
fn print_instances(instances: &[InstanceRow]) {
    let live = instances.iter().filter(|i| i.live).count();
    println!("dispatcher instances: {live} live");
    if instances.is_empty() {
        return;
    }
    let mut table = render::table(&[
        "INSTANCE",
        "HOST",
        "PID",
        "STARTED",
        "HEARTBEAT",
        "STATE",
        "LED",
    ]);
    for i in instances {
        table.add_row(vec![
            i.instance_id.to_string(),
            render::cell(&i.host),
            i.pid.to_string(),
            render::relative(i.started_at),
            render::relative_ms(-i.heartbeat_age_ms),
            if i.live { "live" } else { "gone" }.to_owned(),
            format!("{}/{}", i.led, i.partitions),
        ]);
    }
    println!("{table}");
}
