//! The authorization server: grants, validation, introspection, revocation,
//! key management. No HTTP here: the endpoint crate parses requests and maps
//! [`Error`]s to responses.
//!
//! This module holds what every grant shares (the server, its caches, keys,
//! the failed-login throttle, client authentication, scope resolution and
//! token issuance); each grant and each endpoint of RFC 7662 / RFC 7009 has
//! its own module.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use quick_cache::sync::{Cache, EntryAction};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Digest;

use crate::claims::Claims;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::jwt::{self, AccessClaims, Audience};
use crate::jwt::{IDTYP_APP, IDTYP_USER};
use crate::keys::{KeyCipher, KeyRing, SigningAlg, generate_key};
use crate::login::{Account, LoginThrottle, PasswordChecks};
use crate::model::{
    ClientRecord, Grant, SCOPE_OFFLINE_ACCESS, Scopes, TOKEN_TYPE_ACCESS, TOKEN_TYPE_JWT,
    TOKEN_TYPE_REFRESH, TokenKind, TokenRecord, UserRecord,
};
use crate::principal::{AccessTokenFacts, Principal};
use crate::random::{Random, token_string};
use crate::repo::AuthRepo;
use crate::secrets::{self, DUMMY_PASSWORD_HASH};

mod authorize;
mod client_credentials;
mod email;
mod exchange;
mod federation;
mod introspect;
mod password;
mod refresh;
mod revoke;
mod token;
mod validate;

pub use authorize::{
    AuthorizeError, AuthorizeErrorCode, AuthorizeParams, AuthorizeRequest, CODE_REPLAY_MEMORY,
    CODE_TTL, CONSENT_TTL, CsrfPair, MAX_STATE, MIN_SIGN_UP_PASSWORD, SignedIn,
};
pub use email::{MAX_ADDRESS, ReturnTo, SignedUp, normalize_address, plausible_address};
pub use exchange::ExchangeRequest;
pub use federation::{Federated, ProviderReturn, ProviderStart};
pub use token::TokenRequest;

/// Settings of the authorization server (from `[tokens]` and `issuer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `iss` of every token, and the API's own audience.
    pub issuer: String,
    /// Lifetime of an access token, in seconds.
    pub access_ttl: u64,
    /// Lifetime of an access token whose scope includes `offline_access`.
    pub offline_access_ttl: u64,
    /// Lifetime of a refresh token (each rotation starts a new one).
    pub refresh_ttl: u64,
    /// How long after its rotation the immediate predecessor of a refresh
    /// token may still be presented without revoking the family.
    pub refresh_reuse_grace: u64,
    /// Algorithm of access tokens (the server keeps a key of every
    /// algorithm; ID tokens follow their client's registration).
    pub signing_alg: SigningAlg,
    /// At start, a current key older than this is rotated. `None`: never.
    pub signing_key_max_age: Option<u64>,
    /// OAuth 1.0: how far (seconds) `oauth_timestamp` may be from the
    /// server's clock, either way; nonces are kept that long.
    pub oauth1_timestamp_window: u64,
    /// OAuth 1.0: lifetime of a request token (until it is exchanged).
    pub oauth1_request_token_ttl: u64,
    /// OAuth 1.0: lifetime of an access token.
    pub oauth1_access_ttl: u64,
    /// How long (seconds) a client looked up for authentication is reused
    /// without reading the store again. Changes made through this server's
    /// [`AuthServer::admin`] take effect at once; changes by another process
    /// or instance within this bound. `0`: read on every request.
    pub client_cache_ttl: u64,
    /// How long (seconds) an access token found live in the store is
    /// trusted without reading its record again. Revocations by this server
    /// take effect at once; revocations by another process or instance
    /// within this bound. `0`: read on every validation.
    pub token_status_cache_ttl: u64,
    /// Whether the sign-in page offers self-service sign-up
    /// ([`AuthServer::sign_up`]).
    pub sign_up: bool,
    /// Scopes a self-registered user gets.
    pub sign_up_scopes: Vec<String>,
    /// Clients the server registers itself (GraphiQL's,
    /// [`ClientRecord::graphiql`]): found before the repository's, never
    /// stored.
    pub builtin_clients: Vec<ClientRecord>,
}

impl AuthConfig {
    /// The contract's defaults (1 h, 30 d, 30 d, no grace, EdDSA, 90-day keys)
    /// for `issuer`, with the client and token-status caches off (every
    /// check reads the store; the binary's configuration turns them on).
    pub fn new(issuer: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            access_ttl: 3600,
            offline_access_ttl: 30 * 86400,
            refresh_ttl: 30 * 86400,
            refresh_reuse_grace: 0,
            signing_alg: SigningAlg::EdDsa,
            signing_key_max_age: Some(90 * 86400),
            oauth1_timestamp_window: 300,
            oauth1_request_token_ttl: 600,
            oauth1_access_ttl: 30 * 86400,
            client_cache_ttl: 0,
            token_status_cache_ttl: 0,
            sign_up: false,
            sign_up_scopes: Vec::new(),
            builtin_clients: Vec::new(),
        }
    }

    pub(crate) fn secs(v: u64) -> i64 {
        i64::try_from(v).unwrap_or(i64::MAX)
    }

    /// RFC 9068 leaves lifetimes to the server; `offline_access` asks for the
    /// long one.
    fn access_lifetime(&self, scope: &Scopes) -> i64 {
        if scope.contains(SCOPE_OFFLINE_ACCESS) {
            Self::secs(self.offline_access_ttl)
        } else {
            Self::secs(self.access_ttl)
        }
    }

    /// How long a retired key must stay published: the longest any token it
    /// signed can live.
    fn longest_access_lifetime(&self) -> i64 {
        Self::secs(self.access_ttl.max(self.offline_access_ttl))
    }
}

/// A successful token response (RFC 6749 §5.1, RFC 8693 §2.2.1).
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct TokenResponse {
    /// The JWT access token.
    pub access_token: String,
    /// Always `Bearer` (RFC 6750).
    pub token_type: &'static str,
    /// Seconds until the access token expires.
    pub expires_in: i64,
    /// Granted scopes, space-separated.
    pub scope: String,
    /// A new refresh token, when the grant issues one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// For token exchange: the RFC 8693 §3 type URI of `access_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issued_token_type: Option<&'static str>,
    /// OpenID Connect: the `id_token` of a code or password grant with
    /// `openid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
}

impl fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenResponse")
            .field("access_token", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("issued_token_type", &self.issued_token_type)
            .field("id_token", &self.id_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How a client proves who it is ([`AuthServer::authenticate_client_from`]).
#[derive(Clone, Copy)]
pub enum ClientProof<'a> {
    /// RFC 6749 §2.3.1 `client_secret_basic` or `client_secret_post`: the
    /// secret, form-decoded, and as it was sent (HTTP Basic credentials
    /// are form-encoded by the RFC, but many clients send them raw).
    Secret {
        /// The secret after form-decoding.
        secret: &'a str,
        /// The secret as sent; tried when `secret` fails and differs.
        as_sent: &'a str,
    },
    /// RFC 6749 §2.1 (`none`): a public client names itself with
    /// `client_id` alone.
    Public,
}

impl fmt::Debug for ClientProof<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientProof::Secret { .. } => f.write_str("Secret(<redacted>)"),
            ClientProof::Public => f.write_str("Public"),
        }
    }
}

/// An access token to sign and record ([`AuthServer::issue_access`]).
struct NewAccess<'a> {
    /// Its `jti` and record id ([`AuthServer::new_id`]).
    jti: String,
    /// `sub`: a user name, or the client id for client credentials.
    subject: &'a str,
    /// Set when the subject is a resource owner.
    username: Option<&'a str>,
    client_id: &'a str,
    scope: &'a Scopes,
    audience: Vec<String>,
    expires_at: i64,
    /// The family it joins, and the token it descends from.
    family_id: &'a str,
    parent_id: Option<&'a str>,
    /// RFC 8693 §4.1 `act` of an exchanged token.
    act: Option<Value>,
    /// The user's custom claims.
    custom: &'a Claims,
    /// The identity provider the user signed in through: the token then
    /// carries `amr: ["fed"]` and `idp`.
    idp: Option<&'a str>,
}

/// The OAuth 2.0 authorization server logic.
pub struct AuthServer {
    config: AuthConfig,
    repo: Arc<dyn AuthRepo>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    cipher: Arc<KeyCipher>,
    ring: KeyRing,
    last_key_reload: AtomicI64,
    /// Access tokens whose signature has been verified: sha256(token) ->
    /// claims, plus when the token's record was last found live. A
    /// signature over the same bytes stays valid, so a hit skips the
    /// signature check; issuer, expiry and audience are checked on every
    /// call, and revocation unless the record was found live less than
    /// `token_status_cache_ttl` ago. Emptied whenever the key ring is
    /// reloaded (a key may have been retired).
    verified: Cache<[u8; 32], Verified>,
    /// Bumped by every revocation this server makes: a token status seen
    /// before the bump is read again.
    revocations: Arc<AtomicU64>,
    /// Clients by id (`None`: no such client), with when they were read.
    clients: Arc<ClientCache>,
    /// Sequence part of [`AuthServer::new_id`].
    id_seq: AtomicU64,
    /// Failed logins per (account, address) and per address.
    logins: LoginThrottle,
    /// Bounds concurrent argon2 verifications.
    password_checks: PasswordChecks,
    /// The account rows, when the schema has an account type
    /// ([`AuthServer::use_accounts`]).
    accounts: std::sync::OnceLock<Arc<dyn crate::Accounts>>,
    /// The e-mail flows, when `[email]` is set and the account type has an
    /// address ([`AuthServer::use_mail_flows`]).
    flows: std::sync::OnceLock<Arc<email::Flows>>,
    /// Signing in through other identity providers, when
    /// `[[auth.providers]]` is set ([`AuthServer::use_federation`]).
    federation: std::sync::OnceLock<Arc<federation::Federation>>,
}

/// An entry of the verified-signature cache.
#[derive(Clone)]
struct Verified {
    /// Shared, so a cache hit copies a pointer rather than every claim.
    claims: Arc<AccessClaims>,
    /// The record was live at `.checked_at` (server clock) with revocation
    /// generation `.generation`; `.username` is the record's.
    status: Option<LiveStatus>,
}

#[derive(Clone)]
struct LiveStatus {
    checked_at: i64,
    generation: u64,
    username: Option<String>,
}

/// Clients kept at most by the client cache.
const CLIENT_CACHE_MAX: usize = 10_000;

/// Client records read for authentication, reused for `client_cache_ttl`
/// seconds (server clock) so that a busy client does not cost a store read
/// per token request. Shared with the [`Admin`](crate::Admin) of the same
/// server so that its changes drop the entry at once.
#[derive(Debug)]
pub(crate) struct ClientCache {
    /// Client id -> the record (`None`: no such client) and when it was read.
    /// Unknown ids are cached too (so a known and an unknown id take the
    /// same time), which lets guessing fill it: it is bounded.
    entries: Cache<String, (Option<ClientRecord>, i64)>,
    /// Bumped by every invalidation, so a read that raced with a change is
    /// not cached.
    generation: AtomicU64,
}

impl Default for ClientCache {
    fn default() -> Self {
        Self {
            entries: Cache::new(CLIENT_CACHE_MAX),
            generation: AtomicU64::new(0),
        }
    }
}

impl ClientCache {
    fn get(&self, client_id: &str, now: i64, ttl: i64) -> Option<Option<ClientRecord>> {
        let (record, read_at) = self.entries.get(client_id)?;
        // A clock that went backwards also counts as stale.
        (now >= read_at && now - read_at < ttl).then_some(record)
    }

    /// Caches `record`, read from the store after [`Self::generation`]
    /// returned `generation`, unless a change happened since.
    fn put(&self, client_id: &str, record: Option<ClientRecord>, now: i64, generation: u64) {
        if self.generation.load(Ordering::SeqCst) != generation {
            return;
        }
        self.entries.insert(client_id.to_string(), (record, now));
        // An invalidation between the check above and the insert bumped the
        // generation before removing: undo the insert, which may be stale.
        if self.generation.load(Ordering::SeqCst) != generation {
            self.entries.remove(client_id);
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Forgets `client_id` (it was changed or removed).
    pub(crate) fn invalidate(&self, client_id: &str) {
        // Bumped first, so a `put` either sees the bump or is removed here.
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.entries.remove(client_id);
    }
}

/// What an [`Admin`](crate::Admin) made by [`AuthServer::admin`] tells the
/// server's caches.
#[derive(Debug, Clone)]
pub(crate) struct CacheHooks {
    pub(crate) clients: Arc<ClientCache>,
    pub(crate) revocations: Arc<AtomicU64>,
}

impl CacheHooks {
    /// A client changed or was removed.
    pub(crate) fn client_changed(&self, client_id: &str) {
        self.clients.invalidate(client_id);
    }

    /// Tokens were revoked.
    pub(crate) fn revoked(&self) {
        self.revocations.fetch_add(1, Ordering::SeqCst);
    }
}

/// Verified signatures kept at most (about 1 KiB each; up to 5 KiB with a
/// user's custom claims, which are bounded to 4 KiB).
const VERIFIED_CACHE_MAX: usize = 10_000;

impl fmt::Debug for AuthServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthServer")
            .field("config", &self.config)
            .field("repo", &self.repo)
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

/// Minimum seconds between key reloads triggered by an unknown `kid`, so
/// forged tokens cannot hammer the store.
const KEY_RELOAD_INTERVAL: i64 = 10;

fn opt(s: Option<&str>) -> Option<&str> {
    // RFC 6749 §3.1: parameters sent without a value are treated as omitted.
    s.filter(|v| !v.is_empty())
}

impl AuthServer {
    /// Loads the signing keys from `repo` (decrypting the current ones with
    /// a key derived from `secret`), creating or rotating the current key
    /// of each algorithm ([`SigningAlg::ALL`]) when there is none or it is
    /// older than `signing_key_max_age`. A database made before the server
    /// kept a key per algorithm gains the missing ones here; its keys stay.
    pub async fn start(
        config: AuthConfig,
        repo: Arc<dyn AuthRepo>,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        secret: &str,
    ) -> Result<Arc<Self>> {
        let secret = secret.to_string();
        let cipher = tokio::task::spawn_blocking(move || KeyCipher::from_secret(&secret))
            .await
            .map_err(|e| Error::server(format!("key derivation task: {e}")))??;
        let server = Arc::new(Self {
            config,
            repo,
            clock,
            random,
            cipher: Arc::new(cipher),
            ring: KeyRing::empty(),
            last_key_reload: AtomicI64::new(i64::MIN),
            verified: Cache::new(VERIFIED_CACHE_MAX),
            revocations: Arc::new(AtomicU64::new(0)),
            clients: Arc::new(ClientCache::default()),
            id_seq: AtomicU64::new(0),
            logins: LoginThrottle::new(),
            password_checks: PasswordChecks::new(),
            accounts: std::sync::OnceLock::new(),
            flows: std::sync::OnceLock::new(),
            federation: std::sync::OnceLock::new(),
        });
        server.reload_keys().await?;
        let now = server.now();
        for alg in SigningAlg::ALL {
            let needs_key = match server.ring.current_created_at(alg) {
                None => true,
                Some(created) => server
                    .config
                    .signing_key_max_age
                    .is_some_and(|max| now - created >= AuthConfig::secs(max)),
            };
            if needs_key {
                server.rotate_signing_key(alg).await?;
            }
        }
        Ok(server)
    }

    /// The configuration.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The store.
    pub fn repo(&self) -> &Arc<dyn AuthRepo> {
        &self.repo
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The key-encryption cipher (also seals OAuth 1.0 secrets).
    pub(crate) fn cipher(&self) -> &Arc<KeyCipher> {
        &self.cipher
    }

    /// The randomness source.
    pub fn random(&self) -> &Arc<dyn Random> {
        &self.random
    }

    /// The current time per the server's clock.
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Client and user administration over the same store, clock and randomness.
    /// Its changes reach this server's caches at once.
    pub fn admin(&self) -> crate::admin::Admin {
        crate::admin::Admin::new(self.repo.clone(), self.clock.clone(), self.random.clone())
            .with_cache_hooks(self.cache_hooks())
            .with_accounts(self.accounts.get().cloned(), &self.config.sign_up_scopes)
    }

    /// Makes the rows of the account type the accounts that sign in
    /// (called once, at start, before serving; a second call is ignored).
    pub fn use_accounts(&self, accounts: Arc<dyn crate::Accounts>) {
        let _ = self.accounts.set(accounts);
    }

    /// The user whose tokens have this `sub`, as token issuance reads it:
    /// the credential with, for an account row, the row's claims. `None`
    /// when there is none, or the account row is gone or disabled.
    pub(crate) async fn user(&self, sub: &str) -> Result<Option<UserRecord>> {
        let Some(record) = self.repo.find_user(sub).await? else {
            return Ok(None);
        };
        let Some(accounts) = self.accounts.get() else {
            return Ok(Some(record));
        };
        Ok(match accounts.find(sub).await? {
            Some(profile) if !profile.disabled && !self.awaits_verification(&profile) => {
                Some(UserRecord {
                    claims: profile.claims,
                    ..record
                })
            }
            _ => None,
        })
    }

    /// The user signing in as `username` ([`AuthServer::user`]).
    pub(crate) async fn user_named(&self, username: &str) -> Result<Option<UserRecord>> {
        match self.accounts.get() {
            None => self.user(username).await,
            Some(accounts) => match accounts.find_by_username(username).await? {
                Some(profile) if !profile.disabled => self.user(&profile.sub).await,
                _ => Ok(None),
            },
        }
    }

    /// Whether accounts are the rows of an account type.
    pub fn accounts_in_use(&self) -> bool {
        self.accounts.get().is_some()
    }

    /// The account row of `sub`, when there is an account type.
    pub async fn account_profile(&self, sub: &str) -> Result<Option<crate::AccountProfile>> {
        match self.accounts.get() {
            None => Ok(None),
            Some(accounts) => Ok(accounts.find(sub).await?),
        }
    }

    fn cache_hooks(&self) -> CacheHooks {
        CacheHooks {
            clients: self.clients.clone(),
            revocations: self.revocations.clone(),
        }
    }

    /// Marks every cached token status stale (a revocation happened here).
    fn revoked(&self) {
        self.revocations.fetch_add(1, Ordering::SeqCst);
    }

    // ----- keys -----

    /// Re-reads the signing keys from the store (another instance may have
    /// rotated).
    pub async fn reload_keys(&self) -> Result<()> {
        let now = self.now();
        let records = self.repo.load_keys().await?;
        self.ring.load(&records, &self.cipher, now)?;
        self.verified.clear();
        self.last_key_reload.store(now, Ordering::SeqCst);
        Ok(())
    }

    /// Makes a new current signing key of `alg`. The previous one of `alg`
    /// stops signing now and stays published until every token it signed
    /// has expired; the keys of the other algorithms are left alone.
    /// Returns the new `kid`.
    pub async fn rotate_signing_key(&self, alg: SigningAlg) -> Result<String> {
        let now = self.now();
        // RSA generation takes a noticeable moment; it happens at start or on
        // an explicit rotation only.
        let record = generate_key(alg, &self.cipher, self.random.as_ref(), now)?;
        let previous: Vec<String> = self
            .repo
            .load_keys()
            .await?
            .into_iter()
            .filter(|k| k.retired_at.is_none() && k.alg == alg.as_str())
            .map(|k| k.kid)
            .collect();
        self.repo.insert_key(&record).await?;
        let until = now.saturating_add(self.config.longest_access_lifetime());
        for kid in previous {
            self.repo.retire_key(&kid, now, until).await?;
        }
        self.reload_keys().await?;
        tracing::info!(kid = %record.kid, alg = alg.as_str(), "signing key rotated");
        Ok(record.kid)
    }

    /// The JWK Set to publish at `/.well-known/jwks.json`.
    pub fn jwks(&self) -> Value {
        self.ring.jwks(self.now())
    }

    /// The current key of `alg`: of `signing_alg` for access tokens, of
    /// the client's [`ClientRecord::id_token_alg`] for ID tokens.
    pub(crate) fn signer(&self, alg: SigningAlg) -> Result<Arc<crate::keys::Signer>> {
        self.ring
            .current(alg)
            .ok_or_else(|| Error::server(format!("no {} signing key loaded", alg.as_str())))
    }

    /// Deletes expired token records and keys no longer published, then
    /// reloads the keys. Meant to run periodically.
    pub async fn purge_expired(&self) -> Result<u64> {
        let n = self.repo.purge_expired(self.now()).await?;
        let n = n + self.repo.purge_oauth1(self.now()).await?;
        let n = n + self
            .repo
            .purge_codes(self.now().saturating_sub(CODE_REPLAY_MEMORY))
            .await?;
        self.reload_keys().await?;
        Ok(n)
    }

    // ----- failed logins -----

    /// The failed-login throttle shared by every secret check of this
    /// server (password grant, OAuth 1.0 approval, HTTP and WebSocket Basic,
    /// client authentication per address).
    pub fn login_throttle(&self) -> &LoginThrottle {
        &self.logins
    }

    /// Checks a user's password as every login does: refused at once with
    /// [`Error::TooManyRequests`] while the (user, address) pair or the
    /// address is throttled (even with the right password); argon2 runs
    /// with bounded concurrency (a "retry later" when no slot frees within
    /// [`crate::PASSWORD_CHECK_WAIT`]); a failure is counted, a success
    /// clears the pair. A wrong user name and a wrong password are the same
    /// `invalid_grant` and cost the same verification. `from` is the
    /// caller's address (`None` when unknown).
    pub async fn check_user_password(
        &self,
        username: &str,
        password: &str,
        from: Option<IpAddr>,
    ) -> Result<UserRecord> {
        let now = self.now();
        let account = Account::User(username);
        self.logins
            .check(account, from, now)
            .map_err(too_many_failures)?;
        let user = self.user_named(username).await?;
        let hash = user
            .as_ref()
            .map(|u| u.password_hash.clone())
            .unwrap_or_else(|| DUMMY_PASSWORD_HASH.to_string());
        let Some(ok) = self.password_checks.verify(password, hash).await else {
            return Err(Error::TooManyRequests(
                "too many logins are being checked; retry later".into(),
                1,
            ));
        };
        match user {
            Some(u) if ok => {
                self.logins.succeeded(account, from);
                Ok(u)
            }
            _ => {
                tracing::info!(?from, "failed password login");
                self.logins.failed(account, from, self.now());
                Err(Error::invalid_grant(
                    "the resource owner credentials are invalid",
                ))
            }
        }
    }

    // ----- client authentication -----

    /// RFC 6749 §2.3.1: checks a client's credentials. Unknown client and
    /// wrong secret are the same `invalid_client`, and take the same time.
    ///
    /// With `client_cache_ttl`, a client (or its absence) read less than
    /// that long ago is reused: a secret rotated or a client removed by
    /// another process is noticed within that bound. The secret is checked
    /// against the hash on every call, in constant time.
    pub async fn authenticate_client(&self, client_id: &str, secret: &str) -> Result<ClientRecord> {
        let client = self.lookup_client(client_id).await?;
        let stored = client
            .as_ref()
            .map(|c| c.secret_hash.as_slice())
            .unwrap_or(&[0u8; 32]);
        // A public client's hash is empty: no secret matches it.
        let ok = secrets::verify_secret(secret, stored);
        match client {
            Some(c) if ok => Ok(c),
            _ => Err(Error::InvalidClient("client authentication failed".into())),
        }
    }

    /// RFC 6749 §2.1: a public client names itself with `client_id` alone.
    /// Only a client registered as public is accepted so (`invalid_client`
    /// otherwise): a confidential client must prove its secret.
    pub async fn authenticate_public_client(&self, client_id: &str) -> Result<ClientRecord> {
        match self.lookup_client(client_id).await? {
            Some(c) if c.is_public() => Ok(c),
            _ => Err(Error::InvalidClient("client authentication failed".into())),
        }
    }

    /// A token, introspection or revocation request's client
    /// authentication from address `from`, throttled like every secret
    /// check: refused at once with [`Error::TooManyRequests`] while the
    /// (client, address) pair or the address is throttled; a failure
    /// (`invalid_client`: unknown client, wrong secret, a confidential
    /// client naming itself without one) is counted against both, whichever
    /// way the client authenticated. Only a proven secret clears the pair:
    /// naming a public client proves nothing.
    pub async fn authenticate_client_from(
        &self,
        client_id: &str,
        proof: ClientProof<'_>,
        from: Option<IpAddr>,
    ) -> Result<ClientRecord> {
        let account = Account::Client(client_id);
        self.logins
            .check(account, from, self.now())
            .map_err(too_many_failures)?;
        let result = match proof {
            ClientProof::Secret { secret, as_sent } => {
                match self.authenticate_client(client_id, secret).await {
                    // Clients that do not form-encode (curl -u, many
                    // libraries): the secret exactly as sent.
                    Err(Error::InvalidClient(_)) if as_sent != secret => {
                        self.authenticate_client(client_id, as_sent).await
                    }
                    other => other,
                }
            }
            ClientProof::Public => self.authenticate_public_client(client_id).await,
        };
        match &result {
            Ok(_) if matches!(proof, ClientProof::Secret { .. }) => {
                self.logins.succeeded(account, from);
            }
            Ok(_) => {}
            Err(Error::InvalidClient(_)) => {
                tracing::info!(
                    ?from,
                    public = matches!(proof, ClientProof::Public),
                    "failed client authentication"
                );
                self.logins.failed(account, from, self.now());
            }
            Err(_) => {}
        }
        result
    }

    /// The client `client_id`, through the client cache
    /// ([`AuthConfig::client_cache_ttl`]).
    pub(crate) async fn lookup_client(&self, client_id: &str) -> Result<Option<ClientRecord>> {
        if let Some(c) = self
            .config
            .builtin_clients
            .iter()
            .find(|c| c.client_id == client_id)
        {
            return Ok(Some(c.clone()));
        }
        let ttl = AuthConfig::secs(self.config.client_cache_ttl);
        let now = self.now();
        let cached = if ttl > 0 {
            self.clients.get(client_id, now, ttl)
        } else {
            None
        };
        let client = match cached {
            Some(c) => c,
            None => {
                let generation = self.clients.generation();
                let c = self.repo.get_client(client_id).await?;
                if ttl > 0 {
                    self.clients.put(client_id, c.clone(), now, generation);
                }
                c
            }
        };
        Ok(client)
    }

    // ----- grants -----

    fn resolve_scope(requested: Option<&str>, allowed: &Scopes) -> Result<Scopes> {
        match opt(requested) {
            // no scope = everything allowed except offline_access,
            // which is granted only when asked for.
            None => {
                let mut s = allowed.clone();
                s.0.remove(SCOPE_OFFLINE_ACCESS);
                Ok(s)
            }
            Some(text) => {
                let asked = Scopes::parse(text)?;
                if asked.is_subset(allowed) {
                    Ok(asked)
                } else {
                    Err(Error::invalid_scope(
                        "the requested scope exceeds what may be granted",
                    ))
                }
            }
        }
    }

    /// The password grant's scope: requested ∩ user's ∩ client's. RFC 6749
    /// §3.3 lets the server grant less than asked (the response's `scope`
    /// then says what was granted), so a request naming scopes beyond the
    /// allowed ones is narrowed, not refused; `invalid_scope` only when
    /// nothing asked for may be granted.
    fn narrow_scope(requested: Option<&str>, allowed: &Scopes) -> Result<Scopes> {
        let Some(text) = opt(requested) else {
            return Self::resolve_scope(None, allowed);
        };
        let granted = Scopes::parse(text)?.intersection(allowed);
        if granted.is_empty() {
            return Err(Error::invalid_scope(
                "none of the requested scopes may be granted to this user through this client",
            ));
        }
        Ok(granted)
    }

    /// A new token or family id: `now` (seconds) and a per-server sequence
    /// number in fixed-width hex, then 96 random bits. Ids issued one after
    /// another sort one after another, so the store's indexes on them grow
    /// at their right edge instead of touching a random page per token
    /// (which, on SQLite, made each group commit write tens of scattered
    /// pages to the WAL). Uniqueness rests on the random part; the prefix
    /// only reveals what `iat` already says.
    fn new_id(&self) -> String {
        let seq = self.id_seq.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
        let secs = u64::try_from(self.now()).unwrap_or(0) & 0xff_ffff_ffff;
        format!(
            "{secs:010x}{seq:06x}{}",
            token_string(self.random.as_ref(), 12)
        )
    }

    async fn issue_access(&self, a: NewAccess<'_>) -> Result<String> {
        let signer = self.signer(self.config.signing_alg)?;
        let now = self.now();
        let claims = AccessClaims {
            iss: self.config.issuer.clone(),
            sub: a.subject.to_string(),
            aud: Audience(a.audience.clone()),
            exp: a.expires_at,
            iat: now,
            jti: a.jti.clone(),
            client_id: a.client_id.to_string(),
            scope: a.scope.to_string(),
            // The record's `username` says whether the subject is a user,
            // through every refresh and exchange.
            idtyp: Some(subject_idtyp(a.username).to_string()),
            act: a.act,
            amr: a.idp.map(|_| vec![crate::jwt::AMR_FEDERATED.to_string()]),
            idp: a.idp.map(str::to_string),
            // Reserved names never reach a token as custom claims, not even
            // from a record stored before one of them was reserved.
            custom: a
                .custom
                .iter()
                .filter(|(k, _)| !crate::is_reserved_claim(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let token = jwt::encode(&signer, &claims)?;
        self.repo
            .insert_token(&TokenRecord {
                id: a.jti,
                kind: TokenKind::Access,
                subject: a.subject.to_string(),
                username: a.username.map(str::to_string),
                client_id: a.client_id.to_string(),
                scope: a.scope.to_vec(),
                audience: a.audience,
                issued_at: now,
                expires_at: a.expires_at,
                revoked: false,
                family_id: a.family_id.to_string(),
                parent_id: a.parent_id.map(str::to_string),
                used_at: None,
                successor_id: None,
                idp: a.idp.map(str::to_string),
            })
            .await?;
        Ok(token)
    }

    /// Creates a refresh token record with a pre-chosen value; returns nothing
    /// since the caller already holds the value.
    #[allow(clippy::too_many_arguments)]
    async fn store_refresh(
        &self,
        value: &str,
        subject: &str,
        username: Option<&str>,
        client_id: &str,
        scope: &Scopes,
        audience: Vec<String>,
        family_id: &str,
        parent_id: Option<&str>,
        idp: Option<&str>,
    ) -> Result<()> {
        let now = self.now();
        self.repo
            .insert_token(&TokenRecord {
                id: secrets::token_id(value),
                kind: TokenKind::Refresh,
                subject: subject.to_string(),
                username: username.map(str::to_string),
                client_id: client_id.to_string(),
                scope: scope.to_vec(),
                audience,
                issued_at: now,
                expires_at: now.saturating_add(AuthConfig::secs(self.config.refresh_ttl)),
                revoked: false,
                family_id: family_id.to_string(),
                parent_id: parent_id.map(str::to_string),
                used_at: None,
                successor_id: None,
                idp: idp.map(str::to_string),
            })
            .await
            .map_err(Error::from)
    }

    /// Issues an access token and, if `with_refresh`, a refresh token opening
    /// a new family.
    async fn issue_pair(
        &self,
        subject: &str,
        username: Option<&str>,
        client: &ClientRecord,
        scope: &Scopes,
        with_refresh: bool,
        custom: &Claims,
    ) -> Result<TokenResponse> {
        let family = self.new_id();
        self.issue_pair_in(
            subject,
            username,
            client,
            scope,
            with_refresh,
            custom,
            family,
            None,
        )
        .await
    }

    /// [`AuthServer::issue_pair`] in the family `family` (an authorization
    /// code chooses it when issued, so a replay of the code can revoke
    /// what its first redemption issued).
    #[allow(clippy::too_many_arguments)]
    async fn issue_pair_in(
        &self,
        subject: &str,
        username: Option<&str>,
        client: &ClientRecord,
        scope: &Scopes,
        with_refresh: bool,
        custom: &Claims,
        family: String,
        idp: Option<&str>,
    ) -> Result<TokenResponse> {
        let now = self.now();
        let lifetime = self.config.access_lifetime(scope);
        let refresh = if with_refresh {
            let value = token_string(self.random.as_ref(), 32);
            self.store_refresh(
                &value,
                subject,
                username,
                &client.client_id,
                scope,
                vec![self.config.issuer.clone()],
                &family,
                None,
                idp,
            )
            .await?;
            Some(value)
        } else {
            None
        };
        let parent = refresh.as_deref().map(secrets::token_id);
        let access = self
            .issue_access(NewAccess {
                jti: self.new_id(),
                subject,
                username,
                client_id: &client.client_id,
                scope,
                audience: vec![self.config.issuer.clone()],
                expires_at: now.saturating_add(lifetime),
                family_id: &family,
                parent_id: parent.as_deref(),
                act: None,
                custom,
                idp,
            })
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: lifetime,
            scope: scope.to_string(),
            refresh_token: refresh,
            issued_token_type: None,
            id_token: None,
        })
    }
}

/// The `idtyp` of a token whose record names `username` as its resource
/// owner (or none).
fn subject_idtyp(username: Option<&str>) -> &'static str {
    if username.is_some() {
        IDTYP_USER
    } else {
        IDTYP_APP
    }
}

/// [`Error::TooManyRequests`] for a throttled login.
fn too_many_failures(wait: u64) -> Error {
    Error::TooManyRequests("too many failed logins; retry later".into(), wait)
}

/// JWS compact serialization has exactly two dots; our refresh tokens have none.
fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}
