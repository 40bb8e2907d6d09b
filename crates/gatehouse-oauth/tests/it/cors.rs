//! `[cors] allowed_origins` on the token and revocation endpoints: a
//! request carrying an `Origin` that is neither allowed nor the issuer's
//! own is refused with 403 `invalid_request` before anything is done
//! (CONTRACT §12); clients that send no `Origin` are served as before.

use gatehouse_oauth::AllowedOrigins;

use super::*;

const APP_ORIGIN: &str = "https://app.example";

async fn start_allowing(origins: &[&str]) -> Server {
    let origins = AllowedOrigins::parse(origins).unwrap();
    start_with("", move |c| c.allowed_origins = origins).await
}

impl Server {
    async fn post_from(
        &self,
        path: &str,
        origin: Option<&str>,
        creds: (&str, &str),
        form: &[(&str, &str)],
    ) -> Reply {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .basic_auth(creds.0, Some(creds.1))
            .form(form);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        self.send(req).await
    }
}

const CLIENT_CREDENTIALS: &[(&str, &str)] = &[("grant_type", "client_credentials")];

#[tokio::test]
async fn token_paths_refuse_origins_that_are_not_allowed() {
    let s = start_allowing(&[APP_ORIGIN]).await;
    let own = s.base.clone();
    for path in [
        "/oauth/token",
        "/oauth2/token",
        "/oauth/access_token",
        "/oauth/refresh_token",
    ] {
        let form: &[(&str, &str)] = if path == "/oauth/refresh_token" {
            &[("grant_type", "refresh_token"), ("refresh_token", "nope")]
        } else {
            CLIENT_CREDENTIALS
        };
        for evil in [
            "https://evil.example",
            "null",
            "https://app.example.evil.com",
        ] {
            let r = s
                .post_from(path, Some(evil), ("app", "app-secret"), form)
                .await;
            r.assert_error(403, "invalid_request");
            assert_eq!(r.header("cache-control"), Some("no-store"), "{path}");
        }
        // No Origin (a server, a CLI), an allowed origin, the issuer's own.
        for origin in [None, Some(APP_ORIGIN), Some(own.as_str())] {
            let r = s.post_from(path, origin, ("app", "app-secret"), form).await;
            if path == "/oauth/refresh_token" {
                r.assert_error(400, "invalid_grant");
            } else {
                r.assert_token();
            }
        }
    }
}

#[tokio::test]
async fn revocation_refuses_origins_that_are_not_allowed() {
    let s = start_allowing(&[APP_ORIGIN]).await;
    let tokens = s.alice("read offline_access").await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let form = [("token", refresh)];
    s.post_from(
        "/oauth/revoke",
        Some("https://evil.example"),
        ("app", "app-secret"),
        &form,
    )
    .await
    .assert_error(403, "invalid_request");
    // Still usable: the refused revocation did nothing.
    let r = s
        .app(
            "/oauth/token",
            &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
        )
        .await;
    let rotated = r.assert_token()["refresh_token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s
        .post_from(
            "/oauth/revoke",
            Some(APP_ORIGIN),
            ("app", "app-secret"),
            &[("token", &rotated)],
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.body);
}

#[tokio::test]
async fn without_allowed_origins_only_the_issuers_own_origin_is_served() {
    let s = start().await;
    let own = s.base.clone();
    s.post_from(
        "/oauth/token",
        Some(APP_ORIGIN),
        ("app", "app-secret"),
        CLIENT_CREDENTIALS,
    )
    .await
    .assert_error(403, "invalid_request");
    s.post_from(
        "/oauth/token",
        Some(&own),
        ("app", "app-secret"),
        CLIENT_CREDENTIALS,
    )
    .await
    .assert_token();
    // Any origin with "*".
    let s = start_allowing(&["*"]).await;
    s.post_from(
        "/oauth/token",
        Some("https://anywhere.example"),
        ("app", "app-secret"),
        CLIENT_CREDENTIALS,
    )
    .await
    .assert_token();
}
