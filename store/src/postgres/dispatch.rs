//! The dispatcher's statements on PostgreSQL: claim, complete, give back, wake-ups, counts and
//! retention; and the rows a claim returns, read without trusting them (G9, G11).

use super::*;

const OP_CLAIM_DUE: &str = include_str!("../../sql/postgres/op_claim_due.sql");
const OP_SUPERSEDE_STALE_GENERATION: &str =
    include_str!("../../sql/postgres/op_supersede_stale_generation.sql");
const OP_COMPLETE_BATCH_IF_CLAIMED: &str =
    include_str!("../../sql/postgres/op_complete_batch_if_claimed.sql");
const OP_RELEASE_CLAIM: &str = include_str!("../../sql/postgres/op_release_claim.sql");
const OP_STATS: &str = include_str!("../../sql/postgres/op_stats.sql");
const WAKEUP_SET: &str = include_str!("../../sql/postgres/wakeup_set.sql");
const OP_NEXT_DUE: &str = include_str!("../../sql/postgres/op_next_due.sql");
const OP_PURGE_FINISHED: &str = include_str!("../../sql/postgres/op_purge_finished.sql");
const OP_ERASE_FINISHED: &str = include_str!("../../sql/postgres/op_erase_finished.sql");
const OP_UNROUTED_LIST: &str = include_str!("../../sql/postgres/op_unrouted_list.sql");
/// The channel `op_insert_if_lease_held.sql` notifies on commit.
const ENQUEUE_CHANNEL: &str = "outbox_ops";

impl PgStore {
    pub(crate) async fn op_claim(
        &self,
        lease: &Lease,
        part: Partition,
        rooms: &[ClaimRoom],
        breakers: &[String],
        limit: u32,
        max_body_bytes: usize,
    ) -> Result<Claimed, Error> {
        let (destinations, room) = crate::dispatch::split_rooms(rooms);
        // Two autocommit statements, never one transaction: a dispatcher paused between
        // statements must not hold row locks a standby needs to take over.
        let superseded = with_partition_lease(OP_SUPERSEDE_STALE_GENERATION, lease, part)
            .execute_on(self)
            .await?
            .rows_affected();
        let rows = query(OP_CLAIM_DUE)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(part.count() as i32)
            .bind(part.index() as i32)
            .bind(destinations)
            .bind(room)
            .bind(breakers)
            .bind(i64::from(limit))
            .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
            .all_on(self)
            .await?;
        let decoded = rows
            .iter()
            .map(|r| claimed_op(r).map_err(|e| unreadable(r, e)))
            .collect();
        Ok(Claimed::new(decoded, superseded))
    }

    /// Records completions in one statement; each is checked on its own, so a discarded one
    /// does not hold back the others.
    pub(crate) async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let errors: Vec<Option<String>> =
            completions.iter().map(Completion::stored_error).collect();
        let excerpts: Vec<Option<String>> =
            completions.iter().map(Completion::stored_excerpt).collect();
        let rows = query(OP_COMPLETE_BATCH_IF_CLAIMED)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(completions.iter().map(|c| c.seq).collect::<Vec<_>>())
            .bind(
                completions
                    .iter()
                    .map(|c| c.next.state())
                    .collect::<Vec<_>>(),
            )
            .bind(
                completions
                    .iter()
                    .map(|c| c.next.delay_ms())
                    .collect::<Vec<_>>(),
            )
            .bind(errors)
            .bind(completions.iter().map(|c| c.attempt).collect::<Vec<_>>())
            .bind(completions.iter().map(|c| c.started_at).collect::<Vec<_>>())
            .bind(
                completions
                    .iter()
                    .map(|c| c.outcome.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                completions
                    .iter()
                    .map(|c| c.http_status.map(i32::from))
                    .collect::<Vec<_>>(),
            )
            .bind(excerpts)
            .bind(
                completions
                    .iter()
                    .map(|c| c.trace_context.as_deref())
                    .collect::<Vec<_>>(),
            )
            .all_on(self)
            .await?;
        let applied = rows
            .iter()
            .map(|r| r.col("id"))
            .collect::<Result<Vec<i64>, _>>()?;
        Ok(completions
            .iter()
            .map(|c| applied.contains(&c.seq))
            .collect())
    }

    pub(crate) async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        let done = query(OP_RELEASE_CLAIM)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid())
            .bind(lease.token.get())
            .bind(seq)
            .execute_on(self)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn op_stats(&self) -> Result<OpStats, Error> {
        let r = query(OP_STATS).one_on(self).await?;
        Ok(OpStats {
            pending: r.col("pending")?,
            in_flight: r.col("in_flight")?,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
            rejections_last_hour: r.col("rejections_last_hour")?,
        })
    }

    pub(crate) async fn wakeup_set(&self, part: Partition, listening: bool) -> Result<(), Error> {
        query(WAKEUP_SET)
            .bind(part.index() as i32)
            .bind(listening)
            .execute_on(self)
            .await?;
        Ok(())
    }

    pub(crate) async fn op_next_due(
        &self,
        part: Partition,
        destinations: &[String],
        breakers: &[String],
    ) -> Result<Option<i64>, Error> {
        let row = query(OP_NEXT_DUE)
            .bind(part.count() as i32)
            .bind(part.index() as i32)
            .bind(destinations)
            .bind(breakers)
            .one_on(self)
            .await?;
        row.col("due_in_ms")
    }

    pub(crate) async fn op_purge_finished(
        &self,
        older_than_ms: i64,
        batch: u32,
    ) -> Result<u64, Error> {
        let gone = query(OP_PURGE_FINISHED)
            .bind(older_than_ms)
            .bind(i64::from(batch))
            .all_on(self)
            .await?;
        Ok(gone.len() as u64)
    }

    pub(crate) async fn op_erase_finished(
        &self,
        older_than_ms: i64,
        within_ms: Option<i64>,
        batch: u32,
    ) -> Result<u64, Error> {
        let erased = query(OP_ERASE_FINISHED)
            .bind(older_than_ms)
            .bind(within_ms)
            .bind(i64::from(batch))
            .all_on(self)
            .await?;
        Ok(erased.len() as u64)
    }

    pub(crate) async fn op_unrouted_list(
        &self,
        destinations: &[String],
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        let rows = query(OP_UNROUTED_LIST)
            .bind(destinations)
            .bind(i64::from(limit))
            .all_on(self)
            .await?;
        rows.iter()
            .map(|r| Ok((r.col("destination")?, r.col("pending")?)))
            .collect()
    }

    /// LISTENs for enqueues, on the direct LISTEN URL when there is one. Through a transaction
    /// pooler without one, `None`: a LISTEN there would hold whichever server connection it
    /// ran on and hear nothing of the next one, so the dispatcher polls. While the probe cannot
    /// tell yet (`probe.rs`), the task waits for it to, and LISTENs once it knows the server
    /// is reached directly (issue 34); until then, and for good through a pooler, the
    /// dispatcher polls.
    pub(crate) fn listen_for_enqueues(
        &self,
        wake: std::sync::Arc<tokio::sync::Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let listen = |pool: PgPool| {
            move || {
                let (pool, wake) = (pool.clone(), wake.clone());
                async move { listen_once(&pool, &wake).await }
            }
        };
        if let Some(direct) = &self.listen {
            return Some(crate::dispatch::keep_watching(
                "enqueue notifications",
                listen(direct.clone()),
            ));
        }
        match self.route.now() {
            Reached::Server => Some(crate::dispatch::keep_watching(
                "enqueue notifications",
                listen(self.pool.clone()),
            )),
            Reached::Pooler => {
                no_listen();
                None
            }
            Reached::Unknown => {
                let (route, watch) = (self.route.clone(), listen(self.pool.clone()));
                Some(tokio::spawn(async move {
                    match route.known().await {
                        Reached::Server => {
                            crate::dispatch::watch_forever("enqueue notifications", watch).await
                        }
                        Reached::Pooler => no_listen(),
                        Reached::Unknown => {}
                    }
                }))
            }
        }
    }
}

/// Says why a dispatcher polls through a transaction pooler.
fn no_listen() {
    tracing::warn!(
        "no enqueue notifications through a connection pooler in transaction mode (LISTEN \
         needs a session of its own, and database.listen_url is not set): the dispatcher looks \
         for due ops every dispatcher.poll_interval instead"
    );
}

/// A row of `op_claim_due.sql`.
fn claimed_op(r: &PgRow) -> Result<ClaimedOp, Error> {
    Ok(ClaimedOp {
        seq: r.col("id")?,
        op_id: r.col("op_id")?,
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Postgres)?,
        content_type: r.col("content_type")?,
        body: r.col("body")?,
        body_bytes: r.col("body_bytes")?,
        attempt: r.col("attempts")?,
        created_at: r.col("created_at")?,
        claimed_at: r.col("claimed_at")?,
        trace_context: r.col("trace_context")?,
        trace_state: r.col("trace_state")?,
        previous_attempt: r.col("last_attempt_trace")?,
        budget_attempt: r.col("budget_attempt")?,
        budget_since: r.col("budget_since")?,
    })
}

/// What can still be read of a claimed row that [`claimed_op`] could not read.
fn unreadable(r: &PgRow, e: Error) -> Unreadable {
    Unreadable {
        seq: r.col("id").unwrap_or(0),
        op_id: r.col("op_id").unwrap_or_default(),
        attempt: r.col("attempts").unwrap_or(0),
        claimed_at: r
            .col("claimed_at")
            .unwrap_or_else(|_| OffsetDateTime::now_utc()),
        reason: e.to_string(),
    }
}

/// One LISTEN session: wakes once on connect (anything enqueued while not listening), then on
/// every notification, until the connection fails.
async fn listen_once(pool: &PgPool, wake: &tokio::sync::Notify) -> Result<(), Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .map_err(map_err)?;
    listener.listen(ENQUEUE_CHANNEL).await.map_err(map_err)?;
    wake.notify_one();
    loop {
        // try_recv() yields None when the connection was lost (the next call reconnects and
        // listens again): waking then covers anything enqueued in the gap.
        listener.try_recv().await.map_err(map_err)?;
        wake.notify_one();
    }
}
