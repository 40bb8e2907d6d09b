//! The one error type of the OAuth endpoints and how each kind is rendered.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use gatehouse_auth::Error;

use crate::response::no_store;

/// `WWW-Authenticate` of an OAuth 2.0 `invalid_client` (RFC 6749 §5.2).
const BASIC_CHALLENGE: &str = r#"Basic realm="gatehouse""#;

/// `WWW-Authenticate` of every OAuth 1.0 401 (RFC 5849 §3.5.1 scheme).
const OAUTH1_CHALLENGE: &str = r#"OAuth realm="gatehouse""#;

/// The body of every OAuth 1.0 401: the same whatever the reason, so a
/// refusal never tells whether a consumer key exists (the reason is logged).
const OAUTH1_REFUSED: &str = "the OAuth 1.0 request was refused";

/// Why an OAuth endpoint refused a request. Handlers return
/// `Result<Response, OAuthError>`; every refusal is rendered here, never
/// cached (`Cache-Control: no-store`, `Pragma: no-cache`) except the 405.
#[derive(Debug)]
pub(crate) enum OAuthError {
    /// An OAuth 2.0 error (RFC 6749 §5.2): `{error, error_description}`,
    /// 400; 401 with a Basic challenge for `invalid_client`; 500 for a
    /// server fault (its cause logged, not sent).
    OAuth2(Error),
    /// An OAuth 1.0 error: 400 for a malformed request, shaped like the
    /// OAuth 2.0 ones; 401 with an `OAuth` challenge and one body for a bad
    /// consumer, signature, timestamp, nonce, token, verifier or password
    /// (RFC 5849 §3.2), so a refusal never tells which of them failed.
    OAuth1(Error),
    /// Over a rate limit or the failed-login throttle: 429 with
    /// `Retry-After` in whole seconds (RFC 6585 §4, RFC 9110 §10.2.3).
    TooManyRequests(u64),
    /// A method the endpoint does not serve: 405 with `Allow` and an
    /// OAuth-shaped body.
    MethodNotAllowed(&'static str),
    /// A browser request from an origin that is neither allowed nor the
    /// issuer's own: 403 `invalid_request`.
    ForeignOrigin,
}

impl OAuthError {
    /// An OAuth 2.0 `invalid_request`.
    pub(crate) fn invalid_request(description: &'static str) -> Self {
        Self::OAuth2(Error::InvalidRequest(description.into()))
    }

    /// The error code counted in the token refusal metric.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::OAuth2(e) | Self::OAuth1(e) if e.retry_after().is_none() => e.code(),
            Self::OAuth2(_) | Self::OAuth1(_) | Self::TooManyRequests(_) => "too_many_requests",
            Self::MethodNotAllowed(_) | Self::ForeignOrigin => "invalid_request",
        }
    }
}

/// `?` on the authorization server's results in the OAuth 2.0 handlers.
impl From<Error> for OAuthError {
    fn from(e: Error) -> Self {
        Self::OAuth2(e)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        match self {
            Self::OAuth2(e) => oauth2(&e),
            Self::OAuth1(e) => oauth1(&e),
            Self::TooManyRequests(wait) => too_many_requests(wait),
            Self::MethodNotAllowed(allow) => method_not_allowed(allow),
            Self::ForeignOrigin => no_store(
                (
                    StatusCode::FORBIDDEN,
                    described(
                        "invalid_request",
                        "requests from this origin are not allowed; add it to `[cors] allowed_origins`",
                    ),
                )
                    .into_response(),
            ),
        }
    }
}

fn oauth2(e: &Error) -> Response {
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
        Error::Unavailable(cause) => {
            tracing::warn!(cause = %cause, "authorization server temporarily unavailable");
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::BAD_REQUEST,
    };
    let mut resp = (status, described(e.code(), e.description())).into_response();
    if matches!(e, Error::Unavailable(_)) {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if matches!(e, Error::InvalidClient(_)) {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(BASIC_CHALLENGE),
        );
    }
    no_store(resp)
}

fn oauth1(e: &Error) -> Response {
    if let Some(wait) = e.retry_after() {
        return too_many_requests(wait);
    }
    let resp = match e {
        Error::InvalidClient(_) | Error::InvalidToken(_) | Error::InvalidGrant(_) => {
            tracing::info!(
                error = e.code(),
                reason = e.description(),
                "OAuth 1.0 request refused"
            );
            let mut resp = (
                StatusCode::UNAUTHORIZED,
                described("unauthorized", OAUTH1_REFUSED),
            )
                .into_response();
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(OAUTH1_CHALLENGE),
            );
            resp
        }
        Error::Server(cause) => {
            tracing::error!(cause = %cause, "authorization server error");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                described(e.code(), e.description()),
            )
                .into_response()
        }
        Error::Unavailable(cause) => {
            tracing::warn!(cause = %cause, "authorization server temporarily unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                described(e.code(), e.description()),
            )
                .into_response()
        }
        _ => (
            StatusCode::BAD_REQUEST,
            described(e.code(), e.description()),
        )
            .into_response(),
    };
    no_store(resp)
}

fn too_many_requests(retry_after_secs: u64) -> Response {
    let secs = retry_after_secs.max(1);
    let mut resp = (
        StatusCode::TOO_MANY_REQUESTS,
        described("too_many_requests", "too many requests; retry later"),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    no_store(resp)
}

fn method_not_allowed(allow: &'static str) -> Response {
    let mut resp = (
        StatusCode::METHOD_NOT_ALLOWED,
        described(
            "invalid_request",
            &format!("this endpoint accepts {allow} only"),
        ),
    )
        .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// The RFC 6749 §5.2 body: `{"error": …, "error_description": …}`.
fn described(error: &str, description: &str) -> Json<serde_json::Value> {
    Json(json!({ "error": error, "error_description": description }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_store_is_temporarily_unavailable_with_503() {
        let resp = oauth2(&Error::Unavailable("statement timed out".into()));
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let resp = oauth2(&Error::Server("a bug".into()));
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            Error::Unavailable("x".into()).code(),
            "temporarily_unavailable"
        );
        assert_eq!(
            Error::from(gatehouse_auth::RepoError::unavailable("timed out")).code(),
            "temporarily_unavailable"
        );
    }
}
