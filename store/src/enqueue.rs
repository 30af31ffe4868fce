//! The enqueue decision, written once for every backend: an insert that inserted nothing is
//! told apart as a rejection (the lease check failed, G4) or an existing key (the same request
//! is a duplicate, another is a conflict, G7), and a batch is assembled all or nothing. The
//! backends run the statements ([`Driver`]) and choose how to start (a transaction, or on
//! PostgreSQL a first statement without one).

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::driver::{Driver, finish};
use crate::error::Error;
use crate::model::Lease;
use crate::op::{EnqueueResult, Enqueued, NewOp, NotEnqueued, RejectReason};
use crate::rows::{FoundOp, LeaseSeen};

/// Decides whether `lease` may enqueue, given the lease row seen atomically with the insert.
pub(crate) fn check_lease(seen: Option<LeaseSeen>, lease: &Lease) -> Result<(), RejectReason> {
    let Some(seen) = seen else {
        return Err(RejectReason::NoLease { current: None });
    };
    if seen.fence != lease.token {
        return Err(RejectReason::Stale {
            current: seen.fence,
        });
    }
    match seen.owner_id {
        None => Err(RejectReason::NoLease {
            current: Some(seen.fence),
        }),
        Some(owner) if owner != lease.owner_id => Err(RejectReason::Stale {
            current: seen.fence,
        }),
        Some(_) if !seen.live => Err(RejectReason::Expired),
        Some(_) => Ok(()),
    }
}

/// Tells a duplicate (same request: return the existing op) from a conflict (G7).
pub(crate) fn duplicate_or_conflict(
    found: Option<FoundOp>,
    op: &NewOp,
    backend: crate::Backend,
) -> Result<EnqueueResult, crate::Error> {
    let Some((seq, op_id, hash, state)) = found else {
        // The key conflicted but its op is not visible to this transaction (a snapshot taken
        // before it committed). Retrying sees it.
        return Err(crate::StoreError::new(
            backend,
            crate::StoreErrorKind::Retryable,
            "the op holding this idempotency key is not visible to this transaction yet",
        )
        .into());
    };
    if hash != op.request_hash {
        return Ok(Err(NotEnqueued::Conflict {
            existing_op_id: op_id,
        }));
    }
    Ok(Ok(Enqueued {
        op_id,
        seq,
        duplicate: true,
        state: state.parse()?,
    }))
}

/// The fenced enqueue on one connection (the caller's transaction, or the backend's): the
/// insert checks the lease itself; only when it inserted nothing are the lease and the key
/// looked at, to say why.
pub(crate) async fn on<D: Driver>(
    c: &mut D::Conn,
    lease: &Lease,
    op: &NewOp,
) -> Result<EnqueueResult, Error> {
    let inserted = D::op_insert(c, lease, op).await?;
    settle::<D>(c, lease, op, inserted).await
}

/// What an insert's answer means: inserted (superseding older pending ops when asked); or,
/// with nothing inserted, a rejection for the lease or an existing key, told apart by reading
/// the lease and the key. Only that rare path costs those reads.
pub(crate) async fn settle<D: Driver>(
    c: &mut D::Conn,
    lease: &Lease,
    op: &NewOp,
    inserted: Option<i64>,
) -> Result<EnqueueResult, Error> {
    if let Some(seq) = inserted {
        if op.supersede_pending {
            D::op_supersede_older(c, lease, op).await?;
        }
        return Ok(Ok(op.inserted(seq)));
    }
    if let Err(reason) = check_lease(D::lease_seen(c, &lease.resource).await?, lease) {
        return Ok(Err(NotEnqueued::Rejected(reason)));
    }
    existing::<D>(c, op).await
}

/// The op holding `op`'s (destination, key): the same request is a duplicate, another one a
/// conflict (G7).
async fn existing<D: Driver>(c: &mut D::Conn, op: &NewOp) -> Result<EnqueueResult, Error> {
    let found = D::op_find_by_key(c, op.destination.as_str(), op.idempotency_key.as_str()).await?;
    duplicate_or_conflict(found, op, D::BACKEND)
}

/// A batch, all or nothing, once its one insert statement ran in `tx` under a lease check
/// that passed: the ops it inserted (op id to row id) are accepted, superseding older ones
/// once per destination when asked; each other op's key exists, and one that holds another
/// request rolls the whole batch back as a conflict.
pub(crate) async fn assemble<D: Driver>(
    mut tx: D::Tx,
    lease: &Lease,
    ops: &[NewOp],
    inserted: &HashMap<Uuid, i64>,
) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
    let mut done = Vec::with_capacity(ops.len());
    let mut superseded = HashSet::new();
    for op in ops {
        let result = match inserted.get(&op.op_id) {
            Some(&seq) => {
                if op.supersede_pending && superseded.insert(op.destination.as_str()) {
                    D::op_supersede_older(&mut tx, lease, op).await?;
                }
                Ok(op.inserted(seq))
            }
            None => existing::<D>(&mut tx, op).await?,
        };
        match result {
            Ok(enqueued) => done.push(enqueued),
            Err(not_enqueued) => {
                finish::<D>(tx, false).await?;
                return Ok(Err(not_enqueued));
            }
        }
    }
    finish::<D>(tx, true).await?;
    Ok(Ok(done))
}

/// Enqueues in a transaction of the backend's: committed when accepted, rolled back otherwise.
pub(crate) async fn in_transaction<D: Driver>(
    d: &D,
    lease: &Lease,
    op: &NewOp,
) -> Result<EnqueueResult, Error> {
    let mut tx = d.begin().await?;
    let result = on::<D>(&mut tx, lease, op).await?;
    finish::<D>(tx, result.is_ok()).await?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FencingToken, OwnerId, ResourceName};
    use time::OffsetDateTime;

    fn lease(token: i64) -> Lease {
        Lease {
            resource: ResourceName::new("r").unwrap(),
            owner_id: OwnerId::new_random(),
            token: FencingToken::new(token),
            expires_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn seen(owner: Option<OwnerId>, fence: i64, live: bool) -> Option<LeaseSeen> {
        Some(LeaseSeen {
            owner_id: owner,
            fence: FencingToken::new(fence),
            live,
        })
    }

    #[test]
    fn the_lease_check_names_each_way_of_losing_a_lease() {
        let l = lease(41);
        assert_eq!(check_lease(seen(Some(l.owner_id), 41, true), &l), Ok(()));
        assert_eq!(
            check_lease(None, &l),
            Err(RejectReason::NoLease { current: None })
        );
        let newer = FencingToken::new(42);
        assert_eq!(
            check_lease(seen(Some(OwnerId::new_random()), 42, true), &l),
            Err(RejectReason::Stale { current: newer })
        );
        // Expired and then taken over: stale, with the newer token.
        assert_eq!(
            check_lease(seen(Some(OwnerId::new_random()), 42, false), &l),
            Err(RejectReason::Stale { current: newer })
        );
        assert_eq!(
            check_lease(seen(Some(l.owner_id), 41, false), &l),
            Err(RejectReason::Expired)
        );
        assert_eq!(
            check_lease(seen(None, 41, false), &l),
            Err(RejectReason::NoLease {
                current: Some(FencingToken::new(41))
            })
        );
        // Same token, another owner id: a forged or mixed-up lease is stale.
        assert!(matches!(
            check_lease(seen(Some(OwnerId::new_random()), 41, true), &l),
            Err(RejectReason::Stale { .. })
        ));
    }
}
