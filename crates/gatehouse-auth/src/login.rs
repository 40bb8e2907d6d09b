//! Failed-login throttling and bounded password verification, shared by
//! every place that checks a secret: the password grant, OAuth 1.0
//! approval, HTTP Basic and WebSocket Basic (through
//! [`AuthServer::check_user_password`](crate::AuthServer::check_user_password)),
//! and OAuth 2.0 client authentication (per address).
//!
//! Failures are counted per (account, address) and per address, never per
//! account alone: an attacker elsewhere cannot lock the real user out.
//! Each key gets a few free failures; after that, every further failure
//! blocks the key for a delay that doubles up to a cap. A key is forgotten
//! after a quiet period without failures; a success clears its
//! (account, address) key. Time is whole seconds from the server's
//! [`Clock`](crate::Clock), passed in.
//!
//! | key | free failures | first delay | cap | forgotten after |
//! |---|---|---|---|---|
//! | (account, address) | [`FREE_FAILURES_PER_ACCOUNT`] | 1 s | [`MAX_DELAY_PER_ACCOUNT`] | [`QUIET_RESET_PER_ACCOUNT`] |
//! | address (any account) | [`FREE_FAILURES_PER_ADDRESS`] | 1 s | [`MAX_DELAY_PER_ADDRESS`] | [`QUIET_RESET_PER_ADDRESS`] |
//! | sign-ups from an address | [`FREE_SIGN_UPS_PER_ADDRESS`] | 1 s | [`MAX_DELAY_PER_SIGN_UP_ADDRESS`] | [`QUIET_RESET_PER_SIGN_UP_ADDRESS`] |
//!
//! Self-service sign-ups are counted by the same rule, on a key of their
//! own: every account created is one more "failure" of its address, so a
//! script creating accounts from one address is slowed like one guessing
//! passwords ([`LoginThrottle::take_sign_up`]).
//!
//! IPv6 addresses are counted per /64 (what one host usually gets).

use std::net::IpAddr;

use quick_cache::sync::{Cache, EntryAction, EntryResult};
use sha2::{Digest, Sha256};

/// Failures of one account from one address before any delay.
pub const FREE_FAILURES_PER_ACCOUNT: u32 = 5;
/// Longest delay (seconds) after a failure of one account from one address.
pub const MAX_DELAY_PER_ACCOUNT: i64 = 300;
/// Seconds without failures after which an (account, address) key is forgotten.
pub const QUIET_RESET_PER_ACCOUNT: i64 = 900;
/// Failures from one address (any accounts) before any delay: the token
/// endpoints' burst, so password spraying from one address
/// is slowed without penalising a few typos behind a shared address.
pub const FREE_FAILURES_PER_ADDRESS: u32 = 40;
/// Longest delay (seconds) after a failure from one address.
pub const MAX_DELAY_PER_ADDRESS: i64 = 60;
/// Seconds without failures after which an address key is forgotten.
pub const QUIET_RESET_PER_ADDRESS: i64 = 300;
/// Sign-ups from one address before any delay: a family or a classroom
/// behind one address signs up at once; a script is slowed after these.
pub const FREE_SIGN_UPS_PER_ADDRESS: u32 = 10;
/// Longest delay (seconds) between sign-ups from one address.
pub const MAX_DELAY_PER_SIGN_UP_ADDRESS: i64 = 300;
/// Seconds without sign-ups after which an address's count is forgotten.
pub const QUIET_RESET_PER_SIGN_UP_ADDRESS: i64 = 3600;
/// Concurrent argon2 verifications per available CPU; more wait (see
/// [`PASSWORD_CHECK_WAIT`]) instead of piling up on the blocking pool.
pub const PASSWORD_CHECKS_PER_CPU: usize = 2;
/// How long a password check waits for a free verification slot before the
/// caller is told to retry later (`Retry-After: 1`).
pub const PASSWORD_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Keys kept at most; past it the cache's eviction drops the keys seen
/// least (a key that keeps failing stays).
const MAX_KEYS: usize = 100_000;

/// What kind of account a failure is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Account<'a> {
    /// A resource owner (user name).
    User(&'a str),
    /// An OAuth 2.0 client (client id) or OAuth 1.0 consumer (key).
    Client(&'a str),
}

#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    last: i64,
}

#[derive(Debug, Clone, Copy)]
struct Policy {
    free: u32,
    max_delay: i64,
    quiet_reset: i64,
}

const PER_ACCOUNT: Policy = Policy {
    free: FREE_FAILURES_PER_ACCOUNT,
    max_delay: MAX_DELAY_PER_ACCOUNT,
    quiet_reset: QUIET_RESET_PER_ACCOUNT,
};
const PER_ADDRESS: Policy = Policy {
    free: FREE_FAILURES_PER_ADDRESS,
    max_delay: MAX_DELAY_PER_ADDRESS,
    quiet_reset: QUIET_RESET_PER_ADDRESS,
};

const PER_SIGN_UP_ADDRESS: Policy = Policy {
    free: FREE_SIGN_UPS_PER_ADDRESS,
    max_delay: MAX_DELAY_PER_SIGN_UP_ADDRESS,
    quiet_reset: QUIET_RESET_PER_SIGN_UP_ADDRESS,
};

impl Policy {
    /// Until when a key with `b` is blocked (`None`: not blocked).
    fn blocked_until(&self, b: &Backoff) -> Option<i64> {
        let over = b.failures.checked_sub(self.free).filter(|n| *n > 0)?;
        // 1 s after the first failure past the free ones, doubling.
        let delay = 1i64
            .checked_shl(over.saturating_sub(1).min(62))
            .unwrap_or(i64::MAX)
            .min(self.max_delay);
        Some(b.last.saturating_add(delay))
    }

    fn forgotten(&self, b: &Backoff, now: i64) -> bool {
        now.saturating_sub(b.last) >= self.quiet_reset
    }
}

/// The failed-login throttle. One per [`AuthServer`](crate::AuthServer).
#[derive(Debug)]
pub struct LoginThrottle {
    /// sha256(kind, account, address) or sha256(address) -> backoff. A
    /// bounded cache, because every address an attacker controls adds keys.
    entries: Cache<[u8; 32], Backoff>,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        Self {
            entries: Cache::new(MAX_KEYS),
        }
    }
}

/// The address as counted: IPv6 per /64.
fn counted(addr: Option<IpAddr>) -> Option<IpAddr> {
    match addr {
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => Some(IpAddr::V4(v4)),
            None => {
                let mut o = v6.octets();
                o[8..].fill(0);
                Some(IpAddr::V6(o.into()))
            }
        },
        other => other,
    }
}

fn addr_bytes(h: &mut Sha256, addr: Option<IpAddr>) {
    match counted(addr) {
        None => h.update([0u8]),
        Some(IpAddr::V4(a)) => {
            h.update([4u8]);
            h.update(a.octets());
        }
        Some(IpAddr::V6(a)) => {
            h.update([6u8]);
            h.update(a.octets());
        }
    }
}

fn account_key(account: Account<'_>, addr: Option<IpAddr>) -> [u8; 32] {
    let mut h = Sha256::new();
    let (kind, name) = match account {
        Account::User(n) => (b'u', n),
        Account::Client(n) => (b'c', n),
    };
    h.update([kind]);
    h.update((name.len() as u64).to_be_bytes());
    h.update(name.as_bytes());
    addr_bytes(&mut h, addr);
    h.finalize().into()
}

fn address_key(addr: Option<IpAddr>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([b'a']);
    addr_bytes(&mut h, addr);
    h.finalize().into()
}

fn sign_up_key(addr: Option<IpAddr>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([b's']);
    addr_bytes(&mut h, addr);
    h.finalize().into()
}

impl LoginThrottle {
    /// An empty throttle.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Err(seconds to wait)` if `account` may not try from `addr` at `now`
    /// (checked before any secret is verified, so a blocked attempt costs
    /// nothing and a right secret does not get through either).
    pub fn check(&self, account: Account<'_>, addr: Option<IpAddr>, now: i64) -> Result<(), u64> {
        let wait = [
            (account_key(account, addr), PER_ACCOUNT),
            (address_key(addr), PER_ADDRESS),
        ]
        .iter()
        .filter_map(|(k, policy)| {
            let b = self.entries.get(k)?;
            policy.blocked_until(&b).filter(|until| now < *until)
        })
        .max();
        match wait {
            Some(until) => Err(u64::try_from(until - now).unwrap_or(1).max(1)),
            None => Ok(()),
        }
    }

    /// `Err(seconds to wait)` if the address is blocked, whatever account
    /// (for requests that fail before an account is known).
    pub fn check_address(&self, addr: Option<IpAddr>, now: i64) -> Result<(), u64> {
        match self
            .entries
            .get(&address_key(addr))
            .and_then(|b| PER_ADDRESS.blocked_until(&b))
        {
            Some(until) if now < until => Err(u64::try_from(until - now).unwrap_or(1).max(1)),
            _ => Ok(()),
        }
    }

    /// Records a failed authentication of `account` from `addr` at `now`.
    pub fn failed(&self, account: Account<'_>, addr: Option<IpAddr>, now: i64) {
        self.bump(&account_key(account, addr), now, PER_ACCOUNT);
        self.bump(&address_key(addr), now, PER_ADDRESS);
    }

    /// Records a failure from `addr` that names no account (e.g. missing
    /// or malformed client credentials).
    pub fn failed_address(&self, addr: Option<IpAddr>, now: i64) {
        self.bump(&address_key(addr), now, PER_ADDRESS);
    }

    /// Forgets the failures of `account` from `addr` after a success. The
    /// address's own count stays (other accounts may be under attack).
    pub fn succeeded(&self, account: Account<'_>, addr: Option<IpAddr>) {
        self.entries.remove(&account_key(account, addr));
    }

    /// A sign-up from `addr` at `now`: `Err(seconds to wait)` while the
    /// address is blocked (nothing counted), else counted and `Ok`. Check
    /// and count are one step under the cache's lock for the key, so
    /// concurrent sign-ups cannot all pass one check.
    pub fn take_sign_up(&self, addr: Option<IpAddr>, now: i64) -> Result<(), u64> {
        let policy = PER_SIGN_UP_ADDRESS;
        let result = self.entries.entry(&sign_up_key(addr), None, |_, b| {
            if policy.forgotten(b, now) {
                b.failures = 0;
            }
            if let Some(until) = policy.blocked_until(b).filter(|until| now < *until) {
                return EntryAction::Retain(Err(u64::try_from(until - now).unwrap_or(1).max(1)));
            }
            b.failures = b.failures.saturating_add(1);
            b.last = now;
            EntryAction::Retain(Ok(()))
        });
        match result {
            EntryResult::Retained(r) => r,
            EntryResult::Vacant(guard) => {
                let _ = guard.insert(Backoff {
                    failures: 1,
                    last: now,
                });
                Ok(())
            }
            // Neither is asked for by the closure; counted as allowed.
            _ => Ok(()),
        }
    }

    /// Counts one more failure of `key`, under the cache's lock for that
    /// key so that concurrent failures all count.
    fn bump(&self, key: &[u8; 32], now: i64, policy: Policy) {
        let result = self.entries.entry(key, None, |_, b| {
            if policy.forgotten(b, now) {
                b.failures = 0;
            }
            b.failures = b.failures.saturating_add(1);
            b.last = now;
            EntryAction::Retain(())
        });
        if let EntryResult::Vacant(guard) = result {
            let _ = guard.insert(Backoff {
                failures: 1,
                last: now,
            });
        }
    }
}

/// Bounds concurrent argon2 verifications so a flood of logins queues here
/// (for at most [`PASSWORD_CHECK_WAIT`]) instead of on tokio's unbounded
/// blocking pool.
#[derive(Debug)]
pub(crate) struct PasswordChecks {
    slots: tokio::sync::Semaphore,
}

impl PasswordChecks {
    pub(crate) fn new() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            slots: tokio::sync::Semaphore::new(cpus.saturating_mul(PASSWORD_CHECKS_PER_CPU)),
        }
    }

    /// Verifies `password` against `hash` on the blocking pool once a slot
    /// is free. `None`: no slot within [`PASSWORD_CHECK_WAIT`] (or the task
    /// failed): the caller answers "retry later".
    pub(crate) async fn verify(&self, password: &str, hash: String) -> Option<bool> {
        let permit = tokio::time::timeout(PASSWORD_CHECK_WAIT, self.slots.acquire())
            .await
            .ok()?
            .ok()?;
        let pw = password.to_string();
        let ok = tokio::task::spawn_blocking(move || crate::secrets::verify_password(&pw, &hash))
            .await
            .ok();
        drop(permit);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_failures_then_doubling_delays_per_user_and_address() {
        let t = LoginThrottle::new();
        let alice = Account::User("alice");
        let here: Option<IpAddr> = Some([10, 0, 0, 1].into());
        let there: Option<IpAddr> = Some([10, 0, 0, 2].into());
        for _ in 0..FREE_FAILURES_PER_ACCOUNT {
            assert_eq!(t.check(alice, here, 100), Ok(()));
            t.failed(alice, here, 100);
        }
        assert_eq!(t.check(alice, here, 100), Ok(()), "free failures");
        t.failed(alice, here, 100);
        assert_eq!(t.check(alice, here, 100), Err(1));
        assert_eq!(t.check(alice, here, 101), Ok(()));
        t.failed(alice, here, 101);
        assert_eq!(t.check(alice, here, 101), Err(2));
        t.failed(alice, here, 103);
        assert_eq!(t.check(alice, here, 103), Err(4));
        // Another address is not affected: no global lock-out.
        assert_eq!(t.check(alice, there, 103), Ok(()));
        // The cap.
        for i in 0..20 {
            t.failed(alice, here, 200 + i);
        }
        assert_eq!(t.check(alice, here, 219), Err(MAX_DELAY_PER_ACCOUNT as u64));
        // A success clears the pair; quiet time forgets it too.
        t.succeeded(alice, here);
        assert_eq!(t.check(alice, here, 219), Ok(()));
    }

    #[test]
    fn sign_ups_from_one_address_are_slowed_like_failures() {
        let t = LoginThrottle::new();
        let here: Option<IpAddr> = Some([10, 0, 0, 1].into());
        let there: Option<IpAddr> = Some([10, 0, 0, 2].into());
        for _ in 0..FREE_SIGN_UPS_PER_ADDRESS {
            assert_eq!(t.take_sign_up(here, 100), Ok(()));
        }
        assert_eq!(
            t.take_sign_up(here, 100),
            Ok(()),
            "the first one past the free ones"
        );
        assert_eq!(t.take_sign_up(here, 100), Err(1));
        assert_eq!(
            t.take_sign_up(here, 100),
            Err(1),
            "a refused one is not counted"
        );
        assert_eq!(t.take_sign_up(there, 100), Ok(()), "another address");
        assert_eq!(t.take_sign_up(here, 101), Ok(()));
        assert_eq!(t.take_sign_up(here, 101), Err(2));
        // Failed logins and sign-ups are counted apart.
        assert_eq!(t.check_address(here, 101), Ok(()));
        assert_eq!(
            t.take_sign_up(here, 101 + QUIET_RESET_PER_SIGN_UP_ADDRESS),
            Ok(()),
            "forgotten after the quiet period"
        );
    }

    #[test]
    fn spraying_from_one_address_is_slowed_and_ipv6_counts_per_64() {
        let t = LoginThrottle::new();
        let a: Option<IpAddr> = Some("2001:db8::1".parse().unwrap_or(IpAddr::from([0u8; 16])));
        let b: Option<IpAddr> = Some("2001:db8::2".parse().unwrap_or(IpAddr::from([0u8; 16])));
        for i in 0..=FREE_FAILURES_PER_ADDRESS {
            t.failed(
                Account::User(&format!("user{i}")),
                if i % 2 == 0 { a } else { b },
                50,
            );
        }
        assert_eq!(t.check(Account::User("someone"), a, 50), Err(1));
        assert_eq!(t.check_address(b, 50), Err(1));
        assert_eq!(t.check_address(Some([192, 0, 2, 1].into()), 50), Ok(()));
        // Forgotten after the quiet period.
        assert_eq!(t.check_address(b, 50 + QUIET_RESET_PER_ADDRESS), Ok(()));
    }
}
