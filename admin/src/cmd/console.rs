//! The web console's logins as outboxctl handles them: `console hash-password` (a password
//! from standard input to an argon2id PHC string), and the logins `web` serves with, from
//! the `[console]` section of `--config` (read-only without users and trusted header).

use std::io::{IsTerminal as _, Read as _, Write as _};

use outbox_console::Access;
use outbox_dispatcher::config::ConsoleConfig;

use crate::exit::CliError;

/// Reads the password from standard input (echo off when it is a terminal) and prints its hash.
pub(crate) fn hash_password() -> Result<(), CliError> {
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if terminal {
        eprint!("password (not shown): ");
        let _ = std::io::stderr().flush();
        set_echo(false);
    }
    let mut text = String::new();
    let read = if terminal {
        stdin.read_line(&mut text).map(|_| ())
    } else {
        stdin.lock().read_to_string(&mut text).map(|_| ())
    };
    if terminal {
        set_echo(true);
        eprintln!();
    }
    read.map_err(|e| {
        CliError::invalid(format!("cannot read the password from standard input: {e}"))
    })?;
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    let hash =
        outbox_console::password::hash(password).map_err(|e| CliError::invalid(e.to_string()))?;
    println!("{hash}");
    Ok(())
}

/// `stty echo` or `stty -echo` on the terminal of standard input; best effort.
fn set_echo(on: bool) {
    let _ = std::process::Command::new("stty")
        .arg(if on { "echo" } else { "-echo" })
        .stdin(std::process::Stdio::inherit())
        .status();
}

/// The logins `outboxctl web` serves: `[console]`'s, as the dispatcher's listener would. The
/// session key file is not read (outboxctl reads the config without keys): without
/// `session_key` (or OUTBOX_CONSOLE_SESSION_KEY) a random key signs the sessions, which then
/// end when `web` stops.
pub(crate) fn access(c: &ConsoleConfig) -> Result<Access, CliError> {
    c.access()
        .map_err(|e| CliError::invalid(format!("[console]: {e}")))
}
