//! The dispatcher's statements on SQLite: claim, complete, give back, the wake-up flag,
//! counts and retention; and the rows a claim returns, read without trusting them (G9, G11).

use super::*;

const OP_CLAIM_DUE: &str = include_str!("../../sql/sqlite/op_claim_due.sql");
const OP_CLAIMED_READ: &str = include_str!("../../sql/sqlite/op_claimed_read.sql");
const OP_SUPERSEDE_STALE_GENERATION: &str =
    include_str!("../../sql/sqlite/op_supersede_stale_generation.sql");
const OP_COMPLETE_BATCH_IF_CLAIMED: &str =
    include_str!("../../sql/sqlite/op_complete_batch_if_claimed.sql");
const OP_RELEASE_CLAIM: &str = include_str!("../../sql/sqlite/op_release_claim.sql");
const OP_STATS: &str = include_str!("../../sql/sqlite/op_stats.sql");
const WAKEUP_SET: &str = include_str!("../../sql/sqlite/wakeup_set.sql");
const OP_NEXT_DUE: &str = include_str!("../../sql/sqlite/op_next_due.sql");
const OP_PURGE_FINISHED: &str = include_str!("../../sql/sqlite/op_purge_finished.sql");
const OP_ERASE_FINISHED: &str = include_str!("../../sql/sqlite/op_erase_finished.sql");
const OP_REQUEST_ERASE: &str = include_str!("../../sql/sqlite/op_request_erase.sql");
const OP_UNROUTED_LIST: &str = include_str!("../../sql/sqlite/op_unrouted_list.sql");

impl SqliteStore {
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
        let destinations = json_list(&destinations);
        let mut tx = self.begin().await?;
        // A script (finished rows, then the queue rows gone): one row per op superseded.
        let superseded = with_partition_lease(OP_SUPERSEDE_STALE_GENERATION, lease, part)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?
            .len() as u64;
        let ids = sqlx::query(OP_CLAIM_DUE)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(part.count())
            .bind(part.index())
            .bind(destinations)
            .bind(json_list(breakers))
            .bind(limit)
            .bind(json_list(&room))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)
            .and_then(|rows| ids(&rows))?;
        // SQLite's RETURNING reads only the queue: the requests are read by key, in the claim's
        // transaction.
        let rows = if ids.is_empty() {
            Vec::new()
        } else {
            sqlx::query(OP_CLAIMED_READ)
                .bind(json_list(&ids))
                .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?
        };
        // Read before commit: a claim is never committed with rows nobody has looked at.
        let decoded = rows
            .iter()
            .map(|r| claimed_op(r).map_err(|e| unreadable(r, e)))
            .collect();
        tx.commit().await.map_err(map_err)?;
        Ok(Claimed::new(decoded, superseded))
    }

    /// Records completions (no op twice: `Store::op_complete_batch` sees to it) in one script
    /// and one transaction (one commit, one fsync); each is checked on its own, so a
    /// discarded one does not hold back the others.
    pub(crate) async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let mut tx = self.begin().await?;
        // Every statement of the script runs only when its rows are all fetched.
        let applied = sqlx::query(OP_COMPLETE_BATCH_IF_CLAIMED)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(crate::json::completions(completions, rfc3339))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)
            .and_then(|rows| ids(&rows))?;
        tx.commit().await.map_err(map_err)?;
        Ok(completions
            .iter()
            .map(|c| applied.contains(&c.seq))
            .collect())
    }

    pub(crate) async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        let done = sqlx::query(OP_RELEASE_CLAIM)
            .bind(lease.resource.as_str())
            .bind(lease.owner_id.as_uuid().hyphenated())
            .bind(lease.token.get())
            .bind(seq)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn op_stats(&self) -> Result<OpStats, Error> {
        let r = sqlx::query(OP_STATS)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(OpStats {
            pending: r.col("pending")?,
            in_flight: r.col("in_flight")?,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
            rejections_last_hour: r.col("rejections_last_hour")?,
        })
    }

    pub(crate) async fn wakeup_set(&self, part: Partition, listening: bool) -> Result<(), Error> {
        sqlx::query(WAKEUP_SET)
            .bind(part.index() as i32)
            .bind(listening)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub(crate) async fn op_next_due(
        &self,
        part: Partition,
        destinations: &[String],
        breakers: &[String],
    ) -> Result<Option<i64>, Error> {
        let row = sqlx::query(OP_NEXT_DUE)
            .bind(part.count())
            .bind(part.index())
            .bind(json_list(destinations))
            .bind(json_list(breakers))
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        row.col("due_in_ms")
    }

    /// The finished rows, then their requests (and attempts), in one transaction.
    pub(crate) async fn op_purge_finished(
        &self,
        older_than_ms: i64,
        batch: u32,
    ) -> Result<u64, Error> {
        let mut tx = self.begin().await?;
        let ids = sqlx::query(OP_PURGE_FINISHED)
            .bind(older_than_ms)
            .bind(batch)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)
            .and_then(|rows| ids(&rows))?;
        request_delete(&mut tx, &ids).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(ids.len() as u64)
    }

    /// The finished rows stamped, then their requests' content cleared, in one transaction.
    pub(crate) async fn op_erase_finished(
        &self,
        older_than_ms: i64,
        within_ms: Option<i64>,
        batch: u32,
    ) -> Result<u64, Error> {
        let mut tx = self.begin().await?;
        let ids = sqlx::query(OP_ERASE_FINISHED)
            .bind(older_than_ms)
            .bind(within_ms)
            .bind(batch)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)
            .and_then(|rows| ids(&rows))?;
        if !ids.is_empty() {
            sqlx::query(OP_REQUEST_ERASE)
                .bind(json_list(&ids))
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(ids.len() as u64)
    }

    pub(crate) async fn op_unrouted_list(
        &self,
        destinations: &[String],
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        let rows = sqlx::query(OP_UNROUTED_LIST)
            .bind(json_list(destinations))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.col("destination")?, r.col("pending")?)))
            .collect()
    }
}

/// The `id` column of each row a statement returned.
fn ids(rows: &[SqliteRow]) -> Result<Vec<i64>, Error> {
    rows.iter().map(|r| r.col::<i64>("id")).collect()
}

/// An attempt's start as SQLite keeps times: RFC 3339 in UTC.
fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// A row of `op_claim_due.sql`.
fn claimed_op(r: &SqliteRow) -> Result<ClaimedOp, Error> {
    Ok(ClaimedOp {
        seq: r.col("id")?,
        op_id: r.col::<Hyphenated>("op_id")?.into_uuid(),
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Sqlite)?,
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
fn unreadable(r: &SqliteRow, e: Error) -> Unreadable {
    Unreadable {
        seq: r.col("id").unwrap_or(0),
        op_id: r
            .col::<Hyphenated>("op_id")
            .map(Hyphenated::into_uuid)
            .unwrap_or_default(),
        attempt: r.col("attempts").unwrap_or(0),
        claimed_at: r
            .col("claimed_at")
            .unwrap_or_else(|_| OffsetDateTime::now_utc()),
        reason: e.to_string(),
    }
}
