//! `outbox-producer`: fenced leases and a fenced outbox for applications.
//!
//! A worker that holds a lease on a resource gets a fencing token. Instead of calling a
//! third-party API directly, it records the call in the outbox, and the insert is refused
//! atomically when a newer owner exists; the dispatcher delivers accepted calls with an
//! idempotency key. A stale owner's call is never sent.
//!
//! This release carries the lease half (DESIGN.md G1–G3):
//!
//! ```no_run
//! # async fn demo() -> Result<(), outbox_producer::Error> {
//! use std::time::Duration;
//! let outbox = outbox_producer::Outbox::connect("sqlite://outbox.db").await?;
//! outbox.migrate().await?;
//! if let Some(lease) = outbox.try_acquire("statement:account-1842:2026-07", Duration::from_secs(30)).await? {
//!     // ... work, fenced by lease.token ...
//!     outbox.release(&lease).await?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod error;
mod lease;

pub use error::Error;
pub use lease::Outbox;
pub use outbox_store::{
    Backend, FencingToken, InvalidInput, Lease, LeaseRow, OwnerId, ResourceName, StoreError,
    StoreErrorKind, StoreOptions, TtlBounds,
};
