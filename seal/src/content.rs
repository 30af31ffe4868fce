//! An op's content (its header values and body) sealed, opened and moved to another key.

use std::fmt;

use crate::envelope::{self, Field};
use crate::error::{OpenError, SealError};
use crate::keys::{Key, Keys};

/// An op's header values and body, sealed or clear.
#[derive(Clone, PartialEq, Eq)]
pub struct Content {
    /// The headers, names and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Content")
            .field("header_names", &names)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// The ids of the keys `headers` and `body` are sealed with, each once, in the order met;
/// empty when nothing is sealed.
pub fn sealed_with(headers: &[(String, String)], body: &[u8]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut note = |bytes: &[u8]| {
        if let Some(p) = envelope::parse(bytes)
            && !ids.iter().any(|i| i == p.key_id)
        {
            ids.push(p.key_id.to_owned());
        }
    };
    for (_, value) in headers {
        if let Some(e) = envelope::header_envelope(value) {
            note(&e);
        }
    }
    note(body);
    ids
}

impl Keys {
    /// `headers` and `body` of an op for `destination` sealed with the sealing key: each
    /// non-empty header value and a non-empty body (an empty one holds nothing to hide).
    pub fn seal_content(
        &self,
        destination: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Content, SealError> {
        let key = self.sealing_key().ok_or(SealError::NoSealingKey)?;
        Ok(seal_with(key, destination, headers, body))
    }

    /// The clear content of an op for `destination`; `None` when nothing in it is sealed.
    pub fn open_content(
        &self,
        destination: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Option<Content>, OpenError> {
        // Clear content (the common case without keys) is neither copied nor decoded twice.
        let sealed = envelope::parse(body).is_some()
            || headers
                .iter()
                .any(|(_, v)| v.starts_with(envelope::HEADER_PREFIX));
        if !sealed {
            return Ok(None);
        }
        let mut opened = false;
        let mut clear_headers = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let clear = match envelope::header_envelope(value) {
                Some(e) => {
                    opened = true;
                    let field = Field::Header(name);
                    let bytes = self.open_one(field, destination, &e)?;
                    String::from_utf8(bytes).map_err(|_| damaged(field, &e))?
                }
                None => value.clone(),
            };
            clear_headers.push((name.clone(), clear));
        }
        let clear_body = if envelope::parse(body).is_some() {
            opened = true;
            self.open_one(Field::Body, destination, body)?
        } else {
            body.to_vec()
        };
        Ok(opened.then_some(Content {
            headers: clear_headers,
            body: clear_body,
        }))
    }

    /// The content sealed with `to` instead: every value sealed with another key opened and
    /// sealed again, and, with `seal_clear`, clear values sealed too. `None` when nothing
    /// changes (all of it already under `to`, or clear and left so).
    pub fn reseal_content(
        &self,
        to: &Key,
        destination: &str,
        headers: &[(String, String)],
        body: &[u8],
        seal_clear: bool,
    ) -> Result<Option<Content>, OpenError> {
        let mut changed = false;
        let mut sealed_headers = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let field = Field::Header(name);
            let clear = match envelope::header_envelope(value) {
                Some(e) => self
                    .under_another_key(to, field, destination, &e)?
                    .map(|plain| String::from_utf8(plain).map_err(|_| damaged(field, &e)))
                    .transpose()?,
                None if seal_clear && !value.is_empty() => Some(value.clone()),
                None => None,
            };
            changed |= clear.is_some();
            let stored =
                clear.map_or_else(|| value.clone(), |v| seal_header(to, destination, name, &v));
            sealed_headers.push((name.clone(), stored));
        }
        let clear_body = if envelope::parse(body).is_some() {
            self.under_another_key(to, Field::Body, destination, body)?
        } else {
            (seal_clear && !body.is_empty()).then(|| body.to_vec())
        };
        changed |= clear_body.is_some();
        if !changed {
            return Ok(None);
        }
        Ok(Some(Content {
            headers: sealed_headers,
            body: clear_body.map_or_else(|| body.to_vec(), |b| seal_body(to, destination, &b)),
        }))
    }

    /// The plaintext of `envelope` when it is sealed with a key other than `to`; `None` when
    /// it is already `to`'s.
    fn under_another_key(
        &self,
        to: &Key,
        field: Field<'_>,
        destination: &str,
        envelope: &[u8],
    ) -> Result<Option<Vec<u8>>, OpenError> {
        if envelope::parse(envelope).is_some_and(|p| p.key_id == to.id()) {
            return Ok(None);
        }
        self.open_one(field, destination, envelope).map(Some)
    }

    fn open_one(
        &self,
        field: Field<'_>,
        destination: &str,
        bytes: &[u8],
    ) -> Result<Vec<u8>, OpenError> {
        let Some(parsed) = envelope::parse(bytes) else {
            return Ok(bytes.to_vec());
        };
        let key = self
            .key(parsed.key_id)
            .ok_or_else(|| OpenError::UnknownKey {
                field: field.describe(),
                key_id: parsed.key_id.to_owned(),
            })?;
        key.open(&envelope::associated_data(field, destination), &parsed)
            .ok_or_else(|| damaged(field, bytes))
    }
}

fn seal_with(key: &Key, destination: &str, headers: &[(String, String)], body: &[u8]) -> Content {
    Content {
        headers: headers
            .iter()
            .map(|(name, value)| (name.clone(), seal_header(key, destination, name, value)))
            .collect(),
        body: seal_body(key, destination, body),
    }
}

/// A header value as stored under `key`: `obx1:` and its envelope, or empty when empty.
fn seal_header(key: &Key, destination: &str, name: &str, value: &str) -> String {
    if value.is_empty() {
        return String::new();
    }
    let aad = envelope::associated_data(Field::Header(name), destination);
    envelope::header_text(&key.seal(&aad, value.as_bytes()))
}

/// A body as stored under `key`: its envelope, or empty when empty.
fn seal_body(key: &Key, destination: &str, body: &[u8]) -> Vec<u8> {
    if body.is_empty() {
        return Vec::new();
    }
    key.seal(&envelope::associated_data(Field::Body, destination), body)
}

fn damaged(field: Field<'_>, bytes: &[u8]) -> OpenError {
    OpenError::Damaged {
        field: field.describe(),
        key_id: envelope::parse(bytes)
            .map(|p| p.key_id.to_owned())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Keys;

    fn keys(ids: &[&str], seal: Option<&str>) -> Keys {
        let keys = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Key::new(id, &[i as u8 + 1; 32]).unwrap())
            .collect();
        Keys::new(keys, seal).unwrap()
    }

    fn headers() -> Vec<(String, String)> {
        vec![
            ("X-Account".into(), "GB29 NWBK 6016 1331 9268 19".into()),
            ("X-Empty".into(), String::new()),
        ]
    }

    const BODY: &[u8] = b"{\"iban\":\"GB29 NWBK 6016 1331 9268 19\"}";

    #[test]
    fn sealed_content_opens_to_the_clear_and_holds_none_of_it() {
        let k = keys(&["a"], Some("a"));
        let sealed = k.seal_content("ledger", &headers(), BODY).unwrap();
        let stored = format!(
            "{:?}{}",
            sealed.headers,
            String::from_utf8_lossy(&sealed.body)
        );
        assert!(!stored.contains("NWBK"), "{stored}");
        assert!(sealed.headers[0].1.starts_with("obx1:"));
        assert_eq!(sealed.headers[1].1, "", "an empty value stays empty");
        assert!(sealed.body.starts_with(b"OBX1\x01a"));
        assert_eq!(sealed_with(&sealed.headers, &sealed.body), ["a"]);
        let clear = k
            .open_content("ledger", &sealed.headers, &sealed.body)
            .unwrap()
            .unwrap();
        assert_eq!(clear.headers, headers());
        assert_eq!(clear.body, BODY);
        // Clear content (an older producer's) opens to nothing: it is sent as it is.
        assert_eq!(k.open_content("ledger", &headers(), BODY).unwrap(), None);
    }

    /// The envelope every language writes (docs/security.md, "Encryption at rest"): these bytes are
    /// what examples/python/outbox_seal.py and examples/node/outbox_seal.js produce for the
    /// same key, id, destination and plaintext.
    #[test]
    fn the_envelope_matches_the_documented_format_byte_for_byte() {
        let k = keys(&["k1"], Some("k1"));
        let headers = vec![("X-Account".to_owned(), "GB29".to_owned())];
        let sealed = k.seal_content("ledger", &headers, b"hello").unwrap();
        assert_eq!(
            sealed.headers[0].1,
            "obx1:T0JYMQJrMfgkBQQzhfD+5wvjZeiM700nzs4/+Tc3nplAdW03HkVK"
        );
        let hex: String = sealed.body.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "4f425831026b31061b25967afdabc620b00c8564fac4dc6e893ba42406b2d6b91418e123eb6d8f38"
        );
    }

    #[test]
    fn a_rerun_writes_the_same_envelope_and_another_place_another() {
        let k = keys(&["a"], Some("a"));
        let one = k.seal_content("ledger", &headers(), BODY).unwrap();
        assert_eq!(one, k.seal_content("ledger", &headers(), BODY).unwrap());
        let elsewhere = k.seal_content("billing", &headers(), BODY).unwrap();
        assert_ne!(one.body, elsewhere.body);
        assert_ne!(one.headers[0].1, elsewhere.headers[0].1);
    }

    #[test]
    fn a_moved_or_changed_envelope_does_not_open_and_says_which_field() {
        let k = keys(&["a"], Some("a"));
        let sealed = k.seal_content("ledger", &headers(), BODY).unwrap();
        // Another destination.
        let e = k
            .open_content("billing", &sealed.headers, &sealed.body)
            .unwrap_err();
        assert!(
            matches!(&e, OpenError::Damaged { field, .. } if field == "header X-Account"),
            "{e}"
        );
        // The body's envelope under another header's name.
        let mut moved = sealed.clone();
        moved.headers[0].0 = "X-Other".into();
        assert!(
            k.open_content("ledger", &moved.headers, &moved.body)
                .is_err()
        );
        // One byte changed.
        let mut changed = sealed.clone();
        let last = changed.body.len() - 1;
        changed.body[last] ^= 1;
        let e = k
            .open_content("ledger", &changed.headers, &changed.body)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the body does not decrypt with key a: it was changed or moved"
        );
        // A key not held.
        let other = keys(&["b"], None);
        let e = other
            .open_content("ledger", &sealed.headers, &sealed.body)
            .unwrap_err();
        assert!(
            matches!(e, OpenError::UnknownKey { ref key_id, .. } if key_id == "a"),
            "{e}"
        );
    }

    #[test]
    fn resealing_moves_content_to_the_new_key() {
        let both = keys(&["a", "b"], Some("a"));
        let sealed = both.seal_content("ledger", &headers(), BODY).unwrap();
        let b = both.key("b").unwrap();
        let moved = both
            .reseal_content(b, "ledger", &sealed.headers, &sealed.body, false)
            .unwrap()
            .unwrap();
        assert_eq!(sealed_with(&moved.headers, &moved.body), ["b"]);
        // Already under b: nothing to do.
        assert_eq!(
            both.reseal_content(b, "ledger", &moved.headers, &moved.body, false)
                .unwrap(),
            None
        );
        // Only b is needed to open it now.
        let only_b = Keys::new(vec![b.clone()], None).unwrap();
        let clear = only_b
            .open_content("ledger", &moved.headers, &moved.body)
            .unwrap()
            .unwrap();
        assert_eq!(clear.body, BODY);
        // Clear content stays clear unless asked.
        assert_eq!(
            both.reseal_content(b, "ledger", &headers(), BODY, false)
                .unwrap(),
            None
        );
        let sealed_now = both
            .reseal_content(b, "ledger", &headers(), BODY, true)
            .unwrap()
            .unwrap();
        assert_eq!(sealed_with(&sealed_now.headers, &sealed_now.body), ["b"]);
    }

    #[test]
    fn keys_are_checked_and_never_printed() {
        assert!(matches!(
            Key::new("a b", &[0; 32]),
            Err(crate::KeyError::BadId { .. })
        ));
        assert!(Key::new("a", &[0; 16]).is_err());
        let dup = vec![
            Key::new("a", &[1; 32]).unwrap(),
            Key::new("a", &[2; 32]).unwrap(),
        ];
        assert!(Keys::new(dup, None).is_err());
        assert!(Keys::new(vec![Key::new("a", &[1; 32]).unwrap()], Some("b")).is_err());
        let shown = format!("{:?}", keys(&["a"], Some("a")));
        assert!(
            shown.contains("\"a\"") && !shown.contains("[1, 1"),
            "{shown}"
        );
        let env = |name: &str| {
            (name == "K").then(|| "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=".to_owned())
        };
        let k = Keys::load(&[("a".into(), "env:K".into())], Some("a"), &env).unwrap();
        assert_eq!(k.ids().collect::<Vec<_>>(), ["a"]);
        let e = Keys::load(&[("a".into(), "env:MISSING".into())], None, &env).unwrap_err();
        assert!(e.to_string().contains("MISSING"), "{e}");
        let e = Keys::load(&[("a".into(), "vault:x".into())], None, &env).unwrap_err();
        assert!(e.to_string().contains("file:/path"), "{e}");
    }
}
