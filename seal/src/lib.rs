//! Bodies and header values at rest (issue 37): the envelope fenced-outbox stores them in when a
//! key is configured, and the keys that seal and open it.
//!
//! A producer seals an op's body and each header value under one key ([`Keys::seal_content`])
//! after hashing the clear request (G7); the dispatcher opens them right before sending
//! ([`Keys::open_content`]); `outboxctl keys rotate` moves them to another key
//! ([`Keys::reseal_content`]). A value without the envelope's mark is clear, as an older
//! producer wrote it, and is sent as it is.
//!
//! The format, for producers in any language (docs/security.md, "Encryption at rest"):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | `OBX1` |
//! | 1 | key id length *n*, 1-64 |
//! | *n* | key id, `[A-Za-z0-9._-]` |
//! | 12 | nonce |
//! | rest | AES-256-GCM ciphertext and its 16-byte tag |
//!
//! A header value is stored as `obx1:` and the envelope in base64 (standard alphabet, no
//! padding). The associated data binds a ciphertext to its place: `outbox/v1`, a zero byte, the
//! field (`body`, or `header:` and the header name in lower case), a zero byte, the destination.
//! The nonce is synthetic: the first 12 bytes of HMAC-SHA-256, under HMAC-SHA-256(key,
//! `outbox/v1 nonce`), of the associated data, a zero byte and the plaintext. Equal plaintexts
//! in one place under one key give equal envelopes (so an enqueue rerun through the SQL API,
//! which hashes what it is given, is still a duplicate); that equality is all a reader of the
//! table learns.

mod content;
mod envelope;
mod error;
mod keys;

pub use content::{Content, sealed_with};
pub use envelope::{BODY_MAGIC, Field, HEADER_PREFIX};
pub use error::{KeyError, OpenError, SealError};
pub use keys::{Key, KeySource, Keys};
