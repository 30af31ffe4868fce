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
//!
//! `wal` fills the other disk a database has: its WAL (`pg_wal`) on a 96 MiB filesystem of its
//! own, the tables on the ordinary one. A physical replication slot that nobody reads (a replica
//! gone for good: the usual way WAL fills a disk in production) keeps every segment, and a
//! logged table of random bytes writes WAL until a write of it fails. PostgreSQL cannot go on
//! without its WAL: the writing process PANICs and the server restarts, again and again, or
//! stays down if its recovery cannot write either. Twelve seconds later the operator's fix:
//! the disk grown by 64 MiB (as a volume is grown), the server started if it had stopped, the
//! slot dropped and a checkpoint run. The same is asserted as for the tables' disk.

use std::time::Duration;

use outbox_tests::pg::{Cluster, Limits};
use outbox_tests::wait_for;
use sqlx::{Connection, PgConnection};

use crate::fault::{Fault, LEASE, limited_cluster, log_since, run_through};
use crate::run::Run;

/// How long the disk stays full.
const FULL_FOR: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let limits = Limits {
        disk_mib: Some(160),
        ..Limits::default()
    };
    let (_cluster, db) = limited_cluster(limits, "on a small disk").await;
    let mut fault = FullDisk { filler: None };
    let outcome = run_through(db, 0xD15C_0001, &mut fault, FULL_FOR).await;
    outcome.assert_recovered("the full disk", LEASE * 4, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal() {
    let limits = Limits {
        wal_disk_mib: Some(WAL_DISK_MIB),
        ..Limits::default()
    };
    let (cluster, db) = limited_cluster(limits, "with its WAL on a small disk").await;
    let mut fault = FullWal {
        cluster: &cluster,
        log_from: 0,
    };
    let outcome = run_through(db, 0xD15C_0002, &mut fault, FULL_FOR).await;
    outcome.assert_recovered("the WAL's full disk", LEASE * 4, true);
}

/// The WAL's filesystem, in MiB.
const WAL_DISK_MIB: u32 = 96;
/// What the operator grows it by.
const WAL_GROWN_BY_MIB: u32 = 64;
/// The replication slot of a replica gone for good.
const SLOT: &str = "replica_gone";

/// The WAL's disk filled through a slot that keeps every segment, then grown.
struct FullWal<'a> {
    cluster: &'a Cluster,
    /// Where the server's log stood when the fault began.
    log_from: usize,
}

impl Fault for FullWal<'_> {
    fn name(&self) -> &'static str {
        "WAL disk full"
    }

    async fn begin(&mut self, run: &Run) -> String {
        self.log_from = self.cluster.log().len();
        let mut conn = PgConnection::connect(run.db.url())
            .await
            .expect("connect the WAL filler");
        sqlx::query("SELECT pg_create_physical_replication_slot($1, true)")
            .bind(SLOT)
            .execute(&mut conn)
            .await
            .expect("create the slot");
        sqlx::raw_sql("CREATE TABLE wal_filler (b bytea)")
            .execute(&mut conn)
            .await
            .expect("create the WAL filler table");
        let noise = noise(1024 * 1024);
        let mut written = 0u64;
        let failed = loop {
            let insert = sqlx::query("INSERT INTO wal_filler VALUES ($1)")
                .bind(&noise)
                .execute(&mut conn)
                .await;
            match insert {
                Ok(_) => written += noise.len() as u64,
                Err(e) => {
                    break e
                        .as_database_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned());
                }
            }
            assert!(
                written < u64::from(WAL_DISK_MIB) * 4 * 1024 * 1024,
                "{} MiB of WAL written and its {WAL_DISK_MIB} MiB disk not full",
                written / (1024 * 1024)
            );
        };
        let log = self.cluster.log();
        let panicked = log_since(&log, self.log_from)
            .lines()
            .find(|l| l.contains("PANIC:"))
            .map(|l| {
                l.split_once("PANIC:")
                    .map_or(l, |(_, m)| m)
                    .trim()
                    .to_owned()
            });
        format!(
            "a slot kept the WAL of {} MiB of rows until its disk was full; the filler's \
             insert failed ({failed}); the server logged PANIC: {}",
            written / (1024 * 1024),
            panicked.as_deref().unwrap_or("no PANIC logged")
        )
    }

    async fn end(&mut self, run: &Run) -> String {
        let cluster = self.cluster;
        let grown = WAL_DISK_MIB + WAL_GROWN_BY_MIB;
        cluster
            .grow_wal_disk(grown)
            .unwrap_or_else(|e| panic!("cannot grow the WAL's disk: {e}"));
        let was_down = !cluster.is_running();
        if was_down {
            tokio::task::block_in_place(|| cluster.restart())
                .unwrap_or_else(|e| panic!("the server did not start on the grown disk: {e}"));
        }
        let mut conn = wait_for(
            Duration::from_secs(60),
            "the server takes connections again",
            || async { PgConnection::connect(run.db.url()).await.ok() },
        )
        .await;
        sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(SLOT)
            .execute(&mut conn)
            .await
            .expect("drop the slot");
        sqlx::raw_sql("DROP TABLE wal_filler; CHECKPOINT")
            .execute(&mut conn)
            .await
            .expect("drop the filler and checkpoint");
        let restarts = log_since(&cluster.log(), self.log_from)
            .matches("all server processes terminated; reinitializing")
            .count();
        format!(
            "the WAL's disk grown to {grown} MiB{}, the slot dropped and a checkpoint run; the \
             server had restarted by itself {restarts} times",
            if was_down {
                " and the stopped server started"
            } else {
                ""
            }
        )
    }
}

/// `len` random bytes (TOAST cannot compress them).
fn noise(len: usize) -> Vec<u8> {
    let mut rng = outbox_tests::Rng::new(0xF111);
    (0..len / 8)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect()
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
        let noise = noise(4 * 1024 * 1024);
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
