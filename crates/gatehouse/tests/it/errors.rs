//! What the CLI says when something is wrong: the cause, and what to do.
//! Causes hidden from API users (driver messages) still reach the operator
//! at the terminal; log lines name their reasons in words.

use gatehouse_testkit::repo_root;

use crate::{gatehouse, serve, stderr};

/// The database URL of `name` on the test PostgreSQL server.
fn on_test_server(admin: &str, name: &str) -> String {
    let base = admin.split('?').next().unwrap_or(admin);
    let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
    format!("{server}/{name}")
}

#[test]
fn copy_to_a_missing_postgres_database_names_the_cause_and_the_remedy() {
    let Some(admin) = gatehouse_testkit::postgres_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite://{}", dir.path().join("s.db").display());
    let target = on_test_server(&admin, "gatehouse_missing_db_for_copy");
    let config = repo_root().join("examples/library/gatehouse.toml");
    let o = gatehouse(
        dir.path(),
        &[
            "copy",
            "--from",
            &source,
            "--to",
            &target,
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("opening the target"), "{err}");
    assert!(
        err.contains("database \"gatehouse_missing_db_for_copy\" does not exist"),
        "{err}"
    );
    assert!(err.contains("createdb"), "{err}");
    assert!(!err.contains("internal storage error"), "{err}");
}

#[test]
fn a_postgres_server_that_is_not_there_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // Port 1: nothing listens there.
    let o = gatehouse(
        dir.path(),
        &[
            "client",
            "list",
            "--database",
            "postgres://someone:pw@127.0.0.1:1/db",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("opening the store postgres://someone:***@127.0.0.1:1/db"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("refused"), "{err}");
    assert!(err.contains("check that PostgreSQL is running"), "{err}");
    assert!(!err.contains("storage unavailable"), "{err}");
}

#[test]
fn an_sqlite_path_that_cannot_be_opened_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the database file should be.
    let path = dir.path().join("data/not-a-file.db");
    std::fs::create_dir_all(&path).unwrap();
    let url = format!("sqlite://{}", path.display());
    let o = gatehouse(dir.path(), &["client", "list", "--database", &url]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("unable to open database file"), "{err}");
    assert!(err.contains("check that the path is right"), "{err}");
    assert!(!err.contains("internal storage error"), "{err}");
}

#[test]
fn configuration_errors_name_the_closest_key() {
    let dir = tempfile::tempdir().unwrap();
    let o = crate::bin()
        .args(["check", "--schema"])
        .arg(repo_root().join("examples/library/schema"))
        .env("GATEHOUSE_LIMITS_MAX_PAGE_SISE", "10")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "GATEHOUSE_LIMITS_MAX_PAGE_SISE is not a configuration variable; \
             did you mean GATEHOUSE_LIMITS_MAX_PAGE_SIZE?"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_listens_on_a_host_name_and_logs_refusals_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let schema = repo_root().join("examples/library/schema");
    let server = serve(
        dir.path(),
        &[
            "--schema",
            schema.to_str().unwrap(),
            "--database",
            &db,
            "--listen",
            "localhost:0",
        ],
        &[
            ("GATEHOUSE_SECRET", "errors-test-key-secret-0123456789"),
            ("GATEHOUSE_LOG", "info"),
        ],
    );
    let r = reqwest::Client::new()
        .post(format!("{}/graphql", server.base))
        .json(&serde_json::json!({"query": "{ authors { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        let logs = server.logs();
        if let Some(l) = logs
            .iter()
            .find(|l| l.contains("GraphQL request not authenticated"))
        {
            break l.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no log line: {logs:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(line.contains("reason=no credentials"), "{line}");
    assert!(!line.contains("Discriminant"), "{line}");
}

/// On PostgreSQL the key file lives beside the config file, not in the
/// working directory: a server started from elsewhere finds the same key.
/// Without the key, the server refuses naming the file it looked for, and
/// leaves no stray key behind that would stand in for the real one.
#[tokio::test]
async fn the_key_file_on_postgres_is_found_from_any_working_directory() {
    let Some(db) = gatehouse_testkit::TestDb::postgres().await else {
        return;
    };
    let app = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let schema = repo_root().join("examples/library/schema");
    std::fs::write(
        app.path().join("gatehouse.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{}\"\nschema = [\"{}\"]\n",
            db.url(),
            schema.display()
        ),
    )
    .unwrap();
    let config = app.path().join("gatehouse.toml");
    let config = config.to_str().unwrap();

    // First start, from the config's directory: the key file is made there.
    let first = serve(app.path(), &["--config", config], &[]);
    drop(first.stop());
    let key = app.path().join("data/gatehouse.key");
    assert!(key.is_file(), "the key file is beside the config file");

    // From another directory, the same key file opens the stored keys.
    let second = serve(elsewhere.path(), &["--config", config], &[]);
    drop(second.stop());
    assert!(!elsewhere.path().join("data").exists(), "no stray key file");

    // Without it, the server refuses, naming the file and the fix.
    std::fs::rename(&key, app.path().join("moved.key")).unwrap();
    let o = gatehouse(elsewhere.path(), &["serve", "--config", config]);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(&key.display().to_string()), "{err}");
    assert!(err.contains("auth.key_file"), "{err}");
    assert!(!key.exists(), "no new key file generated: {err}");

    // `auth.key_file` (relative to the config file) points at the moved one.
    std::fs::write(
        app.path().join("gatehouse.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{}\"\nschema = [\"{}\"]\n[auth]\nkey_file = \"moved.key\"\n",
            db.url(),
            schema.display()
        ),
    )
    .unwrap();
    let third = serve(elsewhere.path(), &["--config", config], &[]);
    drop(third.stop());
}
