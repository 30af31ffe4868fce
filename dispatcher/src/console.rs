//! The web console on the dispatcher's listener (`[console] enabled`, off by default): the
//! pages of `outboxctl web` (crate `outbox-console`) under [`BASE_PATH`], read-only unless
//! `[console]` configures logins. They read over a small pool of their own, connected once the
//! daemon's database answers as `[console] database_url` (default: `database.url`), so an
//! operator's pages never take a connection the partition loops need.

use backon::Retryable as _;
use outbox_console::{AccessError, Console, Options};
use outbox_store::{Store, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Where the pages live on the listener, beside `/metrics`, `/healthz` and `/readyz`.
pub const BASE_PATH: &str = "/console";

/// The console's pool: pages are read one query at a time, and a refresh storm must stay small.
const CONNECTIONS: u32 = 2;

/// The console `config` asks for, with no store yet (its pages answer 503 until
/// [`connect`] attaches one); `None` when `[console]` is not enabled.
pub(crate) fn console(config: &Config) -> Result<Option<Console>, AccessError> {
    if !config.console.enabled {
        return Ok(None);
    }
    let options = Options {
        base_path: BASE_PATH.to_owned(),
        refresh: config.console.refresh,
        configured_destinations: Some(config.destinations.keys().cloned().collect()),
    };
    if config.console.random_session_key() {
        tracing::warn!(
            "console: no session_key configured: sessions are signed with a random key and end when this process stops"
        );
    }
    Ok(Some(Console::with_access(
        options,
        config.console.access()?,
    )))
}

/// Connects the console's own pool (retrying while the database is unreachable), attaches it,
/// and closes it once `stop` is cancelled.
pub(crate) fn connect(console: Console, config: &Config, stop: CancellationToken) {
    let url = config
        .console
        .database_url
        .clone()
        .unwrap_or_else(|| config.database_url.clone());
    let options = StoreOptions {
        lease_ttl: config.lease_bounds,
        max_connections: CONNECTIONS,
        application_name: "outbox-dispatcher-console".to_owned(),
        ..StoreOptions::default()
    };
    tokio::spawn(async move {
        let connecting = (|| Store::connect(url.expose(), options.clone()))
            .retry(crate::status::reconnect_backoff())
            .notify(|e, backoff| {
                tracing::warn!(error = %e, ?backoff, "console: cannot connect its pool; retrying")
            });
        let store = tokio::select! {
            () = stop.cancelled() => return,
            store = connecting => match store {
                Ok(store) => store,
                Err(_) => return,
            },
        };
        console.attach(store.clone());
        stop.cancelled().await;
        store.close().await;
    });
}
