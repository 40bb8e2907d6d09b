//! The e-mail flows' records and storage (`docs/design/accounts.md`, "The
//! e-mail flows"): a [`FlowToken`] per message sent, and [`MailFlows`], the
//! storage that writes a token together with its message, and spends a
//! token together with what it does, each in one transaction.
//!
//! The logic (who gets a message, what the link and code are, when a token
//! is live) is [`crate::AuthServer`]'s (`server/email.rs`); the storage is
//! implemented over the entity store, the OAuth tables and the outbox by
//! `gatehouse-accounts`.

use std::fmt;

use async_trait::async_trait;
use serde_json::Value as Json;

use crate::accounts::AccountProfile;
use crate::error::{RepoError, Result};
use crate::model::UserRecord;

/// Wrong codes that cancel a token, its link included.
pub const MAX_CODE_ATTEMPTS: u32 = 5;
/// Messages one address may receive in an hour.
pub const MAILS_PER_HOUR: u64 = 5;
/// Seconds that must pass between two messages to one address.
pub const MAIL_INTERVAL: i64 = 60;
/// Digits of a code.
pub const CODE_DIGITS: usize = 8;

/// What a token is for; it is good for nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowPurpose {
    /// Confirms an address (at sign-up, or on request).
    Verify,
    /// Sets a new password.
    Reset,
    /// Moves an account to a new address.
    EmailChange,
    /// A notice carries no token: its row only counts towards the
    /// address's limits.
    Notice,
}

impl FlowPurpose {
    /// `verify`, `reset`, `email_change` or `notice`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowPurpose::Verify => "verify",
            FlowPurpose::Reset => "reset",
            FlowPurpose::EmailChange => "email_change",
            FlowPurpose::Notice => "notice",
        }
    }

    /// The purpose stored as `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "verify" => FlowPurpose::Verify,
            "reset" => FlowPurpose::Reset,
            "email_change" => FlowPurpose::EmailChange,
            "notice" => FlowPurpose::Notice,
            _ => return None,
        })
    }
}

/// One message of a flow and the token it carries. Times are seconds since
/// the Unix epoch on the server's clock.
#[derive(Clone, PartialEq)]
pub struct FlowToken {
    /// A random handle: the "check your e-mail" page carries it, so that a
    /// code is checked against its own token only.
    pub id: String,
    /// What it is for.
    pub purpose: FlowPurpose,
    /// The account it acts on (`None` for a registration still pending).
    pub sub: Option<String>,
    /// The address the message went to (lowercase).
    pub address: String,
    /// The link token's keyed hash (`None` for a notice).
    pub link_hash: Option<String>,
    /// The code's keyed hash, bound to [`FlowToken::id`] (`None` for a notice).
    pub code_hash: Option<String>,
    /// What the flow needs afterwards: the authorization request to return
    /// to (`"return"`, its parameters as pairs).
    pub payload: Json,
    /// When it was made.
    pub created_at: i64,
    /// When the link stops working.
    pub expires_at: i64,
    /// When the code stops working (at the latest with the link).
    pub code_expires_at: i64,
    /// Wrong codes so far; [`MAX_CODE_ATTEMPTS`] cancel it.
    pub attempts: u32,
    /// When it was spent.
    pub used_at: Option<i64>,
}

impl fmt::Debug for FlowToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowToken")
            .field("id", &self.id)
            .field("purpose", &self.purpose)
            .field("sub", &self.sub)
            .field("expires_at", &self.expires_at)
            .field("attempts", &self.attempts)
            .field("used_at", &self.used_at)
            .finish_non_exhaustive()
    }
}

impl FlowToken {
    /// Whether its link may still be used at `now`: unspent, not
    /// cancelled by wrong codes, not expired.
    pub fn link_live(&self, now: i64) -> bool {
        self.purpose != FlowPurpose::Notice
            && self.used_at.is_none()
            && self.attempts < MAX_CODE_ATTEMPTS
            && now < self.expires_at
    }

    /// Whether its code may still be tried at `now`.
    pub fn code_live(&self, now: i64) -> bool {
        self.link_live(now) && now < self.code_expires_at
    }
}

/// A message of a flow, before it becomes the outbox's e-mail.
#[derive(Clone, PartialEq, Eq)]
pub struct FlowMail {
    /// The recipient.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body (it carries the link and the code).
    pub text: String,
}

impl fmt::Debug for FlowMail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The body carries a live link and code.
        f.debug_struct("FlowMail")
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// What spending a token does, in the transaction that spends it.
#[derive(Debug, Clone, Copy)]
pub enum FlowEffect<'a> {
    /// Stores the account's credential (its new password hash), revokes
    /// every token of the account, and marks its address verified (the
    /// message reached it).
    SetPassword {
        /// The credential with the new argon2 hash; an account that had
        /// none (made by a bypass caller) gets one.
        credential: &'a UserRecord,
    },
    /// Marks the account's address verified, when it is still the
    /// token's address.
    Verify,
    /// Makes the token's address the account's `email`, verified. An
    /// address another account has (without regard to case) is
    /// [`crate::Error::Conflict`], and nothing changes.
    ChangeEmail,
}

/// Storage of the e-mail flows, over the account rows, the OAuth tables
/// and the outbox of one database.
#[async_trait]
pub trait MailFlows: Send + Sync + fmt::Debug {
    /// The account whose `email` is `address`, without regard to case.
    async fn find_by_email(&self, address: &str) -> Result<Option<AccountProfile>, RepoError>;
    /// Writes `token` and enqueues `mail` in one transaction: both exist
    /// once it commits, neither if it fails. `false`: the address is over
    /// its limits ([`MAILS_PER_HOUR`], [`MAIL_INTERVAL`], counted in that
    /// transaction, so two racing requests cannot both pass), and nothing
    /// was written.
    async fn send(&self, token: &FlowToken, mail: &FlowMail) -> Result<bool, RepoError>;
    /// How many messages went to `address` since `since`, and when the
    /// latest did.
    async fn mails_since(&self, address: &str, since: i64)
    -> Result<(u64, Option<i64>), RepoError>;
    /// The token with this id.
    async fn token(&self, id: &str) -> Result<Option<FlowToken>, RepoError>;
    /// The token whose link hashes to `link_hash`.
    async fn token_by_link(&self, link_hash: &str) -> Result<Option<FlowToken>, RepoError>;
    /// The latest token of `purpose` for the account `sub` (the e-mail
    /// change's code is typed by the account itself, with its own access
    /// token, not on a page that carries the token's id).
    async fn latest_token(
        &self,
        sub: &str,
        purpose: FlowPurpose,
    ) -> Result<Option<FlowToken>, RepoError>;
    /// Counts a wrong code against the token `id`.
    async fn wrong_code(&self, id: &str) -> Result<(), RepoError>;
    /// Spends `token` at `now` and applies `effect`, in one transaction.
    /// `false`: the token was spent, cancelled or expired meanwhile, and
    /// nothing changed.
    async fn complete(&self, token: &FlowToken, effect: FlowEffect<'_>, now: i64) -> Result<bool>;
    /// Spends `token` (a pending registration) at `now` and creates the
    /// account `username` with the token's address, verified, and
    /// `credential`, in one transaction. `Ok(None)`: the token was spent,
    /// cancelled or expired meanwhile. A name or address taken since the
    /// sign-up is `Conflict`; nothing changed then.
    async fn register(
        &self,
        token: &FlowToken,
        username: &str,
        credential: &UserRecord,
        now: i64,
    ) -> Result<Option<AccountProfile>>;
}

/// `[auth.email] verification`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verification {
    /// No verification message is sent.
    Off,
    /// Sign-up creates the account at once; a verification message is sent.
    #[default]
    Optional,
    /// No account exists before its address is confirmed.
    Required,
}

/// Settings of the e-mail flows (`[auth.email]`, and where links point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailFlowConfig {
    /// Whether and how sign-up verifies addresses.
    pub verification: Verification,
    /// Seconds a verification link lives.
    pub verify_ttl: u64,
    /// Seconds a reset link lives.
    pub reset_ttl: u64,
    /// Seconds a code lives.
    pub code_ttl: u64,
    /// The configured issuer and base path (no trailing slash): links are
    /// `{link_base}/auth/reset?token=...`, never built from a request.
    pub link_base: String,
}

impl EmailFlowConfig {
    /// The contract's defaults (optional verification, 24 h, 30 min,
    /// 15 min) for links under `link_base`.
    pub fn new(link_base: impl Into<String>) -> Self {
        Self {
            verification: Verification::Optional,
            verify_ttl: 24 * 3600,
            reset_ttl: 30 * 60,
            code_ttl: 15 * 60,
            link_base: link_base.into().trim_end_matches('/').to_string(),
        }
    }
}
