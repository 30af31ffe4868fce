//! A pooler's pool exhausted (issue 38): the workers and both dispatchers reach PostgreSQL
//! through a real PgBouncer in transaction mode with `default_pool_size = 8` and
//! `query_wait_timeout = 4` (an operator's usual guard against queueing forever). While they
//! run, other clients of the same database and user take all eight server connections and
//! hold them in open transactions for twelve seconds, then commit.
//!
//! Meanwhile every statement of the outbox waits in PgBouncer's queue and, after four seconds,
//! is refused with `query_wait_timeout` (SQLSTATE 08P01) and its connection closed. The run
//! shows what the other connection faults do (every refusal "unavailable", nothing lost, a
//! leader whose renewals wait steps down before its lease ends, delivery resumed by itself),
//! and that nobody logged in again in a tight loop: PgBouncer's log counts the outbox's logins
//! while the pool was taken.

use std::time::Duration;

use outbox_tests::TestDb;
use outbox_tests::pgbouncer::{PgBouncer, Pool, PoolMode};
use sqlx::{Connection, PgConnection};

use crate::fault::{Fault, LEASE, run_through};
use crate::procs::Dispatcher;
use crate::run::Run;

/// How long the pool stays taken.
const TAKEN_FOR: Duration = Duration::from_secs(12);
/// PgBouncer's server connections for the outbox's database and user.
const POOL: u32 = 8;
/// The processes that log in through PgBouncer while the pool is taken: two dispatchers, five
/// workers.
const PROCESSES: u32 = 7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let db = TestDb::postgres().await;
    let mut fault = Exhausted {
        bouncer: None,
        url: String::new(),
        log_from: 0,
        logins: 0,
        held: Vec::new(),
    };
    let outcome = run_through(db, 0xB0C3_0001, &mut fault, TAKEN_FOR).await;
    let per_second = f64::from(fault.logins) / TAKEN_FOR.as_secs_f64() / f64::from(PROCESSES);
    crate::run::say(&format!(
        "pooler: {} logins through PgBouncer by the outbox's {PROCESSES} processes while its \
         pool was taken ({per_second:.1} a second each)",
        fault.logins
    ));
    outcome.assert_recovered("the pooler's pool exhausted", LEASE * 4, true);
    assert!(
        per_second <= 10.0,
        "{} logins in {TAKEN_FOR:?} by {PROCESSES} processes: a tight reconnect loop",
        fault.logins
    );
}

/// Other clients that take every server connection of PgBouncer's pool, then let go.
struct Exhausted {
    bouncer: Option<PgBouncer>,
    /// The database's URL through PgBouncer.
    url: String,
    /// Where PgBouncer's log stood when the pool was all taken.
    log_from: usize,
    /// The outbox's logins the log shows while it was.
    logins: u32,
    held: Vec<PgConnection>,
}

impl Exhausted {
    fn log(&self) -> String {
        self.bouncer
            .as_ref()
            .map(PgBouncer::log)
            .unwrap_or_default()
    }
}

impl Fault for Exhausted {
    fn name(&self) -> &'static str {
        "pool exhausted"
    }

    /// PgBouncer in front of the database; the workers and both dispatchers go through it.
    async fn prepare(&mut self, run: &mut Run) {
        let pool = Pool {
            size: POOL,
            query_wait_timeout_s: 4,
        };
        let bouncer = PgBouncer::start_with(run.db.url(), PoolMode::Transaction, pool)
            .unwrap_or_else(|e| panic!("cannot start PgBouncer: {e}"));
        self.url = bouncer.in_front_of(run.db.url());
        run.url = self.url.clone();
        let dir = run.logs.path().join("pooler");
        std::fs::create_dir(&dir).expect("a folder for the dispatchers' config");
        let config =
            Dispatcher::configure_with_lease(&dir, &self.url, &run.destination.url(), 2, LEASE);
        for (i, d) in run.dispatchers.iter_mut().enumerate() {
            std::mem::replace(d, Dispatcher::start(&config, &format!("d{i}"))).stop();
        }
        self.bouncer = Some(bouncer);
    }

    async fn begin(&mut self, _run: &Run) -> String {
        for _ in 0..POOL {
            let mut c = PgConnection::connect(&self.url)
                .await
                .unwrap_or_else(|e| panic!("another client cannot log in: {e}"));
            // A transaction holds its server connection until it ends (transaction mode).
            let begin = sqlx::raw_sql("BEGIN; SELECT 1").execute(&mut c);
            match tokio::time::timeout(Duration::from_secs(3), begin).await {
                Ok(Ok(_)) => self.held.push(c),
                Ok(Err(e)) => panic!("another client's transaction failed: {e}"),
                Err(_) => panic!(
                    "another client waited 3 s for a server connection: the pool was taken \
                     before it was full\n{}",
                    self.log()
                ),
            }
        }
        self.log_from = self.log().len();
        format!(
            "other clients hold all {} of PgBouncer's server connections in open transactions",
            self.held.len()
        )
    }

    async fn end(&mut self, _run: &Run) -> String {
        let log = self.log();
        self.logins = crate::fault::log_since(&log, self.log_from)
            .lines()
            .filter(|l| l.contains("login attempt"))
            .count() as u32;
        let n = self.held.len();
        for mut c in self.held.drain(..) {
            sqlx::raw_sql("COMMIT")
                .execute(&mut c)
                .await
                .expect("another client commits");
        }
        format!("the other clients committed and gave back {n} server connections")
    }
}
