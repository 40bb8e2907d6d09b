//! The one clock of a gatehouse instance. The authorization server (token
//! times, in seconds), the entity store (generated times and ids, in
//! microseconds) and the outbox (delivery schedules) read the same
//! injected [`Clock`], so a test sets one [`ManualClock`] and every part
//! agrees on what time it is.

#![warn(missing_docs)]

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

const MICROS_PER_SECOND: i64 = 1_000_000;

/// The current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> i64;

    /// Whole seconds since the Unix epoch (token times).
    fn now(&self) -> i64 {
        self.now_micros().div_euclid(MICROS_PER_SECOND)
    }
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    }
}

/// A clock that only moves when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    micros: AtomicI64,
}

impl ManualClock {
    /// A clock at `seconds` since the epoch.
    pub fn at_secs(seconds: i64) -> Self {
        Self::at_micros(seconds.saturating_mul(MICROS_PER_SECOND))
    }

    /// A clock at `micros` microseconds since the epoch.
    pub fn at_micros(micros: i64) -> Self {
        Self {
            micros: AtomicI64::new(micros),
        }
    }

    /// Moves the clock on by `seconds` (back when negative).
    pub fn advance_secs(&self, seconds: i64) {
        self.advance_micros(seconds.saturating_mul(MICROS_PER_SECOND));
    }

    /// Moves the clock on by `micros` microseconds (back when negative).
    pub fn advance_micros(&self, micros: i64) {
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: Duration) {
        self.advance_micros(i64::try_from(by.as_micros()).unwrap_or(i64::MAX));
    }

    /// Sets the clock to `seconds` since the epoch.
    pub fn set_secs(&self, seconds: i64) {
        self.set_micros(seconds.saturating_mul(MICROS_PER_SECOND));
    }

    /// Sets the clock to `micros` microseconds since the epoch.
    pub fn set_micros(&self, micros: i64) {
        self.micros.store(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> i64 {
        self.micros.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_microseconds_are_one_time() {
        let c = ManualClock::at_secs(10);
        assert_eq!((c.now(), c.now_micros()), (10, 10_000_000));
        c.advance_micros(1_500_000);
        assert_eq!(c.now(), 11);
        c.advance(Duration::from_millis(500));
        assert_eq!(c.now(), 12);
        c.set_micros(-1);
        assert_eq!(c.now(), -1, "before the epoch rounds down");
        assert!(SystemClock.now() > 1_700_000_000);
    }
}
