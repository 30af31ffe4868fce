//! Standard Webhooks signatures: `webhook-id` (the op id, the same on every attempt),
//! `webhook-timestamp` (seconds) and `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `"{id}.{timestamp}.{body}"`, keyed with the base64 secret after its `whsec_` prefix.
//! Parsing the key is part of the configuration; signing, of the daemon (feature `daemon`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
#[cfg(feature = "daemon")]
use hmac::{Hmac, KeyInit, Mac};
#[cfg(feature = "daemon")]
use sha2::Sha256;

/// A destination's signing key, decoded from `whsec_<base64>`.
#[derive(Clone)]
// Without the daemon the key is parsed (to validate the config) but never signs anything.
#[cfg_attr(not(feature = "daemon"), allow(dead_code))]
pub struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

impl SigningKey {
    /// Decodes `whsec_<base64>` (the prefix is optional). The error never quotes the secret.
    pub fn parse(secret: &str) -> Result<Self, String> {
        let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| "is not whsec_ followed by base64".to_owned())?;
        if key.len() < 16 {
            return Err(format!("decodes to {} bytes; use at least 16", key.len()));
        }
        Ok(SigningKey(key))
    }

    /// The `webhook-signature` value for this message.
    #[cfg(feature = "daemon")]
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    #[cfg(feature = "daemon")]
    fn the_specification_example_verifies() {
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            key.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn bad_secrets_are_refused_without_being_echoed() {
        let err = SigningKey::parse("whsec_not*base64").unwrap_err();
        assert!(!err.contains("not*base64"));
        assert!(SigningKey::parse("whsec_c2hvcnQ=").is_err(), "too short");
        assert_eq!(
            format!(
                "{:?}",
                SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
            ),
            "SigningKey(***)"
        );
    }
}
