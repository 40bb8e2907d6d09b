//! Client secrets (random 256-bit, stored as SHA-256, compared in constant
//! time) and user passwords (argon2id).

use argon2::{Algorithm, Argon2, Params, PasswordHash, PasswordHasher, PasswordVerifier, Version};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Error, Result};
use crate::random::Random;

/// Bytes of entropy in a generated client secret (256 bits).
pub const CLIENT_SECRET_BYTES: usize = 32;

/// A new random client secret: 256 bits, base64url (43 characters).
pub fn generate_client_secret(random: &dyn Random) -> String {
    crate::random::token_string(random, CLIENT_SECRET_BYTES)
}

/// SHA-256 of a secret. A fast hash is enough for high-entropy random
/// secrets; user-chosen passwords use [`hash_password`] instead.
pub fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Whether `secret` hashes to `stored`, compared in constant time.
pub fn verify_secret(secret: &str, stored: &[u8]) -> bool {
    let computed = Sha256::digest(secret.as_bytes());
    bool::from(computed[..].ct_eq(stored))
}

/// base64url SHA-256 of an opaque token value: the record id of a refresh
/// token, so the store never holds a usable token.
pub fn token_id(value: &str) -> String {
    crate::b64(&Sha256::digest(value.as_bytes()))
}

/// argon2id with the OWASP-recommended m=19 MiB, t=2, p=1.
fn argon2() -> Result<Argon2<'static>> {
    let params = Params::new(19 * 1024, 2, 1, None)
        .map_err(|e| Error::server(format!("argon2 parameters: {e}")))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The argon2id PHC string of `password`, salted with 16 random bytes.
/// CPU-heavy (tens of milliseconds): call it off the async executor.
pub fn hash_password(password: &str, random: &dyn Random) -> Result<String> {
    let mut salt = [0u8; 16];
    random.fill(&mut salt);
    let hash = argon2()?
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map_err(|e| Error::server(format!("argon2 hash: {e}")))?;
    Ok(hash.to_string())
}

/// Whether `password` matches the PHC string `stored`. A malformed stored
/// hash never matches. CPU-heavy: call it off the async executor.
pub fn verify_password(password: &str, stored: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    match argon2() {
        Ok(a) => a.verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

/// A valid argon2id hash of a password nobody knows, verified against when
/// the user does not exist so that response time does not reveal which user
/// names exist.
/// A valid argon2id hash no password matches: verified against when a user
/// does not exist, so a miss costs as much as a wrong password.
pub const DUMMY_PASSWORD_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$Ps3nq0jpNcl4G3FJ4K9O5DmUJ8iKqfD6xNrDVtqjdBw";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    #[test]
    fn client_secret_round_trip() {
        let r = SeededRandom::new(1);
        let s = generate_client_secret(&r);
        assert_eq!(s.len(), 43);
        let h = hash_secret(&s);
        assert!(verify_secret(&s, &h));
        assert!(!verify_secret("nope", &h));
        assert!(!verify_secret(&s, &h[..31]));
    }

    #[test]
    fn passwords_use_argon2id() {
        let r = SeededRandom::new(2);
        let h = hash_password("correct horse", &r).unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong", &h));
        assert!(!verify_password("correct horse", "garbage"));
    }

    #[test]
    fn dummy_hash_parses() {
        assert!(PasswordHash::new(DUMMY_PASSWORD_HASH).is_ok());
        assert!(!verify_password("", DUMMY_PASSWORD_HASH));
    }
}
