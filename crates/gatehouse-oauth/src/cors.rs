//! Which browser origins may call the service (`[cors] allowed_origins`),
//! and the refusal of token, revocation and userinfo requests sent from any other
//! origin (`docs/design/browser-apps.md`).
//!
//! [`AllowedOrigins::allows`] is the one rule: the HTTP router's CORS
//! layer asks it whether a request gets CORS headers at all, and
//! [`refuse_foreign_origin`] asks it (plus the issuer's own origin) whether
//! a token, revocation or userinfo request is served.
//!
//! Origins are compared byte for byte with the configured ones, which are
//! held to the form browsers send (the ASCII serialization of an origin:
//! lowercase scheme and host, punycode, no default port, no path), so no
//! other spelling of an allowed origin is ever accepted.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::OAuthState;
use crate::error::OAuthError;

/// The configured `[cors] allowed_origins`: none (the default; no CORS at
/// all), a list of exact origins, or any origin (`"*"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedOrigins {
    any: bool,
    list: Arc<[String]>,
}

impl AllowedOrigins {
    /// Reads the configured list. `"*"` must stand alone; every other entry
    /// must be an `http` or `https` origin written as browsers send it
    /// (`scheme://host[:port]`, no path, query or trailing slash, no
    /// default port, lowercase). The error names the first bad value and,
    /// where there is one, the spelling to write instead.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
        if items.contains(&"*") {
            if items.len() > 1 {
                return Err("\"*\" allows every origin and must be the only entry".into());
            }
            return Ok(Self {
                any: true,
                list: Arc::from([]),
            });
        }
        let mut list = Vec::with_capacity(items.len());
        for item in items {
            let canonical = origin_of(item).ok_or_else(|| {
                format!("{item:?} is not an origin: write scheme://host[:port], e.g. \"https://app.example\"")
            })?;
            if canonical != item {
                return Err(format!(
                    "{item:?} is not an origin as browsers send it: write {canonical:?}"
                ));
            }
            if !list.iter().any(|o: &String| o == item) {
                list.push(canonical);
            }
        }
        Ok(Self {
            any: false,
            list: list.into(),
        })
    }

    /// Any origin is allowed (`"*"`).
    pub fn is_any(&self) -> bool {
        self.any
    }

    /// No origin is allowed (nothing configured): the service answers no
    /// CORS request.
    pub fn is_empty(&self) -> bool {
        !self.any && self.list.is_empty()
    }

    /// Whether a request whose `Origin` header reads `origin` may be
    /// served to a page of that origin. Exact bytes: `null`, a trailing
    /// slash, an explicit default port or another case are other origins.
    pub fn allows(&self, origin: &[u8]) -> bool {
        self.any || self.list.iter().any(|o| o.as_bytes() == origin)
    }

    /// Whether a request that the server acts on (a token, revocation or
    /// userinfo request; a WebSocket upgrade) may be served given its
    /// `Origin` headers: none (a client that is not a browser), or exactly
    /// one that is allowed or is one of the server's own (`own`: the
    /// issuer's origin, [`origin_of`], or those the client may have
    /// addressed, `origin::own_origins`). Two `Origin` headers are
    /// refused: browsers send one.
    pub fn permits_request<S: AsRef<str>>(&self, own: &[S], headers: &HeaderMap) -> bool {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let Some(origin) = origins.next() else {
            return true;
        };
        if origins.next().is_some() {
            return false;
        }
        let origin = origin.as_bytes();
        own.iter().any(|own| own.as_ref().as_bytes() == origin) || self.allows(origin)
    }
}

/// The ASCII serialization of the origin of an `http` or `https` URL
/// (`https://app.example`, `http://127.0.0.1:8080`), as browsers send it
/// in `Origin`; `None` for anything else (other schemes, which have
/// opaque origins, and text that is not a URL).
pub fn origin_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    Some(parsed.origin().ascii_serialization())
}

/// Middleware of the token, revocation and userinfo endpoints: a request whose `Origin` is neither allowed nor the issuer's own
/// is refused with 403 `invalid_request` before anything else is read, so a
/// page elsewhere cannot even make the server act on a token or a password
/// (the browser hiding the answer is not enough). Clients that send no
/// `Origin` are served as before.
pub(crate) async fn refuse_foreign_origin(
    State(state): State<OAuthState>,
    req: Request,
    next: Next,
) -> Response {
    let config = &state.inner.config;
    if config
        .allowed_origins
        .permits_request(state.inner.own_origin.as_slice(), req.headers())
    {
        next.run(req).await
    } else {
        tracing::info!("request from an origin that is not allowed refused");
        OAuthError::ForeignOrigin.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn origins_are_held_to_the_form_browsers_send() {
        let ok = AllowedOrigins::parse(&["https://app.example", "http://localhost:5173"]).unwrap();
        assert!(ok.allows(b"https://app.example"));
        assert!(ok.allows(b"http://localhost:5173"));
        for other in [
            "https://app.example/",
            "https://app.example:443",
            "https://APP.example",
            "http://app.example",
            "https://app.example.evil.com",
            "null",
            "",
        ] {
            assert!(!ok.allows(other.as_bytes()), "{other}");
        }
        for (bad, hint) in [
            ("https://app.example/", "write \"https://app.example\""),
            ("https://app.example:443", "write \"https://app.example\""),
            ("https://App.Example", "write \"https://app.example\""),
            ("https://app.example/spa", "write \"https://app.example\""),
            ("app.example", "is not an origin"),
            ("null", "is not an origin"),
            ("file:///index.html", "is not an origin"),
            ("capacitor://localhost", "is not an origin"),
        ] {
            let e = AllowedOrigins::parse(&[bad]).unwrap_err();
            assert!(
                e.contains(&format!("{bad:?}")) && e.contains(hint),
                "{bad}: {e}"
            );
        }
        let e = AllowedOrigins::parse(&["*", "https://app.example"]).unwrap_err();
        assert!(e.contains("only entry"), "{e}");
        let any = AllowedOrigins::parse(&["*"]).unwrap();
        assert!(any.is_any() && any.allows(b"https://anything.example"));
        assert!(AllowedOrigins::parse::<&str>(&[]).unwrap().is_empty());
    }

    #[test]
    fn no_origin_the_own_origin_and_allowed_origins_are_permitted() {
        let allowed = AllowedOrigins::parse(&["https://app.example"]).unwrap();
        let own = Some("https://auth.example");
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::ORIGIN, HeaderValue::from_str(v).unwrap());
            }
            allowed.permits_request(own.as_slice(), &h)
        };
        assert!(with(&[]));
        assert!(with(&["https://app.example"]));
        assert!(with(&["https://auth.example"]));
        assert!(!with(&["https://evil.example"]));
        assert!(!with(&["null"]));
        assert!(!with(&["https://app.example", "https://app.example"]));
        let mut h = HeaderMap::new();
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://auth.example"),
        );
        assert!(!AllowedOrigins::default().permits_request(&[] as &[&str], &h));
    }
}
