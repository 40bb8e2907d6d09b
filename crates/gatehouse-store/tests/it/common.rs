//! Fixtures: a fresh store per backend per test.

use std::collections::HashMap;

use gatehouse_store::{AccessContext, ListQuery, Row, Store, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

/// The schema most tests use.
pub const SDL: &str = r#"
type Query { authors: [Author!]! books: [Book!]! reviews: [Review!]! }
type Author {
  id: ID!
  name: String! @unique
  born: Date
  books: [Book!]!
}
enum Status { AVAILABLE ON_LOAN LOST }
type Book {
  id: ID!
  title: String! @index
  year: Int
  isbn: String @unique
  status: Status!
  tags: [String!]
  scores: [Int!]
  rating: Float
  published: Date
  available: Boolean
  author: Author!
  reviews: [Review!]!
}
type Review {
  id: ID!
  book: Book!
  stars: Int!
  body: String
}
"#;

/// A caller with `scopes` and the claims of `claims` (a JSON object).
pub fn caller_with(scopes: &[&str], claims: Value) -> AccessContext {
    AccessContext::caller(
        scopes.iter().map(|s| s.to_string()).collect(),
        claims.as_object().cloned().unwrap_or_default(),
        false,
    )
}

pub fn row(v: Value) -> Row {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// A store with the default schema on every backend.
pub async fn stores() -> Vec<(TestDb, Store)> {
    let mut out = Vec::new();
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        out.push((db, s));
    }
    out
}

/// Inserts an author and returns its id.
pub async fn author(s: &Store, name: &str) -> String {
    let r = s
        .entity("Author")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            row(json!({"name": name})),
        )
        .await
        .expect("insert author");
    r["id"].as_str().expect("id").to_string()
}

/// Inserts a book with the given extra fields and returns it.
pub async fn book(s: &Store, author: &str, title: &str, extra: Value) -> Row {
    let mut r = row(json!({"title": title, "status": "AVAILABLE", "author": author}));
    if let Value::Object(m) = extra {
        r.extend(m);
    }
    s.entity("Book")
        .unwrap()
        .insert(&gatehouse_store::AccessContext::system(), r)
        .await
        .expect("insert book")
}

pub fn ids(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_string())
        .collect()
}

pub fn titles(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| r["title"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Runs the body once per backend with `$s` bound to a fresh store.
#[macro_export]
macro_rules! conformance {
    ($name:ident, |$db:ident, $s:ident| $body:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            for ($db, $s) in $crate::common::stores().await {
                eprintln!("{}: {}", stringify!($name), $db.backend());
                #[allow(unused_variables)]
                let $db = &$db;
                $body
                $s.close().await;
            }
        }
    };
}

/// The rows of `entity` with `ids`, by id (the system caller).
pub async fn by_id(s: &Store, entity: &str, ids: &[String]) -> HashMap<String, Row> {
    let set = s
        .entity(entity)
        .unwrap()
        .get_many(&AccessContext::system(), ids, None)
        .await
        .unwrap();
    set.into_rows()
        .into_iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r))
        .collect()
}

/// The children of `parents` through `via`, by parent, every parent a key
/// (the system caller).
pub async fn by_parent(
    s: &Store,
    entity: &str,
    via: &str,
    parents: &[String],
    q: &ListQuery,
) -> Result<HashMap<String, Vec<Row>>, StoreError> {
    let got = s
        .entity(entity)?
        .children(&AccessContext::system(), via, parents, q)
        .await?;
    let mut out: HashMap<String, Vec<Row>> =
        parents.iter().map(|p| (p.clone(), Vec::new())).collect();
    for (row, parent) in got.rows.into_rows().into_iter().zip(got.parents) {
        out.entry(parent).or_default().push(row);
    }
    Ok(out)
}
