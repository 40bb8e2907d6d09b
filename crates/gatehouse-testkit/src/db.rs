//! A fresh database per test, on SQLite or PostgreSQL, and the one place
//! tests open a store.

use std::path::PathBuf;
use std::sync::Arc;

use gatehouse_schema::Model;
use gatehouse_store::{Store, StoreError, StoreOptions};
use sqlx::Connection;

/// `GATEHOUSE_TEST_POSTGRES_URL`, when set: a PostgreSQL server whose user
/// may create databases. Panics when CI requires PostgreSQL
/// (`GATEHOUSE_REQUIRE_POSTGRES=1`) but did not configure it, so a skipped
/// PostgreSQL run cannot pass silently.
pub fn postgres_url() -> Option<String> {
    let url = std::env::var("GATEHOUSE_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty());
    if url.is_none() && std::env::var("GATEHOUSE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
        panic!("GATEHOUSE_REQUIRE_POSTGRES=1 but GATEHOUSE_TEST_POSTGRES_URL is not set");
    }
    url
}

/// Opens the store at `url` for `model`: every test opens its stores here,
/// so a change of how a store is opened is made once.
pub async fn open_store(
    url: &str,
    model: Arc<Model>,
    opts: StoreOptions,
) -> Result<Store, StoreError> {
    Store::connect(url, model, opts).await
}

/// What a store is opened for: a Model, or the text of a one-file schema.
pub trait IntoModel {
    /// The Model.
    fn into_model(self) -> Arc<Model>;
}

impl IntoModel for Arc<Model> {
    fn into_model(self) -> Arc<Model> {
        self
    }
}

impl IntoModel for &Arc<Model> {
    fn into_model(self) -> Arc<Model> {
        self.clone()
    }
}

impl IntoModel for &str {
    fn into_model(self) -> Arc<Model> {
        crate::model(self)
    }
}

/// Where one test's database lives.
#[derive(Debug)]
enum Place {
    /// Kept for its removal on drop.
    Sqlite {
        _dir: tempfile::TempDir,
    },
    Postgres {
        admin: String,
        name: String,
    },
}

/// A fresh, empty database on one backend, removed on drop (a PostgreSQL
/// database with `DROP DATABASE ... WITH (FORCE)`, so stores still open on
/// it do not keep it).
#[derive(Debug)]
pub struct TestDb {
    url: String,
    place: Place,
}

impl TestDb {
    /// A SQLite database in a new temporary directory. Its file lies in
    /// subdirectories that do not exist yet, so every test also holds the
    /// store to creating them.
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("sub/dir/test.db").display());
        TestDb {
            url,
            place: Place::Sqlite { _dir: dir },
        }
    }

    /// A new PostgreSQL database on the [`postgres_url`] server; `None`
    /// when none is configured.
    pub async fn postgres() -> Option<TestDb> {
        let admin = postgres_url()?;
        let name = format!("gatehouse_test_{}", uuid::Uuid::now_v7().simple());
        let mut c = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is not reachable: {e}"));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut c)
            .await
            .unwrap();
        let _ = c.close().await;
        // postgres://user@host:port/db?query: the same with the new name.
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (admin.as_str(), String::new()),
        };
        let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
        Some(TestDb {
            url: format!("{server}/{name}{query}"),
            place: Place::Postgres { admin, name },
        })
    }

    /// One fresh database per configured backend: SQLite always, then
    /// PostgreSQL when [`postgres_url`] is set.
    pub async fn each() -> Vec<TestDb> {
        let mut out = vec![TestDb::sqlite()];
        out.extend(TestDb::postgres().await);
        out
    }

    /// The database URL a store or the binary opens.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `"sqlite"` or `"postgres"`, for assertion messages.
    pub fn backend(&self) -> &'static str {
        match self.place {
            Place::Sqlite { .. } => "sqlite",
            Place::Postgres { .. } => "postgres",
        }
    }

    /// The database file, on SQLite.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match self.place {
            Place::Sqlite { .. } => self.url.strip_prefix("sqlite://").map(PathBuf::from),
            Place::Postgres { .. } => None,
        }
    }

    /// A store over this database with default options.
    pub async fn open(&self, schema: impl IntoModel) -> Store {
        self.open_with(schema, StoreOptions::default())
            .await
            .unwrap_or_else(|e| panic!("the {} store does not open: {e}", self.backend()))
    }

    /// A store over this database, or why it does not open.
    pub async fn open_with(
        &self,
        schema: impl IntoModel,
        opts: StoreOptions,
    ) -> Result<Store, StoreError> {
        open_store(&self.url, schema.into_model(), opts).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Place::Postgres { admin, name } = &self.place else {
            return;
        };
        let (admin, name) = (admin.clone(), name.clone());
        // Drop may run inside the test's runtime, which cannot be blocked
        // on: a thread with a runtime of its own drops the database.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut c) = sqlx::PgConnection::connect(&admin).await {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                        .execute(&mut c)
                        .await;
                    let _ = c.close().await;
                }
            });
        })
        .join();
    }
}
