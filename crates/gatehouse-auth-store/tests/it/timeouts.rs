//! A token request whose statement waits past the statement timeout (a
//! refresh token's row locked from outside, as a concurrent refresh
//! holds it) fails as `temporarily_unavailable`, which the token endpoint
//! answers with 503, not as a server error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_auth::{AuthConfig, AuthServer, Error, NewClient, SystemClock, SystemRandom};
use gatehouse_auth_store::SqlAuthRepo;
use gatehouse_testkit::TestDb;

use crate::SDL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_refresh_waiting_past_the_statement_timeout_is_temporarily_unavailable() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let store = db
        .open_with_statement_timeout(SDL, Duration::from_millis(500))
        .await;
    let auth = AuthServer::start(
        AuthConfig::new("https://issuer.example"),
        Arc::new(SqlAuthRepo::new(store.db().clone())),
        Arc::new(SystemClock),
        Arc::new(SystemRandom),
        "a server secret for tests, long enough to be one",
    )
    .await
    .unwrap();
    let admin = auth.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "app".into(),
                grants: vec!["password".into(), "refresh_token".into()],
                scopes: vec!["read".into()],
                audiences: vec![],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user("alice", "correct horse", &["read".to_string()])
        .await
        .unwrap();
    let c = auth.authenticate_client("app", "app-secret").await.unwrap();
    let issued = auth
        .password_grant(&c, Some("alice"), Some("correct horse"), None, true, None)
        .await
        .unwrap();
    let refresh = issued.refresh_token.unwrap();
    let outside = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    outside
        .batch_execute("BEGIN; SELECT * FROM _gatehouse_oauth_tokens FOR UPDATE")
        .await
        .unwrap();
    let start = Instant::now();
    let e = auth
        .refresh_grant(&c, Some(&refresh), None)
        .await
        .expect_err("the token's row is locked");
    outside.batch_execute("ROLLBACK").await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert_eq!(e.code(), "temporarily_unavailable");
    // Once the lock is gone, the same refresh token works.
    auth.refresh_grant(&c, Some(&refresh), None).await.unwrap();
    store.close().await;
}
