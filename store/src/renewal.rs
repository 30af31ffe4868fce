//! Keeping a lease alive in the background: renew every third of its TTL (or at once when the
//! holder asks, [`Renewal::early`]), report each success
//! with the instant the renewal was *sent* (the database set the new expiry from a later
//! instant, so `sent + ttl` is a safe local bound), and cancel `lost` at the first renewal that
//! is refused, fails, or takes longer than a third of the TTL. Shared by the producer's
//! `LeaseKeeper` and the dispatcher's partition leadership. Dropping a [`Renewal`] stops it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Lease, Store};

/// A running renewal task.
#[derive(Debug)]
pub struct Renewal {
    lost: CancellationToken,
    stop: CancellationToken,
    early: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Renewal {
    /// Starts renewing `lease` to `ttl` every `ttl / 3`; `renewed` is called after each
    /// success with the renewed lease and when its renewal was sent. Needs a Tokio runtime.
    pub fn start(
        store: Store,
        lease: Lease,
        ttl: Duration,
        renewed: impl Fn(Lease, Instant) + Send + 'static,
    ) -> Renewal {
        let (lost, stop) = (CancellationToken::new(), CancellationToken::new());
        let early = Arc::new(Notify::new());
        let task = tokio::spawn(renew_loop(
            store,
            lease,
            ttl,
            renewed,
            (lost.clone(), stop.clone(), early.clone()),
        ));
        Renewal {
            lost,
            stop,
            early,
            task,
        }
    }

    /// What the holder notifies to have the lease renewed at once instead of at the next third
    /// of its TTL (one renewal per notification at most): a holder that needs the lease
    /// trusted for longer than what is left asks instead of waiting.
    pub fn early(&self) -> Arc<Notify> {
        self.early.clone()
    }

    /// Cancelled at the first renewal that is refused, fails or is too slow.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Stops renewing and waits for the task to end.
    pub async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
    }
}

/// Dropping a renewal stops it: whoever held it (a partition loop that panicked, a worker
/// that forgot to release) can no longer keep the lease alive, so it lapses by itself and
/// nobody renews a lease that no code uses.
impl Drop for Renewal {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `(lost, stop, early)`: cancelled at the first failed renewal; cancelled to stop; notified
/// to renew at once.
async fn renew_loop(
    store: Store,
    lease: Lease,
    ttl: Duration,
    renewed: impl Fn(Lease, Instant),
    (lost, stop, early): (CancellationToken, CancellationToken, Arc<Notify>),
) {
    let period = ttl / 3;
    let mut current = lease;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
            () = early.notified() => {}
        }
        let sent = Instant::now();
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            r = tokio::time::timeout(period, store.lease_renew(&current, ttl)) => r,
        };
        let why = match outcome {
            Ok(Ok(Some(lease))) => {
                current = lease.clone();
                renewed(lease, sent);
                continue;
            }
            Ok(Ok(None)) => "renewal refused: the lease expired or was taken over".to_owned(),
            Ok(Err(e)) => format!("renewal failed: {e}"),
            Err(_) => "renewal took longer than a third of the lease".to_owned(),
        };
        tracing::warn!(resource = %current.resource, token = %current.token, "lease lost: {why}");
        lost.cancel();
        return;
    }
}
