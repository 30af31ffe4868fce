//! `outboxctl`: the operators' and scripts' door to the fenced outbox.
//! Parses arguments, connects, runs one subcommand and turns its result into an exit code.

mod cli;
mod cmd;
mod exit;
mod render;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing();
    // One TLS provider for the whole process (sqlx, and later reqwest, use aws-lc-rs).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return exit::report(&exit::CliError::other(format!("cannot start runtime: {e}")));
        }
    };
    match runtime.block_on(cmd::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::report(&e),
    }
}

/// Logs go to stderr, quiet unless `RUST_LOG` asks for more, so stdout stays for results.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
