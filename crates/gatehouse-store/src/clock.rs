//! The server's clock, as the store reads it: generated times
//! (`@createdAt`, `@updatedAt`, and the time a migration fills existing
//! rows with) come from the [`Clock`] given at [`crate::Store::connect`],
//! so tests move a [`ManualClock`] instead of sleeping.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use time::OffsetDateTime;

/// A source of the current time, to the microsecond (what a stored
/// `DateTime` keeps).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> i64;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
        i64::try_from(nanos / 1_000).unwrap_or(i64::MAX)
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

    /// Moves the clock forward by `micros` (backward if negative).
    pub fn advance(&self, micros: i64) {
        self.micros.fetch_add(micros, Ordering::SeqCst);
    }

    /// Sets the clock to `micros` since the Unix epoch.
    pub fn set(&self, micros: i64) {
        self.micros.store(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> i64 {
        self.micros.load(Ordering::SeqCst)
    }
}
