//! One module per subcommand; `run` connects and dispatches.

mod change;
mod config;
mod console;
mod destination;
mod enqueue;
mod keys;
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

use clap::CommandFactory as _;
use outbox_producer::Outbox;
use outbox_store::{Store, StoreOptions, TtlBounds};

use crate::cli::{
    Cli, Command, ConsoleCommand, DestinationCommand, Global, KeysCommand, LeaseCommand,
    PartitionsCommand,
};
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
    // Hashing a password needs no database.
    if let Command::Console(ConsoleCommand::HashPassword) = cli.command {
        return console::hash_password();
    }
    // Keys are read only by the commands that use them: the others run for a user who may
    // not read them.
    let keys = match &cli.command {
        Command::Keys(_) => keys::load(&cli.global)?,
        Command::Enqueue(_) if cli.global.encrypt_with.is_some() => keys::load(&cli.global)?,
        Command::Show(args) if args.body => keys::load_to_read(&cli.global),
        _ => None,
    };
    let store = connect(&cli.global).await?;
    let json = cli.global.json;
    let mut outbox =
        Outbox::from_store(store.clone()).with_max_body_bytes(cli.global.max_body_bytes)?;
    if let Some(keys) = keys.as_ref().filter(|k| k.sealing_key().is_some()) {
        outbox = outbox.with_keys(keys.clone())?;
    }
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
        Command::Show(args) => show::run(&store, keys.as_ref(), &args, json).await,
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
        Command::Keys(KeysCommand::Rotate(args)) => {
            keys::rotate(&store, keys.as_ref(), &args, json).await
        }
        Command::Web(args) => match config::optional_config(&cli.global) {
            Ok(dispatcher) => web::run(&store, &args, dispatcher.as_ref()).await,
            Err(e) => Err(e),
        },
        Command::Completions { .. } | Command::Console(_) => Ok(()),
    };
    store.close().await;
    result
}

async fn connect(global: &Global) -> Result<Store, CliError> {
    let url = config::database_url(global)?;
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(global.lease_min_ttl, global.lease_max_ttl)?,
        max_connections: 2,
        application_name: "outboxctl".to_owned(),
        ..StoreOptions::default()
    };
    Ok(Store::connect(&url, options).await?)
}
