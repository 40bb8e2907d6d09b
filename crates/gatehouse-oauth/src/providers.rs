//! The pages and endpoints of signing in through other identity providers:
//!
//! - `POST /auth/providers/{id}/start`: "Continue with <name>" on the
//!   sign-in page (CSRF-checked like its other forms, carrying the
//!   authorization request): a redirect to the provider, with a cookie
//!   that binds the flow to this browser;
//! - `GET|POST /auth/providers/{id}/callback`: the provider's redirect
//!   back (POST for `form_post`): the flow's row, the code exchanged, the
//!   identity checked, then the authorization request continues as after
//!   a password (consent, code);
//! - `POST /auth/providers/{id}/link`: the password page that links an
//!   identity to the account whose address it gave;
//! - `GET /auth/identities`, `DELETE /auth/identities/{id}` (Bearer).
//!
//! Who signs in, what is linked or created, is decided by
//! `gatehouse_auth::AuthServer` (`server/federation.rs`); talking to the
//! providers by [`crate::upstream`]. A provider that fails gives a page
//! naming it, and the cause goes to the log (never a code or token).

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde_json::json;

use gatehouse_auth::{
    AuthorizeParams, Error, Federated, PROVIDER_FLOW_TTL, ReturnTo, UpstreamIdentity,
};

use crate::OAuthState;
use crate::authorize::{
    authorize_params, back_with, csrf_checked, csrf_refused, csrf_with_browser, read_form, refused,
    secure, server_error, signed_in, with_cookie,
};
use crate::extract::Peer;
use crate::form;
use crate::pages;
use crate::upstream::{Upstream, UpstreamError};
use gatehouse_auth::AuthorizeErrorCode;

/// The flow cookie under TLS: `__Host-` (Secure, host-only, `Path=/`).
const FLOW_COOKIE_SECURE: &str = "__Host-gatehouse-idp";
/// The flow cookie on plain `http` (local development).
const FLOW_COOKIE_PLAIN: &str = "gatehouse-idp";
/// The consent form's target from the pages under `/auth/providers/{id}/`.
const CONSENT_ACTION: &str = "../../../oauth/authorize";

fn flow_cookie_name(state: &OAuthState) -> &'static str {
    if secure(state) {
        FLOW_COOKIE_SECURE
    } else {
        FLOW_COOKIE_PLAIN
    }
}

/// The `Set-Cookie` of a flow cookie with `value` (empty: removed).
/// `SameSite=None` under TLS, so that a provider's `form_post` (a
/// cross-site POST) carries it back; `Lax` on plain `http`, where
/// browsers refuse `None` without `Secure`.
fn flow_cookie(state: &OAuthState, value: &str) -> Option<HeaderValue> {
    let mut c = Cookie::build((flow_cookie_name(state), value.to_string()))
        .path("/")
        .http_only(true)
        .secure(secure(state))
        .same_site(if secure(state) {
            SameSite::None
        } else {
            SameSite::Lax
        })
        .max_age(time::Duration::seconds(if value.is_empty() {
            0
        } else {
            PROVIDER_FLOW_TTL
        }))
        .build();
    if value.is_empty() {
        c.make_removal();
    }
    HeaderValue::from_str(&c.to_string()).ok()
}

fn flow_cookie_of(state: &OAuthState, headers: &HeaderMap) -> Option<String> {
    CookieJar::from_headers(headers)
        .get(flow_cookie_name(state))
        .map(|c| c.value().to_string())
}

/// The provider `id`'s callback URL, the one registered there.
fn callback_url(state: &OAuthState, id: &str) -> String {
    format!(
        "{}/auth/providers/{id}/callback",
        state.inner.config.public_url
    )
}

fn unknown_provider() -> Response {
    pages::error(
        StatusCode::NOT_FOUND,
        "Unknown sign-in provider",
        "This server has no such identity provider.",
    )
}

/// A provider's part failed: the page names it, the log has the cause.
fn provider_failed(up: &Upstream, e: UpstreamError) -> Response {
    let name = &up.config.name;
    match e {
        UpstreamError::Unavailable(cause) => {
            tracing::warn!(provider = %up.config.id, %cause, "identity provider unavailable");
            pages::error(
                StatusCode::BAD_GATEWAY,
                &format!("{name} is not answering"),
                &format!(
                    "Signing in with {name} did not work: {name} did not answer, or answered \
                     something this server cannot read. Nothing was changed. Try again later, \
                     or sign in another way."
                ),
            )
        }
        UpstreamError::Refused(cause) => {
            tracing::warn!(provider = %up.config.id, %cause, "identity provider answer refused");
            pages::error(
                StatusCode::FORBIDDEN,
                &format!("Signing in with {name} failed"),
                &format!(
                    "The answer from {name} could not be accepted, so you are not signed in and \
                     nothing was changed. Go back to the application and try again."
                ),
            )
        }
    }
}

/// A refusal of the server's (expired flow, sign-up off, ...), naming the
/// provider.
fn sign_in_refused(up: &Upstream, e: Error) -> Response {
    match e {
        Error::Server(cause) | Error::Unavailable(cause) => server_error(&cause),
        Error::InvalidRequest(_) => pages::error(
            StatusCode::BAD_REQUEST,
            &format!("Signing in with {} failed", up.config.name),
            e.description(),
        ),
        e => pages::error(
            StatusCode::FORBIDDEN,
            &format!("Signing in with {} failed", up.config.name),
            e.description(),
        ),
    }
}

fn params_of(pairs: &ReturnTo) -> AuthorizeParams {
    let mut p = AuthorizeParams::default();
    for (k, v) in pairs {
        p.set(k, v.clone());
    }
    p
}

/// `POST /auth/providers/{id}/start`.
pub(crate) async fn start(
    State(state): State<OAuthState>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let params = match read_form(&state, &parts.headers, body).await {
        Ok(p) => p,
        Err(page) => return page,
    };
    if csrf_checked(&state, &parts.headers, &params).is_none() {
        return csrf_refused();
    }
    let Some(up) = state.inner.upstreams.get(&id) else {
        return unknown_provider();
    };
    let server = &state.inner.server;
    let p = authorize_params(&params);
    if let Err(e) = server.authorize_request(&p).await {
        return refused(&state, e);
    }
    let return_to = p
        .pairs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let started = match server.provider_start(&id, return_to).await {
        Ok(s) => s,
        Err(e) => return sign_in_refused(up, e),
    };
    let url = match state
        .inner
        .upstreams
        .authorize_url(up, &started, &callback_url(&state, &id))
        .await
    {
        Ok(url) => url,
        Err(e) => return provider_failed(up, e),
    };
    let Ok(location) = HeaderValue::from_str(&url) else {
        return provider_failed(
            up,
            UpstreamError::Unavailable("its authorization URL is not a valid header".into()),
        );
    };
    let mut resp = StatusCode::SEE_OTHER.into_response();
    resp.headers_mut().insert(header::LOCATION, location);
    pages::page_headers(resp.headers_mut());
    with_cookie(
        crate::response::no_store(resp),
        flow_cookie(&state, &started.cookie),
    )
}

/// `GET|POST /auth/providers/{id}/callback`.
pub(crate) async fn callback(
    State(state): State<OAuthState>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let params = if parts.method == axum::http::Method::POST {
        match read_form(&state, &parts.headers, body).await {
            Ok(p) => p,
            Err(page) => return page,
        }
    } else {
        match form::parse_form(parts.uri.query().unwrap_or("").as_bytes()) {
            Ok(p) => p,
            Err(e) => {
                return pages::error(StatusCode::BAD_REQUEST, "Invalid request", e.description());
            }
        }
    };
    let Some(up) = state.inner.upstreams.get(&id) else {
        return unknown_provider();
    };
    let server = &state.inner.server;
    let cookie = flow_cookie_of(&state, &parts.headers);
    let ret = match server
        .provider_return(&id, params.get("state").unwrap_or(""), cookie.as_deref())
        .await
    {
        Ok(r) => r,
        Err(e) => return sign_in_refused(up, e),
    };
    // The flow is spent: its cookie goes whatever happens next.
    let clear = flow_cookie(&state, "");
    if let Some(error) = params.get("error") {
        // The provider's error code, kept to the characters codes use (it
        // arrives in the URL, from anyone).
        let error: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        tracing::info!(provider = %id, %error, "the provider did not sign the user in");
        return with_cookie(
            pages::error(
                StatusCode::FORBIDDEN,
                &format!("Signing in with {} was cancelled", up.config.name),
                &format!(
                    "{} did not sign you in. Nothing was changed. Go back to the application \
                     to try again.",
                    up.config.name
                ),
            ),
            clear,
        );
    }
    let Some(code) = params.get("code") else {
        return with_cookie(
            provider_failed(
                up,
                UpstreamError::Unavailable("the redirect has no `code`".into()),
            ),
            clear,
        );
    };
    let identity = match state
        .inner
        .upstreams
        .identity(
            up,
            code,
            &ret,
            &callback_url(&state, &id),
            params.get("iss"),
        )
        .await
    {
        Ok(i) => i,
        Err(e) => return with_cookie(provider_failed(up, e), clear),
    };
    continue_with(&state, up, &parts.headers, &ret.return_to, &identity).await
}

/// The checked identity signs in, links or creates an account, and the
/// authorization request continues. The flow cookie is removed, or, when
/// a password page follows, set anew for it.
async fn continue_with(
    state: &OAuthState,
    up: &Upstream,
    headers: &HeaderMap,
    return_to: &ReturnTo,
    identity: &UpstreamIdentity,
) -> Response {
    let server = &state.inner.server;
    let p = params_of(return_to);
    let areq = match server.authorize_request(&p).await {
        Ok(r) => r,
        Err(e) => return refused(state, e),
    };
    let (csrf, browser, csrf_cookie) = csrf_with_browser(state, headers);
    let mut next_flow = flow_cookie(state, "");
    let resp = match server
        .federated_sign_in(&areq, identity, return_to.clone())
        .await
    {
        Ok(Federated::SignedIn(signed)) => {
            signed_in(state, &areq, &p, &csrf, &browser, &signed, CONSENT_ACTION).await
        }
        Ok(Federated::Confirm {
            handle,
            cookie,
            username,
        }) => {
            next_flow = flow_cookie(state, &cookie);
            pages::html(
                StatusCode::OK,
                &pages::LinkConfirmPage {
                    provider: &up.config.name,
                    username: &username,
                    csrf: &csrf,
                    handle: &handle,
                    error: None,
                },
            )
        }
        Err(Error::InvalidScope(_)) => back_with(
            state,
            &areq,
            AuthorizeErrorCode::InvalidScope(
                "none of the requested scopes may be granted to this user",
            ),
        ),
        Err(e) => sign_in_refused(up, e),
    };
    with_cookie(with_cookie(resp, csrf_cookie), next_flow)
}

/// `POST /auth/providers/{id}/link`.
pub(crate) async fn link(
    State(state): State<OAuthState>,
    Path(id): Path<String>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let params = match read_form(&state, &parts.headers, body).await {
        Ok(p) => p,
        Err(page) => return page,
    };
    let Some(browser) = csrf_checked(&state, &parts.headers, &params) else {
        return csrf_refused();
    };
    let Some(up) = state.inner.upstreams.get(&id) else {
        return unknown_provider();
    };
    let server = &state.inner.server;
    let csrf = params.get("csrf").unwrap_or("");
    let handle = params.get("handle").unwrap_or("");
    let username = params.get("username").unwrap_or("");
    let again = |message: &str, status| {
        pages::html(
            status,
            &pages::LinkConfirmPage {
                provider: &up.config.name,
                username,
                csrf,
                handle,
                error: Some(message),
            },
        )
    };
    let cookie = flow_cookie_of(&state, &parts.headers);
    let (return_to, user) = match server
        .provider_confirm_link(
            &id,
            handle,
            params.get("password").unwrap_or(""),
            cookie.as_deref(),
            Some(addr),
        )
        .await
    {
        Ok(r) => r,
        Err(Error::InvalidGrant(_)) => {
            return again("The password is incorrect.", StatusCode::UNAUTHORIZED);
        }
        Err(Error::TooManyRequests(_, wait)) => {
            let mut resp = again(
                "Too many failed attempts. Wait a moment and try again.",
                StatusCode::TOO_MANY_REQUESTS,
            );
            if let Ok(v) = HeaderValue::from_str(&wait.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return resp;
        }
        Err(e) => return sign_in_refused(up, e),
    };
    let clear = flow_cookie(&state, "");
    let p = params_of(&return_to);
    let areq = match server.authorize_request(&p).await {
        Ok(r) => r,
        Err(e) => return with_cookie(refused(&state, e), clear),
    };
    let resp = match server.confirmed_sign_in(&areq, &user, &id) {
        Ok(signed) => signed_in(&state, &areq, &p, csrf, &browser, &signed, CONSENT_ACTION).await,
        Err(Error::InvalidScope(_)) => back_with(
            &state,
            &areq,
            AuthorizeErrorCode::InvalidScope(
                "none of the requested scopes may be granted to this user",
            ),
        ),
        Err(e) => sign_in_refused(up, e),
    };
    with_cookie(resp, clear)
}

/// The account behind the bearer token of `headers`, or the RFC 6750
/// answer.
async fn account_of(state: &OAuthState, headers: &HeaderMap) -> Result<String, Response> {
    let token = crate::userinfo::bearer(headers).map_err(IntoResponse::into_response)?;
    let server = state.server();
    let principal = server
        .access_principal(token, server.now())
        .await
        .map_err(|e| crate::userinfo::Refusal::Auth(e).into_response())?;
    if let Err(wait) = state.inner.rates.check_userinfo(&principal.subject) {
        return Err(crate::userinfo::Refusal::TooMany(wait).into_response());
    }
    match principal.user() {
        Some(sub) => Ok(sub.to_string()),
        None => Err(json_error(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "this token does not act for a user",
        )),
    }
}

fn json_error(status: StatusCode, error: &str, description: &str) -> Response {
    crate::response::no_store(
        (
            status,
            Json(json!({ "error": error, "error_description": description })),
        )
            .into_response(),
    )
}

fn identities_error(e: Error) -> Response {
    match e {
        Error::NotFound(d) => json_error(StatusCode::NOT_FOUND, "not_found", &d),
        Error::Conflict(d) => json_error(StatusCode::CONFLICT, "conflict", &d),
        Error::Server(cause) | Error::Unavailable(cause) => {
            tracing::error!(%cause, "identities request failed");
            json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the server could not complete the request",
            )
        }
        e => json_error(StatusCode::BAD_REQUEST, e.code(), e.description()),
    }
}

/// `GET /auth/identities`.
pub(crate) async fn identities(State(state): State<OAuthState>, headers: HeaderMap) -> Response {
    let sub = match account_of(&state, &headers).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    match state.server().identities(&sub).await {
        Ok(list) => {
            let items: Vec<_> = list
                .iter()
                .map(|i| {
                    json!({
                        "id": i.id,
                        "provider": i.provider,
                        "issuer": i.issuer,
                        "subject": i.subject,
                        "email": i.email,
                        "linked_at": rfc3339(i.linked_at),
                    })
                })
                .collect();
            crate::response::no_store(Json(json!({ "identities": items })).into_response())
        }
        Err(e) => identities_error(e),
    }
}

/// `DELETE /auth/identities/{id}`.
pub(crate) async fn unlink(
    State(state): State<OAuthState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let sub = match account_of(&state, &headers).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    match state.server().unlink_identity(&sub, &id).await {
        Ok(()) => crate::response::no_store(StatusCode::NO_CONTENT.into_response()),
        Err(e) => identities_error(e),
    }
}

/// Unix seconds as RFC 3339 UTC.
fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
