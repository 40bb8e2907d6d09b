//! End-to-end tests: the real router on a real TCP port, a real HTTP client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auth;
mod graphql;
mod http;
mod oauth1;
mod planned;
mod spec;
mod subscriptions;

use std::sync::Arc;

use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::{AppState, app};
use gatehouse_schema::{Source, load_sources};
use gatehouse_store::{Store, StoreOptions};
use serde_json::{Value, json};

pub const EXAMPLE: &[(&str, &str)] = &[
    (
        "types.graphql",
        include_str!("../../../../examples/library/schema/types.graphql"),
    ),
    (
        "reviews.graphql",
        include_str!("../../../../examples/library/schema/reviews.graphql"),
    ),
    (
        "inputs.graphql",
        include_str!("../../../../examples/library/schema/inputs.graphql"),
    ),
    (
        "private.graphql",
        include_str!("../../../../examples/library/schema/private.graphql"),
    ),
    (
        "root.graphql",
        include_str!("../../../../examples/library/schema/root.graphql"),
    ),
];

#[derive(Debug)]
pub struct Server {
    pub base: String,
    pub store: Store,
    pub graphql: Graphql,
    pub client: reqwest::Client,
    _dir: Option<tempfile::TempDir>,
}

pub async fn start() -> Server {
    start_with(GraphqlOptions::default(), 1024 * 1024).await
}

/// GraphQL options for a trusted in-process caller (no authentication layer).
pub fn open_options() -> GraphqlOptions {
    GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    }
}

pub async fn start_with(opts: GraphqlOptions, max_body_bytes: usize) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let mut s = start_at(&url, opts, max_body_bytes).await;
    s._dir = Some(dir);
    s
}

/// `GATEHOUSE_TEST_POSTGRES_URL`, when set. Panics when CI requires the
/// PostgreSQL run (`GATEHOUSE_REQUIRE_POSTGRES=1`) but did not configure it.
pub fn pg_url() -> Option<String> {
    let url = std::env::var("GATEHOUSE_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty());
    if url.is_none() && std::env::var("GATEHOUSE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
        panic!("GATEHOUSE_REQUIRE_POSTGRES=1 but GATEHOUSE_TEST_POSTGRES_URL is not set");
    }
    url
}

/// A new, empty PostgreSQL database named `prefix_<uuid>` on the test
/// server, as a URL; `None` when no PostgreSQL is configured.
pub async fn new_postgres_database(prefix: &str) -> Option<String> {
    use sqlx::Connection;
    let admin = pg_url()?;
    let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut c)
        .await
        .unwrap();
    match admin.rfind('/') {
        Some(i) => Some(format!("{}/{name}", &admin[..i])),
        None => panic!("no database in {admin}"),
    }
}

/// Drops a database [`new_postgres_database`] made (closing what is still
/// connected to it).
pub async fn drop_postgres_database(url: &str) {
    use sqlx::Connection;
    let (Some(admin), Some(name)) = (pg_url(), url.rsplit('/').next()) else {
        return;
    };
    let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut c)
    .await;
}

/// The example served from the store at `url`, without authentication.
pub async fn start_at(url: &str, mut opts: GraphqlOptions, max_body_bytes: usize) -> Server {
    opts.auth_required = false;
    let sources: Vec<Source> = EXAMPLE
        .iter()
        .map(|(p, t)| Source {
            path: p.to_string(),
            text: t.to_string(),
        })
        .collect();
    let model = Arc::new(load_sources(&sources).unwrap());
    let store = Store::connect(url, model.clone(), StoreOptions::default())
        .await
        .unwrap();
    let graphql = Graphql::new(model, store.clone(), &opts).unwrap();
    let ready_store = store.clone();
    let state = AppState {
        graphql: graphql.clone(),
        ready: Arc::new(move || {
            let s = ready_store.clone();
            Box::pin(async move { s.ping().await.map_err(|e| e.to_string()) })
        }),
        base_path: String::new(),
        max_body_bytes,
        authn: None,
        subscriptions: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app(state, Vec::new())).await.unwrap();
    });
    Server {
        base: format!("http://{addr}"),
        store,
        graphql,
        client: reqwest::Client::new(),
        _dir: None,
    }
}

impl Server {
    /// POSTs a GraphQL request and returns the JSON response (any status).
    pub async fn gql(&self, query: &str, variables: Value) -> Value {
        self.client
            .post(format!("{}/graphql", self.base))
            .json(&json!({"query": query, "variables": variables}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
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
