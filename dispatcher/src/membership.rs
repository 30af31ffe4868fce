//! This process's row in the membership table: registered at start, heartbeat every third of
//! the lease TTL on the database clock (with how many partitions it leads), removed when it
//! shuts down gracefully. Each heartbeat also reads the partition count in force and steps the
//! loops down when an operator changed it ([`Membership::take_recount`]). A crashed or paused process's row stops moving and
//! counts as gone once its TTL has passed; rows silent for a day are deleted by the others'
//! heartbeats.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_store::Store;
use outbox_store::membership::{HOST_MAX_CHARS, InstanceBeat};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::metrics as m;
use crate::routes::Routes;
use crate::status::DbStatus;

/// This process's fair share of the partitions (`share[p]`), from the membership; `None` until
/// the membership was first read: then every partition is tried, as before there was one.
/// Leases decide who leads either way (G9); the share only says what to try for.
pub(crate) type Share = Option<Arc<Vec<bool>>>;

/// This process's membership: its id, its share of the partitions, and the partition count
/// in force when it changed from the one served.
#[derive(Debug)]
pub(crate) struct Membership {
    store: Store,
    db: DbStatus,
    /// This process's id in the membership table, fresh at every start.
    instance_id: Uuid,
    /// `dispatcher.lease_ttl`: a heartbeat every third of it.
    ttl: Duration,
    /// `dispatcher.partitions`: the count served.
    partitions: u32,
    /// Says how many partitions this process leads.
    routes: Arc<Routes>,
    share: watch::Sender<Share>,
    /// The partition count in force when it changed from the one served; `stop` is then
    /// cancelled, and the daemon serves the new count once every loop has stepped down.
    recount: Mutex<Option<u32>>,
    stop: CancellationToken,
}

impl Membership {
    /// The membership of `instance_id`, serving `partitions` partitions; a change of the count
    /// in force cancels `stop`.
    pub(crate) fn new(
        store: Store,
        db: DbStatus,
        instance_id: Uuid,
        ttl: Duration,
        partitions: u32,
        routes: Arc<Routes>,
        stop: CancellationToken,
    ) -> Membership {
        Membership {
            store,
            db,
            instance_id,
            ttl,
            partitions,
            routes,
            share: watch::Sender::new(None),
            recount: Mutex::default(),
            stop,
        }
    }

    /// The share, to wait for changes of.
    pub(crate) fn watch_share(&self) -> watch::Receiver<Share> {
        self.share.subscribe()
    }

    /// The count to serve next, if the loops stepped down for a change of the count in force.
    pub(crate) fn take_recount(&self) -> Option<u32> {
        self.recount.lock().ok()?.take()
    }

    /// Sets this process's share of the partitions; wakes the loops only when it changed.
    fn set_share(&self, share: Vec<bool>) {
        self.share.send_if_modified(|current| {
            if current.as_deref() == Some(&share) {
                return false;
            }
            *current = Some(Arc::new(share));
            true
        });
    }

    /// Steps every loop down: the partition count in force is now `partitions`, which the
    /// daemon serves next.
    fn recount(&self, partitions: u32) {
        if let Ok(mut recount) = self.recount.lock() {
            recount.get_or_insert(partitions);
        }
        self.stop.cancel();
    }

    /// Heartbeats until `stop`, then leaves (waiting at most two seconds for the database).
    pub(crate) async fn run(self: Arc<Self>) {
        let host = host_name();
        tracing::info!(instance_id = %self.instance_id, %host, "registering this dispatcher");
        loop {
            let beat = InstanceBeat {
                instance_id: self.instance_id,
                host: host.clone(),
                pid: std::process::id(),
                ttl: self.ttl,
                partitions: self.partitions,
                led: self.routes.led(),
            };
            match self.store.instance_heartbeat(&beat).await {
                Ok(()) => {
                    self.db.ok();
                    self.after_beat().await;
                }
                Err(e) => self.db.failed(m::DbCall::Heartbeat, &e),
            }
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = tokio::time::sleep(self.ttl / 3) => {}
            }
        }
        let leave = self.store.instance_leave(Some(self.instance_id));
        match tokio::time::timeout(Duration::from_secs(2), leave).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not leave the membership; the row expires")
            }
            Err(_) => tracing::warn!("leaving the membership timed out; the row expires"),
        }
    }

    /// After a heartbeat: forgets long-gone dispatchers, reads the live ones (this process's
    /// share follows), and steps the loops down when an operator changed the count in force.
    async fn after_beat(&self) {
        if let Err(e) = self.store.instance_leave(None).await {
            tracing::debug!(error = %e, "could not forget long-gone dispatchers");
        }
        match self.store.instance_list().await {
            Ok(rows) => {
                let live = rows.iter().filter(|r| r.live).count();
                metrics::gauge!(m::INSTANCES).set(live as f64);
                let peers: Vec<Uuid> = rows
                    .iter()
                    .filter(|r| r.live && r.partitions == self.partitions)
                    .map(|r| r.instance_id)
                    .collect();
                self.set_share(fair_share(self.instance_id, &peers, self.partitions));
            }
            Err(e) => tracing::warn!(error = %e, "could not list the dispatchers"),
        }
        match self.store.partition_count().await {
            Ok(Some(c)) if c.partitions != self.partitions => {
                tracing::warn!(
                    serving = self.partitions,
                    in_force = c.partitions,
                    changed_by = %c.changed_by,
                    reason = %c.reason,
                    "the partition count in force changed: stepping down"
                );
                self.recount(c.partitions);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not read the partition count in force")
            }
        }
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
