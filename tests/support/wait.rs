//! Waiting for a condition by polling, with a generous deadline, instead of sleeping blindly.

use std::future::Future;
use std::time::Duration;

/// Polls `attempt` every 25 ms until it yields a value; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
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
    let deadline = tokio::time::Instant::now() + timeout;
    while !condition().await {
        if tokio::time::Instant::now() >= deadline {
            let why = explain().await;
            panic!("timed out after {timeout:?} waiting until {what}{why}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
