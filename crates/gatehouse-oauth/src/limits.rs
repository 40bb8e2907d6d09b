//! Rate limits on the token endpoints (per client and per remote address,
//! governor GCRA) and throttling of failed password logins (per user and per
//! address).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// How often (in checked requests) idle limiter state is dropped.
const HOUSEKEEPING_EVERY: u64 = 4096;

pub(crate) struct RateLimits {
    per_client: DefaultKeyedRateLimiter<String>,
    per_addr: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").finish_non_exhaustive()
    }
}

impl RateLimits {
    pub(crate) fn new(per_second: u32, burst: u32) -> Self {
        let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(rate);
        let quota = Quota::per_second(rate).allow_burst(burst);
        Self {
            per_client: RateLimiter::keyed(quota),
            per_addr: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    fn housekeeping(&self) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % HOUSEKEEPING_EVERY
            == HOUSEKEEPING_EVERY - 1
        {
            self.per_client.retain_recent();
            self.per_addr.retain_recent();
        }
    }

    /// `Err(seconds to wait)` when the address is over its rate.
    pub(crate) fn check_addr(&self, addr: IpAddr) -> Result<(), u64> {
        self.housekeeping();
        self.per_addr
            .check_key(&addr)
            .map_err(|n| ceil_secs(n.wait_time_from(self.clock.now())))
    }

    /// `Err(seconds to wait)` when the client is over its rate.
    pub(crate) fn check_client(&self, client_id: &str) -> Result<(), u64> {
        self.per_client
            .check_key(&client_id.to_string())
            .map_err(|n| ceil_secs(n.wait_time_from(self.clock.now())))
    }
}

fn ceil_secs(d: std::time::Duration) -> u64 {
    let s = d.as_secs();
    if d.subsec_nanos() > 0 {
        s + 1
    } else {
        s.max(1)
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    window_start: i64,
}

/// Counts failed password logins per key (a user name, or an address) in a
/// fixed window; at the limit, further attempts are refused until the window
/// ends, whether the password would be right or not.
#[derive(Debug)]
pub(crate) struct LoginThrottle {
    limit: u32,
    window: i64,
    entries: Mutex<HashMap<String, Failures>>,
}

/// Entries kept before expired ones are swept.
const THROTTLE_SWEEP_AT: usize = 10_000;

impl LoginThrottle {
    pub(crate) fn new(limit: u32, window_secs: u64) -> Self {
        Self {
            limit: limit.max(1),
            window: i64::try_from(window_secs.max(1)).unwrap_or(i64::MAX),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds to wait)` if `key` is locked out at `now`.
    pub(crate) fn check(&self, key: &str, now: i64) -> Result<(), u64> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some(f)
                if f.count >= self.limit && now < f.window_start.saturating_add(self.window) =>
            {
                Err(u64::try_from(f.window_start.saturating_add(self.window) - now).unwrap_or(1))
            }
            _ => Ok(()),
        }
    }

    /// Records a failed login for `key`.
    pub(crate) fn failed(&self, key: &str, now: i64) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= THROTTLE_SWEEP_AT {
            let window = self.window;
            entries.retain(|_, f| now < f.window_start.saturating_add(window));
        }
        let f = entries.entry(key.to_string()).or_insert(Failures {
            count: 0,
            window_start: now,
        });
        if now >= f.window_start.saturating_add(self.window) {
            *f = Failures {
                count: 0,
                window_start: now,
            };
        }
        f.count = f.count.saturating_add(1);
    }

    /// Forgets failures of `key` after a successful login.
    pub(crate) fn succeeded(&self, key: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_locks_after_the_limit_until_the_window_ends() {
        let t = LoginThrottle::new(3, 60);
        let k = "alice";
        for _ in 0..3 {
            assert!(t.check(k, 100).is_ok());
            t.failed(k, 100);
        }
        assert_eq!(t.check(k, 100), Err(60));
        assert_eq!(t.check(k, 159), Err(1));
        assert!(t.check("bob", 100).is_ok());
        assert!(t.check(k, 160).is_ok());
        t.failed(k, 160);
        assert!(t.check(k, 160).is_ok(), "a new window");
        t.succeeded(k);
        assert!(t.check(k, 161).is_ok());
    }

    #[test]
    fn rate_limit_burst_then_wait() {
        let r = RateLimits::new(1, 2);
        let a: IpAddr = [127, 0, 0, 1].into();
        assert!(r.check_addr(a).is_ok());
        assert!(r.check_addr(a).is_ok());
        assert_eq!(r.check_addr(a), Err(1));
        assert!(r.check_client("x").is_ok());
    }
}
