//! The dispatcher's own lease on `dispatcher/<partition>`: standby, leader, step-down.
//!
//! A standby tries to acquire the lease every third of its TTL. A leader renews it every third
//! of its TTL and *trusts* it only until `sent + ttl - safety`, where `sent` is when the last
//! successful renewal (or the acquisition) was sent: the database set the expiry from a later
//! instant, so the dispatcher always stops trusting its lease before the database would
//! expire it. An attempt starts only if its whole timeout fits in the trusted window (G9); a
//! claim that would have to wait for the window to cover its longest timeout asks for the
//! renewal at once instead (with the defaults, a 15 s lease and a 10 s timeout, the window
//! is too short for 1.5 s of every 5, and claims waited for the next renewal then: issue 34). A
//! renewal that fails, is refused or is slow cancels `lost`: the leader stops claiming and
//! steps down. On pause the renewals stop with the process; on resume the window has passed,
//! nothing new starts, and any completion the old leader sends is discarded by the database
//! (owner and token checked in the same statement). On crash the lease expires and a standby
//! takes over, re-queueing what was left in flight.

use std::time::Duration;

use outbox_store::{Lease, Partition, Renewal, ResourceName, Store};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::config::longest_attempt;

/// The part of the TTL never trusted: a tenth, at least 50 ms, for clock-rate drift and the
/// time the completion itself takes.
fn safety(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(50))
}

/// Held leadership of one partition.
#[derive(Debug)]
pub struct Leadership {
    /// The partition served.
    pub partition: Partition,
    /// The lease: owner id and token checked by every claim and completion.
    pub lease: Lease,
    trusted_until: watch::Receiver<Instant>,
    renewal: Renewal,
}

impl Leadership {
    /// Tries to become the leader of `partition`; `None` while another dispatcher leads it.
    pub async fn acquire(
        store: &Store,
        partition: Partition,
        ttl: Duration,
    ) -> Result<Option<Leadership>, outbox_store::Error> {
        let resource = ResourceName::new(partition.lease_resource())?;
        let sent = Instant::now();
        let Some(lease) = store.lease_try_acquire(&resource, ttl).await? else {
            return Ok(None);
        };
        let (trust, trusted_until) = watch::channel(sent + ttl - safety(ttl));
        let renewal = Renewal::start(store.clone(), lease.clone(), ttl, move |_, sent| {
            let _ = trust.send(sent + ttl - safety(ttl));
        });
        Ok(Some(Leadership {
            partition,
            lease,
            trusted_until,
            renewal,
        }))
    }

    /// Cancelled once the lease can no longer be trusted: step down.
    pub fn lost(&self) -> &CancellationToken {
        self.renewal.lost()
    }

    /// A handle to the trusted window for attempt tasks.
    pub fn trust(&self) -> Trust {
        Trust {
            until: self.trusted_until.clone(),
            lost: self.renewal.lost().clone(),
            early: self.renewal.early(),
        }
    }

    /// Stops renewing and releases the lease, waiting at most two seconds for the database.
    pub async fn release(self, store: &Store) {
        let lost = self.renewal.lost().is_cancelled();
        self.renewal.stop().await;
        if !lost {
            match tokio::time::timeout(Duration::from_secs(2), store.lease_release(&self.lease))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release the partition lease; it will expire")
                }
                Err(_) => tracing::warn!("releasing the partition lease timed out; it will expire"),
            }
        }
    }

    /// Stops renewing without releasing (the lease was lost, or expires by itself).
    pub async fn abandon(self) {
        self.renewal.stop().await;
    }
}

/// The leader's trusted window, as attempt tasks see it.
#[derive(Debug, Clone)]
pub struct Trust {
    until: watch::Receiver<Instant>,
    lost: CancellationToken,
    /// Asks the lease's renewal to renew at once.
    early: std::sync::Arc<tokio::sync::Notify>,
}

impl Trust {
    /// Whether the lease was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Whether an attempt lasting `d` would end inside the trusted window.
    pub fn covers(&self, d: Duration) -> bool {
        !self.lost.is_cancelled() && Instant::now() + d <= *self.until.borrow()
    }

    /// Waits until the window covers `d`, asking for a renewal at once (not at the next
    /// third of the TTL), or returns false when the lease is lost or `give_up` fires first.
    pub async fn wait_to_cover(&mut self, d: Duration, give_up: &CancellationToken) -> bool {
        loop {
            if self.covers(d) {
                return true;
            }
            self.early.notify_one();
            tokio::select! {
                changed = self.until.changed() => if changed.is_err() { return false },
                () = self.lost.cancelled() => return false,
                () = give_up.cancelled() => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trusted_window_always_fits_the_longest_attempt_after_a_renewal() {
        for secs in [1, 5, 15, 60, 300] {
            let ttl = Duration::from_secs(secs);
            assert!(longest_attempt(ttl) + safety(ttl) < ttl, "{ttl:?}");
        }
        assert_eq!(
            longest_attempt(Duration::from_secs(15)),
            Duration::from_secs(10)
        );
    }
}
