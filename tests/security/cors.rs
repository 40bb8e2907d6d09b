//! CORS (`[cors] allowed_origins`, CONTRACT §12): preflights are answered
//! before authentication for listed origins only, and no other spelling of
//! a listed origin (`null`, a suffix domain, an explicit default port, a
//! trailing slash, another scheme or case) gets a CORS header or may call
//! the token endpoints.

use reqwest::header::HeaderMap;
use serde_json::json;

use crate::{APP, Server, USERS};

const APP_ORIGIN: &str = "https://app.example";
const CORS: &str =
    "[cors]\nallowed_origins = [\"https://app.example\", \"http://localhost:5173\"]\n";

/// Spellings an attacker might hope match `https://app.example`.
const NOT_ALLOWED: &[&str] = &[
    "https://evil.example",
    "null",
    "https://app.example.evil.com",
    "https://evil-app.example",
    "https://app.example:443",
    "https://app.example/",
    "https://app.example/spa",
    "http://app.example",
    "HTTPS://APP.EXAMPLE",
    "https://app.example.",
    "https://app.example, https://evil.example",
];

/// Every family of endpoint a browser app calls.
fn browser_paths(book: &str) -> Vec<String> {
    [
        "/graphql",
        "/v1/books",
        "/oauth/token",
        "/oauth2/token",
        "/oauth/access_token",
        "/oauth/refresh_token",
        "/oauth/revoke",
        "/oauth/introspect",
        "/.well-known/jwks.json",
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/oauth/userinfo",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([
        format!("/v1/books/{book}"),
        format!("/v1/books/{book}/author"),
    ])
    .collect()
}

async fn preflight(server: &Server, path: &str, origin: &str) -> (u16, HeaderMap) {
    let r = server
        .request("OPTIONS", path, None)
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.headers().clone())
}

fn cors_headers(headers: &HeaderMap) -> Vec<String> {
    headers
        .keys()
        .map(|k| k.as_str().to_string())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn preflights_from_listed_origins_are_answered_without_credentials() {
    let server = Server::start(CORS);
    let f = server.fixture().await;
    for path in browser_paths(&f.book) {
        for origin in [APP_ORIGIN, "http://localhost:5173"] {
            let (status, h) = preflight(&server, &path, origin).await;
            assert!((200..300).contains(&status), "{path}: {status}");
            assert_eq!(header(&h, "access-control-allow-origin"), origin, "{path}");
            let methods = header(&h, "access-control-allow-methods").to_lowercase();
            assert!(
                methods.contains("post") && methods.contains("get"),
                "{path}: {methods}"
            );
            let allowed = header(&h, "access-control-allow-headers").to_lowercase();
            for name in ["authorization", "content-type", "accept", "x-request-id"] {
                assert!(allowed.contains(name), "{path}: {allowed}");
            }
            assert_eq!(header(&h, "access-control-max-age"), "600", "{path}");
            // Bearer tokens need no credentials mode: cookies are never invited.
            assert!(
                h.get("access-control-allow-credentials").is_none(),
                "{path}"
            );
            assert!(
                header(&h, "vary").to_lowercase().contains("origin"),
                "{path}"
            );
        }
    }
}

#[tokio::test]
async fn origins_not_listed_get_no_cors_header_whatever_their_spelling() {
    let server = Server::start(CORS);
    let f = server.fixture().await;
    let token = server.token("reader").await;
    for path in browser_paths(&f.book) {
        for origin in NOT_ALLOWED {
            let (status, h) = preflight(&server, &path, origin).await;
            assert!(cors_headers(&h).is_empty(), "{path} {origin}: {h:?}");
            assert!(!(200..300).contains(&status), "{path} {origin}: {status}");
        }
    }
    // Actual requests: served as any request without an Origin would be
    // (the browser then hides the answer), with no CORS header.
    for origin in NOT_ALLOWED {
        let r = server
            .request("GET", "/v1/books", Some(&token))
            .header("origin", *origin)
            .send()
            .await
            .unwrap();
        assert!(
            cors_headers(r.headers()).is_empty(),
            "{origin}: {:?}",
            r.headers()
        );
    }
}

#[tokio::test]
async fn cross_origin_calls_with_a_bearer_token_can_read_the_answer() {
    let server = Server::start(CORS);
    server.fixture().await;
    let token = server.token("reader").await;
    let r = server
        .request("GET", "/v1/books", Some(&token))
        .header("origin", APP_ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert_eq!(header(h, "access-control-allow-origin"), APP_ORIGIN);
    let exposed = header(h, "access-control-expose-headers").to_lowercase();
    for name in [
        "link",
        "x-total-count",
        "location",
        "www-authenticate",
        "retry-after",
        "x-request-id",
    ] {
        assert!(exposed.contains(name), "{exposed}");
    }
    let r = server
        .request("POST", "/graphql", Some(&token))
        .header("origin", APP_ORIGIN)
        .json(&json!({"query": "{ books { title } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(r.headers(), "access-control-allow-origin"),
        APP_ORIGIN
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["data"]["books"].is_array(), "{body}");
    // A refusal is readable too, so the page can tell why.
    let r = server
        .request("POST", "/graphql", Some("not-a-token"))
        .header("origin", APP_ORIGIN)
        .json(&json!({"query": "{ books { title } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        header(r.headers(), "access-control-allow-origin"),
        APP_ORIGIN
    );
}

async fn password_grant(server: &Server, origin: Option<&str>) -> (u16, serde_json::Value) {
    let (user, password, _) = USERS[0];
    let mut req = server
        .request("POST", "/oauth/token", None)
        .basic_auth(APP.0, Some(APP.1))
        .form(&[
            ("grant_type", "password"),
            ("username", user),
            ("password", password),
        ]);
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn token_requests_from_origins_not_listed_are_refused() {
    let server = Server::start(CORS);
    for origin in NOT_ALLOWED {
        let (status, body) = password_grant(&server, Some(origin)).await;
        assert_eq!(status, 403, "{origin}: {body}");
        assert_eq!(body["error"], "invalid_request", "{origin}: {body}");
        assert!(body.get("access_token").is_none());
    }
    // No Origin (servers, CLIs), a listed origin, and the issuer's own.
    for origin in [None, Some(APP_ORIGIN), Some(server.base.as_str())] {
        let (status, body) = password_grant(&server, origin).await;
        assert_eq!(status, 200, "{origin:?}: {body}");
    }
}

#[tokio::test]
async fn without_cors_configured_no_origin_gets_cors_headers() {
    let server = Server::start("");
    for origin in [APP_ORIGIN, "null"] {
        let (_, h) = preflight(&server, "/graphql", origin).await;
        assert!(cors_headers(&h).is_empty(), "{origin}: {h:?}");
        let (status, body) = password_grant(&server, Some(origin)).await;
        assert_eq!(status, 403, "{origin}: {body}");
    }
    let (status, body) = password_grant(&server, None).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn any_origin_is_answered_with_a_wildcard_and_never_credentials() {
    let server = Server::start("[cors]\nallowed_origins = [\"*\"]\n");
    let (status, h) = preflight(&server, "/graphql", "https://anywhere.example").await;
    assert!((200..300).contains(&status), "{status}");
    assert_eq!(header(&h, "access-control-allow-origin"), "*");
    assert!(h.get("access-control-allow-credentials").is_none());
    // `*` does not cover `Authorization` in Access-Control-Allow-Headers:
    // it is listed by name.
    assert!(
        header(&h, "access-control-allow-headers")
            .to_lowercase()
            .contains("authorization")
    );
}
