//! Randomness as a parameter: logic asks a [`Random`], tests may seed one.
//!
//! Every random value this crate makes (client secrets, refresh tokens, token
//! ids, salts, AES-GCM nonces) comes from the [`Random`] it was given. The one
//! exception is signing-key generation, which aws-lc-rs performs with its own
//! CSPRNG (its API takes no caller randomness for key generation).

use std::fmt;
use std::sync::Mutex;

use rand::{RngCore, SeedableRng};

/// A cryptographically secure source of random bytes.
pub trait Random: Send + Sync + fmt::Debug {
    /// Fills `dest` with random bytes.
    fn fill(&self, dest: &mut [u8]);
}

/// The operating system's CSPRNG (through `rand`'s thread-local generator,
/// a ChaCha12 stream seeded and periodically reseeded from the OS).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemRandom;

impl Random for SystemRandom {
    fn fill(&self, dest: &mut [u8]) {
        rand::rng().fill_bytes(dest);
    }
}

/// A deterministic generator for tests: the same seed gives the same bytes.
/// Never use it to serve real traffic.
#[derive(Debug)]
pub struct SeededRandom {
    rng: Mutex<rand::rngs::StdRng>,
}

impl SeededRandom {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
    }
}

impl Random for SeededRandom {
    fn fill(&self, dest: &mut [u8]) {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        rng.fill_bytes(dest);
    }
}

/// `n` random bytes, base64url without padding.
pub(crate) fn token_string(random: &dyn Random, n: usize) -> String {
    let mut buf = vec![0u8; n];
    random.fill(&mut buf);
    crate::b64(&buf)
}
