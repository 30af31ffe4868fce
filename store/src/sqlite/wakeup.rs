//! The SQLite wake-up: SQLite has no notifications, so an idle dispatcher looks every 4 ms,
//! on a thread of its own, at the header of the database's WAL index (the `-shm` file) and is
//! woken when it changed, that is when any connection committed (an enqueue by another
//! process, above all).
//!
//! Why the header, and why a thread: this is the very check SQLite makes when a read
//! transaction starts (`walIndexTryHdr` compares the 48-byte header with the copy it read last;
//! `PRAGMA data_version` moves exactly when it differs), done as one read of a file the page
//! cache holds, with no SQLite lock, no transaction and no hop to a connection's worker thread.
//! Measured on an idle dispatcher (release build, one destination, defaults; CPU ticks at
//! 100 Hz over 20 s, issue 34): reading `PRAGMA data_version` every 4 ms cost 34-50 ticks
//! (1.7-2.5% of a core; PostgreSQL's idle dispatcher: 3-4); reading the header on a runtime
//! timer, 16-19, most of it the runtime's wake-ups; on a sleeping thread, 10-13, against 5-7
//! with no watcher at all. An op enqueued by another process still reaches its destination
//! about 6 ms after its insert (median of 30; at most 11 ms; 6-7 and 14 ms before). Looking
//! less often would trade latency for CPU; a file watch (inotify) on the WAL would cost nothing
//! while idle, but it needs a platform crate, and it fires when the WAL is written, before the
//! commit shows in the header, so it would still need this look afterwards.
//!
//! The header's layout is the one SQLite documents for its unix and windows VFSes
//! (sqlite.org/walformat.html); what it holds is never interpreted here beyond its version,
//! only compared. A torn read (a writer updating it meanwhile) only means an extra wake-up: the
//! next look differs again from it. Without a readable WAL index (another VFS), the watcher
//! falls back to reading `PRAGMA data_version` every 4 ms, at the cost above.

use std::fs::File;
use std::io::{Read as _, Seek as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use tokio::sync::Notify;

use super::SqliteStore;

/// How often the watcher looks for a commit: the wake-up's latency, at most.
const LOOK_EVERY: Duration = Duration::from_millis(4);
/// The first copy of the WAL index header (`WalIndexHdr`): version, change counter, frame
/// count, checksums and salts. Any commit changes it.
const HEADER_BYTES: usize = 48;
/// The header's first field, in the host's byte order, for the WAL index format SQLite has
/// used since 3.7.0.
const WAL_INDEX_VERSION: u32 = 3_007_000;
const DATA_VERSION_READ: &str = include_str!("../../sql/sqlite/data_version_read.sql");
const DATABASE_FILE_READ: &str = include_str!("../../sql/sqlite/database_file_read.sql");

impl SqliteStore {
    /// Wakes `wake` within a few milliseconds of any commit to the database by any connection
    /// but the watcher's own (the module doc says how, and at what cost); reconnects with
    /// backoff after errors.
    pub(crate) fn listen_for_enqueues(&self, wake: Arc<Notify>) -> tokio::task::JoinHandle<()> {
        let options = self.pool.connect_options();
        crate::dispatch::keep_watching("watching the database for commits", move || {
            let (options, wake) = (options.clone(), wake.clone());
            async move { watch_commits(&options, wake).await }
        })
    }
}

/// Watches for commits on a connection of its own, which keeps the WAL index in place for as
/// long as it looks at it; returns only on an error.
async fn watch_commits(
    options: &SqliteConnectOptions,
    wake: Arc<Notify>,
) -> Result<(), sqlx::Error> {
    let mut c = SqliteConnection::connect_with(options).await?;
    // A read opens the WAL and its index, if the connection had not yet.
    let _: i64 = sqlx::query_scalar(DATA_VERSION_READ)
        .fetch_one(&mut c)
        .await?;
    let file: String = sqlx::query_scalar(DATABASE_FILE_READ)
        .fetch_one(&mut c)
        .await?;
    match WalIndex::open(&format!("{file}-shm")) {
        Ok(index) => Ok(look_on_a_thread(index, wake).await?),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "the WAL index of {file} cannot be read: watching PRAGMA data_version instead, \
                 at a higher CPU cost"
            );
            poll_data_version(&mut c, &wake).await
        }
    }
}

/// The WAL index file, open for reading its header.
#[derive(Debug)]
struct WalIndex(&'static File);

impl WalIndex {
    /// Opens the WAL index at `path` and checks its header's version.
    ///
    /// The descriptor is never closed: closing any descriptor of a file drops every POSIX
    /// lock this process holds on it (sqlite.org/howtocorrupt.html, 2.2), and SQLite's
    /// connections in this process hold theirs on this one: the lock that tells other
    /// processes the index is in use (without it, the next to open the database rebuilds the
    /// index under our readers) and the read locks that keep a checkpoint from overwriting
    /// what a reader still reads. So one descriptor stays open per watcher start (a
    /// dispatcher's start, or a reconnect after an error) until the process exits.
    fn open(path: &str) -> std::io::Result<WalIndex> {
        let index = WalIndex(Box::leak(Box::new(File::open(path)?)));
        let header = index.header()?;
        let version = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        if version != WAL_INDEX_VERSION {
            return Err(std::io::Error::other(format!(
                "its header has version {version}, not {WAL_INDEX_VERSION}"
            )));
        }
        Ok(index)
    }

    /// The header as it is now.
    fn header(&self) -> std::io::Result<[u8; HEADER_BYTES]> {
        let mut file = self.0;
        let mut header = [0; HEADER_BYTES];
        file.rewind()?;
        file.read_exact(&mut header)?;
        Ok(header)
    }
}

/// Looks at `index`'s header every [`LOOK_EVERY`] on a thread of its own (a sleeping thread
/// costs less per look than the runtime's timer) and notifies `wake` whenever it changed;
/// returns the thread's error, and stops the thread when dropped (the listener aborted).
async fn look_on_a_thread(index: WalIndex, wake: Arc<Notify>) -> std::io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let (failed, ended) = tokio::sync::oneshot::channel();
    let looking = stop.clone();
    std::thread::Builder::new()
        .name("outbox-sqlite-wakeup".to_owned())
        .spawn(move || {
            let _ = failed.send(look(&index, &wake, &looking));
        })?;
    let _stop = StopOnDrop(stop);
    match ended.await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::other(
            "the looking thread ended without a word",
        )),
    }
}

/// The looking thread's loop: until `stop`, or an error reading the header.
fn look(index: &WalIndex, wake: &Notify, stop: &AtomicBool) -> std::io::Result<()> {
    let mut seen = index.header()?;
    // A commit may have come while nothing looked (before a reconnect): one claim finds out.
    wake.notify_one();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(LOOK_EVERY);
        let now = index.header()?;
        if now != seen {
            seen = now;
            wake.notify_one();
        }
    }
    Ok(())
}

/// Stops the looking thread when the task that waits for it is dropped.
#[derive(Debug)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The fallback: reads `PRAGMA data_version` every [`LOOK_EVERY`] and notifies `wake` each
/// time it changed; returns only on an error.
async fn poll_data_version(c: &mut SqliteConnection, wake: &Notify) -> Result<(), sqlx::Error> {
    let mut seen: i64 = sqlx::query_scalar(DATA_VERSION_READ)
        .fetch_one(&mut *c)
        .await?;
    wake.notify_one();
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now: i64 = sqlx::query_scalar(DATA_VERSION_READ)
            .fetch_one(&mut *c)
            .await?;
        if now != seen {
            seen = now;
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh database file in WAL mode (its own folder, removed when dropped) and a
    /// connection that writes to it.
    struct Database {
        dir: std::path::PathBuf,
        options: SqliteConnectOptions,
        writer: SqliteConnection,
    }

    impl Database {
        async fn new(name: &str) -> Database {
            let dir =
                std::env::temp_dir().join(format!("outbox-wakeup-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let options = SqliteConnectOptions::new()
                .filename(dir.join("outbox.db"))
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let mut writer = SqliteConnection::connect_with(&options).await.unwrap();
            sqlx::raw_sql("CREATE TABLE t (x INTEGER)")
                .execute(&mut writer)
                .await
                .unwrap();
            Database {
                dir,
                options,
                writer,
            }
        }

        async fn commit(&mut self) {
            sqlx::raw_sql("INSERT INTO t VALUES (1)")
                .execute(&mut self.writer)
                .await
                .unwrap();
        }

        async fn read(&self) {
            let mut reader = SqliteConnection::connect_with(&self.options).await.unwrap();
            sqlx::raw_sql("SELECT count(*) FROM t")
                .execute(&mut reader)
                .await
                .unwrap();
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Waits for `wake`, at most 10 s (the watchers look every 4 ms).
    async fn woken(wake: &Notify) -> bool {
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_header_changes_with_each_commit_and_not_with_reads() {
        let mut db = Database::new("header").await;
        let index = WalIndex::open(&format!("{}-shm", db.dir.join("outbox.db").display())).unwrap();
        let before = index.header().unwrap();
        db.read().await;
        assert_eq!(index.header().unwrap(), before, "a read changed the header");
        db.commit().await;
        let after = index.header().unwrap();
        assert_ne!(after, before, "a commit left the header as it was");
        db.commit().await;
        assert_ne!(
            index.header().unwrap(),
            after,
            "a second commit left the header as it was"
        );
    }

    #[tokio::test]
    async fn the_watcher_wakes_on_another_connections_commit() {
        let mut db = Database::new("thread").await;
        let wake = Arc::new(Notify::new());
        let watcher = {
            let (options, wake) = (db.options.clone(), wake.clone());
            tokio::spawn(async move { watch_commits(&options, wake).await })
        };
        assert!(woken(&wake).await, "no wake-up at the start");
        db.commit().await;
        assert!(woken(&wake).await, "no wake-up after a commit");
        watcher.abort();
    }

    #[tokio::test]
    async fn the_fallback_wakes_on_another_connections_commit() {
        let mut db = Database::new("fallback").await;
        let wake = Arc::new(Notify::new());
        let mut c = SqliteConnection::connect_with(&db.options).await.unwrap();
        let watcher = {
            let wake = wake.clone();
            tokio::spawn(async move { poll_data_version(&mut c, &wake).await })
        };
        assert!(woken(&wake).await, "no wake-up at the start");
        db.commit().await;
        assert!(woken(&wake).await, "no wake-up after a commit");
        watcher.abort();
    }

    #[test]
    fn a_file_that_is_not_a_wal_index_is_refused() {
        let path =
            std::env::temp_dir().join(format!("outbox-wakeup-{}-not.shm", std::process::id()));
        std::fs::write(&path, [0u8; 136]).unwrap();
        let refused = WalIndex::open(&path.display().to_string());
        std::fs::remove_file(&path).unwrap();
        assert!(refused.is_err());
        assert!(WalIndex::open("/nonexistent/outbox.db-shm").is_err());
    }
}
