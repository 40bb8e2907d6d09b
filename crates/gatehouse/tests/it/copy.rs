//! `gatehouse copy`: from the embedded SQLite store to PostgreSQL, tokens
//! issued before the copy stay valid on a server over the target.

use gatehouse_testkit::{ServerProcess, TestDb, repo_root};

use crate::first_hour::sh;
use crate::{stderr, stdout};

const SECRET: &str = "copy-test-key-secret-0123456";
const ISSUER: &str = "http://gatehouse.test";

fn copy(from: &str, to: &str) -> std::process::Output {
    let mut cmd = crate::bin();
    cmd.args([
        "copy",
        "--from",
        from,
        "--to",
        to,
        "--config",
        "examples/library/gatehouse.toml",
    ])
    .current_dir(repo_root());
    cmd.env("GATEHOUSE_SECRET", SECRET).output().unwrap()
}

fn serve(database: &str) -> ServerProcess {
    crate::serve(
        &repo_root(),
        &[
            "--config",
            "examples/library/gatehouse.toml",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("GATEHOUSE_DATABASE", database),
            ("GATEHOUSE_SECRET", SECRET),
            ("GATEHOUSE_ISSUER", ISSUER),
        ],
    )
}

/// `curl` with `token` against `url`; the body.
fn get(token: &str, url: &str) -> String {
    sh(
        &repo_root(),
        &format!("curl -s -H 'Authorization: Bearer {token}' '{url}'"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_from_sqlite_to_postgres_keeps_data_and_tokens() {
    let Some(target_db) = TestDb::postgres().await else {
        return;
    };
    let target = target_db.url();
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite://{}", dir.path().join("library.db").display());

    // Before: a token, a refresh token, a revoked token, and a new row.
    let server = serve(&source);
    let token_json = |extra: &str| {
        sh(
            &repo_root(),
            &format!(
                "curl -s -u demo-app:demo-secret-change-me -d grant_type=password \
                 -d username=alice -d password=alice-password -d 'scope=read write offline_access' \
                 {extra} {}/oauth/token",
                server.base
            ),
        )
    };
    let issued: serde_json::Value = serde_json::from_str(&token_json("")).unwrap();
    let access = issued["access_token"].as_str().unwrap().to_string();
    let refresh = issued["refresh_token"].as_str().unwrap().to_string();
    let revoked: serde_json::Value = serde_json::from_str(&token_json("")).unwrap();
    let revoked = revoked["access_token"].as_str().unwrap().to_string();
    sh(
        &repo_root(),
        &format!(
            "curl -sf -u demo-app:demo-secret-change-me -d token={revoked} {}/oauth/revoke",
            server.base
        ),
    );
    assert!(get(&access, &format!("{}/v1/authors/butler", server.base)).contains("Octavia"));
    drop(server);

    let o = copy(&source, target);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("row counts verified"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("next: set `database`"),
        "the output says what to do next: {}",
        stdout(&o)
    );

    // After: a server on PostgreSQL accepts the token, refuses the revoked
    // one, rotates the refresh token, and has the rows.
    let server = serve(target);
    let body = get(&access, &format!("{}/v1/authors/butler", server.base));
    assert!(body.contains("Octavia E. Butler"), "{body}");
    let body = get(&revoked, &format!("{}/v1/authors/butler", server.base));
    assert!(
        !body.contains("Octavia"),
        "a revoked token works after the copy: {body}"
    );
    let refreshed = sh(
        &repo_root(),
        &format!(
            "curl -s -u demo-app:demo-secret-change-me -d grant_type=refresh_token \
             -d refresh_token={refresh} {}/oauth/token",
            server.base
        ),
    );
    assert!(refreshed.contains("access_token"), "{refreshed}");
    let books = get(&access, &format!("{}/v1/books?fields=id", server.base));
    let books: serde_json::Value = serde_json::from_str(&books).unwrap();
    assert_eq!(books.as_array().unwrap().len(), 3, "{books}");
    drop(server);

    // Into a target that has rows now: refused.
    let o = copy(&source, target);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
}
