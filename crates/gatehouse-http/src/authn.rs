//! The one authentication layer in front of `/graphql` and `/v1`: Bearer
//! access tokens (RFC 6750), HTTP Basic with a user's password (re-checked on
//! every request), OAuth 1.0 signed requests (RFC 5849 §3), or anonymous
//! reads when configured. The [`Principal`] it
//! finds goes into the request extensions; authorization (scopes) happens
//! per field in GraphQL and in the REST router after it resolved the path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use gatehouse_auth::oauth1::{SignedRequest, has_oauth1_params};
use gatehouse_auth::{AuthServer, Principal};
use gatehouse_graphql::error::Code;
use quick_cache::sync::Cache;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::telemetry::Caller;

/// How long a verified Basic credential is trusted without argon2.
const BASIC_CACHE_TTL: Duration = Duration::from_secs(60);
/// Entries kept at most.
const BASIC_CACHE_MAX: usize = 10_000;

/// Authenticates resource requests.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    server: Arc<AuthServer>,
    anonymous_read: bool,
    /// Set in resource-server-only mode: tokens are checked by another
    /// authorization server's introspection endpoint.
    introspector: Option<crate::introspect::Introspector>,
    /// sha256(username NUL password) -> (stored hash it verified against,
    /// when): argon2 takes tens of milliseconds, too much for every request
    /// of a Basic client.
    basic_cache: Cache<[u8; 32], (Arc<str>, Instant)>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("anonymous_read", &self.inner.anonymous_read)
            .finish_non_exhaustive()
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// No credentials (and anonymous reads are off).
    Missing,
    /// A bearer token that is malformed, expired, revoked or for another audience.
    InvalidToken(String),
    /// Basic credentials that do not match a user.
    BadCredentials,
    /// An unsupported scheme in `Authorization`.
    UnsupportedScheme,
    /// The credential store could not be reached.
    Unavailable,
    /// An OAuth 1.0 request that is malformed: a missing or repeated
    /// protocol parameter, an unsupported signature method (400).
    OAuth1Invalid(String),
    /// An OAuth 1.0 request that is refused: unknown consumer, bad
    /// signature, stale timestamp, reused nonce, bad token (401). The
    /// reason is never shown (no oracle for consumer keys).
    OAuth1Rejected(String),
    /// Basic credentials of a user throttled after failed logins from this
    /// address, or too many password checks under way (429 with
    /// `Retry-After`, seconds, whatever the password); or a refused OAuth
    /// 1.0 signature from an address throttled after refusals.
    Throttled(u64),
}

/// Largest form body read to verify an OAuth 1.0 signature over it.
const OAUTH1_MAX_FORM_BYTES: usize = 1024 * 1024;

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|e| {
            e.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

impl Authenticator {
    /// The issuer this server's tokens name (its public URL).
    pub fn issuer(&self) -> &str {
        &self.inner.server.config().issuer
    }

    /// An authenticator over `server`'s tokens and users.
    pub fn new(server: Arc<AuthServer>, anonymous_read: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                server,
                anonymous_read,
                introspector: None,
                basic_cache: Cache::new(BASIC_CACHE_MAX),
            }),
        }
    }

    /// An authenticator that validates bearer tokens through another
    /// authorization server's introspection endpoint (resource-server-only
    /// mode); Basic credentials are still checked against `server`'s users.
    pub fn with_introspection(
        server: Arc<AuthServer>,
        anonymous_read: bool,
        introspection: crate::introspect::IntrospectionConfig,
    ) -> Result<Self, String> {
        Ok(Self {
            inner: Arc::new(Inner {
                server,
                anonymous_read,
                introspector: Some(crate::introspect::Introspector::new(introspection)?),
                basic_cache: Cache::new(BASIC_CACHE_MAX),
            }),
        })
    }

    /// Whether requests without credentials may read.
    pub fn anonymous_read(&self) -> bool {
        self.inner.anonymous_read
    }

    /// The principal of a whole request: an OAuth 1.0 signed request (which
    /// needs the method, URL and form body), or else what
    /// [`Authenticator::authenticate`] finds in the headers. The request is
    /// handed back (its body restored when it had to be read).
    pub async fn authenticate_request(
        &self,
        req: Request,
    ) -> (Request, Result<Principal, AuthFailure>) {
        let headers = req.headers();
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let marked = has_oauth1_params(authorization, req.uri().query(), None);
        // A form body may carry the protocol parameters too (RFC 5849 §3.5.2),
        // but only when no other credentials are sent.
        let maybe_in_body = !marked && authorization.is_none() && is_form(headers);
        if !marked && !maybe_in_body {
            let result = self
                .authenticate_from(
                    req.headers(),
                    gatehouse_oauth::client_addr(req.extensions()),
                )
                .await;
            return (req, result);
        }
        let peer = gatehouse_oauth::client_addr(req.extensions());
        let (parts, body) = req.into_parts();
        let form = if is_form(&parts.headers) {
            match axum::body::to_bytes(body, OAUTH1_MAX_FORM_BYTES).await {
                Ok(b) => b,
                Err(_) => {
                    let req = Request::from_parts(parts, axum::body::Body::empty());
                    let f = AuthFailure::OAuth1Invalid("the form body is too large".into());
                    return (req, Err(f));
                }
            }
        } else {
            // Not read: put the untouched body back.
            let signed = self.signed_request(&parts, None);
            let req = Request::from_parts(parts, body);
            let result = Box::pin(self.oauth1(signed, peer)).await;
            return (req, result);
        };
        if maybe_in_body && !has_oauth1_params(None, None, Some(&form)) {
            let req = Request::from_parts(parts, axum::body::Body::from(form));
            let result = self
                .authenticate_from(
                    req.headers(),
                    gatehouse_oauth::client_addr(req.extensions()),
                )
                .await;
            return (req, result);
        }
        let signed = self.signed_request(&parts, Some(&form));
        let req = Request::from_parts(parts, axum::body::Body::from(form));
        let result = Box::pin(self.oauth1(signed, peer)).await;
        (req, result)
    }

    /// What RFC 5849 §3.4.1 signs ([`gatehouse_oauth::origin::signed_request`]).
    fn signed_request(
        &self,
        parts: &axum::http::request::Parts,
        form: Option<&[u8]>,
    ) -> Result<SignedRequest, AuthFailure> {
        gatehouse_oauth::origin::signed_request(&self.inner.server.config().issuer, parts, form)
            .map_err(oauth1_failure)
    }

    /// RFC 5849 §3.2: verifies a signed resource request from `peer`
    /// (failures are throttled per consumer and address, as on the OAuth
    /// 1.0 endpoints).
    async fn oauth1(
        &self,
        signed: Result<SignedRequest, AuthFailure>,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, AuthFailure> {
        self.inner
            .server
            .oauth1_authenticate(&signed?, peer)
            .await
            .map_err(oauth1_failure)
    }

    /// The authorization server's current time (unix seconds): token expiry
    /// is measured on this clock, which tests can move.
    pub fn now(&self) -> i64 {
        self.inner.server.now()
    }

    /// The principal of a request with these headers, from an unknown
    /// address (see [`Authenticator::authenticate_from`]).
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        self.authenticate_from(headers, None).await
    }

    /// The principal of a request with these headers from `peer` (the
    /// caller's address, `gatehouse_oauth::client_addr`; failed Basic logins are throttled
    /// per user and address).
    pub async fn authenticate_from(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, AuthFailure> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return if self.inner.anonymous_read {
                Ok(Principal::anonymous())
            } else {
                Err(AuthFailure::Missing)
            };
        };
        let value = value.to_str().map_err(|_| AuthFailure::UnsupportedScheme)?;
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            self.bearer(rest).await
        } else if scheme.eq_ignore_ascii_case("basic") {
            // Boxed, like the other rare paths, so the common bearer
            // path's future stays small (it is moved as the request passes the layers).
            Box::pin(self.basic(rest, peer)).await
        } else {
            Err(AuthFailure::UnsupportedScheme)
        }
    }

    /// The principal of an access token (also used for WebSocket `connection_init`).
    pub async fn bearer(&self, token: &str) -> Result<Principal, AuthFailure> {
        if token.is_empty() {
            return Err(AuthFailure::InvalidToken(
                "the bearer token is empty".into(),
            ));
        }
        let server = &self.inner.server;
        if let Some(introspector) = &self.inner.introspector {
            return Box::pin(introspector.principal(token, server.now())).await;
        }
        server
            .access_principal(token, server.now())
            .await
            .map_err(|e| match e {
                gatehouse_auth::Error::InvalidToken(d) => AuthFailure::InvalidToken(d.to_string()),
                e => {
                    tracing::error!(
                        cause = e.internal_cause().unwrap_or(""),
                        "token validation failed"
                    );
                    AuthFailure::Unavailable
                }
            })
    }

    /// HTTP Basic with a user's password. Throttled (before anything else,
    /// so a right password gets no further) by the authorization server's
    /// one failed-login throttle, per (user, `peer`) and per `peer`; argon2
    /// runs there with bounded concurrency. A verified credential is
    /// remembered for [`BASIC_CACHE_TTL`].
    async fn basic(
        &self,
        encoded: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, AuthFailure> {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(AuthFailure::BadCredentials)?;
        let (username, password) = decoded.split_once(':').ok_or(AuthFailure::BadCredentials)?;
        let server = &self.inner.server;
        server
            .login_throttle()
            .check(gatehouse_auth::Account::User(username), peer, server.now())
            .map_err(AuthFailure::Throttled)?;
        let login_failure = |e: gatehouse_auth::Error| match e {
            gatehouse_auth::Error::TooManyRequests(_, wait) => AuthFailure::Throttled(wait),
            gatehouse_auth::Error::InvalidGrant(_) => AuthFailure::BadCredentials,
            e => {
                tracing::error!(
                    cause = e.internal_cause().unwrap_or(""),
                    "password check failed"
                );
                AuthFailure::Unavailable
            }
        };
        let user = server
            .repo()
            .find_user(username)
            .await
            .map_err(|_| AuthFailure::Unavailable)?;
        let Some(user) = user else {
            // Same cost as a wrong password (so names cannot be probed by
            // timing), and counted as a failure.
            return Err(server
                .check_user_password(username, password, peer)
                .await
                .map_or_else(login_failure, |_| AuthFailure::BadCredentials));
        };
        let key: [u8; 32] = Sha256::new()
            .chain_update(username.as_bytes())
            .chain_update([0u8])
            .chain_update(password.as_bytes())
            .finalize()
            .into();
        // The entry only counts while the stored hash is the one it was
        // verified against: a password change drops it at once.
        let cached = self.inner.basic_cache.get(&key).is_some_and(|(hash, at)| {
            *hash == *user.password_hash && at.elapsed() < BASIC_CACHE_TTL
        });
        if !cached {
            let checked = server
                .check_user_password(username, password, peer)
                .await
                .map_err(login_failure)?;
            if checked.password_hash != user.password_hash {
                // Changed between the two reads: verified against the new one.
                return Err(AuthFailure::BadCredentials);
            }
            self.inner.basic_cache.insert(
                key,
                (Arc::from(user.password_hash.as_str()), Instant::now()),
            );
        }
        // Scopes and claims read from the record on every request, like
        // the password.
        Ok(Principal::of_basic_user(user))
    }
}

fn oauth1_failure(e: gatehouse_auth::Error) -> AuthFailure {
    use gatehouse_auth::Error;
    match e {
        Error::InvalidClient(d) | Error::InvalidToken(d) | Error::InvalidGrant(d) => {
            AuthFailure::OAuth1Rejected(d.to_string())
        }
        Error::Server(cause) | Error::Unavailable(cause) => {
            tracing::error!(%cause, "OAuth 1.0 verification failed");
            AuthFailure::Unavailable
        }
        Error::TooManyRequests(_, wait) => AuthFailure::Throttled(wait),
        other => AuthFailure::OAuth1Invalid(other.description().to_string()),
    }
}

/// The `WWW-Authenticate` challenge for a failure (RFC 6750 §3).
pub fn challenge(failure: &AuthFailure) -> HeaderValue {
    let v = match failure {
        // RFC 6750 §3.1: no error code when the request had no credentials.
        AuthFailure::Missing | AuthFailure::UnsupportedScheme => {
            "Bearer realm=\"gatehouse\"".to_string()
        }
        AuthFailure::InvalidToken(d) => gatehouse_auth::challenge::invalid_token(d),
        AuthFailure::BadCredentials | AuthFailure::Throttled(_) => {
            "Basic realm=\"gatehouse\"".to_string()
        }
        AuthFailure::Unavailable => "Bearer realm=\"gatehouse\"".to_string(),
        // RFC 5849 §3.5.1: the OAuth scheme's challenge.
        AuthFailure::OAuth1Invalid(_) | AuthFailure::OAuth1Rejected(_) => {
            "OAuth realm=\"gatehouse\"".to_string()
        }
    };
    HeaderValue::from_str(&v)
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"gatehouse\""))
}

impl AuthFailure {
    /// A message safe to show.
    pub fn message(&self) -> String {
        match self {
            AuthFailure::Missing => {
                "credentials are required: send `Authorization: Bearer <access token>`".into()
            }
            AuthFailure::InvalidToken(d) => format!("invalid access token: {d}"),
            AuthFailure::BadCredentials => "the user name or password is wrong".into(),
            AuthFailure::UnsupportedScheme => {
                "unsupported Authorization scheme; use Bearer, Basic or OAuth".into()
            }
            AuthFailure::Unavailable => {
                "credentials cannot be checked right now; retry later".into()
            }
            AuthFailure::OAuth1Invalid(d) => format!("invalid OAuth 1.0 request: {d}"),
            // One message for every refusal: no oracle for consumer keys.
            AuthFailure::OAuth1Rejected(_) => "the OAuth 1.0 request was refused".into(),
            AuthFailure::Throttled(wait) => {
                format!("too many failed logins or login checks; retry in {wait} s")
            }
        }
    }

    /// Why, in words, for the log: the refusal and its detail, the OAuth
    /// 1.0 reason the caller is not told included (never a credential).
    pub fn log_reason(&self) -> String {
        match self {
            AuthFailure::Missing => "no credentials".into(),
            AuthFailure::InvalidToken(d) => format!("invalid access token: {d}"),
            AuthFailure::BadCredentials => "wrong user name or password".into(),
            AuthFailure::UnsupportedScheme => "unsupported Authorization scheme".into(),
            AuthFailure::Unavailable => "credentials cannot be checked right now".into(),
            AuthFailure::OAuth1Invalid(d) => format!("invalid OAuth 1.0 request: {d}"),
            AuthFailure::OAuth1Rejected(d) => format!("OAuth 1.0 request refused: {d}"),
            AuthFailure::Throttled(wait) => format!("throttled for {wait} s"),
        }
    }

    /// Seconds for `Retry-After`, for [`AuthFailure::Throttled`]. The
    /// response builders must send it with the 429.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            AuthFailure::Throttled(wait) => Some((*wait).max(1)),
            _ => None,
        }
    }

    /// The API's code for the refusal, in GraphQL and REST bodies alike.
    pub(crate) fn code(&self) -> Code {
        match self {
            AuthFailure::Unavailable => Code::ServiceUnavailable,
            AuthFailure::Throttled(_) => Code::TooManyRequests,
            AuthFailure::OAuth1Invalid(_) => Code::BadRequest,
            _ => Code::Unauthenticated,
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            AuthFailure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            AuthFailure::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
            AuthFailure::OAuth1Invalid(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
}

/// Middleware for GraphQL routes: 401 as a GraphQL error body. It wraps
/// only the routes that need credentials; what does not (the GraphiQL page,
/// WebSocket upgrades) is routed around it.
pub(crate) async fn graphql_layer(
    State(auth): State<Authenticator>,
    req: Request,
    next: Next,
) -> Response {
    let (mut req, result) = auth.authenticate_request(req).await;
    match result {
        Ok(p) => {
            let caller = Caller::of(&p);
            req.extensions_mut().insert(p);
            let mut resp = next.run(req).await;
            resp.extensions_mut().insert(caller);
            resp
        }
        Err(f) => {
            tracing::info!(reason = %f.log_reason(), "GraphQL request not authenticated");
            let body = json!({"errors": [f.code().error_json(&f.message())]});
            let mut resp = (f.status(), body.to_string()).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            h.insert(header::WWW_AUTHENTICATE, challenge(&f));
            if let Some(secs) = f.retry_after() {
                h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            resp
        }
    }
}

/// What REST requests need from this layer: authentication. Authorization
/// happens in the REST router, on the collection and relation it resolved
/// from the decoded path (`gatehouse-rest`'s `access.rs`).
#[derive(Clone, Debug)]
pub struct RestGuard {
    /// Who is calling.
    pub authn: Authenticator,
}

/// An RFC 9457 problem body with the `code` member every REST error has.
fn problem(f: &AuthFailure, challenge_value: HeaderValue) -> Response {
    let status = f.status();
    let title = status.canonical_reason().unwrap_or("Error");
    let body = json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": f.message(),
        "code": f.code().as_str(),
    });
    let mut resp = (status, body.to_string()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    h.insert(header::WWW_AUTHENTICATE, challenge_value);
    resp
}

/// Middleware for REST routes: authenticates (401 problem) and hands the
/// [`Principal`] to the router, which authorizes what it resolved.
pub async fn rest_layer(State(guard): State<RestGuard>, req: Request, next: Next) -> Response {
    let (mut req, result) = guard.authn.authenticate_request(req).await;
    let principal = match result {
        Ok(p) => p,
        Err(f) => {
            let mut resp = problem(&f, challenge(&f));
            if let Some(secs) = f.retry_after() {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            return resp;
        }
    };
    let caller = Caller::of(&principal);
    req.extensions_mut().insert(principal);
    let mut resp = next.run(req).await;
    resp.extensions_mut().insert(caller);
    resp
}
