//! `outbox-dispatcher`: the fenced daemon that delivers recorded ops over HTTP.
//!
//! Not built yet: this crate holds its place in the workspace so the layout and the binary
//! name are fixed. The daemon (claiming, delivery, retries, its own partition lease) arrives
//! with the dispatcher issue; until then the binary says so and exits non-zero.

/// What the binary prints until the daemon exists.
pub const NOT_YET: &str = "outbox-dispatcher: the delivery daemon is not built yet; use `outboxctl migrate` and `outboxctl lease list` meanwhile";
