//! The envelope's bytes: its mark, the key id, the nonce and the sealed text, and the associated
//! data that binds it to one field of one destination's op.

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;

/// The first bytes of a sealed body.
pub const BODY_MAGIC: &[u8; 4] = b"OBX1";
/// What a sealed header value starts with; the envelope follows in base64.
pub const HEADER_PREFIX: &str = "obx1:";
/// The nonce's length.
pub(crate) const NONCE_LEN: usize = 12;
/// The tag's length.
pub(crate) const TAG_LEN: usize = 16;
/// The longest key id.
pub(crate) const MAX_KEY_ID: usize = 64;

/// Where a sealed value lives in an op: part of what it is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// The body.
    Body,
    /// The value of the header of this name (compared in lower case).
    Header(&'a str),
}

impl Field<'_> {
    /// How the field is named in errors: `body` or `header X-Name`.
    pub(crate) fn describe(self) -> String {
        match self {
            Field::Body => "body".to_owned(),
            Field::Header(name) => format!("header {name}"),
        }
    }
}

/// The associated data of `field` of an op for `destination`.
pub(crate) fn associated_data(field: Field<'_>, destination: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + destination.len());
    aad.extend_from_slice(b"outbox/v1\0");
    match field {
        Field::Body => aad.extend_from_slice(b"body"),
        Field::Header(name) => {
            aad.extend_from_slice(b"header:");
            aad.extend_from_slice(name.to_ascii_lowercase().as_bytes());
        }
    }
    aad.push(0);
    aad.extend_from_slice(destination.as_bytes());
    aad
}

/// Whether `id` may name a key: 1-64 of `[A-Za-z0-9._-]`.
pub(crate) fn valid_key_id(id: &str) -> bool {
    (1..=MAX_KEY_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// An envelope taken apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parsed<'a> {
    pub(crate) key_id: &'a str,
    pub(crate) nonce: &'a [u8],
    pub(crate) sealed: &'a [u8],
}

/// `bytes` as an envelope, or `None` when they are not one (a clear value).
pub(crate) fn parse(bytes: &[u8]) -> Option<Parsed<'_>> {
    let rest = bytes.strip_prefix(BODY_MAGIC)?;
    let (&n, rest) = rest.split_first()?;
    let n = usize::from(n);
    if rest.len() < n + NONCE_LEN + TAG_LEN {
        return None;
    }
    let key_id = std::str::from_utf8(&rest[..n]).ok()?;
    if !valid_key_id(key_id) {
        return None;
    }
    let (nonce, sealed) = rest[n..].split_at(NONCE_LEN);
    Some(Parsed {
        key_id,
        nonce,
        sealed,
    })
}

/// The envelope of `sealed` (ciphertext and tag) under `key_id` and `nonce`.
pub(crate) fn build(key_id: &str, nonce: &[u8], sealed: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + key_id.len() + nonce.len() + sealed.len());
    out.extend_from_slice(BODY_MAGIC);
    // A key id is at most 64 bytes (Key::new checks it).
    out.push(key_id.len() as u8);
    out.extend_from_slice(key_id.as_bytes());
    out.extend_from_slice(nonce);
    out.extend_from_slice(sealed);
    out
}

/// A header value's envelope, or `None` when the value is clear.
pub(crate) fn header_envelope(value: &str) -> Option<Vec<u8>> {
    let encoded = value.strip_prefix(HEADER_PREFIX)?;
    let bytes = STANDARD_NO_PAD.decode(encoded).ok()?;
    parse(&bytes).is_some().then_some(bytes)
}

/// The stored text of a header value sealed as `envelope`.
pub(crate) fn header_text(envelope: &[u8]) -> String {
    format!("{HEADER_PREFIX}{}", STANDARD_NO_PAD.encode(envelope))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_parses_back_and_clear_values_do_not() {
        let e = build("k-2026.1", &[7; NONCE_LEN], &[9; TAG_LEN + 3]);
        let p = parse(&e).unwrap();
        assert_eq!(p.key_id, "k-2026.1");
        assert_eq!(p.nonce, [7; NONCE_LEN]);
        assert_eq!(p.sealed.len(), TAG_LEN + 3);
        for clear in [
            &b"{\"amount\":1}"[..],
            b"",
            b"OBX1",
            b"OBX1\x00",
            b"OBX1\x02k!aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            &e[..e.len() - 4],
        ] {
            assert!(parse(clear).is_none(), "{clear:?}");
        }
        assert!(header_envelope(&header_text(&e)).is_some());
        assert!(header_envelope("obx1:not base64!").is_none());
        assert!(header_envelope("Bearer x").is_none());
    }

    #[test]
    fn the_associated_data_names_the_field_and_the_destination() {
        assert_eq!(
            associated_data(Field::Header("X-Note"), "ledger"),
            b"outbox/v1\0header:x-note\0ledger"
        );
        assert_eq!(
            associated_data(Field::Body, "ledger"),
            b"outbox/v1\0body\0ledger"
        );
    }
}
