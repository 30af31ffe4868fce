//! Validated newtypes of DESIGN.md's vocabulary (resource, owner id, fencing token) and the
//! lease records the store returns. Every check here is pure and unit-tested.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::InvalidInput;

/// The longest resource name, in characters.
pub const RESOURCE_MAX_CHARS: usize = 200;

/// Name of a protected thing, e.g. `statement:account-1842:2026-07`: 1..=200 characters, none
/// of them a control character.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ResourceName(String);

impl ResourceName {
    /// Checks `name` and wraps it.
    ///
    /// ```
    /// use outbox_store::ResourceName;
    /// assert!(ResourceName::new("statement:account-1842:2026-07").is_ok());
    /// assert!(ResourceName::new("").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        let chars = name.chars().count();
        if chars == 0 {
            return Err(InvalidInput::new("resource", "must not be empty"));
        }
        if chars > RESOURCE_MAX_CHARS {
            return Err(InvalidInput::new(
                "resource",
                format!("is {chars} characters long, the limit is {RESOURCE_MAX_CHARS}"),
            ));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(InvalidInput::new(
                "resource",
                format!("contains the control character {:?}", c),
            ));
        }
        Ok(ResourceName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ResourceName {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ResourceName::new(s)
    }
}

impl<'de> Deserialize<'de> for ResourceName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ResourceName::new(s).map_err(serde::de::Error::custom)
    }
}

/// The longest destination name, in bytes (`[a-z0-9_-]` only).
pub const DESTINATION_MAX_LEN: usize = 64;
/// The longest idempotency key or order key, in characters.
pub const KEY_MAX_LEN: usize = 255;

/// A destination's name as configured in the dispatcher: 1..=64 of `[a-z0-9_-]`. Producers
/// name destinations; they never supply hosts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct DestinationName(String);

impl DestinationName {
    /// Checks `name` and wraps it.
    ///
    /// ```
    /// use outbox_store::DestinationName;
    /// assert!(DestinationName::new("billing").is_ok());
    /// assert!(DestinationName::new("https://evil.example").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        if name.is_empty() || name.len() > DESTINATION_MAX_LEN {
            return Err(InvalidInput::new(
                "destination",
                format!(
                    "must be 1..={DESTINATION_MAX_LEN} characters, got {}",
                    name.len()
                ),
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
        {
            return Err(InvalidInput::new(
                "destination",
                format!(
                    "may hold only a-z, 0-9, _ and -, found {c:?}: it names a configured destination, not a host"
                ),
            ));
        }
        Ok(DestinationName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DestinationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The caller-chosen key that makes an op idempotent: 1..=255 visible ASCII characters,
/// unique per destination, sent as `Idempotency-Key` on every attempt (G7).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Checks `key` and wraps it.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidInput> {
        let key = key.into();
        if key.is_empty() || key.len() > KEY_MAX_LEN {
            return Err(InvalidInput::new(
                "idempotency_key",
                format!("must be 1..={KEY_MAX_LEN} characters, got {}", key.len()),
            ));
        }
        if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(InvalidInput::new(
                "idempotency_key",
                format!("may hold only visible ASCII characters, found {c:?}"),
            ));
        }
        Ok(IdempotencyKey(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Ops with the same order key are delivered one at a time, in order (G8): 1..=255 characters,
/// none of them a control character.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct OrderKey(String);

impl OrderKey {
    /// Checks `key` and wraps it.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidInput> {
        let key = key.into();
        let chars = key.chars().count();
        if chars == 0 || chars > KEY_MAX_LEN {
            return Err(InvalidInput::new(
                "order_key",
                format!("must be 1..={KEY_MAX_LEN} characters, got {chars}"),
            ));
        }
        if let Some(c) = key.chars().find(|c| c.is_control()) {
            return Err(InvalidInput::new(
                "order_key",
                format!("contains the control character {c:?}"),
            ));
        }
        Ok(OrderKey(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&ResourceName> for OrderKey {
    /// The default order key of an op: its resource (both allow the same characters).
    fn from(resource: &ResourceName) -> Self {
        OrderKey(resource.as_str().to_owned())
    }
}

/// Identifies one acquisition of a lease: a fresh random UUID each time, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerId(Uuid);

impl OwnerId {
    /// A new, never used owner id.
    pub fn new_random() -> Self {
        OwnerId(Uuid::new_v4())
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for OwnerId {
    fn from(id: Uuid) -> Self {
        OwnerId(id)
    }
}

impl FromStr for OwnerId {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s)
            .map(OwnerId)
            .map_err(|e| InvalidInput::new("owner_id", format!("is not a UUID: {e}")))
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The generation number of a lease: +1 on every acquisition of a resource, never reused.
/// Compare tokens only for order; the number has no other meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(i64);

impl FencingToken {
    /// Wraps a token read from the database or given by a caller.
    pub fn new(value: i64) -> Self {
        FencingToken(value)
    }

    /// The token as a number, as sent in `X-Fencing-Token`.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl FromStr for FencingToken {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<i64>() {
            Ok(v) if v > 0 => Ok(FencingToken(v)),
            _ => Err(InvalidInput::new(
                "token",
                format!("{s:?} is not a positive whole number"),
            )),
        }
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

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
    fn resource_names_are_checked_by_length_in_characters() {
        assert!(ResourceName::new("a").is_ok());
        assert!(ResourceName::new("é".repeat(200)).is_ok());
        let err = ResourceName::new("é".repeat(201)).unwrap_err();
        assert_eq!(err.field, "resource");
        assert!(err.reason.contains("201"), "{err}");
        assert!(ResourceName::new("").is_err());
    }

    #[test]
    fn resource_names_refuse_control_characters() {
        for bad in [
            "a\nb",
            "a\rb",
            "tab\there",
            "nul\0",
            "del\u{7f}",
            "c1\u{85}",
        ] {
            assert!(ResourceName::new(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(ResourceName::new("dispatcher/0").is_ok());
        assert!(ResourceName::new("with space and ünïcode").is_ok());
    }

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

    #[test]
    fn tokens_parse_only_as_positive_numbers() {
        assert_eq!("42".parse::<FencingToken>().unwrap().get(), 42);
        for bad in ["0", "-1", "x", "", "1.5"] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn destination_names_are_config_names_not_hosts() {
        assert!(DestinationName::new("billing_v2-eu").is_ok());
        assert!(DestinationName::new("d".repeat(64)).is_ok());
        for bad in [
            "",
            "Billing",
            "billing.example.com",
            "https://x",
            "a/b",
            "a b",
            "ü",
        ] {
            assert_eq!(
                DestinationName::new(bad).unwrap_err().field,
                "destination",
                "{bad:?}"
            );
        }
        assert!(DestinationName::new("d".repeat(65)).is_err());
    }

    #[test]
    fn idempotency_keys_are_visible_ascii_up_to_255() {
        assert!(IdempotencyKey::new("statement-1842-2026-07").is_ok());
        assert!(IdempotencyKey::new("k".repeat(255)).is_ok());
        for bad in [
            "".to_owned(),
            "k".repeat(256),
            "with space".into(),
            "tab\t".into(),
            "é".into(),
            "nl\n".into(),
        ] {
            assert_eq!(
                IdempotencyKey::new(bad.clone()).unwrap_err().field,
                "idempotency_key",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn order_keys_refuse_control_characters() {
        assert!(OrderKey::new("account-1842").is_ok());
        assert!(OrderKey::new("").is_err());
        assert!(OrderKey::new("a\nb").is_err());
        assert!(OrderKey::new("k".repeat(256)).is_err());
    }

    #[test]
    fn owner_ids_are_fresh_and_round_trip() {
        let a = OwnerId::new_random();
        assert_ne!(a, OwnerId::new_random());
        assert_eq!(a.to_string().parse::<OwnerId>().unwrap(), a);
        assert!("not-a-uuid".parse::<OwnerId>().is_err());
    }
}
