//! A producer's calls for a user holding the role `outbox_producer` alone (issue 37): leases
//! through `outbox.TryAcquire`, `Renew` and `Release`, enqueues through `outbox.EnqueueOps`,
//! each reaching the tables through ownership chaining. Which way a store's calls go
//! (`StoreOptions::producer_calls`) is asked once, at its first producer call (`crate::calls`);
//! the statements' way is the rest of this folder.

use super::*;
use crate::op::{EnqueueStage as Stage, RejectReason};

const PRODUCER_CALLS: &str = include_str!("../../sql/mssql/producer_calls.sql");
const PRODUCER_ENQUEUE: &str = include_str!("../../sql/mssql/producer_enqueue.sql");
const PRODUCER_LEASE_ACQUIRE: &str = include_str!("../../sql/mssql/producer_lease_acquire.sql");
const PRODUCER_LEASE_RENEW: &str = include_str!("../../sql/mssql/producer_lease_renew.sql");
const PRODUCER_LEASE_RELEASE: &str = include_str!("../../sql/mssql/producer_lease_release.sql");

impl MsStore {
    /// Whether this store's producer calls (leases and enqueues) go through the procedures.
    /// The question's future is boxed: it would otherwise grow every lease and enqueue call's
    /// future, which a test's thread (2 MiB of stack) holds inline.
    pub(crate) async fn producer_procedures(&self) -> Result<bool, Error> {
        self.producer
            .through_api(|| {
                Box::pin(async {
                    let row = self.fetch_optional(Stmt::new(PRODUCER_CALLS)).await?;
                    row.map(|r| r.col::<bool>("may_write")).transpose()
                })
            })
            .await
    }

    /// `outbox.TryAcquire`: the owner id is the procedure's.
    pub(crate) async fn lease_acquire_by_procedure(
        &self,
        resource: &ResourceName,
        ttl_ms: i64,
    ) -> Result<Option<(OwnerId, FencingToken, OffsetDateTime)>, Error> {
        let row = self
            .fetch_optional(
                Stmt::new(PRODUCER_LEASE_ACQUIRE)
                    .bind(resource.as_str())
                    .bind(ttl_int(ttl_ms)),
            )
            .await
            .map_err(refusal)?;
        row.map(|r| {
            Ok((
                OwnerId::from(r.col::<Uuid>("OwnerId")?),
                FencingToken::new(r.col("Token")?),
                r.col("ExpiresAt")?,
            ))
        })
        .transpose()
    }

    /// `outbox.Renew`: the new expiry, or `None` when no longer held.
    pub(crate) async fn lease_renew_by_procedure(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<Option<OffsetDateTime>, Error> {
        let row = self
            .fetch_optional(
                Stmt::new(PRODUCER_LEASE_RENEW)
                    .bind(resource.as_str())
                    .bind(owner.as_uuid())
                    .bind(token.get())
                    .bind(ttl_int(ttl_ms)),
            )
            .await
            .map_err(refusal)?;
        row.map(|r| r.col("ExpiresAt")).transpose()
    }

    /// `outbox.Release`: whether this owner and token held it.
    pub(crate) async fn lease_release_by_procedure(
        &self,
        resource: &ResourceName,
        owner: OwnerId,
        token: FencingToken,
    ) -> Result<bool, Error> {
        self.fetch_one(
            Stmt::new(PRODUCER_LEASE_RELEASE)
                .bind(resource.as_str())
                .bind(owner.as_uuid())
                .bind(token.get()),
        )
        .await
        .map_err(refusal)?
        .col("Released")
    }

    /// `outbox.EnqueueOps` on a pooled connection, in the procedure's own transaction.
    pub(crate) async fn enqueue_by_procedure(
        &self,
        lease: &Lease,
        ops: &[NewOp],
        stage: Stage,
    ) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
        let mut conn = self.conn().await?;
        // As in fetch_all: unusable unless the exchange completes.
        conn.broken = true;
        let result = enqueue(&mut conn.client, lease, ops, stage).await;
        conn.broken = result.is_err();
        result
    }
}

/// `outbox.EnqueueOps` on `c` (a pooled connection, or the caller's transaction): every op or
/// none, its rejections and conflicts told as the statements' flow tells them. A rejection is
/// kept by the procedure (a user holding `outbox_producer` may not insert one).
pub(crate) async fn enqueue(
    c: &mut Client,
    lease: &Lease,
    ops: &[NewOp],
    stage: Stage,
) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
    let (batch, bytes) = crate::json::batch_bytes_apart(ops, true);
    let rows = Stmt::new(PRODUCER_ENQUEUE)
        .bind(lease.resource.as_str())
        .bind(lease.owner_id.as_uuid())
        .bind(lease.token.get())
        .bind(batch)
        .bind(bytes)
        .bind(stage.name())
        .fetch_all(c)
        .await
        .map_err(refusal)?;
    outcome(&rows, ops.len())
}

/// What `outbox.EnqueueOps` answered: a row per op, accepted or a duplicate; or one row that
/// says why nothing was written.
fn outcome(
    rows: &[tiberius::Row],
    ops: usize,
) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
    let Some(first) = rows.first() else {
        return Err(error::column_err(
            "Outcome",
            "outbox.EnqueueOps returned no row",
        ));
    };
    let current = || -> Result<Option<FencingToken>, Error> {
        Ok(first
            .col::<Option<i64>>("CurrentToken")?
            .map(FencingToken::new))
    };
    let rejected = |reason| Ok(Err(NotEnqueued::Rejected(reason)));
    match first.col::<String>("Outcome")?.as_str() {
        "stale" => {
            return rejected(RejectReason::Stale {
                current: current()?.ok_or_else(|| {
                    error::column_err("CurrentToken", "is NULL for a stale rejection")
                })?,
            });
        }
        "expired" => return rejected(RejectReason::Expired),
        "no_lease" => {
            return rejected(RejectReason::NoLease {
                current: current()?,
            });
        }
        "conflict" => {
            return Ok(Err(NotEnqueued::Conflict {
                existing_op_id: first.col("OpId")?,
            }));
        }
        _ => {}
    }
    if rows.len() != ops {
        return Err(error::column_err(
            "Outcome",
            format!(
                "outbox.EnqueueOps answered {} rows for {ops} ops",
                rows.len()
            ),
        ));
    }
    rows.iter()
        .map(|r| {
            let duplicate = match r.col::<String>("Outcome")?.as_str() {
                "accepted" => false,
                "duplicate" => true,
                other => {
                    return Err(error::column_err(
                        "Outcome",
                        format!("{other:?} is not an op's outcome"),
                    ));
                }
            };
            Ok(Enqueued {
                op_id: r.col("OpId")?,
                seq: r.col("Seq")?,
                duplicate,
                state: r.col::<String>("State")?.parse()?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()
        .map(Ok)
}

/// A time to live in milliseconds as the procedures' `int`: one beyond it is refused by them
/// as too long, as it is.
fn ttl_int(ttl_ms: i64) -> i32 {
    i32::try_from(ttl_ms).unwrap_or(i32::MAX)
}

/// An input the SQL API refused (`THROW 51000`, `invalid <field>: <reason>`) as the store's
/// invalid input; anything else as it was.
fn refusal(e: Error) -> Error {
    let Error::Store(s) = &e else {
        return e;
    };
    let Some(Thrown::Invalid(message)) = std::error::Error::source(s)
        .and_then(|e| e.downcast_ref::<tiberius::error::Error>())
        .and_then(thrown_by)
    else {
        return e;
    };
    let (field, reason) = message
        .strip_prefix("invalid ")
        .and_then(|rest| rest.split_once(": "))
        .unwrap_or(("op", message.as_str()));
    InvalidInput::new(crate::calls::api_field(field), reason.to_owned()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::OpState;
    use tiberius::ColumnData;

    fn answer(
        outcome: &str,
        op: Option<Uuid>,
        seq: Option<i64>,
        state: Option<&str>,
        current: Option<i64>,
    ) -> tiberius::Row {
        stmt::tests::row(vec![
            (
                "Outcome",
                ColumnData::String(Some(outcome.to_owned().into())),
            ),
            ("OpId", ColumnData::Guid(op)),
            ("Seq", ColumnData::I64(seq)),
            (
                "State",
                ColumnData::String(state.map(|s| s.to_owned().into())),
            ),
            ("CurrentToken", ColumnData::I64(current)),
        ])
    }

    /// Issue 37: the procedure's answers are the statements' outcomes, and an answer that
    /// does not fit (a row missing, an outcome unknown, a stale rejection without the token)
    /// is an error naming the column, never a panic (G11).
    #[test]
    fn the_procedure_s_answers_are_the_statements_outcomes() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let done = outcome(
            &[
                answer("accepted", Some(a), Some(7), Some("pending"), None),
                answer("duplicate", Some(b), Some(3), Some("delivered"), None),
            ],
            2,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (done[0].op_id, done[0].seq, done[0].duplicate),
            (a, 7, false)
        );
        assert_eq!(done[0].state, OpState::Pending);
        assert_eq!(
            (done[1].op_id, done[1].seq, done[1].duplicate),
            (b, 3, true)
        );
        assert_eq!(done[1].state, OpState::Delivered);

        let not = |rows: &[tiberius::Row]| outcome(rows, 2).unwrap().unwrap_err();
        assert_eq!(
            not(&[answer("stale", None, None, None, Some(9))]),
            NotEnqueued::Rejected(RejectReason::Stale {
                current: FencingToken::new(9)
            })
        );
        assert_eq!(
            not(&[answer("expired", None, None, None, None)]),
            NotEnqueued::Rejected(RejectReason::Expired)
        );
        assert_eq!(
            not(&[answer("no_lease", None, None, None, Some(4))]),
            NotEnqueued::Rejected(RejectReason::NoLease {
                current: Some(FencingToken::new(4))
            })
        );
        assert_eq!(
            not(&[answer("conflict", Some(a), Some(7), None, None)]),
            NotEnqueued::Conflict { existing_op_id: a }
        );

        let wrong = |rows: &[tiberius::Row]| outcome(rows, 2).unwrap_err().to_string();
        assert!(wrong(&[]).contains("Outcome"));
        assert!(wrong(&[answer("stale", None, None, None, None)]).contains("CurrentToken"));
        assert!(
            wrong(&[answer("accepted", Some(a), Some(7), Some("pending"), None)])
                .contains("1 rows for 2 ops")
        );
        assert!(
            wrong(&[
                answer("accepted", Some(a), Some(7), Some("pending"), None),
                answer("sent", Some(b), Some(8), Some("pending"), None),
            ])
            .contains("\"sent\"")
        );
        assert!(
            wrong(&[
                answer("accepted", Some(a), Some(7), Some("pending"), None),
                answer("accepted", None, Some(8), Some("pending"), None),
            ])
            .contains("OpId")
        );
    }
}
