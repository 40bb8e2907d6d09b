//! Rate limits (governor GCRA): per authenticated client on the endpoints
//! that authenticate clients, per consumer on the OAuth 1.0 endpoints, and
//! per token subject on userinfo, each charged only once the caller proved
//! who it is. Failures (client
//! authentication, OAuth 1.0 signatures, logins) are throttled per address
//! by `gatehouse_auth::LoginThrottle`, never by a bucket every caller
//! behind one address shares.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// How often (in checked requests) idle limiter state is dropped.
const HOUSEKEEPING_EVERY: u64 = 4096;

pub(crate) struct RateLimits {
    per_client: DefaultKeyedRateLimiter<String>,
    per_consumer: DefaultKeyedRateLimiter<String>,
    per_subject: DefaultKeyedRateLimiter<String>,
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
            per_consumer: RateLimiter::keyed(quota),
            per_subject: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    fn housekeeping(&self) {
        if self.checks.fetch_add(1, Ordering::Relaxed) % HOUSEKEEPING_EVERY
            == HOUSEKEEPING_EVERY - 1
        {
            self.per_client.retain_recent();
            self.per_consumer.retain_recent();
            self.per_subject.retain_recent();
        }
    }

    /// `Err(seconds to wait)` when the client is over its rate.
    pub(crate) fn check_client(&self, client_id: &str) -> Result<(), u64> {
        self.check(&self.per_client, client_id)
    }

    /// `Err(seconds to wait)` when the OAuth 1.0 consumer is over its rate.
    pub(crate) fn check_consumer(&self, key: &str) -> Result<(), u64> {
        self.check(&self.per_consumer, key)
    }

    /// `Err(seconds to wait)` when userinfo was asked about the subject
    /// `sub` (by a verified token) over its rate.
    pub(crate) fn check_userinfo(&self, sub: &str) -> Result<(), u64> {
        self.check(&self.per_subject, sub)
    }

    fn check(&self, limiter: &DefaultKeyedRateLimiter<String>, key: &str) -> Result<(), u64> {
        self.housekeeping();
        limiter
            .check_key(&key.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_burst_then_wait() {
        let r = RateLimits::new(1, 2);
        assert!(r.check_consumer("c").is_ok());
        assert!(r.check_consumer("c").is_ok());
        assert_eq!(r.check_consumer("c"), Err(1));
        // Clients and consumers have buckets of their own.
        assert!(r.check_client("c").is_ok());
        assert!(r.check_consumer("d").is_ok());
        assert!(r.check_userinfo("c").is_ok());
    }
}
