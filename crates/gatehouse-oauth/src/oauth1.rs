//! The OAuth 1.0 endpoints (RFC 5849 §2): request tokens,
//! the owner's approval, and the OAuth 1.0 side of `/oauth/access_token`.
//! Verification lives in `gatehouse_auth::oauth1`; this module gathers the
//! request's parts and shapes the responses.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use gatehouse_auth::Error;
use gatehouse_auth::oauth1::{OOB, SignedRequest, has_oauth1_params};

use crate::error::OAuthError;
use crate::extract::Peer;
use crate::{OAuthState, form, pages, response};

/// A form-encoded success body (RFC 5849 §2.1), never cached.
fn form_response(pairs: &[(&str, &str)]) -> Response {
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        ser.append_pair(k, v);
    }
    let mut resp = (StatusCode::OK, ser.finish()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    response::no_store(resp)
}

/// Reads the body when it is a form (its parameters are signed); any other
/// body is not part of the signature and is ignored.
async fn form_body(
    state: &OAuthState,
    parts: &Parts,
    body: Body,
) -> Result<Option<Bytes>, OAuthError> {
    if !form::is_form(&parts.headers) {
        return Ok(None);
    }
    axum::body::to_bytes(body, state.inner.config.max_body_bytes)
        .await
        .map(Some)
        .map_err(|_| {
            OAuthError::OAuth1(Error::InvalidRequest(
                "the request body is too large or unreadable".into(),
            ))
        })
}

/// The signed request of an OAuth 1.0 endpoint (RFC 5849 §3.4.1).
fn signed(
    state: &OAuthState,
    parts: &Parts,
    body: Option<&[u8]>,
) -> Result<SignedRequest, OAuthError> {
    crate::origin::signed_request(&state.inner.server.config().issuer, parts, body)
        .map_err(OAuthError::OAuth1)
}

/// The consumer's rate bucket, charged once its request verified (the
/// authorization server asks it): nobody else can use it up. Failures are
/// charged by the authorization server, per (consumer, address) and per
/// address (`AuthServer::oauth1_charged`).
fn admit(state: &OAuthState) -> impl Fn(&str) -> Result<(), u64> + Send + Sync + '_ {
    |consumer| state.inner.rates.check_consumer(consumer)
}

/// `GET|POST /oauth/requestToken`: temporary credentials (RFC 5849 §2.1).
pub(crate) async fn request_token(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Result<Response, OAuthError> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(OAuthError::MethodNotAllowed("GET, POST"));
    }
    let (parts, body) = req.into_parts();
    let body = form_body(&state, &parts, body).await?;
    let signed = signed(&state, &parts, body.as_deref())?;
    let t = state
        .inner
        .server
        .oauth1_request_token(&signed, Some(addr), &admit(&state))
        .await
        .map_err(|e| {
            tracing::debug!(error = e.code(), "OAuth 1.0 request token refused");
            OAuthError::OAuth1(e)
        })?;
    Ok(form_response(&[
        ("oauth_token", &t.token),
        ("oauth_token_secret", &t.secret),
        ("oauth_callback_confirmed", "true"),
    ]))
}

/// Whether a request to `/oauth/access_token` is the OAuth 1.0 exchange: it
/// carries an `Authorization: OAuth` header or `oauth_consumer_key` /
/// `oauth_verifier` / `oauth_token` in the query or form body.
fn is_oauth1_exchange(headers: &HeaderMap, query: Option<&str>, body: Option<&[u8]>) -> bool {
    let marked = |bytes: &[u8]| {
        form_urlencoded::parse(bytes).any(|(k, _)| k == "oauth_verifier" || k == "oauth_token")
    };
    has_oauth1_params(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        query,
        body,
    ) || query.is_some_and(|q| marked(q.as_bytes()))
        || body.is_some_and(marked)
}

/// `/oauth/access_token`: the OAuth 1.0 exchange (RFC 5849 §2.3) when the
/// request carries OAuth 1.0 parameters; otherwise the OAuth 2.0 token
/// endpoint (POST only).
pub(crate) async fn access_token(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Result<Response, OAuthError> {
    let (parts, body) = req.into_parts();
    let body = form_body(&state, &parts, body).await?;
    if !is_oauth1_exchange(&parts.headers, parts.uri.query(), body.as_deref()) {
        if parts.method != Method::POST {
            return Err(OAuthError::MethodNotAllowed("POST"));
        }
        let req = Request::from_parts(parts, Body::from(body.unwrap_or_default()));
        return Ok(crate::token_endpoint(State(state), req, crate::Endpoint::AccessToken).await);
    }
    if parts.method != Method::POST && parts.method != Method::GET {
        return Err(OAuthError::MethodNotAllowed("GET, POST"));
    }
    let signed = signed(&state, &parts, body.as_deref())?;
    let t = state
        .inner
        .server
        .oauth1_access_token(&signed, Some(addr), &admit(&state))
        .await
        .map_err(|e| {
            tracing::debug!(error = e.code(), "OAuth 1.0 access token refused");
            OAuthError::OAuth1(e)
        })?;
    Ok(form_response(&[
        ("oauth_token", &t.token),
        ("oauth_token_secret", &t.secret),
    ]))
}

/// `GET /oauth/authorize?oauth_token=…`: the approval form (RFC 5849 §2.2),
/// with the sign-in pages' CSRF field (`crate::authorize::csrf_for`).
pub(crate) async fn authorize_page(
    state: &OAuthState,
    headers: &HeaderMap,
    token: Option<&str>,
) -> Response {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "Missing request token",
            "The oauth_token parameter is required.",
        );
    };
    let pending = match state.inner.server.oauth1_pending(token).await {
        Ok(p) => p,
        Err(Error::Server(cause) | Error::Unavailable(cause)) => {
            tracing::error!(cause = %cause, "authorization server error");
            return pages::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "Try again later.",
            );
        }
        Err(e) => {
            return pages::error(
                StatusCode::UNAUTHORIZED,
                "Invalid request token",
                e.description(),
            );
        }
    };
    let (csrf, cookie) = crate::authorize::csrf_for(state, headers);
    let page = pages::html(
        StatusCode::OK,
        &pages::OAuth1ApprovePage {
            consumer: &pending.consumer_key,
            scopes: &pending.scopes,
            token,
            csrf: &csrf,
        },
    );
    crate::authorize::with_cookie(page, cookie)
}

/// `callback` with `oauth_token` and `oauth_verifier` added to its query
/// (RFC 5849 §2.2), before any fragment.
fn callback_with(callback: &str, token: &str, verifier: &str) -> String {
    let (base, fragment) = match callback.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (callback, None),
    };
    let params = form_urlencoded::Serializer::new(String::new())
        .append_pair("oauth_token", token)
        .append_pair("oauth_verifier", verifier)
        .finish();
    let sep = if base.contains('?') {
        if base.ends_with('?') || base.ends_with('&') {
            ""
        } else {
            "&"
        }
    } else {
        "?"
    };
    match fragment {
        Some(f) => format!("{base}{sep}{params}#{f}"),
        None => format!("{base}{sep}{params}"),
    }
}

/// `POST /oauth/authorize` (form: `oauth_token`, `username`, `password`,
/// and the CSRF field its caller checked): the owner approves. `oob`: the verifier as a form-encoded body; else a
/// 302 to the callback. Failed logins are throttled like the password grant.
pub(crate) async fn authorize(
    state: &OAuthState,
    addr: std::net::IpAddr,
    params: &form::Params,
) -> Result<Response, OAuthError> {
    // No rate per address: failed logins are throttled per (user, address)
    // and per address inside, and others' requests from a shared address
    // never refuse this one.
    let (Some(token), Some(username), Some(password)) = (
        params.get("oauth_token"),
        params.get("username"),
        params.get("password"),
    ) else {
        return Err(OAuthError::OAuth1(Error::InvalidRequest(
            "`oauth_token`, `username` and `password` are required".into(),
        )));
    };
    // Failed logins are throttled per (user, address) inside.
    let a = state
        .inner
        .server
        .oauth1_approve(token, username, password, Some(addr))
        .await
        .map_err(OAuthError::OAuth1)?;
    if a.callback == OOB {
        return Ok(form_response(&[
            ("oauth_token", &a.token),
            ("oauth_verifier", &a.verifier),
        ]));
    }
    let location = callback_with(&a.callback, &a.token, &a.verifier);
    let location = HeaderValue::from_str(&location).map_err(|_| {
        OAuthError::OAuth1(Error::InvalidRequest(
            "the callback cannot be used in a redirect".into(),
        ))
    })?;
    let mut resp = StatusCode::FOUND.into_response();
    resp.headers_mut().insert(header::LOCATION, location);
    Ok(response::no_store(resp))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn callback_gets_both_parameters() {
        assert_eq!(
            callback_with("https://c.example/cb", "t", "v"),
            "https://c.example/cb?oauth_token=t&oauth_verifier=v"
        );
        assert_eq!(
            callback_with("https://c.example/cb?a=1#frag", "t+", "v"),
            "https://c.example/cb?a=1&oauth_token=t%2B&oauth_verifier=v#frag"
        );
    }
}
