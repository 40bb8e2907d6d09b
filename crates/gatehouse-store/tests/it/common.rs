//! Fixtures: a fresh store per backend per test.

use std::sync::Arc;

use gatehouse_schema::{Model, Source};
use gatehouse_store::{Row, Store, StoreOptions};
use serde_json::{Value, json};
use sqlx::Connection;

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

pub fn model(sdl: &str) -> Arc<Model> {
    let sources = [Source {
        path: "t.graphql".into(),
        text: sdl.into(),
    }];
    match gatehouse_schema::load_sources(&sources) {
        Ok(m) => Arc::new(m),
        Err(d) => panic!("test schema does not load: {d:?}"),
    }
}

pub fn row(v: Value) -> Row {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// The PostgreSQL server URL for tests, when configured.
pub fn pg_url() -> Option<String> {
    std::env::var("GATEHOUSE_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// Where one test's database lives; removed on drop.
pub enum Place {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres { admin: String, name: String },
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Place::Postgres { admin, name } = self {
            let admin = admin.clone();
            let name = name.clone();
            // Drop runs inside the test's runtime: use a thread with its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let Ok(rt) = rt {
                    rt.block_on(async {
                        if let Ok(mut c) = sqlx::PgConnection::connect(&admin).await {
                            let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                                .execute(&mut c)
                                .await;
                        }
                    });
                }
            })
            .join();
        }
    }
}

/// A fresh, empty database on one backend.
pub struct Db {
    pub url: String,
    pub place: Place,
}

impl Db {
    pub fn backend(&self) -> &'static str {
        match self.place {
            Place::Sqlite(_) => "sqlite",
            Place::Postgres { .. } => "postgres",
        }
    }

    pub async fn open(&self, sdl: &str) -> Store {
        self.open_with(sdl, StoreOptions::default())
            .await
            .expect("store opens")
    }

    pub async fn open_with(
        &self,
        sdl: &str,
        opts: StoreOptions,
    ) -> Result<Store, gatehouse_store::StoreError> {
        Store::connect(&self.url, model(sdl), opts).await
    }
}

/// One fresh database per configured backend: SQLite always, PostgreSQL when
/// `GATEHOUSE_TEST_POSTGRES_URL` is set.
pub async fn databases() -> Vec<Db> {
    let mut out = Vec::new();
    let dir = tempfile::tempdir().expect("temp dir");
    out.push(Db {
        url: format!("sqlite://{}", dir.path().join("sub/dir/test.db").display()),
        place: Place::Sqlite(dir),
    });
    if let Some(admin) = pg_url() {
        let name = format!("gh_test_{}", uuid::Uuid::now_v7().simple());
        let mut c = sqlx::PgConnection::connect(&admin)
            .await
            .expect("PostgreSQL reachable");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut c)
            .await
            .expect("create test database");
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b.to_string(), format!("?{q}")),
            None => (admin.clone(), String::new()),
        };
        let prefix = base
            .rsplit_once('/')
            .map(|(p, _)| p.to_string())
            .unwrap_or(base);
        out.push(Db {
            url: format!("{prefix}/{name}{query}"),
            place: Place::Postgres { admin, name },
        });
    }
    out
}

/// A store with the default schema on every backend.
pub async fn stores() -> Vec<(Db, Store)> {
    let mut out = Vec::new();
    for db in databases().await {
        let s = db.open(SDL).await;
        out.push((db, s));
    }
    out
}

/// Inserts an author and returns its id.
pub async fn author(s: &Store, name: &str) -> String {
    let r = s
        .insert(
            &gatehouse_store::AccessContext::system(),
            "Author",
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
    s.insert(&gatehouse_store::AccessContext::system(), "Book", r)
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
