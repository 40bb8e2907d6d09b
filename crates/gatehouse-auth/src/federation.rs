//! Signing in through other identity providers: the
//! providers' linking settings, what a provider said about its user, the
//! identities linked to accounts, the short-lived rows of a flow under way,
//! and [`FederationStore`], their storage. The decisions (which identity
//! signs which account in, when one is linked or an account created) are
//! [`crate::AuthServer`]'s (`server/federation.rs`); talking to the
//! providers is `gatehouse-oauth`'s. Decisions: `docs/design/federation.md`.

use std::fmt;

use async_trait::async_trait;
use serde_json::Value as Json;

use crate::accounts::AccountProfile;
use crate::error::{RepoError, Result};
use crate::model::UserRecord;

/// How long a flow's rows live: the user's time at the provider (sign-in,
/// consent), or on the page that asks for a password before linking.
pub const PROVIDER_FLOW_TTL: i64 = 600;

/// `link`: what a new identity whose address matches an account does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkMode {
    /// Linked at once when the provider is trusted for e-mail
    /// (`trust_email`), says the address is verified, and the account's
    /// own address is verified.
    VerifiedEmail,
    /// Linked once the user signs in with the account's password.
    #[default]
    Confirm,
    /// Never linked by address.
    Never,
}

/// What the server needs to know of a provider to decide about its
/// identities (the endpoints and secrets stay with the HTTP side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderPolicy {
    /// `id`: in URLs, in the `idp` claim, in the identities' records.
    pub id: String,
    /// `name`: shown on the button and on every page about it.
    pub name: String,
    /// Whether the provider's "verified" may be taken for the address.
    pub trust_email: bool,
    /// What a new identity whose address matches an account does.
    pub link: LinkMode,
}

/// Who the provider says signed in, after every check of its answer
/// (ID token signature, `iss`, `aud`, `exp`, `nonce`; or GitHub's API).
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamIdentity {
    /// The provider's `id`.
    pub provider: String,
    /// Its issuer (`iss` of the ID token; GitHub's web URL).
    pub issuer: String,
    /// Its stable subject (`sub`; GitHub's numeric user id).
    pub subject: String,
    /// The address it gives, if any.
    pub email: Option<String>,
    /// Whether it says the address is verified.
    pub email_verified: bool,
    /// A user name to start from when an account is made
    /// (`preferred_username`, GitHub's `login`).
    pub username_hint: Option<String>,
}

impl fmt::Debug for UpstreamIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An address is personal data: kept out of logs.
        f.debug_struct("UpstreamIdentity")
            .field("provider", &self.provider)
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("email_verified", &self.email_verified)
            .finish_non_exhaustive()
    }
}

/// An identity linked to an account: the pair (issuer, subject), never an
/// address, is what signs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRecord {
    /// A random id (what `DELETE {base}/auth/identities/{id}` names).
    pub id: String,
    /// The account (`sub`).
    pub sub: String,
    /// The provider's `id` when it was linked.
    pub provider: String,
    /// The provider's issuer.
    pub issuer: String,
    /// The subject at that issuer.
    pub subject: String,
    /// The address the provider gave when it was linked.
    pub email: Option<String>,
    /// When it was linked.
    pub linked_at: i64,
}

/// What a flow row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowKind {
    /// A redirect to a provider: the `state` that must come back.
    Start,
    /// An identity waiting for the password of the account it would be
    /// linked to.
    Link,
}

impl FlowKind {
    /// `start` or `link`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowKind::Start => "start",
            FlowKind::Link => "link",
        }
    }

    /// The kind stored as `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "start" => Some(FlowKind::Start),
            "link" => Some(FlowKind::Link),
            _ => None,
        }
    }
}

/// A short-lived row of a flow under way: no server session, so any
/// instance on the database can finish what another started.
#[derive(Clone, PartialEq)]
pub struct ProviderFlow {
    /// The SHA-256 of the random value the browser carries (`state`, or
    /// the link page's handle): the value itself is never stored.
    pub id: String,
    /// What it is.
    pub kind: FlowKind,
    /// The provider's `id`.
    pub provider: String,
    /// The MAC of the browser's CSRF cookie: only that browser finishes it.
    pub browser: String,
    /// What finishing it needs: the authorization request to continue
    /// (`"return"`), and for a link the identity and the account.
    pub payload: Json,
    /// When it was made.
    pub created_at: i64,
    /// When it stops working.
    pub expires_at: i64,
    /// When it was used (once).
    pub used_at: Option<i64>,
}

impl fmt::Debug for ProviderFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderFlow")
            .field("kind", &self.kind)
            .field("provider", &self.provider)
            .field("expires_at", &self.expires_at)
            .field("used_at", &self.used_at)
            .finish_non_exhaustive()
    }
}

/// Storage of the identities and of the flows' rows, over the account rows
/// and the OAuth tables of one database.
#[async_trait]
pub trait FederationStore: Send + Sync + fmt::Debug {
    /// Writes a flow row.
    async fn insert_flow(&self, flow: &ProviderFlow) -> Result<(), RepoError>;
    /// The flow row `id`, used or not.
    async fn flow(&self, id: &str) -> Result<Option<ProviderFlow>, RepoError>;
    /// Spends the flow row `id` at `now`: `true` only for the one caller
    /// that found it unused and unexpired (a compare-and-set, so two
    /// instances never both spend it).
    async fn spend_flow(&self, id: &str, now: i64) -> Result<bool, RepoError>;
    /// The identity (issuer, subject), if linked.
    async fn identity(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<IdentityRecord>, RepoError>;
    /// The identities linked to the account `sub`, oldest first.
    async fn identities(&self, sub: &str) -> Result<Vec<IdentityRecord>, RepoError>;
    /// Links `identity`; `false` when the pair is linked already (to any
    /// account), and nothing was written.
    async fn link(&self, identity: &IdentityRecord) -> Result<bool, RepoError>;
    /// Unlinks the identity `id` of the account `sub`, unless it is the
    /// account's last way to sign in (no password, no other identity),
    /// decided with the delete; `false` when nothing was unlinked.
    async fn unlink(&self, sub: &str, id: &str) -> Result<bool, RepoError>;
    /// The account whose `email` is `address`, without regard to case.
    async fn find_by_email(&self, address: &str) -> Result<Option<AccountProfile>, RepoError>;
    /// Creates the account `username` (with `email`, verified when
    /// `verified`, and `credential`) and links `identity` to it, in one
    /// transaction. `Ok(None)`: the name is taken, nothing was written;
    /// `Conflict`: the address or the pair is taken.
    async fn create_linked(
        &self,
        username: &str,
        email: Option<&str>,
        verified: bool,
        credential: &UserRecord,
        identity: &IdentityRecord,
    ) -> Result<Option<AccountProfile>>;
}
