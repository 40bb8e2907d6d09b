//! Mapping errors and results to HTTP responses.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use gatehouse_auth::Error;

/// Marks a successful token response with its grant type (for metrics).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Issued(pub &'static str);

/// Marks a refused request with its error code (for metrics).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused(pub &'static str);

/// RFC 6749 §5.1: token responses (and their errors) must not be cached.
pub(crate) fn no_store(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    resp
}

/// An OAuth error response: JSON `{error, error_description}` (RFC 6749 §5.2).
pub(crate) fn error(e: &Error) -> Response {
    if let Some(wait) = e.retry_after() {
        return too_many_requests(wait);
    }
    let status = match e {
        // RFC 6749 §5.2: invalid_client with Basic auth -> 401 + challenge.
        Error::InvalidClient(_) => StatusCode::UNAUTHORIZED,
        Error::Server(cause) => {
            tracing::error!(cause = %cause, "authorization server error");
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::BAD_REQUEST,
    };
    let body = Json(json!({
        "error": e.code(),
        "error_description": e.description(),
    }));
    let mut resp = (status, body).into_response();
    resp.extensions_mut().insert(Refused(e.code()));
    if matches!(e, Error::InvalidClient(_)) {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Basic realm="gatehouse""#),
        );
    }
    no_store(resp)
}

/// 429 with `Retry-After` (RFC 6585 §4, RFC 9110 §10.2.3) in whole seconds.
pub(crate) fn too_many_requests(retry_after_secs: u64) -> Response {
    let secs = retry_after_secs.max(1);
    let mut resp = (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({
            "error": "too_many_requests",
            "error_description": "too many requests; retry later",
        })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp.extensions_mut().insert(Refused("too_many_requests"));
    no_store(resp)
}

/// 405 with `Allow` and an OAuth-shaped body.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response {
    let mut resp = (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(json!({
            "error": "invalid_request",
            "error_description": format!("this endpoint accepts {allow} only"),
        })),
    )
        .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}
