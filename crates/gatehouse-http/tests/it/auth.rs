//! Protecting GraphQL with the issued credentials: Bearer,
//! Basic, anonymous reads, and each refusal with its status and header.

use std::sync::Arc;

use gatehouse_auth::{ManualClock, NewClient};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::authn::Authenticator;
use gatehouse_http::{AppState, IntrospectionConfig, app};
use gatehouse_testkit::{Port, TestDb, example_model, password_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{auth_server, oauth_router, ready, www};

struct Env {
    base: String,
    client: reqwest::Client,
    clock: Arc<ManualClock>,
    _db: TestDb,
}

async fn start(anonymous_read: bool) -> Env {
    start_with(anonymous_read, None).await
}

/// A service whose bearer tokens are checked by `introspection` when given
/// (resource-server-only mode), else by its own authorization server.
async fn start_with(anonymous_read: bool, introspection: Option<IntrospectionConfig>) -> Env {
    let db = TestDb::sqlite();
    let model = example_model();
    let store = db.open(&model).await;
    let port = Port::bind().await;
    let issuer = port.base();
    let (auth, clock) = auth_server(&issuer).await;
    let admin = auth.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "app".into(),
                grants: vec![
                    "password".into(),
                    "client_credentials".into(),
                    "refresh_token".into(),
                    "token-exchange".into(),
                ],
                scopes: vec!["read".into(), "write".into(), "review".into()],
                audiences: vec!["https://reports.example".into()],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user(
            "alice",
            "alice-password",
            &["read".into(), "write".into(), "review".into()],
        )
        .await
        .unwrap();
    admin
        .bootstrap_user("reader", "reader-password", &["read".into()])
        .await
        .unwrap();

    let graphql = Graphql::new(model, store.clone(), &GraphqlOptions::default()).unwrap();
    let state = AppState {
        graphql,
        ready: ready(&store),
        base_path: String::new(),
        max_body_bytes: 1 << 20,
        authn: Some(match introspection {
            Some(i) => Authenticator::with_introspection(auth.clone(), anonymous_read, i).unwrap(),
            None => Authenticator::new(auth.clone(), anonymous_read),
        }),
        subscriptions: Default::default(),
        cors: Default::default(),
    };
    let router = app(state, vec![oauth_router(&auth, &issuer)]);
    let served = port.serve(router);
    Env {
        base: issuer,
        client: served.client,
        clock,
        _db: db,
    }
}

impl Env {
    async fn token(&self, user: &str, password: &str, scope: Option<&str>) -> Value {
        let app = ("app", "app-secret");
        password_token(&self.client, &self.base, app, (user, password), scope).await
    }

    async fn access(&self, user: &str, password: &str, scope: Option<&str>) -> String {
        self.token(user, password, scope).await["access_token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn post(&self, auth: Option<&str>, query: &str) -> reqwest::Response {
        let mut req = self
            .client
            .post(format!("{}/graphql", self.base))
            .json(&json!({"query": query}));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        req.send().await.unwrap()
    }
}

#[tokio::test]
async fn bearer_and_basic_succeed() {
    let env = start(false).await;
    let token = env.access("alice", "alice-password", None).await;
    let r = env
        .post(
            Some(&format!("Bearer {token}")),
            r#"mutation { createAuthor(name: "A") { name } }"#,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"createAuthor": {"name": "A"}}})
    );
    let r = env
        .client
        .post(format!("{}/graphql", env.base))
        .basic_auth("alice", Some("alice-password"))
        .json(&json!({"query": "{ authors { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"authors": [{"name": "A"}]}})
    );
    // Basic is re-checked on every request (the cache does not weaken it).
    for _ in 0..3 {
        let r = env
            .client
            .post(format!("{}/graphql", env.base))
            .basic_auth("alice", Some("alice-password"))
            .json(&json!({"query": "{ authors { name } }"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}

#[tokio::test]
async fn missing_credentials_are_401_without_error_code() {
    let env = start(false).await;
    let r = env.post(None, "{ authors { name } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(www(&r), "Bearer realm=\"gatehouse\"");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    // The GraphiQL page and the health endpoints stay open.
    let r = env
        .client
        .get(format!("{}/graphql", env.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .client
        .get(format!("{}/healthz", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The schema documents need credentials too.
    let r = env
        .client
        .get(format!("{}/graphql/schema.json", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_tokens_are_401_invalid_token() {
    let env = start(false).await;
    // Malformed.
    let r = env
        .post(Some("Bearer not-a-jwt"), "{ authors { name } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(
        www(&r).starts_with("Bearer realm=\"gatehouse\", error=\"invalid_token\""),
        "{}",
        www(&r)
    );
    // Tampered signature.
    let token = env.access("alice", "alice-password", None).await;
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let r = env
        .post(Some(&format!("Bearer {tampered}")), "{ authors { name } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));
    // Expired: the token is valid, then stale once its lifetime has passed.
    let r = env
        .post(Some(&format!("Bearer {token}")), "{ authors { name } }")
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    env.clock.advance_secs(3601);
    let r = env
        .post(Some(&format!("Bearer {token}")), "{ authors { name } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));
}

#[tokio::test]
async fn revoked_tokens_are_refused() {
    let env = start(false).await;
    let t = env.token("alice", "alice-password", None).await;
    let access = t["access_token"].as_str().unwrap();
    let refresh = t["refresh_token"].as_str().unwrap();
    assert_eq!(
        env.post(Some(&format!("Bearer {access}")), "{ authors { id } }")
            .await
            .status(),
        StatusCode::OK
    );
    // Revoking the refresh token revokes the access tokens of its family.
    let r = env
        .client
        .post(format!("{}/oauth/revoke", env.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[("token", refresh)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .post(Some(&format!("Bearer {access}")), "{ authors { id } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));
}

#[tokio::test]
async fn foreign_audience_is_refused() {
    let env = start(false).await;
    let access = env.access("alice", "alice-password", None).await;
    let r = env
        .client
        .post(format!("{}/oauth/token", env.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            ("subject_token", access.as_str()),
            (
                "subject_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            ),
            ("audience", "https://reports.example"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let exchanged: Value = r.json().await.unwrap();
    let other = exchanged["access_token"].as_str().unwrap();
    let r = env
        .post(Some(&format!("Bearer {other}")), "{ authors { id } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));
}

#[tokio::test]
async fn basic_with_a_wrong_password_is_refused() {
    let env = start(false).await;
    for (user, pw) in [
        ("alice", "wrong"),
        ("nobody", "alice-password"),
        ("alice", ""),
    ] {
        let r = env
            .client
            .post(format!("{}/graphql", env.base))
            .basic_auth(user, Some(pw))
            .json(&json!({"query": "{ authors { id } }"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{user}:{pw}");
        assert_eq!(www(&r), "Basic realm=\"gatehouse\"");
    }
    let r = env
        .post(Some("Basic !!!not-base64"), "{ authors { id } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = env.post(Some("Digest x"), "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn scopes_are_checked_per_field() {
    let env = start(false).await;
    let admin = format!(
        "Bearer {}",
        env.access("alice", "alice-password", None).await
    );
    let created: Value = env
        .post(
            Some(&admin),
            r#"mutation { createAuthor(name: "A") { id } }"#,
        )
        .await
        .json()
        .await
        .unwrap();
    let aid = created["data"]["createAuthor"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let book: Value = env.post(Some(&admin), &format!(
        r#"mutation {{ createBook(input: {{title: "T", status: AVAILABLE, author: "{aid}"}}) {{ id }} }}"#)).await.json().await.unwrap();
    let bid = book["data"]["createBook"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // A read-only token: queries work, mutations are FORBIDDEN.
    let reader = format!(
        "Bearer {}",
        env.access("alice", "alice-password", Some("read")).await
    );
    let v: Value = env
        .post(Some(&reader), "{ books { title author { name } } }")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v,
        json!({"data": {"books": [{"title": "T", "author": {"name": "A"}}]}})
    );
    let v: Value = env
        .post(
            Some(&reader),
            r#"mutation { createAuthor(name: "B") { id } }"#,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "FORBIDDEN", "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("`write`"),
        "{v}"
    );

    // @auth(scope: "review") on Mutation.addReview and @auth(write: "review") on Review.
    let writer = format!(
        "Bearer {}",
        env.access("alice", "alice-password", Some("read write"))
            .await
    );
    let add = format!(
        r#"mutation {{ addReview(book: "{bid}", reviewer: "r", stars: 5, postedOn: "2024-01-01") {{ id }} }}"#
    );
    let v: Value = env.post(Some(&writer), &add).await.json().await.unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "FORBIDDEN", "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("`review`"),
        "{v}"
    );
    let v: Value = env.post(Some(&admin), &add).await.json().await.unwrap();
    let rid = v["data"]["addReview"]["id"].as_str().unwrap().to_string();
    let v: Value = env
        .post(
            Some(&writer),
            &format!(r#"mutation {{ removeReview(id: "{rid}") }}"#),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["errors"][0]["extensions"]["code"], "FORBIDDEN",
        "type-level write scope: {v}"
    );

    // A user whose only scope is `read` gets just that, whatever is asked.
    let r = env
        .client
        .post(format!("{}/oauth/token", env.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[
            ("grant_type", "password"),
            ("username", "reader"),
            ("password", "reader-password"),
            ("scope", "write"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "invalid_scope");

    // The schema documents need `read`.
    let no_read = format!(
        "Bearer {}",
        env.access("alice", "alice-password", Some("review")).await
    );
    let r = env
        .client
        .get(format!("{}/graphql/schema.json", env.base))
        .header("authorization", &no_read)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(www(&r).contains("insufficient_scope"));
    let r = env
        .client
        .get(format!("{}/graphql/schema.graphql", env.base))
        .header("authorization", &reader)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_type_the_token_may_not_read_is_refused_for_that_field() {
    let env = start(false).await;
    // Review needs `read` to read; a token with only `review` can't read Books' reviews.
    let admin = format!(
        "Bearer {}",
        env.access("alice", "alice-password", None).await
    );
    let review_only = format!(
        "Bearer {}",
        env.access("alice", "alice-password", Some("review")).await
    );
    let v: Value = env
        .post(Some(&review_only), "{ books { id } }")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "FORBIDDEN", "{v}");
    let v: Value = env
        .post(Some(&admin), "{ books { id } }")
        .await
        .json()
        .await
        .unwrap();
    assert!(v.get("errors").is_none(), "{v}");
}

#[tokio::test]
async fn anonymous_reads_when_configured() {
    let env = start(true).await;
    let r = env.post(None, "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"authors": []}})
    );
    let v: Value = env
        .post(None, r#"mutation { createAuthor(name: "x") { id } }"#)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
        "{v}"
    );
    // A bad token is still refused even though anonymous reads are open.
    let r = env.post(Some("Bearer junk"), "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

/// Resource-server-only mode: a second service validates the first one's
/// tokens through its introspection endpoint, caching active answers.
#[tokio::test]
async fn resource_server_mode_validates_tokens_by_introspection() {
    let authority = start(false).await;
    let rs = |ttl: u64| IntrospectionConfig {
        url: format!("{}/oauth/introspect", authority.base),
        client_id: "app".into(),
        client_secret: "app-secret".into(),
        cache_ttl: std::time::Duration::from_secs(ttl),
        audience: None,
    };
    let uncached = start_with(false, Some(rs(0))).await;
    let cached = start_with(false, Some(rs(60))).await;
    // The authority's clock is the manual one its tokens are stamped with;
    // the resource servers read `exp` against their own (also at NOW).
    let t = authority.token("alice", "alice-password", None).await;
    let access = t["access_token"].as_str().unwrap();
    let bearer = format!("Bearer {access}");
    for env in [&uncached, &cached] {
        let r = env.post(Some(&bearer), "{ authors { id } }").await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    // Scopes come from the introspection answer.
    let reader = authority.access("reader", "reader-password", None).await;
    let r = uncached
        .post(
            Some(&format!("Bearer {reader}")),
            r#"mutation { createAuthor(name: "B") { id } }"#,
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "FORBIDDEN",
        "{body}"
    );

    // A refresh token is active at the authority but is no access token.
    let refresh = t["refresh_token"].as_str().unwrap();
    let r = uncached
        .post(Some(&format!("Bearer {refresh}")), "{ authors { id } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));

    // Revocation: seen at once without a cache, after the TTL with one.
    let r = authority
        .client
        .post(format!("{}/oauth/revoke", authority.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[("token", refresh)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = uncached.post(Some(&bearer), "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"));
    let r = cached.post(Some(&bearer), "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::OK, "served from the positive cache");

    // Garbage is refused; an unreachable authority is 503, never access.
    let r = uncached
        .post(Some("Bearer not-a-token"), "{ authors { id } }")
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let dead = start_with(
        false,
        Some(IntrospectionConfig {
            url: "http://127.0.0.1:9/oauth/introspect".into(),
            ..rs(0)
        }),
    )
    .await;
    let r = dead.post(Some(&bearer), "{ authors { id } }").await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

/// D5: HTTP Basic shares the one failed-login throttle (per user and
/// address): after the free failures, even the right password is refused
/// with 429 from that address, while the user elsewhere is not locked out;
/// the password grant from the same address is throttled too.
#[tokio::test]
async fn basic_logins_are_throttled_per_user_and_address() {
    let env = start(false).await;
    let basic = |client: &reqwest::Client, pw: &str| {
        client
            .post(format!("{}/graphql", env.base))
            .basic_auth("alice", Some(pw))
            .json(&json!({"query": "{ authors { id } }"}))
            .send()
    };
    for _ in 0..=gatehouse_auth::FREE_FAILURES_PER_ACCOUNT {
        let r = basic(&env.client, "wrong").await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let r = basic(&env.client, "alice-password").await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(www(&r), "Basic realm=\"gatehouse\"");
    assert!(r.headers().get("retry-after").is_some());
    // The password grant from the same address shares the throttle.
    let r = env
        .client
        .post(format!("{}/oauth/token", env.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-password"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_some());
    // Another address: not locked out.
    let elsewhere = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 4]))
        .build()
        .unwrap();
    let r = basic(&elsewhere, "alice-password").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The delay passes on the server's clock.
    env.clock.advance_secs(1);
    let r = basic(&env.client, "alice-password").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A server with an author created by alice, and two of her `Authorization`
/// headers: one with every scope she has, one with `read write` only (no
/// `review`). Returns (server, all scopes, author id, `read write`).
async fn author_and_writer() -> (Env, String, String, String) {
    let env = start(false).await;
    let all = format!(
        "Bearer {}",
        env.access("alice", "alice-password", None).await
    );
    let created: Value = env
        .post(Some(&all), r#"mutation { createAuthor(name: "A") { id } }"#)
        .await
        .json()
        .await
        .unwrap();
    let aid = created["data"]["createAuthor"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let writer = format!(
        "Bearer {}",
        env.access("alice", "alice-password", Some("read write"))
            .await
    );
    (env, all, aid, writer)
}

/// A root field the token lacks the scope for fails the whole mutation
/// request: the fields before it are rolled back
/// (`docs/design/transactions.md`).
#[tokio::test]
async fn a_refused_root_field_rolls_back_the_request() {
    let (env, _, aid, writer) = author_and_writer().await;
    // `writer` has `read write` but not `review`: `addReview` is refused.
    let q = format!(
        r#"mutation {{
            b: createBook(input: {{title: "T", status: AVAILABLE, author: "{aid}"}}) {{ id }}
            r: addReview(book: "{aid}", reviewer: "x", stars: 5, postedOn: "2024-01-01") {{ id }}
        }}"#
    );
    let v: Value = env.post(Some(&writer), &q).await.json().await.unwrap();
    assert_eq!(v["data"], Value::Null, "{v}");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["errors"][0]["path"], json!(["r"]), "{v}");
    assert_eq!(
        v["errors"][0]["extensions"]["code"],
        json!("FORBIDDEN"),
        "{v}"
    );
    let books: Value = env
        .post(Some(&writer), "{ books { title } }")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(books, json!({"data": {"books": []}}));
}

/// A nested child of a type the token may not write (`Review` needs
/// `review`) fails the create: neither the book nor its reviews are written.
#[tokio::test]
async fn a_nested_child_needs_its_types_write_scope() {
    let (env, all, aid, writer) = author_and_writer().await;
    let q = format!(
        r#"mutation {{ createBook(input: {{title: "T", status: AVAILABLE, author: "{aid}",
            reviews: [{{reviewer: "x", stars: 5, postedOn: "2024-01-01"}}]}}) {{ id }} }}"#
    );
    let v: Value = env.post(Some(&writer), &q).await.json().await.unwrap();
    assert_eq!(v["data"], Value::Null, "{v}");
    assert_eq!(v["errors"][0]["path"], json!(["createBook"]), "{v}");
    assert_eq!(
        v["errors"][0]["extensions"]["code"],
        json!("FORBIDDEN"),
        "{v}"
    );
    let books: Value = env
        .post(Some(&all), "{ books { title } reviews { stars } }")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(books, json!({"data": {"books": [], "reviews": []}}));
    // With the scope, both are written.
    let v: Value = env.post(Some(&all), &q).await.json().await.unwrap();
    assert!(v.get("errors").is_none(), "{v}");
    let books: Value = env
        .post(Some(&all), "{ books { title reviews { stars } } }")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        books,
        json!({"data": {"books": [{"title": "T", "reviews": [{"stars": 5}]}]}})
    );
}

/// What is routed around authentication on `/graphql` (the GraphiQL page,
/// WebSocket upgrades) and what is not (queries by GET, event streams,
/// other methods, POSTs whatever their headers), each with today's answer.
#[tokio::test]
async fn only_the_graphiql_page_and_upgrades_skip_authentication() {
    let env = start(false).await;
    let graphql = format!("{}/graphql", env.base);
    // A browser gets the page whatever credentials it holds.
    for auth in [
        None,
        Some("Bearer not-a-jwt"),
        Some("Basic !!"),
        Some("Digest x"),
    ] {
        let mut req = env.client.get(&graphql).header("accept", "text/html");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{auth:?}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/html"), "{ct}");
    }
    // A HEAD is dispatched as its GET.
    let r = env
        .client
        .head(&graphql)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .client
        .head(&graphql)
        .query(&[("query", "{ authors { name } }")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A query by GET with a bad token: 401, the token's challenge, a GraphQL body.
    let r = env
        .client
        .get(&graphql)
        .query(&[("query", "{ authors { name } }")])
        .header("accept", "application/json")
        .header("authorization", "Bearer not-a-jwt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(www(&r).contains("invalid_token"), "{}", www(&r));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    // Authentication comes before the request's own checks.
    let r = env.client.get(&graphql).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // An event stream by GET or POST needs credentials.
    let r = env
        .client
        .get(&graphql)
        .query(&[("query", "{ authors { name } }")])
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = env
        .client
        .post(&graphql)
        .header("accept", "text/event-stream")
        .json(&json!({"query": "{ authors { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A POST asking to upgrade is a POST.
    let r = env
        .client
        .post(&graphql)
        .header("upgrade", "websocket")
        .header("accept", "text/html")
        .json(&json!({"query": "{ authors { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Other methods: authenticated first, then 405.
    let r = env.client.put(&graphql).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let token = env.access("alice", "alice-password", None).await;
    let r = env
        .client
        .put(&graphql)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "GET, POST");
    // An unknown path is 404 with or without credentials.
    let r = env
        .client
        .get(format!("{}/graphql/nope", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
