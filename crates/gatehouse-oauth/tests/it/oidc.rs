//! OpenID Connect: the discovery document (the same one as the RFC 8414
//! metadata), userinfo, and an ID token from
//! [`AuthServer::id_token`] verified by a real relying-party library
//! (`openidconnect`) against the discovered JWKS.

use gatehouse_auth::SigningAlg;
use gatehouse_auth::oidc::IdTokenInput;
use gatehouse_oauth::AllowedOrigins;
use serde_json::json;

use super::*;

const RP: (&str, &str) = ("rp", "rp-secret");

impl Server {
    /// A password-grant token response of `user` through the `rp` client.
    async fn rp_token(&self, user: &str, password: &str, scope: &str) -> Value {
        self.post(
            "/oauth/token",
            Some(RP),
            &[
                ("grant_type", "password"),
                ("username", user),
                ("password", password),
                ("scope", scope),
            ],
        )
        .await
        .assert_token()
        .clone()
    }

    async fn add_carol(&self) {
        let mut claims = gatehouse_auth::Claims::new();
        claims.insert("org".into(), json!("acme"));
        claims.insert("email".into(), json!("carol@acme.example"));
        self.auth
            .admin()
            .bootstrap_user_with_claims("carol", "carol-pw", &strings(&["read"]), &claims)
            .await
            .unwrap();
    }

    async fn userinfo_get(&self, token: Option<&str>) -> Reply {
        let mut req = self.http.get(format!("{}/oauth/userinfo", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }
}

fn access(t: &Value) -> &str {
    t["access_token"].as_str().unwrap()
}

#[tokio::test]
async fn discovery_has_every_required_field_and_matches_rfc8414() {
    for mount in ["", "/api"] {
        let s = start_with(mount, |_| {}).await;
        let issuer = s.auth.config().issuer.clone();
        let d = s
            .send(
                s.http
                    .get(format!("{}/.well-known/openid-configuration", s.base)),
            )
            .await;
        assert_eq!(d.status, StatusCode::OK, "{:?}", d.body);
        assert_eq!(d.header("cache-control"), Some("public, max-age=3600"));
        let m = s
            .send(
                s.http
                    .get(format!("{}/.well-known/oauth-authorization-server", s.base)),
            )
            .await;
        assert_eq!(d.body, m.body, "one document under both names");
        let b = &d.body;
        assert_eq!(b["issuer"], issuer.as_str());
        for (field, path) in [
            ("authorization_endpoint", "/oauth/authorize"),
            ("token_endpoint", "/oauth/token"),
            ("userinfo_endpoint", "/oauth/userinfo"),
            ("jwks_uri", "/.well-known/jwks.json"),
            ("revocation_endpoint", "/oauth/revoke"),
            ("introspection_endpoint", "/oauth/introspect"),
        ] {
            assert_eq!(b[field], format!("{issuer}{mount}{path}"), "{field}");
        }
        assert_eq!(b["subject_types_supported"], json!(["public"]));
        // RS256 first (OpenID Connect Discovery §3 requires it), whatever
        // signs access tokens.
        assert_eq!(
            b["id_token_signing_alg_values_supported"],
            json!(["RS256", "EdDSA", "ES256"])
        );
        assert!(b["response_types_supported"].is_array());
        for scope in ["openid", "profile", "email", "offline_access"] {
            assert!(
                b["scopes_supported"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(scope)),
                "{scope}"
            );
        }
        for claim in [
            "sub",
            "iss",
            "aud",
            "exp",
            "iat",
            "auth_time",
            "nonce",
            "at_hash",
            "preferred_username",
            "email",
        ] {
            assert!(
                b["claims_supported"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(claim)),
                "{claim}"
            );
        }
        assert_eq!(
            b["grant_types_supported"],
            json!(gatehouse_auth::Grant::ALL.map(gatehouse_auth::Grant::as_str))
        );
        assert_eq!(
            b["token_endpoint_auth_methods_supported"],
            json!(gatehouse_auth::CLIENT_AUTH_METHODS)
        );
        for off in [
            "request_uri_parameter_supported",
            "request_parameter_supported",
            "claims_parameter_supported",
        ] {
            assert_eq!(b[off], json!(false), "{off}");
        }
        // No session, so nothing to end (CONTRACT §12).
        assert!(b.get("end_session_endpoint").is_none());
    }
}

#[tokio::test]
async fn userinfo_answers_get_and_post_with_a_bearer_header() {
    let s = start().await;
    s.add_carol().await;
    let t = s.rp_token("carol", "carol-pw", "openid read").await;
    let expected = json!({
        "sub": "carol",
        "preferred_username": "carol",
        "org": "acme",
        "email": "carol@acme.example",
    });
    let r = s.userinfo_get(Some(access(&t))).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, expected);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let r = s
        .send(
            s.http
                .post(format!("{}/oauth/userinfo", s.base))
                .bearer_auth(access(&t)),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, expected);
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let r = s
        .send(
            s.http
                .get(format!("{}/oauth/userinfo", s.base))
                .header("authorization", format!("bEaReR {}", access(&t))),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = s
        .send(s.http.put(format!("{}/oauth/userinfo", s.base)))
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), Some("GET, POST"));
}

#[tokio::test]
async fn userinfo_takes_the_token_from_the_header_only() {
    let s = start().await;
    let t = s.rp_token("alice", "alice-pw", "openid read").await;
    // RFC 6750 §2.2 (form body) and §2.3 (query): refused with a reason.
    let r = s
        .send(
            s.http
                .post(format!("{}/oauth/userinfo", s.base))
                .form(&[("access_token", access(&t))]),
        )
        .await;
    r.assert_error(400, "invalid_request");
    assert!(
        r.body["error_description"]
            .as_str()
            .unwrap()
            .contains("Authorization")
    );
    let r = s
        .send(
            s.http
                .get(format!("{}/oauth/userinfo", s.base))
                .query(&[("access_token", access(&t))]),
        )
        .await;
    r.assert_error(400, "invalid_request");
    // Even beside a header.
    let r = s
        .send(
            s.http
                .post(format!("{}/oauth/userinfo", s.base))
                .bearer_auth(access(&t))
                .form(&[("access_token", access(&t))]),
        )
        .await;
    r.assert_error(400, "invalid_request");
    // No credentials: 401 with a bare challenge (RFC 6750 §3.1).
    let r = s.userinfo_get(None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"gatehouse\"")
    );
    // Basic is no bearer token.
    let r = s
        .send(
            s.http
                .get(format!("{}/oauth/userinfo", s.base))
                .basic_auth("alice", Some("alice-pw")),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn userinfo_refuses_bad_tokens_missing_scope_and_app_tokens() {
    let s = start().await;
    for bad in ["nope", "a.b.c", ""] {
        let r = s
            .send(
                s.http
                    .get(format!("{}/oauth/userinfo", s.base))
                    .header("authorization", format!("Bearer {bad}")),
            )
            .await;
        r.assert_error(401, "invalid_token");
        assert!(
            r.header("www-authenticate")
                .unwrap()
                .contains("error=\"invalid_token\""),
            "{bad}"
        );
    }
    // Data scopes only: no userinfo (403 insufficient_scope).
    let t = s.rp_token("alice", "alice-pw", "read write").await;
    let r = s.userinfo_get(Some(access(&t))).await;
    r.assert_error(403, "insufficient_scope");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"gatehouse\", error=\"insufficient_scope\", scope=\"openid\"")
    );
    // A client's own token, even with `openid`, describes no user.
    let app = s
        .post(
            "/oauth/token",
            Some(RP),
            &[("grant_type", "client_credentials"), ("scope", "openid")],
        )
        .await;
    let r = s.userinfo_get(Some(access(app.assert_token()))).await;
    r.assert_error(403, "insufficient_scope");
    // Revoked: 401.
    let t = s.rp_token("alice", "alice-pw", "openid").await;
    assert_eq!(
        s.userinfo_get(Some(access(&t))).await.status,
        StatusCode::OK
    );
    let r = s
        .post("/oauth/revoke", Some(RP), &[("token", access(&t))])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    s.userinfo_get(Some(access(&t)))
        .await
        .assert_error(401, "invalid_token");
    // Expired: 401.
    let t = s.rp_token("alice", "alice-pw", "openid").await;
    s.clock.advance_secs(3601);
    s.userinfo_get(Some(access(&t)))
        .await
        .assert_error(401, "invalid_token");
}

#[tokio::test]
async fn identity_scopes_need_the_client_not_the_user() {
    let s = start().await;
    // alice's own scopes are `read write offline_access`; `rp` may ask for
    // the identity scopes for her, never for a data scope she lacks.
    let t = s.rp_token("alice", "alice-pw", "openid profile read").await;
    assert_eq!(t["scope"], "openid profile read");
    // The `app` client is not registered for `openid`: narrowed away.
    let t = s.alice("openid read").await;
    assert_eq!(t["scope"], "read");
}

#[tokio::test]
async fn userinfo_from_a_foreign_origin_is_refused() {
    let origins = AllowedOrigins::parse(&["https://app.example"]).unwrap();
    let s = start_with("", move |c| c.allowed_origins = origins).await;
    let t = s.rp_token("alice", "alice-pw", "openid").await;
    for (origin, status) in [
        ("https://evil.example", 403),
        ("null", 403),
        ("https://app.example", 200),
    ] {
        let r = s
            .send(
                s.http
                    .get(format!("{}/oauth/userinfo", s.base))
                    .bearer_auth(access(&t))
                    .header("origin", origin),
            )
            .await;
        assert_eq!(r.status.as_u16(), status, "{origin}: {:?}", r.body);
        if status == 403 {
            r.assert_error(403, "invalid_request");
        }
    }
}

#[tokio::test]
async fn an_id_token_opens_neither_the_api_nor_userinfo() {
    let s = start().await;
    let t = s.rp_token("alice", "alice-pw", "openid").await;
    let now = s.auth.now();
    let id = s
        .auth
        .id_token(
            SigningAlg::Rs256,
            &IdTokenInput {
                issuer: &s.auth.config().issuer,
                subject: "alice",
                username: Some("alice"),
                profile: None,
                client_id: "rp",
                auth_time: now,
                nonce: None,
                access_token: Some(access(&t)),
                now,
                idp: None,
            },
        )
        .unwrap();
    s.userinfo_get(Some(&id))
        .await
        .assert_error(401, "invalid_token");
    assert!(
        s.auth
            .access_principal(&id, now)
            .await
            .is_err_and(|e| e.code() == "invalid_token")
    );
}

/// openidconnect's HTTP client: reqwest, request and answer as `http` types.
async fn http_client(
    req: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, reqwest::Error> {
    let (parts, body) = req.into_parts();
    let resp = reqwest::Client::new()
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await?;
    let mut out = axum::http::Response::builder().status(resp.status());
    for (name, value) in resp.headers() {
        out = out.header(name, value);
    }
    Ok(out.body(resp.bytes().await?.to_vec()).unwrap())
}

#[tokio::test]
async fn a_relying_party_library_discovers_and_verifies_the_id_token() {
    for alg in [SigningAlg::EdDsa, SigningAlg::Es256, SigningAlg::Rs256] {
        relying_party_accepts_the_id_token(alg).await;
    }
}

/// `alg` signs access tokens; the ID tokens of `rp`, which registered no
/// `id_token_signed_response_alg`, are RS256 whatever it is, and a library
/// left at its defaults (RS256 only, as the registration default says)
/// verifies them. An ID token of the access tokens' algorithm verifies too
/// once the library accepts what discovery lists.
async fn relying_party_accepts_the_id_token(alg: SigningAlg) {
    use openidconnect::core::{CoreIdToken, CoreIdTokenVerifier, CoreProviderMetadata};
    use openidconnect::{AccessToken, AccessTokenHash, ClientId, IssuerUrl, Nonce};

    let s = start_signing("", alg, |_| {}).await;
    let issuer = s.auth.config().issuer.clone();
    let metadata =
        CoreProviderMetadata::discover_async(IssuerUrl::new(issuer.clone()).unwrap(), &http_client)
            .await
            .unwrap();
    assert_eq!(metadata.issuer().as_str(), issuer);
    assert_eq!(
        serde_json::to_value(metadata.id_token_signing_alg_values_supported()).unwrap(),
        json!(["RS256", "EdDSA", "ES256"])
    );
    assert_eq!(
        metadata.userinfo_endpoint().unwrap().as_str(),
        format!("{issuer}/oauth/userinfo")
    );
    let t = s.rp_token("alice", "alice-pw", "openid read").await;
    // Library defaults: RS256 only.
    let defaults = CoreIdTokenVerifier::new_public_client(
        ClientId::new("rp".into()),
        metadata.issuer().clone(),
        metadata.jwks().clone(),
    );
    // The token endpoint's own ID token (password grant: no nonce).
    let issued: CoreIdToken = t["id_token"].as_str().unwrap().parse().unwrap();
    let claims = issued
        .claims(&defaults, |n: Option<&Nonce>| {
            n.is_none()
                .then_some(())
                .ok_or_else(|| "unexpected nonce".to_string())
        })
        .unwrap_or_else(|e| panic!("{alg:?}: {e}"));
    assert_eq!(claims.subject().as_str(), "alice");
    let now = s.auth.now();
    let id_token = |id_alg: SigningAlg, client_id: &str, nonce: &str| {
        s.auth
            .id_token(
                id_alg,
                &IdTokenInput {
                    issuer: &issuer,
                    subject: "alice",
                    username: Some("alice"),
                    profile: None,
                    client_id,
                    auth_time: now - 5,
                    nonce: Some(nonce),
                    access_token: Some(access(&t)),
                    now,
                    idp: None,
                },
            )
            .unwrap()
    };
    let everything = defaults
        .clone()
        .set_allowed_algs(metadata.id_token_signing_alg_values_supported().clone());
    let nonce = Nonce::new("n-0S6_WzA2Mj".into());
    for (id_alg, verifier) in [(SigningAlg::Rs256, &defaults), (alg, &everything)] {
        let token: CoreIdToken = id_token(id_alg, "rp", nonce.secret()).parse().unwrap();
        let claims = token
            .claims(verifier, &nonce)
            .unwrap_or_else(|e| panic!("{alg:?} {id_alg:?}: {e}"));
        assert_eq!(claims.subject().as_str(), "alice");
        assert_eq!(claims.preferred_username().unwrap().as_str(), "alice");
        assert_eq!(claims.auth_time().unwrap().timestamp(), now - 5);
        // at_hash, computed by the library from the access token.
        let expected = AccessTokenHash::from_token(
            &AccessToken::new(access(&t).to_string()),
            token.signing_alg().unwrap(),
            token.signing_key(verifier).unwrap(),
        )
        .unwrap();
        assert_eq!(claims.access_token_hash(), Some(&expected));
        // Another nonce, another audience: refused by the library.
        let other = Nonce::new("another".into());
        assert!(token.claims(verifier, &other).is_err());
        let for_other: CoreIdToken = id_token(id_alg, "someone-else", nonce.secret())
            .parse()
            .unwrap();
        assert!(for_other.claims(verifier, &nonce).is_err());
    }
    if alg != SigningAlg::Rs256 {
        // The library's defaults refuse what RS256 did not sign.
        let token: CoreIdToken = id_token(alg, "rp", nonce.secret()).parse().unwrap();
        assert!(token.claims(&defaults, &nonce).is_err());
    }
}

/// Userinfo has a bucket per token subject: one user's flood answers 429
/// with `Retry-After`, and another user is still served.
#[tokio::test]
async fn userinfo_is_rate_limited_per_subject() {
    let s = start_with("", |c| {
        c.rate_per_second = 1;
        c.rate_burst = 3;
    })
    .await;
    s.add_carol().await;
    let carol = s.rp_token("carol", "carol-pw", "openid read").await;
    let alice = s.rp_token("alice", "alice-pw", "openid read").await;
    for _ in 0..3 {
        let r = s.userinfo_get(Some(access(&carol))).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let r = s.userinfo_get(Some(access(&carol))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", r.body);
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.body["error"], "too_many_requests");
    let r = s.userinfo_get(Some(access(&alice))).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // An invalid token is refused before any bucket is charged.
    let r = s.userinfo_get(Some("not-a-token")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
