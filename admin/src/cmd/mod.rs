//! One module per subcommand; `run` connects and dispatches.

mod change;
mod destination;
mod enqueue;
mod lease;
mod list;
mod migrate;
mod partitions;
mod purge;
mod rejections;
mod select;
mod show;
mod status;
mod tail;
mod web;

use std::collections::HashMap;

use clap::CommandFactory as _;
use outbox_producer::Outbox;
use outbox_store::{Store, StoreOptions, TtlBounds};

use crate::cli::{Cli, Command, DestinationCommand, Global, LeaseCommand, PartitionsCommand};
use crate::exit::CliError;

/// Runs the parsed command line.
pub(crate) async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "outboxctl",
            &mut std::io::stdout(),
        );
        return Ok(());
    }
    let store = connect(&cli.global).await?;
    let json = cli.global.json;
    let outbox =
        Outbox::from_store(store.clone()).with_max_body_bytes(cli.global.max_body_bytes)?;
    let result = match cli.command {
        Command::Migrate => migrate::run(&store, json).await,
        Command::Lease(LeaseCommand::List) => lease::list(&store, json).await,
        Command::Lease(LeaseCommand::Acquire { resource, ttl }) => {
            lease::acquire(&outbox, &resource, ttl, json).await
        }
        Command::Lease(LeaseCommand::Renew { lease, ttl }) => {
            lease::renew(&outbox, &lease, ttl, json).await
        }
        Command::Lease(LeaseCommand::Release { lease }) => {
            lease::release(&outbox, &lease, json).await
        }
        Command::Enqueue(args) => enqueue::run(&outbox, *args, json).await,
        Command::Status => status::run(&store, json).await,
        Command::List(args) => list::run(&store, &args, json).await,
        Command::Show(args) => show::run(&store, &args, json).await,
        Command::Replay(args) => change::run(&store, change::Verb::Replay, &args, json).await,
        Command::Cancel(args) => change::run(&store, change::Verb::Cancel, &args, json).await,
        Command::Purge(args) => purge::run(&store, &args, json).await,
        Command::Partitions(PartitionsCommand::Show) => partitions::show(&store, json).await,
        Command::Destination(DestinationCommand::List) => destination::list(&store, json).await,
        Command::Destination(DestinationCommand::Pause(args)) => {
            destination::change(&store, &args, true, json).await
        }
        Command::Destination(DestinationCommand::Resume(args)) => {
            destination::change(&store, &args, false, json).await
        }
        Command::Partitions(PartitionsCommand::Set(args)) => {
            partitions::set(&store, &args, json).await
        }
        Command::Rejections(args) => rejections::run(&store, &args, json).await,
        Command::Tail(args) => tail::run(&store, &args, json).await,
        Command::Web(args) => match configured_destinations(&cli.global) {
            Ok(configured) => web::run(&store, &args, configured).await,
            Err(e) => Err(e),
        },
        Command::Completions { .. } => Ok(()),
    };
    store.close().await;
    result
}

async fn connect(global: &Global) -> Result<Store, CliError> {
    let url = database_url(global)?;
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(global.lease_min_ttl, global.lease_max_ttl)?,
        max_connections: 2,
        application_name: "outboxctl".to_owned(),
        ..StoreOptions::default()
    };
    Ok(Store::connect(&url, options).await?)
}

/// --database-url, else the database of the dispatcher's config file (read the way the
/// dispatcher reads it: OUTBOX_* overrides and ${ENV} interpolation included).
fn database_url(global: &Global) -> Result<String, CliError> {
    if let Some(url) = &global.database_url {
        return Ok(url.clone());
    }
    let Some(path) = &global.config else {
        return Err(CliError::invalid(
            "no database: pass --database-url URL (or OUTBOX_DATABASE_URL) or --config FILE",
        ));
    };
    Ok(read_config(path)?.database_url.expose().to_owned())
}

/// The destinations of the dispatcher's config file, when `--config` names one.
fn configured_destinations(global: &Global) -> Result<Option<Vec<String>>, CliError> {
    let Some(path) = &global.config else {
        return Ok(None);
    };
    Ok(Some(read_config(path)?.destinations.into_keys().collect()))
}

/// The dispatcher's config file at `path`, read the way the dispatcher reads it.
fn read_config(path: &str) -> Result<outbox_dispatcher::Config, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::invalid(format!("cannot read config {path}: {e}")))?;
    let env: HashMap<String, String> = std::env::vars().collect();
    outbox_dispatcher::config::Config::load(Some(&text), &env)
        .map_err(|e| CliError::invalid(format!("config {path}: {e}")))
}
