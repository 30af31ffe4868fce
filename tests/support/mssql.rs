//! The SQL Server side of `TestDb`: a fresh database per test on the server `OUTBOX_MSSQL_URL`
//! names, and the raw views of its tables in T-SQL. Every connection is opened with
//! `outbox_store::mssql::connect`, so it runs with the session options the outbox tables need
//! (the filtered indexes refuse writes without them).

use outbox_store::mssql::{Client, ServerProduct};
use tiberius::{FromSql, Query, Row};
use url::Url;

use crate::db::{AttemptRow, OpRow};

/// The variable naming the server; its path (the database) is replaced per test.
pub(crate) const URL_VAR: &str = "OUTBOX_MSSQL_URL";

/// `url` with its path (the database) replaced by `/database`; the login, server and query
/// string are kept. Panics without echoing the URL (it holds a password).
pub(crate) fn with_database(url: &str, database: &str) -> String {
    let mut parsed = Url::parse(url).unwrap_or_else(|e| {
        panic!("{URL_VAR} is not a URL ({e}); expected mssql://user:password@host:1433/db")
    });
    assert!(
        matches!(parsed.scheme(), "mssql" | "sqlserver"),
        "{URL_VAR} must start with mssql://"
    );
    parsed.set_path(&format!("/{database}"));
    parsed.into()
}

/// One connection to `url`; panics with the driver's reason (never the URL). The harness's
/// own connections ask which server answers before anything knows, so they may reach
/// Babelfish, which `outbox_store::mssql::connect` refuses without the test-only setting.
pub(crate) async fn connect(url: &str) -> Client {
    outbox_store::mssql::connect(&crate::babelfish::allowed_for_tests(url))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to SQL Server for the tests: {e}"))
}

/// Runs one T-SQL batch for its effect, on `c`.
pub(crate) async fn batch(c: &mut Client, sql: &str) -> Result<(), tiberius::error::Error> {
    c.simple_query(sql).await?.into_results().await.map(drop)
}

/// Which server `OUTBOX_MSSQL_URL` names, asked once per test process and said once on
/// stderr (past the harness's capture), so every run shows what it ran on.
pub(crate) async fn server(admin_url: &str) -> ServerProduct {
    static SERVER: tokio::sync::OnceCell<ServerProduct> = tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let mut c = connect(admin_url).await;
            let product = outbox_store::mssql::server_product(&mut c)
                .await
                .unwrap_or_else(|e| panic!("cannot ask which server {URL_VAR} names: {e}"));
            c.close().await.ok();
            let said = if product.babelfish {
                format!(
                    "SQL Server tests run on Babelfish for PostgreSQL ({}): the tests that need \
                     what it lacks (locking hints first) are skipped there, each saying why; \
                     the store is opened with AllowBabelfishForTests=true",
                    product.version
                )
            } else {
                let isolation = if rcsi() {
                    "READ_COMMITTED_SNAPSHOT on"
                } else {
                    "READ_COMMITTED_SNAPSHOT off (OUTBOX_MSSQL_RCSI=off): locking READ COMMITTED"
                };
                format!(
                    "SQL Server tests run on {}, their databases with {isolation}",
                    product.version
                )
            };
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "\n*** {said} ***");
            product
        })
        .await
        .clone()
}

/// `url` as the tests' stores open it: on Babelfish, with the setting that allows it for tests.
pub(crate) fn for_tests(url: &str, server: &ServerProduct) -> String {
    if server.babelfish {
        crate::babelfish::allowed_for_tests(url)
    } else {
        url.to_owned()
    }
}

/// Whether the tests' SQL Server databases read committed snapshots (RCSI): yes unless
/// `OUTBOX_MSSQL_RCSI` is `off`. Babelfish has no such switch: its READ COMMITTED reads
/// snapshots either way, so it cannot show the locking half.
pub fn rcsi() -> bool {
    std::env::var("OUTBOX_MSSQL_RCSI").map_or(true, |v| v != "off")
}

/// Creates database `name` on the server of `admin_url` (a URL of `master`). On SQL Server
/// with read committed snapshot isolation on; Babelfish refuses that switch, and its READ
/// COMMITTED is PostgreSQL's, which reads snapshots already.
pub(crate) async fn create_database(admin_url: &str, name: &str, server: &ServerProduct) {
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database names are generated from letters, digits and underscores: {name}"
    );
    let mut c = connect(admin_url).await;
    // A leftover of an earlier run under a reused process id would make CREATE fail.
    drop_existing(&mut c, name, server).await;
    // Identifiers cannot be bound; the name is checked above. One statement per batch: each
    // ALTER DATABASE needs the database to exist, and CREATE DATABASE may not share a
    // transaction with anything.
    // Every SQL Server test runs under READ_COMMITTED_SNAPSHOT (RCSI), the default of Azure
    // SQL Database: a plain read there takes no shared lock and sees the last committed row
    // version, the harder case for the fence, whose checks rely on their locking hints
    // (HOLDLOCK, UPDLOCK) alone to wait for a takeover. ALLOW_SNAPSHOT_ISOLATION as well, so
    // nothing that asks for SNAPSHOT is refused.
    // OUTBOX_MSSQL_RCSI=off keeps SQL Server's on-premises default instead, locking READ
    // COMMITTED, where a plain read waits for a row another transaction writes (issue 34):
    // the suites run both ways (ops/test-mssql.sh).
    let mut statements = vec![format!("CREATE DATABASE [{name}]")];
    if !server.babelfish && rcsi() {
        statements.push(format!(
            "ALTER DATABASE [{name}] SET READ_COMMITTED_SNAPSHOT ON"
        ));
        statements.push(format!(
            "ALTER DATABASE [{name}] SET ALLOW_SNAPSHOT_ISOLATION ON"
        ));
    }
    for sql in statements {
        // CREATE DATABASE copies `model` under an exclusive lock: tests creating their
        // databases at once may find it taken (error 1807), and a server just started may
        // still be recovering it. Both pass; retry them with a short backoff.
        let mut tries = 0;
        loop {
            match batch(&mut c, &sql).await {
                Ok(()) => break,
                Err(e) if retry_create(&e, server) && tries < 10 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200 * tries)).await;
                }
                Err(e) => {
                    drop_existing(&mut c, name, server).await;
                    panic!("cannot create the test database {name}: {e}")
                }
            }
        }
    }
    c.close().await.ok();
}

/// "Could not obtain exclusive lock on database 'model'".
const MODEL_LOCKED: u32 = 1807;

/// Whether a CREATE DATABASE that failed with `e` may pass when tried again: `model` was
/// locked (SQL Server), or two creations changed the catalog at once (Babelfish: "tuple
/// concurrently updated").
fn retry_create(e: &tiberius::error::Error, server: &ServerProduct) -> bool {
    e.code() == Some(MODEL_LOCKED)
        || (server.babelfish && e.to_string().contains("tuple concurrently updated"))
}

/// Drops `name` if it exists. On SQL Server its sessions are killed first (SINGLE_USER WITH
/// ROLLBACK IMMEDIATE), and the drop runs in the same batch, so nothing can take the one slot
/// between; Babelfish has no single-user mode and drops the database as it is.
async fn drop_existing(c: &mut Client, name: &str, server: &ServerProduct) -> bool {
    let sql = if server.babelfish {
        // Its sessions are ended first (KILL), or the drop is refused while one is connected.
        let sessions = format!(
            "SELECT CAST(session_id AS int) AS id FROM sys.dm_exec_sessions \
             WHERE database_id = DB_ID(N'{name}') AND session_id <> @@SPID"
        );
        let ids: Vec<i32> = match c.simple_query(sessions).await {
            Ok(stream) => stream
                .into_first_result()
                .await
                .unwrap_or_default()
                .iter()
                .filter_map(|r| r.get::<i32, _>("id"))
                .collect(),
            Err(_) => Vec::new(),
        };
        for id in ids {
            // One may have ended meanwhile: its KILL fails, which is what was wanted.
            let _ = batch(c, &format!("KILL {id}")).await;
        }
        format!("IF DB_ID(N'{name}') IS NOT NULL DROP DATABASE [{name}]")
    } else {
        format!(
            "IF DB_ID(N'{name}') IS NOT NULL \
             BEGIN ALTER DATABASE [{name}] SET SINGLE_USER WITH ROLLBACK IMMEDIATE; \
             DROP DATABASE [{name}]; END"
        )
    };
    batch(c, &sql).await.is_ok()
}

/// Drops database `name` on the server of `admin_url`, whoever is still connected to it.
pub(crate) async fn drop_database(admin_url: &str, name: &str) -> Option<()> {
    let server = server(admin_url).await;
    let allowed = crate::babelfish::allowed_for_tests(admin_url);
    let mut c = outbox_store::mssql::connect(&allowed).await.ok()?;
    // A process of the test (a dispatcher's pool) may reconnect between the ALTER and the
    // DROP and take the single slot: try a few times.
    for attempt in 0..5u64 {
        if drop_existing(&mut c, name, &server).await {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200 * (attempt + 1))).await;
    }
    c.close().await.ok()
}

/// Column `name` of `row`, NULL allowed; panics naming the column when it cannot be read.
fn opt<'a, T: FromSql<'a>>(row: &'a Row, name: &str) -> Option<T> {
    row.try_get(name)
        .unwrap_or_else(|e| panic!("column {name}: {e}"))
}

/// Column `name` of `row`, which must not be NULL.
fn req<'a, T: FromSql<'a>>(row: &'a Row, name: &str) -> T {
    opt(row, name).unwrap_or_else(|| panic!("column {name} is NULL"))
}

/// The rows of one statement without parameters.
async fn rows(url: &str, sql: &str, what: &str) -> Vec<Row> {
    let mut c = connect(url).await;
    let result = match c.simple_query(sql).await {
        Ok(stream) => stream.into_first_result().await,
        Err(e) => Err(e),
    };
    let rows = result.unwrap_or_else(|e| panic!("{what}: {e}"));
    c.close().await.ok();
    rows
}

/// See `TestDb::snapshot`: the lease rows as text, then the counts of the other tables.
pub(crate) async fn snapshot(url: &str) -> Vec<String> {
    const LEASES: &str = "SELECT CONCAT(resource, '|', COALESCE(CAST(owner_id AS varchar(36)), '-'), \
         '|', COALESCE(CONVERT(varchar(40), expires_at, 127), '-'), '|', fence) AS r \
         FROM dbo.outbox_leases ORDER BY resource";
    const COUNTS: &str = "SELECT (SELECT COUNT_BIG(*) FROM dbo.outbox_ops) AS ops, \
         (SELECT COUNT_BIG(*) FROM dbo.outbox_attempts) AS attempts, \
         (SELECT COUNT_BIG(*) FROM dbo.outbox_rejections) AS rejections, \
         (SELECT COUNT_BIG(*) FROM dbo.outbox_admin_log) AS admin_log";
    let mut out: Vec<String> = rows(url, LEASES, "leases")
        .await
        .iter()
        .map(|r| req::<&str>(r, "r").to_owned())
        .collect();
    let counts = rows(url, COUNTS, "counts").await;
    let counts = counts.first().expect("counts: one row");
    let counts: Vec<i64> = ["ops", "attempts", "rejections", "admin_log"]
        .iter()
        .map(|name| req::<i64>(counts, name))
        .collect();
    out.push(format!("{counts:?}"));
    out
}

/// See `TestDb::admin_log`.
pub(crate) async fn admin_log(url: &str) -> Vec<String> {
    const LOG: &str = "SELECT CONCAT(actor, '|', action, '|', reason, '|', details) AS r \
         FROM dbo.outbox_admin_log ORDER BY id";
    rows(url, LOG, "admin log")
        .await
        .iter()
        .map(|r| req::<&str>(r, "r").to_owned())
        .collect()
}

/// See `TestDb::ops`.
pub(crate) async fn ops(url: &str) -> Vec<OpRow> {
    const OPS: &str = "SELECT id, LOWER(CONVERT(varchar(36), op_id)) AS op_text, resource, fence, \
         destination, idempotency_key, state, order_key, created_at, next_attempt_at, body, \
         content_type, headers AS headers_text, expire_with_generation, attempts, last_error \
         FROM dbo.outbox_ops ORDER BY id";
    rows(url, OPS, "ops")
        .await
        .iter()
        .map(|r| OpRow {
            seq: req(r, "id"),
            op_id: req::<&str>(r, "op_text").to_owned(),
            resource: req::<&str>(r, "resource").to_owned(),
            fence: req(r, "fence"),
            destination: req::<&str>(r, "destination").to_owned(),
            idempotency_key: req::<&str>(r, "idempotency_key").to_owned(),
            state: req::<&str>(r, "state").to_owned(),
            order_key: opt::<&str>(r, "order_key").map(str::to_owned),
            created_at: req(r, "created_at"),
            next_attempt_at: req(r, "next_attempt_at"),
            body: req::<&[u8]>(r, "body").to_vec(),
            content_type: opt::<&str>(r, "content_type").map(str::to_owned),
            headers: req::<&str>(r, "headers_text").to_owned(),
            expire_with_generation: req(r, "expire_with_generation"),
            attempts: req(r, "attempts"),
            last_error: opt::<&str>(r, "last_error").map(str::to_owned),
        })
        .collect()
}

/// See `TestDb::attempts`.
pub(crate) async fn attempts(url: &str) -> Vec<AttemptRow> {
    const ATTEMPTS: &str = "SELECT LOWER(CONVERT(varchar(36), op_id)) AS op_text, attempt, \
         dispatcher_fence, outcome, http_status, error, response_excerpt \
         FROM dbo.outbox_attempts ORDER BY id";
    rows(url, ATTEMPTS, "attempts")
        .await
        .iter()
        .map(|r| AttemptRow {
            op_id: req::<&str>(r, "op_text").to_owned(),
            attempt: req(r, "attempt"),
            dispatcher_fence: req(r, "dispatcher_fence"),
            outcome: opt::<&str>(r, "outcome").map(str::to_owned),
            http_status: opt(r, "http_status"),
            error: opt::<&str>(r, "error").map(str::to_owned),
            excerpt: opt::<&str>(r, "response_excerpt").map(str::to_owned),
        })
        .collect()
}

/// See `TestDb::try_execute`: the statement as written, its affected row count, or the
/// server's refusal as text.
pub(crate) async fn try_execute(url: &str, sql: &str) -> Result<u64, String> {
    let mut c = connect(url).await;
    let done = c.execute(sql, &[]).await.map(|r| r.total());
    c.close().await.ok();
    done.map_err(|e| e.to_string())
}

/// See `TestDb::babelfish_sql_api_stand_ins`.
pub(crate) async fn install_stand_ins(url: &str) {
    let mut c = connect(url).await;
    for (name, create) in crate::babelfish::SQL_API_STAND_INS {
        batch(&mut c, &format!("DROP FUNCTION {name}"))
            .await
            .unwrap_or_else(|e| panic!("drop {name}: {e}"));
        batch(&mut c, create)
            .await
            .unwrap_or_else(|e| panic!("create the stand-in {name}: {e}"));
    }
    c.close().await.ok();
}

/// See `TestDb::shift_lease_clock`.
pub(crate) async fn shift_lease_clock(url: &str, secs: u32) {
    let secs = i32::try_from(secs).expect("a shift below 2^31 seconds");
    let mut c = connect(url).await;
    let mut q = Query::new(
        "UPDATE dbo.outbox_leases SET expires_at = DATEADD(SECOND, -@P1, expires_at) \
         WHERE expires_at IS NOT NULL",
    );
    q.bind(secs);
    q.execute(&mut c).await.expect("shift");
    c.close().await.ok();
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_names_another_database_and_keeps_the_rest() {
        let cases = [
            (
                "mssql://sa:p%2Fw%3Fd%40@127.0.0.1:14330/master?TrustServerCertificate=true",
                "mssql://sa:p%2Fw%3Fd%40@127.0.0.1:14330/outbox_test_1_0?TrustServerCertificate=true",
            ),
            (
                "mssql://sa:x@h:1433/db",
                "mssql://sa:x@h:1433/outbox_test_1_0",
            ),
            ("mssql://sa:x@h:1433", "mssql://sa:x@h:1433/outbox_test_1_0"),
            (
                "sqlserver://sa:x@h/?Encrypt=false&TrustServerCertificate=true",
                "sqlserver://sa:x@h/outbox_test_1_0?Encrypt=false&TrustServerCertificate=true",
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(with_database(url, "outbox_test_1_0"), expected, "{url}");
        }
    }
}
