//! The dispatcher's own lease on `dispatcher/<partition>`: standby, leader, step-down.
//!
//! A standby tries to acquire the lease every third of its TTL. A leader *trusts* it only until
//! `sent + ttl - safety`, where `sent` is when the last successful renewal (or the
//! acquisition) was sent: the database set the expiry from a later instant, so the dispatcher
//! always stops trusting its lease before the database would expire it. An attempt starts only
//! if its whole timeout fits in the trusted window (G9). The leader renews often enough that
//! the window always has room for its longest attempt ([`renew_every`]): renewing every third
//! of the TTL left it too short for a third of the time with the defaults, and every claim
//! waited for the next renewal then (up to 1.5 s, issue 34). A
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

/// How often a leader renews its lease of `ttl` when its longest attempt takes `longest`: every
/// third of the TTL at most, and often enough that the trusted window (`ttl - safety` from a
/// renewal's sending) still has `longest` left when the next renewal's answer is due: half of
/// what the window has beyond `longest` is the pause, the other half is left for the renewal's
/// round trip and the timer's lateness. At least 10 ms.
pub fn renew_every(ttl: Duration, longest: Duration) -> Duration {
    let slack = ttl.saturating_sub(safety(ttl)).saturating_sub(longest);
    (slack / 2).min(ttl / 3).max(Duration::from_millis(10))
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
    /// `longest` is the longest attempt it may start (the longest destination timeout): the
    /// lease is renewed so that it is always trusted for that long ([`renew_every`]).
    pub async fn acquire(
        store: &Store,
        partition: Partition,
        ttl: Duration,
        longest: Duration,
    ) -> Result<Option<Leadership>, outbox_store::Error> {
        let resource = ResourceName::new(partition.lease_resource())?;
        let sent = Instant::now();
        let Some(lease) = store.lease_try_acquire(&resource, ttl).await? else {
            return Ok(None);
        };
        let (trust, trusted_until) = watch::channel(sent + ttl - safety(ttl));
        let every = renew_every(ttl, longest);
        let renewal =
            Renewal::start_every(store.clone(), lease.clone(), ttl, every, move |_, sent| {
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

    /// Waits until the window covers `d` (after the next renewal), or returns false when the
    /// lease is lost or `give_up` fires first.
    pub async fn wait_to_cover(&mut self, d: Duration, give_up: &CancellationToken) -> bool {
        loop {
            if self.covers(d) {
                return true;
            }
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

    /// Issue 34: with the defaults (a 15 s lease, a 10 s timeout) a renewal every 5 s left the
    /// window too short for the timeout for 1.5 s of every 5: the window right before a
    /// renewal's answer is what an attempt must fit in, and it must leave room for the round
    /// trip. Every accepted TTL and timeout keeps half the slack for it.
    #[test]
    fn renewals_keep_the_longest_attempt_trusted_at_every_moment() {
        let ttl = Duration::from_secs(15);
        assert_eq!(
            renew_every(ttl, Duration::from_secs(10)),
            Duration::from_millis(1750)
        );
        assert_eq!(renew_every(ttl, Duration::from_secs(1)), ttl / 3);
        for secs in [1, 3, 5, 15, 60, 300] {
            let ttl = Duration::from_secs(secs);
            for tenths in 0..=10 {
                let longest = longest_attempt(ttl) * tenths / 10;
                let every = renew_every(ttl, longest);
                assert!(every <= ttl / 3, "{ttl:?} {longest:?}");
                // The window just before the next answer, with a round trip as long as the
                // pause itself: still the longest attempt.
                let left = ttl - safety(ttl) - every - every;
                assert!(
                    left >= longest,
                    "{ttl:?} {longest:?}: {every:?} leaves {left:?}"
                );
            }
        }
    }
}
