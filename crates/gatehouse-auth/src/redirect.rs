//! Redirect URIs of the authorization code flow: which may be registered,
//! and the one rule for whether a presented `redirect_uri` is a registered
//! one ([`redirect_uri_matches`]). Every check of a redirect URI asks these
//! two functions; nothing else compares them.

use crate::error::{Error, Result};

/// Longest redirect URI accepted at registration.
pub const MAX_REDIRECT_URI: usize = 2048;

/// Loopback hosts whose `http` redirect URIs match on any port (RFC 8252
/// §7.3: a native app listens on whatever port the system gave it).
const LOOPBACK_IPS: [&str; 2] = ["127.0.0.1", "[::1]"];

/// Schemes that run code or read local data in the browser: never a
/// redirect target.
const FORBIDDEN_SCHEMES: [&str; 5] = ["javascript", "data", "vbscript", "file", "blob"];

/// Checks a redirect URI at registration (RFC 6749 §3.1.2, RFC 8252 §7,
/// RFC 9700 §2.1): an absolute URI without fragment, userinfo, spaces or
/// control characters; `https`, `http` only on a loopback host
/// (`127.0.0.1`, `[::1]`, `localhost`), or a private-use scheme of a native
/// app named after a domain (`com.example.app:/callback`, RFC 8252 §7.1).
/// Stored exactly as given: matching compares strings, never normalized
/// forms.
pub fn check_redirect_uri(uri: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidInput(
            format!("redirect URI {uri:?}: {why}").into(),
        ))
    };
    if uri.is_empty() || uri.len() > MAX_REDIRECT_URI {
        return bad(&format!("must be 1 to {MAX_REDIRECT_URI} bytes"));
    }
    if !uri.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
        return bad("only visible ASCII characters (percent-encode the others)");
    }
    if uri.contains('#') {
        return bad("must not have a fragment (RFC 6749 §3.1.2)");
    }
    if uri.contains('\\') {
        return bad("must not contain a backslash");
    }
    let Ok(parsed) = url::Url::parse(uri) else {
        return bad("must be an absolute URI");
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return bad("must not carry user information");
    }
    let scheme = parsed.scheme();
    if FORBIDDEN_SCHEMES.contains(&scheme) {
        return bad("this scheme cannot be a redirect target");
    }
    match scheme {
        "https" => {
            if parsed.host_str().is_none_or(str::is_empty) {
                return bad("needs a host");
            }
            Ok(())
        }
        "http" => {
            let host = parsed.host_str().unwrap_or("");
            if LOOPBACK_IPS.contains(&host) || host == "localhost" {
                Ok(())
            } else {
                bad("plain http is allowed only for loopback hosts (127.0.0.1, [::1], localhost)")
            }
        }
        // RFC 8252 §7.1: a private-use scheme is a reverse domain name.
        s if s.contains('.') => Ok(()),
        _ => bad("use https, http on a loopback host, or a reverse-domain private-use scheme"),
    }
}

/// Splits `http://127.0.0.1:PORT/rest` (or `[::1]`) into the part before
/// the port and the part after it; `None` for any other URI.
fn loopback_parts(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix("http://")?;
    let host = LOOPBACK_IPS.into_iter().find(|h| rest.starts_with(h))?;
    let prefix = &uri[.."http://".len() + host.len()];
    let after = &rest[host.len()..];
    let after = match after.strip_prefix(':') {
        Some(port_and_rest) => {
            let digits = port_and_rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 5 {
                return None;
            }
            &port_and_rest[digits..]
        }
        None => after,
    };
    // After the host comes the path, the query or nothing: anything else
    // (`@`, more host) is not this loopback URI.
    if !(after.is_empty() || after.starts_with('/') || after.starts_with('?')) {
        return None;
    }
    Some((prefix, after))
}

/// Whether `presented` (the `redirect_uri` of a request) is the registered
/// redirect URI `registered`: the same string, byte for byte (RFC 9700
/// §4.1.3: no normalization, no prefix match), except that for `http`
/// redirect URIs on the loopback addresses `127.0.0.1` and `[::1]` the port
/// may differ (RFC 8252 §7.3).
pub fn redirect_uri_matches(registered: &str, presented: &str) -> bool {
    if registered == presented {
        return true;
    }
    match (loopback_parts(registered), loopback_parts(presented)) {
        (Some(r), Some(p)) => r == p,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_rules() {
        for ok in [
            "https://app.example/cb",
            "https://app.example:8443/cb?x=1",
            "http://127.0.0.1/cb",
            "http://127.0.0.1:7000/cb",
            "http://[::1]/cb",
            "http://localhost:3000/",
            "com.example.app:/oauth",
        ] {
            assert!(check_redirect_uri(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/relative",
            "https://app.example/cb#frag",
            "http://app.example/cb",
            "javascript:alert(1)",
            "data:text/html,x",
            "https://user@app.example/cb",
            "https://app.example/c b",
            "https://app.example\\@evil.example/",
            "myapp:/cb",
        ] {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exact_match_except_loopback_ports() {
        let r = "https://app.example/cb";
        assert!(redirect_uri_matches(r, r));
        for other in [
            "https://APP.example/cb",
            "https://app.example/cb/",
            "https://app.example/cb/x",
            "https://app.example/%63b",
            "https://app.example:443/cb",
            "https://app.example/cb?x=1",
            "https://app.example@evil.example/cb",
            "https://app.example\\@evil.example/cb",
            "https://app.example.evil.example/cb",
        ] {
            assert!(!redirect_uri_matches(r, other), "{other}");
        }
        let lo = "http://127.0.0.1/cb";
        assert!(redirect_uri_matches(lo, "http://127.0.0.1:51234/cb"));
        assert!(redirect_uri_matches(
            "http://127.0.0.1:8000/cb",
            "http://127.0.0.1:9/cb"
        ));
        assert!(redirect_uri_matches("http://[::1]:1/cb", "http://[::1]/cb"));
        assert!(!redirect_uri_matches(lo, "http://127.0.0.1:5/cb2"));
        assert!(!redirect_uri_matches(
            lo,
            "http://127.0.0.1:5@evil.example/cb"
        ));
        assert!(!redirect_uri_matches(
            lo,
            "http://127.0.0.1.evil.example/cb"
        ));
        assert!(!redirect_uri_matches(lo, "http://[::1]/cb"));
        // `localhost` is matched exactly: any port only for the IP literals.
        assert!(!redirect_uri_matches(
            "http://localhost:3000/cb",
            "http://localhost:3001/cb"
        ));
    }
}
