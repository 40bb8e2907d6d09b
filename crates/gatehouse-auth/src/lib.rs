//! OAuth 2.0 authorization logic for gatehouse: clients, users, grants,
//! tokens and signing keys. No HTTP types live here (`gatehouse-oauth` is
//! the HTTP face), and nothing here reads the clock or the RNG directly:
//! both are passed in ([`Clock`], [`Random`]) so expiry is tested without
//! sleeping.
//!
//! The pieces:
//! - [`AuthServer`]: the grants (password, client credentials, refresh with
//!   rotation and reuse detection, RFC 8693 token exchange), RFC 9068 JWT
//!   access tokens, validation for resource servers, RFC 7662
//!   introspection, RFC 7009 revocation, signing-key rotation and the JWKS.
//! - [`Admin`]: client and user administration and idempotent bootstrap.
//! - [`Claims`]: a user's custom claims, carried by its access tokens.
//! - [`oidc`]: OpenID Connect: the ID token, the identity scopes, userinfo.
//! - [`oauth1`]: OAuth 1.0 (RFC 5849) signatures, request and access
//!   tokens, signed resource requests, consumer administration.
//! - [`AuthRepo`]: the storage interface, with [`MemoryRepo`] for tests.
//! - [`Error`]: RFC error codes whose `Display` is the wire string.
#![warn(missing_docs)]

mod access;
mod accounts;
mod admin;
mod claims;
mod clock;
mod error;
mod federation;
mod flows;
mod jwt;
mod keys;
mod login;
mod model;
pub mod oauth1;
pub mod oidc;
mod principal;
mod random;
mod redirect;
mod repo;
mod secrets;
mod server;

#[cfg(test)]
mod tests;

pub use access::access_context_of;
pub use accounts::{AccountProfile, Accounts};
pub use admin::{
    Admin, BootstrapOutcome, ClientInfo, ClientSecret, MAX_PASSWORD, NewClient, UserInfo,
};
pub use claims::{
    Claims, MAX_CLAIM_NAME, MAX_CLAIM_VALUE, MAX_CLAIMS, MAX_CLAIMS_JSON, RESERVED_CLAIMS,
    check_claim_name, check_claims, claims_from_pairs, custom_claims, is_reserved_claim,
    parse_claim_pair,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Description, Error, RepoError, Result};
pub use federation::{
    FederationStore, FlowKind, IdentityRecord, LinkMode, PROVIDER_FLOW_TTL, ProviderFlow,
    ProviderPolicy, UpstreamIdentity,
};
pub use flows::{
    CODE_DIGITS, EmailFlowConfig, FlowEffect, FlowMail, FlowPurpose, FlowToken, MAIL_INTERVAL,
    MAILS_PER_HOUR, MAX_CODE_ATTEMPTS, MailFlows, Verification,
};
pub use jwt::{ACCESS_TOKEN_TYP, AccessClaims, Audience, IDTYP_APP, IDTYP_USER};
pub use keys::{
    GENERATED_SECRET_PREFIX, KeyCipher, KeyRing, Signer, SigningAlg, generate_key,
    generate_server_secret,
};
pub use login::{
    Account, FREE_FAILURES_PER_ACCOUNT, FREE_FAILURES_PER_ADDRESS, FREE_SIGN_UPS_PER_ADDRESS,
    LoginThrottle, MAX_DELAY_PER_ACCOUNT, MAX_DELAY_PER_ADDRESS, MAX_DELAY_PER_SIGN_UP_ADDRESS,
    PASSWORD_CHECK_WAIT, PASSWORD_CHECKS_PER_CPU, QUIET_RESET_PER_ACCOUNT, QUIET_RESET_PER_ADDRESS,
    QUIET_RESET_PER_SIGN_UP_ADDRESS,
};
pub use model::{
    CLIENT_AUTH_METHODS, ClientRecord, ClientType, GRANT_AUTHORIZATION_CODE,
    GRANT_CLIENT_CREDENTIALS, GRANT_PASSWORD, GRANT_REFRESH_TOKEN, GRANT_TOKEN_EXCHANGE, Grant,
    INTROSPECTION_AUTH_METHODS, KeyRecord, SCOPE_OFFLINE_ACCESS, Scopes, TOKEN_TYPE_ACCESS,
    TOKEN_TYPE_JWT, TOKEN_TYPE_REFRESH, TokenKind, TokenRecord, UserRecord, valid_scope_token,
};
pub use model::{
    CodeRecord, ConsumerRecord, DEFAULT_ID_TOKEN_ALG, GRAPHIQL_CLIENT_ID, IdentityKind,
    MAX_NEW_NAME, NAME_CHARACTERS, NameTaken, NewIdentity, OAuth1TokenKind, OAuth1TokenRecord,
    name_key, valid_new_name,
};
pub use principal::{ANONYMOUS_SCOPE, AccessTokenFacts, AuthScheme, Principal, challenge};
pub use random::{Random, SeededRandom, SystemRandom};
pub use redirect::{MAX_REDIRECT_URI, check_redirect_uri, loopback_aliases, redirect_uri_matches};
pub use repo::{AuthRepo, MemoryRepo};
pub use secrets::{
    DUMMY_PASSWORD_HASH, generate_client_secret, hash_password, hash_secret, token_id,
    verify_password, verify_secret,
};
pub use server::{
    AuthConfig, AuthServer, AuthorizeError, AuthorizeErrorCode, AuthorizeParams, AuthorizeRequest,
    CODE_REPLAY_MEMORY, CODE_TTL, CONSENT_TTL, ClientProof, CsrfPair, ExchangeRequest, Federated,
    MAX_ADDRESS, MAX_STATE, MIN_SIGN_UP_PASSWORD, ProviderReturn, ProviderStart, ReturnTo,
    SignedIn, SignedUp, TokenRequest, TokenResponse, normalize_address, plausible_address,
};

/// base64url without padding (RFC 7515 §2), the encoding of every token part.
pub(crate) fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
