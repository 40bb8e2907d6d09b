//! The `query` mode: GraphQL queries over `graphql-transport-ws`, as a load
//! generator for `bench/graphql/run.sh` (the WebSocket counterpart of wrk
//! with `bench/request.lua`).
//!
//! Opens CONNECTIONS sockets (`connection_init` with the token, wait for
//! `connection_ack`), then each socket sends `subscribe` for the same
//! operation one after another, the next (with the next id) when the
//! previous one's `complete` arrives, until SECONDS have passed. One request
//! is one operation: its latency runs from just before `subscribe` is
//! written to the moment `complete` is read.
//!
//! Prints a `BENCH_SAMPLE` line (the first `next` payload, for the caller to
//! check the answer) and a `BENCH_RESULT` line with the fields of
//! `bench/request.lua`'s: an operation answered with `errors` (or an `error`
//! message) counts in `non2xx`, a socket that failed in `socket_errors`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::{Error, Target};

/// What one socket did.
#[derive(Default)]
struct Outcome {
    /// Latency of every completed operation, in microseconds.
    latencies: Vec<u32>,
    /// Operations answered with errors.
    errors: usize,
    /// The first `next` payload, when asked for.
    sample: Option<String>,
    /// Whether the socket failed (open, read or write).
    failed: bool,
}

type Socket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Runs operations on `ws` until `deadline`, one at a time.
async fn drive(
    mut ws: Socket,
    payload: Arc<Value>,
    start: Instant,
    deadline: Instant,
    keep_sample: bool,
) -> Outcome {
    let mut out = Outcome::default();
    // Time of the start relative to which latencies are taken: the
    // operations begin together.
    tokio::time::sleep_until(start.into()).await;
    let mut n: u64 = 0;
    while Instant::now() < deadline {
        n += 1;
        let id = n.to_string();
        let subscribe = json!({"type": "subscribe", "id": id, "payload": &*payload}).to_string();
        let at = Instant::now();
        if ws.send(Message::text(subscribe)).await.is_err() {
            out.failed = true;
            return out;
        }
        let mut errored = false;
        loop {
            let text = match ws.next().await {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => {
                    out.failed = true;
                    return out;
                }
            };
            let v: Value = match serde_json::from_str(text.as_str()) {
                Ok(v) => v,
                Err(_) => {
                    out.failed = true;
                    return out;
                }
            };
            match v["type"].as_str() {
                Some("ping") => {
                    let pong = json!({"type": "pong"}).to_string();
                    if ws.send(Message::text(pong)).await.is_err() {
                        out.failed = true;
                        return out;
                    }
                    continue;
                }
                Some("pong") => continue,
                _ => {}
            }
            if v["id"].as_str() != Some(id.as_str()) {
                errored = true;
                continue;
            }
            match v["type"].as_str() {
                Some("next") => {
                    if v["payload"].get("errors").is_some() {
                        errored = true;
                    }
                    if keep_sample && out.sample.is_none() {
                        out.sample = Some(v["payload"].to_string());
                    }
                }
                Some("complete") => break,
                // `error` ends the operation (no `complete` follows).
                _ => {
                    errored = true;
                    break;
                }
            }
        }
        let micros = at.elapsed().as_micros();
        out.latencies
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        out.errors += usize::from(errored);
    }
    let _ = ws.close(None).await;
    out
}

fn pct_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).floor() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)]) / 1000.0
}

/// `subs-loadgen query BASE_URL TOKEN CONNECTIONS SECONDS PAYLOAD`
pub async fn run(
    target: Arc<Target>,
    connections: usize,
    seconds: f64,
    payload: Value,
) -> Result<(), Error> {
    let failed_opening = Arc::new(AtomicUsize::new(0));
    let opened = futures_util::future::join_all((0..connections).map(|i| {
        let target = target.clone();
        let failed = failed_opening.clone();
        tokio::spawn(async move {
            match crate::open(&target, None).await {
                Ok(ws) => Some(ws),
                Err(e) => {
                    if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("socket {i}: {e}");
                    }
                    None
                }
            }
        })
    }))
    .await;
    let sockets: Vec<Socket> = opened
        .into_iter()
        .filter_map(|r| r.ok().flatten())
        .collect();
    if sockets.is_empty() {
        return Err("no socket could be opened".into());
    }
    let payload = Arc::new(payload);
    // A little later than now, so every socket's task is spawned before
    // the first operation is sent.
    let start = Instant::now() + Duration::from_millis(20);
    let deadline = start + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, ws)| tokio::spawn(drive(ws, payload.clone(), start, deadline, i == 0)))
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut failed = failed_opening.load(Ordering::Relaxed);
    let mut sample = None;
    for task in tasks {
        let out = task.await?;
        latencies.extend(out.latencies);
        errors += out.errors;
        failed += usize::from(out.failed);
        if sample.is_none() {
            sample = out.sample;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort_unstable();
    println!("BENCH_SAMPLE {}", sample.unwrap_or_default());
    println!(
        "BENCH_RESULT requests={} seconds={:.3} rps={:.1} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} max_ms={:.3} non2xx={} socket_errors={}",
        latencies.len(),
        secs,
        latencies.len() as f64 / secs,
        pct_ms(&latencies, 50.0),
        pct_ms(&latencies, 90.0),
        pct_ms(&latencies, 99.0),
        f64::from(latencies.last().copied().unwrap_or(0)) / 1000.0,
        errors,
        failed,
    );
    Ok(())
}
