//! Store benchmark over 100,000 rows, on SQLite and (when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set) PostgreSQL.
//!
//! ```text
//! cargo run --release -p gatehouse-store --example bench
//! GATEHOUSE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p gatehouse-store --example bench
//! ```
//!
//! Measures: listing 10 rows by an indexed filter (p50/p99), single-row insert
//! transactions per second (each one committed durably before the next), and
//! a relation batch load of 100 parents (one statement).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_schema::{Model, Source};
use gatehouse_store::{Filter, ListQuery, Row, Store, StoreOptions};
use serde_json::json;

const SDL: &str = r#"
type Query { books: [Book!]! }
enum Status { AVAILABLE ON_LOAN LOST }
type Author { id: ID! name: String! @unique books: [Book!]! }
type Book { id: ID! title: String! @index year: Int status: Status! author: Author! }
"#;

const AUTHORS: usize = 1_000;
const BOOKS: usize = 100_000;

fn model() -> Arc<Model> {
    let src = [Source {
        path: "bench.graphql".into(),
        text: SDL.into(),
    }];
    Arc::new(gatehouse_schema::load_sources(&src).expect("bench schema"))
}

fn row(v: serde_json::Value) -> Row {
    v.as_object().cloned().unwrap_or_default()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

async fn run(label: &str, url: &str) {
    println!("\n## {label}\n");
    let store = Store::connect(url, model(), StoreOptions::default())
        .await
        .unwrap();

    // Load: authors, then 100,000 books (100 per author), several writers at once.
    let t = Instant::now();
    let mut authors = Vec::with_capacity(AUTHORS);
    for i in 0..AUTHORS {
        let a = store
            .entity("Author")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": format!("author-{i}")})),
            )
            .await
            .unwrap();
        authors.push(a["id"].as_str().unwrap().to_string());
    }
    let authors = Arc::new(authors);
    let writers = 8;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let authors = authors.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..BOOKS).step_by(writers) {
                let status = ["AVAILABLE", "ON_LOAN", "LOST"][i % 3];
                let r = row(json!({
                    "title": format!("title-{i}"),
                    "year": 1900 + (i % 120) as i64,
                    "status": status,
                    "author": authors[i % AUTHORS],
                }));
                store
                    .entity("Book")
                    .unwrap()
                    .insert(&gatehouse_store::AccessContext::system(), r)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let load = t.elapsed();
    println!(
        "- load: {} authors + {} books in {:.1} s ({:.0} rows/s, {writers} concurrent writers, one transaction per row)",
        AUTHORS,
        BOOKS,
        load.as_secs_f64(),
        (AUTHORS + BOOKS) as f64 / load.as_secs_f64()
    );

    // list 10 rows by an indexed filter (the author reference), default order.
    let mut times = Vec::new();
    for i in 0..5_000 {
        let q = ListQuery {
            filter: Some(Filter::eq("author", authors[(i * 7919) % AUTHORS].clone())),
            limit: Some(10),
            ..Default::default()
        };
        let t = Instant::now();
        let rows = store
            .entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q)
            .await
            .unwrap()
            .rows
            .into_rows();
        times.push(t.elapsed());
        assert_eq!(rows.len(), 10);
    }
    times.sort();
    println!(
        "- list 10 rows by indexed filter (`author = X`, limit 10; 5,000 runs): p50 {}, p99 {}",
        us(pct(&times, 0.5)),
        us(pct(&times, 0.99))
    );

    // the same by an indexed text column, one row
    let mut times = Vec::new();
    for i in 0..5_000 {
        let q = ListQuery {
            filter: Some(Filter::eq("title", format!("title-{}", (i * 7919) % BOOKS))),
            limit: Some(10),
            ..Default::default()
        };
        let t = Instant::now();
        let rows = store
            .entity("Book")
            .unwrap()
            .list(&gatehouse_store::AccessContext::system(), &q)
            .await
            .unwrap()
            .rows
            .into_rows();
        times.push(t.elapsed());
        assert_eq!(rows.len(), 1);
    }
    times.sort();
    println!(
        "- list by indexed `title = X` (1 row; 5,000 runs): p50 {}, p99 {}",
        us(pct(&times, 0.5)),
        us(pct(&times, 0.99))
    );

    // single-row insert transactions, one after the other
    let n = 5_000;
    let t = Instant::now();
    for i in 0..n {
        let r = row(
            json!({"title": format!("seq-{i}"), "status": "LOST", "author": authors[i % AUTHORS]}),
        );
        store
            .entity("Book")
            .unwrap()
            .insert(&gatehouse_store::AccessContext::system(), r)
            .await
            .unwrap();
    }
    let el = t.elapsed();
    println!(
        "- single-row insert transactions, sequential ({n}): {:.0} tx/s ({} each)",
        n as f64 / el.as_secs_f64(),
        us(el / n as u32)
    );

    // ... and from 8 concurrent callers
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8usize {
        let store = store.clone();
        let authors = authors.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..n / 8 {
                                let r = row(json!({"title": format!("par-{w}-{i}"), "status": "LOST", "author": authors[i % AUTHORS]}));
                store.entity("Book").unwrap().insert(&gatehouse_store::AccessContext::system(), r).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let el = t.elapsed();
    println!(
        "- single-row insert transactions, 8 concurrent callers ({n}): {:.0} tx/s",
        n as f64 / el.as_secs_f64()
    );

    // relation batch load: children of 100 parents in one statement
    for (what, q) in [
        (
            "first 10 per parent by year desc (ROW_NUMBER window)",
            ListQuery {
                order: vec![gatehouse_store::OrderBy::desc("year")],
                limit: Some(10),
                ..Default::default()
            },
        ),
        ("all ~105 per parent (no paging)", ListQuery::default()),
    ] {
        let mut times = Vec::new();
        let mut rows = 0;
        let books = store.entity("Book").unwrap();
        for i in 0..50 {
            let parents: Vec<String> = (0..100)
                .map(|j| authors[(i * 100 + j) % AUTHORS].clone())
                .collect();
            let before = store.statements();
            let t = Instant::now();
            let got = books
                .children(
                    &gatehouse_store::AccessContext::system(),
                    "author",
                    &parents,
                    &q,
                )
                .await
                .unwrap();
            times.push(t.elapsed());
            assert_eq!(store.statements() - before, 1);
            rows = got.rows.rows.len();
        }
        times.sort();
        println!(
            "- relation batch load, 100 parents, {what}: {rows} rows, 1 statement, p50 {}, p99 {}",
            us(pct(&times, 0.5)),
            us(pct(&times, 0.99))
        );
    }
    store.close().await;
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    run(
        "SQLite (WAL, synchronous=NORMAL: the default)",
        &format!("sqlite://{}", path.display()),
    )
    .await;

    if let Ok(admin) = std::env::var("GATEHOUSE_TEST_POSTGRES_URL") {
        let name = format!("gh_bench_{}", uuid::Uuid::now_v7().simple());
        gatehouse_testkit::pg_execute(&admin, &format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap();
        let base = admin.split('?').next().unwrap_or(&admin);
        let prefix = base.rsplit_once('/').map(|(p, _)| p).unwrap_or(base);
        run("PostgreSQL", &format!("{prefix}/{name}")).await;
        gatehouse_testkit::pg_execute(&admin, &format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
            .await
            .unwrap();
    }
}
