//! The outbox's time, a parameter so that backoff and lease expiry are
//! tested without sleeping.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Where the outbox reads the time: creation, next attempt and lease
/// expiry are microseconds since the Unix epoch on this clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            // A clock before 1970 is a broken host; the epoch keeps logic sane.
            Err(_) => 0,
        }
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    micros: AtomicI64,
}

impl ManualClock {
    /// A clock showing `micros` microseconds since the Unix epoch.
    pub fn new(micros: i64) -> Self {
        Self {
            micros: AtomicI64::new(micros),
        }
    }

    /// Moves the clock to `micros`.
    pub fn set(&self, micros: i64) {
        self.micros.store(micros, Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.micros.fetch_add(micros(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> i64 {
        self.micros.load(Ordering::SeqCst)
    }
}

/// `d` in microseconds, saturating.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
