//! gatehouse-http: the axum application. `app(state)` returns the whole
//! router so tests can drive it in-process or on a real socket.
//!
//! - `endpoint.rs`: the routes of `/graphql`, and the one place that picks
//!   the transport of a request (WebSocket upgrade, GraphiQL page, GraphQL
//!   over HTTP answered as JSON or as an event stream) and which routes are
//!   behind authentication.
//! - `graphql.rs`: GraphQL over HTTP (content negotiation and status codes
//!   per the GraphQL-over-HTTP spec), schema documents; `graphiql.rs` serves
//!   GraphiQL from vendored assets (`assets/graphiql/`); `params.rs`: the
//!   request parameters every transport reads.
//! - `authn`: the one authentication layer: Bearer, Basic (with a
//!   verified-credential cache), OAuth 1.0 signed requests, anonymous reads,
//!   or another server's introspection endpoint (`introspect.rs`). Every
//!   scheme ends in the same `Principal`.
//! - `cors`: CORS answers for the configured browser origins, before
//!   authentication (tower-http's `CorsLayer`, behind a gate that lets only
//!   allowed origins reach it).
//! - `telemetry`: request ids, the one log line per request, metric names,
//!   the Prometheus handle and `/metrics`.
//! - Subscriptions: `ws.rs` (`graphql-transport-ws` and the legacy
//!   `graphql-ws`, messages as serde-tagged enums), `sse.rs` (GraphQL over
//!   SSE), `live.rs` (their limits and the stale-credential watch; both
//!   follow the server's one shutdown token), `fanout.rs` (one execution per
//!   group of identical subscriptions).

pub mod authn;
mod cors;
mod endpoint;
mod fanout;
mod graphiql;
mod graphql;
mod introspect;
pub mod telemetry;

pub use introspect::IntrospectionConfig;
mod live;
mod params;
mod sse;
mod ws;

pub use cors::CorsConfig;
pub use fanout::Fanout;
pub use live::SubscriptionOptions;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use gatehouse_graphql::Graphql;
use serde_json::json;
pub use tokio_util::sync::CancellationToken;

/// How long `/readyz` waits for the store before answering 503: probes have
/// short timeouts of their own, and a hung database must read as not ready.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Checks whether the service can serve requests (store reachable, schema
/// applied). Returns a short reason when it cannot.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// What the HTTP layer needs from the rest of the service.
#[derive(Clone)]
pub struct AppState {
    /// The executable GraphQL schema.
    pub graphql: Graphql,
    /// Readiness of the backing store.
    pub ready: ReadinessCheck,
    /// Path prefix for every route (`""` or e.g. `/api`).
    pub base_path: String,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Authentication of `/graphql` requests; `None` serves them to anyone
    /// as a trusted caller (tests and embedded use only).
    pub authn: Option<authn::Authenticator>,
    /// Limits of subscriptions (WebSocket, SSE), and the server's one
    /// shutdown signal (which also turns `/readyz` to 503).
    pub subscriptions: SubscriptionOptions,
    /// Which browser origins get CORS answers (none by default).
    pub cors: CorsConfig,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("base_path", &self.base_path)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// The whole application: GraphQL, health, and the `extra` routers (OAuth,
/// REST, metrics), all under the base path; every request gets a request id
/// and a log line ([`telemetry::request_layer`]).
pub fn app(state: AppState, extra: Vec<Router>) -> Router {
    // Shared, so a handler's `State` costs one reference count, not one per field.
    let state = Arc::new(state);
    let mut routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/graphql/assets/{name}", get(graphiql::asset))
        .with_state(state.clone())
        .merge(endpoint::routes(&state));
    for r in extra {
        routes = routes.merge(r);
    }
    let mut routes = if state.base_path.is_empty() {
        routes
    } else {
        Router::new().nest(&state.base_path, routes)
    };
    // Outside authentication, so preflights carry no credentials; inside
    // the request log, so they are logged like any request.
    if let Some(gate) = cors::CorsGate::new(&state.cors) {
        routes = routes.layer(axum::middleware::from_fn_with_state(gate, cors::gate));
    }
    // Outermost, so the latency and status include authentication.
    routes.layer(axum::middleware::from_fn(telemetry::request_layer))
}

/// `GET /healthz`: the process is alive and serving HTTP.
async fn healthz() -> Response {
    (StatusCode::OK, Json(json!({"status": "ok"}))).into_response()
}

/// `GET /readyz`: the store is reachable and the service is not shutting
/// down; 503 otherwise.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let result = if state.subscriptions.shutdown.is_cancelled() {
        Err("shutting down".to_string())
    } else {
        tokio::time::timeout(READY_TIMEOUT, (state.ready)())
            .await
            .unwrap_or_else(|_| Err("the store did not answer in time".to_string()))
    };
    match result {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))).into_response(),
        Err(reason) => {
            tracing::warn!(%reason, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "reason": reason})),
            )
                .into_response()
        }
    }
}
