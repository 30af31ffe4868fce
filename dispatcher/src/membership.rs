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
/// without `me`). Every instance that read the same membership computes the same split:
///
/// - **Balanced.** With `n` instances sorted by id, the first `P % n` take ⌈P/n⌉ partitions and
///   the others ⌊P/n⌋.
/// - **The low partitions spread.** Partitions `0..n` go one to each instance: a destination's
///   `max_in_flight` gives its remainder slots to the lowest partitions (`limits.rs`), so each
///   instance then has a slot of its own and the parts add up exactly.
/// - **Few moves.** Each (partition, instance) pair has a weight, a fixed hash of the two; the
///   pairs are taken heaviest first, each partition going to the first instance it meets that
///   still has room (rendezvous hashing with bounded loads), the low partitions first. A join
///   or a leave therefore moves about the partitions it must and a few more to keep the
///   balance (256 partitions over 32 instances: a join moves about 23, where a split by
///   `p % n` moved nearly all of them, and every move is a handover to wait for).
pub(crate) fn fair_share(me: Uuid, peers: &[Uuid], partitions: u32) -> Vec<bool> {
    let mut all: Vec<Uuid> = peers.to_vec();
    all.push(me);
    all.sort_unstable();
    all.dedup();
    let n = all.len();
    let p = partitions as usize;
    let mut room: Vec<usize> = (0..n).map(|i| p / n + usize::from(i < p % n)).collect();
    let mut owner: Vec<Option<usize>> = vec![None; p];
    let low = n.min(p) as u32;
    // One low partition each: no instance takes a second until every other has one.
    let mut low_room: Vec<usize> = room.iter().map(|&r| r.min(1)).collect();
    assign(&all, 0..low, &mut low_room, &mut owner);
    for (i, left) in low_room.iter().enumerate() {
        room[i] -= room[i].min(1) - left;
    }
    assign(&all, low..partitions, &mut room, &mut owner);
    let mine = all.iter().position(|id| *id == me);
    owner.iter().map(|o| o.is_some() && *o == mine).collect()
}

/// Gives each partition of `range` to an instance of `all` with room left, taking the
/// (partition, instance) pairs heaviest first.
fn assign(
    all: &[Uuid],
    range: std::ops::Range<u32>,
    room: &mut [usize],
    owner: &mut [Option<usize>],
) {
    let mut pairs: Vec<(u64, u32, usize)> = range
        .flat_map(|q| {
            all.iter()
                .enumerate()
                .map(move |(i, id)| (weight(*id, q), q, i))
        })
        .collect();
    pairs.sort_unstable_by(|a, b| b.cmp(a));
    for (_, q, i) in pairs {
        let slot = &mut owner[q as usize];
        if slot.is_none() && room[i] > 0 {
            *slot = Some(i);
            room[i] -= 1;
        }
    }
}

/// The weight of instance `id` for `partition`: SplitMix64's finaliser over both, fixed
/// forever (every build, every platform) so that instances of different builds agree.
fn weight(id: Uuid, partition: u32) -> u64 {
    let bits = id.as_u128();
    mix((bits >> 64) as u64 ^ mix(bits as u64 ^ mix(u64::from(partition))))
}

/// SplitMix64's step and finaliser.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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

    /// Every instance's share of `partitions` among `ids`.
    fn shares(ids: &[Uuid], partitions: u32) -> Vec<Vec<bool>> {
        ids.iter()
            .map(|me| fair_share(*me, ids, partitions))
            .collect()
    }

    /// Partitions whose owner differs between two splits over instances (`ids`, the first
    /// `before` of them, then the first `after`).
    fn moved(ids: &[Uuid], before: usize, after: usize, partitions: u32) -> usize {
        let owners = |n: usize| -> Vec<Option<Uuid>> {
            let s = shares(&ids[..n], partitions);
            (0..partitions as usize)
                .map(|p| (0..n).find(|&i| s[i][p]).map(|i| ids[i]))
                .collect()
        };
        let (a, b) = (owners(before), owners(after));
        a.iter().zip(&b).filter(|(x, y)| x != y).count()
    }

    #[test]
    fn the_fair_share_splits_the_partitions_evenly_and_the_same_way_everywhere() {
        for (n, partitions) in [(3usize, 8u32), (32, 256), (5, 3), (7, 100), (1, 4)] {
            let ids: Vec<Uuid> = (1..=n as u128)
                .map(|i| Uuid::from_u128(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)))
                .collect();
            let shares = shares(&ids, partitions);
            let mut counts: Vec<usize> = shares
                .iter()
                .map(|s| s.iter().filter(|x| **x).count())
                .collect();
            counts.sort_unstable();
            let (low, high) = (partitions as usize / n, (partitions as usize).div_ceil(n));
            assert!(
                counts.iter().all(|&c| c == low || c == high),
                "{partitions} over {n}: {counts:?}"
            );
            for p in 0..partitions as usize {
                assert_eq!(
                    shares.iter().filter(|s| s[p]).count(),
                    1,
                    "partition {p} of {partitions} over {n} has one owner"
                );
            }
            // Its own row missing from what it read changes nothing for it.
            let last = ids[n - 1];
            assert_eq!(fair_share(last, &ids[..n - 1], partitions), shares[n - 1]);
        }
        // Alone (or before the others are seen), an instance takes every partition.
        assert!(fair_share(Uuid::from_u128(2), &[], 8).iter().all(|x| *x));
    }

    #[test]
    fn a_join_or_a_leave_moves_few_partitions() {
        let ids: Vec<Uuid> = (0..40u128)
            .map(|i| {
                Uuid::from_u128((i + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93_A5B3_5A1C_0F3E_2B47))
            })
            .collect();
        // 256 over 32: a fair move is 256/33 ≈ 8 for a join, 8 for a leave; `p % n` moved ~240.
        let join = moved(&ids, 32, 33, 256);
        let leave = moved(&ids, 32, 31, 256);
        let burst = moved(&ids, 32, 40, 256);
        assert!(join <= 32, "a join moved {join} of 256");
        assert!(leave <= 32, "a leave moved {leave} of 256");
        assert!(burst <= 100, "eight joins moved {burst} of 256");
    }

    #[test]
    fn the_weights_are_fixed_forever() {
        // Instances of different builds must agree: the weight is pinned here.
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(
            weight(Uuid::from_u128(1), 0),
            weight(Uuid::from_u128(1), 0),
            "deterministic"
        );
    }

    #[test]
    fn the_host_name_is_never_empty_and_fits_the_table() {
        let host = host_name();
        assert!(!host.is_empty() && host.chars().count() <= HOST_MAX_CHARS);
        assert!(!host.chars().any(char::is_control));
    }
}
