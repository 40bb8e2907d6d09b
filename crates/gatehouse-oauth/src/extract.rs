//! axum extractors of the OAuth endpoints: the caller's address, the form
//! body (RFC 6749 §3.2 rules) and the authenticated client (RFC 6749
//! §2.3.1), each refusing with an [`OAuthError`].

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use gatehouse_auth::{ClientProof, ClientRecord, Error};

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
    pub(crate) async fn read(
        state: &OAuthState,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Self, OAuthError> {
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

/// RFC 6749 §2.3.1 client authentication: HTTP Basic
/// (`client_secret_basic`), or `client_id` and `client_secret` in the body
/// (`client_secret_post`), never both (RFC 6749 §2.3: one method per
/// request); or, for a public client, `client_id` alone in the body
/// (RFC 6749 §2.1, `none`).
///
/// Failed authentications are throttled per address and per (client,
/// address) before the secret is looked at
/// ([`gatehouse_auth::AuthServer::authenticate_client_from`], the one
/// rule for every method); the client's rate bucket is charged only after
/// it authenticated, so strangers cannot use it up.
async fn authenticate(
    state: &OAuthState,
    headers: &HeaderMap,
    params: &Params,
    addr: IpAddr,
) -> Result<ClientRecord, OAuthError> {
    let server = &state.inner.server;
    let from = Some(addr);
    // No client to charge: the address alone.
    let refuse = |what: &'static str| -> Result<ClientRecord, OAuthError> {
        let throttle = server.login_throttle();
        let now = server.now();
        throttle
            .check_address(from, now)
            .map_err(OAuthError::TooManyRequests)?;
        throttle.failed_address(from, now);
        Err(Error::InvalidClient(what.into()).into())
    };
    let basic;
    let (client_id, proof) = match (form::basic_credentials(headers), params.get("client_id")) {
        (Basic::Present(_), _) if params.get("client_secret").is_some() => {
            return Err(OAuthError::invalid_request(
                "send client credentials either with HTTP Basic or in the body, not both",
            ));
        }
        (Basic::Present(c), body_id) => {
            if body_id.is_some_and(|id| id != c.client_id) {
                return Err(OAuthError::invalid_request(
                    "`client_id` differs from the authenticated client",
                ));
            }
            basic = c;
            (
                basic.client_id.as_str(),
                ClientProof::Secret {
                    secret: &basic.secret,
                    as_sent: &basic.raw_secret,
                },
            )
        }
        (Basic::Malformed, _) => return refuse("malformed HTTP Basic credentials"),
        (Basic::Missing, Some(id)) => match params.get("client_secret") {
            Some(secret) => (
                id,
                ClientProof::Secret {
                    secret,
                    as_sent: secret,
                },
            ),
            None => (id, ClientProof::Public),
        },
        (Basic::Missing, None) => {
            return refuse(
                "client authentication is required (HTTP Basic, or client_id in the body)",
            );
        }
    };
    let client = server
        .authenticate_client_from(client_id, proof, from)
        .await?;
    state
        .inner
        .rates
        .check_client(&client.client_id)
        .map_err(OAuthError::TooManyRequests)?;
    Ok(client)
}
