//! The pages of the e-mail flows: `GET|POST /auth/forgot`
//! ("Forgot password?" and the "check your e-mail" page that follows it)
//! and `GET|HEAD|POST /auth/reset` (a reset link's page, and the POSTs that
//! set the new password by link or by code); `GET|HEAD|POST /auth/verify`
//! (a verification link's page, and the POSTs that confirm an address by
//! link or by code) and `POST /auth/verify/resend` ("Resend" on the "check
//! your e-mail" page that follows a sign-up); `POST /auth/email` (an
//! e-mail change, asked by the account with its own access token) and
//! `GET|HEAD|POST /auth/email/confirm` (its link's page and the POST that
//! confirms it; with the account's token, the POST takes its code).
//!
//! What is sent, when a token is live and what spends it is decided by
//! `gatehouse_auth::AuthServer` (`server/email.rs`); this module reads the
//! forms, checks their CSRF token first (as the sign-in pages do), and
//! renders. Opening a link (GET or HEAD, as mail scanners do) never spends
//! it: only the POST of its page does. A flow started from an
//! authorization request carries its parameters and goes back to its
//! sign-in page afterwards.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use gatehouse_auth::{
    AuthorizeParams, Error, FlowPurpose, MIN_SIGN_UP_PASSWORD, ReturnTo, Verification,
};

use crate::OAuthState;
use crate::authorize::{
    authorize_params, csrf_checked, csrf_for, csrf_refused, hidden, redirect, server_error,
    with_cookie,
};
use crate::error::OAuthError;
use crate::extract::Peer;
use crate::form::{self, Params};
use crate::pages;
use crate::response::no_store;

/// `../auth/forgot?…` from the sign-in page, with the authorization
/// request's parameters.
pub(crate) fn forgot_link(p: &AuthorizeParams) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in p.pairs() {
        q.append_pair(k, v);
    }
    format!("../auth/forgot?{}", q.finish())
}

/// The sign-in page of the authorization request `p`, when there is one.
fn sign_in_link(state: &OAuthState, p: &AuthorizeParams) -> Option<String> {
    let pairs = p.pairs();
    if pairs.is_empty() {
        return None;
    }
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    Some(format!(
        "{}/oauth/authorize?{}",
        state.inner.config.public_url,
        q.finish()
    ))
}

fn params_of(pairs: &ReturnTo) -> AuthorizeParams {
    let mut p = AuthorizeParams::default();
    for (k, v) in pairs {
        p.set(k, v.clone());
    }
    p
}

/// The flows' pages when the server sends no e-mail.
fn flows_off() -> Response {
    pages::error(
        StatusCode::NOT_FOUND,
        "E-mail is not set up",
        "This server sends no e-mail, so it cannot reset passwords or confirm addresses. \
         Ask its operator.",
    )
}

/// What every POST of the flows checks first: that the flows are on, the
/// form body (an unreadable one is a 400 page), and its CSRF token.
async fn flow_form(state: &OAuthState, req: Request) -> Result<Params, Response> {
    if !state.inner.server.mail_flows_on() {
        return Err(flows_off());
    }
    let (params, req) = read_form(state, req).await?;
    if csrf_checked(state, req.headers(), &params).is_none() {
        return Err(csrf_refused());
    }
    Ok(params)
}

/// A form body read as a page reads it ([`crate::authorize::read_form`]),
/// with the request's head.
async fn read_form(state: &OAuthState, req: Request) -> Result<(Params, Request<()>), Response> {
    let (parts, body) = req.into_parts();
    let params = crate::authorize::read_form(state, &parts.headers, body).await?;
    Ok((params, Request::from_parts(parts, ())))
}

/// The query string's parameters, or the page refusing them.
fn query(req: &Request) -> Result<Params, Box<Response>> {
    form::parse_form(req.uri().query().unwrap_or("").as_bytes()).map_err(|e| {
        Box::new(pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid request",
            e.description(),
        ))
    })
}

/// `Retry-After` on a throttled answer.
fn too_many(mut resp: Response, wait: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&wait.max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn forgot_page(
    state: &OAuthState,
    p: &AuthorizeParams,
    csrf: &str,
    email: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    pages::html(
        status,
        &pages::ForgotPage {
            hidden: &hidden(p),
            csrf,
            email,
            error,
            sign_in_href: sign_in_link(state, p),
        },
    )
}

fn check_email_page(
    p: &AuthorizeParams,
    csrf: &str,
    flow: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    pages::html(
        status,
        &pages::CheckEmailPage {
            hidden: &hidden(p),
            csrf,
            flow,
            error,
            min_password: MIN_SIGN_UP_PASSWORD,
        },
    )
}

fn reset_page(csrf: &str, token: &str, error: Option<&str>, status: StatusCode) -> Response {
    pages::html(
        status,
        &pages::ResetPage {
            csrf,
            token,
            error,
            min_password: MIN_SIGN_UP_PASSWORD,
        },
    )
}

fn dead_link() -> Response {
    pages::error(
        StatusCode::BAD_REQUEST,
        "This link no longer works",
        "The link has expired, was already used, or was cancelled by wrong codes. \
         Ask for a new one from the sign-in page.",
    )
}

/// `GET /auth/forgot`: the form asking for the address.
pub(crate) async fn forgot_get(State(state): State<OAuthState>, req: Request) -> Response {
    if !state.inner.server.mail_flows_on() {
        return flows_off();
    }
    let params = match query(&req) {
        Ok(p) => p,
        Err(resp) => return *resp,
    };
    let p = authorize_params(&params);
    let (csrf, cookie) = csrf_for(&state, req.headers());
    with_cookie(
        forgot_page(&state, &p, &csrf, "", None, StatusCode::OK),
        cookie,
    )
}

/// `POST /auth/forgot`: the "check your e-mail" page, the same for every
/// well-formed address (the message, if any, is written after it).
pub(crate) async fn forgot_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let params = match flow_form(&state, req).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let csrf = params.get("csrf").unwrap_or("");
    let p = authorize_params(&params);
    let email = params.get("email").unwrap_or("");
    let return_to: ReturnTo = p
        .pairs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match state
        .inner
        .server
        .forgot_password(email, return_to, Some(addr))
    {
        Ok(flow) => check_email_page(&p, csrf, &flow, None, StatusCode::OK),
        Err(Error::InvalidInput(msg)) => {
            forgot_page(&state, &p, csrf, email, Some(&msg), StatusCode::BAD_REQUEST)
        }
        Err(Error::Server(cause) | Error::Unavailable(cause)) => server_error(&cause),
        Err(_) => flows_off(),
    }
}

/// `GET|HEAD /auth/reset?token=…`: the link's page. Never spends the
/// token.
pub(crate) async fn reset_get(State(state): State<OAuthState>, req: Request) -> Response {
    link_page(&state, req, FlowPurpose::Reset, |csrf, token| {
        reset_page(csrf, token, None, StatusCode::OK)
    })
    .await
}

/// The page of a link of `purpose` (`?token=…`), made by `page` with a new
/// CSRF token: the token is looked at, never spent; a dead link, or one of
/// another purpose, is the dead-link page.
async fn link_page(
    state: &OAuthState,
    req: Request,
    purpose: FlowPurpose,
    page: impl FnOnce(&str, &str) -> Response,
) -> Response {
    if !state.inner.server.mail_flows_on() {
        return flows_off();
    }
    let params = match query(&req) {
        Ok(p) => p,
        Err(resp) => return *resp,
    };
    let token = params.get("token").unwrap_or("");
    match state.inner.server.email_link(token).await {
        Ok(t) if t.purpose == purpose => {
            let (csrf, cookie) = csrf_for(state, req.headers());
            with_cookie(page(&csrf, token), cookie)
        }
        Ok(_) | Err(Error::InvalidGrant(_)) => dead_link(),
        Err(Error::Server(cause) | Error::Unavailable(cause)) => server_error(&cause),
        Err(_) => flows_off(),
    }
}

/// `POST /auth/reset`: a new password, by the link's `token` or by the
/// `flow`'s code; then back to the authorization request the flow came
/// from, or a page saying it is done.
pub(crate) async fn reset_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let params = match flow_form(&state, req).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let server = &state.inner.server;
    let csrf = params.get("csrf").unwrap_or("");
    let password = params.get("password").unwrap_or("");
    let outcome = if let Some(token) = params.get("token") {
        let again = |msg: &str, status| reset_page(csrf, token, Some(msg), status);
        match server.reset_by_link(token, password, Some(addr)).await {
            Ok(to) => Ok(to),
            Err(Error::InvalidInput(msg)) => Err(again(&msg, StatusCode::BAD_REQUEST)),
            Err(Error::InvalidGrant(_)) => Err(dead_link()),
            Err(e) => Err(error_page(e)),
        }
    } else {
        let p = authorize_params(&params);
        let flow = params.get("flow").unwrap_or("");
        let code = params.get("code").unwrap_or("");
        let again = |msg: &str, status| check_email_page(&p, csrf, flow, Some(msg), status);
        server
            .reset_by_code(flow, code, password, Some(addr))
            .await
            .map_err(|e| code_refused(e, StatusCode::BAD_REQUEST, again))
    };
    match outcome {
        Ok(to) => match sign_in_link(&state, &params_of(&to)) {
            Some(location) => redirect(&location),
            None => pages::error(
                StatusCode::OK,
                "Your password was changed",
                "Sign in with your new password. Every session signed in with the old one \
                 was signed out.",
            ),
        },
        Err(resp) => resp,
    }
}

/// "Check your e-mail" after a sign-up or "Resend": the code's form and
/// "Resend", posting to absolute URLs under the issuer (it is shown under
/// `/oauth/authorize` and under `/auth/verify`).
pub(crate) fn check_verify_page(
    state: &OAuthState,
    p: &AuthorizeParams,
    csrf: &str,
    (flow, origin): (&str, &str),
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let base = &state.inner.config.public_url;
    let server = &state.inner.server;
    pages::html(
        status,
        &pages::CheckVerifyPage {
            hidden: &hidden(p),
            csrf,
            flow,
            origin,
            error,
            verify_action: format!("{base}{VERIFY_PATH}"),
            resend_action: format!("{base}/auth/verify/resend"),
            continue_href: (server.verification() == Verification::Optional)
                .then(|| sign_in_link(state, p))
                .flatten(),
        },
    )
}

/// Where the verification link's page POSTs (its route, `lib.rs`).
pub(crate) const VERIFY_PATH: &str = "/auth/verify";
/// Where the e-mail change link's page POSTs (its route, `lib.rs`).
pub(crate) const CHANGE_PATH: &str = "/auth/email/confirm";

/// A link's page: a button whose POST to `path` (under the public URL)
/// spends the link's token, with `error` when the last POST was refused.
/// The verification link and the e-mail change link share it.
fn confirm_page(
    state: &OAuthState,
    path: &str,
    csrf: &str,
    token: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    pages::html(
        status,
        &pages::VerifyPage {
            csrf,
            token,
            error,
            verify_action: format!("{}{path}", state.inner.config.public_url),
        },
    )
}

/// `GET|HEAD /auth/verify?token=…`: the link's page, a button whose POST
/// confirms. Never spends the token.
pub(crate) async fn verify_get(State(state): State<OAuthState>, req: Request) -> Response {
    link_page(&state, req, FlowPurpose::Verify, |csrf, token| {
        confirm_page(&state, VERIFY_PATH, csrf, token, None, StatusCode::OK)
    })
    .await
}

/// `POST /auth/verify`: confirms the address, by the link's `token` or by
/// the `flow`'s code; then back to the authorization request the sign-up
/// came from, or a page saying it is done.
pub(crate) async fn verify_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let params = match flow_form(&state, req).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let server = &state.inner.server;
    let csrf = params.get("csrf").unwrap_or("");
    let outcome = if let Some(token) = params.get("token") {
        match server.verify_by_link(token, Some(addr)).await {
            Ok(to) => Ok(to),
            Err(Error::InvalidInput(msg)) => Err(confirm_page(
                &state,
                VERIFY_PATH,
                csrf,
                token,
                Some(&msg),
                StatusCode::CONFLICT,
            )),
            Err(Error::InvalidGrant(_)) => Err(dead_link()),
            Err(e) => Err(error_page(e)),
        }
    } else {
        let p = authorize_params(&params);
        let flow = params.get("flow").unwrap_or("");
        let origin = params.get("origin").unwrap_or(flow);
        let code = params.get("code").unwrap_or("");
        let again = |msg: &str, status| {
            check_verify_page(&state, &p, csrf, (flow, origin), Some(msg), status)
        };
        server
            .verify_by_code(flow, code, Some(addr))
            .await
            .map_err(|e| code_refused(e, StatusCode::CONFLICT, again))
    };
    match outcome {
        Ok(to) => match sign_in_link(&state, &params_of(&to)) {
            Some(location) => redirect(&location),
            None => pages::error(
                StatusCode::OK,
                "Your e-mail address is confirmed",
                "Go back to the application and sign in.",
            ),
        },
        Err(resp) => resp,
    }
}

/// `POST /auth/verify/resend`: "Resend" on the "check your e-mail" page;
/// the same page again, with the new flow's id, whether or not anything
/// was sent.
pub(crate) async fn resend_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let params = match flow_form(&state, req).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let csrf = params.get("csrf").unwrap_or("");
    let p = authorize_params(&params);
    let origin = params.get("origin").unwrap_or("");
    match state.inner.server.resend_verification(origin, Some(addr)) {
        Ok(flow) => check_verify_page(&state, &p, csrf, (&flow, origin), None, StatusCode::OK),
        Err(Error::Server(cause) | Error::Unavailable(cause)) => server_error(&cause),
        Err(_) => flows_off(),
    }
}

/// A JSON answer of the account's own endpoints (`/auth/email`), never
/// cached.
fn api(status: StatusCode, body: serde_json::Value) -> Response {
    no_store((status, axum::Json(body)).into_response())
}

/// A refusal of the account's own endpoints: `{error, error_description}`
/// with the status the error calls for (a wrong password is 403, a wrong
/// code 400, an address taken meanwhile 409).
fn api_error(e: Error) -> Response {
    let status = match &e {
        Error::InvalidGrant(_) | Error::InvalidInput(_) | Error::InvalidRequest(_) => {
            StatusCode::BAD_REQUEST
        }
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        _ => return OAuthError::OAuth2(e).into_response(),
    };
    api(
        status,
        json!({ "error": e.code(), "error_description": e.description() }),
    )
}

/// The JSON object of a request body (read within the endpoints' size
/// limit), or the 400 refusing it.
async fn json_body(state: &OAuthState, req: Request) -> Result<serde_json::Value, Response> {
    let refused = |d: &str| {
        api(
            StatusCode::BAD_REQUEST,
            json!({ "error": "invalid_request", "error_description": d }),
        )
    };
    let bytes = axum::body::to_bytes(req.into_body(), state.inner.config.max_body_bytes)
        .await
        .map_err(|_| refused("the request body is too large"))?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(refused("send a JSON object")),
    }
}

/// `POST /auth/email` (Bearer, the account's own token; JSON `{"email",
/// "password"}`): starts an e-mail change. 202 whatever the new address
/// is (the messages are written after the answer); a wrong password is
/// 403 and sends nothing.
pub(crate) async fn change_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    if !state.inner.server.mail_flows_on() {
        return api_error(Error::NotFound(
            "e-mail is not set up on this server".into(),
        ));
    }
    let sub = match crate::userinfo::bearer_user(&state, req.headers()).await {
        Ok(sub) => sub,
        Err(resp) => return resp,
    };
    let body = match json_body(&state, req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let field = |k: &str| {
        body.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    };
    match state
        .inner
        .server
        .start_email_change(&sub, field("email"), field("password"), Some(addr))
        .await
    {
        Ok(()) => api(
            StatusCode::ACCEPTED,
            json!({ "status": "confirmation sent to the new address; it may take a while" }),
        ),
        Err(Error::InvalidGrant(_)) => api(
            StatusCode::FORBIDDEN,
            json!({ "error": "access_denied", "error_description": "the password is wrong" }),
        ),
        Err(e) => api_error(e),
    }
}

/// `GET|HEAD /auth/email/confirm?token=…`: the link's page, a button
/// whose POST confirms the new address. Never spends the token.
pub(crate) async fn change_confirm_get(State(state): State<OAuthState>, req: Request) -> Response {
    link_page(&state, req, FlowPurpose::EmailChange, |csrf, token| {
        confirm_page(&state, CHANGE_PATH, csrf, token, None, StatusCode::OK)
    })
    .await
}

/// `POST /auth/email/confirm`: with `Authorization: Bearer` (the account's
/// own token), JSON `{"code"}` confirms its latest e-mail change; without,
/// the link page's form (CSRF-checked) confirms by the link's `token`.
pub(crate) async fn change_confirm_post(
    State(state): State<OAuthState>,
    Peer(addr): Peer,
    req: Request,
) -> Response {
    let server = &state.inner.server;
    if req.headers().contains_key(header::AUTHORIZATION) {
        if !server.mail_flows_on() {
            return api_error(Error::NotFound(
                "e-mail is not set up on this server".into(),
            ));
        }
        let sub = match crate::userinfo::bearer_user(&state, req.headers()).await {
            Ok(sub) => sub,
            Err(resp) => return resp,
        };
        let body = match json_body(&state, req).await {
            Ok(b) => b,
            Err(resp) => return resp,
        };
        let code = body
            .get("code")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        return match server.email_change_by_code(&sub, code, Some(addr)).await {
            Ok(email) => api(
                StatusCode::OK,
                json!({ "email": email, "email_verified": true }),
            ),
            Err(e) => api_error(e),
        };
    }
    let params = match flow_form(&state, req).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let csrf = params.get("csrf").unwrap_or("");
    let token = params.get("token").unwrap_or("");
    match server.email_change_by_link(token, Some(addr)).await {
        Ok(_) => pages::error(
            StatusCode::OK,
            "Your e-mail address is changed",
            "Messages from this server now go to the new address.",
        ),
        Err(Error::Conflict(msg) | Error::InvalidInput(msg)) => confirm_page(
            &state,
            CHANGE_PATH,
            csrf,
            token,
            Some(&msg),
            StatusCode::CONFLICT,
        ),
        Err(Error::InvalidGrant(_)) => dead_link(),
        Err(e) => error_page(e),
    }
}

/// Any other refusal of a flow's POST.
/// A code page's answer to a refused code: the page again (`again`) with
/// what went wrong (a refused input with `input_status`), or the error
/// page for anything else.
fn code_refused(
    e: Error,
    input_status: StatusCode,
    again: impl Fn(&str, StatusCode) -> Response,
) -> Response {
    match e {
        Error::InvalidInput(msg) => again(&msg, input_status),
        Error::InvalidGrant(_) => again(
            "The code is wrong, or it has expired or was cancelled. Check the message, \
             or ask for a new one.",
            StatusCode::BAD_REQUEST,
        ),
        Error::TooManyRequests(_, wait) => too_many(
            again(
                "Too many attempts. Wait a moment and try again.",
                StatusCode::TOO_MANY_REQUESTS,
            ),
            wait,
        ),
        e => error_page(e),
    }
}

fn error_page(e: Error) -> Response {
    {
        match e {
            Error::TooManyRequests(_, wait) => too_many(
                pages::error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many attempts",
                    "Wait a moment and try again.",
                ),
                wait,
            ),
            Error::Server(cause) | Error::Unavailable(cause) => server_error(&cause),
            other => pages::error(
                StatusCode::BAD_REQUEST,
                "The request cannot be completed",
                other.description(),
            ),
        }
    }
}
