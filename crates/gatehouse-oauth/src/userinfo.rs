//! `GET|POST /oauth/userinfo` (OpenID Connect Core §5.3): who the user
//! behind a bearer access token is. The token is checked exactly as the API
//! checks it ([`AuthServer::access_principal`], the one token-to-principal
//! function), and the answer is [`gatehouse_auth::AuthServer::userinfo`]'s.
//!
//! Errors follow RFC 6750 §3: 401 with a `Bearer` challenge for a missing or
//! invalid token, 403 `insufficient_scope` for a token without `openid` or
//! without a user, 400 `invalid_request` for a token sent anywhere but the
//! `Authorization` header.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use gatehouse_auth::oidc::SCOPE_OPENID;
use gatehouse_auth::{AuthServer, Error, IdentityKind, Principal, challenge};

use crate::OAuthState;
use crate::response::no_store;

/// Why a userinfo request was refused, rendered as RFC 6750 §3 says.
pub(crate) enum Refusal {
    /// No `Authorization: Bearer` header (§3.1: no error code).
    Missing,
    /// The token sent in the query or the body, or more than once (§2:
    /// one method only; here the header only).
    Request(&'static str),
    /// An error of the authorization server: `invalid_token`,
    /// `insufficient_scope`, or a server fault.
    Auth(Error),
    /// The token's subject is over its rate: wait this many seconds.
    TooMany(u64),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, error, description, challenge) = match &self {
            Refusal::Missing => (
                StatusCode::UNAUTHORIZED,
                "invalid_request",
                "send the access token as `Authorization: Bearer <token>`",
                challenge::MISSING.to_string(),
            ),
            Refusal::Request(d) => (
                StatusCode::BAD_REQUEST,
                "invalid_request",
                *d,
                "Bearer realm=\"gatehouse\", error=\"invalid_request\"".to_string(),
            ),
            Refusal::Auth(e @ Error::InvalidToken(d)) => (
                StatusCode::UNAUTHORIZED,
                e.code(),
                d.as_ref(),
                challenge::invalid_token(d),
            ),
            Refusal::Auth(e @ Error::InsufficientScope(d)) => (
                StatusCode::FORBIDDEN,
                e.code(),
                d.as_ref(),
                challenge::insufficient_scope(SCOPE_OPENID),
            ),
            // The endpoints' one 429 (with `Retry-After`).
            Refusal::TooMany(wait) => {
                return crate::error::OAuthError::TooManyRequests(*wait).into_response();
            }
            Refusal::Auth(e) => {
                tracing::error!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "userinfo failed"
                );
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "the server could not complete the request",
                    challenge::MISSING.to_string(),
                )
            }
        };
        let mut resp = (
            status,
            Json(json!({ "error": error, "error_description": description })),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        no_store(resp)
    }
}

/// The handler of both methods.
pub(crate) async fn userinfo(State(state): State<OAuthState>, req: Request) -> Response {
    match answer(&state, req).await {
        Ok(body) => no_store((StatusCode::OK, Json(body)).into_response()),
        Err(refusal) => refusal.into_response(),
    }
}

async fn answer(state: &OAuthState, req: Request) -> Result<serde_json::Value, Refusal> {
    let (parts, body) = req.into_parts();
    // RFC 6750 §2.3 puts tokens in URLs, where logs and `Referer` keep
    // them: never accepted here, and said so rather than ignored.
    if parts
        .uri
        .query()
        .is_some_and(|q| has_access_token(q.as_bytes()))
    {
        return Err(Refusal::Request(
            "send the access token in the `Authorization` header, not in the URL",
        ));
    }
    // §2.2 (the form body) is optional for servers; only the header is
    // served, so a body token is an error too (the body is read within the
    // endpoints' size limit).
    let body = axum::body::to_bytes(body, state.inner.config.max_body_bytes)
        .await
        .map_err(|_| Refusal::Request("the request body is too large"))?;
    if has_access_token(&body) {
        return Err(Refusal::Request(
            "send the access token in the `Authorization` header, not in the body",
        ));
    }
    let principal = principal(state, &parts.headers).await?;
    state
        .inner
        .rates
        .check_userinfo(&principal.subject)
        .map_err(Refusal::TooMany)?;
    state
        .server()
        .userinfo(&principal)
        .await
        .map_err(Refusal::Auth)
}

/// The caller of the one `Authorization: Bearer` header, its token
/// checked as the API checks it.
async fn principal(state: &OAuthState, headers: &HeaderMap) -> Result<Principal, Refusal> {
    let token = bearer(headers)?;
    let server: &AuthServer = state.server();
    server
        .access_principal(token, server.now())
        .await
        .map_err(Refusal::Auth)
}

/// The user behind the request's bearer access token (an endpoint of the
/// account itself, such as the e-mail change), or the RFC 6750 §3
/// refusal: 401 with a `Bearer` challenge for a missing or invalid token,
/// 403 for a token that is not a user's.
pub(crate) async fn bearer_user(
    state: &OAuthState,
    headers: &HeaderMap,
) -> Result<String, Response> {
    let principal = principal(state, headers)
        .await
        .map_err(IntoResponse::into_response)?;
    if principal.subject_kind != Some(IdentityKind::User) {
        return Err(no_store(
            (
                StatusCode::FORBIDDEN,
                Json(json!({
                    "error": "access_denied",
                    "error_description": "this endpoint needs a user's access token",
                })),
            )
                .into_response(),
        ));
    }
    Ok(principal.subject)
}

/// The token of the one `Authorization: Bearer` header (scheme
/// case-insensitive, RFC 9110 §11.1).
pub(crate) fn bearer(headers: &HeaderMap) -> Result<&str, Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Refusal::Missing);
    };
    if values.next().is_some() {
        return Err(Refusal::Request("send one `Authorization` header"));
    }
    let value = value.to_str().map_err(|_| Refusal::Missing)?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Missing);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(Refusal::Auth(Error::InvalidToken(
            "the bearer token is empty".into(),
        )));
    }
    Ok(token)
}

/// Whether form-encoded `text` has an `access_token` parameter.
fn has_access_token(text: &[u8]) -> bool {
    form_urlencoded::parse(text).any(|(k, _)| k == "access_token")
}
