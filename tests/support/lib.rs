//! The test harness of fenced-outbox: backends (a throwaway PostgreSQL cluster or
//! `DATABASE_URL`, SQLite files, the SQL Server `OUTBOX_MSSQL_URL` names), a fresh database per
//! test, a recording HTTP destination, polling waits, a seeded random source and signals for
//! real processes. Used by `it/`, `chaos/` and by the binary tests of other crates.

pub mod babelfish;
pub mod cases;
pub mod db;
mod dump;
pub mod keys;
mod login;
mod mssql;
pub mod netns;
pub mod patroni;
pub mod pg;
pub mod pgbouncer;
pub mod process;
pub mod receiver;
pub mod rng;
pub mod slow_link;
mod tamper;
pub mod wait;

pub use cases::{EnqueueCase, enqueue_cases};
pub use db::{AttemptRow, Kind, OpRow, TestDb, lease, split};
pub use keys::KeyFiles;
pub use mssql::rcsi as mssql_rcsi;
pub use process::signal;
pub use receiver::{Answer, Received, Receiver, Reply};
pub use rng::Rng;
pub use wait::{wait_for, wait_until, wait_until_explained};

/// Generates, for each named `async fn(TestDb)` of the calling module (which needs `tokio`), one test per backend:
/// `sqlite::name`, `postgres::name` and `mssql::name` (ignored unless asked for, and then it
/// fails without `OUTBOX_MSSQL_URL`: it never passes by pretending). Each test's future is
/// boxed: held inline, a large one overflows the test thread's 2 MiB stack in debug builds.
#[macro_export]
macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    Box::pin(super::$test($crate::TestDb::sqlite().await)).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    Box::pin(super::$test($crate::TestDb::postgres().await)).await
                }
            )*
        }
        mod mssql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "SQL Server: needs OUTBOX_MSSQL_URL and --include-ignored"]
                async fn $test() {
                    Box::pin(super::$test($crate::TestDb::mssql().await)).await
                }
            )*
        }
    };
}
