//! Password hashes of the console's users: argon2id PHC strings (`$argon2id$v=19$m=…`), made
//! by `outboxctl console hash-password` and checked at login with RustCrypto's verifier. The
//! parameters come from the hash itself, so an older, cheaper or costlier hash still verifies.

use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};

/// The longest password accepted, in bytes: argon2 takes any length, but a login form must not
/// let a client make the server hash megabytes.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// Why a password could not be hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordError(String);

impl std::fmt::Display for PasswordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PasswordError {}

/// `password` hashed with argon2id and the crate's default cost (19 MiB, 2 passes, one lane:
/// OWASP's minimum), with a random 16-byte salt, as a PHC string.
pub fn hash(password: &str) -> Result<String, PasswordError> {
    if password.is_empty() {
        return Err(PasswordError("the password is empty".to_owned()));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(PasswordError(format!(
            "the password is longer than {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt)
        .map_err(|e| PasswordError(format!("no random salt from the system: {e}")))?;
    Argon2::default()
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| PasswordError(format!("argon2 failed: {e}")))
}

/// Whether `phc` is a PHC string argon2 can verify against: an argon2 variant, its
/// parameters, a salt and a hash. The reason when not (never quoting the string).
pub fn check(phc: &str) -> Result<(), String> {
    let parsed = PasswordHash::new(phc).map_err(|e| format!("not a PHC string ({e})"))?;
    argon2::Algorithm::try_from(parsed.algorithm.as_str())
        .map_err(|_| "not an argon2 hash (expected $argon2id$…)".to_owned())?;
    argon2::Params::try_from(&parsed).map_err(|e| format!("its parameters: {e}"))?;
    if parsed.salt.is_none() || parsed.hash.is_none() {
        return Err("it has no salt or no hash".to_owned());
    }
    Ok(())
}

/// Whether `password` matches `phc`. CPU-bound (tens of milliseconds): call it off the
/// runtime's threads.
pub(crate) fn verify(password: &str, phc: &str) -> bool {
    password.len() <= MAX_PASSWORD_BYTES
        && Argon2::default()
            .verify_password(password.as_bytes(), phc)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cheap hash (8 KiB, one pass) of "correct horse", so the test is quick in debug builds.
    fn cheap(password: &str) -> String {
        let params = argon2::Params::new(8, 1, 1, None).unwrap();
        let a = Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        a.hash_password_with_salt(password.as_bytes(), b"saltsaltsaltsalt")
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_hash_verifies_its_password_only() {
        let phc = cheap("correct horse");
        assert!(phc.starts_with("$argon2id$v=19$m=8,t=1,p=1$"), "{phc}");
        assert_eq!(check(&phc), Ok(()));
        assert!(verify("correct horse", &phc));
        assert!(!verify("correct hors", &phc));
        assert!(!verify(&"x".repeat(MAX_PASSWORD_BYTES + 1), &phc));
    }

    #[test]
    fn malformed_hashes_are_refused_with_a_reason() {
        for bad in [
            "",
            "hunter2",
            "$2b$12$abcdefghijklmnopqrstuv",
            "$argon2id$v=19$m=8,t=1,p=1",
            "$argon2id$v=19$m=1,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
            "$scrypt$ln=15,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
        ] {
            let why = check(bad).unwrap_err();
            assert!(!why.is_empty(), "{bad}");
            assert!(!verify("x", bad), "{bad}");
        }
        assert!(hash("").is_err());
    }
}
