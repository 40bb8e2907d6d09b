//! Operations, end to end against the real binary: request ids and logs,
//! metrics, HTTPS with certificate reload, graceful shutdown, and readiness
//! across a PostgreSQL outage.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gatehouse_testkit::{ServerProcess, TestDb, password_token, repo_root};

const CLIENT_ID: &str = "ops-client";
const CLIENT_SECRET: &str = "ops-client-secret-Zq81xK";
const USER: &str = "olga";
const PASSWORD: &str = "olga-password-Vb92";
const KEY_SECRET: &str = "key-encryption-secret-Jx71wQ0p";

/// A config with a client and a user whose secrets the log checks look for.
/// The example's schema without its account type: the user's claims are
/// set by hand.
fn config_text(database: &str, extra: &str) -> String {
    let schema: Vec<String> = crate::library_schema_without_accounts()
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    format!(
        r#"listen = "127.0.0.1:0"
database = "{database}"
schema = [{schema}]
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
        schema = schema.join(", ")
    )
}

/// Starts the binary on a fresh SQLite database with `extra` config text
/// (top-level keys first, then sections).
fn start_server(extra: &str, args: &[&str]) -> ServerProcess {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ops.db").display());
    start_server_in(dir, &config_text(&db, extra), args)
}

/// Starts the binary in `dir` with `config` as its configuration file.
fn start_server_in(dir: tempfile::TempDir, config: &str, args: &[&str]) -> ServerProcess {
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(&file, config).unwrap();
    let mut all = vec!["--config", file.to_str().unwrap()];
    all.extend_from_slice(args);
    let env = [("GATEHOUSE_SECRET", KEY_SECRET), ("GATEHOUSE_LOG", "info")];
    crate::serve(dir.path(), &all, &env).with_dir(dir)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn token(c: &reqwest::Client, base: &str) -> String {
    let client = (CLIENT_ID, CLIENT_SECRET);
    let r = password_token(c, base, client, (USER, PASSWORD), Some("read write")).await;
    r["access_token"].as_str().unwrap().to_string()
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
    let server = start_server("", &["--log-format", "json"]);
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
    // Every percent-encoded spelling of a collection counts under the
    // collection's one label: raw paths never become series or log fields.
    for path in ["books", "b%6Foks", "bo%6Fks", "%62ooks"] {
        let r = c
            .get(format!("{base}/v1/{path}"))
            .bearer_auth(&access)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = c
        .get(format!("{base}/v1/no-such-collection"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
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
            4.0,
        ),
        (
            r#"gatehouse_http_requests_total{method="GET",route="/v1/books/{id}",status="404"}"#,
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
        // The GraphQL reads above were their documents' first: async-graphql validated them.
        (
            r#"gatehouse_graphql_fallback_total{reason="validation"}"#,
            1.0,
        ),
        // Registered at zero from the start.
        (r#"gatehouse_graphql_fallback_total{reason="refused"}"#, 0.0),
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
        !text.contains("%6F") && !text.contains("%62") && !text.contains("no-such"),
        "raw paths in metric labels:\n{text}"
    );
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
        !logs.iter().any(|l| l.contains("does-not-exist")
            || l.contains("authors")
            || l.contains("%6F")
            || l.contains("no-such")),
        "raw paths or query strings in the log"
    );
    assert_no_secrets(&logs, &[&access, "wrong-secret"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn separate_metrics_address_takes_metrics_off_the_main_one() {
    let server = start_server("[metrics]\nlisten = \"127.0.0.1:0\"\n", &[]);
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
    let mut server = start_server("", &[]);
    let access = token(&client(), &server.base).await;
    let addr = server.addr();
    let body = serde_json::json!({"query": "{ books { id } }"}).to_string();
    let (head, tail) = body.split_at(body.len() / 2);
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    // `Expect: 100-continue`: the server says `100 Continue` once the
    // handler reads the body, which is when the request is in flight.
    write!(
        conn,
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {access}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\
         Expect: 100-continue\r\n\r\n",
        body.len()
    )
    .unwrap();
    conn.flush().unwrap();
    let interim = read_head(&mut conn);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim:?}");
    conn.write_all(head.as_bytes()).unwrap();
    conn.flush().unwrap();

    let signalled = Instant::now();
    server.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(&addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "new connections are still accepted 5 s into draining"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let mut server = start_server("shutdown_timeout = 2\n", &[]);
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
    let server = start_server(&extra, &[]);
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
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let (proxy, url) = gatehouse_testkit::Proxy::postgres(db.url()).await;

    let dir = tempfile::tempdir().unwrap();
    let config = config_text(&url, "[store]\nacquire_timeout = \"2s\"\n");
    let server = start_server_in(dir, &config, &[]);
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

// Connection limits (slowloris). Each test sets short limits and waits for
// the server to act; the bounds are several times the configured values so
// a slow machine cannot make them flake, and each would be hit (the
// connection still open) without the limit.

/// Reads from `conn` until the server closes it (EOF or reset) or `limit`
/// passes; returns what was read and how long the server took to close,
/// `None` when it was still open at `limit`.
/// Reads one response head (to the blank line) from `conn`, within 10 s.
fn read_head(conn: &mut std::net::TcpStream) -> String {
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn read_until_closed(
    conn: &mut std::net::TcpStream,
    limit: Duration,
) -> (Vec<u8>, Option<Duration>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return (got, None);
        }
        conn.set_read_timeout(Some(left)).unwrap();
        match conn.read(&mut buf) {
            Ok(0) => return (got, Some(start.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (got, None);
            }
            // Reset by the server: closed.
            Err(_) => return (got, Some(start.elapsed())),
        }
    }
}

/// A connection that never sends anything is closed at
/// `limits.header_read_timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_new_connection_is_closed_at_the_header_read_timeout() {
    let server = start_server("[limits]\nheader_read_timeout = 1\n", &[]);
    let mut conn = std::net::TcpStream::connect(server.addr()).unwrap();
    let (got, closed) = read_until_closed(&mut conn, Duration::from_secs(15));
    let closed = closed.expect("the idle connection is still open after 15 s");
    assert!(closed < Duration::from_secs(8), "closed after {closed:?}");
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    server.stop();
}

/// A request head sent one line at a time (slowloris) is cut at
/// `limits.header_read_timeout`, however steadily the lines come.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_trickled_line_by_line_is_cut_at_the_header_read_timeout() {
    let server = start_server("[limits]\nheader_read_timeout = 2\n", &[]);
    let addr = server.addr();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    let mut writer = conn.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        let _ = write!(writer, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n");
        for i in 0..80 {
            std::thread::sleep(Duration::from_millis(250));
            if write!(writer, "X-Slow-{i}: a\r\n").is_err() {
                return;
            }
        }
    });
    let (got, closed) = read_until_closed(&mut conn, Duration::from_secs(20));
    let closed = closed.expect("the trickled head is still being read after 20 s");
    assert!(closed < Duration::from_secs(10), "closed after {closed:?}");
    let got = String::from_utf8_lossy(&got);
    assert!(!got.contains(" 200 "), "the request was answered: {got}");
    trickle.join().unwrap();
    server.stop();
}

/// A body that keeps trickling but never completes is answered 408 at
/// `limits.body_read_timeout` (a total bound, not one per read), and the
/// connection is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_never_completes_gets_408_at_the_body_read_timeout() {
    let server = start_server("[limits]\nbody_read_timeout = 2\n", &[]);
    let access = token(&client(), &server.base).await;
    let addr = server.addr();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    // Authenticated, so the handler reads the body.
    write!(
        conn,
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {access}\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
    )
    .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..80 {
            std::thread::sleep(Duration::from_millis(250));
            if writer.write_all(b" ").is_err() {
                return;
            }
        }
    });
    let (got, closed) = read_until_closed(&mut conn, Duration::from_secs(20));
    let got = String::from_utf8_lossy(&got).into_owned();
    let closed = closed.unwrap_or_else(|| panic!("still open after 20 s; read: {got:?}"));
    assert!(closed < Duration::from_secs(10), "closed after {closed:?}");
    assert!(got.starts_with("HTTP/1.1 408"), "response: {got:?}");
    assert!(
        got.to_ascii_lowercase().contains("connection: close"),
        "{got}"
    );
    trickle.join().unwrap();
    // A body that arrives in time is still served.
    let r = client()
        .post(format!("{}/graphql", server.base))
        .bearer_auth(&access)
        .json(&serde_json::json!({"query": "{ books { id } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.stop();
}

/// An HTTP/1.1 keep-alive connection left idle after a response is closed
/// at `limits.idle_timeout`, and not before about that long.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let server = start_server(
        "[limits]\nidle_timeout = 2\nheader_read_timeout = 60\n",
        &[],
    );
    let addr = server.addr();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(conn, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    // The whole response (its head announces the length) before timing.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    loop {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the response");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .expect("a content-length");
            if body.len() >= len {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                break;
            }
        }
    }
    let (rest, closed) = read_until_closed(&mut conn, Duration::from_secs(20));
    let closed = closed.expect("the idle keep-alive connection is still open after 20 s");
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(10),
        "closed after {closed:?}"
    );
    server.stop();
}

/// Beyond `limits.max_connections` a new connection is closed at once;
/// when one closes, a new one is served again.
#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_max_connections_are_closed_at_once() {
    let server = start_server(
        "[limits]\nmax_connections = 2\nheader_read_timeout = 60\n",
        &[],
    );
    let addr = server.addr();
    // Both held open by the server once each has been answered (kept alive).
    let mut first = std::net::TcpStream::connect(&addr).unwrap();
    let mut second = std::net::TcpStream::connect(&addr).unwrap();
    for conn in [&mut first, &mut second] {
        write!(conn, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let head = read_head(conn);
        assert!(head.starts_with("HTTP/1.1 200"), "{head:?}");
    }
    let mut third = std::net::TcpStream::connect(&addr).unwrap();
    let _ = write!(third, "GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let (got, closed) = read_until_closed(&mut third, Duration::from_secs(15));
    let closed = closed.expect("a connection beyond the cap is still open after 15 s");
    assert!(closed < Duration::from_secs(5), "closed after {closed:?}");
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));

    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        let _ = write!(
            conn,
            "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        );
        let (got, _) = read_until_closed(&mut conn, Duration::from_secs(10));
        if String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no place freed by a closed connection"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs = server.stop();
    assert!(
        logs.iter().any(|l| l.contains("connection limit reached")),
        "{logs:#?}"
    );
}

/// SSE streams are requests in flight: the header, body and idle timeouts
/// (all 1 s here) never cut one.
#[tokio::test(flavor = "multi_thread")]
async fn an_sse_stream_outlives_the_connection_timeouts() {
    let server = start_server(
        "[limits]\nheader_read_timeout = 1\nbody_read_timeout = 1\nidle_timeout = 1\n\
         [subscriptions]\nkeepalive = 1\n",
        &[],
    );
    let access = token(&client(), &server.base).await;
    let addr = server.addr();
    let body = serde_json::json!({"query": "subscription { bookDeleted { id } }"}).to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /graphql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {access}\r\n\
         Accept: text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let (got, closed) = read_until_closed(&mut conn, Duration::from_secs(5));
    let got = String::from_utf8_lossy(&got);
    assert!(closed.is_none(), "the stream was closed: {got:?}");
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // Keep-alive comments kept coming the whole time.
    assert!(got.matches(":\n\n").count() >= 3, "{got:?}");
    server.stop();
}

/// A new SQLite database and the `-wal` and `-shm` files SQLite creates
/// beside it are readable by their owner only; an existing database keeps
/// its mode, with a warning when others may read it.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_files_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join("fresh.db");
    let db = format!("sqlite://{}", path.display());
    let server = start_server_in(dir, &config_text(&db, ""), &[]);
    // A write, so the WAL has content while the server runs.
    token(&client(), &server.base).await;
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        assert!(file.exists(), "{} missing", file.display());
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let logs = server.stop();
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("readable or writable by other users"))
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let db = format!("sqlite://{}", path.display());
    let server = start_server_in(dir, &config_text(&db, ""), &[]);
    token(&client(), &server.base).await;
    assert_eq!(mode(&path), 0o644, "an existing file keeps its mode");
    let logs = server.stop();
    assert!(
        logs.iter()
            .any(|l| l.contains("readable or writable by other users")),
        "{logs:#?}"
    );
}

/// `[[bootstrap.users]] claims` reach the user's tokens, and a changed
/// configuration replaces them at the next start.
#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_claims_reach_tokens_and_follow_the_config() {
    let data = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", data.path().join("claims.db").display());
    let c = client();
    for (claims, want) in [
        (
            r#"{ org = "acme", level = 2 }"#,
            serde_json::json!({"org": "acme", "level": 2}),
        ),
        (r#"{ team = "x" }"#, serde_json::json!({"team": "x"})),
    ] {
        let config = format!("{}claims = {claims}\n", config_text(&db, ""));
        let server = start_server_in(tempfile::tempdir().unwrap(), &config, &[]);
        let access = token(&c, &server.base).await;
        let answer: serde_json::Value = c
            .post(format!("{}/oauth/introspect", server.base))
            .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
            .form(&[("token", access.as_str())])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["active"], true, "{answer}");
        assert_eq!(answer["sub"], USER);
        for name in ["org", "level", "team"] {
            assert_eq!(answer[name], want[name], "{name}: {answer}");
        }
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_json_prints_what_the_endpoint_serves() {
    let server = start_server("", &[]);
    let c = client();
    let token = token(&c, &server.base).await;
    let served: serde_json::Value = c
        .get(format!("{}/graphql/schema.json", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The schema the server was given (`config_text`).
    let files: Vec<String> = crate::library_schema_without_accounts()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["schema", "json"];
    for f in &files {
        args.extend(["--schema", f.as_str()]);
    }
    let o = crate::gatehouse(&repo_root(), &args);
    assert_eq!(o.status.code(), Some(0), "{}", crate::stderr(&o));
    let printed: serde_json::Value = serde_json::from_str(&crate::stdout(&o)).unwrap();
    assert!(printed["data"]["__schema"]["types"].is_array(), "{printed}");
    assert_eq!(printed, served);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_write_nothing_but_json_objects() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ops.db").display());
    let extra = "[metrics]\nlisten = \"127.0.0.1:0\"\n";
    let server = start_server_in(dir, &config_text(&db, extra), &["--log-format", "json"]);
    assert!(server.metrics_url.is_some(), "{:?}", server.logs());
    let c = client();
    token(&c, &server.base).await;
    let out = server.stdout_lines();
    let logs = server.stop();
    assert!(out.is_empty(), "stdout in JSON mode: {out:?}");
    let mut listening = false;
    for line in &logs {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(event.is_object(), "{line}");
        if event["message"] == "listening" {
            assert_eq!(event["url"], server_url(&event));
            listening = true;
        }
    }
    assert!(listening, "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("\"shut down\"")), "{logs:?}");

    // A start that fails (a bad schema) reports in JSON too.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.graphql"),
        "type Query { nothing: Nope }\n",
    )
    .unwrap();
    let o = crate::gatehouse(
        dir.path(),
        &["serve", "--schema", "s.graphql", "--log-format", "json"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "{}", crate::stdout(&o));
    let err = crate::stderr(&o);
    assert!(err.contains("Nope"), "{err}");
    for line in err.lines() {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(event.is_object(), "{line}");
    }
}

/// `scheme://addr` of a `listening` event.
fn server_url(event: &serde_json::Value) -> String {
    format!(
        "{}://{}",
        event["scheme"].as_str().unwrap(),
        event["addr"].as_str().unwrap()
    )
}

/// The `client` of the request log line with this request id.
fn logged_client(logs: &[String], request_id: &str) -> Option<String> {
    logs.iter().find_map(|line| {
        let event: serde_json::Value = serde_json::from_str(line).ok()?;
        (event["message"] == "request" && event["request_id"] == request_id)
            .then(|| event["client"].as_str().map(str::to_string))?
    })
}

/// Sends 45 failed client authentications (throttled per address and per
/// client and address after a few free ones), each claiming another
/// address; returns how many got 429.
async fn spoofed_burst(c: &reqwest::Client, base: &str) -> usize {
    let mut limited = 0;
    for i in 0..45 {
        let r = c
            .post(format!("{base}/oauth/token"))
            .basic_auth("nobody", Some("wrong"))
            .form(&[("grant_type", "client_credentials")])
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            limited += 1;
        }
    }
    limited
}

#[tokio::test(flavor = "multi_thread")]
async fn x_forwarded_for_is_ignored_from_an_untrusted_peer() {
    // The peer (127.0.0.1) is not a trusted proxy.
    let server = start_server(
        "trusted_proxies = [\"10.0.0.0/8\"]\n",
        &["--log-format", "json"],
    );
    let c = client();
    c.get(format!("{}/healthz", server.base))
        .header("x-forwarded-for", "203.0.113.5")
        .header("forwarded", "for=203.0.113.6")
        .header("x-request-id", "spoofed-1")
        .send()
        .await
        .unwrap();
    assert!(
        spoofed_burst(&c, &server.base).await > 0,
        "one address, one bucket"
    );
    let logs = server.stop();
    assert_eq!(
        logged_client(&logs, "spoofed-1").as_deref(),
        Some("127.0.0.1")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn x_forwarded_for_from_a_trusted_proxy_is_the_client() {
    let server = start_server(
        "trusted_proxies = [\"127.0.0.0/8\", \"::1\"]\n",
        &["--log-format", "json"],
    );
    let c = client();
    c.get(format!("{}/healthz", server.base))
        // The left-most entry was written by the client: not believed.
        .header("x-forwarded-for", "6.6.6.6, 203.0.113.5")
        .header("x-request-id", "proxied-1")
        .send()
        .await
        .unwrap();
    // Only the configured family (X-Forwarded-For by default) is read: a
    // `Forwarded` header is the client's own, passed through by the proxy.
    c.get(format!("{}/healthz", server.base))
        .header("forwarded", "for=\"[2001:db8::7]:4711\";proto=https")
        .header("x-request-id", "proxied-2")
        .send()
        .await
        .unwrap();
    // Every client behind the proxy has its own bucket.
    assert_eq!(spoofed_burst(&c, &server.base).await, 0);
    let logs = server.stop();
    assert_eq!(
        logged_client(&logs, "proxied-1").as_deref(),
        Some("203.0.113.5")
    );
    assert_eq!(
        logged_client(&logs, "proxied-2").as_deref(),
        Some("127.0.0.1")
    );
}

#[test]
fn a_bad_trusted_proxy_entry_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        "trusted_proxies = [\"10.0.0.0/33\"]\n",
    )
    .unwrap();
    let o = crate::gatehouse(
        dir.path(),
        &[
            "check",
            "--schema",
            &repo_root()
                .join("examples/library/schema")
                .display()
                .to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        crate::stderr(&o).contains("10.0.0.0/33"),
        "{}",
        crate::stderr(&o)
    );
}
