//! `outboxctl lease …`: acquire, renew, release and list leases, so shell scripts and
//! programs in any language can use the fence.

use std::time::Duration;

use outbox_producer::{FencingToken, Lease, Outbox, OwnerId, ResourceName};
use outbox_store::Store;
use time::OffsetDateTime;

use crate::cli::LeaseArgs;
use crate::exit::{self, CliError};
use crate::render;

/// The lease named on the command line. Its expiry is unknown here and not needed: the
/// database checks owner, token and expiry itself.
pub(crate) fn from_args(args: &LeaseArgs) -> Result<Lease, CliError> {
    Ok(Lease {
        resource: ResourceName::new(args.resource.as_str())?,
        owner_id: args.owner_id.parse::<OwnerId>()?,
        token: args.token.parse::<FencingToken>()?,
        expires_at: OffsetDateTime::UNIX_EPOCH,
    })
}

pub(crate) async fn acquire(
    outbox: &Outbox,
    resource: &str,
    ttl: Duration,
    json: bool,
) -> Result<(), CliError> {
    let Some(lease) = outbox.try_acquire(resource, ttl).await? else {
        return Err(CliError::new(
            exit::BUSY,
            format!("lease busy: another owner holds {resource}"),
        ));
    };
    print_lease("acquired", &lease, json);
    Ok(())
}

pub(crate) async fn renew(
    outbox: &Outbox,
    args: &LeaseArgs,
    ttl: Duration,
    json: bool,
) -> Result<(), CliError> {
    let lease = from_args(args)?;
    let Some(renewed) = outbox.renew(&lease, ttl).await? else {
        return Err(not_held(&lease));
    };
    print_lease("renewed", &renewed, json);
    Ok(())
}

pub(crate) async fn release(outbox: &Outbox, args: &LeaseArgs, json: bool) -> Result<(), CliError> {
    let lease = from_args(args)?;
    if !outbox.release(&lease).await? {
        return Err(not_held(&lease));
    }
    if json {
        render::json_line(&serde_json::json!({"resource": lease.resource, "released": true}));
    } else {
        println!("released {} (token {})", lease.resource, lease.token);
    }
    Ok(())
}

fn not_held(lease: &Lease) -> CliError {
    CliError::new(
        exit::STALE,
        format!(
            "lease lost: owner {} with token {} no longer holds {} (expired or taken over)",
            lease.owner_id, lease.token, lease.resource
        ),
    )
}

fn print_lease(verb: &str, lease: &Lease, json: bool) {
    if json {
        render::json_line(lease);
    } else {
        let expires = lease
            .expires_at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        println!(
            "{verb} {}: token {}, owner {}, expires {expires}",
            lease.resource, lease.token, lease.owner_id
        );
    }
}

pub(crate) async fn list(store: &Store, json: bool) -> Result<(), CliError> {
    let rows = store.lease_list().await?;
    if json {
        for row in &rows {
            render::json_line(row);
        }
        return Ok(());
    }
    let mut table = render::table(&["RESOURCE", "TOKEN", "STATE", "OWNER", "EXPIRES"]);
    for row in &rows {
        table.add_row(render::lease_cells(row));
    }
    println!("{table}");
    println!("{}", render::count(rows.len(), "lease"));
    Ok(())
}
