//! The OAuth 1.0 endpoints (RFC 5849 §2): request tokens,
//! the owner's approval, and the OAuth 1.0 side of `/oauth/access_token`.
//! Verification lives in `gatehouse_auth::oauth1`; this module gathers the
//! request's parts and shapes the responses.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use gatehouse_auth::Error;
use gatehouse_auth::oauth1::{OOB, SignedRequest, has_oauth1_params};

use crate::error::OAuthError;
use crate::extract::{Form, Peer};
use crate::{OAuthState, form, response};

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

/// Escapes text for HTML element content and double-quoted attributes.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:28rem;margin:3rem auto;\
padding:0 1rem;color:#222}label{display:block;margin:.8rem 0}input{display:block;width:100%;\
padding:.4rem;box-sizing:border-box}button{margin-top:1rem;padding:.5rem 1.2rem}\
code{background:#eee;padding:0 .2rem}";

/// A self-contained page (no external assets, no script), not cacheable,
/// not frameable.
fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body><main>{body}</main></body></html>",
        escape(title)
    );
    let mut resp = (status, page).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response::no_store(resp)
}

/// `GET /oauth/authorize?oauth_token=…`: the approval form (RFC 5849 §2.2).
pub(crate) async fn authorize_page(State(state): State<OAuthState>, req: Request) -> Response {
    let token = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "oauth_token")
            .map(|(_, v)| v.into_owned())
    });
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return html(
            StatusCode::BAD_REQUEST,
            "Authorization request",
            "<h1>Missing request token</h1><p>The <code>oauth_token</code> parameter is required.</p>",
        );
    };
    let pending = match state.inner.server.oauth1_pending(&token).await {
        Ok(p) => p,
        Err(Error::Server(cause)) => {
            tracing::error!(cause = %cause, "authorization server error");
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Authorization request",
                "<h1>Something went wrong</h1><p>Try again later.</p>",
            );
        }
        Err(e) => {
            return html(
                StatusCode::UNAUTHORIZED,
                "Authorization request",
                &format!(
                    "<h1>Invalid request token</h1><p>{}</p>",
                    escape(e.description())
                ),
            );
        }
    };
    let scopes = if pending.scopes.is_empty() {
        "no scopes".to_string()
    } else {
        pending
            .scopes
            .iter()
            .map(|s| format!("<code>{}</code>", escape(s)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let body = format!(
        "<h1>Authorize access</h1><p><strong>{consumer}</strong> asks to act on your behalf \
         with: {scopes}.</p><form method=\"post\" action=\"authorize\">\
         <input type=\"hidden\" name=\"oauth_token\" value=\"{token}\">\
         <label>User name<input name=\"username\" autocomplete=\"username\" required></label>\
         <label>Password<input type=\"password\" name=\"password\" \
         autocomplete=\"current-password\" required></label>\
         <button type=\"submit\">Approve</button></form>",
        consumer = escape(&pending.consumer_key),
        token = escape(&token),
    );
    html(StatusCode::OK, "Authorize access", &body)
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

/// `POST /oauth/authorize` (form: `oauth_token`, `username`, `password`):
/// the owner approves. `oob`: the verifier as a form-encoded body; else a
/// 302 to the callback. Failed logins are throttled like the password grant.
pub(crate) async fn authorize(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Result<Response, OAuthError> {
    // No rate per address: failed logins are throttled per (user, address)
    // and per address inside, and others' requests from a shared address
    // never refuse this one.
    let Form(params) = Form::from_request(req, &state).await?;
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
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

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
