//! Subscription load generator for `bench/subscriptions/run.sh` (the default
//! one; `load.mjs` is the Node alternative with the same output).
//!
//! Opens N `graphql-transport-ws` sockets, each subscribed to `bookCreated`
//! (`connection_init` with the token, wait for `connection_ack`, `subscribe`
//! with its own id), then creates one book per second over HTTP and measures,
//! per mutation, the delay from just before the mutation request is written
//! to the moment each subscriber has read its `next` message (the commit
//! happens inside that window, so this is an upper bound of
//! commit-to-delivery). Prints one JSON line: p50/p99 over all deliveries,
//! p50/p99 of the last subscriber per mutation, and the server's RSS growth
//! per idle subscriber (`/proc/PID/status`).
//!
//! Why not Node: on a shared 2-CPU machine the client's cost per message
//! competes with the server for the same cores. Here a subscriber is a tokio
//! task that only timestamps a message and keeps its bytes; parsing happens
//! after the run, and all times are one monotonic clock.
//!
//! Usage: `subs-loadgen BASE_URL TOKEN SERVER_PID N MUTATIONS`; the
//! environment variable `CLIENT_THREADS` (default 1) sets the runtime's
//! worker threads. One thread is the default because the client shares the
//! machine's two CPUs with the server it measures: with two, the client's
//! workers wake and steal from each other and it took 5.5-6.1 µs of CPU per
//! delivery instead of 3.4-4.1 µs, CPU the server then did not get
//! (`bench/RESULTS.md`, subscriptions, 2026-11-24).
//!
//! A second mode, `subs-loadgen query BASE_URL TOKEN CONNECTIONS SECONDS
//! PAYLOAD`, sends queries over WebSocket for `bench/graphql/run.sh`
//! (see `query.rs`).

mod query;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Sockets opened at once (as load.mjs does), so the accept queue is not flooded.
const OPEN_BATCH: usize = 250;

struct Target {
    /// `127.0.0.1:PORT`
    addr: String,
    /// `/graphql` path prefix, e.g. `` or `/api`.
    path: String,
    token: String,
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads: usize = std::env::var("CLIENT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    if args.first().map(String::as_str) == Some("query") {
        let [_, base, token, connections, seconds, payload] = args.as_slice() else {
            return Err(
                "usage: subs-loadgen query BASE_URL TOKEN CONNECTIONS SECONDS PAYLOAD".into(),
            );
        };
        let target = target(base, token)?;
        return runtime.block_on(query::run(
            target,
            connections.parse()?,
            seconds.parse()?,
            serde_json::from_str(payload)?,
        ));
    }
    let [base, token, pid, n, mutations] = args.as_slice() else {
        return Err("usage: subs-loadgen BASE_URL TOKEN SERVER_PID N MUTATIONS".into());
    };
    let target = target(base, token)?;
    runtime.block_on(run(
        target,
        pid.clone(),
        n.parse()?,
        mutations.parse()?,
        threads,
    ))
}

/// The target of `BASE_URL` (`http://HOST:PORT[/PREFIX]`) and `TOKEN`.
fn target(base: &str, token: &str) -> Result<Arc<Target>, Error> {
    let rest = base
        .strip_prefix("http://")
        .ok_or("BASE_URL must start with http://")?;
    let (addr, path) = match rest.find('/') {
        Some(i) => (
            rest[..i].to_string(),
            rest[i..].trim_end_matches('/').to_string(),
        ),
        None => (rest.to_string(), String::new()),
    };
    Ok(Arc::new(Target {
        addr,
        path,
        token: token.to_string(),
    }))
}

fn rss_kb(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// POSTs a GraphQL request on a fresh connection. The connection is opened
/// first and `at` is read just before the request is written, so the
/// measured window holds the request, the commit and the deliveries, not the
/// TCP handshake. Returns the send time and the response body.
/// CPU time (user + system) of process `pid` so far, in milliseconds.
/// `/proc/PID/stat` counts in USER_HZ ticks, which Linux fixes at 100 a
/// second for user space.
fn cpu_ms(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from `state`:
    // utime and stime are the 14th and 15th fields of the line.
    let mut fields = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 10)
}

async fn graphql(
    target: &Target,
    query: &str,
    variables: Value,
) -> Result<(Instant, Value), Error> {
    let body = json!({"query": query, "variables": variables}).to_string();
    let request = format!(
        "POST {}/graphql HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        target.path,
        target.addr,
        target.token,
        body.len(),
        body
    );
    let mut stream = TcpStream::connect(&target.addr).await?;
    stream.set_nodelay(true)?;
    let at = Instant::now();
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("mutation failed: {head}").into());
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err("chunked responses are not supported".into());
    }
    Ok((at, serde_json::from_str(body)?))
}

/// What one subscriber saw: the time and text of every message after its
/// `subscribe`, and whether the socket ended badly.
#[derive(Default)]
struct Seen {
    arrivals: Vec<(Instant, Utf8Bytes)>,
    failed: bool,
}

/// A subscriber's reading task and what it saw. The task is aborted at the
/// end of the run; the lock is only ever contended then, so a message costs
/// an uncontended lock, not a `select!` on a stop signal shared by all
/// 10,000 tasks.
struct Reader {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<Seen>>,
}

/// A `graphql-transport-ws` socket to `target`, opened with `config`
/// (tungstenite's defaults when `None`), the token sent in
/// `connection_init`; returns once `connection_ack` arrived.
pub(crate) async fn open(
    target: &Target,
    config: Option<WebSocketConfig>,
) -> Result<WebSocketStream<TcpStream>, Error> {
    let stream = TcpStream::connect(&target.addr).await?;
    stream.set_nodelay(true)?;
    let mut request =
        format!("ws://{}{}/graphql", target.addr, target.path).into_client_request()?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("graphql-transport-ws"),
    );
    let (mut ws, _) = tokio_tungstenite::client_async_with_config(request, stream, config).await?;
    let init = json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {}", target.token)}});
    ws.send(Message::text(init.to_string())).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(t.as_str())?;
                if v["type"] == "connection_ack" {
                    return Ok(ws);
                }
                return Err(format!("expected connection_ack, got {t}").into());
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => return Err(format!("no connection_ack: {other:?}").into()),
        }
    }
}

/// Opens one subscriber; returns once it is subscribed (or failed), with the
/// task that reads its messages.
async fn subscriber(target: Arc<Target>, id: usize) -> Result<Reader, Error> {
    // tungstenite's default 128 KiB read buffer per socket would take over a
    // gigabyte for 10,000 subscribers; the messages here are small.
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0);
    let mut ws = open(&target, Some(config)).await?;
    let subscribe = json!({
        "type": "subscribe",
        "id": format!("s{id}"),
        "payload": {"query": "subscription { bookCreated { title } }"},
    });
    ws.send(Message::text(subscribe.to_string())).await?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            loop {
                let msg = ws.next().await;
                let at = Instant::now();
                let mut seen = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match msg {
                    Some(Ok(Message::Text(t))) => seen.arrivals.push((at, t)),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    _ => {
                        seen.failed = true;
                        return;
                    }
                }
            }
        }
    });
    Ok(Reader { task, seen })
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).floor() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

async fn run(
    target: Arc<Target>,
    pid: String,
    n: usize,
    mutations: usize,
    threads: usize,
) -> Result<(), Error> {
    let (_, author) = graphql(
        &target,
        "mutation($n: String!) { createAuthor(name: $n) { id } }",
        json!({"n": format!("load {:?}", std::time::SystemTime::now())}),
    )
    .await?;
    let author = author["data"]["createAuthor"]["id"].clone();
    if author.is_null() {
        return Err(format!("createAuthor failed: {author}").into());
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kb(&pid);
    let mut readers = Vec::with_capacity(n);
    let failed_opening = Arc::new(AtomicUsize::new(0));
    let mut next = 0;
    while next < n {
        let batch = OPEN_BATCH.min(n - next);
        let opened = futures_util::future::join_all((next..next + batch).map(|i| {
            let target = target.clone();
            let failed = failed_opening.clone();
            // Spawned, so the handshakes of a batch spread over the workers.
            tokio::spawn(async move {
                match subscriber(target, i).await {
                    Ok(reader) => Some(reader),
                    Err(e) => {
                        if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("subscriber {i}: {e}");
                        }
                        None
                    }
                }
            })
        }))
        .await;
        readers.extend(opened.into_iter().filter_map(|r| r.ok().flatten()));
        next += batch;
    }
    let ready = readers.len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_kb(&pid);

    let cpu_before = (cpu_ms(&pid), cpu_ms("self"));
    let mut sent = Vec::with_capacity(mutations);
    for k in 0..mutations {
        let (at, response) = graphql(
            &target,
            "mutation($i: BookInput!) { createBook(input: $i) { id } }",
            json!({"i": {"title": format!("load-{k}"), "status": "AVAILABLE", "author": author}}),
        )
        .await?;
        if response.get("errors").is_some() {
            return Err(format!("createBook failed: {response}").into());
        }
        sent.push(at);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu_after = (cpu_ms(&pid), cpu_ms("self"));
    for reader in &readers {
        reader.task.abort();
    }

    // Per mutation: the latency of every delivery, in milliseconds.
    let mut per_mutation: Vec<Vec<f64>> = vec![Vec::new(); mutations];
    let mut failed = failed_opening.load(Ordering::Relaxed);
    let mut other = 0usize;
    for reader in readers {
        let _ = reader.task.await;
        let seen = std::mem::take(
            &mut *reader
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        failed += usize::from(seen.failed);
        for (at, text) in seen.arrivals {
            let v: Value = serde_json::from_str(text.as_str())?;
            let title = v["payload"]["data"]["bookCreated"]["title"].as_str();
            let k = match (
                v["type"].as_str(),
                title.and_then(|t| t.strip_prefix("load-")),
            ) {
                (Some("next"), Some(k)) => k.parse::<usize>().ok(),
                _ => None,
            };
            match k.filter(|k| *k < mutations) {
                Some(k) => per_mutation[k]
                    .push(at.saturating_duration_since(sent[k]).as_secs_f64() * 1000.0),
                None => other += 1,
            }
        }
    }
    let mut all: Vec<f64> = per_mutation.iter().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let mut last: Vec<f64> = per_mutation
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| d.iter().copied().fold(0.0, f64::max))
        .collect();
    last.sort_by(f64::total_cmp);
    let kb_per_subscriber = match (rss_before, rss_idle) {
        (Some(b), Some(i)) => {
            Value::from(((i as f64 - b as f64) / ready.max(1) as f64 * 100.0).round() / 100.0)
        }
        _ => Value::Null,
    };
    // CPU spent during the mutation phase, per delivery: the server's is a
    // repeatable measure of its cost per delivery (wall-clock latency on a
    // shared machine is not); the client's shows what it takes from the
    // same cores.
    let per_delivery = |before: Option<u64>, after: Option<u64>| match (before, after) {
        (Some(b), Some(a)) if !all.is_empty() => Value::from(
            (a.saturating_sub(b) as f64 * 1000.0 / all.len() as f64 * 100.0).round() / 100.0,
        ),
        _ => Value::Null,
    };
    let server_cpu_us = per_delivery(cpu_before.0, cpu_after.0);
    let client_cpu_us = per_delivery(cpu_before.1, cpu_after.1);
    println!(
        "{}",
        json!({
            "loadgen": "rust",
            "subscribers": ready,
            "failed": failed,
            "client_threads": threads,
            "mutations": mutations,
            "deliveries": all.len(),
            "other_messages": other,
            "min_delivered_per_mutation": per_mutation.iter().map(Vec::len).min().unwrap_or(0),
            "p50_ms": round1(pct(&all, 50.0)),
            "p99_ms": round1(pct(&all, 99.0)),
            "last_subscriber_p50_ms": round1(pct(&last, 50.0)),
            "last_subscriber_p99_ms": round1(pct(&last, 99.0)),
            "rss_before_kb": rss_before,
            "rss_idle_kb": rss_idle,
            "kb_per_subscriber": kb_per_subscriber,
            "server_cpu_us_per_delivery": server_cpu_us,
            "client_cpu_us_per_delivery": client_cpu_us,
        })
    );
    Ok(())
}
