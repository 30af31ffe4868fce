//! A producer's calls for a login holding the role `outbox_producer` alone (issue 37): leases
//! through `outbox.try_acquire`, `renew` and `release`, enqueues through `outbox.enqueue_batch`,
//! each run with its owner's rights. Which way a store's calls go (`StoreOptions::producer_calls`)
//! is asked once, at its first producer call (`crate::calls`); the statements' way is the rest
//! of this folder.

use sqlx::postgres::PgDatabaseError;

use super::*;
use crate::InvalidInput;
use crate::op::RejectReason;

const PRODUCER_CALLS: &str = include_str!("../../sql/postgres/producer_calls.sql");
const PRODUCER_ENQUEUE: &str = include_str!("../../sql/postgres/producer_enqueue.sql");
const PRODUCER_LEASE_ACQUIRE: &str = include_str!("../../sql/postgres/producer_lease_acquire.sql");
const PRODUCER_LEASE_RENEW: &str = include_str!("../../sql/postgres/producer_lease_renew.sql");
const PRODUCER_LEASE_RELEASE: &str = include_str!("../../sql/postgres/producer_lease_release.sql");

impl PgStore {
    /// Whether this store's producer calls (leases and enqueues) go through the functions.
    pub(crate) async fn producer_functions(&self) -> Result<bool, Error> {
        self.producer
            .through_api(|| async {
                let row = query(PRODUCER_CALLS).optional_on(self).await?;
                row.map(|r| r.col::<bool>("may_write")).transpose()
            })
            .await
    }

    /// `outbox.try_acquire`: the owner id is the function's.
    pub(crate) async fn lease_acquire_by_function(
        &self,
        resource: &ResourceName,
        ttl_ms: i64,
    ) -> Result<Option<(OwnerId, FencingToken, OffsetDateTime)>, Error> {
        let row = query(PRODUCER_LEASE_ACQUIRE)
            .bind(resource.as_str())
            .bind(ttl_ms)
            .optional_on(self)
            .await
            .map_err(refusal)?;
        row.map(|r| {
            Ok((
                OwnerId::from(r.col::<Uuid>("owner_id")?),
                FencingToken::new(r.col("fence")?),
                r.col("expires_at")?,
            ))
        })
        .transpose()
    }

    /// `outbox.renew`: the new expiry, or `None` when no longer held.
    pub(crate) async fn lease_renew_by_function(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<Option<OffsetDateTime>, Error> {
        query(PRODUCER_LEASE_RENEW)
            .bind(resource.as_str())
            .bind(owner.as_uuid())
            .bind(token.get())
            .bind(ttl_ms)
            .one_on(self)
            .await
            .map_err(refusal)?
            .col("expires_at")
    }

    /// `outbox.release`: whether this owner and token held it.
    pub(crate) async fn lease_release_by_function(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        query(PRODUCER_LEASE_RELEASE)
            .bind(resource.as_str())
            .bind(owner.as_uuid())
            .bind(token.get())
            .one_on(self)
            .await
            .map_err(refusal)?
            .col("released")
    }
}

/// `outbox.enqueue_batch` on `c` (a pooled connection, or a savepoint in the caller's
/// transaction): every op or none, its refusals told as the statements' flow tells them.
pub(crate) async fn enqueue(
    c: &mut PgConnection,
    lease: &Lease,
    ops: &[NewOp],
) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
    let supersede: Vec<bool> = ops.iter().map(|o| o.supersede_pending).collect();
    let rows = batch_query(PRODUCER_ENQUEUE, lease, ops)
        .bind(supersede)
        .fetch_all(c)
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return not_enqueued(&e).map(Err).ok_or_else(|| refusal(map_err(e))),
    };
    rows.iter()
        .map(|r| {
            Ok(Enqueued {
                op_id: r.col("op_id")?,
                seq: r.col("seq")?,
                duplicate: r.col("duplicate")?,
                state: r.col::<String>("state")?.parse()?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()
        .map(Ok)
}

/// The function's SQLSTATE for a rejection (OB001-OB003) or a conflict (OB004), as the
/// statements' flow answers it.
fn not_enqueued(e: &sqlx::Error) -> Option<NotEnqueued> {
    let db = e
        .as_database_error()?
        .try_downcast_ref::<PgDatabaseError>()?;
    let detail: serde_json::Value = db
        .detail()
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let current = detail["current_token"].as_i64().map(FencingToken::new);
    Some(match db.code() {
        "OB001" => NotEnqueued::Rejected(RejectReason::Stale {
            current: current.unwrap_or(FencingToken::new(0)),
        }),
        "OB002" => NotEnqueued::Rejected(RejectReason::Expired),
        "OB003" => NotEnqueued::Rejected(RejectReason::NoLease { current }),
        "OB004" => NotEnqueued::Conflict {
            existing_op_id: detail["existing_op_id"].as_str()?.parse().ok()?,
        },
        _ => return None,
    })
}

/// An input the SQL API refused (OB005, its field in the error's column) as the store's
/// invalid input; anything else as it was.
fn refusal(e: Error) -> Error {
    let Error::Store(s) = &e else {
        return e;
    };
    let Some(db) = std::error::Error::source(s)
        .and_then(|e| e.downcast_ref::<sqlx::Error>())
        .and_then(|e| e.as_database_error())
        .and_then(|e| e.try_downcast_ref::<PgDatabaseError>())
    else {
        return e;
    };
    if db.code() != "OB005" {
        return e;
    }
    let field = crate::calls::api_field(db.column().unwrap_or("op"));
    let reason = db
        .message()
        .split_once(": ")
        .map_or(db.message(), |(_, reason)| reason);
    InvalidInput::new(field, reason.to_owned()).into()
}
