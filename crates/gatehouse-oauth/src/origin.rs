//! Who is calling: the client's address, and the scheme and host it used,
//! for every rate limit, the failed-login throttle, the request log and
//! OAuth 1.0 signature base strings.
//!
//! Behind a load balancer the connection's peer is the proxy, not the
//! client. The proxy says who the client is in `Forwarded` (RFC 7239) or
//! `X-Forwarded-For` / `-Proto` / `-Host`, but anyone can send those
//! headers, so they are read only when the peer is one of the configured
//! `trusted_proxies`, and only the one family the proxies write
//! ([`ForwardedHeader`], `X-Forwarded-For` unless configured otherwise):
//! proxies append to their own family and pass the other through as the
//! client wrote it. Each trusted proxy appends the address it received
//! the request from; walking the list from the right, every hop added by a
//! trusted proxy is believed, and the first address that is not a trusted
//! proxy is the client (the right-most untrusted hop). Entries to its left
//! were written by the client itself and are ignored.
//!
//! [`layer`] resolves this once per request and stores a [`ClientOrigin`]
//! in the request's extensions; [`client_addr`] is the one function every
//! consumer of the caller's address calls. It is also where a request that
//! names its host twice is refused (RFC 9112 §3.2: 400), before any route
//! reads either.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::http::{Extensions, HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;

/// Which forwarding headers the trusted proxies write. Only that family
/// is read: nginx, HAProxy and AWS ALB append to `X-Forwarded-For` and
/// pass a client's `Forwarded` through untouched, so reading both (or
/// preferring `Forwarded`) would let a client choose its own address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`, with `X-Forwarded-Proto` and `X-Forwarded-Host`
    /// (the default).
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239): `for`, `proto` and `host` of each hop.
    Forwarded,
}

impl ForwardedHeader {
    /// The configuration's spelling: `X-Forwarded-For` or `Forwarded`
    /// (any case).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(Self::XForwardedFor),
            "forwarded" => Ok(Self::Forwarded),
            _ => Err(format!(
                "{text:?} is not a forwarding header: use \"X-Forwarded-For\" or \"Forwarded\""
            )),
        }
    }

    /// The header's name, as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::XForwardedFor => "X-Forwarded-For",
            Self::Forwarded => "Forwarded",
        }
    }
}

/// The proxies whose forwarding headers are believed (CIDRs), and which
/// header family they write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    header: ForwardedHeader,
}

impl TrustedProxies {
    /// Parses `10.0.0.0/8`-style CIDRs; a bare address is a one-address
    /// network. The error names the first entry that is neither.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut nets = Vec::with_capacity(entries.len());
        for entry in entries {
            let text = entry.as_ref().trim();
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    format!("{text:?} is not a CIDR (e.g. 10.0.0.0/8) or an IP address")
                })?;
            nets.push(net.trunc());
        }
        Ok(Self {
            nets,
            header: ForwardedHeader::default(),
        })
    }

    /// The same proxies, writing `header` instead.
    pub fn with_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The header family read from these proxies.
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// Whether no proxy is trusted (the forwarding headers are never read).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `addr` is a trusted proxy. An IPv4-mapped IPv6 address
    /// (`::ffff:10.0.0.1`, what a dual-stack socket reports) counts as the
    /// IPv4 address.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        self.nets.iter().any(|n| n.contains(&addr))
    }
}

fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// Where a request came from, as far as it can be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOrigin {
    /// The client's address: the peer, or the right-most untrusted hop of
    /// the forwarding headers when the peer is a trusted proxy.
    pub addr: IpAddr,
    /// `http` or `https` as the client used it, from a trusted proxy.
    pub scheme: Option<String>,
    /// The `host[:port]` the client addressed, from a trusted proxy.
    pub host: Option<String>,
}

/// One hop of the forwarding headers.
#[derive(Debug, Default)]
struct Hop {
    /// `None` for `unknown`, an obfuscated identifier or garbage.
    addr: Option<IpAddr>,
    proto: Option<String>,
    host: Option<String>,
}

/// Resolves the client of a request that arrived from `peer`.
pub fn resolve(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> ClientOrigin {
    let peer = canonical(peer);
    let mut origin = ClientOrigin {
        addr: peer,
        scheme: None,
        host: None,
    };
    if !trusted.contains(peer) {
        return origin;
    }
    let hops = match trusted.header {
        ForwardedHeader::Forwarded => forwarded_hops(headers),
        ForwardedHeader::XForwardedFor => x_forwarded_hops(headers),
    };
    let mut used = None;
    for hop in hops.iter().rev() {
        if !trusted.contains(origin.addr) {
            break;
        }
        // A hop without a usable address ends the walk at the last trusted
        // proxy: nothing to its left can be told apart from a forgery.
        let Some(addr) = hop.addr else { break };
        origin.addr = canonical(addr);
        used = Some(hop);
    }
    if let Some(hop) = used {
        origin.scheme = hop.proto.clone();
        origin.host = hop.host.clone();
    }
    origin
}

/// Every value of `name`, joined as one comma-separated list (RFC 9110 §5.3).
fn joined(headers: &HeaderMap, name: impl axum::http::header::AsHeaderName) -> String {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

/// RFC 7239 §4: `Forwarded: for=192.0.2.60;proto=http;host=a.example, for="[2001:db8::1]:4711"`.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Hop> {
    let text = joined(headers, header::FORWARDED);
    split_outside_quotes(&text, ',')
        .into_iter()
        .map(|element| {
            let mut hop = Hop::default();
            for pair in split_outside_quotes(element, ';') {
                let Some((name, value)) = pair.split_once('=') else {
                    continue;
                };
                let value = unquote(value.trim());
                match name.trim().to_ascii_lowercase().as_str() {
                    "for" => hop.addr = node_addr(&value),
                    "proto" => hop.proto = scheme(&value),
                    "host" => hop.host = host(&value),
                    _ => {}
                }
            }
            hop
        })
        .collect()
}

/// `X-Forwarded-For: client, proxy1` with `X-Forwarded-Proto` and
/// `X-Forwarded-Host`, which carry no per-hop list in practice: their
/// right-most value (from the nearest proxy) goes with the client's hop.
fn x_forwarded_hops(headers: &HeaderMap) -> Vec<Hop> {
    let last = |name: &str| {
        joined(headers, name)
            .rsplit(',')
            .next()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let proto = last("x-forwarded-proto").and_then(|p| scheme(&p));
    let forwarded_host = last("x-forwarded-host").and_then(|h| host(&h));
    joined(headers, "x-forwarded-for")
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| Hop {
            addr: node_addr(v),
            proto: proto.clone(),
            host: forwarded_host.clone(),
        })
        .collect()
}

fn split_outside_quotes(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(text[start..i].trim());
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn unquote(value: &str) -> String {
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => value.to_string(),
    }
}

/// RFC 7239 §6: `192.0.2.43`, `192.0.2.43:47011`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`; also a bare IPv6 address as X-Forwarded-For has it.
fn node_addr(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = node.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse().ok()
}

fn scheme(value: &str) -> Option<String> {
    let v = value.to_ascii_lowercase();
    matches!(v.as_str(), "http" | "https").then_some(v)
}

/// A `host[:port]` made of the characters a host name, an IPv4 or a
/// bracketed IPv6 address and a port may have; anything else is dropped.
fn host(value: &str) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= 255
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    ok.then(|| value.to_ascii_lowercase())
}

/// Middleware (outermost): refuses a request with more than one `Host`
/// header (RFC 9112 §3.2: 400; the routes that read the host, OAuth 1.0
/// base strings and WebSocket origins, would otherwise each pick one), then
/// resolves the request's [`ClientOrigin`] from its peer (`ConnectInfo`)
/// and the forwarding headers, and stores it in the request's extensions
/// for [`client_addr`] and [`client_origin`].
pub async fn layer(
    State(trusted): State<Arc<TrustedProxies>>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.headers().get_all(header::HOST).iter().nth(1).is_some() {
        return (
            StatusCode::BAD_REQUEST,
            [(header::CACHE_CONTROL, "no-store")],
            "send one Host header (RFC 9112 §3.2)\n",
        )
            .into_response();
    }
    if let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
    {
        let origin = resolve(peer, req.headers(), &trusted);
        req.extensions_mut().insert(origin);
    }
    next.run(req).await
}

/// The caller's address, for rate limits, the failed-login throttle and
/// logs: the [`ClientOrigin`] that [`layer`] resolved, else the connection's
/// peer; `None` when neither is known (a request built in-process).
pub fn client_addr(extensions: &Extensions) -> Option<IpAddr> {
    match extensions.get::<ClientOrigin>() {
        Some(origin) => Some(origin.addr),
        None => extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| canonical(c.0.ip())),
    }
}

/// What [`layer`] resolved, when it ran.
pub fn client_origin(extensions: &Extensions) -> Option<&ClientOrigin> {
    extensions.get::<ClientOrigin>()
}

/// The OAuth 1.0 request to verify (RFC 5849 §3.4.1), from a request's
/// parts and (form) body: the base string URI is the URL the client used
/// ([`signing_uris`]) with the path as the client sent it (base path
/// included). The one place both the OAuth 1.0 endpoints and signed
/// resource requests read what is signed.
pub fn signed_request(
    issuer: &str,
    parts: &axum::http::request::Parts,
    form_body: Option<&[u8]>,
) -> Result<gatehouse_auth::oauth1::SignedRequest, gatehouse_auth::Error> {
    let uri = parts
        .extensions
        .get::<axum::extract::OriginalUri>()
        .map(|o| o.0.clone())
        .unwrap_or_else(|| parts.uri.clone());
    let uris = signing_uris(issuer, &parts.extensions, &parts.headers, uri.path());
    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    gatehouse_auth::oauth1::SignedRequest::parse(
        parts.method.as_str(),
        uris,
        uri.query(),
        authorization,
        form_body,
    )
}

/// The OAuth 1.0 base string URIs a request may have been signed with
/// (RFC 5849 §3.4.1.2): the URL the client used according to a trusted
/// proxy (its scheme and host) first, then those of
/// [`gatehouse_auth::oauth1::candidate_uris`] (the issuer's, and the `Host`
/// header's under the issuer's scheme).
pub fn signing_uris(
    issuer: &str,
    extensions: &Extensions,
    headers: &HeaderMap,
    path: &str,
) -> Vec<String> {
    let host_header = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let mut uris = Vec::new();
    if let Some(origin) = client_origin(extensions)
        && (origin.scheme.is_some() || origin.host.is_some())
    {
        let (issuer_scheme, rest) = issuer.split_once("://").unwrap_or(("http", issuer));
        let issuer_authority = rest.split('/').next().unwrap_or(rest);
        let scheme = origin.scheme.as_deref().unwrap_or(issuer_scheme);
        let authority = origin
            .host
            .as_deref()
            .or(host_header)
            .unwrap_or(issuer_authority);
        if let Some(uri) = gatehouse_auth::oauth1::base_string_uri(scheme, authority, path) {
            uris.push(uri);
        }
    }
    for uri in gatehouse_auth::oauth1::candidate_uris(issuer, host_header, path) {
        if !uris.contains(&uri) {
            uris.push(uri);
        }
    }
    uris
}

/// The origins (`scheme://host[:port]`) a client may have addressed this
/// server by, as [`signing_uris`] reads the URL it used (a trusted proxy's
/// scheme and host, the issuer's, the `Host` header's under the issuer's
/// scheme): what a browser's `Origin` says when a page of this server
/// itself makes the request. For checks of requests that CORS does not
/// cover, such as WebSocket upgrades.
pub fn own_origins(issuer: &str, extensions: &Extensions, headers: &HeaderMap) -> Vec<String> {
    let mut origins: Vec<String> = Vec::new();
    for uri in signing_uris(issuer, extensions, headers, "/") {
        if let Some(origin) = crate::cors::origin_of(&uri)
            && !origins.contains(&origin)
        {
            origins.push(origin);
        }
    }
    origins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::parse(&["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]).unwrap()
    }

    #[test]
    fn parses_cidrs_and_bare_addresses_and_names_a_bad_entry() {
        let t = trusted();
        assert!(t.contains(ip("10.1.2.3")));
        assert!(t.contains(ip("::ffff:10.1.2.3")));
        assert!(t.contains(ip("192.0.2.7")));
        assert!(!t.contains(ip("192.0.2.8")));
        assert!(t.contains(ip("2001:db8::5")));
        let e = TrustedProxies::parse(&["10.0.0.0/8", "10.0.0.0/33"]).unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        assert!(TrustedProxies::parse(&["proxy.example"]).is_err());
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=5.6.7.8;proto=https;host=evil.example"),
        ]);
        let o = resolve(ip("203.0.113.9"), &h, &trusted());
        assert_eq!(
            o,
            ClientOrigin {
                addr: ip("203.0.113.9"),
                scheme: None,
                host: None
            }
        );
        // No proxy trusted: the same.
        let o = resolve(ip("10.0.0.1"), &h, &TrustedProxies::default());
        assert_eq!(o.addr, ip("10.0.0.1"));
    }

    #[test]
    fn x_forwarded_for_from_a_trusted_peer_gives_the_rightmost_untrusted_hop() {
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.0.0.2"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "api.example"),
        ]);
        let o = resolve(ip("10.0.0.1"), &h, &trusted());
        assert_eq!(
            o.addr,
            ip("198.51.100.4"),
            "the spoofed 6.6.6.6 is left of the client"
        );
        assert_eq!(o.scheme.as_deref(), Some("https"));
        assert_eq!(o.host.as_deref(), Some("api.example"));
        // Two header lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.4"),
        ]);
        assert_eq!(
            resolve(ip("10.0.0.1"), &h, &trusted()).addr,
            ip("198.51.100.4")
        );
        // Only proxies: the left-most one is as far as it goes.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.2")]);
        assert_eq!(resolve(ip("10.0.0.1"), &h, &trusted()).addr, ip("10.9.9.9"));
    }

    #[test]
    fn only_the_configured_header_family_is_read() {
        // The proxy appended to X-Forwarded-For; the client wrote Forwarded.
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.4"),
            ("forwarded", "for=6.6.6.6;proto=https;host=evil.example"),
        ]);
        let o = resolve(ip("10.0.0.1"), &h, &trusted());
        assert_eq!(
            (o.addr, o.scheme, o.host),
            (ip("198.51.100.4"), None, None),
            "the default reads X-Forwarded-For only"
        );
        // A proxy that writes Forwarded: X-Forwarded-* is the client's.
        let fwd = trusted().with_header(ForwardedHeader::Forwarded);
        let h = headers(&[
            ("forwarded", "for=198.51.100.4;proto=https"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "http"),
        ]);
        let o = resolve(ip("10.0.0.1"), &h, &fwd);
        assert_eq!(
            (o.addr, o.scheme.as_deref()),
            (ip("198.51.100.4"), Some("https"))
        );
        // Without its family's header, the peer is the client.
        let h = headers(&[("forwarded", "for=6.6.6.6")]);
        assert_eq!(resolve(ip("10.0.0.1"), &h, &trusted()).addr, ip("10.0.0.1"));
        assert_eq!(
            ForwardedHeader::parse("x-forwarded-for"),
            Ok(ForwardedHeader::XForwardedFor)
        );
        assert_eq!(
            ForwardedHeader::parse(" Forwarded "),
            Ok(ForwardedHeader::Forwarded)
        );
        assert!(ForwardedHeader::parse("X-Real-IP").is_err());
    }

    #[test]
    fn forwarded_parses_rfc_7239_forms() {
        let h = headers(&[
            (
                "forwarded",
                "for=6.6.6.6, for=\"[2001:db9::1]:4711\";proto=HTTPS;host=\"api.example:8443\", for=10.0.0.3",
            ),
            ("x-forwarded-for", "7.7.7.7"),
        ]);
        let trusted = || trusted().with_header(ForwardedHeader::Forwarded);
        let o = resolve(ip("10.0.0.1"), &h, &trusted());
        assert_eq!(o.addr, ip("2001:db9::1"));
        assert_eq!(o.scheme.as_deref(), Some("https"));
        assert_eq!(o.host.as_deref(), Some("api.example:8443"));
        // `unknown` or an obfuscated node stops at the last trusted proxy.
        let h = headers(&[("forwarded", "for=1.1.1.1, for=unknown, for=_hidden")]);
        assert_eq!(resolve(ip("10.0.0.1"), &h, &trusted()).addr, ip("10.0.0.1"));
        // A bad scheme or host is dropped, the address kept.
        let h = headers(&[("forwarded", "for=198.51.100.4;proto=gopher;host=\"a b\"")]);
        let o = resolve(ip("10.0.0.1"), &h, &trusted());
        assert_eq!((o.addr, o.scheme, o.host), (ip("198.51.100.4"), None, None));
    }
}
