//! Waiting for a condition by polling, with a generous deadline, instead of sleeping blindly.

use std::future::Future;
use std::time::Duration;

/// Polls `attempt` every 25 ms until it yields a value; `None` once `timeout` has passed.
async fn poll_for<T, F, Fut>(timeout: Duration, mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = attempt().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls `attempt` every 25 ms until it yields a value; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_for(timeout, attempt).await {
        Some(value) => value,
        None => panic!("timed out after {timeout:?} waiting until {what}"),
    }
}

/// Polls `condition` every 25 ms until it is true; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let attempt = || {
        let check = condition();
        async move { check.await.then_some(()) }
    };
    wait_for(timeout, what, attempt).await
}

/// [`wait_until`] that, on timeout, adds what `explain` says (the database's sessions and
/// leases, say) to the panic, so a failure seen once in CI can be understood from its log.
pub async fn wait_until_explained<F, Fut, E, EFut>(
    timeout: Duration,
    what: &str,
    mut condition: F,
    explain: E,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
    E: FnOnce() -> EFut,
    EFut: Future<Output = String>,
{
    let attempt = || {
        let check = condition();
        async move { check.await.then_some(()) }
    };
    if poll_for(timeout, attempt).await.is_none() {
        let why = explain().await;
        panic!("timed out after {timeout:?} waiting until {what}{why}");
    }
}
