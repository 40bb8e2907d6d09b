//! The one metadata document, served both as RFC 8414 authorization server
//! metadata (`/.well-known/oauth-authorization-server`) and as the OpenID
//! Connect Discovery 1.0 §3 provider configuration
//! (`/.well-known/openid-configuration`): one builder, so the two never
//! disagree. What it lists comes from the places that decide it: grants
//! from [`Grant::ALL`], client authentication from
//! [`CLIENT_AUTH_METHODS`], the ID token algorithms from [`SigningAlg::ALL`]
//! (the server keeps a key of each).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use gatehouse_auth::oidc::{IDENTITY_SCOPES, STANDARD_CLAIMS};
use gatehouse_auth::{
    CLIENT_AUTH_METHODS, Grant, INTROSPECTION_AUTH_METHODS, SCOPE_OFFLINE_ACCESS, SigningAlg,
};

use crate::OAuthState;

/// The metadata document for the server behind `state`.
pub(crate) fn document(state: &OAuthState) -> Value {
    let base = &state.inner.config.public_url;
    let server = state.server();
    let mut claims: Vec<&str> = STANDARD_CLAIMS.to_vec();
    // The user's `email` custom claim, when it has one (userinfo).
    claims.push("email");
    let mut scopes: Vec<&str> = IDENTITY_SCOPES.to_vec();
    // Data scopes are the schema's and each deployment's: not listed
    // (RFC 8414 §2 lets a server leave scopes out).
    scopes.push(SCOPE_OFFLINE_ACCESS);
    json!({
        "issuer": server.config().issuer,
        // The code flow's sign-in pages; with `oauth_token`, the OAuth 1.0
        // approval.
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "userinfo_endpoint": format!("{base}/oauth/userinfo"),
        "jwks_uri": format!("{base}/.well-known/jwks.json"),
        "introspection_endpoint": format!("{base}/oauth/introspect"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "grant_types_supported": Grant::ALL.map(Grant::as_str),
        // The code flow: PKCE with S256 only, the answer in the query, with
        // `iss` (RFC 9207).
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
        "token_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
        "introspection_endpoint_auth_methods_supported": INTROSPECTION_AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
        "scopes_supported": scopes,
        "subject_types_supported": ["public"],
        // RS256 first: OpenID Connect Discovery §3 requires it, and it signs
        // the ID tokens of a client that registered no algorithm.
        "id_token_signing_alg_values_supported":
            SigningAlg::ALL.map(SigningAlg::as_str),
        "claims_supported": claims,
        "claim_types_supported": ["normal"],
        // Discovery §3: these default to true when absent.
        "request_uri_parameter_supported": false,
        "request_parameter_supported": false,
        "claims_parameter_supported": false,
        // No `end_session_endpoint`: there is no session to end (signing out
        // is forgetting the tokens and revoking the refresh token).
    })
}

/// `GET /.well-known/oauth-authorization-server` and
/// `GET /.well-known/openid-configuration`.
pub(crate) async fn serve(State(state): State<OAuthState>) -> Response {
    let mut resp = axum::Json(document(&state)).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    resp
}
