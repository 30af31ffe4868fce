//! The content flows of `outboxctl keys rotate`, written once for every backend: read a page of
//! requests' content, write back what changed in one transaction (each row only if it is
//! still as read), and log the rotation.

use crate::driver::Driver;
use crate::error::Error;
use crate::model::{Change, ContentRewrite, StoredContent};

/// Up to `limit` requests' content after row id `after`, by row id.
pub(crate) async fn page<D: Driver>(
    d: &D,
    after: i64,
    limit: u32,
) -> Result<Vec<StoredContent>, Error> {
    let mut tx = d.begin().await?;
    let rows = D::admin_content_page(&mut tx, after, limit).await?;
    D::commit(tx).await?;
    Ok(rows)
}

/// Writes `rewrites` in one transaction; returns the sequences written (a row an erase or
/// purge changed since it was read is left as it is now).
pub(crate) async fn replace<D: Driver>(
    d: &D,
    rewrites: &[ContentRewrite],
) -> Result<Vec<i64>, Error> {
    let mut tx = d.begin().await?;
    let mut written = Vec::with_capacity(rewrites.len());
    for r in rewrites {
        if D::admin_content_replace(&mut tx, r).await? {
            written.push(r.seq);
        }
    }
    D::commit(tx).await?;
    Ok(written)
}

/// One `outbox_admin_log` row for `action`, in a transaction of its own.
pub(crate) async fn log<D: Driver>(
    d: &D,
    change: &Change,
    action: &str,
    details: &str,
) -> Result<(), Error> {
    let mut tx = d.begin().await?;
    D::admin_log_insert(&mut tx, change, action, details).await?;
    D::commit(tx).await
}
