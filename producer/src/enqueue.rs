//! The fenced enqueue: `enqueue`, `enqueue_batch`, and `enqueue_in` inside the caller's own
//! transaction.
//!
//! Invariant (G4): an op is inserted iff, atomically with the insert, its resource's lease has
//! this owner id and token and is unexpired by the database clock. A stale or expired owner
//! gets a typed error, nothing is inserted, and a rejection record (never the body or header
//! values) is written in its own short transaction and logged once at `warn`. A paused owner
//! that resumes is rejected at this point: its op is never sent (G5). A crash before commit
//! leaves nothing; after commit the op is durable and the dispatcher will deliver it (G6).

use outbox_store::{
    Backend, Conn, EnqueueResult, EnqueueStage as Stage, Enqueued, Lease, NewOp, NotEnqueued,
    RejectReason, Rejection, Store,
};

use crate::lease::refuse_dispatcher_lease;
use crate::{Error, Operation, Outbox};

impl Outbox {
    /// Records `op` for delivery, fenced by `lease` (G4). The same (destination, idempotency
    /// key) with the same request returns the existing op with `duplicate = true`; with a
    /// different request it fails with [`Error::IdempotencyConflict`] (G7).
    pub async fn enqueue(&self, lease: &Lease, op: &Operation) -> Result<Enqueued, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        let new = self.new_op(lease, op)?;
        let result = self.store().op_enqueue(lease, &new).await?;
        self.settle(lease, std::slice::from_ref(&new), result, Stage::Enqueue)
            .await
    }

    /// Records every op of `ops` or none of them, under one lease check.
    pub async fn enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[Operation],
    ) -> Result<Vec<Enqueued>, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        let new = ops
            .iter()
            .map(|op| self.new_op(lease, op))
            .collect::<Result<Vec<_>, _>>()?;
        match self.store().op_enqueue_batch(lease, &new).await? {
            Ok(done) => Ok(done),
            Err(not) => Err(self.reject(lease, &new, not, Stage::Batch).await),
        }
    }

    /// [`Outbox::enqueue`] inside the caller's own sqlx transaction (or connection) on the same
    /// database, so a business write and its op commit or roll back together. The rejection
    /// record of a rejected enqueue is written outside that transaction and survives its
    /// rollback; on SQLite, where the caller's transaction holds the only write lock, it is
    /// written in the background once that transaction ends.
    ///
    /// On SQLite begin the transaction with `pool.begin_with("BEGIN IMMEDIATE")`. On
    /// PostgreSQL with a login holding the role `outbox_producer` alone, the enqueue runs in a
    /// savepoint of that transaction, so a refused one leaves it usable all the same.
    pub async fn enqueue_in<'c>(
        &self,
        conn: impl Into<Conn<'c>>,
        lease: &Lease,
        op: &Operation,
    ) -> Result<Enqueued, Error> {
        refuse_dispatcher_lease(&lease.resource)?;
        let new = self.new_op(lease, op)?;
        let result = self.store().op_enqueue_in(conn.into(), lease, &new).await?;
        self.settle(
            lease,
            std::slice::from_ref(&new),
            result,
            Stage::InCallerTransaction,
        )
        .await
    }

    /// The row of `op` under `lease`: within this outbox's body limit, sealed when it holds
    /// keys.
    fn new_op(&self, lease: &Lease, op: &Operation) -> Result<NewOp, Error> {
        Ok(op.to_new_op(lease, self.max_body_bytes(), self.keys())?)
    }

    async fn settle(
        &self,
        lease: &Lease,
        ops: &[NewOp],
        result: EnqueueResult,
        stage: Stage,
    ) -> Result<Enqueued, Error> {
        match result {
            Ok(enqueued) => Ok(enqueued),
            Err(not) => Err(self.reject(lease, ops, not, stage).await),
        }
    }

    /// Turns an enqueue that inserted nothing into the caller's error, recording a rejection
    /// first when the lease check failed (G4).
    async fn reject(&self, lease: &Lease, ops: &[NewOp], not: NotEnqueued, stage: Stage) -> Error {
        let reason = match not {
            NotEnqueued::Conflict { existing_op_id } => {
                return Error::IdempotencyConflict { existing_op_id };
            }
            NotEnqueued::Rejected(reason) => reason,
        };
        // The first op names the call; a batch shares one lease and one rejection.
        let first = ops.first();
        let rejection = Rejection {
            resource: lease.resource.clone(),
            owner_id: lease.owner_id,
            token: lease.token,
            current_token: reason.current_token(),
            destination: first.map(|op| op.destination.clone()),
            idempotency_key: first.map(|op| op.idempotency_key.clone()),
            stage: stage.name(),
            reason: reason.as_str(),
        };
        tracing::warn!(
            resource = %rejection.resource,
            owner_id = %rejection.owner_id,
            token = %rejection.token,
            current_token = ?rejection.current_token.map(|t| t.get()),
            destination = ?rejection.destination.as_ref().map(|d| d.as_str()),
            idempotency_key = ?rejection.idempotency_key.as_ref().map(|k| k.as_str()),
            stage = rejection.stage,
            reason = rejection.reason,
            "enqueue rejected: the lease is not held by this owner and token"
        );
        let store = self.store().clone();
        if stage == Stage::InCallerTransaction && store.backend() == Backend::Sqlite {
            // The caller's transaction holds SQLite's write lock until it ends.
            tokio::spawn(async move { record(&store, &rejection).await });
        } else {
            record(&store, &rejection).await;
        }
        match reason {
            RejectReason::Stale { current } => Error::Stale {
                current_token: current,
            },
            RejectReason::Expired => Error::LeaseExpired,
            RejectReason::NoLease { .. } => Error::NoLease,
        }
    }
}

/// Writes a rejection record; a failure is logged, never raised over the rejection itself.
async fn record(store: &Store, rejection: &Rejection) {
    if let Err(e) = store.rejection_record(rejection).await {
        tracing::error!(error = %e, resource = %rejection.resource, "could not record a rejected enqueue");
    }
}
