//! End-to-end tests of the OAuth endpoints: the router on a real TCP port,
//! the in-memory store, and reqwest as the client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use gatehouse_auth::{
    AuthConfig, AuthServer, Clock, ManualClock, MemoryRepo, NewClient, SeededRandom,
    TOKEN_TYPE_ACCESS, TOKEN_TYPE_JWT,
};
use gatehouse_oauth::{OAuthConfig, OAuthState, router};
use gatehouse_testkit::Port;
use reqwest::StatusCode;
use serde_json::Value;

mod code_flow;
mod cors;
mod oauth1;
mod oidc;

const EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

struct Server {
    base: String,
    http: reqwest::Client,
    auth: Arc<AuthServer>,
    clock: Arc<ManualClock>,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Starts the router under `mount` (e.g. "" or "/api") on 127.0.0.1:0.
async fn start_with(mount: &str, tweak: impl FnOnce(&mut OAuthConfig)) -> Server {
    start_configured(mount, |_| {}, tweak).await
}

/// [`start_with`], signing tokens with `alg`.
async fn start_signing(
    mount: &str,
    alg: gatehouse_auth::SigningAlg,
    tweak: impl FnOnce(&mut OAuthConfig),
) -> Server {
    start_configured(mount, |c| c.signing_alg = alg, tweak).await
}

/// [`start_with`], with the authorization server's settings changed by
/// `tweak_auth`.
async fn start_configured(
    mount: &str,
    tweak_auth: impl FnOnce(&mut AuthConfig),
    tweak: impl FnOnce(&mut OAuthConfig),
) -> Server {
    let port = Port::bind().await;
    let issuer = port.base();
    let clock = Arc::new(ManualClock::at_secs(gatehouse_auth::SystemClock.now()));
    let mut auth_config = AuthConfig::new(&issuer);
    tweak_auth(&mut auth_config);
    let auth = AuthServer::start(
        auth_config,
        Arc::new(MemoryRepo::new()),
        clock.clone(),
        Arc::new(SeededRandom::new(1)),
        "test-secret",
    )
    .await
    .unwrap();
    let admin = auth.admin();
    let client = |id: &str, grants: &[&str], scopes: &[&str], auds: &[&str]| NewClient {
        client_id: id.into(),
        grants: strings(grants),
        scopes: strings(scopes),
        audiences: strings(auds),
        ..Default::default()
    };
    for (c, secret) in [
        (
            client(
                "app",
                &["password", "client_credentials", "refresh_token"],
                &["read", "write", "offline_access"],
                &[],
            ),
            "app-secret",
        ),
        (
            client(
                "rp",
                &["password", "client_credentials", "refresh_token"],
                &["read", "write", "openid", "profile", "email"],
                &[],
            ),
            "rp-secret",
        ),
        (
            client(
                "exchanger",
                &["client_credentials", "token-exchange"],
                &["read"],
                &["https://reports.example", "https://billing.example"],
            ),
            "ex-secret",
        ),
    ] {
        admin.bootstrap_client(&c, secret).await.unwrap();
    }
    // The code flow's clients: a public first-party single-page app and a
    // confidential third-party web app.
    admin
        .bootstrap_public_client(&NewClient {
            client_id: "spa".into(),
            grants: strings(&["authorization_code", "refresh_token"]),
            scopes: strings(&["read", "write", "offline_access"]),
            redirect_uris: strings(&["https://spa.example/cb", "http://127.0.0.1/cb"]),
            public: true,
            first_party: true,
            ..Default::default()
        })
        .await
        .unwrap();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "web".into(),
                grants: strings(&["authorization_code", "refresh_token"]),
                scopes: strings(&["read", "write"]),
                redirect_uris: strings(&["https://web.example/cb"]),
                ..Default::default()
            },
            "web-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user(
            "alice",
            "alice-pw",
            &strings(&["read", "write", "offline_access"]),
        )
        .await
        .unwrap();
    let mut config = OAuthConfig::new(format!("{issuer}{mount}"));
    tweak(&mut config);
    let app = router(OAuthState::new(auth.clone(), config));
    let app = if mount.is_empty() {
        app
    } else {
        axum::Router::new().nest(mount, app)
    };
    let served = port.serve(app);
    Server {
        base: served.url(mount),
        http: served.client,
        auth,
        clock,
    }
}

async fn start() -> Server {
    start_with("", |_| {}).await
}

struct Reply {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "{:?}", self.body);
        assert_eq!(self.body["error"], code, "{:?}", self.body);
        assert!(
            self.body["error_description"].is_string(),
            "{:?}",
            self.body
        );
    }

    #[track_caller]
    fn assert_token(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{:?}", self.body);
        assert_eq!(self.header("cache-control"), Some("no-store"));
        assert_eq!(self.header("pragma"), Some("no-cache"));
        assert_eq!(self.body["token_type"], "Bearer");
        assert!(self.body["access_token"].is_string());
        assert!(self.body["expires_in"].is_i64());
        &self.body
    }
}

impl Server {
    async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn post(&self, path: &str, creds: Option<(&str, &str)>, form: &[(&str, &str)]) -> Reply {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some((id, secret)) = creds {
            req = req.basic_auth(id, Some(secret));
        }
        self.send(req).await
    }

    async fn app(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        self.post(path, Some(("app", "app-secret")), form).await
    }

    async fn alice(&self, scope: &str) -> Value {
        let mut form = vec![
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ];
        if !scope.is_empty() {
            form.push(("scope", scope));
        }
        self.app("/oauth/token", &form).await.assert_token().clone()
    }

    async fn exchange(&self, creds: (&str, &str), form: &[(&str, &str)]) -> Reply {
        let mut all = vec![("grant_type", EXCHANGE)];
        all.extend_from_slice(form);
        self.post("/oauth2/token", Some(creds), &all).await
    }
}

fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

// ----- grants -----

#[tokio::test]
async fn password_grant() {
    let s = start().await;
    let t = s.alice("").await;
    assert_eq!(t["scope"], "read write");
    assert_eq!(t["expires_in"], 3600);
    assert!(t["refresh_token"].is_string());
    let c = claims(t["access_token"].as_str().unwrap());
    assert_eq!(c["sub"], "alice");
    assert_eq!(c["client_id"], "app");

    let t = s.alice("read offline_access").await;
    assert_eq!(t["expires_in"], 30 * 86400);

    let r = s
        .app(
            "/oauth/token",
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "nope"),
            ],
        )
        .await;
    r.assert_error(400, "invalid_grant");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(!r.body.to_string().contains("nope"));

    let r = s
        .app(
            "/oauth/token",
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
                ("scope", "admin"),
            ],
        )
        .await;
    r.assert_error(400, "invalid_scope");

    let r = s
        .app(
            "/oauth/token",
            &[("grant_type", "password"), ("username", "alice")],
        )
        .await;
    r.assert_error(400, "invalid_request");
}

#[tokio::test]
async fn client_credentials_grant() {
    let s = start().await;
    for path in ["/oauth/token", "/oauth2/token", "/oauth/access_token"] {
        let r = s
            .app(
                path,
                &[("grant_type", "client_credentials"), ("scope", "read")],
            )
            .await;
        let t = r.assert_token();
        assert_eq!(t["scope"], "read");
        assert!(t.get("refresh_token").is_none());
        let c = claims(t["access_token"].as_str().unwrap());
        assert_eq!(c["sub"], "app");
        assert_eq!(c["aud"], s.auth.config().issuer.as_str());
    }
    // unauthorized_client: the exchanger may not use the password grant.
    let r = s
        .post(
            "/oauth/token",
            Some(("exchanger", "ex-secret")),
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
        )
        .await;
    r.assert_error(400, "unauthorized_client");
}

#[tokio::test]
async fn access_token_endpoint_never_issues_refresh_tokens() {
    let s = start().await;
    let r = s
        .app(
            "/oauth/access_token",
            &[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
        )
        .await;
    let t = r.assert_token();
    assert!(t.get("refresh_token").is_none(), "{t}");
    let rt = s.alice("").await["refresh_token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s
        .app(
            "/oauth/access_token",
            &[("grant_type", "refresh_token"), ("refresh_token", &rt)],
        )
        .await;
    r.assert_error(400, "unsupported_grant_type");
}

#[tokio::test]
async fn refresh_grant_rotates_and_detects_reuse() {
    let s = start().await;
    let t = s.alice("read write").await;
    let rt1 = t["refresh_token"].as_str().unwrap().to_string();
    // grant_type may be omitted on /oauth/refresh_token.
    let r = s
        .app("/oauth/refresh_token", &[("refresh_token", &rt1)])
        .await;
    let t2 = r.assert_token().clone();
    let rt2 = t2["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(rt1, rt2);
    // And given explicitly on /oauth/token, with a narrowed scope.
    let r = s
        .app(
            "/oauth/token",
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &rt2),
                ("scope", "read"),
            ],
        )
        .await;
    let t3 = r.assert_token().clone();
    assert_eq!(t3["scope"], "read");
    // Reusing rt1 revokes the family.
    let r = s
        .app("/oauth/refresh_token", &[("refresh_token", &rt1)])
        .await;
    r.assert_error(400, "invalid_grant");
    let rt3 = t3["refresh_token"].as_str().unwrap();
    let r = s
        .app("/oauth/refresh_token", &[("refresh_token", rt3)])
        .await;
    r.assert_error(400, "invalid_grant");
    let i = s
        .app(
            "/oauth/introspect",
            &[("token", t3["access_token"].as_str().unwrap())],
        )
        .await;
    assert_eq!(i.body, serde_json::json!({"active": false}));
    // Wrong grant type at the refresh endpoint.
    let r = s
        .app(
            "/oauth/refresh_token",
            &[("grant_type", "client_credentials")],
        )
        .await;
    r.assert_error(400, "unsupported_grant_type");
}

#[tokio::test]
async fn token_exchange() {
    let s = start().await;
    let subject = s.alice("read write").await;
    let st = subject["access_token"].as_str().unwrap();
    let ex = ("exchanger", "ex-secret");
    let r = s
        .exchange(
            ex,
            &[
                ("subject_token", st),
                ("subject_token_type", TOKEN_TYPE_ACCESS),
                ("scope", "read"),
                ("audience", "https://reports.example"),
                ("audience", "https://billing.example"),
            ],
        )
        .await;
    let t = r.assert_token();
    assert_eq!(t["issued_token_type"], TOKEN_TYPE_ACCESS);
    assert!(t.get("refresh_token").is_none());
    let c = claims(t["access_token"].as_str().unwrap());
    assert_eq!(c["sub"], "alice");
    assert_eq!(c["act"], serde_json::json!({"sub": "exchanger"}));
    assert_eq!(
        c["aud"],
        serde_json::json!(["https://reports.example", "https://billing.example"])
    );
    assert!(c["exp"].as_i64() <= claims(st)["exp"].as_i64());

    let r = s
        .exchange(
            ex,
            &[
                ("subject_token", st),
                ("subject_token_type", TOKEN_TYPE_ACCESS),
                ("requested_token_type", TOKEN_TYPE_JWT),
            ],
        )
        .await;
    assert_eq!(r.assert_token()["issued_token_type"], TOKEN_TYPE_JWT);

    // Each refusal with its code.
    let base = [
        ("subject_token", st),
        ("subject_token_type", TOKEN_TYPE_ACCESS),
    ];
    s.exchange(("app", "app-secret"), &base)
        .await
        .assert_error(400, "unauthorized_client");
    s.exchange(
        ex,
        &[
            ("subject_token", "garbage"),
            ("subject_token_type", TOKEN_TYPE_ACCESS),
        ],
    )
    .await
    .assert_error(400, "invalid_request");
    s.exchange(ex, &[("subject_token", st)])
        .await
        .assert_error(400, "invalid_request");
    let mut f = base.to_vec();
    f.push(("scope", "read admin"));
    s.exchange(ex, &f).await.assert_error(400, "invalid_scope");
    let mut f = base.to_vec();
    f.push(("resource", "https://evil.example"));
    s.exchange(ex, &f).await.assert_error(400, "invalid_target");
    let mut f = base.to_vec();
    f.push((
        "requested_token_type",
        "urn:ietf:params:oauth:token-type:refresh_token",
    ));
    s.exchange(ex, &f)
        .await
        .assert_error(400, "invalid_request");
    // Expired subject token.
    s.clock.advance_secs(3600);
    s.exchange(ex, &base)
        .await
        .assert_error(400, "invalid_request");
}

// ----- request-level errors -----

#[tokio::test]
async fn invalid_client_is_401_with_a_basic_challenge() {
    let s = start().await;
    let form = [("grant_type", "client_credentials")];
    let url = format!("{}/oauth/token", s.base);
    for r in [
        s.post("/oauth/token", None, &form).await,
        s.post("/oauth/token", Some(("app", "wrong")), &form).await,
        s.post("/oauth/token", Some(("nobody", "app-secret")), &form)
            .await,
        s.send(
            s.http
                .post(&url)
                .header("authorization", "Basic %%%")
                .form(&form),
        )
        .await,
        s.send(s.http.post(&url).bearer_auth("abc").form(&form))
            .await,
    ] {
        r.assert_error(401, "invalid_client");
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Basic realm="gatehouse""#)
        );
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert!(!r.body.to_string().contains("app-secret"));
    }
    // Introspection and revocation authenticate clients too.
    for path in ["/oauth/introspect", "/oauth/revoke"] {
        let r = s
            .post(path, Some(("app", "wrong")), &[("token", "x")])
            .await;
        r.assert_error(401, "invalid_client");
        assert!(r.header("www-authenticate").is_some());
    }
}

#[tokio::test]
async fn form_encoded_basic_credentials_per_rfc6749() {
    let s = start().await;
    s.auth
        .admin()
        .bootstrap_client(
            &NewClient {
                client_id: "odd@id".into(),
                grants: strings(&["client_credentials"]),
                scopes: strings(&["read"]),
                audiences: vec![],
                ..Default::default()
            },
            "p@ss word:+",
        )
        .await
        .unwrap();
    // RFC 6749 §2.3.1: form-encode, then Basic.
    let r = s
        .post(
            "/oauth/token",
            Some(("odd%40id", "p%40ss+word%3A%2B")),
            &[("grant_type", "client_credentials")],
        )
        .await;
    r.assert_token();
}

#[tokio::test]
async fn malformed_requests_are_400_invalid_request() {
    let s = start().await;
    let url = format!("{}/oauth/token", s.base);
    // Missing grant_type.
    s.app("/oauth/token", &[("scope", "read")])
        .await
        .assert_error(400, "invalid_request");
    // Unknown grant type.
    s.app("/oauth/token", &[("grant_type", "implicit")])
        .await
        .assert_error(400, "unsupported_grant_type");
    // A known grant the client is not registered for.
    s.app("/oauth/token", &[("grant_type", "authorization_code")])
        .await
        .assert_error(400, "unauthorized_client");
    // Duplicate parameters.
    let r = s
        .send(
            s.http
                .post(&url)
                .basic_auth("app", Some("app-secret"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("grant_type=client_credentials&grant_type=client_credentials"),
        )
        .await;
    r.assert_error(400, "invalid_request");
    let r = s
        .send(
            s.http
                .post(&url)
                .basic_auth("app", Some("app-secret"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("grant_type=client_credentials&scope=read&scope=write"),
        )
        .await;
    r.assert_error(400, "invalid_request");
    // A JSON body.
    let r = s
        .send(
            s.http
                .post(&url)
                .basic_auth("app", Some("app-secret"))
                .json(&serde_json::json!({"grant_type": "client_credentials"})),
        )
        .await;
    r.assert_error(400, "invalid_request");
    // No content type at all.
    let r = s
        .send(
            s.http
                .post(&url)
                .basic_auth("app", Some("app-secret"))
                .body("grant_type=client_credentials"),
        )
        .await;
    r.assert_error(400, "invalid_request");
    // Credentials in the body as well as in Basic.
    s.app(
        "/oauth/token",
        &[
            ("grant_type", "client_credentials"),
            ("client_secret", "app-secret"),
        ],
    )
    .await
    .assert_error(400, "invalid_request");
    // Too large.
    let big = "x".repeat(100 * 1024);
    s.app(
        "/oauth/token",
        &[("grant_type", "client_credentials"), ("pad", &big)],
    )
    .await
    .assert_error(400, "invalid_request");
    // The charset parameter is fine.
    let r = s
        .send(
            s.http
                .post(&url)
                .basic_auth("app", Some("app-secret"))
                .header(
                    "content-type",
                    "application/x-www-form-urlencoded; charset=UTF-8",
                )
                .body("grant_type=client_credentials"),
        )
        .await;
    r.assert_token();
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let s = start().await;
    for path in [
        "/oauth/token",
        "/oauth2/token",
        "/oauth/access_token",
        "/oauth/refresh_token",
        "/oauth/introspect",
        "/oauth/revoke",
    ] {
        for m in [
            reqwest::Method::GET,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
        ] {
            let r = s
                .send(s.http.request(m.clone(), format!("{}{path}", s.base)))
                .await;
            assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{m} {path}");
            assert_eq!(r.header("allow"), Some("POST"), "{m} {path}");
            assert_eq!(r.body["error"], "invalid_request");
            assert!(r.body["error_description"].is_string());
        }
    }
    let r = s.post("/.well-known/jwks.json", None, &[]).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
}

// ----- introspection, revocation, discovery -----

#[tokio::test]
async fn introspection_and_revocation() {
    let s = start().await;
    let t = s.alice("read").await;
    let at = t["access_token"].as_str().unwrap();
    let rt = t["refresh_token"].as_str().unwrap();
    let ex = ("exchanger", "ex-secret");

    let i = s
        .post("/oauth/introspect", Some(ex), &[("token", at)])
        .await;
    assert_eq!(i.status, StatusCode::OK);
    assert_eq!(i.body["active"], true);
    assert_eq!(i.body["sub"], "alice");
    assert_eq!(i.body["scope"], "read");
    assert_eq!(i.header("cache-control"), Some("no-store"));
    for junk in ["junk", "a.b.c"] {
        let i = s
            .post("/oauth/introspect", Some(ex), &[("token", junk)])
            .await;
        assert_eq!(i.body, serde_json::json!({"active": false}));
    }
    s.post("/oauth/introspect", Some(ex), &[])
        .await
        .assert_error(400, "invalid_request");

    // Another client's token cannot be revoked by this one.
    s.post("/oauth/revoke", Some(ex), &[("token", at)])
        .await
        .assert_error(400, "unauthorized_client");
    // Revoking the refresh token takes the family's access tokens with it.
    let r = s
        .app(
            "/oauth/revoke",
            &[("token", rt), ("token_type_hint", "refresh_token")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let i = s
        .post("/oauth/introspect", Some(ex), &[("token", at)])
        .await;
    assert_eq!(i.body, serde_json::json!({"active": false}));
    s.app("/oauth/refresh_token", &[("refresh_token", rt)])
        .await
        .assert_error(400, "invalid_grant");
    // Unknown tokens: 200 (RFC 7009 §2.2).
    let r = s.app("/oauth/revoke", &[("token", "whatever")]).await;
    assert_eq!(r.status, StatusCode::OK);
    s.app("/oauth/revoke", &[])
        .await
        .assert_error(400, "invalid_request");
}

#[tokio::test]
async fn metadata_and_jwks_under_a_base_path() {
    let s = start_with("/api", |_| {}).await;
    let issuer = s.auth.config().issuer.clone();
    let m = s
        .send(
            s.http
                .get(format!("{}/.well-known/oauth-authorization-server", s.base)),
        )
        .await;
    assert_eq!(m.status, StatusCode::OK);
    assert_eq!(m.body["issuer"], issuer.as_str());
    assert_eq!(
        m.body["token_endpoint"],
        format!("{issuer}/api/oauth/token")
    );
    assert_eq!(
        m.body["jwks_uri"],
        format!("{issuer}/api/.well-known/jwks.json")
    );
    assert_eq!(
        m.body["introspection_endpoint"],
        format!("{issuer}/api/oauth/introspect")
    );
    assert_eq!(
        m.body["revocation_endpoint"],
        format!("{issuer}/api/oauth/revoke")
    );
    assert!(
        m.body["grant_types_supported"]
            .as_array()
            .unwrap()
            .contains(&Value::from(EXCHANGE))
    );
    let j = s
        .send(s.http.get(format!("{}/.well-known/jwks.json", s.base)))
        .await;
    assert_eq!(j.status, StatusCode::OK);
    // A current key of every algorithm: RS256 (ID tokens by default),
    // EdDSA (access tokens by default), ES256.
    let keys = j.body["keys"].as_array().unwrap();
    let members = |k: &Value| {
        (
            k["kty"].as_str().unwrap().to_string(),
            k["alg"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        keys.iter().map(members).collect::<Vec<_>>(),
        [("RSA", "RS256"), ("OKP", "EdDSA"), ("EC", "ES256")]
            .map(|(t, a)| (t.to_string(), a.to_string()))
    );
    assert_eq!(keys[1]["crv"], "Ed25519");
    assert_eq!(keys[2]["crv"], "P-256");
    for k in keys {
        assert_eq!(k["use"], "sig");
        assert!(k["kid"].is_string());
        for private in ["d", "p", "q", "dp", "dq", "qi"] {
            assert!(k.get(private).is_none(), "{k}");
        }
    }
    assert_eq!(keys[0]["e"], "AQAB");
    assert!(keys[0]["n"].is_string());
    // The token endpoint works under the base path too.
    let t = s.alice("read").await;
    let header: Value = {
        use base64::Engine;
        let h = t["access_token"]
            .as_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h)
                .unwrap(),
        )
        .unwrap()
    };
    // Access tokens: the EdDSA key (`tokens.signing_alg`).
    assert_eq!(header["kid"], keys[1]["kid"]);
    assert_eq!(header["typ"], "at+jwt");
}

// ----- limits -----

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let s = start_with("", |c| {
        c.rate_per_second = 1;
        c.rate_burst = 3;
    })
    .await;
    let form = [("grant_type", "client_credentials")];
    for _ in 0..3 {
        s.app("/oauth/token", &form).await.assert_token();
    }
    let r = s.app("/oauth/token", &form).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "{wait}");
    assert_eq!(r.body["error"], "too_many_requests");
    // D13: introspection and revocation share the client's bucket.
    for path in ["/oauth/introspect", "/oauth/revoke"] {
        let i = s.app(path, &[("token", "x")]).await;
        assert_eq!(i.status, StatusCode::TOO_MANY_REQUESTS, "{path}");
        assert!(i.header("retry-after").is_some());
    }
}

/// D13: bad secrets on introspection and revocation are throttled like on
/// the token endpoint (per client and address, and per address).
#[tokio::test]
async fn failed_client_authentication_is_throttled_on_every_endpoint() {
    for path in ["/oauth/introspect", "/oauth/revoke", "/oauth/token"] {
        let s = start().await;
        let form = [("token", "x"), ("grant_type", "client_credentials")];
        let mut refused = None;
        for n in 0..60 {
            let r = s.post(path, Some(("app", "wrong")), &form).await;
            if r.status == StatusCode::TOO_MANY_REQUESTS {
                refused = Some((n, r));
                break;
            }
            r.assert_error(401, "invalid_client");
        }
        let (n, r) = refused.unwrap_or_else(|| panic!("{path}: never 429"));
        assert!(
            n as u32 > gatehouse_auth::FREE_FAILURES_PER_ACCOUNT,
            "{path}: {n}"
        );
        assert!(r.header("retry-after").is_some());
        assert_eq!(r.body["error"], "too_many_requests");
    }
}

/// D14: failed authentications from another address do not use up the
/// real client's bucket (charged only after authentication), and do not
/// throttle the client elsewhere.
#[tokio::test]
async fn strangers_cannot_use_up_a_clients_rate_limit() {
    let s = start_with("", |c| {
        c.rate_per_second = 1;
        c.rate_burst = 3;
    })
    .await;
    let form = [("grant_type", "client_credentials")];
    // 127.0.0.2 is another address than the real client's 127.0.0.1.
    let stranger = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let mut saw_429 = false;
    for _ in 0..45 {
        let r = s
            .send(
                stranger
                    .post(format!("{}/oauth/token", s.base))
                    .basic_auth("app", Some("wrong"))
                    .form(&form),
            )
            .await;
        saw_429 |= r.status == StatusCode::TOO_MANY_REQUESTS;
    }
    assert!(saw_429, "the stranger's failures are throttled");
    for _ in 0..3 {
        s.app("/oauth/token", &form).await.assert_token();
    }
}

#[tokio::test]
async fn failed_passwords_are_throttled_per_user_and_address() {
    let s = start().await;
    let bad = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "bad"),
    ];
    let good = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "alice-pw"),
    ];
    for _ in 0..=gatehouse_auth::FREE_FAILURES_PER_ACCOUNT {
        s.app("/oauth/token", &bad)
            .await
            .assert_error(400, "invalid_grant");
    }
    // Throttled now from this address, even with the right password.
    let r = s.app("/oauth/token", &good).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("1"));
    // From another address the user is not locked out.
    let elsewhere = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 3]))
        .build()
        .unwrap();
    let r = s
        .send(
            elsewhere
                .post(format!("{}/oauth/token", s.base))
                .basic_auth("app", Some("app-secret"))
                .form(&good),
        )
        .await;
    r.assert_token();
    // The delay passes (on the server's clock): the right password works.
    s.clock.advance_secs(1);
    s.app("/oauth/token", &good).await.assert_token();
}
