//! The SQL Server side of `outboxctl` (see `admin/`): one function per `sql/mssql/admin_*`
//! file, and the rows they return read strictly (a `bigint` is an `i64`, an `int` an `i32`,
//! op and owner ids `uniqueidentifier`s shown as lowercase hyphenated text, as PostgreSQL's
//! `::text` shows them). The flows of replay, cancel and purge that run these statements are
//! `admin/change.rs`: replay and cancel in one transaction per batch, the ops locked first
//! `WITH (UPDLOCK, ROWLOCK, HOLDLOCK)`. `list` is one static statement with a parameter per
//! filter (NULL when not set), recompiled for each call's values: this backend has no query
//! builder.

use tiberius::ToSql as _;

use super::*;
use crate::admin::{AttemptRow, OpDetail, OpFilter, OpSummary, StateCount, Status};

const ADMIN_STATUS_COUNTS: &str = include_str!("../../sql/mssql/admin_status_counts.sql");
const ADMIN_STATUS_SUMMARY: &str = include_str!("../../sql/mssql/admin_status_summary.sql");
const ADMIN_OP_LIST: &str = include_str!("../../sql/mssql/admin_op_list.sql");
const ADMIN_DESTINATION_LIST: &str = include_str!("../../sql/mssql/admin_destination_list.sql");
const ADMIN_OP_SHOW: &str = include_str!("../../sql/mssql/admin_op_show.sql");
const ADMIN_OP_FIND: &str = include_str!("../../sql/mssql/admin_op_find.sql");
const OP_FIND_BY_KEY: &str = include_str!("../../sql/mssql/op_find_by_key.sql");
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

// The columns' sizes (migrations/mssql/0001_init.sql), in UTF-16 units: room for everything
// Change::validate allows; the cut below only guards against a schema edited by hand.
/// `outbox_admin_log.actor` is nvarchar(400).
const ACTOR_UNITS: usize = 400;
/// `outbox_admin_log.reason` is nvarchar(4000).
const REASON_UNITS: usize = 4000;
/// `outbox_ops.last_error` is nvarchar(4000).
const LAST_ERROR_UNITS: usize = 4000;

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
        let r = self
            .fetch_optional(Stmt::new(ADMIN_STATUS_SUMMARY))
            .await?
            .ok_or_else(|| error::column_err("due_now", "no row was returned"))?;
        Ok(Status {
            counts,
            oldest_pending_ms: r.col("oldest_pending_ms")?,
            due_now: r.col("due_now")?,
            dead_last_day: r.col("dead_last_day")?,
            rejections_last_hour: r.col("rejections_last_hour")?,
            partitions: Vec::new(),
        })
    }

    pub(crate) async fn admin_op_list(&self, filter: &OpFilter) -> Result<Vec<OpSummary>, Error> {
        if !could_be_stored(
            filter.destination.as_deref(),
            filter.idempotency_key.as_deref(),
        ) {
            return Ok(Vec::new());
        }
        let destinations: Option<Vec<String>> =
            if filter.idempotency_key.is_some() && filter.destination.is_none() {
                let rows = self.fetch_all(Stmt::new(ADMIN_DESTINATION_LIST)).await?;
                Some(
                    rows.iter()
                        .map(|r| r.col("destination"))
                        .collect::<Result<_, Error>>()?,
                )
            } else {
                None
            };
        self.fetch_all(list_stmt(filter, destinations.as_deref()))
            .await?
            .iter()
            .map(op_summary)
            .collect()
    }

    pub(crate) async fn admin_op_find(&self, op_id: Uuid) -> Result<Option<i64>, Error> {
        let row = self
            .fetch_optional(Stmt::new(ADMIN_OP_FIND).bind(op_id))
            .await?;
        row.map(|r| r.col("id")).transpose()
    }

    pub(crate) async fn admin_op_find_by_key(
        &self,
        destination: &str,
        key: &str,
    ) -> Result<Option<i64>, Error> {
        if !could_be_stored(Some(destination), Some(key)) {
            return Ok(None);
        }
        let row = self
            .fetch_optional(Stmt::new(OP_FIND_BY_KEY).bind(destination).bind(key))
            .await?;
        row.map(|r| r.col("id")).transpose()
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
            .collect::<Result<_, Error>>()?;
        Ok(Some(detail))
    }

    pub(crate) async fn admin_attempt_last_id(&self) -> Result<i64, Error> {
        self.fetch_optional(Stmt::new(ADMIN_ATTEMPT_LAST_ID))
            .await?
            .ok_or_else(|| error::column_err("id", "no row was returned"))?
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
        let rows = self
            .fetch_all(
                Stmt::new(ADMIN_REJECTION_LIST)
                    .bind(since_ms)
                    .bind(resource)
                    .bind(i64::from(limit)),
            )
            .await?;
        rows.iter().map(rejection_row).collect()
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

/// `admin_op_replay.sql`, inside the change's transaction.
pub(super) async fn op_replay(c: &mut Client, seqs: &[i64]) -> Result<(), Error> {
    Stmt::new(ADMIN_OP_REPLAY)
        .bind(json_list(seqs))
        .execute(c)
        .await
}

/// `admin_op_cancel.sql`, inside the change's transaction; the note cut to `last_error`'s size.
pub(super) async fn op_cancel(c: &mut Client, seqs: &[i64], note: &str) -> Result<(), Error> {
    Stmt::new(ADMIN_OP_CANCEL)
        .bind(json_list(seqs))
        .bind(fit_utf16(note, LAST_ERROR_UNITS))
        .execute(c)
        .await
}

/// `admin_log_insert.sql`. Actor and reason are cut to their columns' sizes (the reason's is
/// smaller than what [`Change::validate`] allows): a purge has deleted its ops already when
/// it is logged, so the log row must not fail on a long reason.
pub(super) async fn log_insert(
    c: &mut Client,
    change: &Change,
    action: &str,
    details: &str,
) -> Result<(), Error> {
    Stmt::new(ADMIN_LOG_INSERT)
        .bind(fit_utf16(&change.actor, ACTOR_UNITS))
        .bind(action)
        .bind(fit_utf16(&change.reason, REASON_UNITS))
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
                .bind(older_than_ms),
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
                .bind(older_than_ms)
                .bind(i64::try_from(batch).unwrap_or(i64::MAX)),
        )
        .await?
        .iter()
        .map(|r| r.col("state"))
        .collect()
}

/// `admin_op_list.sql` bound to `filter`, @P1 to @P10 in order; `destinations`: every
/// destination in use, for a key looked up without one.
fn list_stmt<'q>(filter: &'q OpFilter, destinations: Option<&[String]>) -> Stmt<'q> {
    let states = (!filter.states.is_empty())
        .then(|| json_list(&filter.states.iter().map(|s| s.as_str()).collect::<Vec<_>>()));
    Stmt::new(ADMIN_OP_LIST)
        .bind(states)
        .bind(filter.only_attention_states())
        .bind(filter.destination.as_deref())
        .bind(filter.resource.as_deref())
        .bind(filter.idempotency_key.as_deref())
        .bind(destinations.map(json_list))
        .bind(filter.created_since.to_sql())
        .bind(filter.created_before.to_sql())
        .bind(filter.before_seq)
        .bind(i64::from(filter.limit))
}

/// Whether a destination and key asked for could name a stored op at all. The statements
/// compare them as the varchar columns they are (a cast of the parameter, so the index is
/// sought); a value no op can hold (too long, or not the characters names and keys are made
/// of) could be truncated or mapped by that cast onto one an op holds, so it matches nothing
/// here instead, as on the other backends.
fn could_be_stored(destination: Option<&str>, key: Option<&str>) -> bool {
    destination.is_none_or(|d| DestinationName::new(d).is_ok())
        && key.is_none_or(|k| IdempotencyKey::new(k).is_ok())
}

/// `s` cut to at most `units` UTF-16 code units (an nvarchar(n) column holds n), at a
/// character boundary.
fn fit_utf16(s: &str, units: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += c.len_utf16();
        if used > units {
            return &s[..i];
        }
    }
    s
}

/// An id column as the text PostgreSQL's `::text` gives: lowercase, hyphenated.
fn id_text(r: &tiberius::Row, name: &str) -> Result<String, Error> {
    Ok(r.col::<Uuid>(name)?.hyphenated().to_string())
}

/// A row of `admin_op_list.sql` or `admin_op_show.sql`.
fn op_summary(r: &tiberius::Row) -> Result<OpSummary, Error> {
    Ok(OpSummary {
        seq: r.col("id")?,
        op_id: id_text(r, "op_id")?,
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

/// A row of `admin_op_show.sql`, its headers parsed; without its attempts.
fn op_detail(r: &tiberius::Row) -> Result<OpDetail, Error> {
    Ok(OpDetail {
        summary: op_summary(r)?,
        owner_id: id_text(r, "owner_id")?,
        order_key: r.col("order_key")?,
        method: r.col("method")?,
        path: r.col("path")?,
        headers: parse_headers(&r.col::<String>("headers")?, Backend::Mssql)?,
        content_type: r.col("content_type")?,
        body: r.col("body")?,
        claimed_by_token: r
            .col::<Option<i64>>("claimed_by_fence")?
            .map(FencingToken::new),
        delivered_at: r.col("delivered_at")?,
        trace_context: r.col("trace_context")?,
        retry_base_attempts: r.col("retry_base_attempts")?,
        retry_since: r.col("retry_since")?,
        resource_token: r
            .col::<Option<i64>>("resource_fence")?
            .map(FencingToken::new),
        attempt_history: Vec::new(),
    })
}

/// A row of `admin_attempt_list.sql` or `admin_attempt_tail.sql`.
fn attempt_row(r: &tiberius::Row) -> Result<AttemptRow, Error> {
    Ok(AttemptRow {
        id: r.col("id")?,
        seq: r.col("seq")?,
        op_id: id_text(r, "op_id")?,
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
    })
}

/// A row of `admin_op_lock.sql`.
fn locked_op(r: &tiberius::Row) -> Result<Locked, Error> {
    Ok(Locked {
        seq: r.col("id")?,
        op_id: id_text(r, "op_id")?,
        state: r.col("state")?,
        token: r.col("fence")?,
        resource_token: r.col("resource_fence")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mssql::stmt::tests::row;
    use crate::op::OpState;
    use std::borrow::Cow;
    use tiberius::ColumnData;

    fn text(s: &'static str) -> ColumnData<'static> {
        ColumnData::String(Some(Cow::Borrowed(s)))
    }

    #[test]
    fn a_list_binds_every_filter_in_the_statements_order() {
        let since = OffsetDateTime::from_unix_timestamp(1_782_889_503).unwrap();
        let f = OpFilter {
            states: vec![OpState::Dead, OpState::Cancelled],
            destination: Some("billing".into()),
            resource: Some("statement:1".into()),
            idempotency_key: Some("k-1".into()),
            created_since: Some(since),
            created_before: Some(since + time::Duration::hours(1)),
            before_seq: Some(99),
            limit: 50,
        };
        let s = list_stmt(&f, None);
        assert_eq!(s.params.len(), 10);
        assert!(
            matches!(&s.params[0], ColumnData::String(Some(v)) if v == r#"["dead","cancelled"]"#)
        );
        assert!(matches!(s.params[1], ColumnData::Bit(Some(true))));
        assert!(matches!(&s.params[2], ColumnData::String(Some(v)) if v == "billing"));
        assert!(matches!(&s.params[3], ColumnData::String(Some(v)) if v == "statement:1"));
        assert!(matches!(&s.params[4], ColumnData::String(Some(v)) if v == "k-1"));
        assert!(matches!(s.params[5], ColumnData::String(None)));
        assert!(matches!(s.params[6], ColumnData::DateTimeOffset(Some(_))));
        assert!(matches!(s.params[7], ColumnData::DateTimeOffset(Some(_))));
        assert!(matches!(s.params[8], ColumnData::I64(Some(99))));
        assert!(matches!(s.params[9], ColumnData::I64(Some(50))));
    }

    #[test]
    fn unset_filters_are_typed_nulls_and_a_key_alone_takes_the_destinations() {
        let f = OpFilter {
            states: vec![OpState::Pending, OpState::Dead],
            idempotency_key: Some("k".into()),
            limit: 20,
            ..OpFilter::default()
        };
        let s = list_stmt(&f, Some(&["a".to_owned(), "b".to_owned()]));
        assert_eq!(s.params.len(), 10);
        assert!(matches!(s.params[1], ColumnData::Bit(Some(false))));
        assert!(matches!(s.params[2], ColumnData::String(None)));
        assert!(matches!(s.params[3], ColumnData::String(None)));
        assert!(matches!(&s.params[5], ColumnData::String(Some(v)) if v == r#"["a","b"]"#));
        assert!(matches!(s.params[6], ColumnData::DateTimeOffset(None)));
        assert!(matches!(s.params[7], ColumnData::DateTimeOffset(None)));
        assert!(matches!(s.params[8], ColumnData::I64(None)));
        let none = OpFilter::default();
        let any = list_stmt(&none, None);
        assert!(matches!(any.params[0], ColumnData::String(None)));
    }

    #[test]
    fn every_parameter_the_list_statement_names_is_bound() {
        let f = OpFilter::default();
        let s = list_stmt(&f, None);
        for n in 1..=s.params.len() {
            assert!(ADMIN_OP_LIST.contains(&format!("@P{n}")), "@P{n}");
        }
        assert!(!ADMIN_OP_LIST.contains(&format!("@P{}", s.params.len() + 1)));
    }

    #[test]
    fn an_op_summary_row_decodes_with_its_id_as_text() {
        let op_id: Uuid = "0190C1A2-7B3C-7D4E-8F00-112233445566".parse().unwrap();
        let at = OffsetDateTime::from_unix_timestamp(1_782_889_503).unwrap();
        let dto = |t: OffsetDateTime| match t.to_sql() {
            ColumnData::DateTimeOffset(v) => ColumnData::DateTimeOffset(v),
            other => panic!("{other:?}"),
        };
        let r = row(vec![
            ("id", ColumnData::I64(Some(1))),
            ("op_id", ColumnData::Guid(Some(op_id))),
            ("resource", text("statement:1")),
            ("fence", ColumnData::I64(Some(7))),
            ("destination", text("billing")),
            ("idempotency_key", text("k-1")),
            ("state", text("dead")),
            ("attempts", ColumnData::I32(Some(3))),
            ("next_attempt_at", dto(at)),
            ("created_at", dto(at)),
            ("finished_at", ColumnData::DateTimeOffset(None)),
            ("last_error", text("HTTP 500")),
            ("body_bytes", ColumnData::I64(Some(12))),
        ]);
        let s = op_summary(&r).unwrap();
        assert_eq!(s.seq, 1);
        assert_eq!(s.op_id, "0190c1a2-7b3c-7d4e-8f00-112233445566");
        assert_eq!(s.token, FencingToken::new(7));
        assert_eq!((s.attempts, s.body_bytes), (3, 12));
        assert_eq!(s.created_at, at);
        assert_eq!(s.finished_at, None);
        assert_eq!(s.last_error.as_deref(), Some("HTTP 500"));
    }

    #[test]
    fn a_locked_row_needs_bigint_fences() {
        let r = row(vec![
            ("id", ColumnData::I64(Some(4))),
            ("op_id", ColumnData::Guid(Some(Uuid::nil()))),
            ("state", text("pending")),
            ("fence", ColumnData::I32(Some(2))),
            ("resource_fence", ColumnData::I64(None)),
        ]);
        let e = locked_op(&r).unwrap_err();
        assert!(e.to_string().contains("column fence"), "{e}");
    }

    #[test]
    fn only_values_an_op_can_hold_are_looked_up() {
        assert!(could_be_stored(None, None));
        assert!(could_be_stored(Some("billing"), Some("k-1")));
        assert!(!could_be_stored(Some(&"a".repeat(65)), None));
        assert!(!could_be_stored(Some("billing "), None));
        assert!(!could_be_stored(None, Some("schlüssel")));
        assert!(!could_be_stored(None, Some(&"k".repeat(256))));
    }

    #[test]
    fn text_is_cut_to_utf16_units_at_a_character_boundary() {
        assert_eq!(fit_utf16("abc", 3), "abc");
        assert_eq!(fit_utf16("abcd", 3), "abc");
        // U+1F600 takes two UTF-16 units: it fits whole or not at all.
        assert_eq!(fit_utf16("ab\u{1F600}", 3), "ab");
        assert_eq!(fit_utf16("ab\u{1F600}", 4), "ab\u{1F600}");
        assert_eq!(fit_utf16("", 0), "");
    }
}
