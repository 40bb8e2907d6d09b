//! Custom claims of a user (`org = "acme"`): stored on the user record,
//! copied as top-level claims into the access tokens issued for the user,
//! and handed to row policies through [`crate::Principal::claim`].
//!
//! A custom claim can never shadow a claim the token format gives meaning
//! to: those names are refused when the claims are set, so a token's
//! `sub`, `scope` or `act` always mean what the server wrote.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A user's custom claims: names to strings, numbers or booleans.
pub type Claims = Map<String, Value>;

/// Most custom claims one user may have.
pub const MAX_CLAIMS: usize = 32;
pub use gatehouse_access::MAX_CLAIM_NAME;
/// Longest string value, in characters.
pub const MAX_CLAIM_VALUE: usize = 256;
/// Largest set of claims as JSON, in bytes: the claims ride in every access
/// token, and a token must stay far below what headers and the token
/// parser accept (16 KiB).
pub const MAX_CLAIMS_JSON: usize = 4096;

pub use gatehouse_access::{RESERVED_CLAIMS, is_reserved_claim};

/// Checks one claim name ([`gatehouse_access::claim_name_problem`]).
pub fn check_claim_name(name: &str) -> Result<()> {
    match gatehouse_access::claim_name_problem(name) {
        Some(problem) => Err(Error::InvalidInput(problem.into())),
        None => Ok(()),
    }
}

/// Checks a whole set of custom claims: valid names, at most
/// [`MAX_CLAIMS`] of them, values that are strings (at most
/// [`MAX_CLAIM_VALUE`] characters), numbers or booleans, and at most
/// [`MAX_CLAIMS_JSON`] bytes in all.
pub fn check_claims(claims: &Claims) -> Result<()> {
    if claims.len() > MAX_CLAIMS {
        return Err(Error::InvalidInput(
            format!("at most {MAX_CLAIMS} claims per user").into(),
        ));
    }
    for (name, value) in claims {
        check_claim_name(name)?;
        match value {
            Value::String(s) if s.chars().count() > MAX_CLAIM_VALUE => {
                return Err(Error::InvalidInput(
                    format!("claim {name:?}: a value has at most {MAX_CLAIM_VALUE} characters")
                        .into(),
                ));
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
            _ => {
                return Err(Error::InvalidInput(
                    format!("claim {name:?}: a value is a string, a number or a boolean").into(),
                ));
            }
        }
    }
    let size = serde_json::to_string(claims).map_or(usize::MAX, |s| s.len());
    if size > MAX_CLAIMS_JSON {
        return Err(Error::InvalidInput(
            format!("the claims take {size} bytes as JSON; at most {MAX_CLAIMS_JSON}").into(),
        ));
    }
    Ok(())
}

/// The custom claims among the members of a JSON object (a token's
/// claims or an introspection answer): everything not reserved.
pub fn custom_claims<'a>(members: impl IntoIterator<Item = (&'a String, &'a Value)>) -> Claims {
    members
        .into_iter()
        .filter(|(k, _)| !is_reserved_claim(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Parses `NAME=VALUE` (the CLI's `--claim` and `set-claims`). The value
/// is taken as a string, whatever it looks like; the name is checked.
pub fn parse_claim_pair(pair: &str) -> Result<(String, Value)> {
    let Some((name, value)) = pair.split_once('=') else {
        return Err(Error::InvalidInput(
            format!("expected NAME=VALUE, got {pair:?}").into(),
        ));
    };
    check_claim_name(name)?;
    Ok((name.to_string(), Value::String(value.to_string())))
}

/// Builds a claim set from `NAME=VALUE` pairs (a repeated name keeps the
/// last value) and checks it as a whole.
pub fn claims_from_pairs<S: AsRef<str>>(pairs: &[S]) -> Result<Claims> {
    let mut claims = Claims::new();
    for p in pairs {
        let (name, value) = parse_claim_pair(p.as_ref())?;
        claims.insert(name, value);
    }
    check_claims(&claims)?;
    Ok(claims)
}
