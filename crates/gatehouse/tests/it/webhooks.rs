//! Webhooks through the real binary, on SQLite and PostgreSQL, with a
//! local receiver recording every request: what is sent (signed, the row
//! before and after), what is not (rolled back, filtered out), retries
//! with the same `webhook-id`, order per row, delivery after a `kill -9`
//! with the receiver down, two instances on one PostgreSQL database
//! delivering each change once, and the CLI's hand on failed deliveries.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use gatehouse_testkit::{Port, ServerProcess, TestDb, password_token};

use crate::{gatehouse, serve, stderr, stdout};

const SCHEMA: &str = r#"
enum Status { TODO DONE }
type Task { id: ID! title: String! status: Status! }
"#;

/// The webhook's key, as its `whsec_` secret carries it.
const KEY: &[u8] = b"a key of thirty-two bytes, exact";

fn secret() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(KEY)
    )
}

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }

    fn event(&self) -> String {
        self.json()["type"].as_str().unwrap().to_string()
    }
}

/// An HTTP server that records every POST and answers with the statuses
/// it is given, in turn (200 once they run out).
struct Receiver {
    url: String,
    requests: mpsc::UnboundedReceiver<Received>,
}

impl Receiver {
    async fn start(answers: &[u16]) -> Receiver {
        Self::on(Port::bind().await, answers)
    }

    fn on(port: Port, answers: &[u16]) -> Receiver {
        let (tx, requests) = mpsc::unbounded_channel();
        let answers = Arc::new(Mutex::new(answers.iter().copied().collect::<VecDeque<_>>()));
        let url = format!("{}/hooks", port.base());
        let router = axum::Router::new().route(
            "/hooks",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let tx = tx.clone();
                let answers = answers.clone();
                async move {
                    let h = |n: &str| {
                        headers
                            .get(n)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string()
                    };
                    let _ = tx.send(Received {
                        id: h("webhook-id"),
                        timestamp: h("webhook-timestamp"),
                        signature: h("webhook-signature"),
                        body,
                    });
                    let status = answers.lock().unwrap().pop_front().unwrap_or(200);
                    StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        port.serve(router);
        Receiver { url, requests }
    }

    /// The next request, failing the test after 30 s.
    async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(30), self.requests.recv())
            .await
            .expect("the receiver gets a request within 30 s")
            .expect("the receiver is running")
    }

    /// Fails the test if a request arrives within `wait`.
    async fn nothing_more(&mut self, wait: Duration) {
        if let Ok(Some(r)) = tokio::time::timeout(wait, self.requests.recv()).await {
            panic!("an unexpected delivery: {}", r.body);
        }
    }
}

/// HMAC-SHA256 (RFC 2104) written out over SHA-256, independent of the
/// server's implementation.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

/// Checks a request's signature as a receiver would.
fn assert_signed(r: &Received) {
    let signed = format!("{}.{}.{}", r.id, r.timestamp, r.body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(hmac_sha256(KEY, signed.as_bytes()))
    );
    assert_eq!(r.signature, expected, "the signature of {}", r.body);
    let ts: u64 = r.timestamp.parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(ts) < 60, "a timestamp of now: {ts} vs {now}");
}

/// A service directory: the schema, and a config with a user who may
/// write and one webhook (`hook` holds its keys beyond `id`, `url` and
/// `secret`).
fn project(db: &TestDb, url: &str, hook: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("schema.graphql"), SCHEMA).unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!(
            r#"listen = "127.0.0.1:0"
database = "{db}"
schema = ["schema.graphql"]

[[bootstrap.clients]]
client_id = "app"
client_secret = "app-secret-0123456789"
grants = ["password"]
scopes = ["read", "write"]

[[bootstrap.users]]
username = "ann"
password = "ann-password-0123"
scopes = ["read", "write"]

[[webhooks]]
id = "tasks"
url = "{url}"
secret = "{secret}"
{hook}
"#,
            db = db.url(),
            secret = secret(),
        ),
    )
    .unwrap();
    dir
}

fn start(dir: &Path) -> ServerProcess {
    serve(
        dir,
        &["--config", "gatehouse.toml"],
        &[("GATEHOUSE_SECRET", "webhook-tests-secret-0123456789")],
    )
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn new(server: &ServerProcess) -> Client {
        let http = reqwest::Client::new();
        let t = password_token(
            &http,
            &server.base,
            ("app", "app-secret-0123456789"),
            ("ann", "ann-password-0123"),
            Some("read write"),
        )
        .await;
        let token = t["access_token"].as_str().unwrap().to_string();
        Client {
            http,
            base: server.base.clone(),
            token,
        }
    }

    async fn gql(&self, query: &str) -> Value {
        gatehouse_testkit::graphql(
            &self.http,
            &format!("{}/graphql", self.base),
            Some(&self.token),
            query,
            json!({}),
        )
        .await
    }

    async fn create(&self, title: &str, status: &str) -> String {
        let r = self
            .gql(&format!(
                r#"mutation {{ createTask(input: {{title: "{title}", status: {status}}}) {{ id }} }}"#
            ))
            .await;
        r["data"]["createTask"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string()
    }

    async fn update(&self, id: &str, set: &str) {
        let r = self
            .gql(&format!(
                r#"mutation {{ updateTask(id: "{id}", input: {{{set}}}) {{ id }} }}"#
            ))
            .await;
        assert!(r["errors"].is_null(), "{r}");
    }

    async fn delete(&self, id: &str) {
        let r = self
            .gql(&format!(
                r#"mutation {{ deleteTask(id: "{id}") {{ id }} }}"#
            ))
            .await;
        assert!(r["errors"].is_null(), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_committed_change_is_posted_signed_with_the_row_before_and_after() {
    for db in TestDb::each().await {
        let mut receiver = Receiver::start(&[]).await;
        let dir = project(&db, &receiver.url, r#"events = ["Task.*"]"#);
        let server = start(dir.path());
        let c = Client::new(&server).await;

        let id = c.create("write the docs", "TODO").await;
        c.update(&id, "status: DONE").await;
        c.delete(&id).await;

        let created = receiver.next().await;
        let updated = receiver.next().await;
        let deleted = receiver.next().await;
        for r in [&created, &updated, &deleted] {
            assert_signed(r);
        }
        let ids = [&created.id, &updated.id, &deleted.id];
        assert!(
            ids[0] != ids[1] && ids[1] != ids[2],
            "{}: one webhook-id per delivery",
            db.backend()
        );

        let body = created.json();
        assert_eq!(body["type"], "Task.created", "{}", db.backend());
        assert_eq!(body["data"]["id"], id.as_str());
        assert_eq!(body["data"]["new"]["title"], "write the docs");
        assert_eq!(body["data"]["new"]["status"], "TODO");
        assert!(body["data"].get("old").is_none(), "a create has no old row");
        assert!(body["timestamp"].as_str().unwrap().ends_with('Z'));

        let body = updated.json();
        assert_eq!(body["type"], "Task.updated");
        assert_eq!(body["data"]["old"]["status"], "TODO");
        assert_eq!(body["data"]["new"]["status"], "DONE");

        let body = deleted.json();
        assert_eq!(body["type"], "Task.deleted");
        assert_eq!(body["data"]["old"]["status"], "DONE");
        assert!(body["data"].get("new").is_none(), "a delete has no new row");
        receiver.nothing_more(Duration::from_millis(500)).await;

        // Counted under the webhook's own name once recorded (the outcome
        // is written after the receiver answered).
        let want = r#"gatehouse_webhook_deliveries_total{hook="tasks",outcome="delivered"} 3"#;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = c
                .http
                .get(format!("{}/metrics", c.base))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            // The gauge is refreshed every few seconds.
            let gauge = "gatehouse_webhook_oldest_pending_seconds{hook=\"tasks\"}";
            if text.contains(want) && text.contains(gauge) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: no `{want}` in\n{text}",
                db.backend()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolled_back_atomic_mutation_sends_nothing() {
    for db in TestDb::each().await {
        let mut receiver = Receiver::start(&[]).await;
        let dir = project(&db, &receiver.url, r#"events = ["Task.created"]"#);
        let server = start(dir.path());
        let c = Client::new(&server).await;

        // The second field fails, so the whole request rolls back.
        let r = c
            .gql(
                r#"mutation {
                  a: createTask(input: {title: "rolled back", status: TODO}) { id }
                  b: updateTask(id: "no-such-task", input: {status: DONE}) { id }
                }"#,
            )
            .await;
        assert!(!r["errors"].is_null(), "{}: {r}", db.backend());
        c.create("committed", "TODO").await;

        let first = receiver.next().await;
        assert_eq!(
            first.json()["data"]["new"]["title"],
            "committed",
            "{}: the rolled-back create was never sent",
            db.backend()
        );
        receiver.nothing_more(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_delivery_is_retried_with_the_same_webhook_id_and_the_rows_later_changes_wait_for_it()
 {
    for db in TestDb::each().await {
        // The first request is refused; the outbox retries it (after 2.5
        // to 5 s: its first backoff).
        let mut receiver = Receiver::start(&[500]).await;
        let dir = project(&db, &receiver.url, r#"events = ["Task.*"]"#);
        let server = start(dir.path());
        let c = Client::new(&server).await;

        let id = c.create("retried", "TODO").await;
        c.update(&id, "title: \"first\"").await;
        c.update(&id, "title: \"second\"").await;

        let refused = receiver.next().await;
        assert_eq!(refused.event(), "Task.created", "{}", db.backend());
        let retried = receiver.next().await;
        assert_eq!(
            retried.id,
            refused.id,
            "{}: a retry keeps its webhook-id",
            db.backend()
        );
        assert_eq!(retried.body, refused.body, "and its body");
        assert_signed(&retried);
        let titles: Vec<Value> = [receiver.next().await, receiver.next().await]
            .iter()
            .map(|r| r.json()["data"]["new"]["title"].clone())
            .collect();
        assert_eq!(
            titles,
            [json!("first"), json!("second")],
            "{}: the row's updates follow its create, in order",
            db.backend()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn where_judges_a_create_and_an_update_by_the_new_row_and_a_delete_by_the_old_one() {
    for db in TestDb::each().await {
        let mut receiver = Receiver::start(&[]).await;
        let dir = project(
            &db,
            &receiver.url,
            "events = [\"Task.*\"]\nwhere = '{status: DONE}'",
        );
        let server = start(dir.path());
        let c = Client::new(&server).await;

        let todo = c.create("not yet", "TODO").await;
        let done = c.create("already", "DONE").await;
        c.update(&todo, "status: DONE").await;
        c.update(&done, "status: TODO").await;
        c.delete(&todo).await;
        c.delete(&done).await;

        let mut got = Vec::new();
        for _ in 0..3 {
            let r = receiver.next().await;
            got.push((
                r.event(),
                r.json()["data"]["id"].as_str().unwrap().to_string(),
            ));
        }
        got.sort();
        let mut want = vec![
            ("Task.created".to_string(), done.clone()),
            ("Task.updated".to_string(), todo.clone()),
            ("Task.deleted".to_string(), todo.clone()),
        ];
        want.sort();
        assert_eq!(got, want, "{}", db.backend());
        receiver.nothing_more(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_committed_while_the_receiver_is_down_is_delivered_after_a_kill_and_a_restart() {
    for db in TestDb::each().await {
        // A port nobody listens on yet.
        let port = Port::bind().await;
        let url = format!("{}/hooks", port.base());
        let dir = project(&db, &url, r#"events = ["Task.created"]"#);
        let addr = port.base();
        drop(port);

        let server = start(dir.path());
        let c = Client::new(&server).await;
        let id = c.create("outlives the process", "TODO").await;
        // Its first attempt finds nobody; the process dies with the
        // delivery queued.
        server.wait_for_log("not delivered", Duration::from_secs(10));
        server.signal("KILL");
        drop(server);

        let port = loop {
            let listener = addr.strip_prefix("http://").unwrap();
            if let Ok(p) = Port::bind_to(listener).await {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut receiver = Receiver::on(port, &[]);
        let _server = start(dir.path());
        let r = receiver.next().await;
        assert_eq!(r.json()["data"]["id"], id.as_str(), "{}", db.backend());
        assert_signed(&r);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_past_its_max_age_is_kept_as_failed_and_retried_by_hand_with_its_webhook_id() {
    for db in TestDb::each().await {
        // Refused once; a retry would come after max_age, so it fails.
        let mut receiver = Receiver::start(&[503]).await;
        let dir = project(
            &db,
            &receiver.url,
            "events = [\"Task.created\"]\nmax_age = \"1s\"",
        );
        let server = start(dir.path());
        let c = Client::new(&server).await;
        c.create("given up", "TODO").await;
        let refused = receiver.next().await;
        server.wait_for_log("kept as failed", Duration::from_secs(10));

        let out = gatehouse(
            dir.path(),
            &["webhooks", "failed", "--json", "--config", "gatehouse.toml"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let failed: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(
            failed[0]["id"],
            refused.id.as_str(),
            "{}: {failed}",
            db.backend()
        );
        assert_eq!(failed[0]["hook"], "tasks");
        assert_eq!(failed[0]["last_error"], "the receiver answered HTTP 503");

        let out = gatehouse(
            dir.path(),
            &[
                "webhooks",
                "retry",
                &refused.id,
                "--config",
                "gatehouse.toml",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let retried = receiver.next().await;
        assert_eq!(retried.id, refused.id, "{}", db.backend());

        let out = gatehouse(
            dir.path(),
            &[
                "webhooks",
                "replay",
                &refused.id,
                "--config",
                "gatehouse.toml",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let replayed = receiver.next().await;
        assert_ne!(replayed.id, refused.id, "a replay is a new delivery");
        assert_eq!(replayed.body, refused.body);
    }
}

#[test]
fn a_webhook_that_names_what_the_schema_lacks_stops_the_server_naming_the_entry() {
    let db = TestDb::sqlite();
    for (hook, expected) in [
        (
            r#"events = ["Tsk.created"]"#,
            "`webhooks[0]` (id `tasks`).events: \"Tsk.created\": the schema has no type `Tsk`",
        ),
        (
            r#"events = ["Task.archived"]"#,
            "\"Task.archived\" is not an event",
        ),
        (
            "events = [\"Task.*\"]\nwhere = '{state: DONE}'",
            "`webhooks[0]` (id `tasks`).where: where:1:9: error: `state` in `where` on `Task` binds to nothing",
        ),
        (
            "events = [\"Task.*\"]\nwhere = '{status: DONE'",
            "`where` does not parse",
        ),
        (
            "events = [\"Task.*\"]\nconcurrency = 0",
            "`webhooks[0]` (id `tasks`).concurrency: 0 is not a number of deliveries in flight: 1 to 64",
        ),
    ] {
        let dir = project(&db, "http://127.0.0.1:9/hooks", hook);
        let out = gatehouse(dir.path(), &["serve", "--config", "gatehouse.toml"]);
        assert_ne!(out.status.code(), Some(0), "{hook}");
        let err = stderr(&out);
        assert!(err.contains(expected), "{hook}: {err}");
    }
}

/// The `gatehouse_webhook_deliveries_total{hook="tasks",outcome="delivered"}`
/// count of one instance (0 before its first delivery).
async fn delivered(http: &reqwest::Client, base: &str) -> u64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = r#"gatehouse_webhook_deliveries_total{hook="tasks",outcome="delivered"} "#;
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_one_postgres_database_deliver_each_change_once_in_order_per_row() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let mut receiver = Receiver::start(&[]).await;
    let dir = project(&db, &receiver.url, r#"events = ["Task.*"]"#);
    // One after the other: the first migrates the tables.
    let servers = [start(dir.path()), start(dir.path())];
    let clients = [
        Client::new(&servers[0]).await,
        Client::new(&servers[1]).await,
    ];

    // Twenty rows created at once, alternately through each instance; each
    // then updated through the other one and deleted through the first,
    // every phase concurrent across rows.
    const ROWS: usize = 20;
    let titles: Vec<String> = (0..ROWS).map(|i| format!("row {i}")).collect();
    let ids: Vec<String> = futures::future::join_all(
        titles
            .iter()
            .enumerate()
            .map(|(i, title)| clients[i % 2].create(title, "TODO")),
    )
    .await;
    futures::future::join_all(
        ids.iter()
            .enumerate()
            .map(|(i, id)| clients[(i + 1) % 2].update(id, "status: DONE")),
    )
    .await;
    futures::future::join_all(
        ids.iter()
            .enumerate()
            .map(|(i, id)| clients[i % 2].delete(id)),
    )
    .await;

    // Every change once: no two requests for one (row, kind), each with its
    // own webhook-id, and a row's changes in the order they were made.
    let mut per_row: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut webhook_ids = std::collections::HashSet::new();
    for _ in 0..3 * ROWS {
        let r = receiver.next().await;
        assert_signed(&r);
        assert!(
            webhook_ids.insert(r.id.clone()),
            "webhook-id {} delivered twice: {}",
            r.id,
            r.body
        );
        let row = r.json()["data"]["id"].as_str().unwrap().to_string();
        per_row.entry(row).or_default().push(r.event());
    }
    for id in &ids {
        assert_eq!(
            per_row.get(id).map(Vec::as_slice),
            Some(&["Task.created", "Task.updated", "Task.deleted"].map(String::from)[..]),
            "the deliveries of row {id}: {per_row:?}"
        );
    }
    assert_eq!(per_row.len(), ROWS, "{per_row:?}");
    // A delivery claimed by both instances would come at about the same time
    // as the first; each instance also polls every second.
    receiver.nothing_more(Duration::from_secs(2)).await;

    // The instances' own counts add up to one delivery per change (each
    // records its outcome after the receiver answered).
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let counts = loop {
        let counts = [
            delivered(&http, &servers[0].base).await,
            delivered(&http, &servers[1].base).await,
        ];
        if counts[0] + counts[1] >= 3 * ROWS as u64 || std::time::Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        counts[0] + counts[1],
        3 * ROWS as u64,
        "deliveries counted by each instance: {counts:?}"
    );
    // Each instance's writes wake its own worker: both took part.
    assert!(
        counts.iter().all(|&n| n > 0),
        "both instances delivered: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_never_answers_holds_no_more_connections_than_the_webhooks_concurrency() {
    let db = TestDb::sqlite();
    // Accepts every connection and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(socket);
        }
    });
    let dir = project(
        &db,
        &url,
        "events = [\"Task.created\"]\nconcurrency = 2\ntimeout = \"30s\"",
    );
    let server = start(dir.path());
    let c = Client::new(&server).await;
    for i in 0..6 {
        c.create(&format!("task {i}"), "TODO").await;
    }
    // Writes are not held up by the receiver, and two deliveries are in
    // flight, no more, until the timeout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    holder.abort();
}
