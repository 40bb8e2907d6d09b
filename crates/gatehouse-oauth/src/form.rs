//! Request parsing: the form body (RFC 6749 §3.2: form-encoded, no repeated
//! parameters) and HTTP Basic client credentials (RFC 6749 §2.3.1).

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use base64::Engine;

use gatehouse_auth::Error;

/// Parameters that RFC 8693 §2.1 allows more than once.
const REPEATABLE: [&str; 2] = ["audience", "resource"];

/// The parameters of a form body.
#[derive(Debug, Default)]
pub(crate) struct Params {
    values: HashMap<String, Vec<String>>,
}

impl Params {
    /// A single-valued parameter; empty values count as omitted (RFC 6749 §3.1).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.first())
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Every non-empty value of a repeatable parameter.
    pub(crate) fn all(&self, name: &str) -> Vec<String> {
        self.values
            .get(name)
            .map(|v| v.iter().filter(|s| !s.is_empty()).cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn owned(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_string)
    }
}

/// Whether the request says its body is `application/x-www-form-urlencoded`
/// (parameters such as `charset` are allowed).
pub(crate) fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| {
            essence
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// Parses a form body, refusing repeated parameters (RFC 6749 §3.2: "MUST NOT
/// be included more than once") except the RFC 8693 repeatable ones.
pub(crate) fn parse_form(body: &[u8]) -> Result<Params, Error> {
    let mut values: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in form_urlencoded::parse(body) {
        let entry = values.entry(k.to_string()).or_default();
        if !entry.is_empty() && !REPEATABLE.contains(&k.as_ref()) {
            return Err(Error::InvalidRequest(
                format!("parameter `{}` is repeated", printable(&k)).into(),
            ));
        }
        entry.push(v.into_owned());
    }
    Ok(Params { values })
}

/// A parameter name safe to echo in an error: short, visible ASCII.
fn printable(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// Client credentials from an `Authorization: Basic` header.
pub(crate) struct BasicCredentials {
    /// The client id, form-decoded.
    pub(crate) client_id: String,
    /// The secret, form-decoded.
    pub(crate) secret: String,
    /// The secret exactly as sent, for clients that do not form-encode.
    pub(crate) raw_secret: String,
}

/// Outcome of looking for Basic credentials.
pub(crate) enum Basic {
    /// No `Authorization: Basic` header.
    Missing,
    /// A Basic header that cannot be decoded.
    Malformed,
    /// Credentials.
    Present(BasicCredentials),
}

/// RFC 6749 §2.3.1: id and secret are form-encoded, then joined with `:`
/// and base64-encoded (RFC 7617).
pub(crate) fn basic_credentials(headers: &HeaderMap) -> Basic {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Basic::Missing;
    };
    let value = value.trim();
    let Some((scheme, rest)) = value.split_once(' ') else {
        return Basic::Missing;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Basic::Missing;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest.trim()) else {
        return Basic::Malformed;
    };
    let Ok(text) = String::from_utf8(decoded) else {
        return Basic::Malformed;
    };
    let Some((id, secret)) = text.split_once(':') else {
        return Basic::Malformed;
    };
    let (Some(client_id), Some(secret_decoded)) = (form_decode(id), form_decode(secret)) else {
        return Basic::Malformed;
    };
    if client_id.is_empty() {
        return Basic::Malformed;
    }
    Basic::Present(BasicCredentials {
        client_id,
        secret: secret_decoded,
        raw_secret: secret.to_string(),
    })
}

/// `application/x-www-form-urlencoded` decoding of one component: `+` is a
/// space, `%XY` a byte. A `%` not followed by two hex digits is kept as is
/// (lenient towards clients that do not encode), as `percent_decode` does.
fn form_decode(s: &str) -> Option<String> {
    // `+` is replaced before decoding, so an encoded `%2B` stays a `+`.
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_decoding() {
        assert_eq!(form_decode("a%3Ab+c").as_deref(), Some("a:b c"));
        assert_eq!(form_decode("100%").as_deref(), Some("100%"));
        assert_eq!(form_decode("%zz%4").as_deref(), Some("%zz%4"));
        assert_eq!(form_decode("%41%42").as_deref(), Some("AB"));
        assert_eq!(form_decode("%FF"), None);
        assert_eq!(form_decode("a%2Bb+c").as_deref(), Some("a+b c"));
    }

    #[test]
    fn repeated_parameters() {
        assert!(parse_form(b"grant_type=password&grant_type=password").is_err());
        let p = parse_form(b"audience=a&audience=b&resource=c&scope=").unwrap();
        assert_eq!(p.all("audience"), vec!["a", "b"]);
        assert_eq!(p.get("scope"), None);
    }

    #[test]
    fn basic_header() {
        let mut h = HeaderMap::new();
        let enc = base64::engine::general_purpose::STANDARD.encode("my%20app:s%3Acret+x");
        h.insert(
            header::AUTHORIZATION,
            format!("Basic {enc}").parse().unwrap(),
        );
        let Basic::Present(c) = basic_credentials(&h) else {
            panic!("expected credentials")
        };
        assert_eq!(c.client_id, "my app");
        assert_eq!(c.secret, "s:cret x");
        assert_eq!(c.raw_secret, "s%3Acret+x");
        h.insert(header::AUTHORIZATION, "Basic !!!".parse().unwrap());
        assert!(matches!(basic_credentials(&h), Basic::Malformed));
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert!(matches!(basic_credentials(&h), Basic::Missing));
    }
}
