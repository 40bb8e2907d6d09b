//! A fresh database per test, on SQLite or PostgreSQL, and the one place
//! tests open a store.

use std::path::PathBuf;
use std::sync::Arc;

use gatehouse_schema::Model;
use gatehouse_store::{Store, StoreError, StoreOptions};

/// The variable naming the PostgreSQL server tests run on.
pub const POSTGRES_URL_VAR: &str = "GATEHOUSE_TEST_POSTGRES_URL";
/// The variable that turns a skipped PostgreSQL case into a failure (CI).
pub const REQUIRE_POSTGRES_VAR: &str = "GATEHOUSE_REQUIRE_POSTGRES";

/// What a test that wants PostgreSQL does, from the two variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostgresRun {
    /// Run on this server.
    On(String),
    /// Skip the PostgreSQL case (and say so).
    Skip,
    /// Fail: PostgreSQL is required but not configured.
    Required,
}

impl PostgresRun {
    /// The decision for `url` (`GATEHOUSE_TEST_POSTGRES_URL`) and `require`
    /// (`GATEHOUSE_REQUIRE_POSTGRES`): required when set to anything but
    /// empty or `0`.
    pub fn decide(url: Option<String>, require: Option<String>) -> PostgresRun {
        match url.filter(|u| !u.is_empty()) {
            Some(url) => PostgresRun::On(url),
            None if require.is_some_and(|r| !r.is_empty() && r != "0") => PostgresRun::Required,
            None => PostgresRun::Skip,
        }
    }
}

/// The PostgreSQL server of `GATEHOUSE_TEST_POSTGRES_URL` (its user may
/// create databases), or `None` after saying on stderr which test skips
/// its PostgreSQL case. Panics when `GATEHOUSE_REQUIRE_POSTGRES` is set
/// (CI) and the URL is not, so a skipped PostgreSQL run cannot pass
/// silently. Every test that wants PostgreSQL asks here.
pub fn postgres_url() -> Option<String> {
    let run = PostgresRun::decide(
        std::env::var(POSTGRES_URL_VAR).ok(),
        std::env::var(REQUIRE_POSTGRES_VAR).ok(),
    );
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    match run {
        PostgresRun::On(url) => Some(url),
        PostgresRun::Required => panic!(
            "{REQUIRE_POSTGRES_VAR} is set but {POSTGRES_URL_VAR} is not: {test} cannot run \
             on PostgreSQL (set {POSTGRES_URL_VAR} to a server whose user may create databases)"
        ),
        PostgresRun::Skip => {
            // Straight to stderr, past the test harness's capture: a skip
            // shows in a passing run too.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED on PostgreSQL: {test} ({POSTGRES_URL_VAR} is not set; set it, e.g. \
                 postgres://postgres@127.0.0.1:5432/test, to run it)"
            );
            None
        }
    }
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

    /// A new PostgreSQL database on the [`postgres_url`] server; `None`,
    /// after saying so on stderr, when none is configured.
    pub async fn postgres() -> Option<TestDb> {
        let admin = postgres_url()?;
        let name = format!("gatehouse_test_{}", uuid::Uuid::now_v7().simple());
        pg_execute(&admin, &format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {admin}: {e}"));
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

    /// A store whose statements give up after `timeout`, for the tests of
    /// what each entry point answers when the database does not answer in
    /// time.
    pub async fn open_with_statement_timeout(
        &self,
        schema: impl IntoModel,
        timeout: std::time::Duration,
    ) -> Store {
        self.open_with(
            schema,
            StoreOptions {
                statement_timeout: timeout,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("the test database opens")
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
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                let _ = pg_execute(&admin, &sql).await;
            });
        })
        .join();
    }
}

/// A client on the PostgreSQL database at `url`, for a test's own SQL
/// beside the store (its connection runs in a task of its own).
pub async fn pg_client(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// Runs parameterless SQL (several statements allowed) on the PostgreSQL
/// database at `url`, on a connection of its own.
pub async fn pg_execute(url: &str, sql: &str) -> Result<(), String> {
    pg_client(url)
        .await?
        .batch_execute(sql)
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::PostgresRun;

    #[test]
    fn a_postgres_case_runs_skips_or_fails() {
        let some = |s: &str| Some(s.to_string());
        let url = "postgres://u@h/db";
        assert_eq!(
            PostgresRun::decide(some(url), None),
            PostgresRun::On(url.into())
        );
        assert_eq!(
            PostgresRun::decide(some(url), some("1")),
            PostgresRun::On(url.into())
        );
        assert_eq!(PostgresRun::decide(None, None), PostgresRun::Skip);
        assert_eq!(PostgresRun::decide(some(""), None), PostgresRun::Skip);
        assert_eq!(PostgresRun::decide(None, some("0")), PostgresRun::Skip);
        assert_eq!(PostgresRun::decide(None, some("")), PostgresRun::Skip);
        for set in ["1", "true", "yes"] {
            assert_eq!(
                PostgresRun::decide(None, some(set)),
                PostgresRun::Required,
                "{set}"
            );
            assert_eq!(
                PostgresRun::decide(some(""), some(set)),
                PostgresRun::Required,
                "{set}"
            );
        }
    }
}
