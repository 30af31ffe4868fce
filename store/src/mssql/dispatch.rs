//! The dispatcher's statements on SQL Server: claim (`READPAST, UPDLOCK, ROWLOCK`), complete a
//! batch (`OPENJSON`), give back, counts and retention; and the rows a claim returns, read
//! without trusting them (G9, G11). SQL Server has no LISTEN: dispatchers poll.

use super::*;

const OP_CLAIM_DUE: &str = include_str!("../../sql/mssql/op_claim_due.sql");
const OP_SUPERSEDE_STALE_GENERATION: &str =
    include_str!("../../sql/mssql/op_supersede_stale_generation.sql");
const OP_COMPLETE_BATCH_IF_CLAIMED: &str =
    include_str!("../../sql/mssql/op_complete_batch_if_claimed.sql");
const OP_RELEASE_CLAIM: &str = include_str!("../../sql/mssql/op_release_claim.sql");
const OP_STATS: &str = include_str!("../../sql/mssql/op_stats.sql");
const WAKEUP_SET: &str = include_str!("../../sql/mssql/wakeup_set.sql");
const OP_NEXT_DUE: &str = include_str!("../../sql/mssql/op_next_due.sql");
const OP_PURGE_FINISHED: &str = include_str!("../../sql/mssql/op_purge_finished.sql");
const OP_ERASE_FINISHED: &str = include_str!("../../sql/mssql/op_erase_finished.sql");
const OP_UNROUTED_LIST: &str = include_str!("../../sql/mssql/op_unrouted_list.sql");

/// The longest age a retention statement takes, about 63 years: its seconds fit DATEADD's
/// `int`, and anything older than that is older than every row.
pub(crate) const MAX_AGE_MS: i64 = 2_000_000_000_000;

impl MsStore {
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
        let superseded = self
            .affected(with_partition_lease(
                OP_SUPERSEDE_STALE_GENERATION,
                lease,
                part,
            ))
            .await?;
        let rows = self
            .fetch_all(
                with_partition_lease(OP_CLAIM_DUE, lease, part)
                    .bind(json_list(&destinations))
                    .bind(json_list(breakers))
                    .bind(i64::from(limit))
                    .bind(i64::try_from(max_body_bytes).unwrap_or(i64::MAX))
                    .bind(json_list(&room)),
            )
            .await?;
        let decoded = rows
            .iter()
            .map(|r| claimed_op(r).map_err(|e| unreadable(r, e)))
            .collect();
        Ok(Claimed::new(decoded, superseded))
    }

    /// Records completions in one batch; each is checked on its own, so a discarded one does
    /// not hold back the others.
    pub(crate) async fn op_complete_batch(
        &self,
        lease: &Lease,
        completions: &[Completion],
    ) -> Result<Vec<bool>, Error> {
        let rows = self
            .fetch_all(
                Stmt::new(OP_COMPLETE_BATCH_IF_CLAIMED)
                    .bind(lease.resource.as_str())
                    .bind(lease.owner_id.as_uuid())
                    .bind(lease.token.get())
                    .bind(crate::json::completions(completions, iso_time)),
            )
            .await?;
        let applied = rows
            .iter()
            .map(|r| r.col::<i64>("id"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(completions
            .iter()
            .map(|c| applied.contains(&c.seq))
            .collect())
    }

    pub(crate) async fn op_release_claim(&self, lease: &Lease, seq: i64) -> Result<bool, Error> {
        let done = self
            .affected(
                Stmt::new(OP_RELEASE_CLAIM)
                    .bind(lease.resource.as_str())
                    .bind(lease.owner_id.as_uuid())
                    .bind(lease.token.get())
                    .bind(seq),
            )
            .await?;
        Ok(done == 1)
    }

    pub(crate) async fn op_stats(&self) -> Result<OpStats, Error> {
        let r = self.fetch_one(Stmt::new(OP_STATS)).await?;
        Ok(OpStats {
            pending: r.col("pending")?,
            in_flight: r.col("in_flight")?,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
            rejections_last_hour: r.col("rejections_last_hour")?,
        })
    }

    pub(crate) async fn wakeup_set(&self, part: Partition, listening: bool) -> Result<(), Error> {
        self.execute(
            Stmt::new(WAKEUP_SET)
                .bind(part.index() as i32)
                .bind(listening),
        )
        .await
    }

    pub(crate) async fn op_next_due(
        &self,
        part: Partition,
        destinations: &[String],
        breakers: &[String],
    ) -> Result<Option<i64>, Error> {
        let row = self
            .fetch_optional(
                Stmt::new(OP_NEXT_DUE)
                    .bind(part.count() as i32)
                    .bind(part.index() as i32)
                    .bind(json_list(destinations))
                    .bind(json_list(breakers)),
            )
            .await?;
        match row {
            Some(r) => r.col("due_in_ms"),
            None => Ok(None),
        }
    }

    pub(crate) async fn op_purge_finished(
        &self,
        older_than_ms: i64,
        batch: u32,
    ) -> Result<u64, Error> {
        self.affected(
            Stmt::new(OP_PURGE_FINISHED)
                .bind(older_than_ms.clamp(0, MAX_AGE_MS))
                .bind(i64::from(batch)),
        )
        .await
    }

    pub(crate) async fn op_erase_finished(
        &self,
        older_than_ms: i64,
        within_ms: Option<i64>,
        batch: u32,
    ) -> Result<u64, Error> {
        self.affected(
            Stmt::new(OP_ERASE_FINISHED)
                .bind(older_than_ms.clamp(0, MAX_AGE_MS))
                .bind(within_ms.map(|w| w.clamp(0, MAX_AGE_MS)))
                .bind(i64::from(batch)),
        )
        .await
    }

    pub(crate) async fn op_unrouted_list(
        &self,
        destinations: &[String],
        limit: u32,
    ) -> Result<Vec<(String, i64)>, Error> {
        let rows = self
            .fetch_all(
                Stmt::new(OP_UNROUTED_LIST)
                    .bind(json_list(destinations))
                    .bind(i64::from(limit)),
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.col("destination")?, r.col("pending")?)))
            .collect()
    }
}

/// `2026-12-01T12:00:00.1234560+00:00`, in UTC.
pub(super) fn iso_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}+00:00",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond() / 100
    )
}

/// A row of `op_claim_due.sql`.
fn claimed_op(r: &tiberius::Row) -> Result<ClaimedOp, Error> {
    Ok(ClaimedOp {
        seq: r.col("id")?,
        op_id: r.col("op_id")?,
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Mssql)?,
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
fn unreadable(r: &tiberius::Row, e: Error) -> Unreadable {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mssql::stmt::tests::row;
    use std::borrow::Cow;
    use tiberius::ColumnData;

    #[test]
    fn completion_times_have_at_most_seven_fractional_digits() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_795_000_000_123_456_789).unwrap();
        assert_eq!(iso_time(t), "2026-11-18T11:06:40.1234567+00:00");
    }

    #[test]
    fn a_claimed_row_that_cannot_be_read_is_reported_not_trusted() {
        let id = Uuid::now_v7();
        let r = row(vec![
            ("id", ColumnData::I64(Some(9))),
            ("op_id", ColumnData::Guid(Some(id))),
            ("attempts", ColumnData::I32(Some(3))),
            // A hand-written row whose headers are not the JSON the producer writes.
            (
                "headers",
                ColumnData::String(Some(Cow::Borrowed("{not json"))),
            ),
        ]);
        let e = claimed_op(&r).unwrap_err();
        let u = unreadable(&r, e);
        assert_eq!((u.seq, u.op_id, u.attempt), (9, id, 3));
        assert!(!u.reason.is_empty());
    }
}
