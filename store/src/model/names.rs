//! Validated newtypes of DESIGN.md's names: resource, destination, idempotency key, order
//! key, owner id and fencing token. Every check here is pure and unit-tested.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
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
