//! The authorization server reads the instance's one clock
//! ([`gatehouse_clock`]): token, code and key times are whole seconds
//! since the epoch ([`Clock::now`]).

pub use gatehouse_clock::{Clock, ManualClock, SystemClock};
