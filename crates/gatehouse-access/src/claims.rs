//! Which names a custom claim may have. One rule for the claims an
//! operator sets on a user (`gatehouse user set-claims`) and the `@claim`
//! fields of an account type, which the schema checks at load.

/// Longest claim name, in characters.
pub const MAX_CLAIM_NAME: usize = 64;

/// Names that are not custom claims: the registered JWT claims (RFC 7519
/// §4.1), those of RFC 9068 access tokens, RFC 8693 token exchange, RFC
/// 7800 confirmation, OpenID Connect (the ID token's `preferred_username`
/// included), the members of an RFC 7662
/// introspection answer, `idtyp` (which kind of identity `sub` is) and
/// `idp` (the identity provider of a federated sign-in). Refused as custom
/// claim names.
pub const RESERVED_CLAIMS: &[&str] = &[
    "iss",
    "sub",
    "aud",
    "exp",
    "nbf",
    "iat",
    "jti",
    "scope",
    "client_id",
    "cnf",
    "act",
    "may_act",
    "azp",
    "auth_time",
    "nonce",
    "at_hash",
    "c_hash",
    "acr",
    "amr",
    "sid",
    "preferred_username",
    "token_type",
    "username",
    "active",
    "idtyp",
    "idp",
];

/// The OpenID Connect claims the server fills from the row of an account
/// type (`name`, `email`, `email_verified`): no `@claim` field may take
/// them. Without an account type an operator may still set `email` as a
/// custom claim, which userinfo then shows.
pub const PROFILE_CLAIMS: &[&str] = &["name", "email", "email_verified"];

/// Whether `name` is a registered claim rather than a custom one.
pub fn is_reserved_claim(name: &str) -> bool {
    RESERVED_CLAIMS.contains(&name)
}

/// What is wrong with `name` as a custom claim name, if anything: it must
/// be `[A-Za-z_][A-Za-z0-9_:.-]*`, at most [`MAX_CLAIM_NAME`] characters,
/// and not in [`RESERVED_CLAIMS`].
pub fn claim_name_problem(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'));
    if !first_ok || !rest_ok || name.len() > MAX_CLAIM_NAME {
        return Some(format!(
            "invalid claim name {name:?}: use a letter or `_` followed by letters, digits, \
             `_`, `:`, `.` or `-`, at most {MAX_CLAIM_NAME} characters"
        ));
    }
    if is_reserved_claim(name) {
        return Some(format!(
            "claim name {name:?} is reserved (the server sets it); reserved: {}",
            RESERVED_CLAIMS.join(" ")
        ));
    }
    None
}
