//! Where a benchmark runs: a fresh database per run on SQLite (a file in a temp folder),
//! PostgreSQL (a throwaway cluster with default durability, or `--database-url`) or SQL Server
//! (`--mssql-url`), plus plain connections with the same settings for the baselines (a sqlx
//! pool; raw tiberius clients on SQL Server).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use outbox_store::{Backend, ProducerCalls, Store, StoreOptions, TtlBounds};
use sqlx::{AssertSqlSafe, Connection as _};
use tokio::sync::Mutex;

/// The database server a scenario runs on.
#[derive(Debug)]
pub(crate) enum Target {
    /// SQLite files in a temp folder.
    Sqlite,
    /// A PostgreSQL server: databases are created on it per run.
    Postgres {
        /// URL of a database where `CREATE DATABASE` may run.
        admin_url: String,
        /// The throwaway cluster, kept alive while benchmarks run.
        _cluster: Option<outbox_tests::pg::Cluster>,
    },
    /// A SQL Server: databases are created on it per run, with READ_COMMITTED_SNAPSHOT on.
    /// Or Babelfish for PostgreSQL, which refuses that switch (its READ COMMITTED reads
    /// snapshots already) and ignores locking hints: its rows are labelled as Babelfish.
    Mssql {
        /// URL of a database where `CREATE DATABASE` may run (e.g. master).
        admin_url: String,
        /// The server is Babelfish for PostgreSQL.
        babelfish: bool,
    },
}

/// One run's fresh database.
#[derive(Debug)]
pub(crate) struct Db {
    /// Its URL.
    pub(crate) url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Target {
    /// PostgreSQL at `url`, or a throwaway cluster with default durability.
    pub(crate) fn postgres(url: Option<&str>) -> anyhow::Result<Target> {
        match url {
            Some(url) => Ok(Target::Postgres {
                admin_url: url.to_owned(),
                _cluster: None,
            }),
            None => {
                let cluster =
                    outbox_tests::pg::Cluster::start_durable().map_err(anyhow::Error::msg)?;
                Ok(Target::Postgres {
                    admin_url: cluster.url("postgres"),
                    _cluster: Some(cluster),
                })
            }
        }
    }

    /// SQL Server at `url` (`--mssql-url`); there is no throwaway server to fall back on.
    /// Asks which server answers: SQL Server, or Babelfish for PostgreSQL (said on stderr).
    pub(crate) async fn mssql(url: Option<&str>) -> anyhow::Result<Target> {
        let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
            anyhow::bail!(
                "--backend mssql (and all) needs a SQL Server: pass --mssql-url (or set \
                 OUTBOX_MSSQL_URL) to a database where CREATE DATABASE may run, e.g. \
                 mssql://sa:PASSWORD@localhost:1433/master?TrustServerCertificate=true"
            );
        };
        // A URL that names no server is refused now, not after the other backends ran.
        mssql_with_database(url, "outbox_bench")?;
        // Allowed on Babelfish, which `connect` refuses otherwise: a benchmark is a test, and
        // the rows say where they ran.
        let url = &outbox_tests::babelfish::allowed_for_tests(url);
        let mut c = outbox_store::mssql::connect(url)
            .await
            .context("connect to SQL Server (--mssql-url)")?;
        let server = outbox_store::mssql::server_product(&mut c).await?;
        c.close().await.ok();
        eprintln!(
            "--backend mssql runs on {}{}",
            server.version,
            if server.babelfish {
                " (Babelfish for PostgreSQL: locking hints are ignored; rows say mssql-babelfish)"
            } else {
                ""
            }
        );
        Ok(Target::Mssql {
            admin_url: url.to_owned(),
            babelfish: server.babelfish,
        })
    }

    /// The name rows carry: the backend's, and `mssql-babelfish` on Babelfish for PostgreSQL.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Target::Mssql {
                babelfish: true, ..
            } => "mssql-babelfish",
            _ => self.backend().name(),
        }
    }

    /// The backend's name.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Target::Sqlite => Backend::Sqlite,
            Target::Postgres { .. } => Backend::Postgres,
            Target::Mssql { .. } => Backend::Mssql,
        }
    }

    /// A new, empty, migrated database.
    pub(crate) async fn fresh(&self) -> anyhow::Result<Db> {
        let db = self.fresh_unmigrated().await?;
        store(&db, 2).await?.migrate().await?;
        Ok(db)
    }

    /// A new, empty database without the outbox's tables (for another system's schema).
    pub(crate) async fn fresh_unmigrated(&self) -> anyhow::Result<Db> {
        Ok(match self {
            Target::Sqlite => {
                let dir = tempfile::tempdir()?;
                Db {
                    url: format!("sqlite://{}", dir.path().join("bench.db").display()),
                    _dir: Some(dir),
                }
            }
            Target::Postgres { admin_url, .. } => {
                let name = format!("outbox_bench_{}", uuid::Uuid::new_v4().simple());
                let mut c = sqlx::PgConnection::connect(admin_url)
                    .await
                    .context("connect to PostgreSQL")?;
                sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut c)
                    .await?;
                Db {
                    url: outbox_tests::pg::with_database(admin_url, &name),
                    _dir: None,
                }
            }
            Target::Mssql {
                admin_url,
                babelfish,
            } => {
                let name = format!("outbox_bench_{}", uuid::Uuid::new_v4().simple());
                let mut c = outbox_store::mssql::connect(admin_url)
                    .await
                    .context("connect to SQL Server (--mssql-url)")?;
                // Each its own batch: CREATE DATABASE must be alone in one on Azure SQL, and
                // the ALTER needs the database to exist (nobody else is connected to it yet).
                let mut statements = vec![format!("CREATE DATABASE [{name}]")];
                if !babelfish {
                    statements.push(format!(
                        "ALTER DATABASE [{name}] SET READ_COMMITTED_SNAPSHOT ON"
                    ));
                }
                for sql in statements {
                    let done = async { c.simple_query(sql).await?.into_results().await };
                    done.await
                        .with_context(|| format!("create the database {name}"))?;
                }
                c.close().await.ok();
                // With the admin URL's AllowBabelfishForTests=true (see `mssql`).
                let url = mssql_with_database(admin_url, &name)?;
                Db { url, _dir: None }
            }
        })
    }
}

/// A store on `db` with `connections` pooled connections and leases up to 300 s.
pub(crate) async fn store(db: &Db, connections: u32) -> anyhow::Result<Store> {
    connect(db, connections, false, ProducerCalls::Auto).await
}

/// [`store`] whose producer calls go `calls`' way (PostgreSQL).
pub(crate) async fn producer_store(
    db: &Db,
    connections: u32,
    calls: ProducerCalls,
) -> anyhow::Result<Store> {
    connect(db, connections, false, calls).await
}

/// A store whose sessions are set up as the dispatcher's are, for the claim+complete loop.
pub(crate) async fn dispatcher_store(db: &Db, connections: u32) -> anyhow::Result<Store> {
    connect(db, connections, true, ProducerCalls::Auto).await
}

async fn connect(
    db: &Db,
    connections: u32,
    dispatcher_sessions: bool,
    producer_calls: ProducerCalls,
) -> anyhow::Result<Store> {
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(300))?,
        max_connections: connections,
        dispatcher_sessions,
        producer_calls,
        ..StoreOptions::default()
    };
    Ok(Store::connect(&db.url, options).await?)
}

/// `admin_url` with its path replaced by `/database`, its query string kept: the URL of a
/// database created on the server `admin_url` names. The URL is never echoed in errors.
pub(crate) fn mssql_with_database(admin_url: &str, database: &str) -> anyhow::Result<String> {
    let mut url = url::Url::parse(admin_url)
        .map_err(|e| anyhow::anyhow!("--mssql-url is not a valid mssql:// URL ({e})"))?;
    anyhow::ensure!(
        url.has_host(),
        "--mssql-url names no server: mssql://user:password@host:1433/master"
    );
    url.set_path(&format!("/{database}"));
    Ok(url.into())
}

/// Plain connections with the store's settings, for the baselines: a sqlx pool (SQLite: WAL,
/// full fsync, busy timeout), or on SQL Server raw tiberius clients with the outbox's session
/// options.
#[derive(Debug, Clone)]
pub(crate) enum Plain {
    /// PostgreSQL.
    Postgres(sqlx::PgPool),
    /// SQLite.
    Sqlite(sqlx::SqlitePool),
    /// SQL Server: one client per concurrent user, user `i` taking `clients[i % len]`.
    Mssql(Arc<[Mutex<outbox_store::mssql::Client>]>),
}

impl Plain {
    /// Connects with `connections` pooled connections (on SQL Server, `connections` clients).
    pub(crate) async fn connect(db: &Db, connections: u32) -> anyhow::Result<Plain> {
        if db.url.starts_with("mssql:") || db.url.starts_with("sqlserver:") {
            let mut clients = Vec::with_capacity(connections.max(1) as usize);
            for _ in 0..connections.max(1) {
                let client = outbox_store::mssql::connect(&db.url)
                    .await
                    .context("connect to SQL Server")?;
                clients.push(Mutex::new(client));
            }
            Ok(Plain::Mssql(clients.into()))
        } else if db.url.starts_with("sqlite:") {
            let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse()?;
            let options = options
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true);
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(connections)
                .connect_with(options)
                .await?;
            Ok(Plain::Sqlite(pool))
        } else {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(connections)
                .connect(&db.url)
                .await?;
            Ok(Plain::Postgres(pool))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mssql_with_database;

    #[test]
    fn the_run_url_names_the_new_database_and_keeps_the_query() {
        let cases = [
            (
                "mssql://sa:p%40ss%2Fw@db.example:1433/master?TrustServerCertificate=true",
                "mssql://sa:p%40ss%2Fw@db.example:1433/outbox_bench_x?TrustServerCertificate=true",
            ),
            (
                "mssql://sa:x@localhost/master?Encrypt=false&Application%20Name=bench",
                "mssql://sa:x@localhost/outbox_bench_x?Encrypt=false&Application%20Name=bench",
            ),
            (
                "sqlserver://sa:x@h:14330",
                "sqlserver://sa:x@h:14330/outbox_bench_x",
            ),
            ("mssql://sa:x@h/", "mssql://sa:x@h/outbox_bench_x"),
        ];
        for (admin, expected) in cases {
            assert_eq!(
                mssql_with_database(admin, "outbox_bench_x").unwrap(),
                expected
            );
        }
    }

    #[test]
    fn a_url_without_a_server_is_refused_without_echoing_it() {
        for bad in ["mssql:///master", "not a url hunter2"] {
            let err = mssql_with_database(bad, "outbox_bench_x")
                .unwrap_err()
                .to_string();
            assert!(err.contains("--mssql-url"), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
