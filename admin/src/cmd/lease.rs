//! `outboxctl lease …`: list leases (acquire, renew and release arrive with the producer).

use outbox_store::{LeaseRow, Store};

use crate::exit::CliError;
use crate::render;

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
        table.add_row(vec![
            row.resource.to_string(),
            row.token.to_string(),
            state(row).to_owned(),
            row.owner_id
                .map(|o| o.to_string())
                .unwrap_or_else(|| "-".to_owned()),
            row.remaining_ms
                .map(render::relative_ms)
                .unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    println!("{table}");
    println!("{}", render::count(rows.len(), "lease"));
    Ok(())
}

fn state(row: &LeaseRow) -> &'static str {
    match (row.held, row.owner_id) {
        (true, _) => "held",
        (false, Some(_)) => "expired",
        (false, None) => "free",
    }
}
