//! The routes of `{base}/graphql` and the one place that picks a transport
//! for a request: a `GET` is a WebSocket upgrade ([`crate::ws`]), a
//! browser navigating to GraphiQL ([`crate::graphiql`]), or a query over
//! HTTP; a GraphQL request over HTTP (`GET` or `POST`) is read by
//! [`crate::graphql`] and answered as JSON there, or as an event stream by
//! [`crate::sse`].
//!
//! Authentication ([`crate::authn::graphql_layer`]) wraps the routes that
//! need it; the upgrade and the GraphiQL page are routed around it (the
//! WebSocket protocols authenticate in `connection_init`, the page is
//! public). Both are told apart by headers, which axum's router does not
//! route on: hence this dispatch.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::{MethodRouter, any, get, post};
use tower::ServiceExt;

use crate::graphql::{GRAPHQL_RESPONSE, JSON};
use crate::{AppState, authn, graphiql, graphql, sse, ws};

/// `{base}/graphql` and its schema documents.
pub(crate) fn routes(state: &Arc<AppState>) -> Router {
    let guard = |route: MethodRouter<Arc<AppState>>| match &state.authn {
        // On the method router, so that its fallback (other methods) is
        // authenticated too, like every request that reaches GraphQL.
        Some(authn) => route.layer(axum::middleware::from_fn_with_state(
            authn.clone(),
            authn::graphql_layer,
        )),
        None => route,
    };
    let query: MethodRouter<(), Infallible> = guard(get(http_get)).with_state(state.clone());
    let open_get = get(
        |State(state): State<Arc<AppState>>, req: Request| async move {
            dispatch_get(state, query, req).await
        },
    );
    let endpoint = guard(post(http_post).fallback(any(graphql::other_method))).merge(open_get);
    Router::new()
        .route("/graphql", endpoint)
        .route("/graphql/schema.json", guard(get(graphql::schema_json)))
        .route("/graphql/schema.graphql", guard(get(graphql::schema_sdl)))
        .with_state(state.clone())
}

/// `GET {base}/graphql`: the WebSocket upgrade and the GraphiQL page
/// without authentication, anything else through `query` (authenticated).
async fn dispatch_get(
    state: Arc<AppState>,
    query: MethodRouter<(), Infallible>,
    req: Request,
) -> Response {
    if is_upgrade(req.headers()) {
        return ws::upgrade_request(state, req).await;
    }
    if is_browser_navigation(req.headers()) {
        return graphiql::page(&state.base_path);
    }
    query
        .oneshot(req)
        .await
        .unwrap_or_else(|never| match never {})
}

/// An authenticated `GET {base}/graphql`: a query, answered as JSON or
/// (`Accept: text/event-stream`) as an event stream.
async fn http_get(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let stream = sse::wanted(req.headers());
    match graphql::read_get(req, stream) {
        Ok(req) if stream => sse::stream(&state, req.params, req.principal, &req.headers),
        Ok(req) => graphql::answer(&state, req).await,
        Err(refused) => *refused,
    }
}

/// `POST {base}/graphql` (authenticated), answered as JSON or as an event
/// stream.
async fn http_post(State(state): State<Arc<AppState>>, req: Request) -> Response {
    let stream = sse::wanted(req.headers());
    match graphql::read_post(&state, req, stream).await {
        Ok(req) if stream => sse::stream(&state, req.params, req.principal, &req.headers),
        Ok(req) => graphql::answer(&state, req).await,
        Err(refused) => *refused,
    }
}

/// Whether a request asks to upgrade to a WebSocket.
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A browser navigating to the endpoint (Accept: text/html, no JSON type):
/// it gets GraphiQL, prefilled from `?query=`; API clients get results.
fn is_browser_navigation(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.contains("text/html") && !accept.contains(JSON) && !accept.contains(GRAPHQL_RESPONSE)
}
