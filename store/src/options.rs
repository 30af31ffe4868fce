//! How a store connects and what it accepts: [`StoreOptions`], and on PostgreSQL the way a
//! producer's calls reach the tables ([`ProducerCalls`]).

use std::time::Duration;

use crate::model::TtlBounds;

/// How a [`Store`](crate::Store) connects and what it accepts.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The allowed lease time to live. Default: 5 s..=300 s, as in the seed.
    pub lease_ttl: TtlBounds,
    /// Most pooled connections. Default: 10.
    pub max_connections: u32,
    /// How long to wait for a pooled connection before failing as unavailable. Default: 30 s.
    pub acquire_timeout: Duration,
    /// How long SQLite waits for another writer before failing as retryable. Default: 10 s.
    pub sqlite_busy_timeout: Duration,
    /// `application_name` shown by PostgreSQL's `pg_stat_activity`. Default: `fenced-outbox`.
    pub application_name: String,
    /// The connections serve a dispatcher: on PostgreSQL a transaction that idles longer than
    /// a third of the shortest lease (at least a second) ends its session, so a paused
    /// dispatcher's row locks never block the standby taking over. Default: false.
    pub dispatcher_sessions: bool,
    /// PostgreSQL: a direct URL to the same database for LISTEN, for a store whose URL goes
    /// through a connection pooler in transaction mode. Default: none (LISTEN on the store's
    /// own connections, or no LISTEN through such a pooler).
    pub listen_url: Option<String>,
    /// PostgreSQL and SQL Server: how a producer's lease and enqueue calls reach the tables.
    /// Default: [`ProducerCalls::Auto`]. SQLite has no roles: always the statements.
    pub producer_calls: ProducerCalls,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lease_ttl: TtlBounds::default(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            sqlite_busy_timeout: Duration::from_secs(10),
            application_name: "fenced-outbox".to_owned(),
            dispatcher_sessions: false,
            listen_url: None,
            producer_calls: ProducerCalls::Auto,
        }
    }
}

/// PostgreSQL and SQL Server: how a producer's lease and enqueue calls reach the tables (issue
/// 37). SQLite has no roles and always runs the statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProducerCalls {
    /// The statements when the login may insert requests and write leases itself (the
    /// migrating role, or table grants), the SQL API otherwise (a login holding the role
    /// `outbox_producer` alone); asked once per store, at its first producer call.
    #[default]
    Auto,
    /// The lease and enqueue statements: the login needs rights on the tables.
    Statements,
    /// The SQL API. On PostgreSQL its functions, which run with their owner's rights:
    /// `outbox.try_acquire`, `renew`, `release` and `enqueue_batch`; a rejection is kept by the
    /// function (through `dblink`, as for workers in other languages), and inside the caller's
    /// transaction ([`crate::Store::op_enqueue_in`]) each call runs in a savepoint. On SQL
    /// Server its procedures, which reach the tables through ownership chaining:
    /// `outbox.TryAcquire`, `Renew`, `Release` and `EnqueueOps`; a rejection or a conflict is
    /// an answer, not an error, so the caller's transaction stays usable, and the rejection is
    /// kept by the procedure (in a transaction of its own, or inside the caller's through the
    /// loopback linked server of `0004_sql_api.sql`).
    Functions,
}
