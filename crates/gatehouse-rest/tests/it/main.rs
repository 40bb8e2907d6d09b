//! End-to-end tests of the REST API: the real router on a real TCP port over
//! a temporary SQLite store with the example schema, driven by reqwest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod crud;
mod cursors;
mod errors;
mod join;
mod list;
mod nested;
mod openapi;
mod timeouts;

use gatehouse_rest::{RestState, router};
use gatehouse_store::Store;
pub use gatehouse_testkit::header;
use gatehouse_testkit::{TestDb, TestServer, example_model};
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};

pub fn state(store: Store, base_path: &str, max_body_bytes: usize) -> RestState {
    RestState {
        store,
        default_page_size: 50,
        max_page_size: 500,
        max_body_bytes,
        base_path: base_path.to_string(),
        // The router alone, as a trusted in-process caller; authorization
        // is tested through the whole server (`tests/security`).
        auth_required: false,
    }
}

#[derive(Debug)]
pub struct Server {
    /// `http://127.0.0.1:PORT` plus the base path.
    pub base: String,
    pub store: Store,
    pub client: reqwest::Client,
    _db: TestDb,
}

pub async fn start() -> Server {
    start_with("", 1024 * 1024).await
}

pub async fn start_with(base_path: &str, max_body_bytes: usize) -> Server {
    start_in(TestDb::sqlite(), example_model(), base_path, max_body_bytes).await
}

/// `model` served from `db`.
pub async fn start_in(
    db: TestDb,
    model: std::sync::Arc<gatehouse_schema::Model>,
    base_path: &str,
    max_body_bytes: usize,
) -> Server {
    let store = db.open(&model).await;
    let rest = router(state(store.clone(), base_path, max_body_bytes));
    let app = if base_path.is_empty() {
        rest
    } else {
        axum::Router::new().nest(base_path, rest)
    };
    let served = TestServer::start(app).await;
    Server {
        base: served.url(base_path),
        store,
        client: served.client,
        _db: db,
    }
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        let mut req = self.client.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> Response {
        self.send(Method::GET, path, None).await
    }

    /// GET that must answer 200; returns the JSON body.
    pub async fn get_ok(&self, path: &str) -> Value {
        let r = self.get(path).await;
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    /// POST that must answer 201; returns the created row.
    pub async fn create(&self, path: &str, body: Value) -> Value {
        let r = self.send(Method::POST, path, Some(body.clone())).await;
        let status = r.status();
        let out: Value = r.json().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "POST {path} {body}: {out}");
        out
    }

    pub async fn author(&self, name: &str, born: Option<&str>) -> String {
        let a = self
            .create("/v1/authors", json!({"name": name, "born": born}))
            .await;
        a["id"].as_str().unwrap().to_string()
    }

    pub async fn book(&self, title: &str, year: Option<i32>, author: &str) -> String {
        let b = self
            .create(
                "/v1/books",
                json!({"title": title, "year": year, "status": "AVAILABLE", "author": author}),
            )
            .await;
        b["id"].as_str().unwrap().to_string()
    }
}

/// Asserts `r` is an RFC 9457 problem with `status`; returns its body.
pub async fn problem(r: Response, status: u16) -> Value {
    let got = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "body: {text}");
    assert_eq!(ct, "application/problem+json", "body: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["status"], status, "{body}");
    assert!(body["type"].is_string(), "{body}");
    assert!(body["title"].is_string(), "{body}");
    assert!(body["detail"].is_string(), "{body}");
    body
}

/// The ids of a JSON array of rows.
pub fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}
