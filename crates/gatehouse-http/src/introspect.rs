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

use gatehouse_auth::{AccessTokenFacts, Principal};
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

    /// Turns an introspection answer into a principal, or refuses it.
    fn check(&self, answer: &Value, now: i64) -> Result<Principal, AuthFailure> {
        let invalid = |why: &str| Err(AuthFailure::InvalidToken(why.to_string()));
        if answer.get("active").and_then(Value::as_bool) != Some(true) {
            return invalid("the token is not active");
        }
        // A refresh token is active too, but is no access token.
        if let Some(kind) = answer.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("bearer")
            && !kind.eq_ignore_ascii_case("access_token")
        {
            return invalid("the token is not an access token");
        }
        let exp = answer.get("exp").and_then(Value::as_i64);
        if exp.is_some_and(|e| e <= now) {
            return invalid("the token has expired");
        }
        let audiences: Vec<&str> = match answer.get("aud") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let wanted = match &self.config.audience {
            Some(a) => Some(a.as_str()),
            None => answer.get("iss").and_then(Value::as_str),
        };
        if !wanted.is_some_and(|w| audiences.contains(&w)) {
            return invalid("the token is not meant for this API");
        }
        let text = |k: &str| answer.get(k).and_then(Value::as_str);
        Ok(Principal::of_access_token(AccessTokenFacts {
            sub: text("sub"),
            client_id: text("client_id"),
            scope: text("scope").unwrap_or_default(),
            exp,
            jti: text("jti"),
            idtyp: text("idtyp"),
            username: text("username"),
            // Every member that is not a registered one is a custom claim
            // of the token (the answer repeats them at the top level).
            custom: answer
                .as_object()
                .map(gatehouse_auth::custom_claims)
                .unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn introspector(audience: Option<&str>) -> Introspector {
        Introspector::new(IntrospectionConfig {
            url: "http://127.0.0.1:9/introspect".into(),
            client_id: "rs".into(),
            client_secret: "s".into(),
            cache_ttl: Duration::from_secs(30),
            audience: audience.map(str::to_string),
        })
        .unwrap()
    }

    fn active() -> Value {
        json!({"active": true, "token_type": "Bearer", "scope": "read write",
               "client_id": "app", "sub": "alice", "aud": ["http://as"],
               "iss": "http://as", "exp": 2_000, "jti": "j1"})
    }

    #[test]
    fn an_active_access_token_becomes_a_principal() {
        let p = introspector(None).check(&active(), 1_000).unwrap();
        assert_eq!(p.subject, "alice");
        assert_eq!(p.client_id.as_deref(), Some("app"));
        assert!(p.scopes.contains("read") && p.scopes.contains("write"));
        assert_eq!(p.expires_at, Some(2_000));
        assert_eq!(p.token_id.as_deref(), Some("j1"));
        assert!(p.claims.is_empty());
    }

    #[test]
    fn custom_claims_of_the_answer_reach_the_principal() {
        let mut answer = active();
        answer["org"] = json!("acme");
        answer["level"] = json!(3);
        answer["username"] = json!("alice");
        let p = introspector(None).check(&answer, 1_000).unwrap();
        assert_eq!(
            serde_json::Value::Object(p.claims.clone()),
            json!({"org": "acme", "level": 3})
        );
        assert_eq!(p.claim("org"), Some(json!("acme")));
        assert_eq!(p.claim("sub"), Some(json!("alice")));
    }

    #[test]
    fn a_clients_own_token_has_no_user_subject() {
        let mut answer = active();
        answer["sub"] = json!("bob");
        answer["client_id"] = json!("bob");
        // No `username`: whatever `idtyp` says or not, no user.
        let p = introspector(None).check(&answer, 1_000).unwrap();
        assert_eq!((p.subject.as_str(), p.claim("sub")), ("bob", None));
        answer["idtyp"] = json!("app");
        assert_eq!(
            introspector(None)
                .check(&answer, 1_000)
                .unwrap()
                .claim("sub"),
            None
        );
        // `idtyp` is never a custom claim.
        assert!(
            introspector(None)
                .check(&answer, 1_000)
                .unwrap()
                .claims
                .is_empty()
        );
        answer["idtyp"] = json!("user");
        assert_eq!(
            introspector(None)
                .check(&answer, 1_000)
                .unwrap()
                .claim("sub"),
            Some(json!("bob"))
        );
    }

    #[test]
    fn inactive_refresh_expired_and_foreign_tokens_are_refused() {
        let i = introspector(None);
        assert!(i.check(&json!({"active": false}), 1_000).is_err());
        let mut refresh = active();
        refresh["token_type"] = json!("refresh_token");
        assert!(i.check(&refresh, 1_000).is_err());
        assert!(i.check(&active(), 2_000).is_err(), "expired");
        let mut foreign = active();
        foreign["aud"] = json!("https://reports.example");
        assert!(i.check(&foreign, 1_000).is_err());
        // With a configured audience, that one is required instead.
        let i = introspector(Some("https://reports.example"));
        assert!(i.check(&foreign, 1_000).is_ok());
        assert!(i.check(&active(), 1_000).is_err());
    }
}
