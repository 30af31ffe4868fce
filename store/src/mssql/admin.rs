//! The SQL Server side of `outboxctl` (see `admin/`): one function per `sql/mssql/admin_*`
//! file, and the rows they return read strictly (a `bigint` is an `i64`, an `int` an `i32`,
//! public ids are `uniqueidentifier`s shown as lowercase hyphenated text, as PostgreSQL's
//! `uuid::text`). The flows of replay, cancel and purge that run them are `admin/change.rs`:
//! lock, replay or cancel and log in one transaction per batch ([`Tx`], reached through
//! `driver.rs`), the lock taken `WITH (UPDLOCK, ROWLOCK, HOLDLOCK)`.
//!
//! SQL Server has no query builder here: `list` is one static statement whose filters are
//! parameters, NULL when not set, compiled for each call's values (`OPTION (RECOMPILE)`).
//! Ages are clamped to [`MAX_AGE_MS`] before they reach `DATEADD`.

use tiberius::{ColumnData, ToSql as _};

use super::dispatch::MAX_AGE_MS;
use super::*;
use crate::admin::{AttemptRow, OpContent, OpDetail, OpFilter, OpSummary, StateCount, Status};
use crate::dispatch::{ERROR_MAX_CHARS, parse_header_names};
use crate::model::{DESTINATION_MAX_LEN, KEY_MAX_LEN};

const ADMIN_STATUS_COUNTS: &str = include_str!("../../sql/mssql/admin_status_counts.sql");
const ADMIN_STATUS_SUMMARY: &str = include_str!("../../sql/mssql/admin_status_summary.sql");
const ADMIN_OP_LIST: &str = include_str!("../../sql/mssql/admin_op_list.sql");
const ADMIN_DESTINATION_LIST: &str = include_str!("../../sql/mssql/admin_destination_list.sql");
const ADMIN_OP_SHOW: &str = include_str!("../../sql/mssql/admin_op_show.sql");
const ADMIN_OP_CONTENT: &str = include_str!("../../sql/mssql/admin_op_content.sql");
const ADMIN_OP_FIND: &str = include_str!("../../sql/mssql/admin_op_find.sql");
const ADMIN_OP_FIND_BY_KEY: &str = include_str!("../../sql/mssql/admin_op_find_by_key.sql");
const ADMIN_ATTEMPT_LIST: &str = include_str!("../../sql/mssql/admin_attempt_list.sql");
const ADMIN_ATTEMPT_TAIL: &str = include_str!("../../sql/mssql/admin_attempt_tail.sql");
const ADMIN_ATTEMPT_LAST_ID: &str = include_str!("../../sql/mssql/admin_attempt_last_id.sql");
const ADMIN_OP_LOCK: &str = include_str!("../../sql/mssql/admin_op_lock.sql");
const ADMIN_OP_REPLAY: &str = include_str!("../../sql/mssql/admin_op_replay.sql");
const ADMIN_OP_CANCEL: &str = include_str!("../../sql/mssql/admin_op_cancel.sql");
const ADMIN_LOG_INSERT: &str = include_str!("../../sql/mssql/admin_log_insert.sql");
const ADMIN_PURGE_COUNT: &str = include_str!("../../sql/mssql/admin_purge_count.sql");
const ADMIN_PURGE: &str = include_str!("../../sql/mssql/admin_purge.sql");
const ADMIN_REJECTION_LIST: &str = include_str!("../../sql/mssql/admin_rejection_list.sql");

impl MsStore {
    /// Everything `status` reports but the partition leases (the caller adds them).
    pub(crate) async fn admin_status(&self) -> Result<Status, Error> {
        let counts = self
            .fetch_all(Stmt::new(ADMIN_STATUS_COUNTS))
            .await?
            .iter()
            .map(|r| {
                Ok(StateCount {
                    state: r.col("state")?,
                    destination: r.col("destination")?,
                    ops: r.col("ops")?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let r = self.fetch_one(Stmt::new(ADMIN_STATUS_SUMMARY)).await?;
        Ok(Status {
            counts,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
            due_now: r.col("due_now")?,
            dead_last_day: r.col("dead_last_day")?,
            rejections_last_hour: r.col("rejections_last_hour")?,
            partitions: Vec::new(),
            instances: Vec::new(),
            partition_count: None,
        })
    }

    pub(crate) async fn admin_op_list(&self, filter: &OpFilter) -> Result<Vec<OpSummary>, Error> {
        if !casts_exactly(filter.destination.as_deref(), DESTINATION_MAX_LEN)
            || !casts_exactly(filter.idempotency_key.as_deref(), KEY_MAX_LEN)
        {
            // The varchar column cannot hold it: no op has it (and the cast would change it).
            return Ok(Vec::new());
        }
        let destinations = if filter.idempotency_key.is_some() && filter.destination.is_none() {
            let names = self
                .fetch_all(Stmt::new(ADMIN_DESTINATION_LIST))
                .await?
                .iter()
                .map(|r| r.col::<String>("destination"))
                .collect::<Result<Vec<_>, Error>>()?;
            Some(json_list(&names))
        } else {
            None
        };
        self.fetch_all(list_stmt(filter, destinations))
            .await?
            .iter()
            .map(op_summary)
            .collect()
    }

    pub(crate) async fn admin_op_find(&self, op_id: Uuid) -> Result<Option<i64>, Error> {
        self.fetch_optional(Stmt::new(ADMIN_OP_FIND).bind(op_id))
            .await?
            .map(|r| r.col("id"))
            .transpose()
    }

    pub(crate) async fn admin_op_find_by_key(
        &self,
        destination: &str,
        key: &str,
    ) -> Result<Option<i64>, Error> {
        // op_find_by_key.sql compares with `=`, which ignores trailing spaces: a name that
        // ends in one, or that the varchar columns cannot hold, names no stored op.
        if [destination, key].iter().any(|s| s.ends_with(' '))
            || !casts_exactly(Some(destination), DESTINATION_MAX_LEN)
            || !casts_exactly(Some(key), KEY_MAX_LEN)
        {
            return Ok(None);
        }
        self.fetch_optional(Stmt::new(ADMIN_OP_FIND_BY_KEY).bind(destination).bind(key))
            .await?
            .map(|r| r.col("id"))
            .transpose()
    }

    pub(crate) async fn admin_op_show(&self, seq: i64) -> Result<Option<OpDetail>, Error> {
        let Some(r) = self
            .fetch_optional(Stmt::new(ADMIN_OP_SHOW).bind(seq))
            .await?
        else {
            return Ok(None);
        };
        let mut detail = op_detail(&r)?;
        detail.attempt_history = self
            .fetch_all(Stmt::new(ADMIN_ATTEMPT_LIST).bind(seq))
            .await?
            .iter()
            .map(attempt_row)
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Some(detail))
    }

    pub(crate) async fn admin_op_content(&self, seq: i64) -> Result<Option<OpContent>, Error> {
        let Some(r) = self
            .fetch_optional(Stmt::new(ADMIN_OP_CONTENT).bind(seq))
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(OpContent {
            headers: parse_headers(&r.col::<String>("headers")?, Backend::Mssql)?,
            body: r.col("body")?,
        }))
    }

    pub(crate) async fn admin_attempt_last_id(&self) -> Result<i64, Error> {
        self.fetch_one(Stmt::new(ADMIN_ATTEMPT_LAST_ID))
            .await?
            .col("id")
    }

    pub(crate) async fn admin_attempts_after(
        &self,
        last_id: i64,
        limit: u32,
    ) -> Result<Vec<AttemptRow>, Error> {
        self.fetch_all(
            Stmt::new(ADMIN_ATTEMPT_TAIL)
                .bind(last_id)
                .bind(i64::from(limit)),
        )
        .await?
        .iter()
        .map(attempt_row)
        .collect()
    }

    pub(crate) async fn admin_rejections(
        &self,
        since_ms: i64,
        resource: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RejectionRow>, Error> {
        self.fetch_all(
            Stmt::new(ADMIN_REJECTION_LIST)
                .bind(since_ms.clamp(0, MAX_AGE_MS))
                .bind(resource)
                .bind(i64::from(limit)),
        )
        .await?
        .iter()
        .map(rejection_row)
        .collect()
    }
}

/// `admin_op_lock.sql`, inside the change's transaction.
pub(super) async fn op_lock(c: &mut Client, seqs: &[i64]) -> Result<Vec<Locked>, Error> {
    Stmt::new(ADMIN_OP_LOCK)
        .bind(json_list(seqs))
        .fetch_all(c)
        .await?
        .iter()
        .map(locked_op)
        .collect()
}

/// `admin_op_replay.sql`.
pub(super) async fn op_replay(c: &mut Client, seqs: &[i64]) -> Result<(), Error> {
    Stmt::new(ADMIN_OP_REPLAY)
        .bind(json_list(seqs))
        .execute(c)
        .await
}

/// `admin_op_cancel.sql`; the note is cut as every stored error is, so it fits `last_error`.
pub(super) async fn op_cancel(c: &mut Client, seqs: &[i64], note: &str) -> Result<(), Error> {
    Stmt::new(ADMIN_OP_CANCEL)
        .bind(json_list(seqs))
        .bind(crate::text::storable(note, ERROR_MAX_CHARS))
        .execute(c)
        .await
}

/// `admin_log_insert.sql`.
pub(super) async fn log_insert(
    c: &mut Client,
    change: &Change,
    action: &str,
    details: &str,
) -> Result<(), Error> {
    Stmt::new(ADMIN_LOG_INSERT)
        .bind(change.actor.as_str())
        .bind(action)
        .bind(change.reason.as_str())
        .bind(details)
        .execute(c)
        .await
}

/// `admin_purge_count.sql`.
pub(super) async fn purge_count(
    store: &MsStore,
    states: &[&str],
    older_than_ms: i64,
) -> Result<Vec<(String, i64)>, Error> {
    store
        .fetch_all(
            Stmt::new(ADMIN_PURGE_COUNT)
                .bind(json_list(states))
                .bind(older_than_ms.clamp(0, MAX_AGE_MS)),
        )
        .await?
        .iter()
        .map(|r| Ok((r.col("state")?, r.col("ops")?)))
        .collect()
}

/// `admin_purge.sql`: one batch, one autocommit statement.
pub(super) async fn purge(
    store: &MsStore,
    states: &[&str],
    older_than_ms: i64,
    batch: usize,
) -> Result<Vec<String>, Error> {
    store
        .fetch_all(
            Stmt::new(ADMIN_PURGE)
                .bind(json_list(states))
                .bind(older_than_ms.clamp(0, MAX_AGE_MS))
                .bind(i64::try_from(batch).unwrap_or(i64::MAX)),
        )
        .await?
        .iter()
        .map(|r| r.col("state"))
        .collect()
}

/// Whether a filter value survives `CAST(@Pn AS varchar(width))` unchanged: ASCII (every
/// code page holds it) and no longer than the column. `None` (no filter) always does.
fn casts_exactly(value: Option<&str>, width: usize) -> bool {
    value.is_none_or(|v| v.is_ascii() && v.len() <= width)
}

/// `admin_op_list.sql` bound to `filter` (`destinations`: the JSON list of destinations in
/// use, for a key looked up without a destination), in its `@P1…@P11` order.
fn list_stmt(filter: &OpFilter, destinations: Option<String>) -> Stmt<'_> {
    let states = (!filter.states.is_empty()).then(|| {
        let names: Vec<&str> = filter.states.iter().map(|s| s.as_str()).collect();
        json_list(&names)
    });
    Stmt::new(ADMIN_OP_LIST)
        .bind(states)
        .bind(filter.only_attention_states())
        .bind(filter.destination.as_deref())
        .bind(filter.resource.as_deref())
        .bind(filter.idempotency_key.as_deref())
        .bind(destinations)
        .bind(time_param(&filter.created_since))
        .bind(time_param(&filter.created_before))
        .bind(filter.before_seq)
        .bind(i64::from(filter.limit))
        .bind(filter.only_unfinished_states())
}

/// A time parameter as `datetimeoffset` (NULL when unset).
fn time_param(t: &Option<OffsetDateTime>) -> ColumnData<'_> {
    t.to_sql()
}

/// A public id as PostgreSQL's `uuid::text` shows it: lowercase, hyphenated.
fn uuid_text(r: &tiberius::Row, name: &str) -> Result<String, Error> {
    Ok(r.col::<Uuid>(name)?.hyphenated().to_string())
}

/// An [`OpSummary`] from a row of `admin_op_list.sql` or `admin_op_show.sql`.
fn op_summary(r: &tiberius::Row) -> Result<OpSummary, Error> {
    Ok(OpSummary {
        seq: r.col("id")?,
        op_id: uuid_text(r, "op_id")?,
        resource: r.col("resource")?,
        token: FencingToken::new(r.col("fence")?),
        destination: r.col("destination")?,
        idempotency_key: r.col("idempotency_key")?,
        state: r.col("state")?,
        attempts: r.col("attempts")?,
        next_attempt_at: r.col("next_attempt_at")?,
        created_at: r.col("created_at")?,
        finished_at: r.col("finished_at")?,
        last_error: r.col("last_error")?,
        body_bytes: r.col("body_bytes")?,
    })
}

/// An [`OpDetail`] from a row of `admin_op_show.sql`, its header names taken from the headers
/// (their values dropped here), without its attempts.
fn op_detail(r: &tiberius::Row) -> Result<OpDetail, Error> {
    Ok(OpDetail {
        summary: op_summary(r)?,
        owner_id: uuid_text(r, "owner_id")?,
        order_key: r.col("order_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        header_names: parse_header_names(&r.col::<String>("header_names")?, Backend::Mssql)?,
        content_type: r.col("content_type")?,
        claimed_by_token: r
            .col::<Option<i64>>("claimed_by_fence")?
            .map(FencingToken::new),
        delivered_at: r.col("delivered_at")?,
        erased_at: r.col("erased_at")?,
        trace_context: r.col("trace_context")?,
        trace_state: r.col("trace_state")?,
        retry_base_attempts: r.col("retry_base_attempts")?,
        retry_since: r.col("retry_since")?,
        resource_token: r
            .col::<Option<i64>>("resource_fence")?
            .map(FencingToken::new),
        attempt_history: Vec::new(),
    })
}

/// An [`AttemptRow`] from a row of `admin_attempt_list.sql` or `admin_attempt_tail.sql`.
fn attempt_row(r: &tiberius::Row) -> Result<AttemptRow, Error> {
    Ok(AttemptRow {
        id: r.col("id")?,
        seq: r.col("seq")?,
        op_id: uuid_text(r, "op_id")?,
        destination: r.col("destination")?,
        resource: r.col("resource")?,
        attempt: r.col("attempt")?,
        dispatcher_token: FencingToken::new(r.col("dispatcher_fence")?),
        started_at: r.col("started_at")?,
        duration_ms: r.col("duration_ms")?,
        outcome: r.col("outcome")?,
        http_status: r.col("http_status")?,
        error: r.col("error")?,
        response_excerpt: r.col("response_excerpt")?,
        trace_context: r.col("trace_context")?,
    })
}

/// A [`Locked`] op from a row of `admin_op_lock.sql`.
fn locked_op(r: &tiberius::Row) -> Result<Locked, Error> {
    Ok(Locked {
        seq: r.col("id")?,
        op_id: uuid_text(r, "op_id")?,
        state: r.col("state")?,
        token: r.col("fence")?,
        resource_token: r.col("resource_fence")?,
        erased_at: r.col("erased_at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mssql::stmt::tests::{params_used, row};
    use crate::op::OpState;
    use std::borrow::Cow;

    fn every_filter() -> OpFilter {
        OpFilter {
            states: vec![OpState::Dead, OpState::Cancelled],
            destination: Some("billing".into()),
            resource: Some("account-7".into()),
            idempotency_key: Some("k-1".into()),
            created_since: Some(OffsetDateTime::UNIX_EPOCH),
            created_before: Some(OffsetDateTime::UNIX_EPOCH + time::Duration::days(1)),
            before_seq: Some(99),
            limit: 50,
        }
    }

    #[test]
    fn the_list_binds_every_filter_in_its_parameter_order() {
        let f = every_filter();
        let stmt = list_stmt(&f, Some(json_list(&["billing", "crm"])));
        assert_eq!(stmt.params.len(), params_used(ADMIN_OP_LIST).len());
        assert!(
            matches!(&stmt.params[0], ColumnData::String(Some(s)) if s == r#"["dead","cancelled"]"#)
        );
        assert!(matches!(stmt.params[1], ColumnData::Bit(Some(true))));
        assert!(matches!(&stmt.params[2], ColumnData::String(Some(s)) if s == "billing"));
        assert!(matches!(&stmt.params[3], ColumnData::String(Some(s)) if s == "account-7"));
        assert!(matches!(&stmt.params[4], ColumnData::String(Some(s)) if s == "k-1"));
        assert!(
            matches!(&stmt.params[5], ColumnData::String(Some(s)) if s == r#"["billing","crm"]"#)
        );
        assert!(matches!(
            stmt.params[6],
            ColumnData::DateTimeOffset(Some(_))
        ));
        assert!(matches!(
            stmt.params[7],
            ColumnData::DateTimeOffset(Some(_))
        ));
        assert!(matches!(stmt.params[8], ColumnData::I64(Some(99))));
        assert!(matches!(stmt.params[9], ColumnData::I64(Some(50))));
    }

    #[test]
    fn unset_filters_are_bound_as_typed_nulls() {
        let f = OpFilter {
            limit: 10,
            ..OpFilter::default()
        };
        let stmt = list_stmt(&f, None);
        assert_eq!(stmt.params.len(), params_used(ADMIN_OP_LIST).len());
        assert!(matches!(stmt.params[0], ColumnData::String(None)));
        assert!(matches!(stmt.params[1], ColumnData::Bit(Some(false))));
        for i in 2..=5 {
            assert!(
                matches!(stmt.params[i], ColumnData::String(None)),
                "@P{}",
                i + 1
            );
        }
        assert!(matches!(stmt.params[6], ColumnData::DateTimeOffset(None)));
        assert!(matches!(stmt.params[7], ColumnData::DateTimeOffset(None)));
        assert!(matches!(stmt.params[8], ColumnData::I64(None)));
    }

    #[test]
    fn only_values_the_varchar_columns_can_hold_are_looked_up() {
        assert!(casts_exactly(None, DESTINATION_MAX_LEN));
        assert!(casts_exactly(Some("billing"), DESTINATION_MAX_LEN));
        assert!(!casts_exactly(Some(&"d".repeat(65)), DESTINATION_MAX_LEN));
        assert!(!casts_exactly(Some("kā"), KEY_MAX_LEN));
    }

    /// A time as the server sends a `datetimeoffset` column.
    fn dto(t: OffsetDateTime) -> ColumnData<'static> {
        match t.to_sql() {
            ColumnData::DateTimeOffset(v) => ColumnData::DateTimeOffset(v),
            other => panic!("{other:?}"),
        }
    }

    /// A row of `admin_op_list.sql`, its body size as `body_bytes` sends it.
    fn summary_row(id: Uuid, body_bytes: ColumnData<'static>) -> tiberius::Row {
        let s = |v: &'static str| ColumnData::String(Some(Cow::Borrowed(v)));
        row(vec![
            ("id", ColumnData::I64(Some(1))),
            ("op_id", ColumnData::Guid(Some(id))),
            ("resource", s("account-7")),
            ("fence", ColumnData::I64(Some(3))),
            ("destination", s("billing")),
            ("idempotency_key", s("k-1")),
            ("state", s("dead")),
            ("attempts", ColumnData::I32(Some(5))),
            ("next_attempt_at", dto(OffsetDateTime::UNIX_EPOCH)),
            ("created_at", dto(OffsetDateTime::UNIX_EPOCH)),
            ("finished_at", ColumnData::DateTimeOffset(None)),
            ("last_error", s("HTTP 503")),
            ("body_bytes", body_bytes),
        ])
    }

    #[test]
    fn an_op_summary_reads_its_row_and_shows_the_id_as_postgres_does() {
        let id = Uuid::parse_str("0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B").unwrap();
        let op = op_summary(&summary_row(id, ColumnData::I64(Some(2)))).unwrap();
        assert_eq!(op.seq, 1);
        assert_eq!(op.op_id, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
        assert_eq!(op.token, FencingToken::new(3));
        assert_eq!(op.attempts, 5);
        assert_eq!(op.created_at, OffsetDateTime::UNIX_EPOCH);
        assert_eq!(op.finished_at, None);
        assert_eq!(op.last_error.as_deref(), Some("HTTP 503"));
        assert_eq!(op.body_bytes, 2);

        // Strict: a body size that came back as int (a missing CAST) is an error naming it.
        let e = op_summary(&summary_row(id, ColumnData::I32(Some(2)))).unwrap_err();
        assert!(e.to_string().contains("column body_bytes"), "{e}");
    }
}
