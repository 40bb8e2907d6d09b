//! The authorization server: grants, validation, introspection, revocation,
//! key management. No HTTP here: the endpoint crate parses requests and maps
//! [`Error`]s to responses.

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
    ClientRecord, GRANT_CLIENT_CREDENTIALS, GRANT_PASSWORD, GRANT_REFRESH_TOKEN,
    GRANT_TOKEN_EXCHANGE, SCOPE_OFFLINE_ACCESS, Scopes, TOKEN_TYPE_ACCESS, TOKEN_TYPE_JWT,
    TOKEN_TYPE_REFRESH, TokenKind, TokenRecord, UserRecord,
};
use crate::principal::{AccessTokenFacts, Principal};
use crate::random::{Random, token_string};
use crate::repo::AuthRepo;
use crate::secrets::{self, DUMMY_PASSWORD_HASH};

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
    /// Algorithm of new signing keys.
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
            .finish()
    }
}

/// Parameters of a token exchange request (RFC 8693 §2.1). `audience` and
/// `resource` may each be given several times.
#[derive(Clone, Default)]
pub struct ExchangeRequest {
    /// `subject_token`.
    pub subject_token: Option<String>,
    /// `subject_token_type`.
    pub subject_token_type: Option<String>,
    /// `actor_token`.
    pub actor_token: Option<String>,
    /// `actor_token_type`.
    pub actor_token_type: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
    /// `audience` values.
    pub audience: Vec<String>,
    /// `resource` values.
    pub resource: Vec<String>,
    /// `requested_token_type`.
    pub requested_token_type: Option<String>,
}

impl fmt::Debug for ExchangeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeRequest")
            .field(
                "subject_token",
                &self.subject_token.as_ref().map(|_| "<redacted>"),
            )
            .field("subject_token_type", &self.subject_token_type)
            .field(
                "actor_token",
                &self.actor_token.as_ref().map(|_| "<redacted>"),
            )
            .field("actor_token_type", &self.actor_token_type)
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("requested_token_type", &self.requested_token_type)
            .finish()
    }
}

/// What a validated subject or actor token stands for.
#[derive(Debug)]
struct TokenFacts {
    /// The token's record id (`jti`, or the refresh token's hash).
    id: String,
    /// Its family: what is exchanged from it joins it, so revoking the
    /// family (or the token, see [`AuthRepo::revoke_token_tree`]) reaches
    /// the exchanged tokens too.
    family_id: String,
    sub: String,
    username: Option<String>,
    scope: Scopes,
    audience: Vec<String>,
    exp: i64,
    act: Option<Value>,
    /// The custom claims the exchanged token keeps: an access token's own,
    /// or for a refresh token the user's current ones.
    claims: Claims,
    /// Set for a refresh token: spent when the exchange succeeds.
    refresh: bool,
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
    /// Loads the signing keys from `repo` (decrypting the current one with
    /// a key derived from `secret`), creating or rotating the current key
    /// when there is none, its algorithm differs from the configured one, or
    /// it is older than `signing_key_max_age`.
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
        });
        server.reload_keys().await?;
        let now = server.now();
        let needs_key = match server.ring.current_info() {
            None => true,
            Some((alg, created)) => {
                alg != server.config.signing_alg
                    || server
                        .config
                        .signing_key_max_age
                        .is_some_and(|max| now - created >= AuthConfig::secs(max))
            }
        };
        if needs_key {
            server.rotate_signing_key().await?;
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

    /// Makes a new current signing key with the configured algorithm. The
    /// previous one stops signing now and stays published until every token
    /// it signed has expired. Returns the new `kid`.
    pub async fn rotate_signing_key(&self) -> Result<String> {
        let now = self.now();
        let alg = self.config.signing_alg;
        // RSA generation takes a noticeable moment; it happens at start or on
        // an explicit rotation only.
        let record = generate_key(alg, &self.cipher, self.random.as_ref(), now)?;
        let previous: Vec<String> = self
            .repo
            .load_keys()
            .await?
            .into_iter()
            .filter(|k| k.retired_at.is_none())
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

    /// The key that signs new tokens, access and ID tokens alike.
    pub(crate) fn signer(&self) -> Result<Arc<crate::keys::Signer>> {
        self.ring
            .current()
            .ok_or_else(|| Error::server("no signing key loaded"))
    }

    /// Deletes expired token records and keys no longer published, then
    /// reloads the keys. Meant to run periodically.
    pub async fn purge_expired(&self) -> Result<u64> {
        let n = self.repo.purge_expired(self.now()).await?;
        let n = n + self.repo.purge_oauth1(self.now()).await?;
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
        let user = self.repo.find_user(username).await?;
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
        let stored = client
            .as_ref()
            .map(|c| c.secret_hash.as_slice())
            .unwrap_or(&[0u8; 32]);
        let ok = secrets::verify_secret(secret, stored);
        match client {
            Some(c) if ok => Ok(c),
            _ => Err(Error::InvalidClient("client authentication failed".into())),
        }
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

    #[allow(clippy::too_many_arguments)]
    async fn issue_access(
        &self,
        jti: String,
        subject: &str,
        username: Option<&str>,
        client_id: &str,
        scope: &Scopes,
        audience: Vec<String>,
        expires_at: i64,
        family_id: &str,
        parent_id: Option<&str>,
        act: Option<Value>,
        custom: &Claims,
    ) -> Result<String> {
        let signer = self
            .ring
            .current()
            .ok_or_else(|| Error::server("no signing key loaded"))?;
        let now = self.now();
        let claims = AccessClaims {
            iss: self.config.issuer.clone(),
            sub: subject.to_string(),
            aud: Audience(audience.clone()),
            exp: expires_at,
            iat: now,
            jti: jti.clone(),
            client_id: client_id.to_string(),
            scope: scope.to_string(),
            // The record's `username` says whether the subject is a user,
            // through every refresh and exchange.
            idtyp: Some(subject_idtyp(username).to_string()),
            act,
            // Reserved names never reach a token as custom claims, not even
            // from a record stored before one of them was reserved.
            custom: custom
                .iter()
                .filter(|(k, _)| !crate::is_reserved_claim(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let token = jwt::encode(&signer, &claims)?;
        self.repo
            .insert_token(&TokenRecord {
                id: jti,
                kind: TokenKind::Access,
                subject: subject.to_string(),
                username: username.map(str::to_string),
                client_id: client_id.to_string(),
                scope: scope.to_vec(),
                audience,
                issued_at: now,
                expires_at,
                revoked: false,
                family_id: family_id.to_string(),
                parent_id: parent_id.map(str::to_string),
                used_at: None,
                successor_id: None,
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
        let now = self.now();
        let family = self.new_id();
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
            )
            .await?;
            Some(value)
        } else {
            None
        };
        let access = self
            .issue_access(
                self.new_id(),
                subject,
                username,
                &client.client_id,
                scope,
                vec![self.config.issuer.clone()],
                now.saturating_add(lifetime),
                &family,
                refresh.as_deref().map(secrets::token_id).as_deref(),
                None,
                custom,
            )
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: lifetime,
            scope: scope.to_string(),
            refresh_token: refresh,
            issued_token_type: None,
        })
    }

    /// RFC 6749 §4.3: resource owner password credentials. A refresh token is
    /// issued when `allow_refresh` is set (false on `/oauth/access_token`)
    /// and the client may use the refresh grant.
    ///
    /// A wrong user name and a wrong password are the same `invalid_grant`
    /// and cost the same argon2 verification; failures are throttled per
    /// (user, address `from`) and per address ([`AuthServer::check_user_password`]).
    pub async fn password_grant(
        &self,
        client: &ClientRecord,
        username: Option<&str>,
        password: Option<&str>,
        scope: Option<&str>,
        allow_refresh: bool,
        from: Option<IpAddr>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(GRANT_PASSWORD) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the password grant".into(),
            ));
        }
        let (Some(username), Some(password)) = (opt(username), opt(password)) else {
            return Err(Error::invalid_request(
                "the password grant needs `username` and `password`",
            ));
        };
        if let Some(s) = opt(scope) {
            Scopes::parse(s)?;
        }
        let user = self.check_user_password(username, password, from).await?;
        let allowed = crate::oidc::user_scope_ceiling(&client.scopes, &user.scopes);
        let granted = Self::narrow_scope(scope, &allowed)?;
        let with_refresh = allow_refresh && client.allows_grant(GRANT_REFRESH_TOKEN);
        self.issue_pair(
            &user.username,
            Some(&user.username),
            client,
            &granted,
            with_refresh,
            &user.claims,
        )
        .await
    }

    /// RFC 6749 §4.4: client credentials. The subject is the client itself,
    /// with no custom claims (those belong to users); no refresh token
    /// (RFC 6749 §4.4.3).
    pub async fn client_credentials_grant(
        &self,
        client: &ClientRecord,
        scope: Option<&str>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(GRANT_CLIENT_CREDENTIALS) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the client_credentials grant".into(),
            ));
        }
        let granted = Self::resolve_scope(scope, &Scopes::from_list(&client.scopes))?;
        self.issue_pair(
            &client.client_id,
            None,
            client,
            &granted,
            false,
            &Claims::new(),
        )
        .await
    }

    /// RFC 6749 §6 with rotation (RFC 9700 §4.14.2): the presented refresh
    /// token is spent and replaced. Presenting a spent token again revokes
    /// its whole family, except for the immediate predecessor of the live
    /// token within `refresh_reuse_grace` seconds of its rotation.
    pub async fn refresh_grant(
        &self,
        client: &ClientRecord,
        refresh_token: Option<&str>,
        scope: Option<&str>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(GRANT_REFRESH_TOKEN) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the refresh_token grant".into(),
            ));
        }
        let Some(value) = opt(refresh_token) else {
            return Err(Error::invalid_request(
                "the refresh_token grant needs `refresh_token`",
            ));
        };
        let invalid = || Error::invalid_grant("the refresh token is invalid, expired or revoked");
        let id = secrets::token_id(value);
        let now = self.now();
        let record = match self.repo.get_token(&id).await? {
            Some(r) if r.kind == TokenKind::Refresh => r,
            _ => return Err(invalid()),
        };
        // RFC 6749 §6: the refresh token must have been issued to this client.
        if record.client_id != client.client_id || record.revoked || record.expires_at <= now {
            return Err(invalid());
        }
        let original = Scopes::from_list(&record.scope);
        let granted = match opt(scope) {
            None => original.clone(),
            Some(text) => {
                let asked = Scopes::parse(text)?;
                if !asked.is_subset(&original) {
                    return Err(Error::invalid_scope(
                        "a refresh may only keep or narrow the original scope",
                    ));
                }
                asked
            }
        };
        // The user is read again: a removed user gets nothing, and the new
        // access token carries the user's claims as they are now (so
        // `user set-claims` takes effect at the next refresh).
        let custom = match &record.username {
            Some(username) => match self.repo.find_user(username).await? {
                Some(user) => user.claims,
                None => return Err(invalid()),
            },
            None => Claims::new(),
        };
        let next_value = token_string(self.random.as_ref(), 32);
        let next_id = secrets::token_id(&next_value);
        if record.used_at.is_some() {
            self.spent_token_presented(&record, now, &next_id).await?;
        } else if !self.repo.mark_refresh_used(&id, now, &next_id).await? {
            // Lost a race with another use of the same token: that is reuse.
            let current = self.repo.get_token(&id).await?.ok_or_else(invalid)?;
            self.spent_token_presented(&current, now, &next_id).await?;
        }
        // Still here: first use, or the grace case. Rotate.
        self.store_refresh(
            &next_value,
            &record.subject,
            record.username.as_deref(),
            &client.client_id,
            &original,
            record.audience.clone(),
            &record.family_id,
            Some(&id),
        )
        .await?;
        let lifetime = self.config.access_lifetime(&granted);
        let access = self
            .issue_access(
                self.new_id(),
                &record.subject,
                record.username.as_deref(),
                &client.client_id,
                &granted,
                record.audience.clone(),
                now.saturating_add(lifetime),
                &record.family_id,
                Some(&next_id),
                None,
                &custom,
            )
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: lifetime,
            scope: granted.to_string(),
            refresh_token: Some(next_value),
            issued_token_type: None,
        })
    }

    /// A spent refresh token was presented. Within the grace period after its
    /// rotation, if it is the immediate predecessor of the still-unused live
    /// token, that live token is replaced by `next_id` and revoked, and the
    /// caller may rotate again (`Ok`): the client most likely lost the
    /// response. Otherwise the family is revoked (RFC 9700 §4.14.2) and the
    /// grant refused.
    async fn spent_token_presented(
        &self,
        record: &TokenRecord,
        now: i64,
        next_id: &str,
    ) -> Result<()> {
        let grace = AuthConfig::secs(self.config.refresh_reuse_grace);
        if grace > 0
            && let (Some(used_at), Some(successor)) = (record.used_at, &record.successor_id)
            && now - used_at <= grace
            && let Some(next) = self.repo.get_token(successor).await?
            // A refresh token spent by an exchange has an access token as
            // successor: presenting it again is always reuse.
            && next.kind == TokenKind::Refresh
            && next.used_at.is_none()
            && !next.revoked
            && self
                .repo
                .replace_successor(&record.id, successor, next_id)
                .await?
        {
            self.repo.revoke_token(successor).await?;
            self.revoked();
            return Ok(());
        }
        let n = self.repo.revoke_family(&record.family_id).await?;
        self.revoked();
        tracing::warn!(
            client_id = %record.client_id,
            revoked = n,
            "spent refresh token presented again: token family revoked"
        );
        Err(Error::invalid_grant(
            "the refresh token is invalid, expired or revoked",
        ))
    }

    /// RFC 8693 token exchange, checking in this order:
    /// the client may exchange (`unauthorized_client`); `subject_token`
    /// and its type are valid (`invalid_request`; a refresh token only from
    /// the client it was issued to, and a spent one revokes its family); the
    /// actor token, if any, is valid (`invalid_request`); the scope is
    /// within the subject token's and the client's (`invalid_scope`); every
    /// audience/resource is an allowed target of the client and never
    /// widens the subject's audience (`invalid_target`); the requested
    /// token type can be issued (`invalid_request`). The new token keeps
    /// `sub`, adds `act`, never outlives the subject token, and joins the
    /// subject's family with the subject as parent, so revoking the subject
    /// revokes it. A refresh token used as subject is spent, as by the
    /// refresh grant.
    pub async fn token_exchange(
        &self,
        client: &ClientRecord,
        req: &ExchangeRequest,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(GRANT_TOKEN_EXCHANGE) {
            return Err(Error::UnauthorizedClient(
                "this client may not exchange tokens".into(),
            ));
        }
        let now = self.now();

        // RFC 8693 §2.1: subject_token and subject_token_type are REQUIRED.
        let (Some(subject_token), Some(subject_type)) = (
            opt(req.subject_token.as_deref()),
            opt(req.subject_token_type.as_deref()),
        ) else {
            return Err(Error::invalid_request(
                "token exchange needs `subject_token` and `subject_token_type`",
            ));
        };
        // RFC 8693 §2.2.2: an invalid subject token is invalid_request.
        let subject = self
            .token_facts(subject_token, subject_type, client, now, true)
            .await
            .map_err(|e| match e {
                Error::Server(_) => e,
                _ => Error::invalid_request(format!("subject_token: {}", e.description())),
            })?;

        // RFC 8693 §2.1: actor_token_type is REQUIRED with actor_token and
        // MUST NOT be sent without it.
        match (
            opt(req.actor_token.as_deref()),
            opt(req.actor_token_type.as_deref()),
        ) {
            (None, None) => {}
            (Some(actor), Some(actor_type)) => {
                self.token_facts(actor, actor_type, client, now, false)
                    .await
                    .map_err(|e| match e {
                        Error::Server(_) => e,
                        _ => Error::invalid_request(format!("actor_token: {}", e.description())),
                    })?;
            }
            (Some(_), None) => {
                return Err(Error::invalid_request(
                    "`actor_token` needs `actor_token_type`",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_request(
                    "`actor_token_type` without `actor_token`",
                ));
            }
        }

        // Within the subject token's scope AND the exchanging client's
        // (RFC 8693 §5: the server decides what the client may obtain).
        let client_scopes = Scopes::from_list(&client.scopes);
        let scope = match opt(req.scope.as_deref()) {
            None => {
                // offline_access only when asked for.
                let mut s = subject.scope.intersection(&client_scopes);
                s.0.remove(SCOPE_OFFLINE_ACCESS);
                s
            }
            Some(text) => {
                let asked = Scopes::parse(text)?;
                if !asked.is_subset(&subject.scope) {
                    return Err(Error::invalid_scope(
                        "an exchange may only narrow the subject token's scope",
                    ));
                }
                if !asked.is_subset(&client_scopes) {
                    return Err(Error::invalid_scope(
                        "the requested scope exceeds what this client may be granted",
                    ));
                }
                asked
            }
        };
        if scope.0.is_empty() {
            return Err(Error::invalid_scope(
                "the subject token and this client have no scope in common",
            ));
        }

        // A subject carrying the API's own audience (the default of every
        // grant) may be exchanged for any of the client's targets; one
        // restricted to other audiences never gets a wider one.
        let subject_restricted = !subject.audience.contains(&self.config.issuer);
        let mut targets: Vec<String> = Vec::new();
        for t in req
            .audience
            .iter()
            .chain(req.resource.iter())
            .filter(|t| !t.is_empty())
        {
            let allowed = *t == self.config.issuer || client.audiences.iter().any(|a| a == t);
            if !allowed {
                return Err(Error::InvalidTarget(
                    "the requested audience or resource is not allowed for this client".into(),
                ));
            }
            if subject_restricted && !subject.audience.contains(t) {
                return Err(Error::InvalidTarget(
                    "the requested audience or resource is outside the subject token's audience"
                        .into(),
                ));
            }
            if !targets.contains(t) {
                targets.push(t.clone());
            }
        }
        if targets.is_empty() {
            // No audience asked for: the subject's, never the API's by default.
            targets = subject.audience.clone();
        }

        let issued_type = match opt(req.requested_token_type.as_deref()) {
            None | Some(TOKEN_TYPE_ACCESS) => TOKEN_TYPE_ACCESS,
            Some(TOKEN_TYPE_JWT) => TOKEN_TYPE_JWT,
            Some(_) => {
                return Err(Error::invalid_request(
                    "`requested_token_type` must be the access_token or jwt token type",
                ));
            }
        };

        let jti = self.new_id();
        if subject.refresh {
            // RFC 9700 §4.14.2: single use, as with the refresh grant. A
            // lost race with another use is reuse: the family is revoked.
            if !self.repo.mark_refresh_used(&subject.id, now, &jti).await? {
                self.revoke_reused_family(&subject.family_id, &client.client_id)
                    .await?;
                return Err(Error::invalid_request(
                    "subject_token: the token is invalid, expired or revoked",
                ));
            }
        }

        // RFC 8693 §4.1: the current actor, nesting earlier ones.
        let mut act = serde_json::Map::new();
        act.insert("sub".into(), Value::String(client.client_id.clone()));
        if let Some(prior) = subject.act {
            act.insert("act".into(), prior);
        }
        let exp = now
            .saturating_add(self.config.access_lifetime(&scope))
            .min(subject.exp);
        let access = self
            .issue_access(
                jti,
                &subject.sub,
                subject.username.as_deref(),
                &client.client_id,
                &scope,
                targets,
                exp,
                &subject.family_id,
                Some(&subject.id),
                Some(Value::Object(act)),
                &subject.claims,
            )
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: exp - now,
            scope: scope.to_string(),
            refresh_token: None,
            issued_token_type: Some(issued_type),
        })
    }

    /// Revokes a family after a spent refresh token was presented again.
    async fn revoke_reused_family(&self, family_id: &str, client_id: &str) -> Result<()> {
        let n = self.repo.revoke_family(family_id).await?;
        self.revoked();
        tracing::warn!(
            %client_id,
            revoked = n,
            "spent refresh token presented again: token family revoked"
        );
        Ok(())
    }

    /// What a subject/actor token of RFC 8693 type `token_type` stands for,
    /// if it is valid now: signature, expiry and revocation for access
    /// tokens and JWTs; for refresh tokens existence, expiry, revocation,
    /// and that it was issued to `client` (a refresh token is bound to its
    /// client, RFC 6749 §6). A spent refresh token presented as the
    /// `subject` is reuse: its family is revoked.
    async fn token_facts(
        &self,
        token: &str,
        token_type: &str,
        client: &ClientRecord,
        now: i64,
        subject: bool,
    ) -> Result<TokenFacts> {
        let invalid = || Error::invalid_token("the token is invalid, expired or revoked");
        match token_type {
            TOKEN_TYPE_ACCESS | TOKEN_TYPE_JWT => {
                let (claims, username) = self.check_jwt(token, now, false).await?;
                // The family is only in the record (read again: the status
                // cache may have answered above).
                let record = self
                    .repo
                    .get_token(&claims.jti)
                    .await?
                    .filter(|r| r.kind == TokenKind::Access && !r.revoked)
                    .ok_or_else(invalid)?;
                Ok(TokenFacts {
                    id: record.id,
                    family_id: record.family_id,
                    sub: claims.sub.clone(),
                    username,
                    scope: Scopes(claims.scopes().map(str::to_string).collect()),
                    audience: claims.aud.0.clone(),
                    exp: claims.exp,
                    act: claims.act.clone(),
                    claims: claims.custom.clone(),
                    refresh: false,
                })
            }
            TOKEN_TYPE_REFRESH => {
                let record = self
                    .repo
                    .get_token(&secrets::token_id(token))
                    .await?
                    .filter(|r| {
                        r.kind == TokenKind::Refresh
                            && !r.revoked
                            && r.expires_at > now
                            // Another client's refresh token reads as an invalid one.
                            && r.client_id == client.client_id
                    })
                    .ok_or_else(invalid)?;
                if record.used_at.is_some() {
                    if subject {
                        self.revoke_reused_family(&record.family_id, &client.client_id)
                            .await?;
                    }
                    return Err(invalid());
                }
                // A refresh token carries no claims: an access token
                // refreshed from it would get the user's current ones, and
                // so does the exchanged token.
                let claims = match &record.username {
                    Some(username) => {
                        self.repo
                            .find_user(username)
                            .await?
                            .ok_or_else(invalid)?
                            .claims
                    }
                    None => Claims::new(),
                };
                Ok(TokenFacts {
                    id: record.id,
                    family_id: record.family_id,
                    sub: record.subject,
                    username: record.username,
                    scope: Scopes::from_list(&record.scope),
                    audience: record.audience,
                    exp: record.expires_at,
                    act: None,
                    claims,
                    refresh: subject,
                })
            }
            _ => Err(Error::invalid_request(
                "the token type must be the access_token, refresh_token or jwt token type",
            )),
        }
    }

    async fn live_refresh(&self, token: &str, now: i64) -> Result<Option<TokenRecord>> {
        Ok(self
            .repo
            .get_token(&secrets::token_id(token))
            .await?
            .filter(|r| {
                r.kind == TokenKind::Refresh
                    && !r.revoked
                    && r.used_at.is_none()
                    && r.expires_at > now
            }))
    }

    /// Full validation of one of our JWT access tokens at `now`: signature
    /// (reloading keys once if the `kid` is unknown), issuer, expiry,
    /// revocation, and — when `own_audience` — that `aud` includes the issuer.
    async fn check_jwt(
        &self,
        token: &str,
        now: i64,
        own_audience: bool,
    ) -> Result<(Arc<AccessClaims>, Option<String>)> {
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let cached = self.verified.get(&key);
        let (claims, status) = match cached {
            Some(v) => (v.claims, v.status),
            None => {
                let c = match jwt::verify_signature(&self.ring, token, now) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        // Another instance may have rotated: look again, but rarely.
                        let last = self.last_key_reload.load(Ordering::SeqCst);
                        if now.saturating_sub(last) < KEY_RELOAD_INTERVAL {
                            return Err(e);
                        }
                        self.reload_keys().await?;
                        Arc::new(jwt::verify_signature(&self.ring, token, now)?)
                    }
                };
                self.verified.insert(
                    key,
                    Verified {
                        claims: c.clone(),
                        status: None,
                    },
                );
                (c, None)
            }
        };
        if claims.iss != self.config.issuer {
            return Err(Error::invalid_token("the token was not issued here"));
        }
        // RFC 7519 §4.1.4: not accepted on or after `exp`.
        if claims.exp <= now {
            return Err(Error::invalid_token("the token has expired"));
        }
        if own_audience && !claims.aud.contains(&self.config.issuer) {
            return Err(Error::invalid_token("the token is not meant for this API"));
        }
        // Read before the store, so a revocation racing with the read leaves
        // the status stale rather than trusted.
        let generation = self.revocations.load(Ordering::SeqCst);
        let ttl = AuthConfig::secs(self.config.token_status_cache_ttl);
        if let Some(s) = status
            && ttl > 0
            && s.generation == generation
            && now >= s.checked_at
            && now - s.checked_at < ttl
        {
            return Ok((claims, s.username));
        }
        let record = match self.repo.get_token(&claims.jti).await? {
            Some(r) if r.kind == TokenKind::Access && !r.revoked => r,
            _ => return Err(Error::invalid_token("the token has been revoked")),
        };
        if ttl > 0 {
            // Only an entry still there is updated: one dropped by a key
            // reload meanwhile stays dropped.
            let _ = self.verified.entry(&key, None, |_, entry| {
                entry.status = Some(LiveStatus {
                    checked_at: now,
                    generation,
                    username: record.username.clone(),
                });
                EntryAction::Retain(())
            });
        }
        Ok((claims, record.username))
    }

    /// For resource servers: validates a bearer access token at `now`
    /// (signature with `kid` lookup, issuer, expiry, revocation, and that
    /// `aud` includes this API's own audience, the issuer). Errors are
    /// [`Error::InvalidToken`] (RFC 6750 §3.1) or [`Error::Server`].
    pub async fn validate_access_token(&self, token: &str, now: i64) -> Result<AccessClaims> {
        let (claims, _) = self.check_jwt(token, now, true).await?;
        Ok(Arc::unwrap_or_clone(claims))
    }

    /// For resource servers: who a bearer access token acts for, validated
    /// as [`AuthServer::validate_access_token`] does. Copies only what a
    /// [`Principal`] holds out of the cached claims.
    pub async fn access_principal(&self, token: &str, now: i64) -> Result<Principal> {
        let (claims, username) = self.check_jwt(token, now, true).await?;
        Ok(Principal::of_access_token(AccessTokenFacts {
            sub: Some(&claims.sub),
            client_id: Some(&claims.client_id),
            scope: &claims.scope,
            exp: Some(claims.exp),
            jti: Some(&claims.jti),
            idtyp: claims.idtyp.as_deref(),
            username: username.as_deref(),
            custom: claims.custom.clone(),
        }))
    }

    /// RFC 7662 introspection. The caller must have authenticated the
    /// client. Anything not valid right now — unknown, malformed, expired,
    /// revoked, spent, or another client's refresh token — is
    /// `{"active": false}` (§2.2).
    pub async fn introspect(&self, client: &ClientRecord, token: &str) -> Result<Value> {
        let now = self.now();
        let inactive = json!({ "active": false });
        if looks_like_jwt(token) {
            return match self.check_jwt(token, now, false).await {
                Ok((c, username)) => {
                    let mut out = json!({
                        "active": true,
                        "token_type": "Bearer",
                        "scope": c.scope,
                        "client_id": c.client_id,
                        "sub": c.sub,
                        "aud": c.aud,
                        "iss": c.iss,
                        "exp": c.exp,
                        "iat": c.iat,
                        "jti": c.jti,
                    });
                    if let Some(obj) = out.as_object_mut() {
                        let idtyp = c
                            .idtyp
                            .as_deref()
                            .unwrap_or(subject_idtyp(username.as_deref()));
                        obj.insert("idtyp".into(), Value::String(idtyp.to_string()));
                        if let Some(u) = username {
                            obj.insert("username".into(), Value::String(u));
                        }
                        if let Some(act) = &c.act {
                            obj.insert("act".into(), act.clone());
                        }
                        for (name, value) in &c.custom {
                            obj.insert(name.clone(), value.clone());
                        }
                    }
                    Ok(out)
                }
                Err(Error::Server(cause)) => Err(Error::Server(cause)),
                Err(_) => Ok(inactive),
            };
        }
        // Refresh tokens are only ever shown to the client that holds them.
        match self.live_refresh(token, now).await? {
            Some(r) if r.client_id == client.client_id => {
                let mut out = json!({
                    "active": true,
                    "token_type": "refresh_token",
                    "scope": Scopes::from_list(&r.scope).to_string(),
                    "client_id": r.client_id,
                    "sub": r.subject,
                    "idtyp": subject_idtyp(r.username.as_deref()),
                    "iss": self.config.issuer,
                    "exp": r.expires_at,
                    "iat": r.issued_at,
                });
                if let Some(u) = r.username {
                    // What an access token refreshed from it would carry.
                    let custom = self
                        .repo
                        .find_user(&u)
                        .await?
                        .map(|user| user.claims)
                        .unwrap_or_default();
                    if let Some(obj) = out.as_object_mut() {
                        obj.insert("username".into(), Value::String(u));
                        for (name, value) in custom {
                            obj.insert(name, value);
                        }
                    }
                }
                Ok(out)
            }
            _ => Ok(inactive),
        }
    }

    /// RFC 7009 revocation by the authenticated `client`. Revoking a refresh
    /// token revokes its family, access tokens included. Unknown or invalid
    /// tokens succeed silently (§2.2); another client's token is
    /// `unauthorized_client` (§2.1). `token_type_hint` is only a hint: both
    /// kinds are searched regardless (§2.1).
    pub async fn revoke(&self, client: &ClientRecord, token: &str) -> Result<()> {
        let now = self.now();
        if looks_like_jwt(token) {
            // Expired or not, a token with a good signature can be revoked.
            let Ok(claims) = jwt::verify_signature(&self.ring, token, now) else {
                return Ok(());
            };
            let Some(record) = self.repo.get_token(&claims.jti).await? else {
                return Ok(());
            };
            if record.client_id != client.client_id {
                return Err(Error::UnauthorizedClient(
                    "the token was issued to another client".into(),
                ));
            }
            // With every token exchanged from it (directly or not).
            self.repo
                .revoke_token_tree(&record.id, &record.family_id)
                .await?;
            self.revoked();
            return Ok(());
        }
        let Some(record) = self.repo.get_token(&secrets::token_id(token)).await? else {
            return Ok(());
        };
        if record.kind != TokenKind::Refresh {
            return Ok(());
        }
        if record.client_id != client.client_id {
            return Err(Error::UnauthorizedClient(
                "the token was issued to another client".into(),
            ));
        }
        self.repo.revoke_family(&record.family_id).await?;
        self.revoked();
        Ok(())
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
