//! Rows only a statement returns, read by the flows written once above the driver and by
//! nobody else: the lease and the op an enqueue looks at when its insert inserted nothing,
//! and the ops a replay or cancel locks.

use uuid::Uuid;

use crate::model::{FencingToken, OwnerId};

/// The lease row as the enqueue saw it: owner, token and whether it was unexpired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseSeen {
    pub(crate) owner_id: Option<OwnerId>,
    pub(crate) fence: FencingToken,
    pub(crate) live: bool,
}

/// The op found under an enqueue's (destination, idempotency key): (seq, op id, request
/// hash, state).
pub(crate) type FoundOp = (i64, Uuid, Vec<u8>, String);

/// An op as read under the change's lock.
#[derive(Debug, Clone)]
pub(crate) struct Locked {
    pub(crate) seq: i64,
    pub(crate) op_id: String,
    pub(crate) state: String,
    pub(crate) token: i64,
    pub(crate) resource_token: Option<i64>,
    /// When erasure after delivery cleared its content: nothing is left to send.
    pub(crate) erased_at: Option<time::OffsetDateTime>,
}
