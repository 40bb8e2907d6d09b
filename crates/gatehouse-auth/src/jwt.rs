//! JWT access tokens (RFC 9068) in JWS compact serialization (RFC 7515 §7.1),
//! signed and verified with the key ring.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::keys::{KeyRing, Signer, SigningAlg};

/// RFC 9068 §2.1: the `typ` of a JWT access token.
pub const ACCESS_TOKEN_TYP: &str = "at+jwt";

/// `idtyp` of a token acting for a user (password grant, and what is
/// refreshed or exchanged from one), the value Microsoft Entra ID uses.
pub const IDTYP_USER: &str = "user";
/// `idtyp` of a token a client holds for itself (client credentials, and
/// what is exchanged from one), the value Microsoft Entra ID uses.
pub const IDTYP_APP: &str = "app";

/// `amr` (RFC 8176 §2) of a token whose user signed in through another
/// identity provider: `fed`, federated authentication.
pub const AMR_FEDERATED: &str = "fed";

/// Longest token accepted for parsing; anything longer is refused unread.
const MAX_TOKEN_LEN: usize = 16 * 1024;

/// The `aud` claim: one audience is written as a string, several as an array
/// (RFC 7519 §4.1.3); both forms are read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Audience(pub Vec<String>);

impl Audience {
    /// Whether `aud` is among the audiences.
    pub fn contains(&self, aud: &str) -> bool {
        self.0.iter().any(|a| a == aud)
    }
}

impl Serialize for Audience {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Audience {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            Many(Vec<String>),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::One(a) => Audience(vec![a]),
            Raw::Many(a) => Audience(a),
        })
    }
}

/// Claims of an access token (RFC 9068 §2.2, plus `act` from RFC 8693 §4.1
/// and the user's custom claims).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessClaims {
    /// Issuer: the server's configured issuer URL.
    pub iss: String,
    /// Subject: the user name, or the client id for client credentials.
    pub sub: String,
    /// Audiences: the issuer (the API itself) unless an exchange named others.
    pub aud: Audience,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// Issue time, seconds since the epoch.
    pub iat: i64,
    /// Token id: the key of its record (revocation, introspection).
    pub jti: String,
    /// The client the token was issued to.
    pub client_id: String,
    /// Space-separated granted scopes.
    #[serde(default)]
    pub scope: String,
    /// Which kind of identity `sub` is: [`IDTYP_USER`] or [`IDTYP_APP`]
    /// (a client's own token, whose `sub` is its client id). Absent from
    /// tokens issued before it was added; see [`crate::Principal::of_access_token`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idtyp: Option<String>,
    /// After a token exchange: the acting party, `{"sub": <client_id>}`,
    /// nesting earlier actors (RFC 8693 §4.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act: Option<Value>,
    /// How the user signed in (RFC 8176): `["fed"]` when through another
    /// identity provider, absent after a password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amr: Option<Vec<String>>,
    /// The identity provider (`[[auth.providers]]` id) the user signed in
    /// through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idp: Option<String>,
    /// The user's custom claims (`org`, `team`, ...), as top-level claims.
    /// Their names never collide with the ones above: reserved names are
    /// refused when the claims are set ([`crate::RESERVED_CLAIMS`]).
    #[serde(flatten)]
    pub custom: crate::Claims,
}

impl AccessClaims {
    /// The granted scopes as a list.
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        self.scope.split(' ').filter(|s| !s.is_empty())
    }

    /// Whether `scope` was granted.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes().any(|s| s == scope)
    }
}

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crit: Option<Value>,
}

/// Signs `claims` as an RFC 9068 access token with `signer`.
pub(crate) fn encode(signer: &Signer, claims: &AccessClaims) -> Result<String> {
    sign_compact(signer, ACCESS_TOKEN_TYP, claims)
}

/// The JWS compact serialization (RFC 7515 §7.1) of `claims` with header
/// `typ`, signed by `signer` (its algorithm and `kid`): the one encoder of
/// access tokens and ID tokens.
pub(crate) fn sign_compact(signer: &Signer, typ: &str, claims: &impl Serialize) -> Result<String> {
    let header = Header {
        alg: signer.alg().as_str().into(),
        kid: Some(signer.kid().into()),
        typ: Some(typ.into()),
        crit: None,
    };
    let header =
        serde_json::to_vec(&header).map_err(|e| Error::server(format!("JWT header: {e}")))?;
    let payload =
        serde_json::to_vec(claims).map_err(|e| Error::server(format!("JWT claims: {e}")))?;
    let mut token = crate::b64(&header);
    token.push('.');
    token.push_str(&crate::b64(&payload));
    let sig = signer.sign(token.as_bytes())?;
    token.push('.');
    token.push_str(&crate::b64(&sig));
    Ok(token)
}

fn b64d(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
}

/// Checks the signature of `token` against the ring and returns its claims.
/// Only the signature, the header (`typ`, `alg` matching the key, known
/// `kid`, no `crit`) and the claims' shape are checked here: expiry,
/// issuer, audience and revocation are the caller's.
pub(crate) fn verify_signature(ring: &KeyRing, token: &str, now: i64) -> Result<AccessClaims> {
    let bad = || Error::invalid_token("the access token is malformed or its signature is invalid");
    if token.len() > MAX_TOKEN_LEN {
        return Err(bad());
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let header: Header = b64d(h)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(bad)?;
    // RFC 9068 §4: resource servers MUST check typ (at+jwt or application/at+jwt).
    let typ_ok = header.typ.as_deref().is_some_and(|t| {
        t.eq_ignore_ascii_case(ACCESS_TOKEN_TYP) || t.eq_ignore_ascii_case("application/at+jwt")
    });
    // RFC 7515 §4.1.11: we understand no critical extension.
    if !typ_ok || header.crit.is_some() {
        return Err(bad());
    }
    let alg = SigningAlg::parse(&header.alg).ok_or_else(bad)?;
    let kid = header.kid.as_deref().ok_or_else(bad)?;
    let verifier = ring.verifier(kid, now).ok_or_else(bad)?;
    // The key decides the algorithm, never the token (no alg confusion).
    if verifier.alg() != alg {
        return Err(bad());
    }
    let sig = b64d(s).ok_or_else(bad)?;
    let signing_input = &token[..h.len() + 1 + p.len()];
    if !verifier.verify(signing_input.as_bytes(), &sig) {
        return Err(bad());
    }
    let mut claims: AccessClaims = b64d(p)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(bad)?;
    // Registered claims this struct does not model (none are issued here)
    // are never custom ones.
    claims
        .custom
        .retain(|name, _| !crate::is_reserved_claim(name));
    Ok(claims)
}
