//! Operations, end to end against the real binary: request ids and logs,
//! metrics, HTTPS with certificate reload, graceful shutdown, and readiness
//! across a PostgreSQL outage.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::repo;

const CLIENT_ID: &str = "ops-client";
const CLIENT_SECRET: &str = "ops-client-secret-Zq81xK";
const USER: &str = "olga";
const PASSWORD: &str = "olga-password-Vb92";
const KEY_SECRET: &str = "key-encryption-secret-Jx71wQ0p";

/// A running `gatehouse serve` with its stderr (the logs) captured.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT` or `https://...`.
    pub base: String,
    /// `http://ADDR/metrics` when `metrics.listen` is set.
    pub metrics_url: Option<String>,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: Option<tempfile::TempDir>,
}

/// A config with a client and a user whose secrets the log checks look for.
fn config_text(database: &str, extra: &str) -> String {
    let schema = repo().join("examples/library/schema");
    format!(
        r#"listen = "127.0.0.1:0"
database = "{database}"
schema = ["{schema}"]
{extra}

[[bootstrap.clients]]
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
grants = ["password", "client_credentials", "refresh_token"]
scopes = ["read", "write", "review"]

[[bootstrap.users]]
username = "{USER}"
password = "{PASSWORD}"
scopes = ["read", "write", "review"]
"#,
        schema = schema.display()
    )
}

impl Server {
    /// Starts the binary on a fresh SQLite database with `extra` config text
    /// (top-level keys first, then sections).
    pub fn start(extra: &str, args: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("ops.db").display());
        Self::start_in(dir, &config_text(&db, extra), args)
    }

    fn start_in(dir: tempfile::TempDir, config: &str, args: &[&str]) -> Server {
        let file = dir.path().join("gatehouse.toml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        cmd.arg("serve")
            .arg("--config")
            .arg(&file)
            .args(args)
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("GATEHOUSE_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("GATEHOUSE_SECRET", KEY_SECRET);
        cmd.env("GATEHOUSE_LOG", "info");
        let mut child = cmd.spawn().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut base = None;
        let mut metrics_url = None;
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(rest) = line.trim().strip_prefix("gatehouse metrics on ") {
                metrics_url = Some(rest.to_string());
            }
            if let Some(rest) = line.trim().strip_prefix("gatehouse listening on ") {
                base = Some(rest.to_string());
                break;
            }
            line.clear();
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = stdout.read_to_end(&mut sink);
        });
        let Some(base) = base else {
            let _ = child.kill();
            panic!(
                "the server did not start:\n{}",
                logs.lock().unwrap().join("\n")
            );
        };
        Server {
            child,
            base,
            metrics_url,
            logs,
            _dir: Some(dir),
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        self.base.split("://").nth(1).unwrap().to_string()
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Sends `signal` (e.g. `TERM`, `HUP`) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the log reader catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM, then asserts a clean exit; returns the logs.
    pub fn stop(mut self) -> Vec<String> {
        self.signal("TERM");
        let status = self.wait_exit(Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "exit status {status:?}; logs:\n{}",
            self.logs().join("\n")
        );
        self.logs()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn token(c: &reqwest::Client, base: &str) -> String {
    let r = c
        .post(format!("{base}/oauth/token"))
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(&[
            ("grant_type", "password"),
            ("username", USER),
            ("password", PASSWORD),
            ("scope", "read write"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_string()
}

/// The value of the sample `name{labels}` in an exposition text (labels in
/// the order they are recorded).
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

fn assert_no_secrets(logs: &[String], extra: &[&str]) {
    for line in logs {
        for secret in [CLIENT_SECRET, PASSWORD, KEY_SECRET].iter().chain(extra) {
            assert!(!line.contains(secret), "a secret in the log: {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn request_ids_logs_and_metrics() {
    let server = Server::start("", &["--log-format", "json"]);
    let base = server.base.clone();
    let c = client();

    // A sane incoming id is kept and echoed; a bad one is replaced.
    let r = c
        .get(format!("{base}/healthz"))
        .header("x-request-id", "ops-test-42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "ops-test-42");
    let r = c
        .get(format!("{base}/healthz"))
        .header("x-request-id", "bad id with spaces")
        .send()
        .await
        .unwrap();
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_ne!(generated, "bad id with spaces");
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");

    let access = token(&c, &base).await;
    let r = c
        .post(format!("{base}/oauth/token"))
        .basic_auth(CLIENT_ID, Some("wrong-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(format!("{base}/graphql"))
        .bearer_auth(&access)
        .header("x-request-id", "ops-graphql-1")
        .json(&serde_json::json!({"query": "{ books { id title } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("{base}/graphql"))
        .bearer_auth(&access)
        .json(&serde_json::json!({"query": "{ books { nope } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(format!("{base}/v1/books/does-not-exist"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .get(format!("{base}/v1/books"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(format!("{base}/graphql"))
        .query(&[("query", "{ authors { id } }")])
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (series, at_least) in [
        (
            r#"gatehouse_http_requests_total{method="GET",route="/healthz",status="200"}"#,
            2.0,
        ),
        (
            r#"gatehouse_http_requests_total{method="GET",route="/{version}/{*rest}",status="404"}"#,
            1.0,
        ),
        (
            r#"gatehouse_http_requests_total{method="GET",route="/v1/books",status="200"}"#,
            1.0,
        ),
        (
            r#"gatehouse_http_request_duration_seconds_count{method="POST",route="/graphql"}"#,
            2.0,
        ),
        (
            r#"gatehouse_graphql_operations_total{operation="query",outcome="ok"}"#,
            1.0,
        ),
        (
            r#"gatehouse_graphql_operations_total{operation="query",outcome="rejected"}"#,
            1.0,
        ),
        (
            r#"gatehouse_oauth_tokens_issued_total{grant_type="password"}"#,
            1.0,
        ),
        (
            r#"gatehouse_oauth_token_refusals_total{error="invalid_client"}"#,
            1.0,
        ),
        (
            r#"gatehouse_subscriptions_active{transport="websocket"}"#,
            0.0,
        ),
        (r#"gatehouse_store_pool_max_connections{pool="write"}"#, 1.0),
    ] {
        let v = sample(&text, series);
        assert!(
            v.is_some_and(|v| v >= at_least),
            "{series} = {v:?} in:\n{text}"
        );
    }
    assert!(
        text.contains("gatehouse_store_query_duration_seconds_bucket{"),
        "{text}"
    );

    let logs = server.stop();
    let lines: Vec<serde_json::Value> = logs
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), logs.len(), "every line is JSON: {logs:#?}");
    let request_line = |id: &str| {
        lines
            .iter()
            .find(|l| l["message"] == "request" && l["request_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no request line for {id}: {logs:#?}"))
    };
    let l = request_line("ops-test-42");
    assert_eq!(l["method"], "GET");
    assert_eq!(l["route"], "/healthz");
    assert_eq!(l["status"], 200);
    assert!(l["latency_ms"].as_f64().is_some(), "{l}");
    let l = request_line("ops-graphql-1");
    assert_eq!(l["route"], "/graphql");
    assert_eq!(l["client_id"], CLIENT_ID);
    assert_eq!(l["subject"], USER);
    request_line(&generated);
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("does-not-exist") || l.contains("authors")),
        "raw paths or query strings in the log"
    );
    assert_no_secrets(&logs, &[&access, "wrong-secret"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn separate_metrics_address_takes_metrics_off_the_main_one() {
    let server = Server::start("[metrics]\nlisten = \"127.0.0.1:0\"\n", &[]);
    let c = client();
    let r = c
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    // Not served there (unknown paths need credentials like the REST API).
    assert!(r.status().is_client_error(), "{}", r.status());
    let text = c
        .get(server.metrics_url.clone().unwrap())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("gatehouse_http_requests_total"), "{text}");
    server.stop();
}

/// A request whose body arrives slowly is in flight when SIGTERM comes: it
/// still gets its answer, new connections are refused, and the exit is 0.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_an_in_flight_request_finish_and_exits_0() {
    let mut server = Server::start("", &[]);
    let access = token(&client(), &server.base).await;
    let addr = server.addr();
    let body = serde_json::json!({"query": "{ books { id } }"}).to_string();
    let (head, tail) = body.split_at(body.len() / 2);
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {access}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{head}",
        body.len()
    )
    .unwrap();
    conn.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let signalled = Instant::now();
    server.signal("TERM");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "new connections are refused while draining"
    );
    conn.write_all(tail.as_bytes()).unwrap();
    conn.flush().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = String::new();
    let _ = conn.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "response: {response:?}"
    );
    assert!(response.contains("\"books\""), "{response}");

    let status = server.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?}: {:#?}",
        server.logs()
    );
    assert!(signalled.elapsed() < Duration::from_secs(10));
    assert!(server.logs().iter().any(|l| l.contains("shut down")));
    assert_no_secrets(&server.logs(), &[&access]);
}

/// A request that never completes is cut at `shutdown_timeout`, and the
/// process still exits 0 in time.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_timeout_bounds_a_stuck_request() {
    let mut server = Server::start("shutdown_timeout = 2\n", &[]);
    let access = token(&client(), &server.base).await;
    let addr = server.addr();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    // Authenticated, so the handler is left waiting for a body that never ends.
    write!(
        conn,
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {access}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "exit {status:?}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf, reqwest::Certificate) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = cert.cert.pem();
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, &cert_pem).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    (
        cert_path,
        key_path,
        reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap(),
    )
}

fn tls_client(trust: reqwest::Certificate, addr: &str, http1: bool) -> reqwest::Client {
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let mut b = reqwest::Client::builder()
        .tls_certs_only([trust])
        .resolve("localhost", ([127, 0, 0, 1], port).into())
        .timeout(Duration::from_secs(10));
    if http1 {
        b = b.http1_only();
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn https_with_a_self_signed_certificate_and_reload_on_sighup() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, trust) = self_signed(certs.path(), "live");
    let extra = format!(
        "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let server = Server::start(&extra, &[]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let addr = server.addr();
    let port = addr.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}/healthz");

    let r = tls_client(trust.clone(), &addr, false)
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    let r = tls_client(trust.clone(), &addr, true)
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_11);
    // Plain HTTP on the TLS port gets no answer.
    assert!(
        client()
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .is_err()
    );

    // A new certificate in the same files, then SIGHUP: new connections get it.
    let (new_cert, new_key, new_trust) = self_signed(certs.path(), "next");
    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    server.signal("HUP");
    let mut reloaded = false;
    for _ in 0..50 {
        if let Ok(r) = tls_client(new_trust.clone(), &addr, false)
            .get(&url)
            .send()
            .await
        {
            assert_eq!(r.status(), 200);
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the new certificate was not served");
    assert!(
        tls_client(trust, &addr, false)
            .get(&url)
            .send()
            .await
            .is_err(),
        "the old certificate is still served"
    );
    let logs = server.stop();
    assert!(logs.iter().any(|l| l.contains("TLS certificate reloaded")));
}

/// A TCP proxy that can drop every connection and refuse new ones, standing
/// in for a PostgreSQL restart without touching the shared server.
struct Proxy {
    addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    /// Bumped on every cut; connections of an older generation close.
    generation: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let (flag, gen_tx) = (up.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !flag.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut gen_rx = gen_tx.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = gen_rx.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            up,
            generation,
        }
    }

    fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn status_of(c: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, Duration) {
    let start = Instant::now();
    let mut req = c.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
    (status, start.elapsed())
}

async fn wait_for_status(c: &reqwest::Client, url: &str, token: Option<&str>, want: u16) {
    let start = Instant::now();
    loop {
        let (status, _) = status_of(c, url, token).await;
        if status == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{url} stayed {status}, wanted {want}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_outage_fails_fast_with_503_and_recovers() {
    use sqlx::Connection;
    let Some(admin) = std::env::var("GATEHOUSE_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
    else {
        assert!(
            !matches!(
                std::env::var("GATEHOUSE_REQUIRE_POSTGRES").as_deref(),
                Ok("1")
            ),
            "GATEHOUSE_REQUIRE_POSTGRES=1 but GATEHOUSE_TEST_POSTGRES_URL is not set"
        );
        eprintln!("GATEHOUSE_TEST_POSTGRES_URL not set: skipped");
        return;
    };
    let name = format!("gh_ops_{}", uuid::Uuid::now_v7().simple());
    let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut c)
        .await
        .unwrap();
    // postgres://user@host:port/db?query -> the host:port and the rest.
    let after_scheme = admin.split_once("://").unwrap().1;
    let authority = after_scheme.split('/').next().unwrap();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h.to_string()),
        None => (String::new(), authority.to_string()),
    };
    let query = admin
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    let proxy = Proxy::start(hostport).await;
    let url = format!("postgres://{userinfo}{}/{name}{query}", proxy.addr);

    let dir = tempfile::tempdir().unwrap();
    let config = config_text(&url, "[store]\nacquire_timeout = \"2s\"\n");
    let server = Server::start_in(dir, &config, &[]);
    let base = server.base.clone();
    let http = client();
    let access = token(&http, &base).await;
    let books = format!("{base}/v1/books");
    assert_eq!(
        status_of(&http, &format!("{base}/readyz"), None).await.0,
        200
    );
    assert_eq!(status_of(&http, &books, Some(&access)).await.0, 200);

    proxy.cut();
    let (status, took) = status_of(&http, &format!("{base}/readyz"), None).await;
    assert_eq!(status, 503);
    assert!(took < Duration::from_secs(5), "readyz took {took:?}");
    let (status, took) = status_of(&http, &books, Some(&access)).await;
    assert_eq!(status, 503, "REST during the outage");
    assert!(took < Duration::from_secs(5), "REST took {took:?}");
    let start = Instant::now();
    let r = http
        .post(format!("{base}/graphql"))
        .bearer_auth(&access)
        .json(&serde_json::json!({"query": "{ books { id } }"}))
        .send()
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(r.status(), 503, "GraphQL during the outage");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "SERVICE_UNAVAILABLE",
        "{body}"
    );

    proxy.restore();
    wait_for_status(&http, &format!("{base}/readyz"), None, 200).await;
    wait_for_status(&http, &books, Some(&access), 200).await;
    let logs = server.stop();
    assert_no_secrets(&logs, &[&access]);

    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut c)
    .await;
}

#[test]
fn unreadable_tls_files_stop_the_start_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ops.db").display());
    let config = config_text(
        &db,
        "[tls]\ncert = \"missing.crt\"\nkey = \"missing.key\"\n",
    );
    std::fs::write(dir.path().join("gatehouse.toml"), config).unwrap();
    let o = crate::gatehouse(dir.path(), &["serve", "--config", "gatehouse.toml"]);
    assert_eq!(o.status.code(), Some(1));
    let err = crate::stderr(&o);
    assert!(err.contains("missing.crt"), "{err}");
    assert!(!crate::stdout(&o).contains("listening"));
}
