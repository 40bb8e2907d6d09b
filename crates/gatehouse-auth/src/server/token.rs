//! The token endpoint's request as one typed value: the grant and its own
//! parameters, parsed once where the request arrives (kanidm's
//! `GrantTypeReq` is the model), and the one dispatch to the grant's module.

use super::*;

/// A token request (RFC 6749 §4.1.3, §4.3.2, §4.4.2, §6; RFC 8693 §2.1):
/// which grant, with the parameters that grant reads. Missing parameters
/// stay `None` here: each grant says which it requires and answers
/// `invalid_request` without it.
pub enum TokenRequest<'a> {
    /// `grant_type=authorization_code`.
    AuthorizationCode {
        /// `code`.
        code: Option<&'a str>,
        /// `redirect_uri`.
        redirect_uri: Option<&'a str>,
        /// `code_verifier` (RFC 7636 §4.5).
        code_verifier: Option<&'a str>,
    },
    /// `grant_type=password`.
    Password {
        /// `username`.
        username: Option<&'a str>,
        /// `password`.
        password: Option<&'a str>,
        /// `scope`.
        scope: Option<&'a str>,
    },
    /// `grant_type=client_credentials`.
    ClientCredentials {
        /// `scope`.
        scope: Option<&'a str>,
    },
    /// `grant_type=refresh_token`.
    RefreshToken {
        /// `refresh_token`.
        refresh_token: Option<&'a str>,
        /// `scope`.
        scope: Option<&'a str>,
    },
    /// The token exchange grant (RFC 8693).
    TokenExchange(ExchangeRequest),
}

impl TokenRequest<'_> {
    /// The grant it asks for.
    pub fn grant(&self) -> Grant {
        match self {
            TokenRequest::AuthorizationCode { .. } => Grant::AuthorizationCode,
            TokenRequest::Password { .. } => Grant::Password,
            TokenRequest::ClientCredentials { .. } => Grant::ClientCredentials,
            TokenRequest::RefreshToken { .. } => Grant::RefreshToken,
            TokenRequest::TokenExchange(_) => Grant::TokenExchange,
        }
    }
}

/// Only the grant: codes, passwords and tokens are never printed.
impl fmt::Debug for TokenRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenRequest({})", self.grant())
    }
}

impl AuthServer {
    /// Answers `req` from the authenticated `client`. `allow_refresh`:
    /// whether the endpoint may issue a refresh token with a password
    /// grant (`/oauth/access_token` may not); `from`: the caller's address,
    /// for the password grant's throttle.
    pub async fn token(
        &self,
        client: &ClientRecord,
        req: &TokenRequest<'_>,
        allow_refresh: bool,
        from: Option<IpAddr>,
    ) -> Result<TokenResponse> {
        match req {
            TokenRequest::AuthorizationCode {
                code,
                redirect_uri,
                code_verifier,
            } => {
                self.authorization_code_grant(client, *code, *redirect_uri, *code_verifier)
                    .await
            }
            TokenRequest::Password {
                username,
                password,
                scope,
            } => {
                self.password_grant(client, *username, *password, *scope, allow_refresh, from)
                    .await
            }
            TokenRequest::ClientCredentials { scope } => {
                self.client_credentials_grant(client, *scope).await
            }
            TokenRequest::RefreshToken {
                refresh_token,
                scope,
            } => self.refresh_grant(client, *refresh_token, *scope).await,
            TokenRequest::TokenExchange(exchange) => self.token_exchange(client, exchange).await,
        }
    }
}
