//! `outboxctl web`: the read-only web console (crate `outbox-console`) on a listener of its
//! own, until SIGINT or SIGTERM. It reads what `status`, `list`, `show` and `rejections` read
//! and changes nothing; it has no authentication.

use std::time::Duration;

use outbox_console::Options;
use outbox_store::Store;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::WebArgs;
use crate::exit::CliError;

/// Serves the console until a signal; `configured` are the destinations of `--config`'s
/// dispatcher configuration, when one was given.
pub(crate) async fn run(
    store: &Store,
    args: &WebArgs,
    configured: Option<Vec<String>>,
) -> Result<(), CliError> {
    let refresh = args.refresh;
    if !refresh.is_zero()
        && !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&refresh)
    {
        return Err(CliError::invalid(
            "--refresh must be 0s (no reloads) or between 1s and 1h",
        ));
    }
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Err(CliError::other(
            "cannot install the SIGTERM and SIGINT handlers",
        ));
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::other(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::other(format!("cannot read the listener's address: {e}")))?;
    eprintln!("outboxctl web: the read-only console is at http://{addr}/ (Ctrl-C stops it)");
    if !addr.ip().is_loopback() {
        eprintln!(
            "outboxctl web: warning: {addr} can be reached from other hosts and the console has no authentication; keep it behind a proxy of your own"
        );
    }
    let options = Options {
        base_path: String::new(),
        refresh,
        configured_destinations: configured,
    };
    let stop = async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    };
    outbox_console::serve(listener, store.clone(), options, stop)
        .await
        .map_err(|e| CliError::other(format!("the console's listener failed: {e}")))?;
    eprintln!("outboxctl web: stopped");
    Ok(())
}
