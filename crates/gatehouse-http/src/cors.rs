//! CORS for browser apps on other origins (`[cors]`,
//! `docs/design/browser-apps.md`): tower-http's `CorsLayer` writes every
//! header; this module decides which requests it sees.
//!
//! It sits outside authentication (inside the request log), so a
//! preflight is answered without credentials, on every route of the
//! router: `/graphql`, `/v1/...`, the OAuth endpoints, JWKS and metadata.
//! Only requests whose `Origin` is allowed
//! ([`gatehouse_oauth::AllowedOrigins::allows`], the one rule) reach the
//! `CorsLayer`: tower-http answers every `OPTIONS` as a preflight and
//! writes the method, header and max-age headers whatever the origin,
//! while an origin that is not listed must get no CORS header at all.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gatehouse_oauth::AllowedOrigins;
use tower::{Layer, ServiceExt};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// `[cors]`: which origins may call, and how long browsers cache a preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsConfig {
    /// Origins whose pages may call the service (none by default).
    pub allowed_origins: AllowedOrigins,
    /// `Access-Control-Max-Age` of preflight answers.
    pub max_age: Duration,
}

impl Default for CorsConfig {
    /// No origin allowed; preflights cached 10 minutes (Chromium's own cap
    /// is 2 hours, Firefox's 24 hours).
    fn default() -> Self {
        Self {
            allowed_origins: AllowedOrigins::default(),
            max_age: Duration::from_secs(600),
        }
    }
}

/// Request headers a page may send: credentials (Bearer, Basic, OAuth 1.0
/// signatures all travel in `Authorization`), the body's type, content
/// negotiation, and a request id to correlate with the server's log.
const ALLOWED_HEADERS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::ACCEPT,
    HeaderName::from_static("x-request-id"),
];

/// Response headers a page may read besides the CORS-safelisted ones: REST
/// paging (`Link`, `X-Total-Count`), the created resource (`Location`),
/// why a request was refused (`WWW-Authenticate`) or when to retry
/// (`Retry-After`), and the request id.
const EXPOSED_HEADERS: [HeaderName; 6] = [
    header::LINK,
    HeaderName::from_static("x-total-count"),
    header::LOCATION,
    header::WWW_AUTHENTICATE,
    header::RETRY_AFTER,
    HeaderName::from_static("x-request-id"),
];

/// Methods of the REST API, GraphQL and the OAuth endpoints.
const ALLOWED_METHODS: [Method; 6] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

/// What the gate holds: the allowed origins and the configured `CorsLayer`.
#[derive(Debug, Clone)]
pub(crate) struct CorsGate {
    origins: AllowedOrigins,
    cors: CorsLayer,
}

impl CorsGate {
    /// `None` when no origin is allowed. Shared: the middleware clones its
    /// state for every request, and a `CorsLayer` is costly to clone.
    pub(crate) fn new(config: &CorsConfig) -> Option<Arc<Self>> {
        if config.allowed_origins.is_empty() {
            return None;
        }
        let origins = config.allowed_origins.clone();
        // No `allow_credentials`: Bearer tokens are sent as an explicit
        // `Authorization` header, which needs no credentials mode; the
        // service sets no cookie a cross-origin page should carry. That
        // is also what makes `"*"` safe to answer with a literal `*`.
        let allow_origin = if origins.is_any() {
            AllowOrigin::any()
        } else {
            let check = origins.clone();
            AllowOrigin::predicate(move |origin: &HeaderValue, _| check.allows(origin.as_bytes()))
        };
        let cors = CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods(ALLOWED_METHODS)
            .allow_headers(ALLOWED_HEADERS)
            .expose_headers(EXPOSED_HEADERS)
            .max_age(config.max_age);
        Some(Arc::new(Self { origins, cors }))
    }
}

/// Sends a request from an allowed origin through the `CorsLayer` (which
/// answers its preflight without going further); every other request goes
/// on untouched. An `OPTIONS` without `Access-Control-Request-Method` is
/// not a preflight and reaches the routes like any request.
pub(crate) async fn gate(State(gate): State<Arc<CorsGate>>, req: Request, next: Next) -> Response {
    let from_allowed = req
        .headers()
        .get(header::ORIGIN)
        .is_some_and(|o| gate.origins.allows(o.as_bytes()));
    let not_preflight = req.method() == Method::OPTIONS
        && !req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if !from_allowed || not_preflight {
        return next.run(req).await;
    }
    match gate.cors.layer(next).oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
    .into_response()
}
