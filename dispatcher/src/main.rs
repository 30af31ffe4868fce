//! The `outbox-dispatcher` binary: arguments, configuration, logging and traces (the process's
//! subscriber and tracer provider, from `[telemetry]`), and SIGINT/SIGTERM into a cancellation
//! token; then `run`. A second signal exits at once. `demo` is a command of this binary only
//! (`demo.rs`).

mod demo;

use std::collections::HashMap;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use outbox_dispatcher::Config;
use outbox_dispatcher::telemetry::{self, Traces};
use tokio_util::sync::CancellationToken;

/// Delivers the ops recorded in the fenced outbox.
#[derive(Debug, Parser)]
#[command(name = "outbox-dispatcher", version, about)]
struct Args {
    /// TOML configuration file; without one, the defaults (sqlite://outbox.db, no
    /// destinations) apply. See dispatcher/config.default.toml for every key. Accepted before
    /// or after the subcommand (`check-config --config FILE`).
    #[arg(long, env = "OUTBOX_CONFIG", global = true)]
    config: Option<std::path::PathBuf>,
    /// Log lines on stderr as `text` (for people) or `json` (one object a line, for log
    /// pipelines; with traces on, a line written during an attempt has its `trace_id` and
    /// `span_id`). `RUST_LOG` filters them, e.g. `info,outbox_dispatcher=debug`. Neither ever
    /// holds an op's body or a header's value.
    #[arg(
        long,
        env = "OUTBOX_LOG_FORMAT",
        global = true,
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the configuration and print it, secrets shown as ***.
    CheckConfig,
    /// Tell the seed's story live: a paused worker's stale call is rejected while the new
    /// owner's is delivered. Needs no set-up (SQLite in a temporary folder, a local stand-in
    /// API); exits 0 only when every expectation held.
    Demo {
        /// Run it on PostgreSQL or SQL Server instead, e.g. postgres://localhost/outbox_demo.
        #[arg(long)]
        database_url: Option<String>,
        /// Then show the circuit breaker: a ledger API that fails opens its breaker, is probed,
        /// and closes once it answers again (about 10 more seconds).
        #[arg(long)]
        breaker: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("outbox-dispatcher: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `Ok(false)` when the demo ran and an expectation failed.
fn run(args: Args) -> anyhow::Result<bool> {
    if let Some(Command::Demo {
        database_url,
        breaker,
    }) = args.command
    {
        // The demo tells its own story on stdout; only errors are logged beside it.
        telemetry::install(args.log_format.into(), "error", None)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(demo::run(database_url, breaker));
    }
    let text = match &args.config {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        ),
        None => None,
    };
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = Config::load(text.as_deref(), &env)?;
    if let Some(Command::CheckConfig) = args.command {
        print!("{}", config.redacted());
        return Ok(true);
    }
    let traces = config.telemetry.as_ref().map(Traces::start).transpose()?;
    telemetry::install(args.log_format.into(), "info", traces.as_ref())?;
    if let Some(t) = &config.telemetry {
        tracing::info!(service = %t.service_name, sampler = t.sampler.name(), "exporting traces over OTLP/HTTP");
    }
    if args.config.is_none() {
        tracing::warn!(
            "no config file: using the defaults (sqlite://outbox.db, no destinations); pass --config FILE"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let ran = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        outbox_dispatcher::run(config, shutdown).await
    });
    // The last spans are exported with blocking calls: after the runtime has stopped.
    drop(runtime);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    ran?;
    Ok(true)
}

/// The first SIGINT or SIGTERM starts a graceful shutdown; the second exits at once.
async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::info!("shutting down: no new claims; waiting for attempts in flight");
    shutdown.cancel();
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    tracing::warn!("second signal: exiting now");
    std::process::exit(130);
}

impl From<LogFormat> for telemetry::LogFormat {
    fn from(format: LogFormat) -> telemetry::LogFormat {
        match format {
            LogFormat::Text => telemetry::LogFormat::Text,
            LogFormat::Json => telemetry::LogFormat::Json,
        }
    }
}
