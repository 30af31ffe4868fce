//! `LeaseKeeper`: holds a lease for long work, renewing it every TTL/3, and cancels a token
//! the moment the lease cannot be kept.
//!
//! Invariant: while [`LeaseKeeper::lost`] is not cancelled, the last renewal succeeded less
//! than two thirds of a TTL ago, so the lease is still held by the database clock. A renewal
//! that fails, finds the lease lost, or takes longer than TTL/3 cancels the token at once and
//! stops renewing: the worker should stop. Cancellation only saves wasted work; the fenced
//! enqueue is what rejects a worker that ignores it or is paused (G4). On pause, the keeper
//! pauses with the process and the lease expires; on crash, it expires; nothing is released
//! early.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_store::{Lease, Renewal};
use tokio_util::sync::CancellationToken;

use crate::{Error, Outbox};

/// Keeps a lease alive in a background task. Dropping it stops the renewals without
/// releasing: the lease then expires after at most its TTL. Call [`LeaseKeeper::release`] to
/// release it at once.
#[derive(Debug)]
pub struct LeaseKeeper {
    outbox: Outbox,
    current: Arc<Mutex<Lease>>,
    renewal: Option<Renewal>,
    lost: CancellationToken,
}

impl LeaseKeeper {
    /// Starts renewing `lease` to `ttl` every `ttl / 3`. Must be called inside a Tokio runtime.
    pub fn start(outbox: &Outbox, lease: Lease, ttl: Duration) -> LeaseKeeper {
        let current = Arc::new(Mutex::new(lease.clone()));
        let latest = current.clone();
        let renewal = Renewal::start(outbox.store().clone(), lease, ttl, move |renewed, _sent| {
            *latest.lock().expect("lease mutex") = renewed;
        });
        let lost = renewal.lost().clone();
        LeaseKeeper {
            outbox: outbox.clone(),
            current,
            renewal: Some(renewal),
            lost,
        }
    }

    /// The lease with its latest expiry.
    pub fn lease(&self) -> Lease {
        self.current.lock().expect("lease mutex").clone()
    }

    /// Cancelled as soon as a renewal fails or the lease is found lost.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lease was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Stops renewing and releases the lease; `false` when it was already lost.
    pub async fn release(mut self) -> Result<bool, Error> {
        if let Some(renewal) = self.renewal.take() {
            renewal.stop().await;
        }
        let lease = self.lease();
        self.outbox.release(&lease).await
    }
}
