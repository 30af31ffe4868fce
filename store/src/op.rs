//! Ops as the store reads and writes them: a validated new op, the outcome of a fenced
//! enqueue, and the rejection record kept when a stale or expired owner tries one (G4).
//! Building and validating ops is the producer's job; this module only carries them.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::InvalidInput;
use crate::model::{
    DestinationName, FencingToken, IdempotencyKey, OrderKey, OwnerId, ResourceName,
};

/// Where an op is in its life. Stored as its lowercase name so operators can read the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpState {
    /// Waiting to be claimed, now or at `next_attempt_at`.
    Pending,
    /// Claimed by a dispatcher; an attempt is under way.
    InFlight,
    /// A 2xx answer was recorded.
    Delivered,
    /// Failed permanently or ran out of retries; kept for operators.
    Dead,
    /// Cancelled by an operator before it was sent.
    Cancelled,
    /// Replaced by an op of a newer token before it was sent.
    Superseded,
}

impl OpState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Pending => "pending",
            OpState::InFlight => "in_flight",
            OpState::Delivered => "delivered",
            OpState::Dead => "dead",
            OpState::Cancelled => "cancelled",
            OpState::Superseded => "superseded",
        }
    }
}

impl fmt::Display for OpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OpState {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => OpState::Pending,
            "in_flight" => OpState::InFlight,
            "delivered" => OpState::Delivered,
            "dead" => OpState::Dead,
            "cancelled" => OpState::Cancelled,
            "superseded" => OpState::Superseded,
            other => {
                return Err(InvalidInput::new(
                    "state",
                    format!("{other:?} is not an op state"),
                ));
            }
        })
    }
}

/// An HTTP method an op may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// PATCH
    Patch,
    /// DELETE
    Delete,
}

impl Method {
    /// The method as sent on the wire and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

impl FromStr for Method {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            _ => {
                return Err(InvalidInput::new(
                    "method",
                    format!("{s:?} is not one of GET, POST, PUT, PATCH, DELETE"),
                ));
            }
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated op ready to insert; the producer builds it.
#[derive(Debug, Clone)]
pub struct NewOp {
    /// The public id the op will have if accepted.
    pub op_id: Uuid,
    /// Where the dispatcher sends it.
    pub destination: DestinationName,
    /// Unique per destination; the same on every attempt.
    pub idempotency_key: IdempotencyKey,
    /// SHA-256 of method, path, headers, content type and body: same key with another
    /// request is a conflict (G7).
    pub request_hash: [u8; 32],
    /// `None`: unordered.
    pub order_key: Option<OrderKey>,
    /// Which partition slot (0..[`PARTITION_SLOTS`]) the op falls in.
    pub partition: i32,
    /// The HTTP method.
    pub method: Method,
    /// Path and query below the destination's base URL.
    pub path: String,
    /// The producer's headers as a JSON array of `[name, value]` pairs.
    pub headers_json: String,
    /// The body's content type, if it has a body.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
    /// Deliver only while this op's token is the newest of its resource.
    pub expire_with_generation: bool,
    /// On acceptance, mark older-token pending ops of the same resource and destination
    /// `superseded`, in the same transaction.
    pub supersede_pending: bool,
    /// Delay before the first attempt, in milliseconds (0: now).
    pub delay_ms: i64,
    /// W3C `traceparent` of the producer, if any.
    pub trace_context: Option<String>,
    /// W3C `tracestate` of the producer, only with a traceparent.
    pub trace_state: Option<String>,
}

impl NewOp {
    /// What an enqueue returns once this op was inserted as row `seq`.
    pub(crate) fn inserted(&self, seq: i64) -> Enqueued {
        Enqueued {
            op_id: self.op_id,
            seq,
            duplicate: false,
            state: OpState::Pending,
        }
    }
}

/// How many partition slots ops are spread over. A dispatcher partition owns a set of slots;
/// ops with the same order key share a slot, so one partition delivers them in order (G8).
pub const PARTITION_SLOTS: u32 = 1024;

/// The partition slot of an op: a stable hash (FNV-1a) of its order key, or of its id when
/// it is unordered.
pub fn partition_slot(order_key: Option<&OrderKey>, op_id: Uuid) -> i32 {
    let bytes: &[u8] = match order_key {
        Some(k) => k.as_str().as_bytes(),
        None => op_id.as_bytes(),
    };
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    });
    (hash % PARTITION_SLOTS) as i32
}

/// An op the outbox holds, as returned by an enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    /// The op's public id.
    pub op_id: Uuid,
    /// Its enqueue sequence number.
    pub seq: i64,
    /// True when the op already existed with the same request (G7): nothing was inserted.
    pub duplicate: bool,
    /// Its state now.
    pub state: OpState,
}

/// Which enqueue call was rejected, as `outbox_rejections.stage` names it: the producer's
/// record, and on SQL Server `outbox.EnqueueOps`' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueStage {
    /// One op, on a connection of the store's.
    Enqueue,
    /// A batch, all or nothing.
    Batch,
    /// One op inside the caller's transaction.
    InCallerTransaction,
}

impl EnqueueStage {
    /// The stored name: `enqueue`, `enqueue_batch` or `enqueue_in`.
    pub fn name(self) -> &'static str {
        match self {
            EnqueueStage::Enqueue => "enqueue",
            EnqueueStage::Batch => "enqueue_batch",
            EnqueueStage::InCallerTransaction => "enqueue_in",
        }
    }
}

/// Why the lease presented with an enqueue was not good enough (G4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// A newer owner exists, or the owner id does not match: `current` is the resource's token.
    Stale {
        /// The resource's newest token.
        current: FencingToken,
    },
    /// This owner and token, but the lease expired by the database clock.
    Expired,
    /// The resource was never leased, or this owner released it.
    NoLease {
        /// The resource's newest token, if it was ever leased.
        current: Option<FencingToken>,
    },
}

impl RejectReason {
    /// The stored name: `stale`, `expired` or `no_lease`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Stale { .. } => "stale",
            RejectReason::Expired => "expired",
            RejectReason::NoLease { .. } => "no_lease",
        }
    }

    /// The resource's newest token, when known.
    pub fn current_token(self) -> Option<FencingToken> {
        match self {
            RejectReason::Stale { current } => Some(current),
            RejectReason::Expired => None,
            RejectReason::NoLease { current } => current,
        }
    }
}

/// Why an enqueue inserted nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotEnqueued {
    /// The lease check failed (G4); a rejection record should be written.
    Rejected(RejectReason),
    /// The (destination, idempotency key) exists with a different request (G7).
    Conflict {
        /// The op that holds the key.
        existing_op_id: Uuid,
    },
}

/// What an enqueue ends in: the op the outbox holds, or why nothing was inserted.
pub type EnqueueResult = Result<Enqueued, NotEnqueued>;

/// A rejected enqueue, as kept for operators. Never the body or header values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// The resource the enqueue was for.
    pub resource: ResourceName,
    /// The owner id presented.
    pub owner_id: OwnerId,
    /// The token presented.
    pub token: FencingToken,
    /// The resource's newest token at the time, if it was ever leased.
    pub current_token: Option<FencingToken>,
    /// The destination of the op.
    pub destination: Option<DestinationName>,
    /// The idempotency key of the op.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Which call was rejected: `enqueue`, `enqueue_batch` or `enqueue_in`.
    pub stage: &'static str,
    /// `stale`, `expired` or `no_lease`.
    pub reason: &'static str,
}

/// A rejection as read back, with the database time it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectionRow {
    /// Its id.
    pub id: i64,
    /// The resource.
    pub resource: String,
    /// The owner id presented.
    pub owner_id: OwnerId,
    /// The token presented.
    pub token: FencingToken,
    /// The resource's newest token then, if known.
    pub current_token: Option<FencingToken>,
    /// The op's destination.
    pub destination: Option<String>,
    /// The op's idempotency key.
    pub idempotency_key: Option<String>,
    /// Which call was rejected.
    pub stage: String,
    /// `stale`, `expired` or `no_lease`.
    pub reason: String,
    /// When, by the database clock.
    #[serde(with = "time::serde::rfc3339")]
    pub rejected_at: OffsetDateTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_slots_are_stable_and_follow_the_order_key() {
        let key = OrderKey::new("statement:account-1842:2026-07").unwrap();
        let a = partition_slot(Some(&key), Uuid::new_v4());
        assert_eq!(a, partition_slot(Some(&key), Uuid::new_v4()));
        assert!((0..PARTITION_SLOTS as i32).contains(&a));
        // FNV-1a of "a" is 0xe40c292c: pinned so a change of hash is a deliberate migration.
        assert_eq!(
            partition_slot(Some(&OrderKey::new("a").unwrap()), Uuid::nil()),
            (0xe40c_292c_u32 % 1024) as i32
        );
    }

    #[test]
    fn states_and_methods_round_trip_their_stored_names() {
        for s in [
            OpState::Pending,
            OpState::InFlight,
            OpState::Delivered,
            OpState::Dead,
            OpState::Cancelled,
            OpState::Superseded,
        ] {
            assert_eq!(s.as_str().parse::<OpState>().unwrap(), s);
        }
        assert_eq!("patch".parse::<Method>().unwrap(), Method::Patch);
        assert!("CONNECT".parse::<Method>().is_err());
    }
}
