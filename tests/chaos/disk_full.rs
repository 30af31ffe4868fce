//! The database's disk fills up (issue 38): PostgreSQL on a 160 MiB filesystem of its own (a
//! tmpfs), which another table fills to the brim while four Rust workers and a Python one
//! enqueue and two dispatchers deliver; twelve seconds later that table is dropped and the
//! space is back.
//!
//! While the disk is full, enqueues, claims, completions and lease renewals fail as they need
//! a page. The run shows: every refusal a producer got said "unavailable" (never stale, never
//! an untyped error, no server source line), nothing accepted was lost or marked delivered
//! without a 2xx (the chaos checker's counts), the dispatchers kept running, and deliveries
//! and enqueues resumed by themselves once the space was back. It prints its figures: the
//! refusals during the fault, and the time from the free to the next delivery and to the next
//! accepted enqueue.

use std::time::Duration;

use outbox_tests::TestDb;
use outbox_tests::pg::{Cluster, Limits};
use sqlx::{Connection, PgConnection};

use crate::fault::{Fault, LEASE, run_through};
use crate::run::Run;

/// How long the disk stays full.
const FULL_FOR: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let limits = Limits {
        disk_mib: Some(160),
        ..Limits::default()
    };
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_limited(limits))
        .await
        .expect("cluster start task")
        .unwrap_or_else(|e| panic!("cannot start a PostgreSQL on a small disk: {e}"));
    let db = TestDb::postgres_on(&cluster.url("postgres")).await;
    let mut fault = FullDisk { filler: None };
    let outcome = run_through(db, 0xD15C_0001, &mut fault, FULL_FOR).await;
    outcome.assert_recovered("the full disk", LEASE * 4, true);
}

/// The disk filled by another table, then freed by dropping it.
struct FullDisk {
    filler: Option<Filler>,
}

impl Fault for FullDisk {
    fn name(&self) -> &'static str {
        "disk full"
    }

    async fn begin(&mut self, run: &Run) -> String {
        let mut filler = Filler::connect(run.db.url()).await;
        let written = filler.fill().await;
        self.filler = Some(filler);
        format!(
            "a table of random bytes filled the disk to the last page ({} MiB)",
            written / (1024 * 1024)
        )
    }

    async fn end(&mut self, _run: &Run) -> String {
        if let Some(filler) = self.filler.take() {
            filler.free().await;
        }
        "the table dropped".to_owned()
    }
}

/// The other table that fills the disk: one connection of its own, opened before the disk
/// fills (a new one may not get in then).
struct Filler {
    conn: PgConnection,
}

impl Filler {
    async fn connect(url: &str) -> Filler {
        let mut conn = PgConnection::connect(url)
            .await
            .expect("connect the filler");
        // Unlogged: its rows fill the tables' files, not the WAL, whose 32-48 MB of segments
        // are recycled; random bytes, which TOAST cannot compress.
        sqlx::raw_sql("CREATE UNLOGGED TABLE filler (b bytea)")
            .execute(&mut conn)
            .await
            .expect("create the filler table");
        Filler { conn }
    }

    /// Inserts rows of 4 MiB, then of 64 KiB, then of 4 KiB, each until the disk refuses
    /// one (SQLSTATE 53100): the disk is full to the last page. The rows are random bytes made
    /// here once (TOAST cannot compress them), so filling costs the database only the writes.
    /// Returns the bytes written.
    async fn fill(&mut self) -> u64 {
        let mut rng = outbox_tests::Rng::new(0xF111);
        let noise: Vec<u8> = (0..4 * 1024 * 1024 / 8)
            .flat_map(|_| rng.next_u64().to_le_bytes())
            .collect();
        let mut written = 0u64;
        for size in [4 * 1024 * 1024usize, 64 * 1024, 4 * 1024] {
            loop {
                let insert = sqlx::query("INSERT INTO filler VALUES ($1)")
                    .bind(&noise[..size])
                    .execute(&mut self.conn)
                    .await;
                match insert {
                    Ok(_) => written += size as u64,
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("53100") => break,
                    Err(e) => panic!("filling the disk failed otherwise than full: {e}"),
                }
            }
        }
        written
    }

    /// Drops the table: its files are emptied at the commit.
    async fn free(mut self) {
        sqlx::raw_sql("DROP TABLE filler")
            .execute(&mut self.conn)
            .await
            .expect("drop the filler table");
    }
}
