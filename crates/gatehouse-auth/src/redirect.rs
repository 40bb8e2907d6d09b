//! Redirect URIs of the authorization code flow: which may be registered,
//! and the one rule for whether a presented `redirect_uri` is a registered
//! one of a client's ([`redirect_uri_matches`]). Every check of a redirect URI asks these
//! two functions; nothing else compares them.

use crate::error::{Error, Result};
use crate::model::{ClientRecord, GRAPHIQL_CLIENT_ID};

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

/// The same URI on the other loopback host names: for
/// `http://127.0.0.1:8080/graphql`, `http://localhost:8080/graphql` and
/// `http://[::1]:8080/graphql` (same port, same path; RFC 8252 §7.3 and
/// §8.3 name these hosts alike). Empty for a URI that is not plain `http`
/// on a loopback host. The built-in GraphiQL client registers its page
/// under every spelling ([`crate::ClientRecord::graphiql`]), so the page
/// signs in wherever on this machine it was opened.
pub fn loopback_aliases(uri: &str) -> Vec<String> {
    let Some(rest) = uri.strip_prefix("http://") else {
        return Vec::new();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => authority.split_at(i + 1),
            None => return Vec::new(),
        }
    } else {
        authority.split_at(authority.find(':').unwrap_or(authority.len()))
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    };
    if !port_ok {
        return Vec::new();
    }
    let hosts = [LOOPBACK_IPS[0], LOOPBACK_IPS[1], "localhost"];
    if !hosts.contains(&host) {
        return Vec::new();
    }
    hosts
        .into_iter()
        .filter(|h| *h != host)
        .map(|h| format!("http://{h}{port}{tail}"))
        .collect()
}

/// Whether `presented` (the `redirect_uri` of a request) is one of the
/// redirect URIs registered for `client`: the same string, byte for byte
/// (RFC 9700 §4.1.3: no normalization, no prefix match), except that for
/// `http` redirect URIs on the loopback addresses `127.0.0.1` and `[::1]`
/// of a registered client the port may differ (RFC 8252 §7.3: a native
/// app listens on whatever port the system gave it). The built-in GraphiQL
/// client is no native app: its page is served by this server on the
/// issuer's port, so its URIs match exactly, and any other port would hand
/// a code to whatever else listens on this machine.
pub fn redirect_uri_matches(client: &ClientRecord, presented: &str) -> bool {
    let any_loopback_port = client.client_id != GRAPHIQL_CLIENT_ID;
    client.redirect_uris.iter().any(|registered| {
        registered == presented
            || (any_loopback_port
                && match (loopback_parts(registered), loopback_parts(presented)) {
                    (Some(r), Some(p)) => r == p,
                    _ => false,
                })
    })
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

    /// A registered client with the one redirect URI `uri`.
    fn client(uri: &str) -> ClientRecord {
        let mut c = ClientRecord::graphiql(uri, Vec::new());
        c.client_id = "app".to_string();
        c.redirect_uris = vec![uri.to_string()];
        c
    }

    fn matches(registered: &str, presented: &str) -> bool {
        redirect_uri_matches(&client(registered), presented)
    }

    #[test]
    fn exact_match_except_loopback_ports() {
        let r = "https://app.example/cb";
        assert!(matches(r, r));
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
            assert!(!matches(r, other), "{other}");
        }
        let lo = "http://127.0.0.1/cb";
        assert!(matches(lo, "http://127.0.0.1:51234/cb"));
        assert!(matches("http://127.0.0.1:8000/cb", "http://127.0.0.1:9/cb"));
        assert!(matches("http://[::1]:1/cb", "http://[::1]/cb"));
        assert!(!matches(lo, "http://127.0.0.1:5/cb2"));
        assert!(!matches(lo, "http://127.0.0.1:5@evil.example/cb"));
        assert!(!matches(lo, "http://127.0.0.1.evil.example/cb"));
        assert!(!matches(lo, "http://[::1]/cb"));
        // `localhost` is matched exactly: any port only for the IP literals.
        assert!(!matches(
            "http://localhost:3000/cb",
            "http://localhost:3001/cb"
        ));
    }

    #[test]
    fn graphiql_matches_its_page_on_the_loopback_aliases_only() {
        let page = "http://127.0.0.1:8080/graphql";
        let g = ClientRecord::graphiql(page, Vec::new());
        for ok in [
            page,
            "http://localhost:8080/graphql",
            "http://[::1]:8080/graphql",
        ] {
            assert!(redirect_uri_matches(&g, ok), "{ok}");
        }
        for other in [
            "http://127.0.0.1:8081/graphql",
            "http://127.0.0.1/graphql",
            "http://127.0.0.1:80/graphql",
            "http://localhost/graphql",
            "http://[::1]:9/graphql",
            "http://127.0.0.1:8080/graphql/",
            "http://127.0.0.1:8080/cb",
            "http://0.0.0.0:8080/graphql",
        ] {
            assert!(!redirect_uri_matches(&g, other), "{other}");
        }
        // Not a loopback issuer: its one page, nothing else.
        let public = ClientRecord::graphiql("https://api.example/graphql", Vec::new());
        assert_eq!(public.redirect_uris, ["https://api.example/graphql"]);
    }

    #[test]
    fn loopback_aliases_keep_port_and_path() {
        assert_eq!(
            loopback_aliases("http://localhost/api/graphql?x=1"),
            [
                "http://127.0.0.1/api/graphql?x=1",
                "http://[::1]/api/graphql?x=1"
            ]
        );
        assert_eq!(
            loopback_aliases("http://[::1]:7/graphql"),
            ["http://127.0.0.1:7/graphql", "http://localhost:7/graphql"]
        );
        for none in [
            "https://127.0.0.1/graphql",
            "http://127.0.0.1.evil.example/graphql",
            "http://localhost@evil.example/graphql",
            "http://127.0.0.1:80@evil.example/graphql",
            "http://[::1/graphql",
            "http://example.com/graphql",
        ] {
            assert!(loopback_aliases(none).is_empty(), "{none}");
        }
    }
}
