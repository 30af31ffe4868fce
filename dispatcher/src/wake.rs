//! The partition loops' wake-ups: one per loop, rung by enqueue notifications, by finished
//! attempts (a slot freed up) and by holds that ended, with a count of the wake-ups that may
//! mean new due ops ([`Wakes::work_seen`]).

use std::sync::atomic::{AtomicU64, Ordering};

use outbox_store::Partition;
use tokio::sync::Notify;

/// Every partition loop's wake-up.
#[derive(Debug)]
pub(crate) struct Wakes {
    /// One per partition loop. Each keeps a permit when nobody waits, so no wake-up is lost.
    loops: Vec<Notify>,
    /// Counts the wake-ups that may mean new due ops (an enqueue notification, an op made
    /// pending again, a hold ended); a loop that found a destination with nothing due asks
    /// again only once this moved (or its next due time came), not at every freed slot.
    work: AtomicU64,
}

impl Wakes {
    /// Wake-ups for `partitions` loops.
    pub(crate) fn new(partitions: u32) -> Wakes {
        Wakes {
            loops: (0..partitions).map(|_| Notify::new()).collect(),
            work: AtomicU64::new(0),
        }
    }

    /// Wakes every partition loop (they look for work at once).
    pub(crate) fn wake_all(&self) {
        for wake in &self.loops {
            wake.notify_one();
        }
    }

    /// Wakes every partition loop for what may be new due ops (see `work`).
    pub(crate) fn new_work(&self) {
        self.work.fetch_add(1, Ordering::AcqRel);
        self.wake_all();
    }

    /// How many wake-ups for new due ops there were so far: read before a claim is sent, so
    /// one that came while it ran is never missed.
    pub(crate) fn work_seen(&self) -> u64 {
        self.work.load(Ordering::Acquire)
    }

    /// Returns when `partition`'s loop is woken (at once if a wake-up came while it was busy).
    pub(crate) async fn woken(&self, partition: Partition) {
        if let Some(wake) = self.loops.get(partition.index() as usize) {
            wake.notified().await;
        } else {
            std::future::pending::<()>().await;
        }
    }
}
