//! One module per subcommand; `run` connects and dispatches.

mod enqueue;
mod lease;
mod migrate;

use outbox_store::{Store, StoreOptions, TtlBounds};

use outbox_producer::Outbox;

use crate::cli::{Cli, Command, Global, LeaseCommand};
use crate::exit::CliError;

/// Runs the parsed command line.
pub(crate) async fn run(cli: Cli) -> Result<(), CliError> {
    let store = connect(&cli.global).await?;
    let json = cli.global.json;
    let outbox = Outbox::from_store(store.clone()).with_max_body_bytes(cli.global.max_body_bytes);
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
    };
    store.close().await;
    result
}

async fn connect(global: &Global) -> Result<Store, CliError> {
    let url = global.database_url.as_deref().ok_or_else(|| {
        CliError::invalid("no database: pass --database-url URL or set OUTBOX_DATABASE_URL")
    })?;
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(global.lease_min_ttl, global.lease_max_ttl)?,
        max_connections: 2,
        application_name: "outboxctl".to_owned(),
        ..StoreOptions::default()
    };
    Ok(Store::connect(url, options).await?)
}
