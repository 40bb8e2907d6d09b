//! Resource-server-only mode: bearer tokens are validated through another
//! authorization server's RFC 7662 introspection endpoint instead of this
//! instance's own keys, with a short positive cache so that the
//! authorization server is not called on every request.
//!
//! Only active answers are cached, for at most `cache_ttl` and never past the
//! token's `exp`; a revocation therefore takes effect within `cache_ttl`.
//! Refusals are not cached. When the authorization server cannot be reached
//! the request fails with 503, never with access.

use std::time::{Duration, Instant};

use gatehouse_auth::Principal;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use quick_cache::sync::Cache;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::authn::AuthFailure;

/// Entries kept at most.
const CACHE_MAX: usize = 10_000;
/// How long one introspection call may take before the request gets 503.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to introspect tokens.
#[derive(Clone)]
pub struct IntrospectionConfig {
    /// The authorization server's introspection endpoint.
    pub url: String,
    /// This resource server's client id at the authorization server.
    pub client_id: String,
    /// Its client secret.
    pub client_secret: String,
    /// How long an active answer is trusted (0 disables the cache).
    pub cache_ttl: Duration,
    /// The audience a token must carry; `None` accepts tokens whose `aud`
    /// includes the authorization server's own issuer (what its tokens for
    /// "the API" carry), as the built-in validation does.
    pub audience: Option<String>,
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field("cache_ttl", &self.cache_ttl)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Calls the introspection endpoint and caches active answers.
pub(crate) struct Introspector {
    config: IntrospectionConfig,
    http: reqwest::Client,
    /// sha256(token) -> (principal, when it was introspected): spares the
    /// authorization server a call per request.
    cache: Cache<[u8; 32], (Principal, Instant)>,
}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before they
/// go into the Basic credentials.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'*');

impl Introspector {
    pub(crate) fn new(config: IntrospectionConfig) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the introspection client: {e}"))?;
        Ok(Self {
            config,
            http,
            cache: Cache::new(CACHE_MAX),
        })
    }

    /// The principal of `token` at `now` (unix seconds).
    pub(crate) async fn principal(&self, token: &str, now: i64) -> Result<Principal, AuthFailure> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(p) = self.cached(&key, now) {
            return Ok(p);
        }
        let answer = self.call(token).await?;
        let principal = self.check(&answer, now)?;
        if !self.config.cache_ttl.is_zero() {
            self.cache.insert(key, (principal.clone(), Instant::now()));
        }
        Ok(principal)
    }

    fn cached(&self, key: &[u8; 32], now: i64) -> Option<Principal> {
        let (p, at) = self.cache.get(key)?;
        let fresh = at.elapsed() < self.config.cache_ttl && p.expires_at.is_none_or(|e| now < e);
        fresh.then_some(p)
    }

    async fn call(&self, token: &str) -> Result<Value, AuthFailure> {
        let id = utf8_percent_encode(&self.config.client_id, FORM).to_string();
        let secret = utf8_percent_encode(&self.config.client_secret, FORM).to_string();
        let reply = self
            .http
            .post(&self.config.url)
            .basic_auth(id, Some(secret))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await
            .map_err(|e| {
                tracing::error!(url = %self.config.url, error = %e, "introspection endpoint unreachable");
                AuthFailure::Unavailable
            })?;
        let status = reply.status();
        if !status.is_success() {
            // 401 here means this resource server's own credentials are wrong:
            // an operator problem, not the caller's.
            tracing::error!(url = %self.config.url, %status, "introspection refused");
            return Err(AuthFailure::Unavailable);
        }
        reply.json::<Value>().await.map_err(|e| {
            tracing::error!(url = %self.config.url, error = %e, "introspection answer is not JSON");
            AuthFailure::Unavailable
        })
    }

    /// Turns an introspection answer into a principal, or refuses it
    /// (the rule is `gatehouse-auth`'s, [`Principal::of_introspection`]).
    fn check(&self, answer: &Value, now: i64) -> Result<Principal, AuthFailure> {
        Principal::of_introspection(answer, now, self.config.audience.as_deref())
            .map_err(|e| AuthFailure::InvalidToken(e.description().to_string()))
    }
}
