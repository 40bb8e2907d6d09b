//! The outbox reads the instance's one clock ([`gatehouse_clock`]): due
//! times, leases and ages are microseconds since the epoch.

pub use gatehouse_clock::{Clock, ManualClock, SystemClock};

/// `d` in microseconds, saturating.
pub(crate) fn micros(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
