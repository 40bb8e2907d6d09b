//! The HTTP face of the gatehouse OAuth 2.0 authorization server: token
//! endpoints, introspection, revocation, OpenID Connect userinfo, RFC 8414
//! metadata (also the OpenID Connect discovery document) and the JWKS, as
//! an axum [`Router`]. The logic lives in `gatehouse-auth`.
//!
//! The router has no base path of its own: the caller nests it where it
//! belongs, and tells [`OAuthConfig::public_url`] where that is so the
//! metadata document names absolute URLs. Serve it with
//! `into_make_service_with_connect_info::<SocketAddr>()`, behind
//! [`origin::layer`], so per-address limits see the client's address
//! (otherwise all peers share one bucket).
//!
//! Limits: every endpoint that authenticates a client
//! (token, introspection, revocation) charges the client's bucket
//! (`rate_per_second`, `rate_burst`) only once the client has
//! authenticated, so nobody else can use it up; failed client and user
//! authentications are throttled per address (and per account and address)
//! by the authorization server's [`gatehouse_auth::LoginThrottle`]. The
//! OAuth 1.0 endpoints do the same per consumer: its bucket once its
//! request verified, refused signatures per address.
//!
//! Browsers: token, revocation and userinfo requests whose `Origin` is neither in
//! [`OAuthConfig::allowed_origins`] nor the issuer's own are refused
//! ([`cors`]).
#![warn(missing_docs)]

mod authorize;
pub mod cors;
mod email;
mod error;
mod extract;
mod form;
mod limits;
mod metadata;
mod oauth1;
pub mod origin;
mod pages;
mod providers;
mod response;
mod upstream;
mod userinfo;

pub use authorize::{CSRF_COOKIE_PLAIN, CSRF_COOKIE_SECURE};

pub use cors::{AllowedOrigins, origin_of};
pub use origin::{ClientOrigin, ForwardedHeader, TrustedProxies, client_addr};
pub use upstream::{PROVIDER_MAX_BODY, PROVIDER_TIMEOUT, ProviderConfig, ProviderKind};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};

use gatehouse_auth::{AuthServer, Error, ExchangeRequest, Grant, TokenRequest, TokenResponse};

use crate::error::OAuthError;
use crate::extract::Authenticated;
use crate::form::Params;
use crate::limits::RateLimits;

/// HTTP-side settings of the OAuth endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// Absolute URL where the router is mounted (issuer + base path, no
    /// trailing slash), used for the endpoint URLs in the RFC 8414 metadata.
    pub public_url: String,
    /// Requests per second per authenticated client on the endpoints that
    /// authenticate clients, and per consumer (once its signature verified)
    /// on the OAuth 1.0 endpoints. (Failed authentications are throttled
    /// per address separately.)
    pub rate_per_second: u32,
    /// Burst allowed above the rate, with the same keys.
    pub rate_burst: u32,
    /// Largest form body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Browser origins (`[cors] allowed_origins`) whose token and
    /// revocation requests are served, beside the issuer's own origin;
    /// requests with any other `Origin` are refused with 403.
    pub allowed_origins: AllowedOrigins,
    /// Identity providers the sign-in page offers (`[[auth.providers]]`);
    /// the authorization server must know them too
    /// (`AuthServer::use_federation`).
    pub providers: Vec<ProviderConfig>,
}

impl OAuthConfig {
    /// The contract defaults (20/s, burst 40; 64 KiB bodies) for a router
    /// reachable at `public_url`. Failed logins are throttled by the
    /// authorization server (`gatehouse_auth::LoginThrottle`).
    pub fn new(public_url: impl Into<String>) -> Self {
        Self {
            public_url: public_url.into().trim_end_matches('/').to_string(),
            rate_per_second: 20,
            rate_burst: 40,
            max_body_bytes: 64 * 1024,
            allowed_origins: AllowedOrigins::default(),
            providers: Vec::new(),
        }
    }
}

struct Inner {
    server: Arc<AuthServer>,
    config: OAuthConfig,
    rates: RateLimits,
    /// The issuer's origin (for a loopback issuer also its other loopback
    /// host names, same port: GraphiQL signs in there too): its own pages
    /// (GraphiQL, the sign-in pages) may call the token endpoints whatever
    /// `allowed_origins` says.
    own_origin: Vec<String>,
    /// The identity providers' clients.
    upstreams: upstream::Upstreams,
}

/// Shared state of the OAuth routes: the authorization server (which holds
/// the store, clock, randomness and keys), the settings, and the limiters.
#[derive(Clone)]
pub struct OAuthState {
    inner: Arc<Inner>,
}

impl fmt::Debug for OAuthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthState")
            .field("server", &self.inner.server)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl OAuthState {
    /// State for [`router`].
    pub fn new(server: Arc<AuthServer>, config: OAuthConfig) -> Self {
        let rates = RateLimits::new(config.rate_per_second, config.rate_burst);
        let issuer = &server.config().issuer;
        let own_origin = std::iter::once(issuer.clone())
            .chain(gatehouse_auth::loopback_aliases(issuer))
            .filter_map(|uri| origin_of(&uri))
            .collect();
        let upstreams = upstream::Upstreams::new(&config.providers);
        Self {
            inner: Arc::new(Inner {
                server,
                config,
                rates,
                own_origin,
                upstreams,
            }),
        }
    }

    /// The authorization server behind the routes.
    pub fn server(&self) -> &Arc<AuthServer> {
        &self.inner.server
    }

    /// Whether the sign-in page offers self-service sign-up.
    pub(crate) fn sign_up_enabled(&self) -> bool {
        self.inner.server.config().sign_up
    }
}

/// Which token path a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// `/oauth/token` and `/oauth2/token`: every grant.
    Token,
    /// `/oauth/access_token`: password and client credentials, never a refresh token.
    AccessToken,
    /// `/oauth/refresh_token`: refresh only; `grant_type` may be omitted.
    RefreshToken,
}

impl Endpoint {
    /// Whether a request for `grant` is answered here.
    fn serves(self, grant: Grant) -> bool {
        match self {
            Endpoint::Token => true,
            Endpoint::AccessToken => matches!(grant, Grant::Password | Grant::ClientCredentials),
            Endpoint::RefreshToken => grant == Grant::RefreshToken,
        }
    }
}

/// The OAuth routes: `POST /oauth/token`, `/oauth2/token`,
/// `/oauth/access_token`, `/oauth/refresh_token`, `/oauth/introspect`,
/// `/oauth/revoke`; `GET|POST /oauth/userinfo` (OpenID Connect);
/// `GET /.well-known/oauth-authorization-server`,
/// `/.well-known/openid-configuration` (one document) and
/// `/.well-known/jwks.json`; `GET|POST /oauth/authorize` (the sign-in pages
/// of the authorization code flow, and with `oauth_token` the OAuth 1.0
/// approval); OAuth 1.0: `GET|POST /oauth/requestToken` and the OAuth 1.0
/// exchange on `/oauth/access_token`.
///
/// Token paths, revocation and userinfo refuse requests from browser
/// origins that are not allowed ([`cors`]).
pub fn router(state: OAuthState) -> Router {
    let same_origin =
        axum::middleware::from_fn_with_state(state.clone(), cors::refuse_foreign_origin);
    let token = |e: Endpoint| {
        post(move |s: State<OAuthState>, r: Request| token_endpoint(s, r, e))
            .fallback(|| async { OAuthError::MethodNotAllowed("POST") })
            .layer(same_origin.clone())
    };
    Router::new()
        .route("/oauth/token", token(Endpoint::Token))
        .route("/oauth2/token", token(Endpoint::Token))
        // OAuth 1.0 (RFC 5849 §2.3) when the request carries its
        // parameters, the OAuth 2.0 endpoint otherwise.
        .route(
            "/oauth/access_token",
            any(oauth1::access_token).layer(same_origin.clone()),
        )
        .route("/oauth/requestToken", any(oauth1::request_token))
        .route(
            "/oauth/authorize",
            get(authorize::get)
                .post(authorize::post)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") }),
        )
        .route(
            "/auth/forgot",
            get(email::forgot_get)
                .post(email::forgot_post)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") }),
        )
        .route(
            "/auth/reset",
            get(email::reset_get)
                .post(email::reset_post)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") }),
        )
        .route(
            crate::email::VERIFY_PATH,
            get(email::verify_get)
                .post(email::verify_post)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") }),
        )
        .route(
            "/auth/verify/resend",
            post(email::resend_post).fallback(|| async { OAuthError::MethodNotAllowed("POST") }),
        )
        .route(
            "/auth/providers/{id}/start",
            post(providers::start).fallback(|| async { OAuthError::MethodNotAllowed("POST") }),
        )
        .route(
            "/auth/providers/{id}/callback",
            get(providers::callback)
                .post(providers::callback)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") }),
        )
        .route(
            "/auth/providers/{id}/link",
            post(providers::link).fallback(|| async { OAuthError::MethodNotAllowed("POST") }),
        )
        .route(
            "/auth/identities",
            get(providers::identities)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, HEAD") }),
        )
        .route(
            "/auth/identities/{id}",
            delete(providers::unlink).fallback(|| async { OAuthError::MethodNotAllowed("DELETE") }),
        )
        .route(
            "/auth/email",
            post(email::change_post)
                .fallback(|| async { OAuthError::MethodNotAllowed("POST") })
                .layer(same_origin.clone()),
        )
        .route(
            crate::email::CHANGE_PATH,
            get(email::change_confirm_get)
                .post(email::change_confirm_post)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") })
                .layer(same_origin.clone()),
        )
        .route("/oauth/refresh_token", token(Endpoint::RefreshToken))
        .route(
            "/oauth/introspect",
            post(introspect).fallback(|| async { OAuthError::MethodNotAllowed("POST") }),
        )
        .route(
            "/oauth/revoke",
            post(revoke)
                .fallback(|| async { OAuthError::MethodNotAllowed("POST") })
                .layer(same_origin.clone()),
        )
        .route(
            "/oauth/userinfo",
            get(userinfo::userinfo)
                .post(userinfo::userinfo)
                .fallback(|| async { OAuthError::MethodNotAllowed("GET, POST") })
                .layer(same_origin),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata::serve).fallback(|| async { OAuthError::MethodNotAllowed("GET, HEAD") }),
        )
        .route(
            "/.well-known/openid-configuration",
            get(metadata::serve).fallback(|| async { OAuthError::MethodNotAllowed("GET, HEAD") }),
        )
        .route(
            "/.well-known/jwks.json",
            get(jwks).fallback(|| async { OAuthError::MethodNotAllowed("GET, HEAD") }),
        )
        .with_state(state)
}

/// Runs [`AuthServer::purge_expired`] (which also reloads keys rotated by
/// other instances) every `every`, until `shutdown` is cancelled (a purge
/// under way finishes first).
pub fn spawn_maintenance(
    server: Arc<AuthServer>,
    every: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
            match server.purge_expired().await {
                Ok(n) if n > 0 => tracing::debug!(purged = n, "expired token records purged"),
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "purging expired token records failed"
                ),
            }
        }
    })
}

/// Counts the outcome of a token request: tokens issued by grant type,
/// refusals by error code (see `docs/operations.md` for the metric names).
async fn token_endpoint(
    State(state): State<OAuthState>,
    req: Request,
    endpoint: Endpoint,
) -> Response {
    match token(&state, req, endpoint).await {
        Ok((grant, tokens)) => {
            metrics::counter!("gatehouse_oauth_tokens_issued_total", "grant_type" => grant)
                .increment(1);
            response::no_store((StatusCode::OK, axum::Json(tokens)).into_response())
        }
        Err(e) => {
            metrics::counter!("gatehouse_oauth_token_refusals_total", "error" => e.code())
                .increment(1);
            e.into_response()
        }
    }
}

/// A token request: the tokens and the grant that issued them (its
/// `grant_type`, never caller text, so it can label a metric).
async fn token(
    state: &OAuthState,
    req: Request,
    endpoint: Endpoint,
) -> Result<(&'static str, TokenResponse), OAuthError> {
    let Authenticated {
        client,
        params,
        peer,
    } = Authenticated::from_request(req, state).await?;
    let grant = match (params.get("grant_type"), endpoint) {
        (Some(g), _) => Grant::parse(g),
        // grant_type may be omitted on /oauth/refresh_token only.
        (None, Endpoint::RefreshToken) => Some(Grant::RefreshToken),
        (None, _) => {
            return Err(OAuthError::invalid_request(
                "the `grant_type` parameter is required",
            ));
        }
    };
    let Some(grant) = grant.filter(|g| endpoint.serves(*g)) else {
        return Err(Error::UnsupportedGrantType(
            "this grant type is not supported at this endpoint".into(),
        )
        .into());
    };
    let request = token_request(grant, &params);
    let allow_refresh = endpoint != Endpoint::AccessToken;
    let grant = grant.as_str();
    // Failed logins are throttled per (user, address) and per address
    // inside the password grant (`AuthServer::check_user_password`).
    match state
        .inner
        .server
        .token(&client, &request, allow_refresh, Some(peer))
        .await
    {
        Ok(tokens) => {
            tracing::debug!(client_id = %client.client_id, grant_type = grant, "token issued");
            Ok((grant, tokens))
        }
        Err(e) => {
            tracing::debug!(client_id = %client.client_id, grant_type = grant, error = e.code(), "token request refused");
            Err(e.into())
        }
    }
}

/// The parameters `grant` reads from a token request's form, parsed once
/// here.
fn token_request(grant: Grant, params: &Params) -> TokenRequest<'_> {
    match grant {
        Grant::AuthorizationCode => TokenRequest::AuthorizationCode {
            code: params.get("code"),
            redirect_uri: params.get("redirect_uri"),
            code_verifier: params.get("code_verifier"),
        },
        Grant::Password => TokenRequest::Password {
            username: params.get("username"),
            password: params.get("password"),
            scope: params.get("scope"),
        },
        Grant::ClientCredentials => TokenRequest::ClientCredentials {
            scope: params.get("scope"),
        },
        Grant::RefreshToken => TokenRequest::RefreshToken {
            refresh_token: params.get("refresh_token"),
            scope: params.get("scope"),
        },
        Grant::TokenExchange => TokenRequest::TokenExchange(ExchangeRequest {
            subject_token: params.owned("subject_token"),
            subject_token_type: params.owned("subject_token_type"),
            actor_token: params.owned("actor_token"),
            actor_token_type: params.owned("actor_token_type"),
            scope: params.owned("scope"),
            audience: params.all("audience"),
            resource: params.all("resource"),
            requested_token_type: params.owned("requested_token_type"),
        }),
    }
}

/// A parameter the request must carry (RFC 6749 §3.1: empty counts as omitted).
fn required<'p>(params: &'p Params, name: &'static str) -> Result<&'p str, OAuthError> {
    params.get(name).ok_or_else(|| {
        Error::InvalidRequest(format!("the `{name}` parameter is required").into()).into()
    })
}

/// RFC 7662 §2.1: client-authenticated (the same limits as the token
/// endpoints); `token` required.
async fn introspect(
    State(state): State<OAuthState>,
    Authenticated { client, params, .. }: Authenticated,
) -> Result<Response, OAuthError> {
    // Introspection is for resource servers, which can keep a secret.
    if client.is_public() {
        return Err(Error::InvalidClient("a public client cannot use introspection".into()).into());
    }
    let token = required(&params, "token")?;
    let answer = state.inner.server.introspect(&client, token).await?;
    Ok(response::no_store(
        (StatusCode::OK, axum::Json(answer)).into_response(),
    ))
}

/// RFC 7009 §2.1: client-authenticated (the same limits as the token
/// endpoints); `token` required; 200 with an empty body whether or not the
/// token was known (§2.2).
async fn revoke(
    State(state): State<OAuthState>,
    Authenticated { client, params, .. }: Authenticated,
) -> Result<Response, OAuthError> {
    let token = required(&params, "token")?;
    state.inner.server.revoke(&client, token).await?;
    Ok(response::no_store(
        (StatusCode::OK, Body::empty()).into_response(),
    ))
}

/// The public signing keys (RFC 7517 §5). Short caching: a rotated key must
/// show up soon (resource servers also refetch on an unknown `kid`).
async fn jwks(State(state): State<OAuthState>) -> Response {
    let mut resp = axum::Json(state.inner.server.jwks()).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which grants each token path answers: every grant on `/oauth/token`,
    /// never a refresh token from `/oauth/access_token`, refresh only on
    /// `/oauth/refresh_token`.
    #[test]
    fn each_token_path_serves_its_grants() {
        let served = |e: Endpoint| -> Vec<&str> {
            Grant::ALL
                .into_iter()
                .filter(|g| e.serves(*g))
                .map(Grant::as_str)
                .collect()
        };
        assert_eq!(
            served(Endpoint::Token),
            Grant::ALL.map(Grant::as_str).to_vec()
        );
        assert_eq!(
            served(Endpoint::AccessToken),
            ["password", "client_credentials"]
        );
        assert_eq!(served(Endpoint::RefreshToken), ["refresh_token"]);
    }

    /// The grant's own parameters, and nothing of its secrets in `Debug`.
    #[test]
    fn a_token_request_reads_its_grants_parameters() {
        let params = form::parse_form(
            b"grant_type=password&username=alice&password=hunter2&scope=read&code=c",
        )
        .unwrap_or_else(|_| panic!("a valid form"));
        let req = token_request(Grant::Password, &params);
        assert!(matches!(
            req,
            TokenRequest::Password {
                username: Some("alice"),
                password: Some("hunter2"),
                scope: Some("read"),
            }
        ));
        assert_eq!(format!("{req:?}"), "TokenRequest(password)");
        let req = token_request(Grant::AuthorizationCode, &params);
        assert!(matches!(
            req,
            TokenRequest::AuthorizationCode {
                code: Some("c"),
                redirect_uri: None,
                code_verifier: None,
            }
        ));
    }
}
