//! This process's row in the membership table: registered at start, heartbeat every third of
//! the lease TTL on the database clock (with how many partitions it leads), removed when it
//! shuts down gracefully. Each heartbeat also reads the partition count in force and steps the
//! loops down when an operator changed it. A crashed or paused process's row stops moving and
//! counts as gone once its TTL has passed; rows silent for a day are deleted by the others'
//! heartbeats.

use std::sync::Arc;
use std::time::Duration;

use outbox_store::membership::{HOST_MAX_CHARS, InstanceBeat};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::metrics as m;
use crate::routes::Shared;

/// Heartbeats until `stop`, then leaves (waiting at most two seconds for the database).
pub(crate) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let ttl = shared.config.dispatcher.lease_ttl;
    let host = host_name();
    tracing::info!(instance_id = %shared.instance_id, %host, "registering this dispatcher");
    loop {
        let beat = InstanceBeat {
            instance_id: shared.instance_id,
            host: host.clone(),
            pid: std::process::id(),
            ttl,
            partitions: shared.config.dispatcher.partitions,
            led: shared.led(),
        };
        match shared.store.instance_heartbeat(&beat).await {
            Ok(()) => {
                shared.db_ok();
                if let Err(e) = shared.store.instance_leave(None).await {
                    tracing::debug!(error = %e, "could not forget long-gone dispatchers");
                }
                match shared.store.instance_list().await {
                    Ok(rows) => {
                        let live = rows.iter().filter(|r| r.live).count();
                        metrics::gauge!(m::INSTANCES).set(live as f64);
                        let partitions = shared.config.dispatcher.partitions;
                        let peers: Vec<Uuid> = rows
                            .iter()
                            .filter(|r| r.live && r.partitions == partitions)
                            .map(|r| r.instance_id)
                            .collect();
                        shared.set_share(fair_share(shared.instance_id, &peers, partitions));
                    }
                    Err(e) => tracing::warn!(error = %e, "could not list the dispatchers"),
                }
                // An operator changed the partition count in force: step down, serve the new one.
                match shared.store.partition_count().await {
                    Ok(Some(c)) if c.partitions != shared.config.dispatcher.partitions => {
                        tracing::warn!(
                            serving = shared.config.dispatcher.partitions,
                            in_force = c.partitions,
                            changed_by = %c.changed_by,
                            reason = %c.reason,
                            "the partition count in force changed: stepping down"
                        );
                        shared.recount(c.partitions);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the partition count in force")
                    }
                }
            }
            Err(e) => shared.db_failed(m::DbCall::Heartbeat, &e),
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(ttl / 3) => {}
        }
    }
    let leave = shared.store.instance_leave(Some(shared.instance_id));
    match tokio::time::timeout(Duration::from_secs(2), leave).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not leave the membership; the row expires"),
        Err(_) => tracing::warn!("leaving the membership timed out; the row expires"),
    }
}

/// Which of `partitions` partitions `me` should lead among the live `peers` (with or
/// without `me`): with the instances sorted by id, instance `i` of `n` takes the partitions
/// `p` with `p % n == i`, so each takes at most ⌈P/N⌉ and every instance that read the same
/// membership computes the same split.
pub(crate) fn fair_share(me: Uuid, peers: &[Uuid], partitions: u32) -> Vec<bool> {
    let mut all: Vec<Uuid> = peers.to_vec();
    all.push(me);
    all.sort_unstable();
    all.dedup();
    let n = all.len();
    let i = all.iter().position(|id| *id == me).unwrap_or(0);
    (0..partitions as usize).map(|p| p % n == i).collect()
}

/// The machine's name (Linux: the kernel's; elsewhere `HOSTNAME`), without control
/// characters and cut to what the table holds; `unknown` when there is none.
fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let clean: String = raw
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(HOST_MAX_CHARS)
        .collect();
    if clean.is_empty() {
        "unknown".to_owned()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fair_share_splits_the_partitions_evenly_and_the_same_way_everywhere() {
        let ids: Vec<Uuid> = (1..=3u128).map(Uuid::from_u128).collect();
        let shares: Vec<Vec<bool>> = ids.iter().map(|me| fair_share(*me, &ids, 8)).collect();
        let counts: Vec<usize> = shares
            .iter()
            .map(|s| s.iter().filter(|x| **x).count())
            .collect();
        assert_eq!(counts, [3, 3, 2]);
        for p in 0..8 {
            assert_eq!(
                shares.iter().filter(|s| s[p]).count(),
                1,
                "partition {p} has one owner"
            );
        }
        // Alone (or before the others are seen), an instance takes every partition.
        assert!(fair_share(ids[1], &[], 8).iter().all(|x| *x));
        // Its own row missing from what it read changes nothing for it.
        assert_eq!(fair_share(ids[2], &ids[..2], 8), shares[2]);
    }

    #[test]
    fn the_host_name_is_never_empty_and_fits_the_table() {
        let host = host_name();
        assert!(!host.is_empty() && host.chars().count() <= HOST_MAX_CHARS);
        assert!(!host.chars().any(char::is_control));
    }
}
