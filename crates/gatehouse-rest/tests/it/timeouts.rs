//! A statement past the statement timeout is unavailability, not an
//! internal error: 503 with a problem saying it timed out (code
//! `TIMEOUT`) and `Retry-After`. The fault is the test's own: a row lock
//! held from a second connection.

use std::time::{Duration, Instant};

use gatehouse_rest::router;
use gatehouse_testkit::{TestDb, TestServer, example_model};
use reqwest::Method;
use serde_json::json;

use crate::{Server, problem, state};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_write_past_the_statement_timeout_is_a_503_problem() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let model = example_model();
    let store = db
        .open_with_statement_timeout(&model, Duration::from_millis(500))
        .await;
    let served = TestServer::start(router(state(store.clone(), "", 1024 * 1024))).await;
    let s = Server {
        base: served.url(""),
        store,
        client: served.client,
        _db: db,
    };
    let a = s.author("A", None).await;
    let admin = gatehouse_testkit::pg_client(s._db.url()).await.unwrap();
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM author WHERE id = '{a}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let start = Instant::now();
    let r = s
        .send(
            Method::PATCH,
            &format!("/v1/authors/{a}"),
            Some(json!({"name": "B"})),
        )
        .await;
    let retry_after = crate::header(&r, "retry-after");
    let body = problem(r, 503).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(body["code"], "TIMEOUT", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{body}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"));
    admin.batch_execute("ROLLBACK").await.unwrap();
    // The row is writable again, and was not changed by the timed-out request.
    let got = s.get_ok(&format!("/v1/authors/{a}")).await;
    assert_eq!(got["name"], "A");
    s.store.close().await;
}
