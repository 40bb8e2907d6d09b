//! The store reads the instance's one clock ([`gatehouse_clock`]):
//! generated times (`@createdAt`, `@updatedAt`) and the time part of
//! generated ids, in microseconds.

pub use gatehouse_clock::{Clock, ManualClock, SystemClock};
