//! What can go wrong with keys and envelopes, each saying which key or field, never a key's or
//! a value's bytes.

/// A key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The id is not 1-64 of `[A-Za-z0-9._-]`.
    #[error("key id {id:?}: use 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'")]
    BadId {
        /// The id given.
        id: String,
    },
    /// Where the key comes from is not `file:/path` or `env:NAME`.
    #[error("key {id}: {reason}")]
    Source {
        /// The key's id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// The key could not be read, or is not 32 bytes in base64.
    #[error("key {id}: {reason}")]
    Material {
        /// The key's id.
        id: String,
        /// What is wrong (never the key).
        reason: String,
    },
    /// Two keys have one id.
    #[error("key {id} is named twice")]
    Duplicate {
        /// The id.
        id: String,
    },
    /// The key named to seal with is not among the keys.
    #[error("encrypt_with names {id}, which is not among the keys")]
    UnknownSealKey {
        /// The id named.
        id: String,
    },
}

/// Content that could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// No key is named to seal with.
    #[error("no key to encrypt with: name one with encrypt_with")]
    NoSealingKey,
}

/// A sealed value that could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// It is sealed with a key this process does not hold: a configuration to fix, after which
    /// it opens.
    #[error("the {field} is encrypted with key {key_id}, which is not configured here")]
    UnknownKey {
        /// `body` or `header <name>`.
        field: String,
        /// The key it names.
        key_id: String,
    },
    /// It does not open with the key it names: changed, or moved from another field or
    /// destination. It never will.
    #[error("the {field} does not decrypt with key {key_id}: it was changed or moved")]
    Damaged {
        /// `body` or `header <name>`.
        field: String,
        /// The key it names.
        key_id: String,
    },
}
