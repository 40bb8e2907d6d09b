//! OAuth 1.0 signed resource requests: GraphQL and REST
//! signed by a consumer alone (acting as the consumer) or with an access
//! token (acting as the approving user), and the refusals with their
//! `WWW-Authenticate: OAuth` challenge.

use std::sync::Arc;

use axum::Extension;
use axum::routing::get;
use gatehouse_auth::oauth1::SignatureMethod;
use gatehouse_auth::{AuthServer, Clock, ManualClock, Principal};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::authn::{Authenticator, RestGuard, rest_layer};
use gatehouse_http::{AppState, app};
use gatehouse_testkit::{Browser, OAuth1Sig, Port, TestDb, example_model, nonce};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{auth_server, oauth_router, ready, www};
const KEY: &str = "printer";
const SECRET: &str = "printer-secret";

struct Env {
    base: String,
    client: reqwest::Client,
    clock: Arc<ManualClock>,
    auth: Arc<AuthServer>,
    _db: TestDb,
}

/// Echoes who the REST layer says is calling.
async fn whoami(Extension(p): Extension<Principal>) -> axum::Json<Value> {
    axum::Json(json!({
        "subject": p.subject,
        "client_id": p.client_id,
        "scopes": p.scopes,
        "claims": p.claims,
        "$sub": p.claim("sub"),
        "$org": p.claim("org"),
    }))
}

async fn start() -> Env {
    let db = TestDb::sqlite();
    let model = example_model();
    let store = db.open(&model).await;
    let port = Port::bind().await;
    let issuer = port.base();
    let (auth, clock) = auth_server(&issuer).await;
    auth.admin()
        .bootstrap_user_with_claims(
            "alice",
            "alice-password",
            &["read".into(), "write".into()],
            &alice_claims(),
        )
        .await
        .unwrap();
    auth.consumers()
        .bootstrap(KEY, SECRET, &["read".into(), "write".into()])
        .await
        .unwrap();
    auth.consumers()
        .bootstrap("reader", "reader-secret", &["read".into()])
        .await
        .unwrap();
    let authn = Authenticator::new(auth.clone(), false);
    let graphql = Graphql::new(model.clone(), store.clone(), &GraphqlOptions::default()).unwrap();
    let state = AppState {
        graphql,
        ready: ready(&store),
        base_path: String::new(),
        max_body_bytes: 1 << 20,
        authn: Some(authn.clone()),
        subscriptions: Default::default(),
        cors: Default::default(),
    };
    let oauth = oauth_router(&auth, &issuer);
    let rest = axum::Router::new()
        .route("/v1/authors", get(whoami).post(whoami))
        .layer(axum::middleware::from_fn_with_state(
            RestGuard { authn },
            rest_layer,
        ));
    let router = app(state, vec![oauth, rest]);
    let served = port.serve(router);
    Env {
        base: issuer,
        client: served.client,
        clock,
        auth,
        _db: db,
    }
}

fn alice_claims() -> gatehouse_auth::Claims {
    json!({"org": "acme", "level": 2})
        .as_object()
        .cloned()
        .unwrap()
}

impl Env {
    fn sig<'a>(&self, token: Option<(&'a str, &'a str)>) -> OAuth1Sig<'a> {
        OAuth1Sig {
            token,
            ..OAuth1Sig::new((KEY, SECRET), self.clock.now())
        }
    }

    /// The whole three-legged flow for alice; returns the access token and secret.
    async fn access_token(&self) -> (String, String) {
        let url = format!("{}/oauth/requestToken", self.base);
        let r = self
            .client
            .post(&url)
            .header("authorization", self.sig(None).header("POST", &url, &[]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let form = form(&r.text().await.unwrap());
        let (rt, rts) = (
            form["oauth_token"].clone(),
            form["oauth_token_secret"].clone(),
        );
        // The owner approves on the approval page (its CSRF cookie and
        // field come with the form).
        let mut browser = Browser::new();
        let page = browser
            .get(&format!("{}/oauth/authorize?oauth_token={rt}", self.base))
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let r = browser
            .submit(
                &format!("{}/oauth/authorize", self.base),
                &page,
                &[("username", "alice"), ("password", "alice-password")],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let verifier = self::form(&r.body)["oauth_verifier"].clone();
        let url = format!("{}/oauth/access_token", self.base);
        let body = [("oauth_verifier", verifier.as_str())];
        let r = self
            .client
            .post(&url)
            .header(
                "authorization",
                self.sig(Some((&rt, &rts))).header("POST", &url, &body),
            )
            .form(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let f = form_of(r).await;
        (f["oauth_token"].clone(), f["oauth_token_secret"].clone())
    }

    async fn graphql(&self, sig: &OAuth1Sig<'_>, query: &str) -> reqwest::Response {
        let url = format!("{}/graphql", self.base);
        self.client
            .post(&url)
            .header("authorization", sig.header("POST", &url, &[]))
            .json(&json!({"query": query}))
            .send()
            .await
            .unwrap()
    }
}

fn form(text: &str) -> std::collections::HashMap<String, String> {
    form_urlencoded::parse(text.as_bytes())
        .into_owned()
        .collect()
}

async fn form_of(r: reqwest::Response) -> std::collections::HashMap<String, String> {
    form(&r.text().await.unwrap())
}

#[tokio::test]
async fn graphql_signed_by_the_consumer_and_by_a_user_token() {
    let env = start().await;
    // The consumer alone: its own identity and scopes (read, write).
    let r = env
        .graphql(
            &env.sig(None),
            r#"mutation { createAuthor(name: "A") { name } }"#,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"createAuthor": {"name": "A"}}})
    );
    // With alice's access token.
    let (at, ats) = env.access_token().await;
    let r = env
        .graphql(&env.sig(Some((&at, &ats))), "{ authors { name } }")
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"authors": [{"name": "A"}]}})
    );
    // PLAINTEXT works too.
    let mut sig = env.sig(Some((&at, &ats)));
    sig.method = SignatureMethod::Plaintext;
    let r = env.graphql(&sig, "{ authors { name } }").await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn rest_signed_requests_act_for_the_consumer_or_the_user() {
    let env = start().await;
    let url = format!("{}/v1/authors", env.base);
    // Query parameters are signed: the consumer alone.
    let q = [("page", "2")];
    let r = env
        .client
        .get(&url)
        .query(&q)
        .header("authorization", env.sig(None).header("GET", &url, &q))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["subject"], KEY);
    assert_eq!(v["client_id"], KEY);
    assert_eq!(v["scopes"], json!(["read", "write"]));
    // A consumer is no user: no custom claims, and no `$sub` (its key
    // could be a user's name).
    assert_eq!(
        (v["claims"].clone(), v["$org"].clone(), v["$sub"].clone()),
        (json!({}), Value::Null, Value::Null)
    );

    // With the access token: alice, with the token's scopes.
    let (at, ats) = env.access_token().await;
    let r = env
        .client
        .get(&url)
        .header(
            "authorization",
            env.sig(Some((&at, &ats))).header("GET", &url, &[]),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["subject"], "alice");
    assert_eq!(v["client_id"], KEY);
    assert_eq!(v["scopes"], json!(["read", "write"]));
    // The user's claims, from the user record.
    assert_eq!(v["claims"], json!(alice_claims()));
    assert_eq!(
        (v["$sub"].clone(), v["$org"].clone()),
        (json!("alice"), json!("acme"))
    );
    // Read on every request: a change shows at once.
    env.auth
        .admin()
        .set_user_claims(
            "alice",
            &json!({"org": "globex"}).as_object().cloned().unwrap(),
        )
        .await
        .unwrap();
    let r = env
        .client
        .get(&url)
        .header(
            "authorization",
            env.sig(Some((&at, &ats))).header("GET", &url, &[]),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["claims"],
        json!({"org": "globex"})
    );

    // Protocol parameters in the query string instead of the header.
    let sig = env.sig(None);
    let header = sig.header("GET", &url, &[]);
    let params: Vec<(String, String)> = gatehouse_auth::oauth1::parse_authorization(&header)
        .unwrap()
        .unwrap();
    let r = env.client.get(&url).query(&params).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // A form body is signed too.
    let body = [("name", "B")];
    let r = env
        .client
        .post(&url)
        .header("authorization", env.sig(None).header("POST", &url, &body))
        .form(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = env
        .client
        .post(&url)
        .header("authorization", env.sig(None).header("POST", &url, &body))
        .form(&[("name", "C")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn signed_requests_are_refused_with_an_oauth_challenge() {
    let env = start().await;
    let url = format!("{}/v1/authors", env.base);
    let get = |auth: String| env.client.get(&url).header("authorization", auth).send();

    // Wrong secret.
    let mut sig = env.sig(None);
    sig.consumer = (KEY, "wrong");
    let r = get(sig.header("GET", &url, &[])).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(www(&r), "OAuth realm=\"gatehouse\"");

    // Unknown consumer.
    let mut sig = env.sig(None);
    sig.consumer = ("nobody", SECRET);
    let r = get(sig.header("GET", &url, &[])).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Replayed nonce.
    let sig = env.sig(None);
    let h = sig.header("GET", &url, &[]);
    assert_eq!(get(h.clone()).await.unwrap().status(), StatusCode::OK);
    let r = get(h).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(www(&r), "OAuth realm=\"gatehouse\"");

    // Stale timestamp.
    let mut sig = env.sig(None);
    sig.timestamp -= 301;
    let r = get(sig.header("GET", &url, &[])).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Signed for another URL (another path).
    let other = format!("{}/v1/books", env.base);
    let r = get(env.sig(None).header("GET", &other, &[])).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // An unknown access token.
    let r = get(env.sig(Some(("nope", "nope"))).header("GET", &url, &[]))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // Missing protocol parameter: 400.
    let r = get("OAuth oauth_consumer_key=\"printer\"".into())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(www(&r), "OAuth realm=\"gatehouse\"");

    // GraphQL: the same refusal as a GraphQL error body.
    let mut sig = env.sig(None);
    sig.consumer = (KEY, "wrong");
    let r = env.graphql(&sig, "{ authors { name } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(www(&r), "OAuth realm=\"gatehouse\"");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
}

#[tokio::test]
async fn scopes_limit_signed_requests() {
    let env = start().await;
    // A consumer limited to read may query but not mutate.
    let sig = OAuth1Sig::new(("reader", "reader-secret"), env.clock.now());
    let r = env
        .graphql(&sig, r#"mutation { createAuthor(name: "A") { name } }"#)
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["extensions"]["code"], "FORBIDDEN", "{v}");
    // Removing the consumer ends its access.
    env.auth.consumers().remove("reader").await.unwrap();
    let sig = OAuth1Sig {
        nonce: nonce(),
        ..sig
    };
    let r = env.graphql(&sig, "{ authors { name } }").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

/// The same claims reach the resource side whatever the scheme: a bearer
/// token carries the user's claims, HTTP Basic reads them from the user
/// record on every request.
#[tokio::test]
async fn bearer_and_basic_callers_carry_the_users_claims() {
    let env = start().await;
    let url = format!("{}/v1/authors", env.base);
    env.auth
        .admin()
        .bootstrap_client(
            &gatehouse_auth::NewClient {
                client_id: "app".into(),
                grants: vec!["password".into(), "client_credentials".into()],
                scopes: vec!["read".into()],
                audiences: vec![],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    let app = env
        .auth
        .authenticate_client("app", "app-secret")
        .await
        .unwrap();
    let token = env
        .auth
        .password_grant(
            &app,
            Some("alice"),
            Some("alice-password"),
            None,
            false,
            None,
        )
        .await
        .unwrap()
        .access_token;
    let whoami = |auth: reqwest::RequestBuilder| async move {
        let r = auth.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().await.unwrap()
    };
    let v = whoami(env.client.get(&url).bearer_auth(&token)).await;
    assert_eq!(v["claims"], json!(alice_claims()));
    assert_eq!(
        (v["$sub"].clone(), v["$org"].clone()),
        (json!("alice"), json!("acme"))
    );
    let v = whoami(
        env.client
            .get(&url)
            .basic_auth("alice", Some("alice-password")),
    )
    .await;
    assert_eq!(v["claims"], json!(alice_claims()));
    assert_eq!(v["$org"], "acme");

    // Client credentials: the client is the subject, with no custom claims.
    let token = env
        .auth
        .client_credentials_grant(&app, None)
        .await
        .unwrap()
        .access_token;
    let v = whoami(env.client.get(&url).bearer_auth(&token)).await;
    assert_eq!(
        (v["subject"].clone(), v["claims"].clone()),
        (json!("app"), json!({}))
    );
    // A client acting for itself is no user: no `$sub` for row policies.
    assert_eq!(v["$sub"], Value::Null);
    assert_eq!(v["$org"], Value::Null);
}

/// Refused signatures of resource requests are throttled per consumer and
/// address (429 once throttled), but a request that verifies still passes.
#[tokio::test]
async fn refused_signed_requests_are_throttled_but_never_a_valid_one() {
    let env = start().await;
    let url = format!("{}/v1/authors", env.base);
    let mut statuses = Vec::new();
    for _ in 0..=gatehouse_auth::FREE_FAILURES_PER_ACCOUNT + 1 {
        let forged = OAuth1Sig::new((KEY, "not-the-secret"), env.clock.now());
        let r = env
            .client
            .get(&url)
            .header("authorization", forged.header("GET", &url, &[]))
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses.first(), Some(&401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let r = env
        .client
        .get(&url)
        .header("authorization", env.sig(None).header("GET", &url, &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
