//! Putting stored ops into a state by hand, the way an operator, a bug or an older build could,
//! in the queue layout every backend has (0013_queue_layout.sql, issue 36): an op's request,
//! its queue row while it is unfinished and its finished row once it is finished.

use crate::db::{Kind, TestDb};

impl TestDb {
    /// One statement that puts the ops keyed `key` (every op when `None`) into `state`: a
    /// terminal one finished at `finished_at` (a timestamp literal; now when `None`), `in_flight`
    /// claimed by token `claimed_by_fence` under no lease, or `pending`. Runs on any connection,
    /// inside a transaction too (on SQLite, which has no data-modifying WITH, it is a script of
    /// a few statements).
    pub fn state_sql(
        &self,
        key: Option<&str>,
        state: &str,
        finished_at: Option<&str>,
        claimed_by_fence: Option<i64>,
    ) -> &'static str {
        let filter = key.map_or(String::new(), |k| format!(" WHERE idempotency_key = '{k}'"));
        let sql = match self.kind() {
            Kind::Sqlite => sqlite_state_sql(&filter, state, finished_at, claimed_by_fence),
            Kind::Mssql => mssql_state_sql(&filter, state, finished_at, claimed_by_fence),
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

/// [`TestDb::state_sql`] on SQLite: the ops' rows moved between `outbox_queue` and
/// `outbox_finished`, then given the state asked for.
fn sqlite_state_sql(
    filter: &str,
    state: &str,
    finished_at: Option<&str>,
    claimed_by_fence: Option<i64>,
) -> String {
    const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
    let ops = format!("SELECT id FROM outbox_requests{filter}");
    match state {
        "pending" | "in_flight" => {
            let (fence, at) = match claimed_by_fence {
                Some(f) => (f.to_string(), NOW),
                None => ("NULL".to_owned(), "NULL"),
            };
            format!(
                "INSERT INTO outbox_queue (id, next_attempt_at, partition, destination, fence, \
                     order_key, expire_with_generation, attempts) \
                 SELECT r.id, f.next_attempt_at, r.partition, r.destination, r.fence, \
                     r.order_key, r.expire_with_generation, f.attempts \
                 FROM outbox_finished f JOIN outbox_requests r ON r.id = f.id \
                 WHERE f.id IN ({ops}); \
                 DELETE FROM outbox_finished WHERE id IN ({ops}); \
                 UPDATE outbox_queue SET claimed_by_fence = {fence}, claimed_by_lease = NULL, \
                     claimed_at = {at} WHERE id IN ({ops})"
            )
        }
        _ => {
            let at = finished_at.map_or(NOW.to_owned(), |at| format!("'{at}'"));
            format!(
                "UPDATE outbox_finished SET state = '{state}', finished_at = {at} \
                     WHERE id IN ({ops}); \
                 INSERT INTO outbox_finished (id, state, attempts, next_attempt_at, finished_at) \
                 SELECT id, '{state}', attempts, next_attempt_at, {at} FROM outbox_queue \
                     WHERE id IN ({ops}); \
                 DELETE FROM outbox_queue WHERE id IN ({ops})"
            )
        }
    }
}

/// [`TestDb::state_sql`] in T-SQL, for SQL Server's queue layout: one batch that moves the ops
/// `filter` selects between `outbox_queue` and `outbox_finished` (through a table variable, as
/// T-SQL has no data-modifying CTE), or changes the row they have.
fn mssql_state_sql(
    filter: &str,
    state: &str,
    finished_at: Option<&str>,
    claimed_by_fence: Option<i64>,
) -> String {
    let ops = format!("SELECT id FROM dbo.outbox_requests{filter}");
    const NOW: &str = "CAST(SYSUTCDATETIME() AS datetimeoffset(7))";
    const MOVED: &str = "DECLARE @moved TABLE (id bigint NOT NULL PRIMARY KEY, attempts int NOT NULL, \
         next_attempt_at datetimeoffset(7) NOT NULL);";
    match state {
        "pending" | "in_flight" => {
            let (fence, at) = match claimed_by_fence {
                Some(f) => (f.to_string(), NOW),
                None => ("NULL".to_owned(), "NULL"),
            };
            format!(
                "{MOVED} \
                 DELETE FROM dbo.outbox_finished \
                     OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at INTO @moved \
                     WHERE id IN ({ops}); \
                 UPDATE dbo.outbox_queue SET claimed_by_fence = {fence}, \
                     claimed_by_lease = NULL, claimed_at = {at} WHERE id IN ({ops}); \
                 INSERT INTO dbo.outbox_queue (id, next_attempt_at, partition, destination, \
                     fence, order_key, expire_with_generation, attempts, claimed_by_fence, \
                     claimed_at) \
                 SELECT r.id, m.next_attempt_at, r.partition, r.destination, r.fence, \
                     r.order_key, r.expire_with_generation, m.attempts, {fence}, {at} \
                 FROM @moved AS m INNER JOIN dbo.outbox_requests AS r ON r.id = m.id;"
            )
        }
        _ => {
            let at = finished_at.map_or(NOW.to_owned(), |at| {
                format!("CAST('{at}' AS datetimeoffset(7))")
            });
            format!(
                "{MOVED} \
                 DELETE FROM dbo.outbox_queue \
                     OUTPUT deleted.id, deleted.attempts, deleted.next_attempt_at INTO @moved \
                     WHERE id IN ({ops}); \
                 UPDATE dbo.outbox_finished SET state = '{state}', finished_at = {at} \
                     WHERE id IN ({ops}); \
                 INSERT INTO dbo.outbox_finished (id, state, attempts, next_attempt_at, \
                     finished_at) \
                 SELECT id, '{state}', attempts, next_attempt_at, {at} FROM @moved;"
            )
        }
    }
}
