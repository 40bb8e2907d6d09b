//! GraphQL over Server-Sent Events, "distinct connections mode"
//! (<https://github.com/enisdenjo/graphql-sse/blob/master/PROTOCOL.md>):
//! `POST` (or `GET`) `{base}/graphql` with `Accept: text/event-stream`
//! answers one stream per operation: `event: next` per result, then
//! `event: complete`. Errors found before execution also arrive as a `next`
//! event (the protocol's rule: a 400 would lose them in `EventSource`).

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gatehouse_auth::Principal;
use gatehouse_graphql::error as codes;
use serde_json::json;
use tokio::sync::mpsc;

use crate::AppState;
use crate::graphql::Params;
use crate::live::{Credential, stale};

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
    let results = state.graphql.execute_stream(params.into_request(principal));
    let watch = stale(state.authn.clone(), credential, opts.recheck_interval);
    let (tx, rx) = mpsc::channel::<Bytes>(opts.queue_capacity.max(1));
    tokio::spawn(async move {
        let _active = crate::telemetry::subscription_started("sse");
        let mut results = std::pin::pin!(results);
        let mut watch = std::pin::pin!(watch);
        let shutdown = opts.shutdown.clone();
        let mut shutdown = std::pin::pin!(shutdown.wait());
        let mut keepalive = tokio::time::interval(opts.keepalive);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        keepalive.tick().await;
        loop {
            // Waiting on a full queue is the back-pressure: results wait in
            // the store's bounded feed, and a subscriber that falls too far
            // behind there gets the feed's error and its stream ends.
            let next = tokio::select! {
                biased;
                () = tx.closed() => return,
                () = &mut shutdown => None,
                reason = &mut watch => {
                    let body = json!({"errors": [{
                        "message": format!("the subscription ended: {reason}"),
                        "extensions": {"code": codes::UNAUTHENTICATED},
                    }]});
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
            let Some(item) = next else { break };
            let body = serde_json::to_string(&item.response).unwrap_or_else(|_| "{}".into());
            if tx.send(event("next", &body)).await.is_err() {
                return;
            }
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
