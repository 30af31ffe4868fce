//! Keys: each an id and 32 bytes read from a file or an environment variable, several readable
//! at once (a rotation's old and new), one of them used to seal.

use std::fmt;

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit as _, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::envelope::{self, NONCE_LEN, Parsed};
use crate::error::KeyError;

/// The length of a key.
const KEY_LEN: usize = 32;

/// Where a key's 32 bytes come from: its base64 text, in a file (`file:/path`) or an
/// environment variable (`env:NAME`), surrounding whitespace ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file holding the key in base64 (`head -c 32 /dev/urandom | base64 > key`).
    File(std::path::PathBuf),
    /// An environment variable holding the key in base64.
    Env(String),
}

impl KeySource {
    /// `file:/path` or `env:NAME`.
    pub fn parse(text: &str) -> Result<KeySource, String> {
        if let Some(path) = text.strip_prefix("file:") {
            if path.is_empty() {
                return Err("file: needs a path".into());
            }
            return Ok(KeySource::File(path.into()));
        }
        if let Some(name) = text.strip_prefix("env:") {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err("env: needs a variable name".into());
            }
            return Ok(KeySource::Env(name.to_owned()));
        }
        Err("expected file:/path or env:NAME".into())
    }

    /// The key's base64 text: read from the file, or taken from `env`.
    fn read(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Zeroizing<String>, String> {
        match self {
            KeySource::File(path) => std::fs::read_to_string(path)
                .map(Zeroizing::new)
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
            KeySource::Env(name) => env(name)
                .map(Zeroizing::new)
                .ok_or_else(|| format!("the environment variable {name} is not set")),
        }
    }
}

/// One key: its id, the cipher and the key its nonces are derived with. Never printed.
#[derive(Clone)]
pub struct Key {
    id: String,
    cipher: Aes256Gcm,
    nonces: Hmac<Sha256>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// The key `id` (1-64 of `[A-Za-z0-9._-]`) of exactly 32 bytes.
    pub fn new(id: &str, bytes: &[u8]) -> Result<Key, KeyError> {
        if !envelope::valid_key_id(id) {
            return Err(KeyError::BadId { id: id.to_owned() });
        }
        if bytes.len() != KEY_LEN {
            return Err(KeyError::Material {
                id: id.to_owned(),
                reason: format!("decodes to {} bytes; a key is {KEY_LEN}", bytes.len()),
            });
        }
        let cipher = Aes256Gcm::new_from_slice(bytes).map_err(|_| KeyError::Material {
            id: id.to_owned(),
            reason: format!("a key is {KEY_LEN} bytes"),
        })?;
        let mut derive = <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(bytes).map_err(|_| {
            KeyError::Material {
                id: id.to_owned(),
                reason: "cannot derive the nonce key".into(),
            }
        })?;
        derive.update(b"outbox/v1 nonce");
        let mut nonce_key = Zeroizing::new([0u8; KEY_LEN]);
        nonce_key.copy_from_slice(&derive.finalize().into_bytes());
        let nonces =
            <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(&nonce_key[..]).map_err(|_| {
                KeyError::Material {
                    id: id.to_owned(),
                    reason: "cannot derive the nonce key".into(),
                }
            })?;
        Ok(Key {
            id: id.to_owned(),
            cipher,
            nonces,
        })
    }

    /// The key `id` read from `source`, its base64 text decoded; `env` reads a variable.
    pub fn load(
        id: &str,
        source: &KeySource,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Key, KeyError> {
        let material = |reason: String| KeyError::Material {
            id: id.to_owned(),
            reason,
        };
        let text = source.read(env).map_err(material)?;
        let text = text.trim();
        let bytes = Zeroizing::new(
            STANDARD
                .decode(text)
                .or_else(|_| STANDARD_NO_PAD.decode(text))
                .map_err(|_| material("is not base64".into()))?,
        );
        Key::new(id, &bytes)
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The envelope of `plaintext` bound to `aad`.
    pub(crate) fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut mac = self.nonces.clone();
        mac.update(aad);
        mac.update(&[0]);
        mac.update(plaintext);
        let digest = mac.finalize().into_bytes();
        let nonce_bytes = &digest[..NONCE_LEN];
        let nonce = Nonce::try_from(nonce_bytes).expect("12 bytes");
        let sealed = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            // Only a plaintext over 64 GiB fails; bodies are at most 16 MiB.
            .expect("AES-GCM seals any body of a supported size");
        envelope::build(&self.id, nonce_bytes, &sealed)
    }

    /// The plaintext of `parsed`, bound to `aad`, or `None` when it does not open (another
    /// place, another key, or changed).
    pub(crate) fn open(&self, aad: &[u8], parsed: &Parsed<'_>) -> Option<Vec<u8>> {
        let nonce = Nonce::try_from(parsed.nonce).ok()?;
        self.cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: parsed.sealed,
                    aad,
                },
            )
            .ok()
    }
}

/// The keys a component holds: every key it may open with, and the one it seals with, if any.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    keys: Vec<Key>,
    seal_with: Option<usize>,
}

impl Keys {
    /// `keys` (distinct ids), sealing with `encrypt_with` when given (one of them).
    pub fn new(keys: Vec<Key>, encrypt_with: Option<&str>) -> Result<Keys, KeyError> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(KeyError::Duplicate { id: k.id.clone() });
            }
        }
        let seal_with = match encrypt_with {
            None => None,
            Some(id) => Some(
                keys.iter()
                    .position(|k| k.id == id)
                    .ok_or_else(|| KeyError::UnknownSealKey { id: id.to_owned() })?,
            ),
        };
        Ok(Keys { keys, seal_with })
    }

    /// Keys read from `(id, source)` pairs (`file:/path` or `env:NAME`), sealing with
    /// `encrypt_with` when given; `env` reads an environment variable.
    pub fn load(
        sources: &[(String, String)],
        encrypt_with: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Keys, KeyError> {
        let keys = sources
            .iter()
            .map(|(id, source)| {
                let source = KeySource::parse(source).map_err(|reason| KeyError::Source {
                    id: id.clone(),
                    reason,
                })?;
                Key::load(id, &source, env)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Keys::new(keys, encrypt_with)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The ids of the keys held, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// The key that seals, if any.
    pub fn sealing_key(&self) -> Option<&Key> {
        self.seal_with.map(|i| &self.keys[i])
    }

    /// The key of `id`, if held.
    pub fn key(&self, id: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }
}
