//! The authorization code flow with PKCE (RFC 6749 §4.1, RFC 7636): the
//! sign-in and consent pages driven as a browser without JavaScript would,
//! then the token endpoint, and every refusal on the way.

use std::collections::HashMap;

use gatehouse_testkit::{Browser, Page, authorize_url, pkce_challenge, pkce_verifier};
use serde_json::Value;

use crate::{Reply, Server, claims, start, start_configured};

const SPA_CB: &str = "https://spa.example/cb";
const WEB_CB: &str = "https://web.example/cb";

impl Server {
    fn authorize(&self, extra: &[(&str, &str)]) -> String {
        authorize_url(&self.base, extra)
    }

    fn code_request(&self, client: &str, redirect: &str, verifier: &str, scope: &str) -> String {
        let challenge = pkce_challenge(verifier);
        self.authorize(&[
            ("response_type", "code"),
            ("client_id", client),
            ("redirect_uri", redirect),
            ("scope", scope),
            ("state", "xyz"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ])
    }

    fn form_url(&self) -> String {
        format!("{}/oauth/authorize", self.base)
    }

    /// Signs alice in on the page at `url`; the page that follows.
    async fn sign_in(&self, b: &mut Browser, url: &str, password: &str) -> Page {
        let page = b.get(url).await;
        assert_eq!(page.status, 200, "{}", page.body);
        b.submit(
            &self.form_url(),
            &page,
            &[
                ("action", "sign_in"),
                ("username", "alice"),
                ("password", password),
            ],
        )
        .await
    }

    /// A code for the first-party `spa` client.
    async fn spa_code(&self, verifier: &str, scope: &str) -> HashMap<String, String> {
        let mut b = Browser::new();
        let url = self.code_request("spa", SPA_CB, verifier, scope);
        let page = self.sign_in(&mut b, &url, "alice-pw").await;
        assert_eq!(page.status, 302, "{}", page.body);
        assert!(page.location().unwrap().starts_with(SPA_CB));
        page.redirect_params()
    }

    async fn redeem_spa(&self, code: &str, verifier: &str) -> Reply {
        self.post(
            "/oauth/token",
            None,
            &[
                ("grant_type", "authorization_code"),
                ("client_id", "spa"),
                ("code", code),
                ("redirect_uri", SPA_CB),
                ("code_verifier", verifier),
            ],
        )
        .await
    }

    async fn introspect(&self, token: &str) -> Value {
        self.app("/oauth/introspect", &[("token", token)])
            .await
            .body
    }
}

#[tokio::test]
async fn public_first_party_client_signs_in_without_consent() {
    let s = start().await;
    let verifier = pkce_verifier("happy");
    let back = s.spa_code(&verifier, "read offline_access").await;
    assert_eq!(back["state"], "xyz");
    // RFC 9207: the issuer comes back with the code.
    assert_eq!(back["iss"], s.auth.config().issuer);
    let t = s.redeem_spa(&back["code"], &verifier).await;
    let body = t.assert_token().clone();
    assert_eq!(body["scope"], "offline_access read");
    assert!(body["refresh_token"].is_string());
    let c = claims(body["access_token"].as_str().unwrap());
    assert_eq!(c["sub"], "alice");
    assert_eq!(c["client_id"], "spa");
    assert_eq!(
        s.introspect(body["access_token"].as_str().unwrap()).await["active"],
        true
    );

    // The refresh token works for the public client (client_id in the body).
    let r = s
        .post(
            "/oauth/token",
            None,
            &[
                ("grant_type", "refresh_token"),
                ("client_id", "spa"),
                ("refresh_token", body["refresh_token"].as_str().unwrap()),
            ],
        )
        .await;
    r.assert_token();

    // A public client cannot use introspection, nor pass for a confidential one.
    s.post(
        "/oauth/introspect",
        None,
        &[("client_id", "spa"), ("token", "x")],
    )
    .await
    .assert_error(401, "invalid_client");
    s.post(
        "/oauth/token",
        None,
        &[("grant_type", "client_credentials"), ("client_id", "web")],
    )
    .await
    .assert_error(401, "invalid_client");
}

#[tokio::test]
async fn third_party_client_asks_for_consent() {
    let s = start().await;
    let verifier = pkce_verifier("consent");
    let url = s.code_request("web", WEB_CB, &verifier, "read");
    let mut b = Browser::new();
    let page = s.sign_in(&mut b, &url, "alice-pw").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<code>read</code>"), "{}", page.body);
    assert!(page.hidden("ticket").is_some());

    // Deny: back to the client with access_denied.
    let denied = b.submit(&s.form_url(), &page, &[("action", "deny")]).await;
    assert_eq!(denied.status, 302);
    let p = denied.redirect_params();
    assert_eq!(p["error"], "access_denied");
    assert_eq!(p["state"], "xyz");
    assert!(p.contains_key("iss"));

    // A ticket altered (another scope) is refused.
    let mut form = page.hidden_fields();
    for (k, v) in form.iter_mut() {
        if k == "scope" {
            *v = "read write".into();
        }
    }
    form.push(("action".into(), "consent".into()));
    let tampered = b.post(&s.form_url(), &form).await;
    assert_eq!(tampered.status, 400, "{}", tampered.body);

    let allowed = b
        .submit(&s.form_url(), &page, &[("action", "consent")])
        .await;
    assert_eq!(allowed.status, 302, "{}", allowed.body);
    let code = allowed.redirect_params()["code"].clone();
    // A confidential client authenticates (Basic) and still sends PKCE.
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", WEB_CB),
        ("code_verifier", verifier.as_str()),
    ];
    s.post(
        "/oauth/token",
        None,
        &[&form[..], &[("client_id", "web")]].concat(),
    )
    .await
    .assert_error(401, "invalid_client");
    let r = s
        .post("/oauth/token", Some(("web", "web-secret")), &form)
        .await;
    assert_eq!(r.assert_token()["scope"], "read");

    // prompt=consent shows the page even to the first-party client.
    let challenge = pkce_challenge(&verifier);
    let url = s.authorize(&[
        ("response_type", "code"),
        ("client_id", "spa"),
        ("redirect_uri", SPA_CB),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("prompt", "consent"),
    ]);
    let page = s.sign_in(&mut Browser::new(), &url, "alice-pw").await;
    assert_eq!(page.status, 200);
    assert!(page.hidden("ticket").is_some());
}

#[tokio::test]
async fn pkce_is_required_and_s256_only() {
    let s = start().await;
    let verifier = pkce_verifier("pkce");
    let challenge = pkce_challenge(&verifier);
    let base = [
        ("response_type", "code"),
        ("client_id", "spa"),
        ("redirect_uri", SPA_CB),
        ("state", "s1"),
    ];
    for extra in [
        vec![],
        vec![("code_challenge", challenge.as_str())],
        vec![
            ("code_challenge", verifier.as_str()),
            ("code_challenge_method", "plain"),
        ],
        vec![
            ("code_challenge", "short"),
            ("code_challenge_method", "S256"),
        ],
    ] {
        let page = Browser::new()
            .get(&s.authorize(&[&base[..], &extra[..]].concat()))
            .await;
        assert_eq!(page.status, 302, "{extra:?}");
        let p = page.redirect_params();
        assert_eq!(p["error"], "invalid_request", "{extra:?}");
        assert_eq!(p["state"], "s1");
        assert!(page.location().unwrap().starts_with(SPA_CB));
    }

    // The token request: a missing or wrong verifier.
    let back = s.spa_code(&verifier, "read").await;
    s.redeem_spa(&back["code"], "")
        .await
        .assert_error(400, "invalid_request");
    let wrong = pkce_verifier("another");
    s.redeem_spa(&back["code"], &wrong)
        .await
        .assert_error(400, "invalid_grant");
    // A failed verification does not spend the code.
    s.redeem_spa(&back["code"], &verifier).await.assert_token();
}

#[tokio::test]
async fn a_reused_code_revokes_what_it_issued() {
    let s = start().await;
    let verifier = pkce_verifier("reuse");
    let back = s.spa_code(&verifier, "read offline_access").await;
    let first = s
        .redeem_spa(&back["code"], &verifier)
        .await
        .assert_token()
        .clone();
    let access = first["access_token"].as_str().unwrap();
    assert_eq!(s.introspect(access).await["active"], true);

    s.redeem_spa(&back["code"], &verifier)
        .await
        .assert_error(400, "invalid_grant");
    assert_eq!(s.introspect(access).await["active"], false);
    s.post(
        "/oauth/token",
        None,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", "spa"),
            ("refresh_token", first["refresh_token"].as_str().unwrap()),
        ],
    )
    .await
    .assert_error(400, "invalid_grant");
}

#[tokio::test]
async fn a_code_is_bound_to_its_client_redirect_uri_and_lifetime() {
    let s = start().await;
    let verifier = pkce_verifier("bound");
    let back = s.spa_code(&verifier, "read").await;
    let code = back["code"].as_str();
    // Another client.
    s.post(
        "/oauth/token",
        Some(("web", "web-secret")),
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", SPA_CB),
            ("code_verifier", &verifier),
        ],
    )
    .await
    .assert_error(400, "invalid_grant");
    // Another redirect URI (registered, but not the one of the request).
    s.post(
        "/oauth/token",
        None,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", "spa"),
            ("code", code),
            ("redirect_uri", "http://127.0.0.1/cb"),
            ("code_verifier", &verifier),
        ],
    )
    .await
    .assert_error(400, "invalid_grant");
    // Neither attempt spent it.
    s.redeem_spa(code, &verifier).await.assert_token();

    // 60 seconds on the injected clock: expired.
    let back = s.spa_code(&verifier, "read").await;
    s.clock.advance_secs(61);
    s.redeem_spa(&back["code"], &verifier)
        .await
        .assert_error(400, "invalid_grant");
}

#[tokio::test]
async fn errors_before_a_trusted_redirect_uri_stay_on_the_page() {
    let s = start().await;
    let verifier = pkce_verifier("page");
    for (client, redirect) in [
        ("nobody", SPA_CB),
        ("spa", "https://evil.example/cb"),
        ("spa", "https://spa.example/cb/"),
        ("spa", ""),
        ("", SPA_CB),
    ] {
        let page = Browser::new()
            .get(&s.code_request(client, redirect, &verifier, "read"))
            .await;
        assert_eq!(page.status, 400, "{client} {redirect}");
        assert!(page.location().is_none());
        assert!(
            page.header("content-type")
                .unwrap()
                .starts_with("text/html")
        );
    }
    // response_mode other than query: on the page.
    let url = format!(
        "{}&response_mode=fragment",
        s.code_request("spa", SPA_CB, &verifier, "read")
    );
    let page = Browser::new().get(&url).await;
    assert_eq!(page.status, 400);
    // A bad response_type once the redirect URI is trusted: redirected.
    let url = s
        .code_request("spa", SPA_CB, &verifier, "read")
        .replace("response_type=code", "response_type=token");
    let page = Browser::new().get(&url).await;
    assert_eq!(page.redirect_params()["error"], "unsupported_response_type");
    // prompt=none: no session, so login_required.
    let url = format!(
        "{}&prompt=none",
        s.code_request("spa", SPA_CB, &verifier, "read")
    );
    let page = Browser::new().get(&url).await;
    assert_eq!(page.redirect_params()["error"], "login_required");
    // prompt=login is accepted.
    let url = format!(
        "{}&prompt=login",
        s.code_request("spa", SPA_CB, &verifier, "read")
    );
    assert_eq!(Browser::new().get(&url).await.status, 200);
    // The loopback redirect URI takes any port (RFC 8252 §7.3).
    let page = Browser::new()
        .get(&s.code_request("spa", "http://127.0.0.1:51004/cb", &verifier, "read"))
        .await;
    assert_eq!(page.status, 200);
}

#[tokio::test]
async fn the_sign_in_form_needs_its_csrf_token() {
    let s = start().await;
    let verifier = pkce_verifier("csrf");
    let url = s.code_request("spa", SPA_CB, &verifier, "read");
    let mut b = Browser::new();
    let page = b.get(&url).await;
    let cookie = page.header("set-cookie").unwrap().to_string();
    assert!(cookie.starts_with("gatehouse-csrf="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let creds = [
        ("action", "sign_in"),
        ("username", "alice"),
        ("password", "alice-pw"),
    ];
    // Without the field, with a wrong one, and without the cookie.
    let mut form: Vec<(String, String)> = page
        .hidden_fields()
        .into_iter()
        .filter(|(k, _)| k != "csrf" && k != "action")
        .collect();
    form.extend(creds.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let r = b.post(&s.form_url(), &form).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let forged = b
        .submit(
            &s.form_url(),
            &page,
            &[&creds[..], &[("csrf", "AAAA")]].concat(),
        )
        .await;
    assert_eq!(forged.status, 403);
    assert!(forged.location().is_none());
    let mut other = Browser::new();
    let r = other.submit(&s.form_url(), &page, &creds).await;
    assert_eq!(r.status, 403, "the field alone is not enough");
    // With both: signed in.
    assert_eq!(b.submit(&s.form_url(), &page, &creds).await.status, 302);
}

#[tokio::test]
async fn failed_sign_ins_are_throttled_without_telling_users_apart() {
    let s = start().await;
    let verifier = pkce_verifier("throttle");
    let url = s.code_request("spa", SPA_CB, &verifier, "read");
    let mut b = Browser::new();
    let wrong = s.sign_in(&mut b, &url, "wrong-password").await;
    assert_eq!(wrong.status, 401);
    let page = b.get(&url).await;
    let unknown = b
        .submit(
            &s.form_url(),
            &page,
            &[
                ("action", "sign_in"),
                ("username", "nobody"),
                ("password", "x"),
            ],
        )
        .await;
    assert_eq!(unknown.status, 401);
    let message = |p: &Page| {
        p.body
            .split("role=\"alert\">")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(message(&wrong), message(&unknown));
    let mut last = 0;
    for _ in 0..(gatehouse_auth::FREE_FAILURES_PER_ACCOUNT + 3) {
        last = s.sign_in(&mut b, &url, "wrong-password").await.status;
        if last == 429 {
            break;
        }
    }
    assert_eq!(last, 429);
    // Throttled even with the right password.
    let r = s.sign_in(&mut b, &url, "alice-pw").await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
}

#[tokio::test]
async fn reflected_values_are_escaped_and_pages_are_not_frameable() {
    let s = start().await;
    let verifier = pkce_verifier("markup");
    let challenge = pkce_challenge(&verifier);
    let markup = "<script>alert(1)</script>\"'";
    let url = s.authorize(&[
        ("response_type", "code"),
        ("client_id", "spa"),
        ("redirect_uri", SPA_CB),
        ("state", markup),
        ("scope", "read"),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
    ]);
    let mut b = Browser::new();
    let page = b.get(&url).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<script>"), "{}", page.body);
    assert!(page.body.contains("&#60;script&#62;"), "{}", page.body);
    // It survives the form unchanged, and comes back encoded in the URL.
    assert_eq!(page.hidden("state").unwrap(), markup);
    let wrong = b
        .submit(
            &s.form_url(),
            &page,
            &[
                ("action", "sign_in"),
                ("username", markup),
                ("password", "x"),
            ],
        )
        .await;
    assert!(!wrong.body.contains("<script>"));
    for p in [&page, &wrong] {
        assert_eq!(p.header("x-frame-options"), Some("DENY"));
        assert!(
            p.header("content-security-policy")
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert_eq!(p.header("cache-control"), Some("no-store"));
        assert_eq!(p.header("referrer-policy"), Some("no-referrer"));
    }

    let back = b
        .submit(
            &s.form_url(),
            &page,
            &[
                ("action", "sign_in"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
        )
        .await;
    assert_eq!(back.status, 302);
    assert!(!back.location().unwrap().contains('<'));
    assert_eq!(back.redirect_params()["state"], markup);
}

#[tokio::test]
async fn metadata_lists_the_code_flow() {
    let s = start().await;
    let m = s
        .send(
            s.http
                .get(format!("{}/.well-known/oauth-authorization-server", s.base)),
        )
        .await
        .body;
    assert_eq!(
        m["authorization_endpoint"],
        format!("{}/oauth/authorize", s.base)
    );
    assert_eq!(m["response_types_supported"], serde_json::json!(["code"]));
    assert_eq!(m["response_modes_supported"], serde_json::json!(["query"]));
    assert_eq!(
        m["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    assert_eq!(m["authorization_response_iss_parameter_supported"], true);
    let grants = m["grant_types_supported"].as_array().unwrap();
    assert!(grants.iter().any(|g| g == "authorization_code"));
    let methods = m["token_endpoint_auth_methods_supported"]
        .as_array()
        .unwrap();
    assert!(methods.iter().any(|g| g == "none"));
    assert!(methods.iter().any(|g| g == "client_secret_post"));
}

#[tokio::test]
async fn sign_up_is_off_by_default() {
    let s = start().await;
    let url = s.code_request("spa", SPA_CB, &pkce_verifier("off"), "read");
    let mut b = Browser::new();
    let page = b.get(&url).await;
    assert!(!page.body.contains("screen=sign_up"));
    let r = b
        .submit(
            &s.form_url(),
            &page,
            &[
                ("action", "sign_up"),
                ("username", "mallory"),
                ("password", "a long enough password"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(s.auth.repo().find_user("mallory").await.unwrap().is_none());
}

#[tokio::test]
async fn sign_up_registers_and_continues_the_authorization() {
    let s = start_configured(
        "",
        |a| {
            a.sign_up = true;
            a.sign_up_scopes = vec!["read".into()];
        },
        |_| {},
    )
    .await;
    let verifier = pkce_verifier("signup");
    let url = s.code_request("spa", SPA_CB, &verifier, "read write");
    let mut b = Browser::new();
    let page = b.get(&url).await;
    let link = page
        .body
        .split("href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(gatehouse_testkit::unescape)
        .unwrap();
    assert!(link.contains("screen=sign_up"), "{link}");
    let form = b.get(&format!("{}/oauth/{link}", s.base)).await;
    assert_eq!(form.status, 200);
    assert!(form.body.contains("Create an account"));
    let sign_up = |name: &'static str, password: &'static str| {
        vec![
            ("action", "sign_up"),
            ("username", name),
            ("password", password),
        ]
    };
    // Too short; a name held by a client; then a good one.
    let r = b
        .submit(&s.form_url(), &form, &sign_up("carol", "short-pw"))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("at least 12"), "{}", r.body);
    let r = b
        .submit(
            &s.form_url(),
            &form,
            &sign_up("web", "a long enough password"),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("not available"), "{}", r.body);
    // Without the CSRF cookie: refused like sign-in.
    let r = Browser::new()
        .submit(
            &s.form_url(),
            &form,
            &sign_up("carol", "a long enough password"),
        )
        .await;
    assert_eq!(r.status, 403);
    let r = b
        .submit(
            &s.form_url(),
            &form,
            &sign_up("carol", "a long enough password"),
        )
        .await;
    assert_eq!(r.status, 302, "{}", r.body);
    let back = r.redirect_params();
    let t = s.redeem_spa(&back["code"], &verifier).await;
    // The new user has the sign-up scopes only.
    assert_eq!(t.assert_token()["scope"], "read");
    assert_eq!(
        claims(t.body["access_token"].as_str().unwrap())["sub"],
        "carol"
    );
    // And signs in with the password chosen.
    let url = s.code_request("spa", SPA_CB, &verifier, "read");
    let page = b.get(&url).await;
    let r = b
        .submit(
            &s.form_url(),
            &page,
            &[
                ("action", "sign_in"),
                ("username", "carol"),
                ("password", "a long enough password"),
            ],
        )
        .await;
    assert_eq!(r.status, 302);
    // Refused attempts count against the address: the throttle answers.
    let mut last = 0;
    for _ in 0..(gatehouse_auth::FREE_FAILURES_PER_ADDRESS + 3) {
        last = b
            .submit(&s.form_url(), &form, &sign_up("dave", "short"))
            .await
            .status;
        if last == 429 {
            break;
        }
    }
    assert_eq!(last, 429);
}
