//! OpenID Connect userinfo (`/oauth/userinfo`, CONTRACT §12): it tells
//! exactly the token's own user, only for a live token granted `openid`,
//! and only to pages of allowed origins.

use serde_json::Value;

use crate::{APP, RP, Server, USERS};

const CORS: &str = "[cors]\nallowed_origins = [\"https://app.example\"]\n";

async fn rp_token(server: &Server, user: &str, scope: &str) -> Value {
    server.token_response(RP, user, Some(scope)).await
}

async fn userinfo(server: &Server, token: &str, origin: Option<&str>) -> (u16, Value) {
    let mut req = server.request("GET", "/oauth/userinfo", Some(token));
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn access(t: &Value) -> &str {
    t["access_token"].as_str().unwrap()
}

#[tokio::test]
async fn userinfo_tells_the_tokens_own_user_and_no_other() {
    for server in Server::each_backend("").await {
        let be = server.backend();
        for (user, org) in [("alice", "acme"), ("bob", "globex")] {
            let t = rp_token(&server, user, "openid read").await;
            let (status, body) = userinfo(&server, access(&t), None).await;
            assert_eq!(status, 200, "{be} {user}: {body}");
            assert_eq!(body["sub"], user, "{be}");
            assert_eq!(body["preferred_username"], user, "{be}");
            assert_eq!(body["org"], org, "{be}");
        }
        // Nothing a caller sends picks another user: a second header, a
        // body or query parameter naming someone else are refused, never
        // obeyed.
        let alice = rp_token(&server, "alice", "openid").await;
        let bob = rp_token(&server, "bob", "openid").await;
        let r = server
            .request(
                "GET",
                "/oauth/userinfo?sub=bob&access_token=x",
                Some(access(&alice)),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{be}");
        let r = server
            .request("GET", "/oauth/userinfo?sub=bob", Some(access(&alice)))
            .send()
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["sub"], "alice", "{be}");
        let r = server
            .request("GET", "/oauth/userinfo", None)
            .header("authorization", format!("Bearer {}", access(&alice)))
            .header("authorization", format!("Bearer {}", access(&bob)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{be}");
    }
}

#[tokio::test]
async fn revoked_and_data_scope_tokens_get_no_userinfo() {
    for server in Server::each_backend("").await {
        let be = server.backend();
        let t = rp_token(&server, "alice", "openid read").await;
        assert_eq!(userinfo(&server, access(&t), None).await.0, 200, "{be}");
        // Revoking the refresh token revokes the access tokens of its family.
        let r = server
            .request("POST", "/oauth/revoke", None)
            .basic_auth(RP.0, Some(RP.1))
            .form(&[("token", t["refresh_token"].as_str().unwrap())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{be}");
        let (status, body) = userinfo(&server, access(&t), None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("invalid_token")),
            "{be}"
        );
        // Every user's token with data scopes only, through either client.
        for (user, _, _) in USERS {
            let t = server.token_response(APP, user, None).await;
            let (status, body) = userinfo(&server, access(&t), None).await;
            assert_eq!(status, 403, "{be} {user}: {body}");
            assert_eq!(body["error"], "insufficient_scope", "{be}");
        }
        let t = rp_token(&server, "reader", "read").await;
        assert_eq!(userinfo(&server, access(&t), None).await.0, 403, "{be}");
        // The `openid` scope cannot be smuggled in through a client that
        // is not registered for it: the grant narrows it away.
        let t = server
            .token_response(APP, "alice", Some("openid read"))
            .await;
        assert_eq!(t["scope"], "read", "{be}");
    }
}

#[tokio::test]
async fn userinfo_from_origins_not_listed_is_refused() {
    let server = Server::start(CORS);
    let t = rp_token(&server, "alice", "openid").await;
    for origin in [
        "https://evil.example",
        "null",
        "https://app.example.evil.com",
    ] {
        let (status, body) = userinfo(&server, access(&t), Some(origin)).await;
        assert_eq!(status, 403, "{origin}: {body}");
        assert_eq!(body["error"], "invalid_request", "{origin}");
        assert!(body.get("sub").is_none());
    }
    for origin in [
        None,
        Some("https://app.example"),
        Some(server.base.as_str()),
    ] {
        let (status, body) = userinfo(&server, access(&t), origin).await;
        assert_eq!(status, 200, "{origin:?}: {body}");
    }
}

/// OpenID Connect Core §3.1.3.3 and CONTRACT §12: whenever `openid` is
/// granted the token response carries an `id_token`, the password grant
/// included; without `openid` it carries none.
#[tokio::test]
async fn the_password_grant_with_openid_answers_an_id_token() {
    for server in Server::each_backend("").await {
        let be = server.backend();
        let t = rp_token(&server, "alice", "openid read").await;
        let id = t["id_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{be}: {t}"));
        let c = gatehouse_testkit::jwt_payload(id);
        assert_eq!(c["sub"], "alice", "{be}: {c}");
        assert_eq!(c["aud"], RP.0, "{be}: {c}");
        let at = gatehouse_testkit::jwt_payload(access(&t));
        assert_eq!(c["iss"], at["iss"], "{be}: {c}");
        assert!(
            c["auth_time"].is_i64() && c["at_hash"].is_string(),
            "{be}: {c}"
        );
        let t = rp_token(&server, "alice", "read").await;
        assert!(t.get("id_token").is_none(), "{be}: {t}");
    }
}
