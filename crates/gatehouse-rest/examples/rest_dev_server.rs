//! A throwaway REST server for trying clients and fuzzers against the router:
//! the `examples/library` schema over a temporary SQLite store, seeded with a
//! few authors, books and reviews. No authentication. Local use only.
//!
//! `cargo run -p gatehouse-rest --example rest_dev_server -- 127.0.0.1:8090`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use gatehouse_rest::{RestState, router};
use gatehouse_store::Row;
use gatehouse_testkit::{TestDb, example_model};
use serde_json::json;

fn row(v: serde_json::Value) -> Row {
    v.as_object().cloned().unwrap()
}

#[tokio::main]
async fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".into())
        .parse()
        .expect("an address like 127.0.0.1:8090");
    let model = example_model();
    let db = TestDb::sqlite();
    let store = db.open(&model).await;

    let mut authors = Vec::new();
    for (name, born) in [
        ("Ursula K. Le Guin", Some("1929-10-21")),
        ("Octavia E. Butler", Some("1947-06-22")),
        ("Anonymous", None),
    ] {
        let a = store
            .entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": name, "born": born})),
            )
            .await
            .unwrap();
        authors.push(a["id"].as_str().unwrap().to_string());
    }
    let books = [
        ("A Wizard of Earthsea", 1968, "AVAILABLE", 0),
        ("The Left Hand of Darkness", 1969, "ON_LOAN", 0),
        ("The Dispossessed", 1974, "AVAILABLE", 0),
        ("Kindred", 1979, "AVAILABLE", 1),
        ("Parable of the Sower", 1993, "LOST", 1),
        ("Beowulf", 1000, "AVAILABLE", 2),
    ];
    for (i, (title, year, status, a)) in books.iter().enumerate() {
        let b = store
            .entity("Book")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({
                    "title": title, "year": year, "status": status,
                    "author": authors[*a], "tags": ["classic"],
                    "isbn": format!("978-0-{i:04}"), "rating": 4.5,
                    "published": format!("{year:04}-01-01"),
                })),
            )
            .await
            .unwrap();
        store
            .entity("Review")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({
                    "book": b["id"], "reviewer": "dev", "stars": 5,
                    "postedOn": "2024-01-01",
                })),
            )
            .await
            .unwrap();
    }

    let app = router(RestState {
        store,
        default_page_size: 50,
        max_page_size: 500,
        max_body_bytes: 1024 * 1024,
        base_path: String::new(),
        // A local development server without the authentication layer.
        auth_required: false,
    });
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    println!("listening on http://{addr}/v1/ (OpenAPI at /v1/openapi.json)");
    axum::serve(listener, app).await.unwrap();
}
