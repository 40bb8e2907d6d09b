//! End-to-end tests: the real router on a real TCP port, a real HTTP client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod atomic;
mod auth;
mod bulk;
mod connect;
mod connections;
mod cors;
mod counts;
mod defaults;
mod differential;
mod executor;
mod foreign;
mod graphql;
mod http;
mod join;
mod membership;
mod oauth1;
mod planned;
mod relation_filters;
mod scalars;
mod spec;
mod subscriptions;
mod timeouts;
mod types_only;
mod variables;

use std::sync::Arc;

use gatehouse_auth::{AuthConfig, AuthServer, ManualClock, MemoryRepo, SystemRandom};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::{AppState, app};
use gatehouse_store::Store;
use gatehouse_testkit::{TestDb, TestServer, example_model};
use serde_json::{Value, json};

#[derive(Debug)]
pub struct Server {
    pub base: String,
    pub store: Store,
    pub graphql: Graphql,
    pub client: reqwest::Client,
    _db: TestDb,
}

pub async fn start() -> Server {
    start_with(GraphqlOptions::default(), 1024 * 1024).await
}

/// GraphQL options for a trusted in-process caller (no authentication layer).
/// A user's Bearer-token caller with `scopes`.
pub fn user(subject: &str, scopes: &[&str]) -> gatehouse_auth::Principal {
    gatehouse_auth::Principal {
        subject: subject.into(),
        subject_kind: Some(gatehouse_auth::IdentityKind::User),
        client_id: None,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        scheme: gatehouse_auth::AuthScheme::Bearer,
        expires_at: None,
        token_id: None,
        claims: Default::default(),
    }
}

pub fn open_options() -> GraphqlOptions {
    GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    }
}

pub async fn start_with(opts: GraphqlOptions, max_body_bytes: usize) -> Server {
    start_in(TestDb::sqlite(), opts, max_body_bytes).await
}

/// The example served from `db`, without authentication.
pub async fn start_in(db: TestDb, opts: GraphqlOptions, max_body_bytes: usize) -> Server {
    start_model(db, example_model(), opts, max_body_bytes).await
}

/// `model` served from `db`, without authentication.
pub async fn start_model(
    db: TestDb,
    model: Arc<gatehouse_schema::Model>,
    mut opts: GraphqlOptions,
    max_body_bytes: usize,
) -> Server {
    opts.auth_required = false;
    let store = db.open(&model).await;
    let graphql = Graphql::new(model, store.clone(), &opts).unwrap();
    let state = AppState {
        graphql: graphql.clone(),
        ready: ready(&store),
        base_path: String::new(),
        max_body_bytes,
        authn: None,
        subscriptions: Default::default(),
        cors: Default::default(),
    };
    let served = TestServer::start(app(state, Vec::new())).await;
    Server {
        base: served.base,
        store,
        graphql,
        client: served.client,
        _db: db,
    }
}

/// `model` over `store`, served over GraphQL and REST without
/// authentication: the server, and the executor (for requests run in
/// process, as a user or planned).
pub async fn serve_graphql_and_rest(
    store: &Store,
    model: Arc<gatehouse_schema::Model>,
) -> (TestServer, Graphql) {
    let opts = GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    };
    let graphql = Graphql::new(model, store.clone(), &opts).unwrap();
    let rest = gatehouse_rest::router(gatehouse_rest::RestState {
        store: store.clone(),
        default_page_size: 50,
        max_page_size: 500,
        max_body_bytes: 1 << 20,
        base_path: String::new(),
        auth_required: false,
    });
    let state = AppState {
        graphql: graphql.clone(),
        ready: ready(store),
        base_path: String::new(),
        max_body_bytes: 1 << 20,
        authn: None,
        subscriptions: Default::default(),
        cors: Default::default(),
    };
    (TestServer::start(app(state, vec![rest])).await, graphql)
}

/// Where the authorization servers' manual clocks start.
pub const NOW: i64 = 1_800_000_000;

/// An authorization server for `issuer` over an in-memory repository, on a
/// manual clock starting at [`NOW`]; register its clients and users with
/// `admin()`.
pub async fn auth_server(issuer: &str) -> (Arc<AuthServer>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_secs(NOW));
    let auth = AuthServer::start(
        AuthConfig::new(issuer),
        Arc::new(MemoryRepo::default()),
        clock.clone(),
        Arc::new(SystemRandom),
        "a test secret of some length",
    )
    .await
    .unwrap();
    (auth, clock)
}

/// The OAuth endpoints of `auth`, answering as `issuer`.
pub fn oauth_router(auth: &Arc<AuthServer>, issuer: &str) -> axum::Router {
    gatehouse_oauth::router(gatehouse_oauth::OAuthState::new(
        auth.clone(),
        gatehouse_oauth::OAuthConfig::new(issuer),
    ))
}

/// The `WWW-Authenticate` challenge of `r` (empty when there is none).
pub fn www(r: &reqwest::Response) -> String {
    gatehouse_testkit::header(r, "www-authenticate").unwrap_or_default()
}

/// A readiness check that pings `store`.
pub fn ready(store: &Store) -> gatehouse_http::ReadinessCheck {
    let store = store.clone();
    Arc::new(move || {
        let s = store.clone();
        Box::pin(async move { s.ping().await.map_err(|e| e.to_string()) })
    })
}

impl Server {
    /// POSTs a GraphQL request and returns the JSON response (any status).
    pub async fn gql(&self, query: &str, variables: Value) -> Value {
        let url = format!("{}/graphql", self.base);
        gatehouse_testkit::graphql(&self.client, &url, None, query, variables).await
    }

    /// `data` of a request that must succeed.
    pub async fn data(&self, query: &str, variables: Value) -> Value {
        let r = self.gql(query, variables).await;
        assert!(r.get("errors").is_none(), "unexpected errors: {r}");
        r["data"].clone()
    }

    /// The `extensions.code` of the first error.
    pub async fn error_code(&self, query: &str, variables: Value) -> String {
        let r = self.gql(query, variables).await;
        r["errors"][0]["extensions"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {r}"))
            .to_string()
    }

    pub async fn author(&self, name: &str, born: Option<&str>) -> String {
        let d = self
            .data(
                "mutation($n: String!, $b: Date) { createAuthor(name: $n, born: $b) { id } }",
                json!({"n": name, "b": born}),
            )
            .await;
        d["createAuthor"]["id"].as_str().unwrap().to_string()
    }

    pub async fn book(&self, input: Value) -> String {
        let d = self
            .data(
                "mutation($i: BookInput!) { createBook(input: $i) { id } }",
                json!({"i": input}),
            )
            .await;
        d["createBook"]["id"].as_str().unwrap().to_string()
    }
}
