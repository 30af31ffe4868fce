//! `TestDb`: a fresh, migrated database per test on any backend, plus the raw views tests use
//! to check what was written (table snapshots) and to move lease time (clock shifts).
//! SQL Server's database and views are in `mssql.rs`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outbox_producer::{Lease, Outbox};
use outbox_store::{Store, StoreOptions, TtlBounds};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row, SqliteConnection};
use time::OffsetDateTime;

use crate::mssql;
use crate::pg::{self, Cluster, Server};

/// Which backend a test database is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file in a temporary folder.
    Sqlite,
    /// A fresh database on the shared server, or on a cluster of the test's own.
    Postgres,
    /// A fresh database on the SQL Server that `OUTBOX_MSSQL_URL` names.
    Mssql,
}

/// One test's database. Dropping it removes the SQLite folder, or the database on an external
/// PostgreSQL server or on SQL Server; throwaway clusters are removed by their watcher.
#[derive(Debug)]
pub struct TestDb {
    kind: Kind,
    url: String,
    _sqlite_dir: Option<tempfile::TempDir>,
    own_cluster: Option<Cluster>,
    /// The server's administrative URL and the database to drop there.
    drop_on_external_server: Option<(String, String)>,
    /// The SQL Server tests run on Babelfish for PostgreSQL, which ignores locking hints.
    babelfish: bool,
}

/// What a SQL Server test cannot do: the tests do not run the server, so they cannot stop it.
const MSSQL_CANNOT_RESTART: &str = "SQL Server cannot be stopped or restarted by the tests \
(they only reach the server OUTBOX_MSSQL_URL names): restarts need TestDb::postgres_own_cluster";

/// Runs `$body` with `$c` bound to a new sqlx connection to `$db`, of its backend's type.
/// SQL Server is not an sqlx backend: callers hand it to `mssql.rs` first.
macro_rules! with_conn {
    ($db:expr, $c:ident => $body:expr) => {
        match $db.kind {
            Kind::Sqlite => {
                let mut $c = SqliteConnection::connect(&$db.url).await.expect("connect");
                $body
            }
            Kind::Postgres => {
                let mut $c = PgConnection::connect(&$db.url).await.expect("connect");
                $body
            }
            Kind::Mssql => unreachable!("SQL Server is read through tiberius, not sqlx"),
        }
    };
}

/// A 60-second lease on `resource`, which the test expects to be free.
pub async fn lease(outbox: &Outbox, resource: &str) -> Lease {
    outbox
        .try_acquire(resource, Duration::from_secs(60))
        .await
        .expect("acquire")
        .expect("free resource")
}

/// Installs the process-wide TLS provider once (the drivers refuse to pick one themselves).
fn init() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

impl TestDb {
    /// A new SQLite file in a temporary folder.
    pub async fn sqlite() -> TestDb {
        init();
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("outbox.db").display());
        TestDb {
            kind: Kind::Sqlite,
            url,
            _sqlite_dir: Some(dir),
            own_cluster: None,
            drop_on_external_server: None,
            babelfish: false,
        }
    }

    /// A new database on the shared PostgreSQL server of this test process.
    pub async fn postgres() -> TestDb {
        init();
        let server = pg::server();
        let name = fresh_database_name();
        create_database(&server.admin_url(), &name).await;
        let drop_on_external_server = match server {
            Server::External(_) => Some((server.admin_url(), name.clone())),
            Server::Throwaway(_) => None,
        };
        TestDb {
            kind: Kind::Postgres,
            url: server.url(&name),
            _sqlite_dir: None,
            own_cluster: None,
            drop_on_external_server,
            babelfish: false,
        }
    }

    /// A database on a PostgreSQL cluster of this test's own, which it may stop, crash and
    /// start; its commits survive a crash of the server.
    /// `None`, after saying why, when there are no local PostgreSQL binaries.
    pub async fn postgres_own_cluster() -> Option<TestDb> {
        init();
        if !pg::binaries_available() {
            if std::env::var_os("DATABASE_URL").is_some() {
                eprintln!(
                    "skipped: restarting PostgreSQL needs local binaries; DATABASE_URL cannot be restarted"
                );
                return None;
            }
            panic!("{}", pg::HOW_TO_GET_POSTGRES);
        }
        let cluster = tokio::task::spawn_blocking(Cluster::start_crashable)
            .await
            .expect("cluster start task")
            .unwrap_or_else(|e| panic!("cannot start a PostgreSQL cluster: {e}"));
        let name = fresh_database_name();
        create_database(&cluster.url("postgres"), &name).await;
        Some(TestDb {
            kind: Kind::Postgres,
            url: cluster.url(&name),
            _sqlite_dir: None,
            own_cluster: Some(cluster),
            drop_on_external_server: None,
            babelfish: false,
        })
    }

    /// A new database on a PostgreSQL server that the test runs and removes itself (a highly
    /// available cluster, say), created through `server_url` (any database of that server).
    pub async fn postgres_on(server_url: &str) -> TestDb {
        init();
        let name = fresh_database_name();
        create_database(server_url, &name).await;
        TestDb {
            kind: Kind::Postgres,
            url: pg::with_database(server_url, &name),
            _sqlite_dir: None,
            own_cluster: None,
            drop_on_external_server: None,
            babelfish: false,
        }
    }

    /// A new database on the SQL Server that `OUTBOX_MSSQL_URL` names (a login that may
    /// `CREATE DATABASE`; the URL's database is ignored, its query string kept). Its tests are
    /// ignored unless run with `--include-ignored`; then they fail loudly without the variable.
    pub async fn mssql() -> TestDb {
        init();
        let server = match std::env::var(mssql::URL_VAR) {
            Ok(url) if !url.is_empty() => url,
            _ => {
                panic!("SQL Server tests need OUTBOX_MSSQL_URL=mssql://user:password@host:port/db")
            }
        };
        let name = fresh_database_name();
        let admin_url = mssql::with_database(&server, "master");
        let product = mssql::server(&admin_url).await;
        mssql::create_database(&admin_url, &name, &product).await;
        TestDb {
            kind: Kind::Mssql,
            url: mssql::for_tests(&mssql::with_database(&server, &name), &product),
            _sqlite_dir: None,
            own_cluster: None,
            drop_on_external_server: Some((admin_url, name)),
            babelfish: product.babelfish,
        }
    }

    /// The backend.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The migrations this build applies, in order: the same versions on every backend.
    pub fn migrations(&self) -> Vec<&'static str> {
        vec![
            "0001_init",
            "0002_admin",
            "0003_hardening",
            "0004_sql_api",
            "0005_membership",
            "0006_partition_count",
            "0007_trace_links",
            "0008_destination_health",
            "0009_lean_attempts",
            "0010_pooler_safe_sessions",
            "0011_claim_honours_holds",
            "0012_claim_room_per_destination",
            "0013_queue_layout",
            "0014_request_rules",
            "0015_producer_role",
            "0016_component_roles",
            "0017_content_at_rest",
            "0018_database_roles",
            "0019_minute_stats",
            "0020_producer_procedure",
        ]
    }

    /// Whether this is a SQL Server test running on Babelfish for PostgreSQL.
    pub fn babelfish(&self) -> bool {
        self.babelfish
    }

    /// True, after saying so on stderr (past the harness's capture), when this is a SQL
    /// Server test on Babelfish for PostgreSQL and it needs what `limitation` (one of
    /// [`crate::babelfish`]'s) says Babelfish lacks: the caller returns. False on every other
    /// server, SQL Server included, where the test runs in full.
    pub fn skip_on_babelfish(&self, limitation: &str) -> bool {
        if !self.babelfish {
            return false;
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("this test")
            .to_owned();
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED on Babelfish only: {test}: {limitation} ***"
        );
        true
    }

    /// On Babelfish only, after the migrations: the SQL API's helpers that need what Babelfish
    /// lacks are replaced by [`crate::babelfish::SQL_API_STAND_INS`] (said on stderr), so a
    /// test of its ASCII text can run the procedures around them. Does nothing elsewhere.
    pub async fn babelfish_sql_api_stand_ins(&self) {
        if !self.babelfish {
            return;
        }
        mssql::install_stand_ins(&self.url).await;
        use std::io::Write as _;
        let names: Vec<&str> = crate::babelfish::SQL_API_STAND_INS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        let _ = writeln!(
            std::io::stderr(),
            "\n*** on Babelfish: {} replaced by stand-ins for ASCII text (see babelfish.rs) ***",
            names.join(", ")
        );
    }

    /// True, after saying so on stderr, when this is a SQL Server test on Babelfish and one of
    /// its parts, `what`, needs what `limitation` says Babelfish lacks: the caller leaves that
    /// part out and runs the rest. False on every other server.
    pub fn part_not_run_on_babelfish(&self, what: &str, limitation: &str) -> bool {
        if !self.babelfish {
            return false;
        }
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** on Babelfish, not run: {what}: {limitation} ***"
        );
        true
    }

    /// The database URL, as applications would pass it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Options the tests use: leases from 1 s (so expiry is quick) to 300 s.
    pub fn options() -> StoreOptions {
        StoreOptions {
            lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(300))
                .expect("bounds"),
            max_connections: 16,
            ..StoreOptions::default()
        }
    }

    /// A store on this database, migrated.
    pub async fn store(&self) -> Store {
        let store = self.store_with(Self::options()).await;
        store.migrate().await.expect("migrate");
        store
    }

    /// A store on this database with these options, not migrated.
    pub async fn store_with(&self, options: StoreOptions) -> Store {
        Store::connect(&self.url, options).await.expect("connect")
    }

    /// The producer's handle on this database, migrated.
    pub async fn outbox(&self) -> Outbox {
        Outbox::from_store(self.store().await)
    }

    /// Stops and starts the database server (PostgreSQL on its own cluster); SQLite has no
    /// server, so closing and reopening the file is the test's part.
    pub async fn restart_server(&self) {
        match (&self.kind, &self.own_cluster) {
            (Kind::Sqlite, _) => {}
            (Kind::Postgres, Some(cluster)) => {
                cluster.stop().expect("stop PostgreSQL");
                cluster.restart().expect("start PostgreSQL again");
            }
            (Kind::Postgres, None) => panic!("restart_server needs TestDb::postgres_own_cluster"),
            (Kind::Mssql, _) => panic!("{MSSQL_CANNOT_RESTART}"),
        }
    }

    /// Stops the database server of a test's own PostgreSQL cluster.
    pub fn stop_server(&self) {
        assert!(self.kind != Kind::Mssql, "{MSSQL_CANNOT_RESTART}");
        self.own_cluster
            .as_ref()
            .expect("stop_server needs TestDb::postgres_own_cluster")
            .stop()
            .expect("stop PostgreSQL");
    }

    /// Crashes the database server of a test's own PostgreSQL cluster: SIGKILL to the
    /// postmaster and all its processes ([`Cluster::crash`]).
    pub fn crash_server(&self) {
        assert!(self.kind != Kind::Mssql, "{MSSQL_CANNOT_RESTART}");
        self.own_cluster
            .as_ref()
            .expect("crash_server needs TestDb::postgres_own_cluster")
            .crash()
            .expect("crash PostgreSQL");
    }

    /// Starts it again (after a crash, once crash recovery is done).
    pub fn start_server(&self) {
        assert!(self.kind != Kind::Mssql, "{MSSQL_CANNOT_RESTART}");
        self.own_cluster
            .as_ref()
            .expect("start_server needs TestDb::postgres_own_cluster")
            .restart()
            .expect("start PostgreSQL");
    }

    /// Every lease row and the row count of every other outbox table, as text, to compare
    /// before and after a call that must write nothing.
    pub async fn snapshot(&self) -> Vec<String> {
        const COUNTS: &str = "SELECT (SELECT count(*) FROM outbox_ops) AS ops, \
             (SELECT count(*) FROM outbox_attempts) AS attempts, \
             (SELECT count(*) FROM outbox_rejections) AS rejections, \
             (SELECT count(*) FROM outbox_admin_log) AS admin_log";
        let leases = match self.kind {
            Kind::Sqlite => {
                "SELECT resource || '|' || coalesce(owner_id, '-') || '|' || \
                 coalesce(expires_at, '-') || '|' || fence AS r FROM outbox_leases ORDER BY resource"
            }
            Kind::Postgres => {
                "SELECT resource || '|' || coalesce(owner_id::text, '-') || '|' || \
                 coalesce(expires_at::text, '-') || '|' || fence AS r FROM outbox_leases ORDER BY resource"
            }
            Kind::Mssql => return mssql::snapshot(&self.url).await,
        };
        with_conn!(self, c => {
            let rows = sqlx::query(leases).fetch_all(&mut c).await.expect("leases");
            let mut out: Vec<String> = rows.iter().map(|r| r.get::<String, _>("r")).collect();
            let counts = sqlx::query(COUNTS).fetch_one(&mut c).await.expect("counts");
            out.push(format!("{:?}", (0..4).map(|i| counts.get::<i64, _>(i)).collect::<Vec<_>>()));
            out
        })
    }

    /// Every admin log row, oldest first, as `actor|action|reason|details`.
    pub async fn admin_log(&self) -> Vec<String> {
        const LOG: &str = "SELECT actor || '|' || action || '|' || reason || '|' || details AS r \
             FROM outbox_admin_log ORDER BY id";
        if self.kind == Kind::Mssql {
            return mssql::admin_log(&self.url).await;
        }
        with_conn!(self, c => {
            let rows = sqlx::query(LOG).fetch_all(&mut c).await.expect("admin log");
            rows.iter().map(|r| r.get::<String, _>("r")).collect()
        })
    }

    /// Every op's idempotency key and state, in enqueue order.
    pub async fn states(&self) -> Vec<(String, String)> {
        self.ops()
            .await
            .into_iter()
            .map(|o| (o.idempotency_key, o.state))
            .collect()
    }

    /// Every op row, in enqueue order, with the columns tests check.
    pub async fn ops(&self) -> Vec<OpRow> {
        let sql = match self.kind {
            Kind::Sqlite => {
                "SELECT *, op_id AS op_text, headers AS headers_text FROM outbox_ops ORDER BY id"
            }
            Kind::Postgres => {
                "SELECT *, op_id::text AS op_text, headers::text AS headers_text FROM outbox_ops ORDER BY id"
            }
            Kind::Mssql => return mssql::ops(&self.url).await,
        };
        with_conn!(self, c => {
            let rows = sqlx::query(sql).fetch_all(&mut c).await.expect("ops");
            rows.iter()
                .map(|r| OpRow {
                    seq: r.get("id"),
                    op_id: r.get("op_text"),
                    resource: r.get("resource"),
                    fence: r.get("fence"),
                    destination: r.get("destination"),
                    idempotency_key: r.get("idempotency_key"),
                    state: r.get("state"),
                    order_key: r.get("order_key"),
                    created_at: r.get("created_at"),
                    next_attempt_at: r.get("next_attempt_at"),
                    body: r.get("body"),
                    content_type: r.get("content_type"),
                    headers: r.get("headers_text"),
                    expire_with_generation: r.get("expire_with_generation"),
                    attempts: r.get("attempts"),
                    last_error: r.get("last_error"),
                })
                .collect()
        })
    }

    /// Every attempt row, in order, with the columns tests check.
    pub async fn attempts(&self) -> Vec<AttemptRow> {
        let sql = match self.kind {
            Kind::Sqlite => {
                "SELECT op_id AS op_text, attempt, dispatcher_fence, outcome, http_status, error, response_excerpt FROM outbox_attempts ORDER BY id"
            }
            Kind::Postgres => {
                "SELECT op_id::text AS op_text, attempt, dispatcher_fence, outcome, http_status, error, response_excerpt FROM outbox_attempts ORDER BY id"
            }
            Kind::Mssql => return mssql::attempts(&self.url).await,
        };
        with_conn!(self, c => {
            let rows = sqlx::query(sql).fetch_all(&mut c).await.expect("attempts");
            rows.iter()
                .map(|r| AttemptRow {
                    op_id: r.get("op_text"),
                    attempt: r.get("attempt"),
                    dispatcher_fence: r.get("dispatcher_fence"),
                    outcome: r.get("outcome"),
                    http_status: r.get("http_status"),
                    error: r.get("error"),
                    excerpt: r.get("response_excerpt"),
                })
                .collect()
        })
    }

    /// Runs one statement written in the SQL SQLite, PostgreSQL and SQL Server all understand
    /// (SQL Server runs it as is); tests use it to tamper with tables the way an operator or a
    /// bug could. Returns the rows it affected.
    pub async fn execute(&self, sql: &'static str) -> u64 {
        self.try_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("execute {sql:?}: {e}"))
    }

    /// [`TestDb::execute`] that may fail: the database's refusal, as text.
    pub async fn try_execute(&self, sql: &'static str) -> Result<u64, String> {
        if self.kind == Kind::Mssql {
            return mssql::try_execute(&self.url, sql).await;
        }
        with_conn!(self, c => sqlx::query(sql)
            .execute(&mut c)
            .await
            .map(|done| done.rows_affected())
            .map_err(|e| e.to_string()))
    }

    /// What the server is doing for this test's database, for a timed-out wait to show:
    /// PostgreSQL's sessions on it (state, wait, blockers, how long, the statement's first
    /// line), every partition lease with its holder and count, and every dispatcher instance. Empty on
    /// the other backends; never panics (it runs while a test is failing).
    pub async fn explain_activity(&self) -> String {
        if self.kind != Kind::Postgres {
            return String::new();
        }
        let Ok(mut c) = PgConnection::connect(&self.url).await else {
            return "(could not connect to show the sessions)".to_owned();
        };
        let sections = [
            (
                "sessions",
                "SELECT concat_ws(' | ', pid, application_name, state, wait_event_type, \
                 wait_event, 'blocked by ' || pg_blocking_pids(pid)::text, \
                 'xact ' || (clock_timestamp() - xact_start)::text, \
                 'query ' || (clock_timestamp() - query_start)::text, \
                 split_part(ltrim(regexp_replace(query, '^(\\s*--[^\\n]*\\n)+', '')), E'\\n', 1)) \
                 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 ORDER BY xact_start NULLS LAST",
            ),
            (
                "partition leases (holder, token, count, time left)",
                "SELECT concat_ws(' | ', resource, owner_id, fence, partitions, \
                 (expires_at - clock_timestamp())::text) FROM outbox_leases \
                 WHERE resource LIKE 'dispatcher/%' ORDER BY resource",
            ),
            (
                "instances",
                "SELECT concat_ws(' | ', instance_id, pid, partitions, 'led ' || led, \
                 'beat ' || (clock_timestamp() - heartbeat_at)::text || ' ago') \
                 FROM outbox_dispatchers ORDER BY instance_id",
            ),
        ];
        let mut out = String::new();
        for (name, sql) in sections {
            out.push_str(&format!("\n{name}:\n"));
            match sqlx::query_scalar::<_, Option<String>>(sql)
                .fetch_all(&mut c)
                .await
            {
                Ok(rows) => {
                    for row in rows.into_iter().flatten() {
                        out.push_str(&format!("  {row}\n"));
                    }
                }
                Err(e) => out.push_str(&format!("  (could not read: {e})\n")),
            }
        }
        out
    }

    /// Moves every lease's expiry `secs` seconds into the past: to the leases, the same as the
    /// database clock running `secs` seconds ahead. Lets tests "advance time" without sleeping.
    pub async fn shift_lease_clock(&self, secs: u32) {
        match self.kind {
            Kind::Sqlite => {
                let mut c = SqliteConnection::connect(&self.url).await.expect("connect");
                sqlx::query(
                    "UPDATE outbox_leases SET expires_at = \
                     strftime('%Y-%m-%dT%H:%M:%fZ', expires_at, printf('-%d seconds', ?1)) \
                     WHERE expires_at IS NOT NULL",
                )
                .bind(secs)
                .execute(&mut c)
                .await
                .expect("shift");
            }
            Kind::Postgres => {
                let mut c = PgConnection::connect(&self.url).await.expect("connect");
                sqlx::query(
                    "UPDATE outbox_leases SET expires_at = expires_at - $1::int * interval '1 second' \
                     WHERE expires_at IS NOT NULL",
                )
                .bind(secs as i32)
                .execute(&mut c)
                .await
                .expect("shift");
            }
            Kind::Mssql => mssql::shift_lease_clock(&self.url, secs).await,
        }
    }
}

/// An attempt row as tests see it.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    /// The op's public id.
    pub op_id: String,
    /// The attempt's number.
    pub attempt: i32,
    /// The dispatcher token that made it.
    pub dispatcher_fence: i64,
    /// delivered, failed or unknown.
    pub outcome: Option<String>,
    /// The answer's status.
    pub http_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
    /// The start of the answer's body.
    pub excerpt: Option<String>,
}

/// An op row as tests see it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpRow {
    /// Enqueue sequence.
    pub seq: i64,
    /// Public id, hyphenated.
    pub op_id: String,
    /// The resource it was enqueued under.
    pub resource: String,
    /// The producer's token.
    pub fence: i64,
    /// Destination name.
    pub destination: String,
    /// Idempotency key.
    pub idempotency_key: String,
    /// Stored state name.
    pub state: String,
    /// Order key, if ordered.
    pub order_key: Option<String>,
    /// Database time of the insert.
    pub created_at: OffsetDateTime,
    /// Database time of the first (next) attempt.
    pub next_attempt_at: OffsetDateTime,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Body content type.
    pub content_type: Option<String>,
    /// Headers as stored (JSON text).
    pub headers: String,
    /// The expire-with-generation flag.
    pub expire_with_generation: bool,
    /// Attempts counted so far.
    pub attempts: i32,
    /// Why the last attempt failed, or why the op was superseded.
    pub last_error: Option<String>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.drop_on_external_server.take() else {
            return;
        };
        let kind = self.kind;
        // Async drop does not exist; a short-lived thread with its own runtime does the job.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                if kind == Kind::Mssql {
                    return mssql::drop_database(&admin_url, &name).await;
                }
                let mut c = PgConnection::connect(&admin_url).await.ok()?;
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::query(AssertSqlSafe(sql))
                    .execute(&mut c)
                    .await
                    .ok()
                    .map(drop)
            })
        })
        .join();
    }
}

fn fresh_database_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "outbox_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn create_database(admin_url: &str, name: &str) {
    let mut c = PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL for the tests: {e}"));
    // The name is generated above from digits only; identifiers cannot be bound.
    let sql = format!("CREATE DATABASE \"{name}\"");
    sqlx::query(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .expect("create test database");
    c.close().await.ok();
}

/// How many partitions each live dispatcher instance leads, as its last heartbeat said;
/// largest first.
pub async fn split(store: &Store) -> Vec<u32> {
    let mut led: Vec<u32> = store
        .instance_list()
        .await
        .expect("list the dispatcher instances")
        .iter()
        .filter(|r| r.live)
        .map(|r| r.led)
        .collect();
    led.sort_unstable_by(|a, b| b.cmp(a));
    led
}
