//! The one authentication layer in front of `/graphql` and `/v1`: Bearer
//! access tokens (RFC 6750), HTTP Basic with a user's password (re-checked on
//! every request), or anonymous reads when configured. The [`Principal`] it
//! finds goes into the request extensions; authorization (scopes) happens
//! per field in GraphQL and per route in REST.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use gatehouse_auth::{AuthScheme, AuthServer, Principal};
use serde_json::json;
use sha2::{Digest, Sha256};

/// How long a verified Basic credential is trusted without argon2.
const BASIC_CACHE_TTL: Duration = Duration::from_secs(60);
/// Entries kept at most; the cache is cleared when full.
const BASIC_CACHE_MAX: usize = 10_000;

/// Authenticates resource requests.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    server: Arc<AuthServer>,
    anonymous_read: bool,
    /// sha256(username NUL password) -> (stored hash it verified against, when).
    basic_cache: Mutex<HashMap<[u8; 32], (String, Instant)>>,
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
}

impl Authenticator {
    /// An authenticator over `server`'s tokens and users.
    pub fn new(server: Arc<AuthServer>, anonymous_read: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                server,
                anonymous_read,
                basic_cache: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Whether requests without credentials may read.
    pub fn anonymous_read(&self) -> bool {
        self.inner.anonymous_read
    }

    /// The authorization server's current time (unix seconds): token expiry
    /// is measured on this clock, which tests can move.
    pub fn now(&self) -> i64 {
        self.inner.server.now()
    }

    /// The principal of a request with these headers.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
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
            self.basic(rest).await
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
        match server.validate_access_token(token, server.now()).await {
            Ok(claims) => Ok(Principal {
                subject: claims.sub.clone(),
                client_id: Some(claims.client_id.clone()),
                scopes: claims.scopes().map(str::to_string).collect(),
                scheme: AuthScheme::Bearer,
                expires_at: Some(claims.exp),
                token_id: Some(claims.jti.clone()),
            }),
            Err(gatehouse_auth::Error::InvalidToken(d)) => {
                Err(AuthFailure::InvalidToken(d.to_string()))
            }
            Err(e) => {
                tracing::error!(
                    cause = e.internal_cause().unwrap_or(""),
                    "token validation failed"
                );
                Err(AuthFailure::Unavailable)
            }
        }
    }

    async fn basic(&self, encoded: &str) -> Result<Principal, AuthFailure> {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(AuthFailure::BadCredentials)?;
        let (username, password) = decoded.split_once(':').ok_or(AuthFailure::BadCredentials)?;
        let user = self
            .inner
            .server
            .repo()
            .find_user(username)
            .await
            .map_err(|_| AuthFailure::Unavailable)?;
        let Some(user) = user else {
            // Same cost as a wrong password, so names cannot be probed by timing.
            let password = password.to_string();
            let _ = tokio::task::spawn_blocking(move || {
                gatehouse_auth::verify_password(&password, gatehouse_auth::DUMMY_PASSWORD_HASH)
            })
            .await;
            return Err(AuthFailure::BadCredentials);
        };
        let key: [u8; 32] = Sha256::new()
            .chain_update(username.as_bytes())
            .chain_update([0u8])
            .chain_update(password.as_bytes())
            .finalize()
            .into();
        let cached = self.inner.basic_cache.lock().ok().is_some_and(|c| {
            // The entry only counts while the stored hash is the one it was
            // verified against: a password change drops it at once.
            c.get(&key).is_some_and(|(hash, at)| {
                *hash == user.password_hash && at.elapsed() < BASIC_CACHE_TTL
            })
        });
        if !cached {
            let stored = user.password_hash.clone();
            let pw = password.to_string();
            let ok =
                tokio::task::spawn_blocking(move || gatehouse_auth::verify_password(&pw, &stored))
                    .await
                    .unwrap_or(false);
            if !ok {
                return Err(AuthFailure::BadCredentials);
            }
            if let Ok(mut c) = self.inner.basic_cache.lock() {
                if c.len() >= BASIC_CACHE_MAX {
                    c.clear();
                }
                c.insert(key, (user.password_hash.clone(), Instant::now()));
            }
        }
        Ok(Principal {
            subject: user.username.clone(),
            client_id: None,
            scopes: user.scopes.iter().cloned().collect(),
            scheme: AuthScheme::Basic,
            expires_at: None,
            token_id: None,
        })
    }
}

/// The `WWW-Authenticate` challenge for a failure (RFC 6750 §3).
pub fn challenge(failure: &AuthFailure) -> HeaderValue {
    let v = match failure {
        // RFC 6750 §3.1: no error code when the request had no credentials.
        AuthFailure::Missing | AuthFailure::UnsupportedScheme => {
            "Bearer realm=\"gatehouse\"".to_string()
        }
        AuthFailure::InvalidToken(d) => format!(
            "Bearer realm=\"gatehouse\", error=\"invalid_token\", error_description=\"{}\"",
            d.replace(['"', '\\'], "'")
        ),
        AuthFailure::BadCredentials => "Basic realm=\"gatehouse\"".to_string(),
        AuthFailure::Unavailable => "Bearer realm=\"gatehouse\"".to_string(),
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
                "unsupported Authorization scheme; use Bearer or Basic".into()
            }
            AuthFailure::Unavailable => {
                "credentials cannot be checked right now; retry later".into()
            }
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            AuthFailure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
}

/// Middleware for GraphQL routes: 401 as a GraphQL error body. A browser
/// navigating to the GraphiQL page needs no credentials.
pub(crate) async fn graphql_layer(
    State(auth): State<Authenticator>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.method() == axum::http::Method::GET
        && (crate::graphql::is_browser_navigation(req.headers())
            || crate::ws::is_upgrade(req.headers()))
    {
        // A WebSocket authenticates with `connection_init` (or these headers,
        // checked there), and a refusal is a 4403 close, not a 401.
        return next.run(req).await;
    }
    match auth.authenticate(req.headers()).await {
        Ok(p) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        Err(f) => {
            tracing::info!(reason = ?std::mem::discriminant(&f), "GraphQL request not authenticated");
            let body = json!({"errors": [{"message": f.message(), "extensions": {"code": "UNAUTHENTICATED"}}]});
            let mut resp = (f.status(), body.to_string()).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            h.insert(header::WWW_AUTHENTICATE, challenge(&f));
            resp
        }
    }
}

/// What REST requests need: authentication, then the collection's scope.
#[derive(Clone, Debug)]
pub struct RestGuard {
    /// Who is calling.
    pub authn: Authenticator,
    /// Which scope each collection needs.
    pub model: std::sync::Arc<gatehouse_schema::Model>,
}

fn problem(status: StatusCode, detail: &str, challenge_value: HeaderValue) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body =
        json!({"type": "about:blank", "title": title, "status": status.as_u16(), "detail": detail});
    let mut resp = (status, body.to_string()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    h.insert(header::WWW_AUTHENTICATE, challenge_value);
    resp
}

/// The scope a REST request needs, from its method and `/v1/...` path:
/// reads need the read scope of every collection on the path, writes the
/// write scope of the collection written. `None` for paths the router will
/// refuse anyway (unknown version or collection).
pub fn rest_scope(
    model: &gatehouse_schema::Model,
    method: &axum::http::Method,
    path: &str,
) -> Option<(String, bool)> {
    let mut segs = path.trim_matches('/').split('/');
    let version = segs.next()?;
    if version != "v1" {
        return None;
    }
    let is_read = matches!(
        *method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    let Some(collection) = segs.next() else {
        return Some((gatehouse_schema::DEFAULT_READ_SCOPE.to_string(), true));
    };
    if collection == "openapi.json" {
        return Some((gatehouse_schema::DEFAULT_READ_SCOPE.to_string(), true));
    }
    let parent = model.entities.iter().find(|e| e.rest_path == collection)?;
    let target = match (segs.next(), segs.next()) {
        (Some(_id), Some(child)) => {
            let field = parent.to_many_fields().find(|f| {
                matches!(&f.kind, gatehouse_schema::FieldKind::ToMany { rest_segment, .. } if rest_segment == child)
            })?;
            match &field.kind {
                gatehouse_schema::FieldKind::ToMany { target, .. } => model.entity(target)?,
                _ => return None,
            }
        }
        _ => parent,
    };
    Some(if is_read {
        (target.read_scope().to_string(), true)
    } else {
        (target.write_scope().to_string(), false)
    })
}

/// Middleware for REST routes: authenticates (401 problem), then checks the
/// collection's scope (403 problem with `insufficient_scope`).
pub async fn rest_layer(State(guard): State<RestGuard>, mut req: Request, next: Next) -> Response {
    let principal = match guard.authn.authenticate(req.headers()).await {
        Ok(p) => p,
        Err(f) => return problem(f.status(), &f.message(), challenge(&f)),
    };
    if let Some((scope, is_read)) = rest_scope(&guard.model, req.method(), req.uri().path()) {
        // Nested under a base path, the router sees the path without it;
        // `rest_scope` is given the path as routed here.
        if !principal.allows(&scope, is_read) {
            if principal.is_anonymous() {
                let f = AuthFailure::Missing;
                return problem(StatusCode::UNAUTHORIZED, &f.message(), challenge(&f));
            }
            let value = HeaderValue::from_str(&format!(
                "Bearer realm=\"gatehouse\", error=\"insufficient_scope\", scope=\"{scope}\""
            ))
            .unwrap_or_else(|_| {
                HeaderValue::from_static("Bearer realm=\"gatehouse\", error=\"insufficient_scope\"")
            });
            return problem(
                StatusCode::FORBIDDEN,
                &format!("this request needs the scope `{scope}`"),
                value,
            );
        }
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}
