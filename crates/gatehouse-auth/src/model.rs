//! Plain records persisted through [`crate::AuthRepo`], and the names of
//! grants, token types and scopes.
//!
//! Records hold only data (no closures, no handles) so that a SQL
//! implementation maps each one to a table row.

use std::collections::BTreeSet;
use std::fmt;

use crate::keys::SigningAlg;

/// `grant_type=authorization_code` (RFC 6749 §4.1).
pub const GRANT_AUTHORIZATION_CODE: &str = "authorization_code";
/// `grant_type=password` (RFC 6749 §4.3).
pub const GRANT_PASSWORD: &str = "password";
/// `grant_type=client_credentials` (RFC 6749 §4.4).
pub const GRANT_CLIENT_CREDENTIALS: &str = "client_credentials";
/// `grant_type=refresh_token` (RFC 6749 §6).
pub const GRANT_REFRESH_TOKEN: &str = "refresh_token";
/// The token exchange grant type (RFC 8693 §2.1).
pub const GRANT_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// How clients authenticate at the token and revocation endpoints (RFC
/// 8414 §2 `token_endpoint_auth_methods_supported`): the one list the
/// metadata documents advertise. `none`: a public client names itself
/// with `client_id` in the body (RFC 6749 §2.1) and proves the code flow
/// with PKCE instead of a secret.
pub const CLIENT_AUTH_METHODS: [&str; 3] = ["client_secret_basic", "client_secret_post", "none"];

/// How clients authenticate at the introspection endpoint: a secret only
/// (a public client may not ask about tokens).
pub const INTROSPECTION_AUTH_METHODS: [&str; 2] = ["client_secret_basic", "client_secret_post"];

/// RFC 8693 §3 token type of an OAuth access token.
pub const TOKEN_TYPE_ACCESS: &str = "urn:ietf:params:oauth:token-type:access_token";
/// RFC 8693 §3 token type of an OAuth refresh token.
pub const TOKEN_TYPE_REFRESH: &str = "urn:ietf:params:oauth:token-type:refresh_token";
/// RFC 8693 §3 token type of a JWT.
pub const TOKEN_TYPE_JWT: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The scope that asks for a refresh-capable, long-lived grant. It is never
/// granted implicitly: only when requested.
pub const SCOPE_OFFLINE_ACCESS: &str = "offline_access";

/// The kinds of identity that share one namespace of names: a user name,
/// an OAuth 2.0 client id and an OAuth 1.0 consumer key are all what a
/// token's `sub` (or a signed request's subject) may hold, so one name
/// belongs to at most one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdentityKind {
    /// A resource owner (`user add`).
    User,
    /// An OAuth 2.0 client (`client add`).
    Client,
    /// An OAuth 1.0 consumer (`consumer add`).
    Consumer,
}

impl IdentityKind {
    /// `user`, `client` or `consumer`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityKind::User => "user",
            IdentityKind::Client => "client",
            IdentityKind::Consumer => "consumer",
        }
    }
}

impl fmt::Display for IdentityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest user name, client id or consumer key a registration accepts.
pub const MAX_NEW_NAME: usize = 256;

/// The characters a new user name, client id or consumer key may hold:
/// ASCII letters and digits, `.`, `_`, `-`, `~` (RFC 3986's unreserved
/// characters, which pass unchanged through URLs, form encoding and the
/// `Basic` credentials of RFC 6749 §2.3.1) and `@` (e-mail addresses as
/// names). So no `:` (HTTP Basic splits on it, RFC 7617 §2), no space, and
/// no leading `$` (a policy variable). Names stored before this rule keep
/// working: it applies when a name is registered, never when it is used.
pub const NAME_CHARACTERS: &str = "ASCII letters, digits, '.', '_', '-', '~' and '@'";

/// Whether `name` may be registered as a new user, client or consumer
/// ([`NAME_CHARACTERS`], 1 to [`MAX_NEW_NAME`] of them).
pub fn valid_new_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NEW_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~' | b'@'))
}

/// The form under which names are compared for uniqueness: ASCII case
/// folded, so `ALICE` is refused while `alice` exists (or once existed).
/// ASCII only, like the database's `lower()` on both backends; new names
/// are ASCII ([`valid_new_name`]).
pub fn name_key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// Why a registration was refused ([`crate::AuthRepo::register`]): who
/// holds the name, compared without regard to ASCII case ([`name_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameTaken {
    /// A live identity of this kind holds it, spelled as given. Of several
    /// (case variants stored before names were folded), the first by kind
    /// (user, client, consumer) then by byte order.
    Live(IdentityKind, String),
    /// An identity that held it (spelled as given) was removed: a `sub` is
    /// never given to someone else (OpenID Connect Core §2), so the name
    /// stays reserved for good.
    Retired(IdentityKind, String),
}

/// A user, client or consumer to register under a new name
/// ([`crate::AuthRepo::register`]).
#[derive(Debug, Clone, Copy)]
pub enum NewIdentity<'a> {
    /// A new user.
    User(&'a UserRecord),
    /// A new OAuth 2.0 client.
    Client(&'a ClientRecord),
    /// A new OAuth 1.0 consumer.
    Consumer(&'a ConsumerRecord),
}

impl NewIdentity<'_> {
    /// The name it is registered under.
    pub fn name(&self) -> &str {
        match self {
            NewIdentity::User(u) => &u.username,
            NewIdentity::Client(c) => &c.client_id,
            NewIdentity::Consumer(c) => &c.key,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> IdentityKind {
        match self {
            NewIdentity::User(_) => IdentityKind::User,
            NewIdentity::Client(_) => IdentityKind::Client,
            NewIdentity::Consumer(_) => IdentityKind::Consumer,
        }
    }
}

/// A grant type a client may be registered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grant {
    /// RFC 6749 §4.1 with PKCE (RFC 7636): browser and native apps.
    AuthorizationCode,
    /// RFC 6749 §4.3. RFC 9700 §2.4 says not to use it; it stays for the
    /// clients that need it and is off unless a client lists it.
    Password,
    /// RFC 6749 §4.4.
    ClientCredentials,
    /// RFC 6749 §6.
    RefreshToken,
    /// RFC 8693.
    TokenExchange,
}

impl Grant {
    /// Every grant type, in the order metadata lists them
    /// (`grant_types_supported`): the one list of grants.
    pub const ALL: [Grant; 5] = [
        Grant::AuthorizationCode,
        Grant::Password,
        Grant::ClientCredentials,
        Grant::RefreshToken,
        Grant::TokenExchange,
    ];

    /// The `grant_type` value (RFC 6749, RFC 8693 §2.1).
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::AuthorizationCode => GRANT_AUTHORIZATION_CODE,
            Grant::Password => GRANT_PASSWORD,
            Grant::ClientCredentials => GRANT_CLIENT_CREDENTIALS,
            Grant::RefreshToken => GRANT_REFRESH_TOKEN,
            Grant::TokenExchange => GRANT_TOKEN_EXCHANGE,
        }
    }

    /// Parses [`Grant::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.as_str() == s)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RFC 6749 §2.1 client types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClientType {
    /// Holds a secret and authenticates with it (a server-side app).
    #[default]
    Confidential,
    /// Cannot keep a secret (a single-page or native app): it has none,
    /// names itself with `client_id` in the body, and must use PKCE.
    Public,
}

/// A registered OAuth client.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientRecord {
    /// The client identifier (also its name on the CLI).
    pub client_id: String,
    /// SHA-256 of the client secret (32 bytes); empty for a public client,
    /// which then never authenticates with a secret. The secret itself is
    /// never stored.
    pub secret_hash: Vec<u8>,
    /// Confidential or public.
    pub client_type: ClientType,
    /// A first-party client (the operator's own app) skips the consent
    /// page of the authorization code flow.
    pub first_party: bool,
    /// Where the authorization endpoint may send the user back, matched
    /// exactly ([`crate::redirect_uri_matches`]).
    pub redirect_uris: Vec<String>,
    /// Grant types the client may use.
    pub grants: Vec<Grant>,
    /// Scopes the client may obtain.
    pub scopes: Vec<String>,
    /// Audiences/resources the client may ask for in a token exchange.
    pub audiences: Vec<String>,
    /// `id_token_signed_response_alg` (OpenID Connect Dynamic Client
    /// Registration §2): how its ID tokens are signed. `None`: the
    /// registration's default, RS256 ([`ClientRecord::id_token_alg`]).
    pub id_token_signed_response_alg: Option<SigningAlg>,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// Last change (secret rotation, update), seconds since the epoch.
    pub updated_at: i64,
}

/// The algorithm of ID tokens for a client that registered none
/// ([`ClientRecord::id_token_alg`]).
pub const DEFAULT_ID_TOKEN_ALG: SigningAlg = SigningAlg::Rs256;

/// The client id of GraphiQL's sign-in: a public, first-party client the
/// server registers itself ([`ClientRecord::graphiql`]); no user, client
/// or consumer may take the name.
pub const GRAPHIQL_CLIENT_ID: &str = "graphiql";

impl ClientRecord {
    /// GraphiQL's built-in client for the server whose GraphiQL page is
    /// `graphiql_url` (`{issuer}/graphql`): public, first-party, the code
    /// flow only (no refresh token: the page keeps its token in memory),
    /// its only redirect URI that page (for a loopback issuer also under
    /// the other loopback host names, same port and path:
    /// [`crate::loopback_aliases`]), and `scopes` (every scope the
    /// schema names, plus `openid` and `profile`): what a user's token
    /// carries is still bounded by the user's own scopes.
    pub fn graphiql(graphiql_url: &str, scopes: Vec<String>) -> Self {
        ClientRecord {
            client_id: GRAPHIQL_CLIENT_ID.to_string(),
            secret_hash: Vec::new(),
            client_type: ClientType::Public,
            first_party: true,
            redirect_uris: std::iter::once(graphiql_url.to_string())
                .chain(crate::redirect::loopback_aliases(graphiql_url))
                .collect(),
            grants: vec![Grant::AuthorizationCode],
            scopes,
            audiences: Vec::new(),
            id_token_signed_response_alg: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    /// The algorithm of the client's ID tokens: the one it registered, else
    /// RS256, the default OpenID Connect Dynamic Client Registration §2
    /// gives `id_token_signed_response_alg` (relying parties that say
    /// nothing expect it), whatever algorithm signs access tokens.
    pub fn id_token_alg(&self) -> SigningAlg {
        self.id_token_signed_response_alg
            .unwrap_or(DEFAULT_ID_TOKEN_ALG)
    }

    /// Whether the client may use `grant`.
    pub fn allows_grant(&self, grant: Grant) -> bool {
        self.grants.contains(&grant)
    }

    /// Whether the client is public (no secret, PKCE required).
    pub fn is_public(&self) -> bool {
        self.client_type == ClientType::Public
    }
}

impl fmt::Debug for ClientRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRecord")
            .field("client_id", &self.client_id)
            .field("secret_hash", &"<redacted>")
            .field("client_type", &self.client_type)
            .field("first_party", &self.first_party)
            .field("redirect_uris", &self.redirect_uris)
            .field("grants", &self.grants)
            .field("scopes", &self.scopes)
            .field("audiences", &self.audiences)
            .field(
                "id_token_signed_response_alg",
                &self.id_token_signed_response_alg,
            )
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

/// A resource owner who may use the password grant.
#[derive(Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// Unique user name; the `sub` of tokens issued for the user.
    pub username: String,
    /// PHC string of the argon2id hash of the password.
    pub password_hash: String,
    /// Scopes the user may grant.
    pub scopes: Vec<String>,
    /// Custom claims (checked by [`crate::check_claims`]), copied into the
    /// user's access tokens.
    pub claims: crate::Claims,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// Last change, seconds since the epoch.
    pub updated_at: i64,
}

impl fmt::Debug for UserRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserRecord")
            .field("username", &self.username)
            .field("password_hash", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("claims", &self.claims)
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

/// A signing key as stored: the public half as a JWK, the private half
/// encrypted (AES-256-GCM) under the server secret.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Key id: the RFC 7638 JWK thumbprint of the public key.
    pub kid: String,
    /// JWS algorithm name (`EdDSA`, `ES256`, `RS256`).
    pub alg: String,
    /// The public key as a JWK JSON object (no private members).
    pub public_jwk: String,
    /// 12-byte nonce followed by the AES-256-GCM ciphertext and tag of the
    /// PKCS#8 private key.
    pub private_sealed: Vec<u8>,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// When the key stopped signing new tokens; `None` while it is current.
    pub retired_at: Option<i64>,
    /// After this time the key is no longer published nor accepted (its last
    /// tokens have expired); `None` while it is current.
    pub publish_until: Option<i64>,
}

impl fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRecord")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("private_sealed", &"<redacted>")
            .field("created_at", &self.created_at)
            .field("retired_at", &self.retired_at)
            .field("publish_until", &self.publish_until)
            .finish()
    }
}

/// Whether a token record is an access token or a refresh token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A JWT access token; the record id is its `jti`.
    Access,
    /// An opaque refresh token; the record id is the SHA-256 of its value.
    Refresh,
}

impl TokenKind {
    /// A stable name for storage (`access` / `refresh`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Access => "access",
            TokenKind::Refresh => "refresh",
        }
    }

    /// Parses [`TokenKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "access" => Some(TokenKind::Access),
            "refresh" => Some(TokenKind::Refresh),
            _ => None,
        }
    }
}

/// One issued token. The server tracks tokens and their expiry only (no
/// sessions): this is the whole state behind a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// `jti` of an access token; base64url SHA-256 of a refresh token's value.
    pub id: String,
    /// Access or refresh.
    pub kind: TokenKind,
    /// The `sub`: a user name, or the client id for client credentials.
    pub subject: String,
    /// Set when the subject is a resource owner (password grant and what
    /// descends from it).
    pub username: Option<String>,
    /// The client the token was issued to.
    pub client_id: String,
    /// Granted scopes.
    pub scope: Vec<String>,
    /// Audiences (`aud`); for a refresh token, the audience its access tokens get.
    pub audience: Vec<String>,
    /// Issue time, seconds since the epoch.
    pub issued_at: i64,
    /// Expiry, seconds since the epoch.
    pub expires_at: i64,
    /// Revoked explicitly or with its family.
    pub revoked: bool,
    /// Tokens descending from one grant share a family; reuse of a spent
    /// refresh token revokes the whole family (RFC 9700 §4.14.2).
    pub family_id: String,
    /// The refresh token this one was issued from, if any.
    pub parent_id: Option<String>,
    /// For a refresh token: when it was exchanged for its successor.
    pub used_at: Option<i64>,
    /// For a refresh token: the id of the refresh token that replaced it.
    pub successor_id: Option<String>,
    /// The identity provider the user signed in through (`[[auth.providers]]`
    /// id), kept through refreshes: tokens then carry `amr: ["fed"]` and
    /// `idp`.
    pub idp: Option<String>,
}

/// An authorization code (RFC 6749 §4.1.2), stored so that every instance
/// on one database redeems it once. The code itself is never stored: `id`
/// is its base64url SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct CodeRecord {
    /// base64url SHA-256 of the code.
    pub id: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The `redirect_uri` of the authorization request, as sent: the token
    /// request must name the same (RFC 6749 §4.1.3).
    pub redirect_uri: String,
    /// The PKCE `code_challenge` (S256, RFC 7636 §4.2).
    pub code_challenge: String,
    /// Granted scopes.
    pub scope: Vec<String>,
    /// The user who signed in.
    pub username: String,
    /// OpenID Connect `nonce` of the request, for the `id_token`.
    pub nonce: Option<String>,
    /// When the user entered their credentials (OIDC `auth_time`).
    pub auth_time: i64,
    /// Issue time, seconds since the epoch.
    pub issued_at: i64,
    /// Expiry (issue + 60 s); the record is kept a while after it so a late
    /// second use is still recognised and answered by revocation.
    pub expires_at: i64,
    /// When it was redeemed; a second redemption revokes `family_id`.
    pub used_at: Option<i64>,
    /// The family of the tokens issued from it (chosen at issue).
    pub family_id: String,
    /// The identity provider the user signed in through, if any.
    pub idp: Option<String>,
}

impl fmt::Debug for CodeRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeRecord")
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .field("scope", &self.scope)
            .field("username", &self.username)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .field("used_at", &self.used_at)
            .finish_non_exhaustive()
    }
}

/// A set of scope tokens, kept sorted so rendering is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scopes(pub BTreeSet<String>);

impl Scopes {
    /// Parses a space-separated `scope` parameter (RFC 6749 §3.3). Repeated
    /// spaces are tolerated; characters outside the scope-token grammar
    /// are refused.
    pub fn parse(s: &str) -> Result<Self, crate::Error> {
        let mut set = BTreeSet::new();
        for token in s.split(' ').filter(|t| !t.is_empty()) {
            if !valid_scope_token(token) {
                return Err(crate::Error::invalid_scope("malformed scope value"));
            }
            set.insert(token.to_string());
        }
        Ok(Scopes(set))
    }

    /// From a list of scope names.
    pub fn from_list<S: AsRef<str>>(items: &[S]) -> Self {
        Scopes(items.iter().map(|s| s.as_ref().to_string()).collect())
    }

    /// Whether `scope` is in the set.
    pub fn contains(&self, scope: &str) -> bool {
        self.0.contains(scope)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &Scopes) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Members of both.
    pub fn intersection(&self, other: &Scopes) -> Scopes {
        Scopes(self.0.intersection(&other.0).cloned().collect())
    }

    /// Whether there are no scopes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The members as a list.
    pub fn to_vec(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in &self.0 {
            if !first {
                f.write_str(" ")?;
            }
            f.write_str(s)?;
            first = false;
        }
        Ok(())
    }
}

/// RFC 6749 §3.3: `scope-token = 1*( %x21 / %x23-5B / %x5D-7E )`.
pub fn valid_scope_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// A registered OAuth 1.0 consumer (RFC 5849 §1.2 "client credentials").
///
/// Unlike an OAuth 2.0 client secret, the consumer secret cannot be stored
/// as a hash: HMAC-SHA1 needs it as key. It is sealed with the server's
/// key-encryption key (AES-256-GCM, bound to the consumer key).
#[derive(Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The consumer key (`oauth_consumer_key`), also its name on the CLI.
    pub key: String,
    /// 12-byte nonce, AES-256-GCM ciphertext and tag of the secret.
    pub secret_sealed: Vec<u8>,
    /// Scopes the consumer may obtain (and acts with when it signs alone).
    pub scopes: Vec<String>,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// Last change, seconds since the epoch.
    pub updated_at: i64,
}

impl fmt::Debug for ConsumerRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerRecord")
            .field("key", &self.key)
            .field("secret_sealed", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("created_at", &self.created_at)
            .field("updated_at", &self.updated_at)
            .finish()
    }
}

/// Whether an OAuth 1.0 token is a temporary (request) token or an access
/// token (RFC 5849 §2.1 and §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OAuth1TokenKind {
    /// Temporary credentials, waiting for (or holding) the owner's approval.
    Request,
    /// Token credentials: sign resource requests for the approving user.
    Access,
}

impl OAuth1TokenKind {
    /// A stable name for storage (`request` / `access`).
    pub fn as_str(self) -> &'static str {
        match self {
            OAuth1TokenKind::Request => "request",
            OAuth1TokenKind::Access => "access",
        }
    }

    /// Parses [`OAuth1TokenKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "request" => Some(OAuth1TokenKind::Request),
            "access" => Some(OAuth1TokenKind::Access),
            _ => None,
        }
    }
}

/// An OAuth 1.0 request or access token. The token value itself is never
/// stored: `id` is its base64url SHA-256; the token secret is sealed like a
/// consumer secret, and the verifier is stored as a SHA-256 too.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuth1TokenRecord {
    /// base64url SHA-256 of the token value.
    pub id: String,
    /// Request or access token.
    pub kind: OAuth1TokenKind,
    /// The consumer the token was issued to.
    pub consumer_key: String,
    /// Sealed token secret (bound to `id`).
    pub secret_sealed: Vec<u8>,
    /// Request tokens: the callback URI, or `oob`.
    pub callback: Option<String>,
    /// Request tokens: base64url SHA-256 of the verifier, once approved.
    pub verifier_hash: Option<String>,
    /// The approving resource owner (request tokens once approved; always
    /// for access tokens).
    pub username: Option<String>,
    /// Granted scopes (set at approval).
    pub scopes: Vec<String>,
    /// Issue time, seconds since the epoch.
    pub created_at: i64,
    /// Expiry, seconds since the epoch; the record is purged after it.
    pub expires_at: i64,
    /// Request tokens: when it was exchanged for an access token.
    pub used_at: Option<i64>,
}

impl fmt::Debug for OAuth1TokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth1TokenRecord")
            .field("kind", &self.kind)
            .field("consumer_key", &self.consumer_key)
            .field("secret_sealed", &"<redacted>")
            .field("callback", &self.callback)
            .field("username", &self.username)
            .field("scopes", &self.scopes)
            .field("created_at", &self.created_at)
            .field("expires_at", &self.expires_at)
            .field("used_at", &self.used_at)
            .finish_non_exhaustive()
    }
}
