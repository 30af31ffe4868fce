//! Logins that hold one of the outbox's roles alone, for the tests that try what each role
//! must not do: a role of the PostgreSQL cluster, or a SQL Server login with a user in the
//! test's database.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::db::{Kind, TestDb};
use crate::mssql;

impl TestDb {
    /// A new login holding `role` alone (`outbox_producer` … `outbox_viewer`), and the URL
    /// of this database as it. PostgreSQL: a role of the test's cluster (roles are the
    /// cluster's: a unique name), without a password. SQL Server: a login with a password and
    /// a user in this database, a member of the database role.
    pub async fn login_as(&self, role: &str) -> String {
        assert!(
            role.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "a role name of the outbox's: {role}"
        );
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{role}_{}_{}_{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut url = url::Url::parse(self.url()).expect("the database URL");
        match self.kind() {
            Kind::Postgres => {
                let mut c = PgConnection::connect(self.url()).await.expect("connect");
                for sql in [
                    format!("CREATE ROLE {name} LOGIN"),
                    format!("GRANT {role} TO {name}"),
                ] {
                    // The names are checked above and generated here; identifiers cannot be
                    // bound.
                    sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut c)
                        .await
                        .expect("create the login");
                }
                url.set_password(None).expect("no password");
            }
            Kind::Mssql => {
                let password = format!("Outbox-{nanos}-Role1!");
                let mut c = mssql::connect(self.url()).await;
                // The names and the password are generated here; identifiers cannot be bound.
                let sql = format!(
                    "CREATE LOGIN [{name}] WITH PASSWORD = '{password}';\n\
                     CREATE USER [{name}] FOR LOGIN [{name}];\n\
                     ALTER ROLE [{role}] ADD MEMBER [{name}];"
                );
                mssql::batch(&mut c, &sql)
                    .await
                    .unwrap_or_else(|e| panic!("create the login: {e}"));
                url.set_password(Some(&password)).expect("a password");
            }
            Kind::Sqlite => panic!("SQLite has no logins"),
        }
        url.set_username(&name).expect("a user name");
        url.to_string()
    }
}
