//! `outbox-store`: everything of fenced-outbox that speaks SQL, for every role (producer,
//! dispatcher, admin). [`Store`] is one enum over the backends, chosen by the URL's scheme;
//! its public API carries no backend-specific types. Each backend module holds the same
//! functions over its own `sql/<backend>/*.sql` files.
//!
//! Leases (DESIGN.md G1–G3): [`Store::lease_try_acquire`] grants a fresh owner id and the next
//! fencing token in one linearised statement; [`Store::lease_renew`] keeps the token and needs
//! the same owner, token and an unexpired lease; [`Store::lease_release`] needs the same owner
//! and token. Expiry is decided by the database clock only.

#![warn(missing_docs)]

pub mod admin;
mod calls;
pub mod dispatch;
mod driver;
mod enqueue;
pub mod error;
pub mod health;
mod json;
pub mod membership;
pub mod migrate;
pub mod model;
pub mod mssql;
pub mod op;
mod options;
pub mod partitioning;
mod postgres;
pub mod renewal;
pub mod request;
mod rows;
mod sqlite;
pub mod stats;
pub mod text;

use std::time::Duration;

pub use dispatch::{
    AttemptOutcome, ClaimRoom, Claimed, ClaimedOp, Completion, NextState, OpStats, Partition,
    Unreadable,
};
pub use error::{Backend, Error, InvalidInput, MigrateError, StoreError, StoreErrorKind};
pub use migrate::MigrationReport;
pub use model::{
    DestinationName, FencingToken, IdempotencyKey, Lease, LeaseRow, OrderKey, OwnerId,
    ResourceName, TtlBounds,
};
pub use op::{
    EnqueueResult, EnqueueStage, Enqueued, Method, NewOp, NotEnqueued, OpState, RejectReason,
    Rejection, RejectionRow,
};
pub use options::{ProducerCalls, StoreOptions};
pub use renewal::Renewal;

use mssql::MsStore;
use postgres::PgStore;
use sqlite::SqliteStore;

/// A caller's own connection or transaction, so an op commits or rolls back together with
/// the caller's business writes. On SQLite, begin it with `BEGIN IMMEDIATE`
/// (`pool.begin_with("BEGIN IMMEDIATE")`): a deferred transaction that has only read may
/// find the write lock taken and fail as retryable. On SQL Server, open the client with
/// [`mssql::connect`] (it sets the session options the outbox tables need) and run
/// `BEGIN TRANSACTION` on it.
#[derive(Debug)]
pub enum Conn<'c> {
    /// A PostgreSQL connection or transaction.
    Postgres(&'c mut sqlx::PgConnection),
    /// An SQLite connection or transaction.
    Sqlite(&'c mut sqlx::SqliteConnection),
    /// A SQL Server connection (in a transaction when it ran `BEGIN TRANSACTION`).
    Mssql(&'c mut mssql::Client),
}

impl<'c> From<&'c mut mssql::Client> for Conn<'c> {
    fn from(c: &'c mut mssql::Client) -> Self {
        Conn::Mssql(c)
    }
}

impl<'c> From<&'c mut sqlx::PgConnection> for Conn<'c> {
    fn from(c: &'c mut sqlx::PgConnection) -> Self {
        Conn::Postgres(c)
    }
}

impl<'c> From<&'c mut sqlx::SqliteConnection> for Conn<'c> {
    fn from(c: &'c mut sqlx::SqliteConnection) -> Self {
        Conn::Sqlite(c)
    }
}

impl<'c, 't> From<&'c mut sqlx::Transaction<'t, sqlx::Postgres>> for Conn<'c> {
    fn from(tx: &'c mut sqlx::Transaction<'t, sqlx::Postgres>) -> Self {
        Conn::Postgres(tx)
    }
}

impl<'c, 't> From<&'c mut sqlx::Transaction<'t, sqlx::Sqlite>> for Conn<'c> {
    fn from(tx: &'c mut sqlx::Transaction<'t, sqlx::Sqlite>) -> Self {
        Conn::Sqlite(tx)
    }
}

impl Conn<'_> {
    /// The backend of this connection.
    pub fn backend(&self) -> Backend {
        match self {
            Conn::Postgres(_) => Backend::Postgres,
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Mssql(_) => Backend::Mssql,
        }
    }
}

/// A connection pool to the outbox database, whichever backend it is.
#[derive(Debug, Clone)]
pub struct Store {
    backend: BackendStore,
    lease_ttl: TtlBounds,
}

#[derive(Debug, Clone)]
enum BackendStore {
    Postgres(PgStore),
    Sqlite(SqliteStore),
    Mssql(MsStore),
}

/// Runs the same call on whichever backend the store holds.
macro_rules! on_backend {
    ($store:expr, $b:ident => $call:expr) => {
        match &$store.backend {
            BackendStore::Postgres($b) => $call,
            BackendStore::Sqlite($b) => $call,
            BackendStore::Mssql($b) => $call,
        }
    };
}
pub(crate) use on_backend;

impl Store {
    /// Connects by URL: `postgres://…` (or `postgresql://…`), `sqlite://path` (the file is
    /// created when missing) or `mssql://…`. The URL is never echoed in errors: it may hold a
    /// password.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Store, Error> {
        let backend = match backend_of(url)? {
            Backend::Postgres => BackendStore::Postgres(PgStore::connect(url, &options).await?),
            Backend::Sqlite => BackendStore::Sqlite(SqliteStore::connect(url, &options).await?),
            Backend::Mssql => BackendStore::Mssql(MsStore::connect(url, &options).await?),
        };
        Ok(Store {
            backend,
            lease_ttl: options.lease_ttl,
        })
    }

    /// Which backend this store speaks to.
    pub fn backend(&self) -> Backend {
        match self.backend {
            BackendStore::Postgres(_) => Backend::Postgres,
            BackendStore::Sqlite(_) => Backend::Sqlite,
            BackendStore::Mssql(_) => Backend::Mssql,
        }
    }

    /// Applies the migrations this build carries that the database lacks, in one transaction.
    pub async fn migrate(&self) -> Result<MigrationReport, Error> {
        on_backend!(self, b => migrate::run(b).await)
    }

    /// Acquires the lease on `resource` for `ttl` when nobody holds it (free, released or
    /// expired by the database clock). Returns `None` when another owner holds it.
    /// Each success has a fresh owner id and a token larger than every earlier one (G1).
    pub async fn lease_try_acquire(
        &self,
        resource: &ResourceName,
        ttl: Duration,
    ) -> Result<Option<Lease>, Error> {
        let ttl_ms = self.lease_ttl.check(ttl)?;
        let owner_id = OwnerId::new_random();
        let granted = on_backend!(self, b => b.lease_acquire(resource, owner_id, ttl_ms).await)?;
        // The owner id is this call's, or on PostgreSQL through the SQL API the function's.
        Ok(granted.map(|(owner_id, token, expires_at)| Lease {
            resource: resource.clone(),
            owner_id,
            token,
            expires_at,
        }))
    }

    /// Extends `lease` to `ttl` from now (database clock) and returns it with its new expiry,
    /// or `None` when it is no longer held by this owner and token or has already expired,
    /// even if nobody else acquired it since (G3).
    pub async fn lease_renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, Error> {
        let ttl_ms = self.lease_ttl.check(ttl)?;
        let renewed = on_backend!(self, b => b
            .lease_renew(&lease.resource, lease.owner_id, lease.token, ttl_ms)
            .await)?;
        Ok(renewed.map(|expires_at| Lease {
            expires_at,
            ..lease.clone()
        }))
    }

    /// Releases `lease`; `false` when this owner and token no longer hold it (G3). The token
    /// is kept, so the next acquisition still gets a larger one.
    pub async fn lease_release(&self, lease: &Lease) -> Result<bool, Error> {
        on_backend!(self, b => b.lease_release(&lease.resource, lease.owner_id, lease.token).await)
    }

    /// Every lease row, ordered by resource, with whether it is held now (database clock).
    pub async fn lease_list(&self) -> Result<Vec<LeaseRow>, Error> {
        on_backend!(self, b => b.lease_list().await)
    }

    /// Registers or heartbeats a dispatcher process on the database clock.
    pub async fn instance_heartbeat(&self, beat: &membership::InstanceBeat) -> Result<(), Error> {
        beat.check()?;
        on_backend!(self, b => b.instance_heartbeat(beat).await)
    }

    /// Removes `instance_id`'s row (a graceful leave), and the rows of instances silent for
    /// [`membership::FORGET_GONE_AFTER`] past their ttl; returns how many rows went.
    pub async fn instance_leave(&self, instance_id: Option<uuid::Uuid>) -> Result<u64, Error> {
        on_backend!(self, b => b.instance_leave(instance_id).await)
    }

    /// Every registered dispatcher process, live or gone, by the database clock.
    pub async fn instance_list(&self) -> Result<Vec<membership::InstanceRow>, Error> {
        on_backend!(self, b => b.instance_list().await)
    }

    /// Inserts `op` if, atomically with the insert, `lease` is held by its owner and token and
    /// unexpired by the database clock (G4); returns the existing op when the (destination,
    /// idempotency key) already holds the same request, and a conflict when it holds another
    /// (G7). Nothing is written when rejected; recording the rejection is the caller's step.
    pub async fn op_enqueue(&self, lease: &Lease, op: &NewOp) -> Result<EnqueueResult, Error> {
        on_backend!(self, b => b.op_enqueue(lease, op).await)
    }

    /// Enqueues every op or none, under one lease check held for the whole transaction.
    pub async fn op_enqueue_batch(
        &self,
        lease: &Lease,
        ops: &[NewOp],
    ) -> Result<Result<Vec<Enqueued>, NotEnqueued>, Error> {
        on_backend!(self, b => b.op_enqueue_batch(lease, ops).await)
    }

    /// [`Store::op_enqueue`] inside the caller's transaction: the op commits or rolls back with
    /// it. The caller's connection must be to the same backend (and database) as this store.
    pub async fn op_enqueue_in(
        &self,
        conn: Conn<'_>,
        lease: &Lease,
        op: &NewOp,
    ) -> Result<EnqueueResult, Error> {
        match (&self.backend, conn) {
            (BackendStore::Postgres(b), Conn::Postgres(c)) => b.op_enqueue_in(c, lease, op).await,
            (BackendStore::Sqlite(_), Conn::Sqlite(c)) => {
                enqueue::on::<SqliteStore>(c, lease, op).await
            }
            (BackendStore::Mssql(b), Conn::Mssql(c)) => b.op_enqueue_in(c, lease, op).await,
            (_, conn) => Err(InvalidInput::new(
                "transaction",
                format!(
                    "is a {} transaction but the outbox is on {}",
                    conn.backend(),
                    self.backend()
                ),
            )
            .into()),
        }
    }

    /// Records a rejected enqueue for operators, in its own short transaction so it survives
    /// when the caller's transaction rolls back.
    pub async fn rejection_record(&self, rejection: &Rejection) -> Result<(), Error> {
        on_backend!(self, b => b.rejection_insert(rejection).await)
    }

    /// The newest `limit` rejections, newest first.
    pub async fn rejection_list(&self, limit: i64) -> Result<Vec<RejectionRow>, Error> {
        on_backend!(self, b => b.rejection_list(limit).await)
    }

    /// Claims up to `limit` due ops of `partition` whose destination is in `rooms`, of each
    /// destination no more than its room, while `lease` (the partition's dispatcher lease) is
    /// held and unexpired (G9): per order key only the head, never two in flight (G8). The
    /// first `limit` due ops of those destinations are chosen in due order, and of them the
    /// first ones of each destination are claimed, as many as its room (issue 34). A held destination's ops are never claimed:
    /// one an operator paused, or one of `breakers` (those with a circuit breaker; empty for a
    /// breaker's probe) whose breaker is not closed, as the database says in the same
    /// statement, so a pause holds every instance from its commit. Pending
    /// `expire_with_generation` ops whose token is no longer the newest become `superseded`
    /// first (G5). Bodies larger than `max_body_bytes` are not loaded (see
    /// [`ClaimedOp::check`]); rows that cannot be read come back as [`Claimed::unreadable`],
    /// claimed, for the caller to make dead.
    pub async fn op_claim(
        &self,
        lease: &Lease,
        partition: Partition,
        rooms: &[ClaimRoom],
        breakers: &[String],
        limit: u32,
        max_body_bytes: usize,
    ) -> Result<Claimed, Error> {
        on_backend!(self, b => b
            .op_claim(lease, partition, rooms, breakers, limit, max_body_bytes)
            .await)
    }

    /// Records attempts' ends and their ops' new states in one transaction, each only while
    /// the op is claimed by this dispatcher token and `lease` still has its owner and token
    /// (G9). One flag per completion: `false` means discarded, nothing written. An op listed
    /// twice counts once, by its first completion (a later one is `false`); each backend's
    /// statement is given every op once.
    pub async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let mut seen = std::collections::HashSet::with_capacity(completions.len());
        if completions.iter().all(|c| seen.insert(c.seq)) {
            return on_backend!(self, b => b.op_complete_batch(lease, completions).await);
        }
        seen.clear();
        let firsts: Vec<Completion> = completions
            .iter()
            .filter(|c| seen.insert(c.seq))
            .cloned()
            .collect();
        let applied = on_backend!(self, b => b.op_complete_batch(lease, &firsts).await)?;
        let mut by_seq: std::collections::HashMap<i64, bool> =
            firsts.iter().map(|c| c.seq).zip(applied).collect();
        // `remove`: only an op's first listing takes its flag.
        Ok(completions
            .iter()
            .map(|c| by_seq.remove(&c.seq).unwrap_or(false))
            .collect())
    }

    /// Re-queues ops of `partition` left in flight by older dispatcher tokens, closing their
    /// attempts as `unknown`. Returns how many.
    pub async fn op_requeue_abandoned(
        &self,
        lease: &Lease,
        partition: Partition,
    ) -> Result<u64, Error> {
        on_backend!(self, b => dispatch::requeue_abandoned(b, lease, partition).await)
    }

    /// Gives back a claim that was never attempted: pending again, due now, the attempt not
    /// counted. `false` when the claim is no longer this lease's and token's, or `lease` no
    /// longer has its owner and token (G9).
    pub async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        on_backend!(self, b => b.op_release_claim(lease, seq).await)
    }

    /// Records on a partition lease the partition count its holder serves; `false` when this
    /// owner and token no longer hold it.
    pub async fn lease_set_partitions(
        &self,
        lease: &Lease,
        partitions: u32,
    ) -> Result<bool, Error> {
        on_backend!(self, b => b.lease_set_partitions(lease, partitions).await)
    }

    /// Live partition leases whose holders serve another partition count than `partitions`,
    /// with that count: while there is one, a dispatcher configured with `partitions` must not
    /// serve (G12).
    pub async fn lease_partition_conflicts(
        &self,
        partitions: u32,
    ) -> Result<Vec<(String, u32)>, Error> {
        let names: Vec<String> = (0..op::PARTITION_SLOTS)
            .map(|i| format!("{}{i}", Partition::LEASE_PREFIX))
            .collect();
        on_backend!(self, b => b.lease_partition_conflicts(&names, partitions).await)
    }

    /// The partition count in force, if one was recorded (`partitioning`).
    pub async fn partition_count(&self) -> Result<Option<partitioning::PartitionCount>, Error> {
        on_backend!(self, b => b.partition_count().await)
    }

    /// The partition count in force, recording `partitions` as it first when there is none
    /// (a starting dispatcher's `dispatcher.partitions`; the first of two starting at once
    /// wins).
    pub async fn partition_count_adopt(
        &self,
        partitions: u32,
    ) -> Result<partitioning::PartitionCount, Error> {
        partitioning::check_count(partitions)?;
        let reason = partitioning::adopted_reason(partitions);
        on_backend!(self, b => b.partition_count_adopt(partitions, partitioning::ADOPTED_BY, &reason).await)?;
        self.partition_count().await?.ok_or_else(|| {
            InvalidInput::new(
                "partitions",
                "the partition count in force could not be read back",
            )
            .into()
        })
    }

    /// Sets the partition count in force (`outboxctl partitions set`): locked, written and
    /// logged in `outbox_admin_log` with `change`'s actor and reason in one transaction;
    /// nothing is written on a dry run or when `partitions` already is in force.
    pub async fn partition_count_set(
        &self,
        partitions: u32,
        change: &model::Change,
    ) -> Result<partitioning::PartitionCountChange, Error> {
        on_backend!(self, b => partitioning::set(b, partitions, change).await)
    }

    /// Every destination's breaker row (`health`); a destination without one is closed.
    pub async fn destination_list(&self) -> Result<Vec<model::DestinationHealth>, Error> {
        on_backend!(self, b => b.destination_list().await)
    }

    /// The holds (stretches a destination was open or paused) that ended after `since`.
    pub async fn destination_hold_list(
        &self,
        since: time::OffsetDateTime,
    ) -> Result<Vec<(String, model::Hold)>, Error> {
        on_backend!(self, b => b.destination_hold_list(since).await)
    }

    /// Deletes the holds that ended more than `older_than` ago (retention).
    pub async fn destination_hold_purge(&self, older_than: Duration) -> Result<u64, Error> {
        let ms = older_than.as_millis().min(i64::MAX as u128) as i64;
        on_backend!(self, b => b.destination_hold_purge(ms).await)
    }

    /// Records what attempts to `destination` said about it (its breaker's count, opening,
    /// closing), locked; the transition when its row changed.
    pub async fn destination_record(
        &self,
        destination: &str,
        outcomes: &health::Outcomes,
        policy: &health::BreakerPolicy,
    ) -> Result<Option<health::Transition>, Error> {
        on_backend!(self, b => health::record_outcomes(b, destination, outcomes, policy).await)
    }

    /// Takes `destination`'s probe if it is due (open and cooled down, or a lost probe); the
    /// half-open row when this caller got it, so it sends one op.
    pub async fn destination_probe_take(
        &self,
        destination: &str,
        policy: &health::BreakerPolicy,
    ) -> Result<Option<health::Transition>, Error> {
        on_backend!(self, b => health::probe_take(b, destination, policy).await)
    }

    /// Pauses (`paused`) or resumes `destination` (`outboxctl destination pause|resume`),
    /// logged in `outbox_admin_log` with `change`'s actor and reason in the same transaction;
    /// `None` when it already was so. A dry run writes nothing.
    pub async fn destination_set_paused(
        &self,
        destination: &str,
        paused: bool,
        change: &model::Change,
    ) -> Result<Option<health::Transition>, Error> {
        on_backend!(self, b => health::set_paused(b, destination, paused, change).await)
    }

    /// Keeps calling `wake` whenever an op is enqueued, until the returned task is aborted:
    /// PostgreSQL LISTENs on the channel the enqueue notifies (reconnecting after errors, and
    /// waking once after each reconnect in case something was missed). SQLite, which has no
    /// notifications, looks at its WAL index's header every few milliseconds: any other
    /// connection's commit wakes it. SQL Server, and PostgreSQL through a connection pooler in
    /// transaction mode, return `None`: poll instead. PostgreSQL whose probe could not tell
    /// yet whether a pooler is in between returns a task that LISTENs once a later probe finds
    /// the server direct, and ends if it finds a pooler: poll meanwhile.
    pub fn listen_for_enqueues(
        &self,
        wake: std::sync::Arc<tokio::sync::Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        match &self.backend {
            BackendStore::Postgres(b) => b.listen_for_enqueues(wake),
            BackendStore::Sqlite(b) => Some(b.listen_for_enqueues(wake)),
            BackendStore::Mssql(_) => None,
        }
    }

    /// Writes dispatcher `instance`'s counts of minutes that ended, and its backlog sample of
    /// the last one, for the console's charts (`stats`). A row already written (a retry of a
    /// write that committed) is left as it is. Destination names are checked first; nothing
    /// is written when one is invalid.
    pub async fn stats_write(
        &self,
        instance: uuid::Uuid,
        counts: &[stats::MinuteCounts],
        backlog: Option<&stats::BacklogSample>,
    ) -> Result<(), Error> {
        for m in counts {
            DestinationName::new(&m.destination)?;
        }
        on_backend!(self, b => b.stats_write(instance, counts, backlog).await)
    }

    /// The charts' counts and backlog from the minute `since` on, summed over the dispatchers.
    pub async fn stats_read(
        &self,
        since: time::OffsetDateTime,
    ) -> Result<stats::StatsWindow, Error> {
        on_backend!(self, b => b.stats_read(stats::minute_of(since)).await)
    }

    /// Deletes the charts' rows of the minutes before `before` (retention).
    pub async fn stats_purge(&self, before: time::OffsetDateTime) -> Result<u64, Error> {
        on_backend!(self, b => b.stats_purge(before).await)
    }

    /// Pending and in-flight counts and the oldest pending op's age, for gauges.
    pub async fn op_stats(&self) -> Result<OpStats, Error> {
        on_backend!(self, b => b.op_stats().await)
    }

    /// Says whether `partition`'s dispatcher is idle and wants enqueues to notify it
    /// (PostgreSQL); a busy dispatcher turns this off, sparing producers NOTIFY's serialised
    /// commits.
    pub async fn wakeup_set(&self, partition: Partition, listening: bool) -> Result<(), Error> {
        on_backend!(self, b => b.wakeup_set(partition, listening).await)
    }

    /// Milliseconds until the next pending op of `partition` for `destinations` is due (zero
    /// or less: now); `None` when there is none. Held destinations' ops are left out, as
    /// [`Store::op_claim`] leaves them.
    pub async fn op_next_due(
        &self,
        partition: Partition,
        destinations: &[String],
        breakers: &[String],
    ) -> Result<Option<i64>, Error> {
        on_backend!(self, b => b.op_next_due(partition, destinations, breakers).await)
    }

    /// Deletes up to `batch` delivered, cancelled or superseded ops that finished more than
    /// `older_than` ago, with their attempts. Returns how many.
    pub async fn op_purge_finished(&self, older_than: Duration, batch: u32) -> Result<u64, Error> {
        let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        on_backend!(self, b => b.op_purge_finished(ms, batch).await)
    }

    /// Clears the body and the header values (their names stay) of up to `batch` delivered,
    /// cancelled or superseded ops that finished more than `older_than` ago, and notes when
    /// (`show` says so). Only ops that finished within `within` before that cut-off are looked
    /// at (`None`: all of them). Dead ops are never erased. Returns how many were erased.
    pub async fn op_erase_finished(
        &self,
        older_than: Duration,
        within: Option<Duration>,
        batch: u32,
    ) -> Result<u64, Error> {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        on_backend!(self, b => b.op_erase_finished(ms(older_than), within.map(ms), batch).await)
    }

    /// Destinations with pending ops that are not among `destinations`, with their counts:
    /// at most `limit`, those with the most ops first.
    pub async fn op_unrouted_list(
        &self,
        destinations: &[String],
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        on_backend!(self, b => b.op_unrouted_list(destinations, limit).await)
    }

    /// Closes every pooled connection and waits for them to finish.
    pub async fn close(&self) {
        on_backend!(self, b => b.close().await)
    }
}

/// The backend a database URL names, by its scheme.
pub fn backend_of(url: &str) -> Result<Backend, InvalidInput> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("postgres" | "postgresql") => Ok(Backend::Postgres),
        Some("sqlite") => Ok(Backend::Sqlite),
        Some("mssql" | "sqlserver") => Ok(Backend::Mssql),
        _ => Err(InvalidInput::new(
            "database_url",
            "expected a URL starting with postgres://, sqlite:// or mssql://",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_the_backend_by_scheme() {
        assert_eq!(backend_of("postgres://u@h/db"), Ok(Backend::Postgres));
        assert_eq!(backend_of("postgresql://h/db"), Ok(Backend::Postgres));
        assert_eq!(backend_of("sqlite://outbox.db"), Ok(Backend::Sqlite));
        assert_eq!(backend_of("mssql://h"), Ok(Backend::Mssql));
        let err = backend_of("mysql://secret@h").unwrap_err();
        assert_eq!(err.field, "database_url");
        assert!(!err.reason.contains("secret"));
        assert!(backend_of("outbox.db").is_err());
    }
}

#[cfg(test)]
mod layout_tests;
