//! The PostgreSQL side of `outboxctl` (see `admin/`): its `sql/postgres/admin_*` files and how
//! it binds lists and times, for the admin statements written once in `admin/sqlx_admin.rs`;
//! the flows of replay, cancel and purge that run them are `admin/change.rs`.

use sqlx::postgres::{PgPool, PgRow};
use time::OffsetDateTime;

use super::{PgStore, map_err, rejection_row};
use crate::admin::sqlx_admin::{AdminDb, AdminSql, SqlxAdmin, admin_sql};
use crate::error::{Backend, Error};
use crate::op::RejectionRow;

impl AdminDb for sqlx::Postgres {
    const BACKEND: Backend = Backend::Postgres;
    const SQL: AdminSql = admin_sql!("postgres");
    // The planner walks the primary key by itself.
    const WALK_IDS: &'static str = "";
    // Each op's state is its queue row or its finished row (0013_queue_layout.sql).
    const ATTENTION_STATES: &'static str = "\n  AND id IN (SELECT id FROM outbox_finished \
         WHERE state IN ('dead', 'cancelled', 'superseded'))";
    const UNFINISHED_STATES: &'static str = "\n  AND id IN (SELECT id FROM outbox_queue)";

    type Ids = Vec<i64>;
    type Names = Vec<String>;
    type Time = OffsetDateTime;

    fn ids(seqs: &[i64]) -> Vec<i64> {
        seqs.to_vec()
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn time(t: OffsetDateTime) -> OffsetDateTime {
        t
    }

    fn rejection_row(r: &PgRow) -> Result<RejectionRow, Error> {
        rejection_row(r)
    }

    fn map_err(e: sqlx::Error) -> Error {
        map_err(e)
    }

    fn persistent() -> bool {
        !super::pooler::through_pooler()
    }
}

impl SqlxAdmin for PgStore {
    type Db = sqlx::Postgres;

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn pooled(&self) -> bool {
        PgStore::pooled(self)
    }
}
