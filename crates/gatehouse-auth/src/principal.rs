//! Who a resource request acts for, once authenticated.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::claims::Claims;
use crate::jwt::{IDTYP_APP, IDTYP_USER};
use crate::model::{IdentityKind, Scopes, UserRecord};

/// What an anonymous caller holds when `auth.anonymous_read` is on: the
/// default read scope and nothing more.
pub const ANONYMOUS_SCOPE: &str = "read";

/// How the caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthScheme {
    /// `Authorization: Bearer <access token>` (RFC 6750).
    Bearer,
    /// HTTP Basic with a user's name and password, checked on every request.
    Basic,
    /// An OAuth 1.0 signed request.
    OAuth1,
    /// No credentials, allowed because `auth.anonymous_read` is on.
    Anonymous,
}

/// The authenticated caller of a GraphQL or REST request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user (or client, for client credentials; consumer, for an OAuth
    /// 1.0 request signed by the consumer alone) the request acts for.
    pub subject: String,
    /// Which kind of identity [`Principal::subject`] names (`None` for an
    /// anonymous caller). Only a user's subject is the `$sub` of row
    /// policies: see [`Principal::claim`].
    pub subject_kind: Option<IdentityKind>,
    /// The OAuth client the token was issued to, if any.
    pub client_id: Option<String>,
    /// Scopes granted.
    pub scopes: BTreeSet<String>,
    /// How the caller authenticated.
    pub scheme: AuthScheme,
    /// When the credential stops granting access (unix seconds), if it expires.
    pub expires_at: Option<i64>,
    /// The access token's id (`jti`), to notice revocation of long-lived streams.
    pub token_id: Option<String>,
    /// The custom claims of the caller (`org`, `team`, ...): a bearer
    /// token's own, or for HTTP Basic and OAuth 1.0 the user record's.
    /// Never `sub` nor `client_id`: ask [`Principal::claim`] for those.
    pub claims: Claims,
}

impl Principal {
    /// The caller with no credentials (anonymous reads): it holds exactly
    /// the default read scope, so a type or root field protected by another
    /// scope (`@auth(read: "secret")`) stays closed to it.
    pub fn anonymous() -> Self {
        Self {
            subject: String::new(),
            subject_kind: None,
            client_id: None,
            scopes: BTreeSet::from([ANONYMOUS_SCOPE.to_string()]),
            scheme: AuthScheme::Anonymous,
            expires_at: None,
            token_id: None,
            claims: Claims::new(),
        }
    }

    /// The value of claim `name` for the caller, as row policies read
    /// `$name`: `sub` is the subject when it is a user (a client or
    /// consumer acting for itself has none: its name could be a user's,
    /// see `docs/design/authentication.md`) and `client_id` the client
    /// (`None` when there is none, as for an anonymous caller); any other
    /// name is one of the custom [`Principal::claims`]. `None`: the caller
    /// has no such claim (and a policy comparing with it matches nothing).
    pub fn claim(&self, name: &str) -> Option<Value> {
        match name {
            "sub" => self.user().map(|u| Value::String(u.to_string())),
            "client_id" => self.client_id.clone().map(Value::String),
            _ => self.claims.get(name).cloned(),
        }
    }

    /// The user the request acts for, if it acts for one.
    pub fn user(&self) -> Option<&str> {
        (self.subject_kind == Some(IdentityKind::User) && !self.subject.is_empty())
            .then_some(self.subject.as_str())
    }

    /// Who a bearer access token acts for: the one conversion of both
    /// token checks, this server's own ([`crate::AuthServer::access_principal`])
    /// and another authorization server's introspection answer.
    pub fn of_access_token(t: AccessTokenFacts<'_>) -> Self {
        // `idtyp` says it; a token without it (issued before it existed,
        // or by another server) is a user's when it names a resource
        // owner, else a client's: never a user's by default.
        let kind = match t.idtyp {
            Some(IDTYP_USER) => IdentityKind::User,
            Some(IDTYP_APP) => IdentityKind::Client,
            _ if t.username.is_some() => IdentityKind::User,
            _ => IdentityKind::Client,
        };
        Self {
            subject: t.sub.or(t.client_id).unwrap_or_default().to_string(),
            subject_kind: Some(kind),
            client_id: t.client_id.map(str::to_string),
            scopes: t
                .scope
                .split_ascii_whitespace()
                .map(str::to_string)
                .collect(),
            scheme: AuthScheme::Bearer,
            expires_at: t.exp,
            token_id: t.jti.map(str::to_string),
            claims: t.custom,
        }
    }

    /// Who an access token acts for, from another authorization server's
    /// RFC 7662 introspection answer, at `now` (unix seconds): refused
    /// ([`crate::Error::InvalidToken`]) unless the answer is active, for an
    /// access token (a refresh token is active too), unexpired, and has
    /// `audience` among its `aud` (with `None`, the answer's own `iss`:
    /// what that server's tokens for "the API" carry, as this server's own
    /// validation requires its issuer). The conversion is then
    /// [`Principal::of_access_token`]'s, as for this server's own tokens.
    pub fn of_introspection(
        answer: &Value,
        now: i64,
        audience: Option<&str>,
    ) -> crate::Result<Self> {
        let invalid = |why: &'static str| Err(crate::Error::invalid_token(why));
        if answer.get("active").and_then(Value::as_bool) != Some(true) {
            return invalid("the token is not active");
        }
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
        let wanted = audience.or_else(|| answer.get("iss").and_then(Value::as_str));
        if !wanted.is_some_and(|w| audiences.contains(&w)) {
            return invalid("the token is not meant for this API");
        }
        let text = |k: &str| answer.get(k).and_then(Value::as_str);
        Ok(Self::of_access_token(AccessTokenFacts {
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
                .map(crate::custom_claims)
                .unwrap_or_default(),
        }))
    }

    /// A user who signed the request with their own name and password
    /// (HTTP Basic, checked on every request): the record's scopes and,
    /// read on every request like the password, its custom claims. No
    /// client, no expiry.
    pub fn of_basic_user(user: UserRecord) -> Self {
        Self {
            subject: user.username,
            subject_kind: Some(IdentityKind::User),
            client_id: None,
            scopes: user.scopes.into_iter().collect(),
            scheme: AuthScheme::Basic,
            expires_at: None,
            token_id: None,
            claims: user.claims,
        }
    }

    /// An OAuth 1.0 request signed by the consumer alone (RFC 5849 §3): it
    /// acts as itself, its key both subject and client, with its own
    /// `scopes` and no custom claims (they describe users).
    pub fn of_oauth1_consumer(consumer_key: String, scopes: Scopes) -> Self {
        Self {
            subject: consumer_key.clone(),
            subject_kind: Some(IdentityKind::Consumer),
            client_id: Some(consumer_key),
            scopes: scopes.0,
            scheme: AuthScheme::OAuth1,
            expires_at: None,
            token_id: None,
            claims: Claims::new(),
        }
    }

    /// An OAuth 1.0 request signed with the access token `user` approved
    /// for `consumer_key`: the user, with `scopes` (what the token, the
    /// consumer and the user all still allow), the user record's custom
    /// claims as they are now, until the token's `expires_at`.
    pub fn of_oauth1_user(
        user: UserRecord,
        consumer_key: String,
        scopes: Scopes,
        expires_at: i64,
    ) -> Self {
        Self {
            subject: user.username,
            subject_kind: Some(IdentityKind::User),
            client_id: Some(consumer_key),
            scopes: scopes.0,
            scheme: AuthScheme::OAuth1,
            expires_at: Some(expires_at),
            token_id: None,
            claims: user.claims,
        }
    }

    /// Whether this is an anonymous caller.
    pub fn is_anonymous(&self) -> bool {
        self.scheme == AuthScheme::Anonymous
    }
}

/// What an access token says about its caller, as this server's
/// validation or an RFC 7662 introspection answer gives it: the input of
/// [`Principal::of_access_token`].
#[derive(Debug, Clone, Default)]
pub struct AccessTokenFacts<'a> {
    /// `sub`.
    pub sub: Option<&'a str>,
    /// `client_id`.
    pub client_id: Option<&'a str>,
    /// `scope`, space-separated.
    pub scope: &'a str,
    /// `exp`.
    pub exp: Option<i64>,
    /// `jti`.
    pub jti: Option<&'a str>,
    /// `idtyp`: [`IDTYP_USER`] or [`IDTYP_APP`].
    pub idtyp: Option<&'a str>,
    /// The resource owner the token's record (or the introspection
    /// answer's `username`) names, if any.
    pub username: Option<&'a str>,
    /// The custom claims.
    pub custom: Claims,
}

/// RFC 6750 §3 challenges (`WWW-Authenticate`) for resource requests, shared
/// by GraphQL's and REST's refusals so both read alike.
pub mod challenge {
    /// No credentials, or credentials the caller must replace: no error code
    /// (RFC 6750 §3.1).
    pub const MISSING: &str = "Bearer realm=\"gatehouse\"";

    /// A bearer token that is malformed, expired, revoked or not meant for
    /// this API (401, RFC 6750 §3.1 `invalid_token`), saying why.
    pub fn invalid_token(description: &str) -> String {
        // A quoted-string: no `"` or `\` inside, whatever the text says.
        format!(
            "Bearer realm=\"gatehouse\", error=\"invalid_token\", error_description=\"{}\"",
            description.replace(['"', '\\'], "'")
        )
    }

    /// Credentials that lack `scope` (403, RFC 6750 §3.1 `insufficient_scope`).
    pub fn insufficient_scope(scope: &str) -> String {
        // Scope tokens never hold `"` or `\` (RFC 6749 §3.3), but the
        // header must stay well-formed whatever a schema declares.
        let scope = scope.replace(['"', '\\'], "");
        format!("Bearer realm=\"gatehouse\", error=\"insufficient_scope\", scope=\"{scope}\"")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn check(answer: &Value, now: i64) -> crate::Result<Principal> {
        Principal::of_introspection(answer, now, None)
    }

    fn active() -> Value {
        json!({"active": true, "token_type": "Bearer", "scope": "read write",
               "client_id": "app", "sub": "alice", "aud": ["http://as"],
               "iss": "http://as", "exp": 2_000, "jti": "j1"})
    }

    #[test]
    fn an_active_access_token_becomes_a_principal() {
        let p = check(&active(), 1_000).unwrap();
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
        let p = check(&answer, 1_000).unwrap();
        assert_eq!(
            Value::Object(p.claims.clone()),
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
        let p = check(&answer, 1_000).unwrap();
        assert_eq!((p.subject.as_str(), p.claim("sub")), ("bob", None));
        answer["idtyp"] = json!("app");
        assert_eq!(check(&answer, 1_000).unwrap().claim("sub"), None);
        // `idtyp` is never a custom claim.
        assert!(check(&answer, 1_000).unwrap().claims.is_empty());
        answer["idtyp"] = json!("user");
        assert_eq!(
            check(&answer, 1_000).unwrap().claim("sub"),
            Some(json!("bob"))
        );
    }

    #[test]
    fn inactive_refresh_expired_and_foreign_tokens_are_refused() {
        assert!(check(&json!({"active": false}), 1_000).is_err());
        let mut refresh = active();
        refresh["token_type"] = json!("refresh_token");
        assert!(check(&refresh, 1_000).is_err());
        assert!(check(&active(), 2_000).is_err(), "expired");
        let mut foreign = active();
        foreign["aud"] = json!("https://reports.example");
        assert!(check(&foreign, 1_000).is_err());
        // With a configured audience, that one is required instead.
        let with =
            |a: &Value| Principal::of_introspection(a, 1_000, Some("https://reports.example"));
        assert!(with(&foreign).is_ok());
        assert!(matches!(
            with(&active()),
            Err(crate::Error::InvalidToken(_))
        ));
    }

    fn alice() -> UserRecord {
        let mut claims = Claims::new();
        claims.insert("org".into(), json!("acme"));
        UserRecord {
            username: "alice".into(),
            password_hash: "h".into(),
            scopes: vec!["read".into(), "write".into()],
            claims,
            created_at: 0,
            updated_at: 0,
        }
    }

    /// The callers HTTP Basic and OAuth 1.0 make: who `$sub`, `$client_id`
    /// and the custom claims are for row policies.
    #[test]
    fn basic_and_oauth1_callers() {
        let basic = Principal::of_basic_user(alice());
        assert_eq!(basic.scheme, AuthScheme::Basic);
        assert_eq!(basic.claim("sub"), Some(json!("alice")));
        assert_eq!(basic.claim("client_id"), None);
        assert_eq!(basic.claim("org"), Some(json!("acme")));
        assert_eq!(basic.expires_at, None);
        assert!(basic.scopes.contains("write"));

        let consumer = Principal::of_oauth1_consumer(
            "printer".into(),
            Scopes::from_list(&["read".to_string()]),
        );
        assert_eq!(consumer.scheme, AuthScheme::OAuth1);
        assert_eq!(consumer.subject_kind, Some(IdentityKind::Consumer));
        // A consumer acting for itself has no `$sub`.
        assert_eq!(consumer.claim("sub"), None);
        assert_eq!(consumer.claim("client_id"), Some(json!("printer")));
        assert!(consumer.claims.is_empty());

        let user = Principal::of_oauth1_user(
            alice(),
            "printer".into(),
            Scopes::from_list(&["read".to_string()]),
            99,
        );
        assert_eq!(user.claim("sub"), Some(json!("alice")));
        assert_eq!(user.claim("client_id"), Some(json!("printer")));
        assert_eq!(user.claim("org"), Some(json!("acme")));
        assert_eq!(user.expires_at, Some(99));
        assert_eq!(user.scopes.len(), 1);
    }
}
