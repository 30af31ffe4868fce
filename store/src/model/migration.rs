//! Migrations as the statements speak of them: a migration file this build carries, and one
//! recorded as applied in `outbox_schema_migrations` with its checksum.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// One migration file of one backend.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The number in the file name; the same change has the same number on every backend.
    pub version: i64,
    /// The name after the number, without `.sql`.
    pub name: &'static str,
    /// The file's text.
    pub sql: &'static str,
}

impl Migration {
    /// Hex SHA-256 of the file's text, recorded when applied.
    pub fn checksum(&self) -> String {
        let digest = Sha256::digest(self.sql.as_bytes());
        digest.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

/// A migration as recorded in `outbox_schema_migrations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    /// Its number.
    pub version: i64,
    /// Its name.
    pub name: String,
    /// The checksum recorded when it was applied.
    pub checksum: String,
}
