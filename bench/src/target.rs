//! Where a benchmark runs: a fresh database per run on SQLite (a file in a temp folder) or
//! PostgreSQL (a throwaway cluster with default durability, or `--database-url`), plus a plain
//! sqlx pool with the same settings for the baselines.

use std::time::Duration;

use anyhow::Context as _;
use outbox_store::{Backend, Store, StoreOptions, TtlBounds};
use sqlx::{AssertSqlSafe, Connection as _};

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

    /// The backend's name.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Target::Sqlite => Backend::Sqlite,
            Target::Postgres { .. } => Backend::Postgres,
        }
    }

    /// A new, empty, migrated database.
    pub(crate) async fn fresh(&self) -> anyhow::Result<Db> {
        let db = match self {
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
        };
        store(&db, 2).await?.migrate().await?;
        Ok(db)
    }
}

/// A store on `db` with `connections` pooled connections and leases up to 300 s.
pub(crate) async fn store(db: &Db, connections: u32) -> anyhow::Result<Store> {
    connect(db, connections, false).await
}

/// A store whose sessions are set up as the dispatcher's are, for the claim+complete loop.
pub(crate) async fn dispatcher_store(db: &Db, connections: u32) -> anyhow::Result<Store> {
    connect(db, connections, true).await
}

async fn connect(db: &Db, connections: u32, dispatcher_sessions: bool) -> anyhow::Result<Store> {
    let options = StoreOptions {
        lease_ttl: TtlBounds::new(Duration::from_secs(1), Duration::from_secs(300))?,
        max_connections: connections,
        dispatcher_sessions,
        ..StoreOptions::default()
    };
    Ok(Store::connect(&db.url, options).await?)
}

/// A plain sqlx pool with the store's settings (SQLite: WAL, full fsync, busy timeout).
#[derive(Debug, Clone)]
pub(crate) enum Plain {
    /// PostgreSQL.
    Postgres(sqlx::PgPool),
    /// SQLite.
    Sqlite(sqlx::SqlitePool),
}

impl Plain {
    /// Connects with `connections` pooled connections.
    pub(crate) async fn connect(db: &Db, connections: u32) -> anyhow::Result<Plain> {
        if db.url.starts_with("sqlite:") {
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
