//! Who a resource request acts for, once authenticated.

use std::collections::BTreeSet;

/// How the caller authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthScheme {
    /// `Authorization: Bearer <access token>` (RFC 6750).
    Bearer,
    /// HTTP Basic with a user's name and password, checked on every request.
    Basic,
    /// An OAuth 1.0 signed request.
    OAuth1,
    /// No credentials, allowed because `auth.anonymous_read` is on.
    Anonymous,
}

/// The authenticated caller of a GraphQL or REST request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user (or client, for client credentials) the request acts for.
    pub subject: String,
    /// The OAuth client the token was issued to, if any.
    pub client_id: Option<String>,
    /// Scopes granted.
    pub scopes: BTreeSet<String>,
    /// How the caller authenticated.
    pub scheme: AuthScheme,
    /// When the credential stops granting access (unix seconds), if it expires.
    pub expires_at: Option<i64>,
    /// The access token's id (`jti`), to notice revocation of long-lived streams.
    pub token_id: Option<String>,
}

impl Principal {
    /// The caller with no credentials (anonymous reads).
    pub fn anonymous() -> Self {
        Self {
            subject: String::new(),
            client_id: None,
            scopes: BTreeSet::new(),
            scheme: AuthScheme::Anonymous,
            expires_at: None,
            token_id: None,
        }
    }

    /// Whether the caller may use `scope`. Anonymous callers may read
    /// (queries and subscriptions) but nothing else.
    pub fn allows(&self, scope: &str, is_read: bool) -> bool {
        match self.scheme {
            AuthScheme::Anonymous => is_read,
            _ => self.scopes.contains(scope),
        }
    }

    /// Whether this is an anonymous caller.
    pub fn is_anonymous(&self) -> bool {
        self.scheme == AuthScheme::Anonymous
    }
}
