//! `outbox-dispatcher`: the fenced daemon that delivers recorded ops over HTTP.
//!
//! [`run`] is the whole daemon: it connects (retrying while the database is unreachable),
//! migrates if configured, serves `/metrics`, `/healthz` and `/readyz` (and, with `[console]
//! enabled`, the read-only web console under `/console/`), and runs one loop per
//! partition that competes for the partition's lease and, while leading, claims and delivers
//! ops (see `drain`). It stops when `shutdown` is cancelled: no new claims, attempts in flight
//! finish within the grace period, leases are released. Tests start it in-process with their
//! own shutdown token. With `[telemetry]` on it makes spans; [`telemetry`] sets up where the
//! process sends them, once (the binary does it from the same config).
//!
//! The daemon is the default feature `daemon`. Without it the crate is only its configuration
//! ([`Config::load`]), which `outboxctl` reads without linking the HTTP client and server.

#[cfg(feature = "daemon")]
mod attempt;
pub mod config;
#[cfg(feature = "daemon")]
pub mod console;
#[cfg(feature = "daemon")]
mod daemon;
#[cfg(feature = "daemon")]
pub mod deliver;
#[cfg(feature = "daemon")]
mod drain;
#[cfg(feature = "daemon")]
mod erase;
#[cfg(feature = "daemon")]
mod handles;
#[cfg(feature = "daemon")]
mod health;
#[cfg(feature = "daemon")]
mod held;
#[cfg(feature = "daemon")]
mod housekeeping;
#[cfg(feature = "daemon")]
pub mod http;
#[cfg(feature = "daemon")]
mod leader;
#[cfg(feature = "daemon")]
mod limits;
#[cfg(feature = "daemon")]
mod membership;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod partition;
#[cfg(feature = "daemon")]
mod record;
#[cfg(feature = "daemon")]
pub mod retry;
#[cfg(feature = "daemon")]
mod routes;
pub mod signing;
#[cfg(feature = "daemon")]
mod status;
#[cfg(feature = "daemon")]
mod tally;
#[cfg(feature = "daemon")]
pub mod telemetry;
#[cfg(feature = "daemon")]
mod wake;

pub use config::{Config, ConfigError};
#[cfg(feature = "daemon")]
pub use daemon::{Error, PartitionCountMismatch, run};
