//! A statement past the statement timeout answers GraphQL with the code
//! `TIMEOUT` and HTTP 503 (as for `SERVICE_UNAVAILABLE`), not an internal
//! error. The fault is the test's own: a row lock held from a second
//! connection.

use std::time::Duration;

use gatehouse_graphql::Graphql;
use gatehouse_http::{AppState, app};
use gatehouse_testkit::{TestDb, TestServer, example_model};
use reqwest::StatusCode;
use serde_json::json;

use crate::{open_options, ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_mutation_past_the_statement_timeout_is_a_503_timeout() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let model = example_model();
    let store = db
        .open_with_statement_timeout(&model, Duration::from_millis(500))
        .await;
    let graphql = Graphql::new(model, store.clone(), &open_options()).unwrap();
    let state = AppState {
        graphql,
        ready: ready(&store),
        base_path: String::new(),
        max_body_bytes: 1024 * 1024,
        authn: None,
        subscriptions: Default::default(),
        cors: Default::default(),
    };
    let served = TestServer::start(app(state, Vec::new())).await;
    let post = |query: serde_json::Value| {
        served
            .client
            .post(format!("{}/graphql", served.base))
            .json(&query)
            .send()
    };
    let created: serde_json::Value =
        post(json!({"query": "mutation { createAuthor(name: \"A\") { id } }"}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let a = created["data"]["createAuthor"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM author WHERE id = '{a}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let r = post(json!({
        "query": "mutation($id: ID!) { updateAuthor(id: $id, name: \"B\") { id name } }",
        "variables": {"id": a},
    }))
    .await
    .unwrap();
    let status = r.status();
    let retry_after = gatehouse_testkit::header(&r, "retry-after");
    let body: serde_json::Value = r.json().await.unwrap();
    admin.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["errors"][0]["extensions"]["code"], "TIMEOUT", "{body}");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{body}"
    );
    store.close().await;
}
