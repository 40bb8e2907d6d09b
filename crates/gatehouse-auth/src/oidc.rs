//! OpenID Connect Core 1.0 on top of the OAuth 2.0 server: the ID token
//! (§2, §3.1.3.6), the identity scopes, and what the userinfo endpoint
//! answers (§5.3). Pure functions: the clock's reading and the signing key
//! are passed in. Decisions: `docs/design/browser-apps.md`, "OpenID Connect".

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256, Sha512};

use crate::error::{Error, Result};
use crate::keys::{Signer, SigningAlg};
use crate::model::Scopes;
use crate::principal::Principal;

/// The scope that makes a request an OpenID Connect request (Core §3.1.2.1):
/// with it, the token response carries an `id_token` and the access token
/// opens the userinfo endpoint.
pub const SCOPE_OPENID: &str = "openid";
/// Asks for the default profile claims (Core §5.4); here `preferred_username`.
pub const SCOPE_PROFILE: &str = "profile";
/// Asks for `email` (Core §5.4), answered when the user has an `email` claim.
pub const SCOPE_EMAIL: &str = "email";

/// The identity scopes: about who the user is, not what the token may do
/// to data. A user may always grant them about themself; see
/// [`user_scope_ceiling`].
pub const IDENTITY_SCOPES: [&str; 3] = [SCOPE_OPENID, SCOPE_PROFILE, SCOPE_EMAIL];

/// How long an ID token is valid, in seconds. It proves a sign-in to the
/// client that asked for it, at that moment; it opens nothing (the access
/// token does), so it need not live as long.
pub const ID_TOKEN_LIFETIME: i64 = 600;

/// `typ` of the ID token header: a plain JWT (RFC 7519 §5.1), never the
/// access tokens' `at+jwt`, so an ID token is refused where an access token
/// is expected (RFC 9068 §4) and cannot open the API.
pub const ID_TOKEN_TYP: &str = "JWT";

/// The claims that userinfo and discovery name (`claims_supported`):
/// besides these, a user's custom claims.
pub const STANDARD_CLAIMS: [&str; 9] = [
    "iss",
    "sub",
    "aud",
    "exp",
    "iat",
    "auth_time",
    "nonce",
    "at_hash",
    "preferred_username",
];

/// Whether a grant of `scope` (space-separated, as in a token response)
/// is an OpenID Connect one: the token endpoint then adds an `id_token`.
pub fn grants_openid(scope: &str) -> bool {
    scope.split(' ').any(|s| s == SCOPE_OPENID)
}

/// The scopes a user's token may carry through `client`'s grant: what both
/// the client and the user may have, plus the identity scopes the client
/// may ask for even when the user's own list does not name them (a user
/// may always let a client know who they are; the data scopes stay the
/// intersection). The one rule for every grant that acts for a user.
pub fn user_scope_ceiling<S: AsRef<str>, T: AsRef<str>>(
    client_scopes: &[S],
    user_scopes: &[T],
) -> Scopes {
    let client = Scopes::from_list(client_scopes);
    let mut allowed = client.intersection(&Scopes::from_list(user_scopes));
    for s in IDENTITY_SCOPES {
        if client.contains(s) {
            allowed.0.insert(s.to_string());
        }
    }
    allowed
}

/// What an ID token states (OpenID Connect Core §2, §3.1.3.6): the input
/// of [`id_token`].
#[derive(Debug, Clone, Copy)]
pub struct IdTokenInput<'a> {
    /// `iss`: the server's issuer.
    pub issuer: &'a str,
    /// `sub`: the user.
    pub subject: &'a str,
    /// `preferred_username`, when the subject has a user name.
    pub username: Option<&'a str>,
    /// The account row's `name`, `email` and `email_verified`, with the
    /// scopes that release them (`profile`, `email`); `None` without an
    /// account type.
    pub profile: Option<&'a ProfileClaims>,
    /// `aud`: the client the token is for.
    pub client_id: &'a str,
    /// `auth_time`: when the user entered their credentials (unix seconds).
    pub auth_time: i64,
    /// `nonce` of the authorization request, repeated unchanged (§3.1.2.1).
    pub nonce: Option<&'a str>,
    /// The access token issued beside it: its hash is `at_hash`.
    pub access_token: Option<&'a str>,
    /// Now, unix seconds: `iat`, and `exp` after [`ID_TOKEN_LIFETIME`].
    pub now: i64,
    /// The identity provider the user signed in through: `amr: ["fed"]`
    /// and `idp` (RFC 8176, OpenID Connect Core §2).
    pub idp: Option<&'a str>,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    exp: i64,
    iat: i64,
    auth_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preferred_username: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    amr: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idp: Option<&'a str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    profile: Option<&'a ProfileClaims>,
}

/// What an account row adds to an ID token and the userinfo answer: the
/// claims of the `profile` and `email` scopes (Core §5.4), from the row.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ProfileClaims {
    /// `name` (the row's `displayName`), under `profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `email`, under `email`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// `email_verified`, under `email` when the row has an address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_verified: Option<bool>,
}

impl ProfileClaims {
    /// The claims of `profile` that `scope` (a granted scope string)
    /// releases.
    pub fn released(profile: &crate::AccountProfile, scope: &str) -> ProfileClaims {
        let has = |s: &str| scope.split(' ').any(|t| t == s);
        let email = has(SCOPE_EMAIL).then(|| profile.email.clone()).flatten();
        ProfileClaims {
            name: has(SCOPE_PROFILE).then(|| profile.name.clone()).flatten(),
            email_verified: email.as_ref().map(|_| profile.email_verified),
            email,
        }
    }
}

/// The ID token for `input`, signed by `signer` (the current key of the
/// client's algorithm, published in the JWKS beside the access tokens'
/// keys), in JWS compact form.
/// It carries identity only: `iss`, `sub`, `aud` (the client), `exp`,
/// `iat`, `auth_time`, `nonce`, `at_hash`, `preferred_username`; custom
/// claims are read at userinfo.
pub fn id_token(signer: &Signer, input: &IdTokenInput<'_>) -> Result<String> {
    let claims = Claims {
        iss: input.issuer,
        sub: input.subject,
        aud: input.client_id,
        exp: input.now.saturating_add(ID_TOKEN_LIFETIME),
        iat: input.now,
        auth_time: input.auth_time,
        nonce: input.nonce,
        at_hash: input.access_token.map(|t| token_hash(signer.alg(), t)),
        preferred_username: input.username,
        amr: input.idp.map(|_| [crate::jwt::AMR_FEDERATED]),
        idp: input.idp,
        profile: input.profile,
    };
    crate::jwt::sign_compact(signer, ID_TOKEN_TYP, &claims)
}

impl crate::AuthServer {
    /// [`id_token`] signed with this server's current key of `alg`: the
    /// client's [`crate::ClientRecord::id_token_alg`].
    pub fn id_token(&self, alg: SigningAlg, input: &IdTokenInput<'_>) -> Result<String> {
        id_token(self.signer(alg)?.as_ref(), input)
    }

    /// The ID token of a grant that signed `sub` in for `client` at
    /// `auth_time` with `scope`, beside `access_token`: issued now, for
    /// the client alone, signed with the client's algorithm
    /// ([`crate::ClientRecord::id_token_alg`], not the access tokens').
    /// With an account type, `preferred_username` and the profile claims
    /// the scope releases come from the account row.
    /// What every grant that answers `openid` issues.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn user_id_token(
        &self,
        client: &crate::ClientRecord,
        sub: &str,
        scope: &str,
        auth_time: i64,
        nonce: Option<&str>,
        access_token: &str,
        idp: Option<&str>,
    ) -> Result<String> {
        let account = self.account_profile(sub).await?;
        let profile = account.as_ref().map(|a| ProfileClaims::released(a, scope));
        self.id_token(
            client.id_token_alg(),
            &IdTokenInput {
                issuer: &self.config().issuer,
                subject: sub,
                username: Some(account.as_ref().map_or(sub, |a| a.username.as_str())),
                profile: profile.as_ref(),
                client_id: &client.client_id,
                auth_time,
                nonce,
                access_token: Some(access_token),
                now: self.now(),
                idp,
            },
        )
    }

    /// The userinfo answer ([`userinfo`]) read at request time: with an
    /// account type, `preferred_username` and the profile claims the
    /// token's scopes release come from the account row (a deleted
    /// account's token gets `invalid_token`).
    pub async fn userinfo(&self, principal: &Principal) -> Result<Value> {
        let mut out = userinfo(principal)?;
        let Some(sub) = principal.user() else {
            return Ok(out);
        };
        if self.accounts_in_use() {
            let Some(account) = self.account_profile(sub).await? else {
                return Err(Error::invalid_token("the account no longer exists"));
            };
            let scope = principal
                .scopes
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" ");
            if let (Value::Object(map), Value::Object(extra)) = (
                &mut out,
                serde_json::to_value(ProfileClaims::released(&account, &scope))
                    .map_err(|e| Error::server(format!("profile claims: {e}")))?,
            ) {
                map.insert(
                    "preferred_username".into(),
                    Value::String(account.username.clone()),
                );
                map.extend(extra);
            }
        }
        Ok(out)
    }
}

/// `at_hash` (and `c_hash`) of Core §3.1.3.6: base64url of the left half of
/// the hash of `value`'s ASCII octets, with the hash of the JWS algorithm:
/// SHA-256 for ES256 and RS256; SHA-512 for EdDSA, whose keys here are
/// always Ed25519 (the OpenID Connect working group's answer for Ed25519,
/// the hash Ed25519 itself uses).
pub fn token_hash(alg: SigningAlg, value: &str) -> String {
    match alg {
        SigningAlg::EdDsa => {
            let digest = Sha512::digest(value.as_bytes());
            crate::b64(&digest[..32])
        }
        SigningAlg::Es256 | SigningAlg::Rs256 => {
            let digest = Sha256::digest(value.as_bytes());
            crate::b64(&digest[..16])
        }
    }
}

/// The userinfo answer (Core §5.3.2) for the caller of a userinfo request:
/// `sub` and `preferred_username` (the user name), then the user's custom
/// claims as the access token carries them (`email` among them when the
/// user has one). Refused with [`Error::InsufficientScope`] when the token
/// was not granted `openid` or acts for no user (a client's own token:
/// userinfo is about an end-user).
pub fn userinfo(principal: &Principal) -> Result<Value> {
    if !principal.scopes.contains(SCOPE_OPENID) {
        return Err(Error::InsufficientScope(
            "the access token was not granted the `openid` scope".into(),
        ));
    }
    let Some(user) = principal.user() else {
        return Err(Error::InsufficientScope(
            "the access token acts for no user (a client's own token): userinfo describes users"
                .into(),
        ));
    };
    let mut out = Map::new();
    // Reserved names (and `preferred_username`) never reach the claims, so
    // nothing below overwrites what the server states.
    for (name, value) in &principal.claims {
        if !crate::is_reserved_claim(name) {
            out.insert(name.clone(), value.clone());
        }
    }
    out.insert("sub".into(), Value::String(user.to_string()));
    out.insert("preferred_username".into(), Value::String(user.to_string()));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::keys::{KeyCipher, KeyRing, generate_key};
    use crate::random::SeededRandom;
    use serde_json::json;

    fn ring(alg: SigningAlg) -> KeyRing {
        let cipher = KeyCipher::from_secret("0123456789abcdef0123456789abcdef").unwrap();
        let record = generate_key(alg, &cipher, &SeededRandom::new(7), 1_000).unwrap();
        let ring = KeyRing::empty();
        ring.load(&[record], &cipher, 1_000).unwrap();
        ring
    }

    fn input<'a>() -> IdTokenInput<'a> {
        IdTokenInput {
            issuer: "https://auth.example",
            subject: "alice",
            username: Some("alice"),
            profile: None,
            client_id: "spa",
            auth_time: 1_990,
            nonce: Some("n-0S6_WzA2Mj"),
            access_token: Some("the-access-token"),
            now: 2_000,
            idp: None,
        }
    }

    fn decode(part: &str) -> Value {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn at_hash_follows_the_signing_algorithm() {
        // Vectors computed independently: SHA-256 (RS256, ES256) and
        // SHA-512 (EdDSA with Ed25519), left half, base64url.
        let token = "YmJiZTAwYmYtMzgyOC00NzhkLTkyOTItNjJjNDM3MGYzOWIy9sFhvH8K_x8UIHj1osisS57f5DduL-ar_qw5jl3lthwpMjm283aVMQXDmoqqqydDSqJfbhptzw8rUVwkuQbolw";
        assert_eq!(
            token_hash(SigningAlg::Rs256, token),
            "x7vk7f6BvQj0jQHYFIk4ag"
        );
        assert_eq!(
            token_hash(SigningAlg::Es256, token),
            "x7vk7f6BvQj0jQHYFIk4ag"
        );
        assert_eq!(
            token_hash(SigningAlg::EdDsa, token),
            "EGEAhGYyfuwDaVTifvrWSoD5MSy_5hZPy6I7Vm-7pTQ"
        );
    }

    #[test]
    fn the_id_token_states_who_signed_in_for_whom() {
        for alg in [SigningAlg::EdDsa, SigningAlg::Es256, SigningAlg::Rs256] {
            let ring = ring(alg);
            let signer = ring.current(alg).unwrap();
            let token = id_token(&signer, &input()).unwrap();
            let parts: Vec<&str> = token.split('.').collect();
            assert_eq!(parts.len(), 3);
            assert_eq!(
                decode(parts[0]),
                json!({"alg": alg.as_str(), "kid": signer.kid(), "typ": "JWT"})
            );
            assert_eq!(
                decode(parts[1]),
                json!({
                    "iss": "https://auth.example",
                    "sub": "alice",
                    "aud": "spa",
                    "exp": 2_600,
                    "iat": 2_000,
                    "auth_time": 1_990,
                    "nonce": "n-0S6_WzA2Mj",
                    "at_hash": token_hash(alg, "the-access-token"),
                    "preferred_username": "alice",
                })
            );
            let verifier = ring.verifier(signer.kid(), 2_000).unwrap();
            let signing_input = &token[..parts[0].len() + 1 + parts[1].len()];
            let sig = {
                use base64::Engine;
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(parts[2])
                    .unwrap()
            };
            assert!(verifier.verify(signing_input.as_bytes(), &sig), "{alg:?}");
        }
    }

    #[test]
    fn nonce_at_hash_and_username_are_left_out_when_absent() {
        let ring = ring(SigningAlg::EdDsa);
        let token = id_token(
            &ring.current(SigningAlg::EdDsa).unwrap(),
            &IdTokenInput {
                nonce: None,
                access_token: None,
                username: None,
                ..input()
            },
        )
        .unwrap();
        let claims = decode(token.split('.').nth(1).unwrap());
        for absent in ["nonce", "at_hash", "preferred_username"] {
            assert!(claims.get(absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn an_id_token_is_no_access_token() {
        let ring = ring(SigningAlg::EdDsa);
        let token = id_token(&ring.current(SigningAlg::EdDsa).unwrap(), &input()).unwrap();
        assert!(matches!(
            crate::jwt::verify_signature(&ring, &token, 2_000),
            Err(Error::InvalidToken(_))
        ));
    }

    #[test]
    fn openid_is_found_among_granted_scopes() {
        assert!(grants_openid("openid"));
        assert!(grants_openid("read openid profile"));
        assert!(!grants_openid("read write"));
        assert!(!grants_openid("openid2 xopenid"));
        assert!(!grants_openid(""));
    }

    #[test]
    fn identity_scopes_need_only_the_client_data_scopes_both() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ceiling = user_scope_ceiling(
            &s(&["read", "write", "openid", "profile"]),
            &s(&["read", "admin", "email"]),
        );
        assert_eq!(ceiling.to_string(), "openid profile read");
        // A client not registered for `openid` never gets it.
        assert!(!user_scope_ceiling(&s(&["read"]), &s(&["read", "openid"])).contains("openid"));
    }

    fn user_principal(scopes: &[&str]) -> Principal {
        let mut claims = crate::Claims::new();
        claims.insert("org".into(), json!("acme"));
        claims.insert("email".into(), json!("alice@acme.example"));
        // Stored before the name was reserved: never shadows the server's.
        claims.insert("preferred_username".into(), json!("root"));
        Principal {
            subject: "alice".into(),
            subject_kind: Some(crate::IdentityKind::User),
            client_id: Some("spa".into()),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            scheme: crate::AuthScheme::Bearer,
            expires_at: Some(3_000),
            token_id: Some("j".into()),
            claims,
        }
    }

    #[test]
    fn userinfo_answers_for_users_with_openid_only() {
        assert_eq!(
            userinfo(&user_principal(&["openid", "read"])).unwrap(),
            json!({"sub": "alice", "preferred_username": "alice",
                   "org": "acme", "email": "alice@acme.example"})
        );
        assert!(matches!(
            userinfo(&user_principal(&["read", "write"])),
            Err(Error::InsufficientScope(_))
        ));
        let mut app = user_principal(&["openid"]);
        app.subject_kind = Some(crate::IdentityKind::Client);
        assert!(matches!(userinfo(&app), Err(Error::InsufficientScope(_))));
    }
}
