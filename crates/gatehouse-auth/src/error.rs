//! The one error type of this crate.
//!
//! The OAuth variants mirror the error codes of RFC 6749 §5.2, RFC 6750 §3.1,
//! RFC 7009 §2.2.1 and RFC 8693 §2.2.2: their `Display` is the wire string, and
//! [`Error::description`] is a message that is safe to send to the client.
//! Internal causes (store failures, crypto failures) are kept for the log and
//! never shown.

use std::borrow::Cow;

/// A safe, human-readable description attached to an error.
pub type Description = Cow<'static, str>;

/// Everything that can go wrong in authorization logic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// RFC 6749 §5.2: a required parameter is missing, repeated, malformed, or
    /// (RFC 8693 §2.2.2) the subject or actor token is invalid.
    #[error("invalid_request")]
    InvalidRequest(Description),
    /// RFC 6749 §5.2: client authentication failed (unknown client, wrong
    /// secret, no credentials). The HTTP layer answers 401.
    #[error("invalid_client")]
    InvalidClient(Description),
    /// RFC 6749 §5.2: the resource owner credentials or the refresh token are
    /// invalid, expired, revoked, or were issued to another client.
    #[error("invalid_grant")]
    InvalidGrant(Description),
    /// RFC 6749 §5.2: the authenticated client may not use this grant type
    /// (or, for token exchange, may not exchange at all).
    #[error("unauthorized_client")]
    UnauthorizedClient(Description),
    /// RFC 6749 §5.2: the grant type is unknown or not served at this endpoint.
    #[error("unsupported_grant_type")]
    UnsupportedGrantType(Description),
    /// RFC 6749 §5.2: the requested scope is invalid, unknown, or exceeds what
    /// may be granted.
    #[error("invalid_scope")]
    InvalidScope(Description),
    /// RFC 8693 §2.2.2: the requested audience or resource is not one this
    /// client may obtain a token for.
    #[error("invalid_target")]
    InvalidTarget(Description),
    /// RFC 7009 §2.2.1: the server cannot revoke this kind of token.
    #[error("unsupported_token_type")]
    UnsupportedTokenType(Description),
    /// RFC 6750 §3.1: an access token presented to a resource server is
    /// malformed, expired, revoked, or not meant for it.
    #[error("invalid_token")]
    InvalidToken(Description),
    /// RFC 6750 §3.1: the access token is valid but lacks what the request
    /// needs (userinfo: the `openid` scope, and a user to describe). The
    /// HTTP layer answers 403 with a Bearer challenge.
    #[error("insufficient_scope")]
    InsufficientScope(Description),
    /// An administrative operation named a client or user that does not exist.
    #[error("not_found")]
    NotFound(Description),
    /// An administrative operation would create a duplicate.
    #[error("conflict")]
    Conflict(Description),
    /// An administrative operation got a malformed value (grant, scope, name).
    #[error("invalid_input")]
    InvalidInput(Description),
    /// Too many failed logins for this account from this address (or from
    /// this address), or too many password checks under way: retry after
    /// the given number of seconds. The HTTP layer answers 429 with
    /// `Retry-After` (RFC 6585 §4).
    #[error("too_many_requests")]
    TooManyRequests(Description, u64),
    /// A failure inside the server (store, crypto). The string is the internal
    /// cause: log it, never send it.
    #[error("server_error")]
    Server(String),
    /// The store is unreachable or did not answer within the statement
    /// timeout: the request may succeed later. The token endpoint answers
    /// 503 `temporarily_unavailable` (the RFC 6749 §4.1.2.1 code, used for
    /// the token endpoint as common practice) with `Retry-After`. The
    /// string is the internal cause: log it, never send it.
    #[error("temporarily_unavailable")]
    Unavailable(String),
}

impl Error {
    /// The machine-readable code; for OAuth variants the RFC wire string.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "invalid_request",
            Error::InvalidClient(_) => "invalid_client",
            Error::InvalidGrant(_) => "invalid_grant",
            Error::UnauthorizedClient(_) => "unauthorized_client",
            Error::UnsupportedGrantType(_) => "unsupported_grant_type",
            Error::InvalidScope(_) => "invalid_scope",
            Error::InvalidTarget(_) => "invalid_target",
            Error::UnsupportedTokenType(_) => "unsupported_token_type",
            Error::InvalidToken(_) => "invalid_token",
            Error::InsufficientScope(_) => "insufficient_scope",
            Error::NotFound(_) => "not_found",
            Error::Conflict(_) => "conflict",
            Error::InvalidInput(_) => "invalid_input",
            Error::TooManyRequests(..) => "too_many_requests",
            Error::Server(_) => "server_error",
            Error::Unavailable(_) => "temporarily_unavailable",
        }
    }

    /// A description that is safe to show to the caller (never a secret,
    /// never an internal cause).
    pub fn description(&self) -> &str {
        match self {
            Error::InvalidRequest(d)
            | Error::InvalidClient(d)
            | Error::InvalidGrant(d)
            | Error::UnauthorizedClient(d)
            | Error::UnsupportedGrantType(d)
            | Error::InvalidScope(d)
            | Error::InvalidTarget(d)
            | Error::UnsupportedTokenType(d)
            | Error::InvalidToken(d)
            | Error::InsufficientScope(d)
            | Error::NotFound(d)
            | Error::Conflict(d)
            | Error::InvalidInput(d)
            | Error::TooManyRequests(d, _) => d,
            Error::Server(_) => "the server could not complete the request",
            Error::Unavailable(_) => {
                "the server cannot complete the request right now; retry later"
            }
        }
    }

    /// Seconds to wait before retrying, for [`Error::TooManyRequests`].
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Error::TooManyRequests(_, secs) => Some((*secs).max(1)),
            _ => None,
        }
    }

    /// The internal cause of a [`Error::Server`], for logs.
    pub fn internal_cause(&self) -> Option<&str> {
        match self {
            Error::Server(cause) | Error::Unavailable(cause) => Some(cause),
            _ => None,
        }
    }

    pub(crate) fn invalid_request(d: impl Into<Description>) -> Self {
        Error::InvalidRequest(d.into())
    }
    pub(crate) fn invalid_grant(d: impl Into<Description>) -> Self {
        Error::InvalidGrant(d.into())
    }
    pub(crate) fn invalid_scope(d: impl Into<Description>) -> Self {
        Error::InvalidScope(d.into())
    }
    pub(crate) fn invalid_token(d: impl Into<Description>) -> Self {
        Error::InvalidToken(d.into())
    }
    pub(crate) fn server(cause: impl Into<String>) -> Self {
        Error::Server(cause.into())
    }
}

/// A failure of an [`crate::AuthRepo`] implementation (connection lost,
/// constraint violated, ...). The message is internal: it is logged, never
/// shown to a client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("auth store: {message}")]
pub struct RepoError {
    /// What went wrong, for logs.
    pub message: String,
    /// The store is unreachable or timed out: retrying later may succeed
    /// ([`Error::Unavailable`]).
    pub unavailable: bool,
}

impl RepoError {
    /// A store failure with an internal message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            unavailable: false,
        }
    }

    /// The store is unreachable or did not answer in time.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            unavailable: true,
        }
    }
}

impl From<RepoError> for Error {
    fn from(e: RepoError) -> Self {
        if e.unavailable {
            Error::Unavailable(e.to_string())
        } else {
            Error::Server(e.to_string())
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
