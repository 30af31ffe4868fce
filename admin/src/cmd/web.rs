//! `outboxctl web`: the web console (crate `outbox-console`) on a listener of its own, until
//! SIGINT or SIGTERM. It reads what `status`, `list`, `show` and `rejections` read. Without
//! logins it changes nothing and has no authentication; with `--config`'s `[console]` users
//! or trusted header, operators replay, cancel, pause and resume over this command's login.

use std::time::Duration;

use outbox_console::{Console, Options};
use outbox_dispatcher::Config;
use outbox_store::Store;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::WebArgs;
use crate::exit::CliError;

/// Serves the console until a signal; `dispatcher` is `--config`'s dispatcher configuration,
/// when one was given: its destinations and its `[console]` logins.
pub(crate) async fn run(
    store: &Store,
    args: &WebArgs,
    dispatcher: Option<&Config>,
) -> Result<(), CliError> {
    let refresh = args.refresh;
    if !refresh.is_zero()
        && !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&refresh)
    {
        return Err(CliError::invalid(
            "--refresh must be 0s (no reloads) or between 1s and 1h",
        ));
    }
    let access = match dispatcher {
        Some(c) => crate::cmd::console::access(&c.console)?,
        None => outbox_console::Access::read_only(),
    };
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
    let logins = access.enabled();
    if logins {
        eprintln!(
            "outboxctl web: the console is at http://{addr}/ with the logins of --config's [console] (Ctrl-C stops it)"
        );
        if dispatcher.is_some_and(|c| c.console.session_key.is_none()) {
            eprintln!(
                "outboxctl web: no [console] session_key or OUTBOX_CONSOLE_SESSION_KEY (outboxctl does not read session_key_file): sessions end when this stops"
            );
        }
    } else {
        eprintln!("outboxctl web: the read-only console is at http://{addr}/ (Ctrl-C stops it)");
    }
    if !addr.ip().is_loopback() {
        if logins {
            eprintln!(
                "outboxctl web: warning: {addr} can be reached from other hosts; serve it over HTTPS (a proxy of your own) with [console] secure_cookie = true"
            );
        } else {
            eprintln!(
                "outboxctl web: warning: {addr} can be reached from other hosts and the console has no authentication; keep it behind a proxy of your own"
            );
        }
    }
    let options = Options {
        base_path: String::new(),
        refresh,
        configured_destinations: dispatcher.map(|c| c.destinations.keys().cloned().collect()),
    };
    let stop = async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    };
    let console = Console::with_access(options, access);
    console.attach(store.clone());
    console
        .serve(listener, stop)
        .await
        .map_err(|e| CliError::other(format!("the console's listener failed: {e}")))?;
    eprintln!("outboxctl web: stopped");
    Ok(())
}
