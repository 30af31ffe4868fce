//! What a thief of the database's storage would read: a `pg_dump` of the test database, or a
//! SQLite database's file with its write-ahead log.

use crate::db::{Kind, TestDb};

impl TestDb {
    /// The database as a dump holds it: `pg_dump`'s output on PostgreSQL, the file and its
    /// `-wal` on SQLite; `None` on SQL Server (no dump tool here).
    pub async fn dump(&self) -> Option<Vec<u8>> {
        match self.kind() {
            Kind::Postgres => {
                let program = crate::pg::bin_dir()
                    .map(|d| d.join("pg_dump"))
                    .filter(|p| p.is_file())
                    .unwrap_or_else(|| "pg_dump".into());
                let out = tokio::process::Command::new(&program)
                    .arg("--no-owner")
                    .arg(format!("--dbname={}", self.url()))
                    .output()
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
                assert!(
                    out.status.success(),
                    "pg_dump: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                Some(out.stdout)
            }
            Kind::Sqlite => {
                let path = self
                    .url()
                    .strip_prefix("sqlite://")
                    .and_then(|p| p.split('?').next())
                    .expect("a sqlite:// URL");
                let mut bytes = std::fs::read(path).expect("the database file");
                if let Ok(wal) = std::fs::read(format!("{path}-wal")) {
                    bytes.extend(wal);
                }
                Some(bytes)
            }
            Kind::Mssql => None,
        }
    }
}
