//! The seam between the flows and the backends: [`Driver`] is what a backend provides to the
//! flows written once above it (enqueue settle and batch assembly in `enqueue.rs`, replay,
//! cancel and purge with their admin log in `admin/change.rs`, the migration loop in
//! `migrate.rs`, the re-queue on takeover in `dispatch.rs`). Its methods are statements, one
//! per SQL file, run on a connection or transaction of the backend's own type, and the few
//! things that truly differ: how a write transaction begins. Everything else a backend does
//! (statements that run alone on the pool, claims, batch completions, wake-ups) stays in its
//! own module, called through `Store`.
//!
//! The statements speak the store's vocabulary (`model/`) and return the rows only the flows
//! read (`rows.rs`); this file names no flow module, so the flows depend on it and never the
//! other way round.

use std::ops::DerefMut;

use crate::error::{Backend, Error};
use crate::model::{
    AppliedMigration, Change, ContentRewrite, DestinationHealth, Hold, Lease, Migration, Partition,
    ResourceName, StoredContent,
};
use crate::op::NewOp;
use crate::rows::{FoundOp, LeaseSeen, Locked};

/// One backend's statements and transactions, for the flows. Implemented by each backend's
/// pool type; the flows are generic over it and monomorphised, so nothing is boxed.
pub(crate) trait Driver: Sync {
    /// Which backend this is, for errors.
    const BACKEND: Backend;
    /// A connection, in a transaction or not: what statements run on.
    type Conn: Send;
    /// A transaction on a connection of the pool.
    type Tx: Send + DerefMut<Target = Self::Conn>;

    /// Begins a transaction that will write (SQLite takes the write lock at once, so reads
    /// and writes in it see one state).
    async fn begin(&self) -> Result<Self::Tx, Error>;
    /// Begins the migration transaction, serialised against every other migrating process.
    async fn begin_migration(&self) -> Result<Self::Tx, Error>;
    /// Commits.
    async fn commit(tx: Self::Tx) -> Result<(), Error>;
    /// Rolls back.
    async fn rollback(tx: Self::Tx) -> Result<(), Error>;

    /// `migration_table_create.sql`.
    async fn migration_table_create(c: &mut Self::Conn) -> Result<(), Error>;
    /// `migration_list.sql`.
    async fn migration_list(c: &mut Self::Conn) -> Result<Vec<AppliedMigration>, Error>;
    /// Runs one migration file and `migration_record.sql`.
    async fn migration_apply(c: &mut Self::Conn, m: &Migration) -> Result<(), Error>;

    /// `op_insert_if_lease_held.sql`: the new op's row id, or `None` when nothing was
    /// inserted (the lease check failed, or the key exists).
    async fn op_insert(c: &mut Self::Conn, lease: &Lease, op: &NewOp)
    -> Result<Option<i64>, Error>;
    /// `lease_check.sql`: the lease row as this connection sees it.
    async fn lease_seen(
        c: &mut Self::Conn,
        resource: &ResourceName,
    ) -> Result<Option<LeaseSeen>, Error>;
    /// `op_find_by_key.sql`.
    async fn op_find_by_key(
        c: &mut Self::Conn,
        destination: &str,
        key: &str,
    ) -> Result<Option<FoundOp>, Error>;
    /// `op_supersede_older_pending.sql`.
    async fn op_supersede_older(c: &mut Self::Conn, lease: &Lease, op: &NewOp)
    -> Result<(), Error>;

    /// `attempt_record_abandoned.sql`.
    async fn attempt_record_abandoned(
        c: &mut Self::Conn,
        lease: &Lease,
        part: Partition,
    ) -> Result<(), Error>;
    /// `op_requeue_abandoned.sql`: how many ops went back to pending.
    async fn op_requeue_abandoned(
        c: &mut Self::Conn,
        lease: &Lease,
        part: Partition,
    ) -> Result<u64, Error>;

    /// `admin_op_lock.sql`.
    async fn admin_op_lock(c: &mut Self::Conn, seqs: &[i64]) -> Result<Vec<Locked>, Error>;
    /// `admin_op_replay.sql`.
    async fn admin_op_replay(c: &mut Self::Conn, seqs: &[i64]) -> Result<(), Error>;
    /// `admin_op_cancel.sql`, with `note` kept as the ops' last error.
    async fn admin_op_cancel(c: &mut Self::Conn, seqs: &[i64], note: &str) -> Result<(), Error>;
    /// `admin_log_insert.sql`.
    async fn admin_log_insert(
        c: &mut Self::Conn,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error>;
    /// `admin_content_page.sql`: up to `limit` requests' content after row id `after`.
    async fn admin_content_page(
        c: &mut Self::Conn,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredContent>, Error>;
    /// `admin_content_replace.sql`: whether the request still held what was read and now holds
    /// the new content.
    async fn admin_content_replace(c: &mut Self::Conn, r: &ContentRewrite) -> Result<bool, Error>;
    /// `partition_count_lock.sql`: the partition count in force, locked for the transaction.
    async fn partition_count_lock(c: &mut Self::Conn) -> Result<Option<u32>, Error>;
    /// `partition_count_write.sql`: the new partition count in force, by `change`'s actor for
    /// its reason.
    async fn partition_count_write(
        c: &mut Self::Conn,
        partitions: u32,
        change: &Change,
    ) -> Result<(), Error>;
    /// `destination_ensure.sql`: `name` gets its breaker row if it has none.
    async fn destination_ensure(c: &mut Self::Conn, name: &str) -> Result<(), Error>;
    /// `destination_lock.sql`: `name`'s breaker row, locked, and the database clock.
    async fn destination_lock(
        c: &mut Self::Conn,
        name: &str,
    ) -> Result<(DestinationHealth, time::OffsetDateTime), Error>;
    /// `destination_write.sql`: the breaker row as decided.
    async fn destination_write(c: &mut Self::Conn, health: &DestinationHealth)
    -> Result<(), Error>;
    /// `destination_hold_insert.sql`: a hold that ended.
    async fn destination_hold_insert(
        c: &mut Self::Conn,
        name: &str,
        hold: Hold,
    ) -> Result<(), Error>;
    /// `admin_purge_count.sql`: (state, ops) of what a purge would delete.
    async fn admin_purge_count(
        &self,
        states: &[&str],
        older_than_ms: i64,
    ) -> Result<Vec<(String, i64)>, Error>;
    /// `admin_purge.sql`: one batch deleted, the states of its ops.
    async fn admin_purge(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error>;
}

/// Commits when the work was accepted, rolls back otherwise.
pub(crate) async fn finish<D: Driver>(tx: D::Tx, commit: bool) -> Result<(), Error> {
    if commit {
        D::commit(tx).await
    } else {
        D::rollback(tx).await
    }
}
