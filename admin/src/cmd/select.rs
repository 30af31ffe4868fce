//! Turning the command line's op selections into what the store takes: filters (states,
//! times given as an age or an RFC 3339 instant) and ops named by SEQ or op id.

use outbox_store::admin::OpFilter;
use outbox_store::{OpState, Store};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::cli::{FilterArgs, parse_duration};
use crate::exit::{self, CliError};

/// The store filter for `args`, at most `limit` ops older than `before_seq`.
pub(crate) fn filter(
    args: &FilterArgs,
    before_seq: Option<i64>,
    limit: u32,
) -> Result<OpFilter, CliError> {
    Ok(OpFilter {
        states: states(&args.states)?,
        destination: args.destination.clone(),
        resource: args.resource.clone(),
        idempotency_key: args.key.clone(),
        created_since: args.since.as_deref().map(instant).transpose()?,
        created_before: args.before.as_deref().map(instant).transpose()?,
        before_seq,
        limit,
    })
}

/// Whether any filter is set (replay and cancel refuse to select every op by accident).
pub(crate) fn any(args: &FilterArgs) -> bool {
    !args.states.is_empty()
        || args.destination.is_some()
        || args.resource.is_some()
        || args.key.is_some()
        || args.since.is_some()
        || args.before.is_some()
}

/// State names as stored.
pub(crate) fn states(names: &[String]) -> Result<Vec<OpState>, CliError> {
    names
        .iter()
        .map(|n| {
            n.parse::<OpState>().map_err(|_| {
                CliError::invalid(format!(
                    "--state {n:?}: expected pending, in_flight, delivered, dead, cancelled or superseded"
                ))
            })
        })
        .collect()
}

/// `2h` (that long ago) or `2026-07-01T09:00:00Z`.
fn instant(text: &str) -> Result<OffsetDateTime, CliError> {
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t);
    }
    let age = parse_duration(text).map_err(|_| {
        CliError::invalid(format!(
            "{text:?} is neither an age like 2h nor a time like 2026-07-01T09:00:00Z"
        ))
    })?;
    Ok(OffsetDateTime::now_utc() - age)
}

/// The SEQ of an op named by SEQ or op id; exit 4 when there is none.
pub(crate) async fn resolve(store: &Store, op: &str) -> Result<i64, CliError> {
    let found = if let Ok(seq) = op.parse::<i64>() {
        Some(seq)
    } else if let Ok(id) = op.parse::<uuid::Uuid>() {
        store.admin_op_find(id).await?
    } else {
        return Err(CliError::invalid(format!(
            "{op:?} is neither an op's SEQ (a number) nor its op id (a UUID)"
        )));
    };
    found.ok_or_else(|| CliError::new(exit::NOT_FOUND, format!("no op {op}")))
}

/// Every SEQ matching `args`, newest first (the store pages through the list query, as the
/// console's replay by filter does).
pub(crate) async fn all_matching(store: &Store, args: &FilterArgs) -> Result<Vec<i64>, CliError> {
    Ok(store.admin_op_seqs(&filter(args, None, 0)?).await?)
}
