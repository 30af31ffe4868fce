//! `outbox-producer`: fenced leases and a fenced outbox for applications.
//!
//! A worker that holds a lease on a resource gets a fencing token. Instead of calling a
//! third-party API directly, it records the call in the outbox; the insert is rejected
//! atomically when a newer owner exists (G4), so a stale owner's call is never sent (G5). The
//! dispatcher delivers accepted calls with the same `Idempotency-Key` on every attempt (G7):
//! delivery is at-least-once, and effectively-once where the destination honours the key.
//!
//! ```no_run
//! # async fn demo() -> Result<(), outbox_producer::Error> {
//! use std::time::Duration;
//! use outbox_producer::{LeaseKeeper, Operation, Outbox};
//!
//! let outbox = Outbox::connect("sqlite://outbox.db").await?;
//! outbox.migrate().await?;
//! let ttl = Duration::from_secs(30);
//! let Some(lease) = outbox.try_acquire("statement:account-1842:2026-07", ttl).await? else {
//!     return Ok(()); // another worker has it
//! };
//! let keeper = LeaseKeeper::start(&outbox, lease, ttl);
//! // ... build the statement, stopping early if keeper.lost() is cancelled ...
//! let op = Operation::post("statements", "/v1/statements")
//!     .json(&serde_json::json!({"account": 1842, "month": "2026-07"}))
//!     .idempotency_key("statement-1842-2026-07")
//!     .build()?;
//! outbox.enqueue(&keeper.lease(), &op).await?; // Error::Stale if a newer owner exists
//! keeper.release().await?;
//! # Ok(()) }
//! ```
//!
//! With the `otel` feature, an op built inside a traced span takes that span's W3C
//! `traceparent` (unless it sets one), so its delivery joins the caller's trace.
#![deny(missing_docs)]

mod enqueue;
mod error;
mod keeper;
mod lease;
mod op;
mod outbox;
mod trace;

pub use error::Error;
pub use keeper::LeaseKeeper;
pub use op::{
    DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES_CEILING, MAX_HEADER_VALUE_LEN, MAX_HEADERS,
    MAX_NOT_BEFORE, MAX_PATH_LEN, Operation, OperationBuilder,
};
pub use outbox::Outbox;
pub use outbox_seal::{Key, KeyError, KeySource, Keys};
pub use outbox_store::{
    Backend, Conn, DestinationName, Enqueued, FencingToken, IdempotencyKey, InvalidInput, Lease,
    LeaseRow, Method, OpState, OrderKey, OwnerId, RejectionRow, ResourceName, StoreError,
    StoreErrorKind, StoreOptions, TtlBounds,
};
/// The sqlx version whose transactions [`Outbox::enqueue_in`] takes.
pub use sqlx;

/// The Rust examples of the README and of the guide's pages under `docs/`, compiled as doctests
/// by `cargo test --doc` so that the docs a newcomer copies from keep building (issue 39).
#[cfg(doctest)]
pub mod docs_examples {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/producers.md")]
    pub struct Producers;
    #[doc = include_str!("../../docs/sql-server.md")]
    pub struct SqlServer;
}
