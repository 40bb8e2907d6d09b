//! Unit tests of the authorization logic, with a manual clock (no sleeping)
//! and seeded randomness.

use std::sync::Arc;

use serde_json::Value;

use crate::*;

const ISSUER: &str = "http://gatehouse.test";
const T0: i64 = 1_800_000_000;

struct Fixture {
    server: Arc<AuthServer>,
    clock: Arc<ManualClock>,
    repo: Arc<MemoryRepo>,
    app: ClientRecord,
    exchanger: ClientRecord,
    plain: ClientRecord,
}

/// The binary's default cache settings, so every test below also shows the
/// caches invisible to changes made through the same server.
fn config() -> AuthConfig {
    let mut c = AuthConfig::new(ISSUER);
    c.client_cache_ttl = 5;
    c.token_status_cache_ttl = 2;
    c
}

async fn fixture_with(config: AuthConfig) -> Fixture {
    let clock = Arc::new(ManualClock::at_secs(T0));
    let repo = Arc::new(MemoryRepo::new());
    let random = Arc::new(SeededRandom::new(42));
    let server = AuthServer::start(config, repo.clone(), clock.clone(), random, "s3cret")
        .await
        .unwrap();
    let admin = server.admin();
    let all = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "app".into(),
                grants: all(&["password", "client_credentials", "refresh_token"]),
                scopes: all(&["read", "write", "offline_access"]),
                audiences: vec![],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "exchanger".into(),
                grants: all(&["client_credentials", "token-exchange"]),
                scopes: all(&["read"]),
                audiences: all(&["https://reports.example"]),
                ..Default::default()
            },
            "ex-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "plain".into(),
                grants: all(&["client_credentials"]),
                scopes: all(&["read"]),
                audiences: all(&["https://reports.example"]),
                ..Default::default()
            },
            "plain-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user(
            "alice",
            "alice-pw",
            &all(&["read", "write", "offline_access"]),
        )
        .await
        .unwrap();
    admin
        .bootstrap_user("bob", "bob-pw", &all(&["read"]))
        .await
        .unwrap();
    let get = |id: &'static str| {
        let server = server.clone();
        async move { server.repo().get_client(id).await.unwrap().unwrap() }
    };
    Fixture {
        app: get("app").await,
        exchanger: get("exchanger").await,
        plain: get("plain").await,
        server,
        clock,
        repo,
    }
}

async fn fixture() -> Fixture {
    fixture_with(config()).await
}

impl Fixture {
    async fn alice(&self, scope: Option<&str>) -> TokenResponse {
        self.server
            .password_grant(
                &self.app,
                Some("alice"),
                Some("alice-pw"),
                scope,
                true,
                None,
            )
            .await
            .unwrap()
    }

    /// Alice's password grant through `client` (no refresh token).
    async fn alice_via(&self, client: &ClientRecord, scope: &str) -> Result<TokenResponse> {
        self.server
            .password_grant(
                client,
                Some("alice"),
                Some("alice-pw"),
                Some(scope),
                false,
                None,
            )
            .await
    }

    async fn validate(&self, token: &str) -> Result<AccessClaims> {
        self.server
            .validate_access_token(token, self.clock.now())
            .await
    }

    /// Another server over the fixture's store and clock (a restart, or a
    /// second instance), with `config`, randomness `seed` and `secret`.
    async fn restart(
        &self,
        config: AuthConfig,
        seed: u64,
        secret: &str,
    ) -> Result<Arc<AuthServer>> {
        AuthServer::start(
            config,
            self.repo.clone(),
            self.clock.clone(),
            Arc::new(SeededRandom::new(seed)),
            secret,
        )
        .await
    }

    async fn exchange(&self, client: &ClientRecord, req: ExchangeRequest) -> Result<TokenResponse> {
        self.server.token_exchange(client, &req).await
    }
}

fn parts(token: &str) -> (Value, Value) {
    use base64::Engine;
    let d = |s: &str| -> Value {
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .unwrap(),
        )
        .unwrap()
    };
    let mut it = token.split('.');
    (d(it.next().unwrap()), d(it.next().unwrap()))
}

fn exch(subject: &str) -> ExchangeRequest {
    ExchangeRequest {
        subject_token: Some(subject.into()),
        subject_token_type: Some(TOKEN_TYPE_ACCESS.into()),
        ..Default::default()
    }
}

// ----- client authentication -----

#[tokio::test]
async fn client_authentication() {
    let f = fixture().await;
    assert_eq!(
        f.server
            .authenticate_client("app", "app-secret")
            .await
            .unwrap()
            .client_id,
        "app"
    );
    for (id, secret) in [("app", "wrong"), ("nobody", "app-secret"), ("app", "")] {
        let e = f.server.authenticate_client(id, secret).await.unwrap_err();
        assert_eq!(e.to_string(), "invalid_client");
    }
}

// ----- client credentials, JWT shape -----

#[tokio::test]
async fn client_credentials_issues_rfc9068_jwt() {
    let f = fixture().await;
    let r = f
        .server
        .client_credentials_grant(&f.app, None)
        .await
        .unwrap();
    assert_eq!(r.token_type, "Bearer");
    assert_eq!(r.expires_in, 3600);
    // No scope asked: everything but offline_access.
    assert_eq!(r.scope, "read write");
    assert!(r.refresh_token.is_none(), "RFC 6749 §4.4.3");
    let (header, claims) = parts(&r.access_token);
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "EdDSA");
    assert!(header["kid"].is_string());
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["sub"], "app");
    assert_eq!(claims["aud"], ISSUER);
    assert_eq!(claims["client_id"], "app");
    assert_eq!(claims["scope"], "read write");
    assert_eq!(claims["iat"], T0);
    assert_eq!(claims["exp"], T0 + 3600);
    assert!(claims["jti"].is_string());
    assert!(claims.get("act").is_none());
    let c = f.validate(&r.access_token).await.unwrap();
    assert_eq!(c.sub, "app");
}

#[tokio::test]
async fn tokens_verify_with_an_independent_jwt_library_via_the_jwks() {
    for alg in [SigningAlg::EdDsa, SigningAlg::Es256, SigningAlg::Rs256] {
        let mut cfg = config();
        cfg.signing_alg = alg;
        let f = fixture_with(cfg).await;
        let r = f
            .server
            .client_credentials_grant(&f.app, Some("read"))
            .await
            .unwrap();
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(f.server.jwks()).unwrap();
        let header = jsonwebtoken::decode_header(&r.access_token).unwrap();
        assert_eq!(header.typ.as_deref(), Some("at+jwt"));
        let jwk = jwks.find(header.kid.as_deref().unwrap()).unwrap();
        let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
        let mut v = jsonwebtoken::Validation::new(header.alg);
        v.set_audience(&[ISSUER]);
        v.set_issuer(&[ISSUER]);
        // The fixture's clock is in the future of the real one.
        v.validate_exp = false;
        let data = jsonwebtoken::decode::<Value>(&r.access_token, &key, &v)
            .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
        assert_eq!(data.claims["scope"], "read");
    }
}

#[tokio::test]
async fn unauthorized_client_for_grants_it_lacks() {
    let f = fixture().await;
    let e = f
        .server
        .password_grant(&f.plain, Some("alice"), Some("alice-pw"), None, true, None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "unauthorized_client");
    let e = f
        .server
        .refresh_grant(&f.plain, Some("x"), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "unauthorized_client");
    let e = f.exchange(&f.app, exch("x")).await.unwrap_err();
    assert_eq!(e.to_string(), "unauthorized_client");
}

// ----- scope rules -----

#[tokio::test]
async fn scope_rules() {
    let f = fixture().await;
    // Client ∩ user, offline_access only when asked.
    let r = f.alice(None).await;
    assert_eq!(r.scope, "read write");
    assert_eq!(r.expires_in, 3600);
    let r = f.alice(Some("read offline_access")).await;
    assert_eq!(r.scope, "offline_access read");
    assert_eq!(r.expires_in, 30 * 86400, "offline_access lives longer");
    let r = f
        .server
        .password_grant(&f.app, Some("bob"), Some("bob-pw"), None, true, None)
        .await
        .unwrap();
    assert_eq!(r.scope, "read", "bob may only grant read");
    // RFC 6749 §3.3: the password grant narrows to requested ∩ user's ∩
    // client's, and refuses only when that is empty.
    for asked in ["read write", "read admin"] {
        let r = f
            .server
            .password_grant(&f.app, Some("bob"), Some("bob-pw"), Some(asked), true, None)
            .await
            .unwrap();
        assert_eq!(r.scope, "read", "{asked:?}: bob may only grant read");
    }
    let mut narrow = f.app.clone();
    narrow.scopes = vec!["read".into(), "offline_access".into()];
    let r = f
        .server
        .password_grant(
            &narrow,
            Some("alice"),
            Some("alice-pw"),
            Some("read write offline_access"),
            true,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        r.scope, "offline_access read",
        "the client may not grant write"
    );
    for bad in ["write", "admin write", "read\u{7f}"] {
        let e = f
            .server
            .password_grant(&f.app, Some("bob"), Some("bob-pw"), Some(bad), true, None)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_scope", "{bad:?}");
    }
    let e = f
        .server
        .client_credentials_grant(&f.plain, Some("write"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_scope");
    // An empty scope parameter counts as omitted (RFC 6749 §3.1).
    let r = f
        .server
        .client_credentials_grant(&f.plain, Some(""))
        .await
        .unwrap();
    assert_eq!(r.scope, "read");
}

// ----- password grant -----

#[tokio::test]
async fn password_grant_success_and_failures() {
    let f = fixture().await;
    let r = f.alice(Some("read")).await;
    assert!(r.refresh_token.is_some());
    let c = f.validate(&r.access_token).await.unwrap();
    assert_eq!(c.sub, "alice");
    assert_eq!(c.client_id, "app");

    // /oauth/access_token never issues a refresh token.
    let r = f
        .server
        .password_grant(&f.app, Some("alice"), Some("alice-pw"), None, false, None)
        .await
        .unwrap();
    assert!(r.refresh_token.is_none());

    for (u, p) in [("alice", "nope"), ("mallory", "alice-pw")] {
        let e = f
            .server
            .password_grant(&f.app, Some(u), Some(p), None, true, None)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_grant");
        assert!(!e.description().contains(p));
    }
    for (u, p) in [
        (None, Some("x")),
        (Some("alice"), None),
        (Some(""), Some("x")),
    ] {
        let e = f
            .server
            .password_grant(&f.app, u, p, None, true, None)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_request");
    }
}

// ----- expiry without sleeping -----

#[tokio::test]
async fn access_token_expires_at_exp() {
    let f = fixture().await;
    let r = f.alice(None).await;
    f.clock.advance_secs(3599);
    assert!(f.validate(&r.access_token).await.is_ok());
    f.clock.advance_secs(1);
    let e = f.validate(&r.access_token).await.unwrap_err();
    assert_eq!(e.to_string(), "invalid_token");
    let intro = f.server.introspect(&f.app, &r.access_token).await.unwrap();
    assert_eq!(intro, serde_json::json!({"active": false}));
}

#[tokio::test]
async fn refresh_token_expires() {
    let f = fixture().await;
    let r = f.alice(None).await;
    f.clock.advance_secs(30 * 86400);
    let e = f
        .server
        .refresh_grant(&f.app, r.refresh_token.as_deref(), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
}

// ----- refresh rotation and reuse -----

#[tokio::test]
async fn refresh_rotates_and_reuse_revokes_the_family() {
    let f = fixture().await;
    let first = f.alice(Some("read write")).await;
    let rt1 = first.refresh_token.clone().unwrap();
    f.clock.advance_secs(10);
    let second = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap();
    let rt2 = second.refresh_token.clone().unwrap();
    assert_ne!(rt1, rt2);
    assert_eq!(second.scope, "read write");
    assert!(f.validate(&second.access_token).await.is_ok());

    // Narrowing on refresh is fine; widening is not.
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt2), Some("read offline_access"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_scope");

    // Another client cannot use it (RFC 6749 §6).
    let mut other = f.app.clone();
    other.client_id = "other".into();
    let e = f
        .server
        .refresh_grant(&other, Some(&rt2), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");

    // Reuse of the spent rt1: refused, and everything in the family dies.
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    assert!(f.validate(&first.access_token).await.is_err());
    assert!(f.validate(&second.access_token).await.is_err());
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt2), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
}

#[tokio::test]
async fn grace_period_allows_the_immediate_predecessor_only() {
    let mut cfg = config();
    cfg.refresh_reuse_grace = 30;
    let f = fixture_with(cfg).await;
    let rt1 = f.alice(None).await.refresh_token.unwrap();
    let r2 = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap();
    let rt2 = r2.refresh_token.unwrap();
    f.clock.advance_secs(20);
    // Within the grace: rt1 works again, its lost successor rt2 is replaced.
    let r3 = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap();
    let rt3 = r3.refresh_token.unwrap();
    assert!(f.validate(&r3.access_token).await.is_ok());
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt2), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    // A second retry within the grace also works, replacing rt3.
    let r4 = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap();
    assert!(f.validate(&r4.access_token).await.is_ok());
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt3), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    // Presenting a replaced (revoked) successor is not a reuse: the live
    // token r4 still rotates.
    let r5 = f
        .server
        .refresh_grant(&f.app, r4.refresh_token.as_deref(), None)
        .await
        .unwrap();
    assert!(f.validate(&r5.access_token).await.is_ok());

    // Outside the grace: reuse revokes the family.
    let f = fixture_with({
        let mut c = config();
        c.refresh_reuse_grace = 30;
        c
    })
    .await;
    let rt1 = f.alice(None).await.refresh_token.unwrap();
    let r2 = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap();
    f.clock.advance_secs(31);
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    assert!(f.validate(&r2.access_token).await.is_err());
    let e = f
        .server
        .refresh_grant(&f.app, r2.refresh_token.as_deref(), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");

    // Not the immediate predecessor: a grandparent is refused even in the grace.
    let f = fixture_with({
        let mut c = config();
        c.refresh_reuse_grace = 30;
        c
    })
    .await;
    let rt1 = f.alice(None).await.refresh_token.unwrap();
    let rt2 = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap()
        .refresh_token
        .unwrap();
    let r3 = f
        .server
        .refresh_grant(&f.app, Some(&rt2), None)
        .await
        .unwrap();
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt1), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    assert!(f.validate(&r3.access_token).await.is_err());
}

#[tokio::test]
async fn removing_a_client_or_user_revokes_their_tokens() {
    let f = fixture().await;
    let cc = f
        .server
        .client_credentials_grant(&f.plain, None)
        .await
        .unwrap();
    let other = f
        .server
        .client_credentials_grant(&f.app, None)
        .await
        .unwrap();
    f.server.admin().remove_client("plain").await.unwrap();
    assert!(f.validate(&cc.access_token).await.is_err());
    assert!(f.validate(&other.access_token).await.is_ok());

    let r = f.alice(None).await;
    let rt = r.refresh_token.unwrap();
    f.server.admin().remove_user("alice").await.unwrap();
    assert!(f.validate(&r.access_token).await.is_err());
    let e = f
        .server
        .refresh_grant(&f.app, Some(&rt), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
}

// ----- caches -----

/// Another process (the CLI) or instance changing clients behind the
/// server's back: seen within `client_cache_ttl`; this server's own admin
/// changes at once; with a TTL of 0, every request reads the store.
#[tokio::test]
async fn client_cache_is_bounded_by_its_ttl() {
    let f = fixture().await;
    let elsewhere = Admin::new(
        f.repo.clone(),
        f.clock.clone(),
        Arc::new(SeededRandom::new(7)),
    );
    f.server
        .authenticate_client("plain", "plain-secret")
        .await
        .unwrap();
    // An id never seen is cached as absent too, for the same timing.
    assert!(f.server.authenticate_client("late", "x").await.is_err());

    elsewhere.rotate_client_secret("plain").await.unwrap();
    f.clock.advance_secs(4);
    f.server
        .authenticate_client("plain", "plain-secret")
        .await
        .expect("still cached");
    assert!(
        f.server
            .authenticate_client("plain", "wrong")
            .await
            .is_err(),
        "the secret is checked on every call"
    );
    f.clock.advance_secs(1);
    let e = f
        .server
        .authenticate_client("plain", "plain-secret")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_client", "after the TTL");

    // This server's own admin: at once.
    let fresh = f.server.admin().rotate_client_secret("app").await.unwrap();
    assert!(
        f.server
            .authenticate_client("app", "app-secret")
            .await
            .is_err()
    );
    f.server.authenticate_client("app", &fresh.0).await.unwrap();
    f.server.admin().remove_client("app").await.unwrap();
    assert!(f.server.authenticate_client("app", &fresh.0).await.is_err());

    // TTL 0: nothing cached.
    let mut c = config();
    c.client_cache_ttl = 0;
    let g = fixture_with(c).await;
    let elsewhere = Admin::new(
        g.repo.clone(),
        g.clock.clone(),
        Arc::new(SeededRandom::new(7)),
    );
    g.server
        .authenticate_client("plain", "plain-secret")
        .await
        .unwrap();
    elsewhere.rotate_client_secret("plain").await.unwrap();
    assert!(
        g.server
            .authenticate_client("plain", "plain-secret")
            .await
            .is_err()
    );
}

/// A revocation written by another instance (straight into the shared
/// store) is honoured within `token_status_cache_ttl`; one made through this
/// server at once; with a TTL of 0 at once everywhere.
#[tokio::test]
async fn token_status_cache_is_bounded_by_its_ttl() {
    let f = fixture().await;
    let t = f
        .server
        .client_credentials_grant(&f.plain, None)
        .await
        .unwrap();
    let claims = f.validate(&t.access_token).await.unwrap();
    f.repo.revoke_token(&claims.jti).await.unwrap();
    f.clock.advance_secs(1);
    f.validate(&t.access_token).await.expect("within the TTL");
    let active = f
        .server
        .introspect(&f.plain, &t.access_token)
        .await
        .unwrap();
    assert_eq!(active["active"], true);
    f.clock.advance_secs(1);
    assert!(f.validate(&t.access_token).await.is_err(), "after the TTL");
    let inactive = f
        .server
        .introspect(&f.plain, &t.access_token)
        .await
        .unwrap();
    assert_eq!(inactive["active"], false);

    // Through this server: at once, for a token whose status is cached.
    let u = f
        .server
        .client_credentials_grant(&f.plain, None)
        .await
        .unwrap();
    f.validate(&u.access_token).await.unwrap();
    f.server.revoke(&f.plain, &u.access_token).await.unwrap();
    assert!(f.validate(&u.access_token).await.is_err());

    // A refresh-token family revoked here takes its cached access tokens.
    let r = f.alice(None).await;
    f.validate(&r.access_token).await.unwrap();
    f.server
        .revoke(&f.app, r.refresh_token.as_deref().unwrap())
        .await
        .unwrap();
    assert!(f.validate(&r.access_token).await.is_err());

    // Expiry is checked on every call, cached or not.
    let v = f
        .server
        .client_credentials_grant(&f.plain, None)
        .await
        .unwrap();
    f.validate(&v.access_token).await.unwrap();
    f.clock.advance_secs(3600);
    assert!(f.validate(&v.access_token).await.is_err());

    let mut c = config();
    c.token_status_cache_ttl = 0;
    let g = fixture_with(c).await;
    let t = g
        .server
        .client_credentials_grant(&g.plain, None)
        .await
        .unwrap();
    let claims = g.validate(&t.access_token).await.unwrap();
    g.repo.revoke_token(&claims.jti).await.unwrap();
    assert!(g.validate(&t.access_token).await.is_err());
}

// ----- token exchange -----

#[tokio::test]
async fn token_exchange_success() {
    let f = fixture().await;
    let subject = f.alice(Some("read write")).await;
    f.clock.advance_secs(100);
    let r = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                scope: Some("read".into()),
                audience: vec!["https://reports.example".into()],
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    assert_eq!(r.issued_token_type, Some(TOKEN_TYPE_ACCESS));
    assert!(r.refresh_token.is_none());
    assert_eq!(r.scope, "read");
    // Never outlives the subject token (issued 100 s earlier, 1 h lifetime).
    assert_eq!(r.expires_in, 3500);
    let (_, claims) = parts(&r.access_token);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["client_id"], "exchanger");
    assert_eq!(claims["act"], serde_json::json!({"sub": "exchanger"}));
    assert_eq!(claims["aud"], "https://reports.example");
    assert_eq!(claims["exp"], T0 + 3600);
    // Not for this API: the resource server refuses it.
    let e = f.validate(&r.access_token).await.unwrap_err();
    assert_eq!(e.to_string(), "invalid_token");
    // But introspection shows it active with its act.
    let i = f.server.introspect(&f.app, &r.access_token).await.unwrap();
    assert_eq!(i["active"], true);
    assert_eq!(i["act"]["sub"], "exchanger");
    assert_eq!(i["username"], "alice");

    // Without audience: the API's own audience; requested jwt is honoured;
    // a second exchange nests the earlier actor.
    let r2 = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                requested_token_type: Some(TOKEN_TYPE_JWT.into()),
                resource: vec![ISSUER.into()],
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    assert_eq!(r2.issued_token_type, Some(TOKEN_TYPE_JWT));
    assert_eq!(
        r2.scope, "read",
        "no scope: the subject's within the exchanging client's"
    );
    let c = f.validate(&r2.access_token).await.unwrap();
    assert_eq!(c.aud.0, vec![ISSUER.to_string()]);
    let r3 = f
        .exchange(&f.exchanger, exch(&r2.access_token))
        .await
        .unwrap();
    let (_, claims) = parts(&r3.access_token);
    assert_eq!(
        claims["act"],
        serde_json::json!({"sub": "exchanger", "act": {"sub": "exchanger"}})
    );

    // An actor token.
    let r4 = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                actor_token: Some(r2.access_token.clone()),
                actor_token_type: Some(TOKEN_TYPE_ACCESS.into()),
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    let (_, claims) = parts(&r4.access_token);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(r4.expires_in, 3500);
}

/// A client that may both refresh and exchange (for refresh tokens as
/// exchange subjects: only their own).
async fn refreshing_exchanger(f: &Fixture) -> ClientRecord {
    let all = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    f.server
        .admin()
        .bootstrap_client(
            &NewClient {
                client_id: "both".into(),
                grants: all(&["password", "refresh_token", "token-exchange"]),
                scopes: all(&["read", "write", "offline_access"]),
                audiences: all(&["https://reports.example"]),
                ..Default::default()
            },
            "both-secret",
        )
        .await
        .unwrap();
    f.server.repo().get_client("both").await.unwrap().unwrap()
}

/// D6: the new token's scope is within the subject's AND the exchanging
/// client's allowed scopes; offline_access only when asked for.
#[tokio::test]
async fn exchange_scope_is_within_the_exchanging_clients_scopes() {
    let f = fixture().await;
    let subject = f.alice(Some("read write offline_access")).await;
    // No scope asked: subject ∩ client ("read" for the exchanger).
    let r = f
        .exchange(&f.exchanger, exch(&subject.access_token))
        .await
        .unwrap();
    assert_eq!(r.scope, "read");
    // Asked beyond the client's scopes (but within the subject's).
    let e = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                scope: Some("read write".into()),
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_scope");
    // offline_access: not by default, even when both allow it.
    let both = refreshing_exchanger(&f).await;
    let r = f
        .exchange(&both, exch(&subject.access_token))
        .await
        .unwrap();
    assert_eq!(r.scope, "read write");
    let r = f
        .exchange(
            &both,
            ExchangeRequest {
                scope: Some("read offline_access".into()),
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    assert_eq!(r.scope, "offline_access read");
}

/// D7: a refresh token is an exchange subject only for its own client,
/// and is spent by the exchange: presenting it again is reuse.
#[tokio::test]
async fn exchange_refresh_subject_is_bound_to_its_client_and_spent() {
    let f = fixture().await;
    // Alice's refresh token issued to "app": the exchanger may not use it.
    let foreign = f.alice(Some("read")).await;
    let e = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                subject_token: foreign.refresh_token.clone(),
                subject_token_type: Some(TOKEN_TYPE_REFRESH.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_request");
    // ... and it was not spent: its owner still refreshes with it.
    f.server
        .refresh_grant(&f.app, foreign.refresh_token.as_deref(), None)
        .await
        .unwrap();

    // Its own client may, once.
    let both = refreshing_exchanger(&f).await;
    let own = f
        .server
        .password_grant(
            &both,
            Some("alice"),
            Some("alice-pw"),
            Some("read"),
            true,
            None,
        )
        .await
        .unwrap();
    let by_refresh = ExchangeRequest {
        subject_token: own.refresh_token.clone(),
        subject_token_type: Some(TOKEN_TYPE_REFRESH.into()),
        ..Default::default()
    };
    let first = f.exchange(&both, by_refresh.clone()).await.unwrap();
    f.validate(&first.access_token).await.unwrap();
    // Spent: a second exchange, or a refresh, is reuse and revokes the family.
    let e = f.exchange(&both, by_refresh).await.unwrap_err();
    assert_eq!(e.to_string(), "invalid_request");
    assert_eq!(
        f.validate(&first.access_token)
            .await
            .unwrap_err()
            .to_string(),
        "invalid_token"
    );
    assert_eq!(
        f.validate(&own.access_token).await.unwrap_err().to_string(),
        "invalid_token"
    );
    let e = f
        .server
        .refresh_grant(&both, own.refresh_token.as_deref(), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
}

/// D8: revoking the subject (its refresh token, or the access token
/// itself) revokes what was exchanged from it, transitively.
#[tokio::test]
async fn revoking_the_subject_revokes_exchanged_tokens() {
    let f = fixture().await;
    // Refresh token revoked: the family's exchanged tokens go too.
    let pair = f.alice(Some("read")).await;
    let ex = f
        .exchange(&f.exchanger, exch(&pair.access_token))
        .await
        .unwrap();
    let ex2 = f
        .exchange(&f.exchanger, exch(&ex.access_token))
        .await
        .unwrap();
    f.validate(&ex2.access_token).await.unwrap();
    f.server
        .revoke(&f.app, pair.refresh_token.as_deref().unwrap())
        .await
        .unwrap();
    for t in [&ex.access_token, &ex2.access_token] {
        assert_eq!(
            f.validate(t).await.unwrap_err().to_string(),
            "invalid_token"
        );
    }

    // Access token revoked: its exchanged descendants go, its family's
    // refresh token stays.
    let pair = f.alice(Some("read")).await;
    let ex = f
        .exchange(&f.exchanger, exch(&pair.access_token))
        .await
        .unwrap();
    let ex2 = f
        .exchange(&f.exchanger, exch(&ex.access_token))
        .await
        .unwrap();
    let sibling = f
        .exchange(
            &f.exchanger,
            exch(&f.alice(Some("read")).await.access_token),
        )
        .await
        .unwrap();
    f.server.revoke(&f.app, &pair.access_token).await.unwrap();
    for t in [&pair.access_token, &ex.access_token, &ex2.access_token] {
        assert_eq!(
            f.validate(t).await.unwrap_err().to_string(),
            "invalid_token"
        );
    }
    f.validate(&sibling.access_token).await.unwrap();
    f.server
        .refresh_grant(&f.app, pair.refresh_token.as_deref(), None)
        .await
        .unwrap();

    // An exchanged token revoked by its own client: only it and below.
    let pair = f.alice(Some("read")).await;
    let ex = f
        .exchange(&f.exchanger, exch(&pair.access_token))
        .await
        .unwrap();
    let ex2 = f
        .exchange(&f.exchanger, exch(&ex.access_token))
        .await
        .unwrap();
    f.server
        .revoke(&f.exchanger, &ex.access_token)
        .await
        .unwrap();
    assert!(f.validate(&ex2.access_token).await.is_err());
    f.validate(&pair.access_token).await.unwrap();
}

/// D9: an audience restriction is never widened by an exchange.
#[tokio::test]
async fn exchange_never_widens_the_subjects_audience() {
    let f = fixture().await;
    let subject = f.alice(Some("read")).await;
    let reports = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                audience: vec!["https://reports.example".into()],
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    // Without audience: keeps the subject's, not the API's.
    let again = f
        .exchange(&f.exchanger, exch(&reports.access_token))
        .await
        .unwrap();
    let (_, claims) = parts(&again.access_token);
    assert_eq!(claims["aud"], "https://reports.example");
    assert_eq!(
        f.validate(&again.access_token)
            .await
            .unwrap_err()
            .to_string(),
        "invalid_token"
    );
    // Asking for the API (a target the client may have) is a widening.
    for field in ["audience", "resource"] {
        let mut r = exch(&reports.access_token);
        if field == "audience" {
            r.audience = vec![ISSUER.into()];
        } else {
            r.resource = vec![ISSUER.into()];
        }
        let e = f.exchange(&f.exchanger, r).await.unwrap_err();
        assert_eq!(e.to_string(), "invalid_target", "{field}");
    }
    // Within the subject's audience: fine.
    f.exchange(
        &f.exchanger,
        ExchangeRequest {
            audience: vec!["https://reports.example".into()],
            ..exch(&reports.access_token)
        },
    )
    .await
    .unwrap();
}

/// One failed-login throttle per (user, address): wrong passwords from one
/// address do not lock the user out elsewhere; the throttled address is
/// refused even with the right password.
#[tokio::test]
async fn failed_logins_are_throttled_per_user_and_address() {
    let f = fixture().await;
    let attacker: Option<std::net::IpAddr> = Some([203, 0, 113, 9].into());
    let owner: Option<std::net::IpAddr> = Some([198, 51, 100, 7].into());
    let grant = |pw: &'static str, from| {
        let f = &f;
        async move {
            f.server
                .password_grant(&f.app, Some("alice"), Some(pw), None, false, from)
                .await
        }
    };
    for _ in 0..FREE_FAILURES_PER_ACCOUNT {
        assert_eq!(
            grant("nope", attacker).await.unwrap_err().to_string(),
            "invalid_grant"
        );
    }
    assert_eq!(
        grant("nope", attacker).await.unwrap_err().to_string(),
        "invalid_grant"
    );
    // Throttled now, right password or not, with a wait.
    let e = grant("alice-pw", attacker).await.unwrap_err();
    assert_eq!(e.to_string(), "too_many_requests");
    assert_eq!(e.retry_after(), Some(1));
    // The owner elsewhere is not locked out (neither for OAuth 1.0 approval).
    grant("alice-pw", owner).await.unwrap();
    // The delay doubles with each further failure, then passes.
    f.clock.advance_secs(1);
    assert!(grant("nope", attacker).await.is_err());
    assert_eq!(
        grant("alice-pw", attacker).await.unwrap_err().retry_after(),
        Some(2)
    );
    f.clock.advance_secs(2);
    grant("alice-pw", attacker).await.unwrap();
}

/// Client authentication has one throttle whichever way the client
/// authenticates: failures of a confidential client's id named as a public
/// client (no secret) count with wrong secrets against the same (client,
/// address) pair, and once it is throttled the right secret is refused
/// too. Naming a public client proves nothing, so it never clears the pair.
#[tokio::test]
async fn client_authentication_has_one_throttle_for_every_method() {
    let f = fixture().await;
    let from: Option<std::net::IpAddr> = Some([203, 0, 113, 10].into());
    let secret = |s: &'static str| ClientProof::Secret {
        secret: s,
        as_sent: s,
    };
    for i in 0..FREE_FAILURES_PER_ACCOUNT {
        let proof = if i % 2 == 0 {
            ClientProof::Public
        } else {
            secret("wrong")
        };
        let e = f
            .server
            .authenticate_client_from("app", proof, from)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_client", "{i}");
    }
    let e = f
        .server
        .authenticate_client_from("app", ClientProof::Public, from)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_client");
    let e = f
        .server
        .authenticate_client_from("app", secret("app-secret"), from)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "too_many_requests");
    f.clock.advance_secs(60);
    // A secret sent raw (not form-encoded) is tried as sent.
    let raw = ClientProof::Secret {
        secret: "app secret",
        as_sent: "app-secret",
    };
    f.server
        .authenticate_client_from("app", raw, from)
        .await
        .unwrap();
}

/// Each refusal, and — when several faults are present at once — that the
/// earliest check in the documented order is the one reported.
#[tokio::test]
async fn token_exchange_refusals_in_order() {
    let f = fixture().await;
    let good = f.alice(Some("read")).await;
    let revoked = f.alice(Some("read")).await;
    f.server
        .revoke(&f.app, &revoked.access_token)
        .await
        .unwrap();
    let expiring = f.alice(Some("read")).await;
    let bad_scope = Some("write".to_string());
    let bad_aud = vec!["https://evil.example".to_string()];
    let bad_type = Some(TOKEN_TYPE_REFRESH.to_string());

    let all_faults = |subject: &str| ExchangeRequest {
        scope: bad_scope.clone(),
        audience: bad_aud.clone(),
        requested_token_type: bad_type.clone(),
        ..exch(subject)
    };
    let code = |r: Result<TokenResponse>| r.unwrap_err().to_string();

    // 1. Client not allowed to exchange, with every other fault present.
    assert_eq!(
        code(f.exchange(&f.plain, all_faults("garbage")).await),
        "unauthorized_client"
    );
    // 2. subject_token invalid, missing, of an unsupported type, revoked, expired.
    assert_eq!(
        code(f.exchange(&f.exchanger, all_faults("garbage")).await),
        "invalid_request"
    );
    assert_eq!(
        code(
            f.exchange(&f.exchanger, all_faults(&revoked.access_token))
                .await
        ),
        "invalid_request"
    );
    let mut r = all_faults(&good.access_token);
    r.subject_token = None;
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    let mut r = all_faults(&good.access_token);
    r.subject_token_type = None;
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    let mut r = all_faults(&good.access_token);
    r.subject_token_type = Some("urn:ietf:params:oauth:token-type:saml2".into());
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    let mut r = all_faults(&good.access_token);
    r.subject_token_type = Some(TOKEN_TYPE_REFRESH.into());
    assert_eq!(
        code(f.exchange(&f.exchanger, r).await),
        "invalid_request",
        "an access token is not a refresh token"
    );
    // 3. actor_token invalid / type without token / token without type.
    let mut r = all_faults(&good.access_token);
    r.actor_token = Some("garbage".into());
    r.actor_token_type = Some(TOKEN_TYPE_ACCESS.into());
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    let mut r = all_faults(&good.access_token);
    r.actor_token_type = Some(TOKEN_TYPE_ACCESS.into());
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    let mut r = all_faults(&good.access_token);
    r.actor_token = Some(good.access_token.clone());
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    // 4. Scope wider than the subject's.
    assert_eq!(
        code(
            f.exchange(&f.exchanger, all_faults(&good.access_token))
                .await
        ),
        "invalid_scope"
    );
    // 5. Audience / resource not among the client's targets.
    let mut r = all_faults(&good.access_token);
    r.scope = None;
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_target");
    let mut r = all_faults(&good.access_token);
    r.scope = None;
    r.audience = vec![];
    r.resource = vec!["https://evil.example/api".into()];
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_target");
    // 6. A token type that cannot be issued.
    let mut r = all_faults(&good.access_token);
    r.scope = None;
    r.audience = vec![];
    assert_eq!(code(f.exchange(&f.exchanger, r).await), "invalid_request");
    // Expired subject (checked last so the other tokens stay valid above).
    f.clock.advance_secs(3600);
    assert_eq!(
        code(f.exchange(&f.exchanger, exch(&expiring.access_token)).await),
        "invalid_request"
    );
}

// ----- validation for resource servers -----

#[tokio::test]
async fn forged_and_tampered_tokens_are_refused() {
    let f = fixture().await;
    let r = f.alice(None).await;
    let (h, rest) = r.access_token.split_once('.').unwrap();
    let (p, s) = rest.split_once('.').unwrap();
    let b64 = crate::b64;
    // Payload changed, signature kept.
    let (_, mut claims) = parts(&r.access_token);
    claims["scope"] = "read write admin".into();
    let tampered = format!("{h}.{}.{s}", b64(claims.to_string().as_bytes()));
    // alg=none.
    let (mut header, _) = parts(&r.access_token);
    header["alg"] = "none".into();
    let none = format!("{}.{p}.", b64(header.to_string().as_bytes()));
    // HS256 with the public key as secret (alg confusion).
    header["alg"] = "HS256".into();
    let hs = format!("{}.{p}.{s}", b64(header.to_string().as_bytes()));
    // Wrong typ.
    let (mut header, _) = parts(&r.access_token);
    header["typ"] = "JWT".into();
    let jwt_typ = format!("{}.{p}.{s}", b64(header.to_string().as_bytes()));
    for bad in [
        tampered.as_str(),
        none.as_str(),
        hs.as_str(),
        jwt_typ.as_str(),
        "",
        "a.b",
        "a.b.c.d",
        "....",
        &"x".repeat(20_000),
    ] {
        let e = f.validate(bad).await.unwrap_err();
        assert_eq!(e.to_string(), "invalid_token", "{bad:.40}");
    }
}

#[tokio::test]
async fn tokens_of_another_issuer_are_refused() {
    let f = fixture().await;
    let r = f.alice(None).await;
    // Same store and secret (same keys), different issuer.
    let other = AuthServer::start(
        AuthConfig::new("http://elsewhere.test"),
        f.repo.clone(),
        f.clock.clone(),
        Arc::new(SeededRandom::new(9)),
        "s3cret",
    )
    .await
    .unwrap();
    let e = other
        .validate_access_token(&r.access_token, f.clock.now())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_token");
}

// ----- introspection and revocation -----

#[tokio::test]
async fn introspection() {
    let f = fixture().await;
    let r = f.alice(Some("read offline_access")).await;
    let i = f
        .server
        .introspect(&f.exchanger, &r.access_token)
        .await
        .unwrap();
    assert_eq!(i["active"], true);
    assert_eq!(i["scope"], "offline_access read");
    assert_eq!(i["client_id"], "app");
    assert_eq!(i["username"], "alice");
    assert_eq!(i["sub"], "alice");
    assert_eq!(i["token_type"], "Bearer");
    assert_eq!(i["exp"], T0 + 30 * 86400);
    assert_eq!(i["iss"], ISSUER);

    let rt = r.refresh_token.unwrap();
    let i = f.server.introspect(&f.app, &rt).await.unwrap();
    assert_eq!(i["active"], true);
    assert_eq!(i["token_type"], "refresh_token");
    // Another client does not learn about someone else's refresh token.
    let i = f.server.introspect(&f.exchanger, &rt).await.unwrap();
    assert_eq!(i, serde_json::json!({"active": false}));

    for junk in ["", "nope", "a.b.c", &"z".repeat(100_000)] {
        let i = f.server.introspect(&f.app, junk).await.unwrap();
        assert_eq!(i, serde_json::json!({"active": false}));
    }
    // A spent refresh token is inactive.
    f.server
        .refresh_grant(&f.app, Some(&rt), None)
        .await
        .unwrap();
    let i = f.server.introspect(&f.app, &rt).await.unwrap();
    assert_eq!(i, serde_json::json!({"active": false}));
}

#[tokio::test]
async fn access_principal_matches_the_claims_and_follows_revocation() {
    let f = fixture().await;
    let r = f.alice(Some("read write")).await;
    let claims = f.validate(&r.access_token).await.unwrap();
    // Twice: the second answer comes from the verified-token cache.
    for _ in 0..2 {
        let p = f
            .server
            .access_principal(&r.access_token, f.clock.now())
            .await
            .unwrap();
        assert_eq!(p.subject, claims.sub);
        assert_eq!(p.client_id.as_deref(), Some(claims.client_id.as_str()));
        assert_eq!(p.token_id.as_deref(), Some(claims.jti.as_str()));
        assert_eq!(p.expires_at, Some(claims.exp));
        assert_eq!(p.scheme, AuthScheme::Bearer);
        let scopes: Vec<&str> = p.scopes.iter().map(String::as_str).collect();
        assert_eq!(scopes, ["read", "write"]);
    }
    f.server.revoke(&f.app, &r.access_token).await.unwrap();
    let e = f
        .server
        .access_principal(&r.access_token, f.clock.now())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_token");
}

#[tokio::test]
async fn revocation() {
    let f = fixture().await;
    let a = f.alice(None).await;
    let b = f.alice(None).await;
    // Access token: just that one.
    f.server.revoke(&f.app, &a.access_token).await.unwrap();
    assert!(f.validate(&a.access_token).await.is_err());
    assert_eq!(
        f.server.introspect(&f.app, &a.access_token).await.unwrap()["active"],
        false
    );
    assert!(f.validate(&b.access_token).await.is_ok());
    // The refresh token of `a` still works.
    let a2 = f
        .server
        .refresh_grant(&f.app, a.refresh_token.as_deref(), None)
        .await
        .unwrap();
    // Revoking a refresh token takes the family's access tokens with it.
    f.server
        .revoke(&f.app, a2.refresh_token.as_deref().unwrap())
        .await
        .unwrap();
    assert!(f.validate(&a2.access_token).await.is_err());
    let e = f
        .server
        .refresh_grant(&f.app, a2.refresh_token.as_deref(), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid_grant");
    assert!(
        f.validate(&b.access_token).await.is_ok(),
        "other families live"
    );
    // Unknown tokens: success, nothing happens (RFC 7009 §2.2).
    f.server.revoke(&f.app, "unknown").await.unwrap();
    f.server.revoke(&f.app, "x.y.z").await.unwrap();
    // Another client's token: refused.
    let e = f
        .server
        .revoke(&f.exchanger, &b.access_token)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "unauthorized_client");
    let e = f
        .server
        .revoke(&f.exchanger, b.refresh_token.as_deref().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "unauthorized_client");
    assert!(f.validate(&b.access_token).await.is_ok());
}

// ----- keys -----

/// The kids of the JWKS, in its order.
fn jwks_kids(server: &AuthServer) -> Vec<String> {
    server.jwks()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string())
        .collect()
}

/// The current key of `alg`, as the JWKS publishes it.
fn current_kid(server: &AuthServer, alg: SigningAlg) -> String {
    server.signer(alg).unwrap().kid().to_string()
}

#[tokio::test]
async fn key_rotation_keeps_old_tokens_valid_until_they_expire() {
    let f = fixture().await;
    let old = f.alice(Some("read offline_access")).await;
    let old_kid = parts(&old.access_token).0["kid"]
        .as_str()
        .unwrap()
        .to_string();
    let rs_kid = current_kid(&f.server, SigningAlg::Rs256);
    let es_kid = current_kid(&f.server, SigningAlg::Es256);
    f.clock.advance_secs(60);
    let new_kid = f
        .server
        .rotate_signing_key(SigningAlg::EdDsa)
        .await
        .unwrap();
    assert_ne!(old_kid, new_kid);
    let fresh = f.alice(None).await;
    assert_eq!(parts(&fresh.access_token).0["kid"], new_kid.as_str());
    // Both published, the current keys first (RS256, EdDSA, ES256), the
    // retired one last; the keys of the other algorithms did not move.
    assert_eq!(
        jwks_kids(&f.server),
        vec![
            rs_kid.clone(),
            new_kid.clone(),
            es_kid.clone(),
            old_kid.clone()
        ]
    );
    assert!(f.validate(&old.access_token).await.is_ok());
    // The old token lives its whole life (issued at T0, 30 days).
    f.clock.set_secs(T0 + 30 * 86400 - 1);
    assert!(f.validate(&old.access_token).await.is_ok());
    // The old key stays published for the longest lifetime after the
    // rotation (T0 + 60), then disappears.
    f.clock.set_secs(T0 + 60 + 30 * 86400 - 1);
    assert_eq!(jwks_kids(&f.server).len(), 4);
    f.clock.set_secs(T0 + 60 + 30 * 86400);
    assert_eq!(jwks_kids(&f.server), vec![rs_kid, new_kid, es_kid]);
    f.server.purge_expired().await.unwrap();
    assert_eq!(f.repo.load_keys().await.unwrap().len(), 3);
}

#[tokio::test]
async fn the_rsa_key_rotates_like_the_others() {
    let f = fixture().await;
    f.server
        .admin()
        .bootstrap_client(
            &NewClient {
                client_id: "rp".into(),
                grants: vec!["password".into()],
                scopes: vec!["read".into(), "openid".into()],
                ..Default::default()
            },
            "rp-secret",
        )
        .await
        .unwrap();
    let rp = f.repo.get_client("rp").await.unwrap().unwrap();
    let sign_in = || f.alice_via(&rp, "openid read");
    let ed_kid = current_kid(&f.server, SigningAlg::EdDsa);
    let old_rs = current_kid(&f.server, SigningAlg::Rs256);
    let before = sign_in().await.unwrap();
    let id_token = before.id_token.unwrap();
    assert_eq!(parts(&id_token).0["kid"], old_rs.as_str());
    f.clock.advance_secs(60);
    let new_rs = f
        .server
        .rotate_signing_key(SigningAlg::Rs256)
        .await
        .unwrap();
    assert_ne!(old_rs, new_rs);
    // Access tokens keep their key; new ID tokens take the new RSA key,
    // and the old one stays published for the tokens it signed.
    let after = sign_in().await.unwrap();
    assert_eq!(parts(&after.access_token).0["kid"], ed_kid.as_str());
    assert_eq!(parts(&after.id_token.unwrap()).0["kid"], new_rs.as_str());
    let kids = jwks_kids(&f.server);
    assert_eq!(kids.first(), Some(&new_rs));
    assert!(kids.contains(&old_rs), "{kids:?}");
    assert!(f.validate(&before.access_token).await.is_ok());
    // A restart past the maximum age rotates every algorithm's key.
    f.clock.advance_secs(90 * 86400);
    let restarted = f.restart(config(), 9, "s3cret").await.unwrap();
    for (alg, was) in [(SigningAlg::Rs256, &new_rs), (SigningAlg::EdDsa, &ed_kid)] {
        assert_ne!(&current_kid(&restarted, alg), was, "{alg:?}");
    }
}

#[tokio::test]
async fn restart_keeps_tokens_valid_and_alg_change_switches_keys() {
    let f = fixture().await;
    let r = f.alice(None).await;
    let restarted = f.restart(config(), 7, "s3cret").await.unwrap();
    assert!(
        restarted
            .validate_access_token(&r.access_token, f.clock.now())
            .await
            .is_ok()
    );
    assert_eq!(
        f.repo.load_keys().await.unwrap().len(),
        SigningAlg::ALL.len(),
        "one key per algorithm, no new one"
    );
    // Wrong secret: refuses to start rather than sign with a new key.
    let e = f.restart(config(), 7, "other").await.unwrap_err();
    assert_eq!(e.to_string(), "server_error");
    // Algorithm change: access tokens are signed by the ES256 key the
    // server already keeps; the EdDSA one still verifies.
    let mut cfg = config();
    cfg.signing_alg = SigningAlg::Es256;
    let es = f.restart(cfg, 8, "s3cret").await.unwrap();
    assert!(
        es.validate_access_token(&r.access_token, f.clock.now())
            .await
            .is_ok()
    );
    let t = es.client_credentials_grant(&f.app, None).await.unwrap();
    assert_eq!(parts(&t.access_token).0["alg"], "ES256");
    assert_eq!(
        parts(&t.access_token).0["kid"],
        current_kid(&f.server, SigningAlg::Es256).as_str()
    );
    assert!(f.validate(&t.access_token).await.is_ok());
    assert_eq!(
        f.repo.load_keys().await.unwrap().len(),
        SigningAlg::ALL.len()
    );
}

/// A database whose only key is the EdDSA one of a server that kept a key
/// for access tokens alone gains the others at the next start, and keeps
/// its key (the tokens it signed stay valid).
#[tokio::test]
async fn a_database_with_one_key_gains_one_per_algorithm() {
    let clock = Arc::new(ManualClock::at_secs(T0));
    let repo = Arc::new(MemoryRepo::new());
    let cipher = KeyCipher::from_secret("s3cret").unwrap();
    let old = generate_key(SigningAlg::EdDsa, &cipher, &SeededRandom::new(3), T0 - 10).unwrap();
    repo.insert_key(&old).await.unwrap();
    let server = AuthServer::start(
        config(),
        repo.clone(),
        clock.clone(),
        Arc::new(SeededRandom::new(4)),
        "s3cret",
    )
    .await
    .unwrap();
    let keys = repo.load_keys().await.unwrap();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| k.retired_at.is_none()));
    assert_eq!(current_kid(&server, SigningAlg::EdDsa), old.kid);
    let jwks = server.jwks();
    let rsa: Vec<&Value> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kty"] == "RSA")
        .collect();
    assert_eq!(rsa.len(), 1);
    assert_eq!(rsa[0]["alg"], "RS256");
    assert_eq!(rsa[0]["use"], "sig");
    assert_eq!(rsa[0]["e"], "AQAB");
    // 2048 bits: 256 bytes of modulus, 342 base64url characters.
    assert_eq!(rsa[0]["n"].as_str().unwrap().len(), 342);
    assert!(rsa[0].get("d").is_none());
}

#[tokio::test]
async fn id_tokens_are_rs256_unless_the_client_registered_another_alg() {
    for access_alg in SigningAlg::ALL {
        let mut cfg = config();
        cfg.signing_alg = access_alg;
        let f = fixture_with(cfg).await;
        let admin = f.server.admin();
        let all = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for asked in [
            None,
            Some(SigningAlg::Rs256),
            Some(SigningAlg::EdDsa),
            Some(SigningAlg::Es256),
        ] {
            let id = format!("rp-{}", asked.map_or("default", SigningAlg::as_str));
            admin
                .bootstrap_client(
                    &NewClient {
                        client_id: id.clone(),
                        grants: all(&["password"]),
                        scopes: all(&["openid", "read"]),
                        id_token_signed_response_alg: asked,
                        ..Default::default()
                    },
                    "rp-secret",
                )
                .await
                .unwrap();
            let client = f.repo.get_client(&id).await.unwrap().unwrap();
            assert_eq!(client.id_token_signed_response_alg, asked);
            let t = f.alice_via(&client, "openid read").await.unwrap();
            let want = asked.unwrap_or(SigningAlg::Rs256);
            assert_eq!(parts(&t.access_token).0["alg"], access_alg.as_str());
            let id_token = t.id_token.unwrap();
            let (header, claims) = parts(&id_token);
            assert_eq!(header["alg"], want.as_str(), "{access_alg:?} {asked:?}");
            assert_eq!(header["typ"], "JWT");
            assert_eq!(claims["aud"], id.as_str());
            // at_hash follows the ID token's algorithm, not the access token's.
            assert_eq!(
                claims["at_hash"],
                crate::oidc::token_hash(want, &t.access_token).as_str()
            );
            // Verified by an independent implementation through the JWKS.
            let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(f.server.jwks()).unwrap();
            let h = jsonwebtoken::decode_header(&id_token).unwrap();
            let key =
                jsonwebtoken::DecodingKey::from_jwk(jwks.find(h.kid.as_deref().unwrap()).unwrap())
                    .unwrap();
            let mut v = jsonwebtoken::Validation::new(h.alg);
            v.set_audience(&[id.as_str()]);
            v.set_issuer(&[ISSUER]);
            v.validate_exp = false;
            jsonwebtoken::decode::<Value>(&id_token, &key, &v)
                .unwrap_or_else(|e| panic!("{access_alg:?} {asked:?}: {e}"));
        }
    }
}

#[tokio::test]
async fn purge_removes_only_expired_records() {
    let f = fixture().await;
    let _ = f.alice(None).await;
    let _ = f.alice(Some("offline_access")).await;
    assert_eq!(f.repo.token_count(), 4);
    f.clock.advance_secs(3600);
    assert_eq!(f.server.purge_expired().await.unwrap(), 1);
    assert_eq!(f.repo.token_count(), 3);
    f.clock.advance_secs(30 * 86400);
    f.server.purge_expired().await.unwrap();
    assert_eq!(f.repo.token_count(), 0);
}

// ----- administration -----

#[tokio::test]
async fn bootstrap_is_idempotent() {
    let f = fixture().await;
    let admin = f.server.admin();
    let spec = NewClient {
        client_id: "app".into(),
        grants: vec![
            "password".into(),
            "client_credentials".into(),
            "refresh_token".into(),
        ],
        scopes: vec!["read write".into(), "offline_access".into()],
        audiences: vec![],
        ..Default::default()
    };
    assert_eq!(
        admin.bootstrap_client(&spec, "app-secret").await.unwrap(),
        BootstrapOutcome::Unchanged
    );
    assert_eq!(
        admin.bootstrap_client(&spec, "new-secret").await.unwrap(),
        BootstrapOutcome::Updated
    );
    assert!(
        f.server
            .authenticate_client("app", "app-secret")
            .await
            .is_err()
    );
    assert!(
        f.server
            .authenticate_client("app", "new-secret")
            .await
            .is_ok()
    );
    assert_eq!(
        admin.list_clients().await.unwrap().len(),
        3,
        "never duplicated"
    );
    let scopes = vec![
        "read".to_string(),
        "write".to_string(),
        "offline_access".to_string(),
    ];
    assert_eq!(
        admin
            .bootstrap_user("alice", "alice-pw", &scopes)
            .await
            .unwrap(),
        BootstrapOutcome::Unchanged
    );
    assert_eq!(
        admin
            .bootstrap_user("alice", "alice-pw", &scopes[..1])
            .await
            .unwrap(),
        BootstrapOutcome::Updated
    );
    assert_eq!(
        admin
            .bootstrap_user("carol", "carol-pw", &scopes)
            .await
            .unwrap(),
        BootstrapOutcome::Created
    );
    assert_eq!(admin.list_users().await.unwrap().len(), 3);
}

#[tokio::test]
async fn client_and_user_administration() {
    let f = fixture().await;
    let admin = f.server.admin();
    let (info, secret) = admin
        .add_client(&NewClient {
            client_id: "cli".into(),
            grants: vec!["client_credentials".into(), "token_exchange".into()],
            scopes: vec!["read".into()],
            audiences: vec!["https://reports.example".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let secret = secret.unwrap();
    assert_eq!(
        info.grants,
        vec!["client_credentials", GRANT_TOKEN_EXCHANGE]
    );
    assert_eq!(secret.0.len(), 43, "256 bits, base64url");
    assert!(!format!("{secret:?}").contains(&secret.0));
    let stored = f.repo.get_client("cli").await.unwrap().unwrap();
    assert_eq!(stored.secret_hash, hash_secret(&secret.0));
    assert!(!format!("{stored:?}").contains("secret_hash: ["));
    assert!(f.server.authenticate_client("cli", &secret.0).await.is_ok());

    let e = admin
        .add_client(&NewClient {
            client_id: "cli".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "conflict");
    for bad in [
        NewClient {
            client_id: "".into(),
            ..Default::default()
        },
        NewClient {
            client_id: "has space".into(),
            ..Default::default()
        },
        NewClient {
            client_id: "x".into(),
            grants: vec!["implicit".into()],
            ..Default::default()
        },
        // The code grant needs a redirect URI, which must be a safe one.
        NewClient {
            client_id: "x".into(),
            grants: vec!["authorization_code".into()],
            ..Default::default()
        },
        NewClient {
            client_id: "x".into(),
            grants: vec!["authorization_code".into()],
            redirect_uris: vec!["http://app.example/cb".into()],
            ..Default::default()
        },
        NewClient {
            client_id: "x".into(),
            grants: vec!["authorization_code".into()],
            redirect_uris: vec!["https://app.example/cb#x".into()],
            ..Default::default()
        },
        // A public client has no secret to rest these grants on.
        NewClient {
            client_id: "x".into(),
            grants: vec!["client_credentials".into()],
            public: true,
            ..Default::default()
        },
        NewClient {
            client_id: "x".into(),
            grants: vec!["password".into()],
            public: true,
            ..Default::default()
        },
        NewClient {
            client_id: "y".into(),
            scopes: vec!["a\"b".into()],
            ..Default::default()
        },
    ] {
        assert_eq!(
            admin.add_client(&bad).await.unwrap_err().to_string(),
            "invalid_input"
        );
    }

    let rotated = admin.rotate_client_secret("cli").await.unwrap();
    assert!(
        f.server
            .authenticate_client("cli", &secret.0)
            .await
            .is_err()
    );
    assert!(
        f.server
            .authenticate_client("cli", &rotated.0)
            .await
            .is_ok()
    );
    admin.remove_client("cli").await.unwrap();
    assert_eq!(
        admin.remove_client("cli").await.unwrap_err().to_string(),
        "not_found"
    );
    assert_eq!(
        admin
            .rotate_client_secret("cli")
            .await
            .unwrap_err()
            .to_string(),
        "not_found"
    );

    // A public client: no secret to show, none that authenticates, none
    // to rotate.
    let (info, secret) = admin
        .add_client(&NewClient {
            client_id: "spa".into(),
            grants: vec!["authorization_code".into(), "refresh_token".into()],
            redirect_uris: vec!["https://app.example/cb".into()],
            public: true,
            first_party: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(secret.is_none());
    assert!(info.public && info.first_party);
    assert_eq!(info.redirect_uris, vec!["https://app.example/cb"]);
    assert!(f.server.authenticate_client("spa", "").await.is_err());
    assert_eq!(
        admin
            .rotate_client_secret("spa")
            .await
            .unwrap_err()
            .to_string(),
        "invalid_input"
    );

    admin
        .add_user("dave", "pw1", &["read".into()])
        .await
        .unwrap();
    assert_eq!(
        admin
            .add_user("dave", "pw1", &[])
            .await
            .unwrap_err()
            .to_string(),
        "conflict"
    );
    assert_eq!(
        admin
            .add_user("erin", "", &[])
            .await
            .unwrap_err()
            .to_string(),
        "invalid_input"
    );
    admin.set_password("dave", "pw2").await.unwrap();
    let ok = f
        .server
        .password_grant(&f.app, Some("dave"), Some("pw2"), None, false, None)
        .await
        .unwrap();
    assert_eq!(ok.scope, "read");
    assert!(
        f.server
            .password_grant(&f.app, Some("dave"), Some("pw1"), None, false, None)
            .await
            .is_err()
    );
    let users = admin.list_users().await.unwrap();
    assert!(users.iter().any(|u| u.username == "dave"));
    admin.remove_user("dave").await.unwrap();
    assert_eq!(
        admin.remove_user("dave").await.unwrap_err().to_string(),
        "not_found"
    );
    assert_eq!(
        admin
            .set_password("dave", "x")
            .await
            .unwrap_err()
            .to_string(),
        "not_found"
    );
}

/// A removed user's, client's or consumer's name is never registered
/// again, by any kind (a `sub` is never reassigned), and names are
/// unique without regard to ASCII case and limited to a character set.
#[tokio::test]
async fn removed_names_stay_reserved_and_names_are_unique_without_case() {
    let f = fixture().await;
    let admin = f.server.admin();
    let conflict = |e: Error| match e {
        Error::Conflict(d) => d.to_string(),
        other => panic!("not a conflict: {other:?}"),
    };
    admin.add_user("dave", "pw", &[]).await.unwrap();
    admin.remove_user("dave").await.unwrap();
    let e = conflict(admin.add_user("dave", "pw", &[]).await.unwrap_err());
    assert!(e.contains("removed"), "{e}");
    let e = conflict(admin.add_user("DAVE", "pw", &[]).await.unwrap_err());
    assert!(e.contains("\"dave\"") && e.contains("removed"), "{e}");
    let as_client = NewClient {
        client_id: "dave".into(),
        grants: vec!["client_credentials".into()],
        ..Default::default()
    };
    conflict(admin.add_client(&as_client).await.unwrap_err());
    conflict(admin.bootstrap_user("dave", "pw", &[]).await.unwrap_err());
    // A removed client's id too.
    admin.remove_client("plain").await.unwrap();
    let e = conflict(admin.add_user("Plain", "pw", &[]).await.unwrap_err());
    assert!(e.contains("client") && e.contains("removed"), "{e}");

    // Case variants of live names, of either kind, and of the built-in
    // GraphiQL client.
    let e = conflict(admin.add_user("ALICE", "pw", &[]).await.unwrap_err());
    assert!(e.contains("\"alice\"") && e.contains("case"), "{e}");
    let e = conflict(admin.add_user("App", "pw", &[]).await.unwrap_err());
    assert!(e.contains("client") && e.contains("\"app\""), "{e}");
    let e = conflict(admin.add_user("GraphiQL", "pw", &[]).await.unwrap_err());
    assert!(e.contains("GraphiQL"), "{e}");
    let graphiql = NewClient {
        client_id: "GRAPHIQL".into(),
        grants: vec!["client_credentials".into()],
        ..Default::default()
    };
    conflict(admin.add_client(&graphiql).await.unwrap_err());
    // Bootstrap of a case variant is a conflict too, not "unchanged".
    conflict(
        admin
            .bootstrap_user("Bob", "bob-pw", &[])
            .await
            .unwrap_err(),
    );

    // The character set: no `:` (HTTP Basic), no leading `$`, no space,
    // nothing beyond ASCII.
    for bad in [
        "a:b",
        "$sub",
        "$x",
        "has space",
        "émile",
        "a/b",
        "a%2Fb",
        "",
    ] {
        let e = admin.add_user(bad, "pw", &[]).await.unwrap_err();
        match e {
            Error::InvalidInput(d) => assert!(d.contains("letters, digits"), "{bad}: {d}"),
            other => panic!("{bad}: {other:?}"),
        }
        let c = NewClient {
            client_id: bad.into(),
            grants: vec!["client_credentials".into()],
            ..Default::default()
        };
        assert_eq!(
            admin.add_client(&c).await.unwrap_err().to_string(),
            "invalid_input",
            "{bad}"
        );
    }
    for good in ["erin", "Frank.Miller", "g_h-i~j", "kim@example.com", "0"] {
        admin.add_user(good, "pw", &[]).await.unwrap();
    }

    // Names stored before the rule keep working.
    let now = f.clock.now();
    f.repo
        .upsert_user(&UserRecord {
            username: "old:name".into(),
            password_hash: hash_password("old-pw", &SeededRandom::new(1)).unwrap(),
            scopes: vec!["read".into()],
            claims: Claims::new(),
            created_at: now,
            updated_at: now,
        })
        .await
        .unwrap();
    f.server
        .password_grant(&f.app, Some("old:name"), Some("old-pw"), None, false, None)
        .await
        .unwrap();
    assert_eq!(
        admin
            .bootstrap_user("old:name", "old-pw", &["read".into()])
            .await
            .unwrap(),
        BootstrapOutcome::Unchanged
    );
}

/// OpenID Connect Core §3.1.3.3 and the contract: the password grant with
/// `openid` granted answers an `id_token` too.
#[tokio::test]
async fn the_password_grant_with_openid_returns_an_id_token() {
    let f = fixture().await;
    let admin = f.server.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "rp".into(),
                grants: vec!["password".into()],
                scopes: vec!["read".into(), "openid".into(), "profile".into()],
                ..Default::default()
            },
            "rp-secret",
        )
        .await
        .unwrap();
    let rp = f.repo.get_client("rp").await.unwrap().unwrap();
    let r = f.alice_via(&rp, "openid read").await.unwrap();
    let id = r.id_token.expect("an id_token with openid");
    let (header, claims) = parts(&id);
    // RS256 (the client registered no algorithm), though access tokens are
    // EdDSA.
    assert_eq!(header["alg"], "RS256");
    assert_eq!(
        header["kid"],
        current_kid(&f.server, SigningAlg::Rs256).as_str()
    );
    assert_eq!(parts(&r.access_token).0["alg"], "EdDSA");
    assert_eq!(claims["iss"], ISSUER);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["aud"], "rp");
    assert_eq!(claims["auth_time"], f.clock.now());
    assert_eq!(
        claims["at_hash"],
        crate::oidc::token_hash(SigningAlg::Rs256, &r.access_token)
    );
    // Without openid: none.
    let r = f
        .server
        .password_grant(
            &rp,
            Some("alice"),
            Some("alice-pw"),
            Some("read"),
            false,
            None,
        )
        .await
        .unwrap();
    assert!(r.id_token.is_none());
}

#[test]
fn error_display_is_the_wire_code() {
    let cases: Vec<(Error, &str)> = vec![
        (Error::InvalidRequest("d".into()), "invalid_request"),
        (Error::InvalidClient("d".into()), "invalid_client"),
        (Error::InvalidGrant("d".into()), "invalid_grant"),
        (Error::UnauthorizedClient("d".into()), "unauthorized_client"),
        (
            Error::UnsupportedGrantType("d".into()),
            "unsupported_grant_type",
        ),
        (Error::InvalidScope("d".into()), "invalid_scope"),
        (Error::InvalidTarget("d".into()), "invalid_target"),
        (Error::InvalidToken("d".into()), "invalid_token"),
        (Error::Server("db down at 10.0.0.1".into()), "server_error"),
    ];
    for (e, code) in cases {
        assert_eq!(e.to_string(), code);
        assert_eq!(e.code(), code);
        assert!(!e.description().contains("10.0.0.1"));
    }
}

#[test]
fn scopes_parse_and_render() {
    let s = Scopes::parse("write  read read").unwrap();
    assert_eq!(s.to_string(), "read write");
    assert!(Scopes::parse("a\\b").is_err());
    assert!(Scopes::parse("").unwrap().is_empty());
}

// ----- custom claims -----

fn claims(v: Value) -> Claims {
    v.as_object().cloned().unwrap()
}

#[tokio::test]
async fn custom_claims_ride_in_password_grant_tokens_and_principals() {
    let f = fixture().await;
    let admin = f.server.admin();
    let set = claims(serde_json::json!({"org": "acme", "level": 3, "staff": true}));
    let info = admin.set_user_claims("alice", &set).await.unwrap();
    assert_eq!(info.claims, set);
    assert_eq!(admin.get_user("alice").await.unwrap().claims, set);

    let r = f.alice(Some("read")).await;
    let (_, jwt) = parts(&r.access_token);
    assert_eq!(jwt["org"], "acme");
    assert_eq!(jwt["level"], 3);
    assert_eq!(jwt["staff"], true);
    assert_eq!(jwt["sub"], "alice");
    let c = f.validate(&r.access_token).await.unwrap();
    assert_eq!(
        c.custom, set,
        "only the custom claims, none of the registered ones"
    );

    // Twice: the second principal comes from the verified-token cache.
    for _ in 0..2 {
        let p = f
            .server
            .access_principal(&r.access_token, f.clock.now())
            .await
            .unwrap();
        assert_eq!(p.claims, set);
        assert_eq!(p.claim("org"), Some(Value::from("acme")));
        assert_eq!(p.claim("level"), Some(Value::from(3)));
        assert_eq!(p.claim("sub"), Some(Value::from("alice")));
        assert_eq!(p.claim("client_id"), Some(Value::from("app")));
        assert_eq!(p.claim("team"), None);
    }

    // Introspection repeats them at the top level.
    let i = f.server.introspect(&f.app, &r.access_token).await.unwrap();
    assert_eq!(
        (i["org"].clone(), i["staff"].clone()),
        ("acme".into(), true.into())
    );
    let i = f
        .server
        .introspect(&f.app, r.refresh_token.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(i["org"], "acme", "what a refreshed token would carry");

    // A user without claims: tokens without any.
    let bob = f
        .server
        .password_grant(&f.app, Some("bob"), Some("bob-pw"), None, false, None)
        .await
        .unwrap();
    assert!(
        f.validate(&bob.access_token)
            .await
            .unwrap()
            .custom
            .is_empty()
    );
}

#[tokio::test]
async fn refresh_reads_the_users_claims_again() {
    let f = fixture().await;
    let admin = f.server.admin();
    admin
        .set_user_claims(
            "alice",
            &claims(serde_json::json!({"org": "acme", "team": "x"})),
        )
        .await
        .unwrap();
    let first = f.alice(Some("read")).await;
    admin
        .set_user_claims("alice", &claims(serde_json::json!({"org": "globex"})))
        .await
        .unwrap();
    // The token already issued keeps what it was signed with.
    let c = f.validate(&first.access_token).await.unwrap();
    assert_eq!(c.custom["org"], "acme");
    // The next refresh carries the new set (and only it).
    let second = f
        .server
        .refresh_grant(&f.app, first.refresh_token.as_deref(), None)
        .await
        .unwrap();
    let c = f.validate(&second.access_token).await.unwrap();
    assert_eq!(c.custom, claims(serde_json::json!({"org": "globex"})));
    // Cleared: the next refresh has none.
    admin
        .set_user_claims("alice", &Claims::new())
        .await
        .unwrap();
    let third = f
        .server
        .refresh_grant(&f.app, second.refresh_token.as_deref(), None)
        .await
        .unwrap();
    assert!(
        f.validate(&third.access_token)
            .await
            .unwrap()
            .custom
            .is_empty()
    );
}

#[tokio::test]
async fn exchanged_tokens_keep_the_subjects_claims() {
    let f = fixture().await;
    let admin = f.server.admin();
    let set = claims(serde_json::json!({"org": "acme"}));
    admin.set_user_claims("alice", &set).await.unwrap();
    let subject = f.alice(Some("read")).await;
    // Changed after the subject token was issued: the exchange keeps the
    // subject token's claims, not the record's.
    admin
        .set_user_claims("alice", &claims(serde_json::json!({"org": "other"})))
        .await
        .unwrap();
    let r = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                resource: vec![ISSUER.into()],
                ..exch(&subject.access_token)
            },
        )
        .await
        .unwrap();
    let (_, jwt) = parts(&r.access_token);
    assert_eq!(jwt["org"], "acme");
    assert_eq!(jwt["act"]["sub"], "exchanger");
    let p = f
        .server
        .access_principal(&r.access_token, f.clock.now())
        .await
        .unwrap();
    assert_eq!((p.subject.as_str(), p.claims), ("alice", set));
    // And again from the exchanged token.
    let r2 = f
        .exchange(&f.exchanger, exch(&r.access_token))
        .await
        .unwrap();
    assert_eq!(parts(&r2.access_token).1["org"], "acme");

    // A refresh token as subject carries no claims of its own: the
    // exchanged token gets the user's current ones, as a refresh would.
    let both = refreshing_exchanger(&f).await;
    let issued = f
        .server
        .password_grant(
            &both,
            Some("alice"),
            Some("alice-pw"),
            Some("read"),
            true,
            None,
        )
        .await
        .unwrap();
    let r3 = f
        .exchange(
            &both,
            ExchangeRequest {
                subject_token: issued.refresh_token.clone(),
                subject_token_type: Some(TOKEN_TYPE_REFRESH.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(parts(&r3.access_token).1["org"], "other");
}

#[tokio::test]
async fn client_credentials_have_the_client_as_subject_and_no_custom_claims() {
    let f = fixture().await;
    let r = f
        .server
        .client_credentials_grant(&f.app, None)
        .await
        .unwrap();
    let (_, jwt) = parts(&r.access_token);
    let mut names: Vec<&str> = jwt
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "aud",
            "client_id",
            "exp",
            "iat",
            "idtyp",
            "iss",
            "jti",
            "scope",
            "sub"
        ]
    );
    assert_eq!(jwt["sub"], "app");
    assert_eq!(jwt["idtyp"], "app");
    let p = f
        .server
        .access_principal(&r.access_token, f.clock.now())
        .await
        .unwrap();
    assert!(p.claims.is_empty());
    assert_eq!(p.subject, "app");
    assert_eq!(p.subject_kind, Some(IdentityKind::Client));
    // A client acting for itself is no user: `$sub` is not its name.
    assert_eq!(p.claim("sub"), None);
    assert_eq!(p.claim("client_id"), Some(Value::from("app")));
    assert_eq!(p.access_context().claim("sub"), None);
}

/// A user's token says so (`idtyp: user`), through refresh and exchange;
/// a client's own token says `app`, through exchange too, and introspection
/// repeats it; a token from before `idtyp` is a user's only when its record
/// names a user.
#[tokio::test]
async fn tokens_say_which_kind_of_identity_their_subject_is() {
    let f = fixture().await;
    let user = f.alice(Some("read offline_access")).await;
    assert_eq!(parts(&user.access_token).1["idtyp"], "user");
    let p = f
        .server
        .access_principal(&user.access_token, f.clock.now())
        .await
        .unwrap();
    assert_eq!(p.subject_kind, Some(IdentityKind::User));
    assert_eq!(p.claim("sub"), Some(Value::from("alice")));
    assert_eq!(p.access_context().claim("sub"), Some(&Value::from("alice")));
    let i = f
        .server
        .introspect(&f.app, &user.access_token)
        .await
        .unwrap();
    assert_eq!(
        (i["idtyp"].clone(), i["username"].clone()),
        ("user".into(), "alice".into())
    );

    let refreshed = f
        .server
        .refresh_grant(&f.app, user.refresh_token.as_deref(), None)
        .await
        .unwrap();
    assert_eq!(parts(&refreshed.access_token).1["idtyp"], "user");

    // Exchanged by another client: still the user's.
    let exchanged = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                subject_token: Some(refreshed.access_token.clone()),
                subject_token_type: Some(TOKEN_TYPE_ACCESS.into()),
                scope: Some("read".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(parts(&exchanged.access_token).1["idtyp"], "user");

    // A client's own token, exchanged: still a client's.
    let own = f
        .server
        .client_credentials_grant(&f.exchanger, None)
        .await
        .unwrap();
    let exchanged = f
        .exchange(
            &f.exchanger,
            ExchangeRequest {
                subject_token: Some(own.access_token.clone()),
                subject_token_type: Some(TOKEN_TYPE_ACCESS.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(parts(&exchanged.access_token).1["idtyp"], "app");
    let p = f
        .server
        .access_principal(&exchanged.access_token, f.clock.now())
        .await
        .unwrap();
    assert_eq!((p.subject.as_str(), p.claim("sub")), ("exchanger", None));
    let i = f
        .server
        .introspect(&f.exchanger, &own.access_token)
        .await
        .unwrap();
    assert_eq!(i["idtyp"], "app");
    assert!(i.get("username").is_none());

    // The one conversion, for tokens without `idtyp`.
    let old = |username| {
        Principal::of_access_token(AccessTokenFacts {
            sub: Some("bob"),
            client_id: Some("bob"),
            scope: "read",
            username,
            ..Default::default()
        })
    };
    assert_eq!(old(None).claim("sub"), None);
    assert_eq!(old(Some("bob")).claim("sub"), Some(Value::from("bob")));
}

/// Users, clients and consumers share one namespace: `client add bob`
/// while user `bob` exists is refused (and the other ways round), at
/// registration and in bootstrap, and nothing is written.
#[tokio::test]
async fn names_are_unique_across_users_clients_and_consumers() {
    let f = fixture().await;
    let admin = f.server.admin();
    let consumers = f.server.consumers();
    let read = vec!["read".to_string()];
    let cc = |name: &str| NewClient {
        client_id: name.into(),
        grants: vec!["client_credentials".into()],
        scopes: read.clone(),
        audiences: vec![],
        ..Default::default()
    };
    let conflict = |e: Error, holder: &str| {
        assert!(matches!(e, Error::Conflict(_)), "{e:?}");
        assert!(
            e.description().contains(&format!("taken by a {holder}")),
            "{}",
            e.description()
        );
    };
    conflict(admin.add_client(&cc("bob")).await.unwrap_err(), "user");
    conflict(
        admin.bootstrap_client(&cc("bob"), "s").await.unwrap_err(),
        "user",
    );
    conflict(consumers.add("alice", &read).await.unwrap_err(), "user");
    conflict(
        consumers.bootstrap("alice", "s", &read).await.unwrap_err(),
        "user",
    );
    conflict(
        admin.add_user("app", "pw", &read).await.unwrap_err(),
        "client",
    );
    conflict(
        admin.bootstrap_user("app", "pw", &read).await.unwrap_err(),
        "client",
    );
    consumers.add("printer", &read).await.unwrap();
    conflict(
        admin.add_user("printer", "pw", &read).await.unwrap_err(),
        "consumer",
    );
    conflict(
        admin.add_client(&cc("printer")).await.unwrap_err(),
        "consumer",
    );
    assert!(f.repo.get_client("bob").await.unwrap().is_none());
    assert!(f.repo.get_consumer("alice").await.unwrap().is_none());
    assert!(f.repo.find_user("app").await.unwrap().is_none());
    // The same kind twice is the old message; bootstrap stays idempotent.
    let e = admin.add_user("bob", "pw", &read).await.unwrap_err();
    assert!(
        e.description().contains("already exists"),
        "{}",
        e.description()
    );
    assert_eq!(
        admin.bootstrap_user("bob", "bob-pw", &read).await.unwrap(),
        BootstrapOutcome::Unchanged
    );
    // A free name is registered.
    admin.add_client(&cc("carol")).await.unwrap();
}

#[test]
fn principal_claims_of_an_anonymous_caller() {
    let p = Principal::anonymous();
    assert!(p.claims.is_empty());
    assert_eq!(p.claim("sub"), None);
    assert_eq!(p.claim("client_id"), None);
    assert_eq!(p.claim("org"), None);
}

#[tokio::test]
async fn claims_are_set_by_add_and_bootstrap_and_checked() {
    let f = fixture().await;
    let admin = f.server.admin();
    let set = claims_from_pairs(&["org=acme", "team=x", "org=initech"]).unwrap();
    assert_eq!(
        set,
        claims(serde_json::json!({"org": "initech", "team": "x"}))
    );
    let info = admin
        .add_user_with_claims("carol", "carol-pw", &["read".into()], &set)
        .await
        .unwrap();
    assert_eq!(info.claims, set);
    let listed = admin.list_users().await.unwrap();
    let carol = listed.iter().find(|u| u.username == "carol").unwrap();
    assert_eq!(carol.claims, set);

    // Bootstrap: created with claims, unchanged when equal, updated (and
    // replaced) when different; the plain bootstrap clears them.
    let scopes = vec!["read".to_string()];
    let one = claims(serde_json::json!({"org": "acme", "n": 1}));
    let run = |c: Claims| {
        let admin = admin.clone();
        let scopes = scopes.clone();
        async move {
            admin
                .bootstrap_user_with_claims("dave", "dave-pw", &scopes, &c)
                .await
                .unwrap()
        }
    };
    assert_eq!(run(one.clone()).await, BootstrapOutcome::Created);
    assert_eq!(run(one.clone()).await, BootstrapOutcome::Unchanged);
    assert_eq!(admin.get_user("dave").await.unwrap().claims, one);
    let two = claims(serde_json::json!({"team": "y"}));
    assert_eq!(run(two.clone()).await, BootstrapOutcome::Updated);
    assert_eq!(admin.get_user("dave").await.unwrap().claims, two);
    assert_eq!(
        admin
            .bootstrap_user("dave", "dave-pw", &scopes)
            .await
            .unwrap(),
        BootstrapOutcome::Updated
    );
    assert!(admin.get_user("dave").await.unwrap().claims.is_empty());

    // Refusals, each with a message that names the problem; nothing is
    // stored.
    let long_name = "a".repeat(65);
    let long_value = format!("org={}", "v".repeat(257));
    let long_name_pair = format!("{long_name}=x");
    for (pairs, needle) in [
        (vec!["sub=bob"], "reserved"),
        (vec!["client_id=x"], "reserved"),
        (vec!["scope=admin"], "reserved"),
        (vec!["act=x"], "reserved"),
        (vec!["=x"], "invalid claim name"),
        (vec!["1org=x"], "invalid claim name"),
        (vec!["o rg=x"], "invalid claim name"),
        (vec!["org"], "NAME=VALUE"),
        (vec![long_name.as_str()], "NAME=VALUE"),
        (vec![long_name_pair.as_str()], "invalid claim name"),
        (vec![long_value.as_str()], "at most 256 characters"),
    ] {
        let e = claims_from_pairs(&pairs).unwrap_err();
        assert_eq!(e.to_string(), "invalid_input", "{pairs:?}");
        assert!(
            e.description().contains(needle),
            "{pairs:?}: {}",
            e.description()
        );
    }
    let many: Vec<String> = (0..33).map(|i| format!("c{i}=v")).collect();
    let e = claims_from_pairs(&many).unwrap_err();
    assert!(
        e.description().contains("at most 32 claims"),
        "{}",
        e.description()
    );
    // Values a claim may not take (config files can write them).
    for bad in [
        serde_json::json!({"org": null}),
        serde_json::json!({"org": ["a"]}),
        serde_json::json!({"org": {"a": 1}}),
        serde_json::json!({"iss": "x"}),
    ] {
        let e = admin
            .set_user_claims("carol", &claims(bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_input", "{bad}");
        let e = admin
            .bootstrap_user_with_claims("erin", "erin-pw", &scopes, &claims(bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "invalid_input", "{bad}");
    }
    // The whole set is bounded too (tokens stay small).
    let big: Claims = (0..32)
        .map(|i| (format!("c{i}"), Value::from("v".repeat(200))))
        .collect();
    let e = check_claims(&big).unwrap_err();
    assert!(e.description().contains("bytes"), "{}", e.description());
    assert_eq!(admin.get_user("carol").await.unwrap().claims, set);
    assert!(admin.get_user("erin").await.is_err());
    let e = admin
        .set_user_claims("nobody", &Claims::new())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "not_found");
    // Every registered name is refused.
    for name in RESERVED_CLAIMS {
        assert!(check_claim_name(name).is_err(), "{name}");
    }
    for name in ["org", "_x", "a:b.c-d_e", "Team9"] {
        check_claim_name(name).unwrap();
    }
}
