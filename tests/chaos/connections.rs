//! No connections left (issue 38): PostgreSQL with `max_connections = 50` (none reserved for
//! superusers). While four Rust workers and a Python one enqueue and two dispatchers deliver,
//! other clients take every free slot, the outbox's own sessions are ended (as an
//! administrator's `pg_terminate_backend`, or a restart, would), and the other clients take
//! the slots those freed too, keeping every slot taken for twelve seconds; then they let go.
//!
//! The run shows what the full disk's does (every refusal "unavailable", nothing lost, the
//! dispatchers still running, delivery resumed by itself), and that nobody tried to reconnect
//! in a tight loop: the server's log counts the outbox's connection attempts while the slots
//! were taken (the other clients come over the Unix socket, the outbox over TCP).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use outbox_tests::pg::{Cluster, Limits};
use sqlx::{Connection, PgConnection};

use crate::fault::{Fault, LEASE, limited_cluster, run_through};
use crate::run::Run;

/// How long every slot stays taken.
const TAKEN_FOR: Duration = Duration::from_secs(12);
/// The server's connection slots.
const SLOTS: u32 = 50;
/// The processes that connect over TCP while the slots are taken: two dispatchers, five
/// workers.
const PROCESSES: u32 = 7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let limits = Limits {
        max_connections: Some(SLOTS),
        ..Limits::default()
    };
    let (cluster, db) = limited_cluster(limits, "with few connections").await;
    let name = db
        .url()
        .rsplit('/')
        .next()
        .expect("a database name")
        .to_owned();
    let mut fault = Hog {
        url: cluster.socket_url(&name),
        cluster: &cluster,
        log_from: 0,
        attempts: 0,
        held: Vec::new(),
        grabbing: None,
    };
    let outcome = run_through(db, 0xC044_0001, &mut fault, TAKEN_FOR).await;
    let per_second = f64::from(fault.attempts) / TAKEN_FOR.as_secs_f64() / f64::from(PROCESSES);
    crate::run::say(&format!(
        "connections: {} connection attempts by the outbox's {PROCESSES} processes while every \
         slot was taken ({per_second:.1} a second each)",
        fault.attempts
    ));
    outcome.assert_recovered("no connections left", LEASE * 4, true);
    // Backing off: sqlx's own retry within one acquire (10 ms doubling), then the store's
    // caller's (the dispatcher's 100 ms to 5 s, the workers' 200 ms); a tight loop would make
    // hundreds a second.
    assert!(
        per_second <= 10.0,
        "{} connection attempts in {TAKEN_FOR:?} by {PROCESSES} processes: a tight reconnect \
         loop",
        fault.attempts
    );
}

/// Other clients that take every connection slot, then let go.
struct Hog<'a> {
    url: String,
    cluster: &'a Cluster,
    /// Where the server's log stood when the slots were all taken.
    log_from: usize,
    /// The outbox's connection attempts the log shows while they were.
    attempts: u32,
    held: Vec<PgConnection>,
    /// The task that takes each slot that frees, and its stop flag.
    grabbing: Option<(Arc<AtomicBool>, tokio::task::JoinHandle<Vec<PgConnection>>)>,
}

impl Fault for Hog<'_> {
    fn name(&self) -> &'static str {
        "no connections left"
    }

    async fn begin(&mut self, _run: &Run) -> String {
        while let Some(c) = connect(&self.url).await {
            self.held.push(c);
        }
        let taken = self.held.len();
        // The outbox's sessions (over TCP; the other clients' come over the socket) ended.
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE client_addr IS NOT NULL AND pid <> pg_backend_pid()) AS t",
        )
        .fetch_one(&mut self.held[0])
        .await
        .expect("end the outbox's sessions");
        self.log_from = self.cluster.log().len();
        let stop = Arc::new(AtomicBool::new(false));
        let (url, until) = (self.url.clone(), stop.clone());
        let grab = tokio::spawn(async move {
            let mut more = Vec::new();
            while !until.load(Ordering::Relaxed) {
                match connect(&url).await {
                    Some(c) => more.push(c),
                    None => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            more
        });
        self.grabbing = Some((stop, grab));
        format!(
            "other clients took the {taken} free slots and the outbox's {ended} sessions were \
             ended; each slot those freed was taken at once"
        )
    }

    async fn end(&mut self, _run: &Run) -> String {
        let mut taken = self.held.len();
        if let Some((stop, grab)) = self.grabbing.take() {
            stop.store(true, Ordering::Relaxed);
            taken += grab.await.expect("the grabbing task").len();
        }
        let log = self.cluster.log();
        self.attempts = crate::fault::log_since(&log, self.log_from)
            .lines()
            .filter(|l| l.contains("connection received: host=127.0.0.1"))
            .count() as u32;
        self.held.clear();
        format!("the other clients let go of {taken} slots")
    }
}

/// A connection over the socket, or `None` when the server has no slot left.
async fn connect(url: &str) -> Option<PgConnection> {
    match PgConnection::connect(url).await {
        Ok(c) => Some(c),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("53300") => None,
        Err(e) => panic!("another client's connection failed otherwise than full: {e}"),
    }
}
