//! `GET|POST /oauth/authorize`: the authorization endpoint of the code flow
//! (the sign-in, consent and sign-up pages), and, for requests carrying
//! `oauth_token`, the OAuth 1.0 approval of RFC 5849 §2.2.
//!
//! What is valid and where errors go is decided by
//! `gatehouse_auth::AuthServer::authorize_request`; this module only reads
//! the request, checks the CSRF token of the POSTs, and renders the pages
//! and redirects. Decisions: `docs/design/browser-apps.md`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

use gatehouse_auth::{
    AuthorizeError, AuthorizeErrorCode, AuthorizeParams, AuthorizeRequest, Error,
    MIN_SIGN_UP_PASSWORD, SignedIn, SignedUp, Verification,
};

use crate::error::OAuthError;
use crate::extract::{Form, Peer};
use crate::form::{self, Params};
use crate::pages::{self, Hidden};
use crate::{OAuthState, oauth1, response};

/// The CSRF cookie's name when the issuer is `https`: the `__Host-` prefix
/// makes browsers refuse it unless it is `Secure`, host-only and `Path=/`,
/// so a sibling subdomain cannot plant one.
pub const CSRF_COOKIE_SECURE: &str = "__Host-gatehouse-csrf";
/// The CSRF cookie's name on plain `http` (local development): browsers
/// refuse `__Host-` cookies that are not `Secure`.
pub const CSRF_COOKIE_PLAIN: &str = "gatehouse-csrf";
/// The CSRF hidden field.
const CSRF_FIELD: &str = "csrf";

/// Whether the issuer is served over TLS (the cookie is then `Secure`).
pub(crate) fn secure(state: &OAuthState) -> bool {
    state.inner.server.config().issuer.starts_with("https://")
}

fn cookie_name(state: &OAuthState) -> &'static str {
    if secure(state) {
        CSRF_COOKIE_SECURE
    } else {
        CSRF_COOKIE_PLAIN
    }
}

/// The CSRF field for a page, and the cookie to set when the browser has
/// none this server minted (a browser that has one keeps it, so two tabs
/// both work; a value planted by someone else is replaced).
pub(crate) fn csrf_for(state: &OAuthState, headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    let (field, _, cookie) = csrf_with_browser(state, headers);
    (field, cookie)
}

/// [`csrf_for`], with the cookie's value (the browser's, or the new one):
/// what a consent ticket made on this page is bound to.
pub(crate) fn csrf_with_browser(
    state: &OAuthState,
    headers: &HeaderMap,
) -> (String, String, Option<HeaderValue>) {
    let server = &state.inner.server;
    let jar = CookieJar::from_headers(headers);
    if let Some(c) = jar.get(cookie_name(state))
        && let Some(field) = server.csrf_field(c.value())
    {
        return (field, c.value().to_string(), None);
    }
    let pair = server.csrf_pair();
    let value = pair.cookie.clone();
    let cookie = Cookie::build((cookie_name(state), pair.cookie))
        .path("/")
        .http_only(true)
        .secure(secure(state))
        // Lax: sent on the top-level POST of our own form, never on a
        // cross-site subrequest.
        .same_site(SameSite::Lax)
        .build();
    (
        pair.field,
        value,
        HeaderValue::from_str(&cookie.to_string()).ok(),
    )
}

/// The browser's CSRF cookie, when the form's field goes with it (and the
/// server minted it); `None` otherwise, and the form is then answered
/// with [`csrf_refused`]. Asked before anything acts on a form.
pub(crate) fn csrf_checked(
    state: &OAuthState,
    headers: &HeaderMap,
    params: &Params,
) -> Option<String> {
    let jar = CookieJar::from_headers(headers);
    let cookie = jar.get(cookie_name(state)).map(|c| c.value().to_string());
    state
        .inner
        .server
        .csrf_ok(cookie.as_deref(), params.get(CSRF_FIELD))
        .then_some(cookie)
        .flatten()
}

/// A form whose CSRF token is missing or wrong: 403, never redirected, so
/// a forged POST learns nothing and goes nowhere.
pub(crate) fn csrf_refused() -> Response {
    pages::error(
        StatusCode::FORBIDDEN,
        "This form has expired",
        "The form did not come from this site or its security token is missing. \
         Go back to the application and sign in again.",
    )
}

/// Sets `cookie` (a new CSRF cookie) on `resp`, when there is one.
pub(crate) fn with_cookie(mut resp: Response, cookie: Option<HeaderValue>) -> Response {
    if let Some(c) = cookie {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

/// The parameters of an authorization request out of a query or form.
pub(crate) fn authorize_params(params: &Params) -> AuthorizeParams {
    let mut p = AuthorizeParams::default();
    for name in [
        "response_type",
        "client_id",
        "redirect_uri",
        "scope",
        "state",
        "code_challenge",
        "code_challenge_method",
        "nonce",
        "prompt",
        "response_mode",
    ] {
        if let Some(v) = params.owned(name) {
            p.set(name, v);
        }
    }
    p
}

pub(crate) fn hidden(p: &AuthorizeParams) -> Vec<Hidden> {
    p.pairs()
        .into_iter()
        .map(|(name, value)| Hidden {
            name,
            value: value.to_string(),
        })
        .collect()
}

/// `authorize?…` with the request's parameters (and `screen`), for the
/// links between the sign-in and sign-up pages.
fn self_link(p: &AuthorizeParams, screen: Option<&str>) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in p.pairs() {
        q.append_pair(k, v);
    }
    if let Some(s) = screen {
        q.append_pair("screen", s);
    }
    format!("authorize?{}", q.finish())
}

/// A 302 to `location` (an authorization response), not cached, with no
/// referrer.
pub(crate) fn redirect(location: &str) -> Response {
    let Ok(value) = HeaderValue::from_str(location) else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid redirect",
            "The redirect URI cannot be used in a redirect.",
        );
    };
    let mut resp = StatusCode::FOUND.into_response();
    let h = resp.headers_mut();
    h.insert(header::LOCATION, value);
    pages::page_headers(h);
    response::no_store(resp)
}

/// A server fault: logged, never described.
pub(crate) fn server_error(cause: &str) -> Response {
    tracing::error!(cause = %cause, "authorization server error");
    pages::error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Something went wrong",
        "The server could not complete the request. Try again later.",
    )
}

/// An invalid request: on the page when no trusted redirect URI is known,
/// else back to the client (RFC 6749 §4.1.2.1).
pub(crate) fn refused(state: &OAuthState, e: AuthorizeError) -> Response {
    match e {
        AuthorizeError::Page(Error::Server(cause) | Error::Unavailable(cause)) => {
            server_error(&cause)
        }
        AuthorizeError::Page(e) => pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid authorization request",
            e.description(),
        ),
        AuthorizeError::Redirect {
            redirect_uri,
            state: st,
            error,
        } => redirect(&state.inner.server.authorization_error_redirect(
            &redirect_uri,
            st.as_deref(),
            error,
        )),
    }
}

pub(crate) fn back_with(
    state: &OAuthState,
    req: &AuthorizeRequest,
    error: AuthorizeErrorCode,
) -> Response {
    redirect(&state.inner.server.authorization_error_redirect(
        &req.redirect_uri,
        req.state.as_deref(),
        error,
    ))
}

/// `GET /oauth/authorize`.
pub(crate) async fn get(State(state): State<OAuthState>, req: Request) -> Response {
    let params = match form::parse_form(req.uri().query().unwrap_or("").as_bytes()) {
        Ok(p) => p,
        Err(e) => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "Invalid authorization request",
                e.description(),
            );
        }
    };
    if params.get("oauth_token").is_some() {
        return oauth1::authorize_page(&state, req.headers(), params.get("oauth_token")).await;
    }
    let p = authorize_params(&params);
    let areq = match state.inner.server.authorize_request(&p).await {
        Ok(r) => r,
        Err(e) => return refused(&state, e),
    };
    if areq.no_prompt {
        // No session: signing in always needs a page.
        return back_with(
            &state,
            &areq,
            AuthorizeErrorCode::LoginRequired("the user must sign in"),
        );
    }
    let (csrf, cookie) = csrf_for(&state, req.headers());
    let sign_up = params.get("screen") == Some("sign_up") && state.sign_up_enabled();
    let page = if sign_up {
        sign_up_page(&state, &areq, &p, &csrf, ("", ""), None, StatusCode::OK)
    } else {
        sign_in_page(&state, &areq, &p, &csrf, "", None, StatusCode::OK)
    };
    with_cookie(page, cookie)
}

fn sign_in_page(
    state: &OAuthState,
    areq: &AuthorizeRequest,
    p: &AuthorizeParams,
    csrf: &str,
    username: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    pages::html(
        status,
        &pages::SignInPage {
            client_id: &areq.client.client_id,
            hidden: &hidden(p),
            csrf,
            username,
            error,
            sign_up_href: state
                .sign_up_enabled()
                .then(|| self_link(p, Some("sign_up"))),
            forgot_href: state
                .inner
                .server
                .mail_flows_on()
                .then(|| crate::email::forgot_link(p)),
            providers: state.inner.server.providers(),
        },
    )
}

/// The sign-up form; `(username, email)` as typed.
fn sign_up_page(
    state: &OAuthState,
    areq: &AuthorizeRequest,
    p: &AuthorizeParams,
    csrf: &str,
    (username, email): (&str, &str),
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let server = &state.inner.server;
    pages::html(
        status,
        &pages::SignUpPage {
            client_id: &areq.client.client_id,
            hidden: &hidden(p),
            csrf,
            username,
            ask_email: server.sign_up_asks_email(),
            email_required: server.verification() == Verification::Required,
            email,
            error,
            min_password: MIN_SIGN_UP_PASSWORD,
            sign_in_href: self_link(p, None),
        },
    )
}

/// A form a browser posted, or the page that says it could not be read.
pub(crate) async fn read_form(
    state: &OAuthState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Params, Response> {
    match Form::read(state, headers, body).await {
        Ok(Form(p)) => Ok(p),
        Err(OAuthError::OAuth2(e)) => Err(pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid form",
            e.description(),
        )),
        Err(_) => Err(pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid form",
            "The form could not be read.",
        )),
    }
}

/// `POST /oauth/authorize`: the OAuth 1.0 approval (with `oauth_token`),
/// or a step of the code flow (`action`: `sign_in`, `sign_up`, `consent`,
/// `deny`). Every step checks the CSRF token first and validates the
/// request's parameters again.
pub(crate) async fn post(
    State(state): State<OAuthState>,
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
    if params.get("oauth_token").is_some() {
        return match oauth1::authorize(&state, addr, &params).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        };
    }
    let server = &state.inner.server;
    let csrf = params.get(CSRF_FIELD).unwrap_or("").to_string();
    let p = authorize_params(&params);
    let areq = match server.authorize_request(&p).await {
        Ok(r) => r,
        Err(e) => return refused(&state, e),
    };
    let username = params.get("username").unwrap_or("");
    let password = params.get("password").unwrap_or("");
    match params.get("action") {
        Some("sign_in") => {
            if username.is_empty() || password.is_empty() {
                return sign_in_page(
                    &state,
                    &areq,
                    &p,
                    &csrf,
                    username,
                    Some("Enter your user name and password."),
                    StatusCode::BAD_REQUEST,
                );
            }
            match server.sign_in(&areq, username, password, Some(addr)).await {
                Ok(signed) => {
                    signed_in(&state, &areq, &p, &csrf, &browser, &signed, "authorize").await
                }
                Err(e) => sign_in_failed(&state, &areq, &p, &csrf, (username, ""), e, false),
            }
        }
        Some("sign_up") if state.sign_up_enabled() => {
            let email = params.get("email").unwrap_or("");
            let return_to = p
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            match server
                .sign_up(&areq, username, email, password, return_to, Some(addr))
                .await
            {
                Ok(SignedUp::SignedIn(signed)) => {
                    signed_in(&state, &areq, &p, &csrf, &browser, &signed, "authorize").await
                }
                Ok(SignedUp::CheckEmail(flow)) => crate::email::check_verify_page(
                    &state,
                    &p,
                    &csrf,
                    (&flow, &flow),
                    None,
                    StatusCode::OK,
                ),
                Err(e) => sign_in_failed(&state, &areq, &p, &csrf, (username, email), e, true),
            }
        }
        Some("consent") => {
            let ticket = params.get("ticket").unwrap_or("");
            match server.open_consent_ticket(&areq, ticket, &browser).await {
                Ok(signed) => code_redirect(&state, &areq, &signed).await,
                Err(Error::Server(cause) | Error::Unavailable(cause)) => server_error(&cause),
                Err(e) => sign_in_page(
                    &state,
                    &areq,
                    &p,
                    &csrf,
                    "",
                    Some(e.description()),
                    StatusCode::BAD_REQUEST,
                ),
            }
        }
        Some("deny") => back_with(
            &state,
            &areq,
            AuthorizeErrorCode::AccessDenied("the user denied the request"),
        ),
        _ => pages::error(
            StatusCode::BAD_REQUEST,
            "Invalid form",
            "The form's action is missing or unknown.",
        ),
    }
}

/// A sign-in or sign-up that did not succeed, on its page again (the
/// throttle with 429), or back to the client when nothing asked for may
/// be granted.
fn sign_in_failed(
    state: &OAuthState,
    areq: &AuthorizeRequest,
    p: &AuthorizeParams,
    csrf: &str,
    (username, email): (&str, &str),
    e: Error,
    sign_up: bool,
) -> Response {
    let page = |message: &str, status| {
        if sign_up {
            sign_up_page(
                state,
                areq,
                p,
                csrf,
                (username, email),
                Some(message),
                status,
            )
        } else {
            sign_in_page(state, areq, p, csrf, username, Some(message), status)
        }
    };
    match e {
        Error::TooManyRequests(_, wait) => {
            let message = if sign_up {
                "Too many accounts created or attempts failed from your network. \
                 Wait a moment and try again."
            } else {
                "Too many failed attempts. Wait a moment and try again."
            };
            let mut resp = page(message, StatusCode::TOO_MANY_REQUESTS);
            if let Ok(v) = HeaderValue::from_str(&wait.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        // The same words for an unknown user and a wrong password.
        Error::InvalidGrant(_) => page(
            "The user name or password is incorrect.",
            StatusCode::UNAUTHORIZED,
        ),
        Error::InvalidScope(_) => back_with(
            state,
            areq,
            AuthorizeErrorCode::InvalidScope(
                "none of the requested scopes may be granted to this user",
            ),
        ),
        Error::Server(cause) | Error::Unavailable(cause) => server_error(&cause),
        // Sign-up: a name taken, a password too short (the message says which).
        e => page(e.description(), StatusCode::BAD_REQUEST),
    }
}

/// After a successful sign-in: the consent page for a third-party client
/// (or `prompt=consent`), else straight back with a code. `action` is the
/// consent form's target, `/oauth/authorize` relative to the page.
pub(crate) async fn signed_in(
    state: &OAuthState,
    areq: &AuthorizeRequest,
    p: &AuthorizeParams,
    csrf: &str,
    browser: &str,
    signed: &SignedIn,
    action: &str,
) -> Response {
    if !areq.needs_consent() {
        return code_redirect(state, areq, signed).await;
    }
    let ticket = state.inner.server.consent_ticket(areq, signed, browser);
    pages::html(
        StatusCode::OK,
        &pages::ConsentPage {
            client_id: &areq.client.client_id,
            username: &signed.username,
            scopes: signed.scope.to_vec(),
            redirect_uri: &areq.redirect_uri,
            hidden: &hidden(p),
            csrf,
            ticket: &ticket,
            action,
        },
    )
}

async fn code_redirect(state: &OAuthState, areq: &AuthorizeRequest, signed: &SignedIn) -> Response {
    match state.inner.server.issue_code(areq, signed).await {
        Ok(location) => redirect(&location),
        Err(Error::Server(cause) | Error::Unavailable(cause)) => {
            tracing::error!(cause = %cause, "issuing an authorization code failed");
            back_with(
                state,
                areq,
                AuthorizeErrorCode::ServerError("the server could not issue a code"),
            )
        }
        Err(Error::InvalidScope(_)) => back_with(
            state,
            areq,
            AuthorizeErrorCode::InvalidScope("invalid scope"),
        ),
        Err(_) => back_with(
            state,
            areq,
            AuthorizeErrorCode::InvalidRequest("the request cannot be completed"),
        ),
    }
}
