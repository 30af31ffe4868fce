//! Putting stored ops into a state by hand, the way an operator, a bug or an older build could,
//! in each backend's layout: PostgreSQL keeps an op's request, its queue row and its finished
//! row apart (0013_queue_layout.sql, issue 36); SQLite and SQL Server keep one `outbox_ops` row
//! until their step of issue 36 lands.

use crate::db::{Kind, TestDb};

impl TestDb {
    /// `sql`, written against the queue layout's `outbox_requests` (ops' requests) and
    /// `outbox_queue` (unfinished ops), for this backend: on a backend still on one op table,
    /// that table. Leaked, as [`TestDb::execute`] wants.
    pub fn layout(&self, sql: &str) -> &'static str {
        let sql = match self.kind() {
            Kind::Postgres => sql.to_owned(),
            Kind::Sqlite | Kind::Mssql => sql
                .replace("outbox_requests", "outbox_ops")
                .replace("outbox_queue", "outbox_ops"),
        };
        Box::leak(sql.into_boxed_str())
    }

    /// One statement that puts the ops keyed `key` (every op when `None`) into `state`: a
    /// terminal one finished at `finished_at` (a timestamp literal; now when `None`), `in_flight`
    /// claimed by token `claimed_by_fence` under no lease, or `pending`. Runs on any connection,
    /// inside a transaction too.
    pub fn state_sql(
        &self,
        key: Option<&str>,
        state: &str,
        finished_at: Option<&str>,
        claimed_by_fence: Option<i64>,
    ) -> &'static str {
        let filter = key.map_or(String::new(), |k| format!(" WHERE idempotency_key = '{k}'"));
        let sql = match self.kind() {
            Kind::Sqlite | Kind::Mssql => {
                let mut set = format!("state = '{state}'");
                if let Some(at) = finished_at {
                    set.push_str(&format!(", finished_at = '{at}'"));
                } else if state == "pending" {
                    set.push_str(", finished_at = NULL");
                }
                if let Some(fence) = claimed_by_fence {
                    set.push_str(&format!(", claimed_by_fence = {fence}"));
                }
                format!("UPDATE outbox_ops SET {set}{filter}")
            }
            Kind::Postgres => {
                let ops = format!("SELECT id FROM outbox_requests{filter}");
                match state {
                    "pending" | "in_flight" => {
                        let (fence, at) = match claimed_by_fence {
                            Some(f) => (f.to_string(), "clock_timestamp()"),
                            None => ("NULL".to_owned(), "NULL"),
                        };
                        format!(
                            "WITH f AS (DELETE FROM outbox_finished WHERE id IN ({ops}) \
                                 RETURNING id, attempts, next_attempt_at), \
                             q AS (UPDATE outbox_queue SET claimed_by_fence = {fence}, \
                                 claimed_by_lease = NULL, claimed_at = {at} \
                                 WHERE id IN ({ops}) RETURNING id) \
                             INSERT INTO outbox_queue (id, next_attempt_at, partition, \
                                 destination, fence, order_key, expire_with_generation, \
                                 attempts, claimed_by_fence, claimed_at) \
                             SELECT r.id, f.next_attempt_at, r.partition, r.destination, \
                                 r.fence, r.order_key, r.expire_with_generation, f.attempts, \
                                 {fence}, {at} \
                             FROM f JOIN outbox_requests r ON r.id = f.id"
                        )
                    }
                    _ => {
                        let at = finished_at.map_or("clock_timestamp()".to_owned(), |at| {
                            format!("'{at}'::timestamptz")
                        });
                        format!(
                            "WITH q AS (DELETE FROM outbox_queue WHERE id IN ({ops}) \
                                 RETURNING id, attempts, next_attempt_at), \
                             f AS (UPDATE outbox_finished SET state = '{state}', \
                                 finished_at = {at} WHERE id IN ({ops}) RETURNING id) \
                             INSERT INTO outbox_finished (id, state, attempts, \
                                 next_attempt_at, finished_at) \
                             SELECT id, '{state}', attempts, next_attempt_at, {at} FROM q"
                        )
                    }
                }
            }
        };
        Box::leak(sql.into_boxed_str())
    }

    /// Runs [`TestDb::state_sql`].
    pub async fn force_state(
        &self,
        key: Option<&str>,
        state: &str,
        finished_at: Option<&str>,
        claimed_by_fence: Option<i64>,
    ) {
        self.execute(self.state_sql(key, state, finished_at, claimed_by_fence))
            .await;
    }
}
