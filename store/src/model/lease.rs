//! The lease records the store returns (a granted lease, a row of the lease table) and the
//! bounds a lease's time to live must fall within (DESIGN.md G1–G3).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::names::{FencingToken, OwnerId, ResourceName};
use crate::error::InvalidInput;

/// A granted lease: who holds which resource, with which token, until when (database time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The protected resource.
    pub resource: ResourceName,
    /// This acquisition's owner id.
    pub owner_id: OwnerId,
    /// This acquisition's fencing token.
    pub token: FencingToken,
    /// When the lease expires by the database clock, as last granted or renewed.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// One row of the lease table, as `list_leases` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseRow {
    /// The resource.
    pub resource: ResourceName,
    /// The current or last owner; `None` once released.
    pub owner_id: Option<OwnerId>,
    /// The latest token handed out for this resource.
    pub token: FencingToken,
    /// When the lease expires or expired; `None` once released.
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    /// Whether an owner holds it now, by the database clock.
    pub held: bool,
    /// Milliseconds until expiry by the database clock; negative once expired.
    pub remaining_ms: Option<i64>,
    /// For a dispatcher partition lease: the partition count its holder serves.
    pub partitions: Option<u32>,
}

/// The bounds a lease's time to live must fall within. Defaults to the seed's 5 s..=300 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlBounds {
    min: Duration,
    max: Duration,
}

impl Default for TtlBounds {
    fn default() -> Self {
        TtlBounds {
            min: Duration::from_secs(5),
            max: Duration::from_secs(300),
        }
    }
}

impl TtlBounds {
    /// Bounds from `min` to `max` inclusive; `min` must be at least 1 ms and at most `max`,
    /// and `max` at most one day.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_store::TtlBounds;
    /// let bounds = TtlBounds::new(Duration::from_secs(1), Duration::from_secs(60)).unwrap();
    /// assert!(bounds.check(Duration::from_millis(500)).is_err());
    /// ```
    pub fn new(min: Duration, max: Duration) -> Result<Self, InvalidInput> {
        if min < Duration::from_millis(1) {
            return Err(InvalidInput::new("lease_min_ttl", "must be at least 1ms"));
        }
        if max > Duration::from_secs(86_400) {
            return Err(InvalidInput::new("lease_max_ttl", "must be at most 1 day"));
        }
        if min > max {
            return Err(InvalidInput::new(
                "lease_min_ttl",
                format!("{min:?} is above the maximum {max:?}"),
            ));
        }
        Ok(TtlBounds { min, max })
    }

    /// The shortest allowed time to live.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The longest allowed time to live.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Checks `ttl` and returns it in whole milliseconds, the unit the SQL takes.
    pub fn check(&self, ttl: Duration) -> Result<i64, InvalidInput> {
        if ttl < self.min || ttl > self.max {
            return Err(InvalidInput::new(
                "ttl",
                format!(
                    "{ttl:?} is outside the allowed {:?}..={:?}",
                    self.min, self.max
                ),
            ));
        }
        if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(InvalidInput::new(
                "ttl",
                format!("{ttl:?} is finer than a millisecond"),
            ));
        }
        // Bounded by one day above, so this always fits.
        Ok(ttl.as_millis() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds_default_to_the_seed_and_are_inclusive() {
        let b = TtlBounds::default();
        assert_eq!(b.check(Duration::from_secs(5)), Ok(5_000));
        assert_eq!(b.check(Duration::from_secs(300)), Ok(300_000));
        assert!(b.check(Duration::from_millis(4_999)).is_err());
        assert!(b.check(Duration::from_millis(300_001)).is_err());
        assert!(b.check(Duration::ZERO).is_err());
    }

    #[test]
    fn ttl_bounds_refuse_nonsense() {
        assert!(TtlBounds::new(Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(TtlBounds::new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
        assert!(TtlBounds::new(Duration::from_secs(1), Duration::from_secs(86_401)).is_err());
        let b = TtlBounds::new(Duration::from_secs(1), Duration::from_secs(1)).unwrap();
        assert_eq!(b.check(Duration::from_secs(1)), Ok(1_000));
        assert!(b.check(Duration::from_micros(1_000_500)).is_err());
    }
}
