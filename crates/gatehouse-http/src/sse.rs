//! GraphQL over Server-Sent Events, "distinct connections mode"
//! (<https://github.com/enisdenjo/graphql-sse/blob/master/PROTOCOL.md>):
//! `POST` (or `GET`) `{base}/graphql` with `Accept: text/event-stream`
//! (read by GraphQL over HTTP, then handed here by `endpoint.rs`)
//! answers one stream per operation: `event: next` per result, then
//! `event: complete`. Errors found before execution also arrive as a `next`
//! event (the protocol's rule: a 400 would lose them in `EventSource`).
//! A subscription joins the group of identical ones ([`crate::fanout`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use gatehouse_auth::Principal;
use gatehouse_graphql::error::Code;
use serde_json::json;
use tokio::sync::mpsc;

use crate::AppState;
use crate::fanout::{Delivery, Sink};
use crate::live::{Credential, stale};
use crate::params::Params;

/// Whether the client asks for an event stream.
pub(crate) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',').any(|part| {
                part.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
            })
        })
}

fn event(name: &str, data: &str) -> Bytes {
    // The JSON is on one line (serde_json never writes raw newlines), so one
    // `data:` line carries it.
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// Answers `params` as an event stream, acting for `principal`; the stream
/// ends when the operation does, when the client goes away, when the
/// credential in `headers` goes stale (a final `next` carrying the error),
/// or when the server shuts down.
pub(crate) fn stream(
    state: &AppState,
    params: Params,
    principal: Option<Principal>,
    headers: &HeaderMap,
) -> Response {
    let credential = principal.clone().map(|principal| Credential {
        authorization: headers.get(header::AUTHORIZATION).cloned(),
        principal,
    });
    let opts = state.subscriptions.clone();
    let too_slow = Arc::new(AtomicBool::new(false));
    let mut results = deliveries(state, params.into_request(principal), &too_slow);
    let watch = stale(state.authn.clone(), credential, opts.recheck_interval);
    let (tx, rx) = mpsc::channel::<Bytes>(opts.queue_capacity.max(1));
    tokio::spawn(async move {
        let _active = crate::telemetry::subscription_started("sse");
        let mut watch = std::pin::pin!(watch);
        let mut shutdown = std::pin::pin!(opts.shutdown.clone().cancelled_owned());
        let mut keepalive = tokio::time::interval(opts.keepalive);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        keepalive.tick().await;
        loop {
            // Waiting on a full queue is the back-pressure: results wait in
            // the bounded queue of `deliveries`, and a subscriber that falls
            // too far behind there is dropped from its group (reported below).
            let next = tokio::select! {
                biased;
                () = tx.closed() => return,
                () = &mut shutdown => None,
                reason = &mut watch => {
                    let body = json!({"errors": [Code::Unauthenticated
                        .error_json(&format!("the subscription ended: {reason}"))]});
                    let _ = tx.send(event("next", &body.to_string())).await;
                    None
                }
                _ = keepalive.tick() => {
                    // An SSE comment: ignored by clients, keeps proxies from
                    // closing an idle stream.
                    if tx.send(Bytes::from_static(b":\n\n")).await.is_err() {
                        return;
                    }
                    continue;
                }
                item = results.next() => item,
            };
            let body = match next {
                Some(Delivery::Next(body)) => body,
                // The protocol's rule: errors found before execution are a
                // `next` event too; the stream then ends.
                Some(Delivery::Refused { response, .. }) => {
                    let _ = tx.send(event("next", &response)).await;
                    break;
                }
                Some(Delivery::Complete) | None => break,
            };
            if tx.send(event("next", &body)).await.is_err() {
                return;
            }
        }
        if too_slow.load(Ordering::Relaxed) {
            let body = json!({"errors": [Code::ServiceUnavailable.error_json(&format!(
                "the subscription ended: too slow, more than {} events waiting to be read",
                opts.queue_capacity
            ))]});
            let _ = tx.send(event("next", &body.to_string())).await;
        }
        let _ = tx.send(event("complete", "")).await;
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(body)).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tells nginx-like proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// The results of `request`: a subscription joins its group (its results
/// arrive through a bounded queue; `too_slow` is raised if that overflows,
/// and the stream then ends), anything else executes on its own.
fn deliveries(
    state: &AppState,
    request: gatehouse_graphql::async_graphql::Request,
    too_slow: &Arc<AtomicBool>,
) -> Pin<Box<dyn Stream<Item = Delivery> + Send>> {
    let graphql = &state.graphql;
    let key = if graphql.is_subscription(&request.query, request.operation_name.as_deref()) {
        graphql.sharing_key(&request)
    } else {
        None
    };
    let Some(key) = key else {
        return Box::pin(
            graphql
                .answer_stream(request)
                .map(|item| Delivery::of(&item)),
        );
    };
    let (tx, rx) = mpsc::channel(state.subscriptions.queue_capacity.max(1));
    let sink = SseSink {
        tx,
        too_slow: too_slow.clone(),
    };
    let membership = state
        .subscriptions
        .fanout
        .join(graphql, key, request, Box::new(sink));
    Box::pin(futures::stream::unfold(
        (rx, membership),
        |(mut rx, membership)| async move { rx.recv().await.map(|d| (d, (rx, membership))) },
    ))
}

/// An SSE stream as a member of a subscription group.
struct SseSink {
    tx: mpsc::Sender<Delivery>,
    too_slow: Arc<AtomicBool>,
}

impl Sink for SseSink {
    fn deliver(&self, delivery: &Delivery) -> bool {
        match self.tx.try_send(delivery.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.too_slow.store(true, Ordering::Relaxed);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}
