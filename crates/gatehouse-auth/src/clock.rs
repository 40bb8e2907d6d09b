//! Time as a parameter: logic asks a [`Clock`], tests move a [`ManualClock`].

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of the current time, in whole seconds since the Unix epoch
/// (the resolution of JWT `iat`/`exp`, RFC 7519 §2 NumericDate).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Seconds since the Unix epoch.
    fn now(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            // A clock before 1970 is a broken host; the epoch keeps logic sane.
            Err(_) => 0,
        }
    }
}

/// A clock that only moves when told to: for tests of expiry without sleeping.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock showing `now` (seconds since the Unix epoch).
    pub fn new(now: i64) -> Self {
        Self {
            now: AtomicI64::new(now),
        }
    }

    /// Moves the clock forward by `seconds` (backward if negative).
    pub fn advance(&self, seconds: i64) {
        self.now.fetch_add(seconds, Ordering::SeqCst);
    }

    /// Sets the clock to `now`.
    pub fn set(&self, now: i64) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
