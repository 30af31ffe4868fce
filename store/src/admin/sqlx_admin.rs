//! The admin statements of the two sqlx backends, bound and decoded once over
//! [`sqlx::Database`]: PostgreSQL and SQLite run the same code with their own
//! `sql/<backend>/admin_*.sql`. [`SqlxAdmin`] is what a backend's store names to get it (its
//! pool and its database); [`AdminDb`] is what truly differs between the databases: the
//! statements, how a list of ids or states and a time are bound, and a rejection row's owner id.

use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, QueryBuilder, Row, Type,
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::admin::{AttemptRow, OpContent, OpDetail, OpFilter, OpSummary, StateCount, Status};
use crate::dispatch::{parse_header_names, parse_headers};
use crate::error::{Backend, Error};
use crate::model::{Change, FencingToken};
use crate::op::RejectionRow;
use crate::rows::Locked;

/// One backend's admin statements, one per `sql/<backend>/admin_*.sql` file.
pub(crate) struct AdminSql {
    pub status_counts: &'static str,
    pub status_summary: &'static str,
    pub op_list: &'static str,
    pub destination_list: &'static str,
    pub op_show: &'static str,
    pub op_find: &'static str,
    pub op_find_by_key: &'static str,
    pub attempt_list: &'static str,
    pub op_content: &'static str,
    pub attempt_tail: &'static str,
    pub attempt_last_id: &'static str,
    pub op_lock: &'static str,
    pub op_replay: &'static str,
    pub op_cancel: &'static str,
    pub log_insert: &'static str,
    pub purge_count: &'static str,
    pub purge: &'static str,
    pub rejection_list: &'static str,
}

/// The [`AdminSql`] of the backend folder `$dir` under `store/sql/` (called from a file two
/// folders below `store/`, as every backend's `admin.rs` is).
macro_rules! admin_sql {
    ($dir:literal) => {
        $crate::admin::sqlx_admin::AdminSql {
            status_counts: include_str!(concat!("../../sql/", $dir, "/admin_status_counts.sql")),
            status_summary: include_str!(concat!("../../sql/", $dir, "/admin_status_summary.sql")),
            op_list: include_str!(concat!("../../sql/", $dir, "/admin_op_list.sql")),
            destination_list: include_str!(concat!(
                "../../sql/",
                $dir,
                "/admin_destination_list.sql"
            )),
            op_show: include_str!(concat!("../../sql/", $dir, "/admin_op_show.sql")),
            op_content: include_str!(concat!("../../sql/", $dir, "/admin_op_content.sql")),
            op_find: include_str!(concat!("../../sql/", $dir, "/admin_op_find.sql")),
            op_find_by_key: include_str!(concat!("../../sql/", $dir, "/admin_op_find_by_key.sql")),
            attempt_list: include_str!(concat!("../../sql/", $dir, "/admin_attempt_list.sql")),
            attempt_tail: include_str!(concat!("../../sql/", $dir, "/admin_attempt_tail.sql")),
            attempt_last_id: include_str!(concat!(
                "../../sql/",
                $dir,
                "/admin_attempt_last_id.sql"
            )),
            op_lock: include_str!(concat!("../../sql/", $dir, "/admin_op_lock.sql")),
            op_replay: include_str!(concat!("../../sql/", $dir, "/admin_op_replay.sql")),
            op_cancel: include_str!(concat!("../../sql/", $dir, "/admin_op_cancel.sql")),
            log_insert: include_str!(concat!("../../sql/", $dir, "/admin_log_insert.sql")),
            purge_count: include_str!(concat!("../../sql/", $dir, "/admin_purge_count.sql")),
            purge: include_str!(concat!("../../sql/", $dir, "/admin_purge.sql")),
            rejection_list: include_str!(concat!("../../sql/", $dir, "/admin_rejection_list.sql")),
        }
    };
}
pub(crate) use admin_sql;

/// What differs between the sqlx databases in their admin statements.
pub(crate) trait AdminDb: Database + sqlx::database::HasStatementCache {
    /// Which backend this is, for errors.
    const BACKEND: Backend;
    /// The statements.
    const SQL: AdminSql;
    /// What keeps a destination filter of `list` from choosing the (destination, key) index,
    /// which would sort all of that destination's ops; walking ids newest first stops at the
    /// page's end instead (SQLite: `+`; PostgreSQL's planner walks the primary key by itself).
    const WALK_IDS: &'static str;
    /// What `list` adds when every state asked for needs an operator (dead, cancelled,
    /// superseded), so that the few such ops are found by the index that holds them alone.
    const ATTENTION_STATES: &'static str;
    /// What `list` adds when every state asked for is unfinished (pending, in flight).
    const UNFINISHED_STATES: &'static str;

    /// A list of op row ids as a statement takes it.
    type Ids: for<'t> Encode<'t, Self> + Type<Self> + Send;
    /// A list of state names as a statement takes it.
    type Names: for<'t> Encode<'t, Self> + Type<Self> + Send;
    /// A time as a statement compares it with stored ones.
    type Time: for<'t> Encode<'t, Self> + Type<Self> + Send;

    /// `seqs` as bound.
    fn ids(seqs: &[i64]) -> Self::Ids;
    /// `names` as bound.
    fn names(names: &[&str]) -> Self::Names;
    /// `t` as bound.
    fn time(t: OffsetDateTime) -> Self::Time;
    /// A row of `admin_rejection_list.sql` (the owner id's type differs).
    fn rejection_row(r: &Self::Row) -> Result<RejectionRow, Error>;
    /// A driver error as the store's.
    fn map_err(e: sqlx::Error) -> Error;
    /// Whether statements are prepared once and kept per connection (not through a
    /// transaction pooler: `postgres/pooler.rs`).
    fn persistent() -> bool;
}

/// A sqlx row of the database `DB`.
type RowOf<DB> = <DB as Database>::Row;

/// A statement of the database `DB` with its parameters bound.
type QueryOf<'q, DB> = sqlx::query::Query<'q, DB, <DB as Database>::Arguments>;

/// One of the admin statements, named and kept or not as the database says.
fn query<'q, DB: AdminDb>(sql: &'static str) -> QueryOf<'q, DB> {
    sqlx::query(sql).persistent(DB::persistent())
}

/// `$run` of `$q` on its own for `$store`: on the pool, or in a transaction of its own through
/// a transaction pooler, so that its two round trips reach one server (`postgres/pooler.rs`).
macro_rules! on_its_own {
    ($store:expr, $q:expr, $run:ident) => {{
        let (store, q) = ($store, $q.persistent(<Self::Db as AdminDb>::persistent()));
        let map_err = <Self::Db as AdminDb>::map_err;
        if store.pooled() {
            let mut tx = store.pool().begin().await.map_err(map_err)?;
            let done = q.$run(&mut *tx).await.map_err(map_err)?;
            tx.commit().await.map_err(map_err)?;
            Ok(done)
        } else {
            q.$run(store.pool()).await.map_err(map_err)
        }
    }};
}

/// The admin statements of a store on a sqlx pool, written once. The `where` clause says what
/// the code needs of the database: every sqlx database this project uses has it.
pub(crate) trait SqlxAdmin: Sync
where
    for<'c> &'c mut <Self::Db as Database>::Connection: Executor<'c, Database = Self::Db>,
    <Self::Db as Database>::Arguments: IntoArguments<Self::Db>,
    for<'a> &'a str: ColumnIndex<RowOf<Self::Db>> + Encode<'a, Self::Db> + Type<Self::Db>,
    for<'a> Option<&'a str>: Encode<'a, Self::Db>,
    usize: ColumnIndex<RowOf<Self::Db>>,
    for<'r> i64: Decode<'r, Self::Db> + Encode<'r, Self::Db> + Type<Self::Db>,
    for<'r> i32: Decode<'r, Self::Db> + Type<Self::Db>,
    for<'r> String: Decode<'r, Self::Db> + Encode<'r, Self::Db> + Type<Self::Db>,
    for<'r> OffsetDateTime: Decode<'r, Self::Db> + Type<Self::Db>,
    for<'r> Vec<u8>: Decode<'r, Self::Db> + Type<Self::Db>,
{
    /// The database.
    type Db: AdminDb;

    /// The store's pool.
    fn pool(&self) -> &Pool<Self::Db>;

    /// Whether a transaction pooler is between the store and its database.
    fn pooled(&self) -> bool;

    /// Every row of `q`, run on its own.
    async fn rows(&self, q: QueryOf<'_, Self::Db>) -> Result<Vec<RowOf<Self::Db>>, Error> {
        on_its_own!(self, q, fetch_all)
    }

    /// The one row of `q`, run on its own.
    async fn row(&self, q: QueryOf<'_, Self::Db>) -> Result<RowOf<Self::Db>, Error> {
        on_its_own!(self, q, fetch_one)
    }

    /// The row of `q` if any, run on its own.
    async fn maybe_row(&self, q: QueryOf<'_, Self::Db>) -> Result<Option<RowOf<Self::Db>>, Error> {
        on_its_own!(self, q, fetch_optional)
    }

    /// Everything `status` reports but the partition leases (the caller adds them).
    async fn admin_status(&self) -> Result<Status, Error> {
        let sql = &Self::Db::SQL;
        let counts = self
            .rows(query::<Self::Db>(sql.status_counts))
            .await?
            .iter()
            .map(|r| {
                Ok(StateCount {
                    state: r.try_get("state")?,
                    destination: r.try_get("destination")?,
                    ops: r.try_get("ops")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(Self::Db::map_err)?;
        let r = self.row(query::<Self::Db>(sql.status_summary)).await?;
        (|| {
            Ok::<_, sqlx::Error>(Status {
                counts,
                oldest_pending_ms: r.try_get("oldest_pending_ms")?,
                due_now: r.try_get("due_now")?,
                dead_last_day: r.try_get("dead_last_day")?,
                rejections_last_hour: r.try_get("rejections_last_hour")?,
                partitions: Vec::new(),
                instances: Vec::new(),
                partition_count: None,
            })
        })()
        .map_err(Self::Db::map_err)
    }

    /// One page of ops matching `filter`, newest first.
    async fn admin_op_list(&self, filter: &OpFilter) -> Result<Vec<OpSummary>, Error> {
        let sql = &Self::Db::SQL;
        let destinations: Vec<String> =
            if filter.idempotency_key.is_some() && filter.destination.is_none() {
                self.rows(query::<Self::Db>(sql.destination_list))
                    .await?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(Self::Db::map_err)?
            } else {
                Vec::new()
            };
        let mut qb = sqlx::QueryBuilder::<Self::Db>::new(sql.op_list);
        Self::push_filter(&mut qb, filter, &destinations);
        self.rows(qb.build())
            .await?
            .iter()
            .map(Self::op_summary)
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(Self::Db::map_err)
    }

    /// The sequence of the op with this public id.
    async fn admin_op_find(&self, op_id: Uuid) -> Result<Option<i64>, Error> {
        let row = self
            .maybe_row(
                query::<Self::Db>(Self::Db::SQL.op_find).bind(op_id.hyphenated().to_string()),
            )
            .await?;
        row.map(|r| r.try_get(0).map_err(Self::Db::map_err))
            .transpose()
    }

    /// The sequence of the op with this idempotency key at this destination.
    async fn admin_op_find_by_key(
        &self,
        destination: &str,
        key: &str,
    ) -> Result<Option<i64>, Error> {
        let row = self
            .maybe_row(
                query::<Self::Db>(Self::Db::SQL.op_find_by_key)
                    .bind(destination)
                    .bind(key),
            )
            .await?;
        row.map(|r| r.try_get("id").map_err(Self::Db::map_err))
            .transpose()
    }

    /// One op, whole, with its attempts.
    async fn admin_op_show(&self, seq: i64) -> Result<Option<OpDetail>, Error> {
        let sql = &Self::Db::SQL;
        let Some(r) = self
            .maybe_row(query::<Self::Db>(sql.op_show).bind(seq))
            .await?
        else {
            return Ok(None);
        };
        let mut detail = Self::op_detail(&r).map_err(Self::Db::map_err)?;
        let names: String = r.try_get("header_names").map_err(Self::Db::map_err)?;
        detail.header_names = parse_header_names(&names, Self::Db::BACKEND)?;
        detail.attempt_history = self
            .rows(query::<Self::Db>(sql.attempt_list).bind(seq))
            .await?
            .iter()
            .map(Self::attempt_row)
            .collect::<Result<Vec<AttemptRow>, sqlx::Error>>()
            .map_err(Self::Db::map_err)?;
        Ok(Some(detail))
    }

    /// One op's headers with their values and its body.
    async fn admin_op_content(&self, seq: i64) -> Result<Option<OpContent>, Error> {
        let Some(r) = self
            .maybe_row(query::<Self::Db>(Self::Db::SQL.op_content).bind(seq))
            .await?
        else {
            return Ok(None);
        };
        let headers: String = r.try_get("headers").map_err(Self::Db::map_err)?;
        Ok(Some(OpContent {
            headers: parse_headers(&headers, Self::Db::BACKEND)?,
            body: r.try_get("body").map_err(Self::Db::map_err)?,
        }))
    }

    /// The newest attempt's id (0 when there is none), where `tail` starts.
    async fn admin_attempt_last_id(&self) -> Result<i64, Error> {
        self.row(query::<Self::Db>(Self::Db::SQL.attempt_last_id))
            .await?
            .try_get(0)
            .map_err(Self::Db::map_err)
    }

    /// Up to `limit` attempts after `last_id`, oldest first.
    async fn admin_attempts_after(
        &self,
        last_id: i64,
        limit: u32,
    ) -> Result<Vec<AttemptRow>, Error> {
        self.rows(
            query::<Self::Db>(Self::Db::SQL.attempt_tail)
                .bind(last_id)
                .bind(i64::from(limit)),
        )
        .await?
        .iter()
        .map(Self::attempt_row)
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(Self::Db::map_err)
    }

    /// Rejected enqueues since `since_ms` ago, newest first, of one resource or all.
    async fn admin_rejections(
        &self,
        since_ms: i64,
        resource: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RejectionRow>, Error> {
        let rows = self
            .rows(
                query::<Self::Db>(Self::Db::SQL.rejection_list)
                    .bind(since_ms)
                    .bind(resource)
                    .bind(i64::from(limit)),
            )
            .await?;
        rows.iter().map(Self::Db::rejection_row).collect()
    }

    /// `admin_op_lock.sql`.
    async fn op_lock(
        c: &mut <Self::Db as Database>::Connection,
        seqs: &[i64],
    ) -> Result<Vec<Locked>, Error> {
        query::<Self::Db>(Self::Db::SQL.op_lock)
            .bind(Self::Db::ids(seqs))
            .fetch_all(c)
            .await
            .map_err(Self::Db::map_err)?
            .iter()
            .map(|r| {
                Ok(Locked {
                    seq: r.try_get("id")?,
                    op_id: r.try_get("op_id")?,
                    state: r.try_get("state")?,
                    token: r.try_get("fence")?,
                    resource_token: r.try_get("resource_fence")?,
                    erased_at: r.try_get("erased_at")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(Self::Db::map_err)
    }

    /// `admin_op_replay.sql`.
    async fn op_replay(
        c: &mut <Self::Db as Database>::Connection,
        seqs: &[i64],
    ) -> Result<(), Error> {
        query::<Self::Db>(Self::Db::SQL.op_replay)
            .bind(Self::Db::ids(seqs))
            .execute(c)
            .await
            .map_err(Self::Db::map_err)?;
        Ok(())
    }

    /// `admin_op_cancel.sql`.
    async fn op_cancel(
        c: &mut <Self::Db as Database>::Connection,
        seqs: &[i64],
        note: &str,
    ) -> Result<(), Error> {
        query::<Self::Db>(Self::Db::SQL.op_cancel)
            .bind(Self::Db::ids(seqs))
            .bind(note)
            .execute(c)
            .await
            .map_err(Self::Db::map_err)?;
        Ok(())
    }

    /// `admin_log_insert.sql`.
    async fn log_insert(
        c: &mut <Self::Db as Database>::Connection,
        change: &Change,
        action: &str,
        details: &str,
    ) -> Result<(), Error> {
        query::<Self::Db>(Self::Db::SQL.log_insert)
            .bind(change.actor.as_str())
            .bind(action)
            .bind(change.reason.as_str())
            .bind(details)
            .execute(c)
            .await
            .map_err(Self::Db::map_err)?;
        Ok(())
    }

    /// `admin_purge_count.sql`: (state, ops) of what a purge would delete.
    async fn purge_count(
        &self,
        states: &[&str],
        older_than_ms: i64,
    ) -> Result<Vec<(String, i64)>, Error> {
        self.rows(
            query::<Self::Db>(Self::Db::SQL.purge_count)
                .bind(Self::Db::names(states))
                .bind(older_than_ms),
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get("state")?, r.try_get("ops")?)))
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(Self::Db::map_err)
    }

    /// `admin_purge.sql`: one batch deleted, the states of its ops.
    async fn purge(
        &self,
        states: &[&str],
        older_than_ms: i64,
        batch: usize,
    ) -> Result<Vec<String>, Error> {
        self.rows(
            query::<Self::Db>(Self::Db::SQL.purge)
                .bind(Self::Db::names(states))
                .bind(older_than_ms)
                .bind(i64::try_from(batch).unwrap_or(i64::MAX)),
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Self::Db::map_err)
    }

    /// Adds `filter`'s conditions (fixed fragments, bound values), its order and page size to
    /// a `list` query. `destinations`: every destination in use, for a key looked up without
    /// one.
    fn push_filter(qb: &mut QueryBuilder<Self::Db>, f: &OpFilter, destinations: &[String]) {
        if !f.states.is_empty() {
            qb.push("\n  AND state IN (");
            let mut list = qb.separated(", ");
            for s in &f.states {
                list.push_bind(s.as_str());
            }
            qb.push(")");
            if f.only_attention_states() {
                qb.push(Self::Db::ATTENTION_STATES);
            } else if f.only_unfinished_states() {
                qb.push(Self::Db::UNFINISHED_STATES);
            }
        }
        if let Some(d) = &f.destination {
            if f.idempotency_key.is_some() {
                qb.push("\n  AND destination = ").push_bind(d.clone());
            } else {
                qb.push(format_args!("\n  AND {}destination = ", Self::Db::WALK_IDS))
                    .push_bind(d.clone());
            }
        }
        if let Some(r) = &f.resource {
            qb.push("\n  AND resource = ").push_bind(r.clone());
        }
        if let Some(k) = &f.idempotency_key {
            qb.push("\n  AND idempotency_key = ").push_bind(k.clone());
            if f.destination.is_none() {
                // One probe of the (destination, key) index per destination in use.
                qb.push("\n  AND destination IN (");
                let mut list = qb.separated(", ");
                list.push_bind(""); // never a destination: keeps the list valid when empty
                for d in destinations {
                    list.push_bind(d.clone());
                }
                qb.push(")");
            }
        }
        if let Some(t) = f.created_since {
            qb.push("\n  AND created_at >= ")
                .push_bind(Self::Db::time(t));
        }
        if let Some(t) = f.created_before {
            qb.push("\n  AND created_at < ")
                .push_bind(Self::Db::time(t));
        }
        if let Some(seq) = f.before_seq {
            qb.push("\n  AND id < ").push_bind(seq);
        }
        qb.push("\nORDER BY id DESC\nLIMIT ")
            .push_bind(i64::from(f.limit));
    }

    /// An [`OpSummary`] from a row of `admin_op_list.sql` or `admin_op_show.sql`.
    fn op_summary(r: &RowOf<Self::Db>) -> Result<OpSummary, sqlx::Error> {
        Ok(OpSummary {
            seq: r.try_get("id")?,
            op_id: r.try_get("op_id")?,
            resource: r.try_get("resource")?,
            token: FencingToken::new(r.try_get("fence")?),
            destination: r.try_get("destination")?,
            idempotency_key: r.try_get("idempotency_key")?,
            state: r.try_get("state")?,
            attempts: r.try_get("attempts")?,
            next_attempt_at: r.try_get("next_attempt_at")?,
            created_at: r.try_get("created_at")?,
            finished_at: r.try_get("finished_at")?,
            last_error: r.try_get("last_error")?,
            body_bytes: r.try_get("body_bytes")?,
        })
    }

    /// An [`OpDetail`] from a row of `admin_op_show.sql`, without its header names (the
    /// caller parses the `header_names` column) and attempts.
    fn op_detail(r: &RowOf<Self::Db>) -> Result<OpDetail, sqlx::Error> {
        Ok(OpDetail {
            summary: Self::op_summary(r)?,
            owner_id: r.try_get("owner_id")?,
            order_key: r.try_get("order_key")?,
            method: r.try_get("method")?,
            path: r.try_get("path")?,
            header_names: Vec::new(),
            content_type: r.try_get("content_type")?,
            claimed_by_token: r
                .try_get::<Option<i64>, _>("claimed_by_fence")?
                .map(FencingToken::new),
            delivered_at: r.try_get("delivered_at")?,
            erased_at: r.try_get("erased_at")?,
            trace_context: r.try_get("trace_context")?,
            trace_state: r.try_get("trace_state")?,
            retry_base_attempts: r.try_get("retry_base_attempts")?,
            retry_since: r.try_get("retry_since")?,
            resource_token: r
                .try_get::<Option<i64>, _>("resource_fence")?
                .map(FencingToken::new),
            attempt_history: Vec::new(),
        })
    }

    /// An [`AttemptRow`] from a row of `admin_attempt_list.sql` or `admin_attempt_tail.sql`.
    fn attempt_row(r: &RowOf<Self::Db>) -> Result<AttemptRow, sqlx::Error> {
        Ok(AttemptRow {
            id: r.try_get("id")?,
            seq: r.try_get("seq")?,
            op_id: r.try_get("op_id")?,
            destination: r.try_get("destination")?,
            resource: r.try_get("resource")?,
            attempt: r.try_get("attempt")?,
            dispatcher_token: FencingToken::new(r.try_get("dispatcher_fence")?),
            started_at: r.try_get("started_at")?,
            duration_ms: r.try_get("duration_ms")?,
            outcome: r.try_get("outcome")?,
            http_status: r.try_get("http_status")?,
            error: r.try_get("error")?,
            response_excerpt: r.try_get("response_excerpt")?,
            trace_context: r.try_get("trace_context")?,
        })
    }
}
