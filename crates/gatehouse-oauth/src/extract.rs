//! axum extractors of the OAuth endpoints: the caller's address, the form
//! body (RFC 6749 §3.2 rules) and the authenticated client (RFC 6749
//! §2.3.1), each refusing with an [`OAuthError`].

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use gatehouse_auth::{Account, ClientRecord, Error};

use crate::form::{self, Basic, Params};
use crate::{OAuthError, OAuthState, client_addr};

/// The caller's address ([`client_addr`]); the unspecified address when
/// unknown (a request built in-process), which then shares one bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) IpAddr);

impl Peer {
    pub(crate) fn of(extensions: &axum::http::Extensions) -> Self {
        Self(client_addr(extensions).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
    }
}

impl<S: Sync> FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of(&parts.extensions))
    }
}

/// An `application/x-www-form-urlencoded` body of at most
/// `max_body_bytes`, parsed with the RFC 6749 §3.2 rules (no repeated
/// parameters but the RFC 8693 ones; empty values count as omitted).
#[derive(Debug)]
pub(crate) struct Form(pub(crate) Params);

impl FromRequest<OAuthState> for Form {
    type Rejection = OAuthError;

    async fn from_request(req: Request, state: &OAuthState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        Self::read(state, &parts.headers, body).await
    }
}

impl Form {
    async fn read(state: &OAuthState, headers: &HeaderMap, body: Body) -> Result<Self, OAuthError> {
        if !form::is_form(headers) {
            return Err(OAuthError::invalid_request(
                "the body must be application/x-www-form-urlencoded",
            ));
        }
        let body = axum::body::to_bytes(body, state.inner.config.max_body_bytes)
            .await
            .map_err(|_| {
                OAuthError::invalid_request("the request body is too large or unreadable")
            })?;
        Ok(Self(form::parse_form(&body)?))
    }
}

/// A form request from an authenticated client: what the token,
/// introspection and revocation endpoints start from. The form is read
/// (and refused) before the client is authenticated.
#[derive(Debug)]
pub(crate) struct Authenticated {
    pub(crate) client: ClientRecord,
    pub(crate) params: Params,
    pub(crate) peer: IpAddr,
}

impl FromRequest<OAuthState> for Authenticated {
    type Rejection = OAuthError;

    async fn from_request(req: Request, state: &OAuthState) -> Result<Self, Self::Rejection> {
        let Peer(peer) = Peer::of(req.extensions());
        let (parts, body) = req.into_parts();
        let Form(params) = Form::read(state, &parts.headers, body).await?;
        let client = authenticate(state, &parts.headers, &params, peer).await?;
        Ok(Self {
            client,
            params,
            peer,
        })
    }
}

/// RFC 6749 §2.3.1 client authentication with HTTP Basic. Credentials in
/// the body are refused: one method per request (RFC 6749 §2.3).
///
/// Failed authentications are throttled per address and per (client,
/// address) before the secret is looked at; the client's rate bucket is
/// charged only after it authenticated, so strangers cannot
/// use it up.
async fn authenticate(
    state: &OAuthState,
    headers: &HeaderMap,
    params: &Params,
    addr: IpAddr,
) -> Result<ClientRecord, OAuthError> {
    if params.get("client_secret").is_some() {
        return Err(OAuthError::invalid_request(
            "send client credentials with HTTP Basic, not in the body",
        ));
    }
    let server = &state.inner.server;
    let throttle = server.login_throttle();
    let now = server.now();
    let from = Some(addr);
    let creds = match form::basic_credentials(headers) {
        Basic::Present(c) => c,
        missing_or_malformed => {
            throttle
                .check_address(from, now)
                .map_err(OAuthError::TooManyRequests)?;
            throttle.failed_address(from, now);
            let what = if matches!(missing_or_malformed, Basic::Missing) {
                "client authentication with HTTP Basic is required"
            } else {
                "malformed HTTP Basic credentials"
            };
            return Err(Error::InvalidClient(what.into()).into());
        }
    };
    if let Some(id) = params.get("client_id")
        && id != creds.client_id
    {
        return Err(OAuthError::invalid_request(
            "`client_id` differs from the authenticated client",
        ));
    }
    let account = Account::Client(&creds.client_id);
    throttle
        .check(account, from, now)
        .map_err(OAuthError::TooManyRequests)?;
    let result = match server
        .authenticate_client(&creds.client_id, &creds.secret)
        .await
    {
        // Clients that do not form-encode (curl -u, many libraries): try the
        // secret exactly as sent.
        Err(Error::InvalidClient(_)) if creds.raw_secret != creds.secret => {
            server
                .authenticate_client(&creds.client_id, &creds.raw_secret)
                .await
        }
        other => other,
    };
    match result {
        Ok(c) => {
            throttle.succeeded(account, from);
            state
                .inner
                .rates
                .check_client(&c.client_id)
                .map_err(OAuthError::TooManyRequests)?;
            Ok(c)
        }
        Err(e) => {
            if matches!(e, Error::InvalidClient(_)) {
                tracing::info!(%addr, "failed client authentication");
                throttle.failed(account, from, now);
            }
            Err(e.into())
        }
    }
}
