//! OAuth 1.0 (RFC 5849): signature verification, request tokens, the
//! owner's approval, access tokens, signed resource requests, and consumer
//! administration.
//!
//! The pure part (parameter collection, the signature base string,
//! PLAINTEXT and HMAC-SHA1) takes plain strings so that both HTTP crates
//! (`gatehouse-oauth` for the endpoints, `gatehouse-http` for resource
//! requests) share it. The stateful part is on [`AuthServer`]; time and
//! randomness come from its [`Clock`] and [`Random`].

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use aws_lc_rs::hmac;
use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use subtle::ConstantTimeEq;

use crate::admin::{BootstrapOutcome, check_name, normalize_scopes, register};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::keys::KeyCipher;
use crate::login::Account;
use crate::model::{ConsumerRecord, NewIdentity, OAuth1TokenKind, OAuth1TokenRecord, Scopes};
use crate::principal::Principal;
use crate::random::{Random, token_string};
use crate::repo::AuthRepo;
use crate::secrets;
use crate::server::{AuthConfig, AuthServer};

/// `oauth_signature_method=PLAINTEXT` (RFC 5849 §3.4.4).
pub const PLAINTEXT: &str = "PLAINTEXT";
/// `oauth_signature_method=HMAC-SHA1` (RFC 5849 §3.4.2).
pub const HMAC_SHA1: &str = "HMAC-SHA1";
/// The `oauth_callback` value meaning "out of band" (RFC 5849 §2.1).
pub const OOB: &str = "oob";

/// RFC 5849 §3.6: everything but ALPHA, DIGIT, `-`, `.`, `_`, `~` is encoded.
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Bytes of entropy of tokens, token secrets, consumer secrets and verifiers.
const SECRET_BYTES: usize = 32;
/// Longest callback URI accepted.
const MAX_CALLBACK: usize = 2048;

/// RFC 5849 §3.6 percent-encoding (UTF-8, upper-case hex, unreserved kept).
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, ENCODE).to_string()
}

fn percent_decode(s: &str) -> Result<String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::invalid_request("a parameter is not valid percent-encoded UTF-8"))
}

/// Parses an `Authorization: OAuth …` header (RFC 5849 §3.5.1) into its
/// parameters, `realm` left out. `Ok(None)` when the header uses another
/// scheme; an error (400) when it is malformed or repeats a parameter.
pub fn parse_authorization(value: &str) -> Result<Option<Vec<(String, String)>>> {
    let value = value.trim_start();
    let (scheme, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("OAuth") {
        return Ok(None);
    }
    let malformed = || Error::invalid_request("malformed `Authorization: OAuth` header");
    let mut out: Vec<(String, String)> = Vec::new();
    let mut seen_realm = false;
    let mut rest = rest;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            break;
        }
        let (name, after) = rest.split_once('=').ok_or_else(malformed)?;
        let name = name.trim();
        let after = after.trim_start();
        let after = after.strip_prefix('"').ok_or_else(malformed)?;
        let (raw, after) = after.split_once('"').ok_or_else(malformed)?;
        rest = after.trim_start();
        if !(rest.is_empty() || rest.starts_with(',')) {
            return Err(malformed());
        }
        if name.is_empty() {
            return Err(malformed());
        }
        // RFC 5849 §3.4.1.3.1: the realm is not a signed parameter.
        if name == "realm" {
            if seen_realm {
                return Err(Error::invalid_request("parameter `realm` is repeated"));
            }
            seen_realm = true;
            continue;
        }
        let name = percent_decode(name)?;
        let value = percent_decode(raw)?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(Error::invalid_request(format!(
                "parameter `{}` is repeated",
                printable(&name)
            )));
        }
        out.push((name, value));
    }
    Ok(Some(out))
}

/// A parameter name safe to echo in an error: short, visible ASCII.
fn printable(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// RFC 5849 §3.4.1.2: the base string URI from a scheme, an authority
/// (`host[:port]`) and the request path as sent: scheme and host in lower
/// case, the default port (80 for http, 443 for https) left out, no query.
/// `None` for a scheme other than http or https.
pub fn base_string_uri(scheme: &str, authority: &str, path: &str) -> Option<String> {
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    // Any userinfo is not part of the base string URI.
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = match authority.rfind(':') {
        // `[::1]` alone has a colon inside the brackets, not a port.
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let host = host.to_ascii_lowercase();
    let path = if path.is_empty() { "/" } else { path };
    Some(match port {
        Some(p) if !p.is_empty() && p != default_port => format!("{scheme}://{host}:{p}{path}"),
        _ => format!("{scheme}://{host}{path}"),
    })
}

/// The base string URIs a request may have been signed with: the one from
/// the configured public URL (`issuer`: its scheme and authority), and the
/// one from the `Host` header with the issuer's scheme, when it differs (a
/// client that reached the server under another name). The path is the
/// request path as sent, base path included.
pub fn candidate_uris(issuer: &str, host: Option<&str>, path: &str) -> Vec<String> {
    let (scheme, rest) = issuer.split_once("://").unwrap_or(("http", issuer));
    let authority = rest.split('/').next().unwrap_or(rest);
    let mut out = Vec::new();
    if let Some(uri) = base_string_uri(scheme, authority, path) {
        out.push(uri);
    }
    if let Some(host) = host.map(str::trim).filter(|h| !h.is_empty())
        && let Some(uri) = base_string_uri(scheme, host, path)
        && !out.contains(&uri)
    {
        out.push(uri);
    }
    out
}

/// RFC 5849 §3.4.1.3.2: encode names and values, sort by name then value,
/// join as `name=value` with `&`.
pub fn normalized_parameters(params: &[(String, String)]) -> String {
    let mut encoded: Vec<(String, String)> = params
        .iter()
        .map(|(n, v)| (percent_encode(n), percent_encode(v)))
        .collect();
    encoded.sort();
    let parts: Vec<String> = encoded
        .into_iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    parts.join("&")
}

/// RFC 5849 §3.4.1.1: `METHOD&encoded-uri&encoded-normalized-parameters`.
/// `params` must already exclude `oauth_signature` and the header's `realm`.
pub fn signature_base_string(method: &str, uri: &str, params: &[(String, String)]) -> String {
    format!(
        "{}&{}&{}",
        percent_encode(&method.to_ascii_uppercase()),
        percent_encode(uri),
        percent_encode(&normalized_parameters(params))
    )
}

/// A supported signature method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureMethod {
    /// RFC 5849 §3.4.4: the key itself is the signature (TLS expected).
    Plaintext,
    /// RFC 5849 §3.4.2: HMAC-SHA1 of the base string, base64.
    HmacSha1,
}

impl SignatureMethod {
    /// Parses `oauth_signature_method`; `None` for anything unsupported.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            PLAINTEXT => Some(SignatureMethod::Plaintext),
            HMAC_SHA1 => Some(SignatureMethod::HmacSha1),
            _ => None,
        }
    }
}

/// RFC 5849 §3.4.2 / §3.4.4: the signature of `base_string` with
/// `consumer_secret&token_secret` (both encoded) as key.
pub fn sign(
    method: SignatureMethod,
    base_string: &str,
    consumer_secret: &str,
    token_secret: &str,
) -> String {
    let key = format!(
        "{}&{}",
        percent_encode(consumer_secret),
        percent_encode(token_secret)
    );
    match method {
        SignatureMethod::Plaintext => key,
        SignatureMethod::HmacSha1 => {
            let k = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key.as_bytes());
            let tag = hmac::sign(&k, base_string.as_bytes());
            base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
        }
    }
}

/// The protocol parameters of a request (RFC 5849 §3.1), each present at
/// most once.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProtocolParams {
    /// `oauth_consumer_key`.
    pub consumer_key: String,
    /// `oauth_token`, when the request carries one.
    pub token: Option<String>,
    /// `oauth_signature_method`.
    pub signature_method: Option<SignatureMethod>,
    /// `oauth_signature`.
    pub signature: String,
    /// `oauth_timestamp`.
    pub timestamp: i64,
    /// `oauth_nonce`.
    pub nonce: String,
    /// `oauth_callback`.
    pub callback: Option<String>,
    /// `oauth_verifier`.
    pub verifier: Option<String>,
}

impl fmt::Debug for ProtocolParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtocolParams")
            .field("consumer_key", &self.consumer_key)
            .field("signature_method", &self.signature_method)
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// A request to verify: its method, the base string URIs it may have been
/// signed with, and every parameter (query, form body, `Authorization`
/// header) except `oauth_signature`, plus the protocol parameters.
#[derive(Clone)]
pub struct SignedRequest {
    method: String,
    uris: Vec<String>,
    params: Vec<(String, String)>,
    protocol: ProtocolParams,
}

impl fmt::Debug for SignedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignedRequest")
            .field("method", &self.method)
            .field("uris", &self.uris)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// The protocol parameter that marks a request as OAuth 1.0-signed.
const CONSUMER_KEY: &str = "oauth_consumer_key";

/// Whether a request carries OAuth 1.0 credentials at all: an
/// `Authorization: OAuth` header, or `oauth_consumer_key` in the query or
/// form body. Only such requests go to [`SignedRequest::parse`].
pub fn has_oauth1_params(
    authorization: Option<&str>,
    query: Option<&str>,
    form_body: Option<&[u8]>,
) -> bool {
    let header = authorization.is_some_and(|a| {
        a.trim_start()
            .get(..6)
            .is_some_and(|s| s.eq_ignore_ascii_case("oauth "))
    });
    let in_form = |bytes: &[u8]| {
        // Without a `%`, a name decodes to itself (`+` only to a space):
        // the name cannot be there unless its text is. Most queries skip
        // the decoding.
        let maybe = bytes.contains(&b'%')
            || bytes
                .windows(CONSUMER_KEY.len())
                .any(|w| w == CONSUMER_KEY.as_bytes());
        maybe && form_urlencoded::parse(bytes).any(|(k, _)| k == CONSUMER_KEY)
    };
    header || query.is_some_and(|q| in_form(q.as_bytes())) || form_body.is_some_and(in_form)
}

impl SignedRequest {
    /// Collects the parameters of a request (RFC 5849 §3.4.1.3.1): the query
    /// string, the form body (pass it only for
    /// `application/x-www-form-urlencoded`), and the `Authorization: OAuth`
    /// header. 400 (`invalid_request`) for a malformed header, a protocol
    /// parameter given twice (in one place or across places), a missing one,
    /// an unsupported `oauth_version`, or a non-integer timestamp.
    /// An unsupported signature method is reported by [`SignedRequest::protocol`]
    /// having none, so callers can answer it as a 400 too.
    pub fn parse(
        method: &str,
        uris: Vec<String>,
        query: Option<&str>,
        authorization: Option<&str>,
        form_body: Option<&[u8]>,
    ) -> Result<Self> {
        let mut params: Vec<(String, String)> = Vec::new();
        if let Some(q) = query {
            params.extend(form_urlencoded::parse(q.as_bytes()).map(|(k, v)| (k.into(), v.into())));
        }
        if let Some(body) = form_body {
            params.extend(form_urlencoded::parse(body).map(|(k, v)| (k.into(), v.into())));
        }
        if let Some(a) = authorization
            && let Some(header) = parse_authorization(a)?
        {
            params.extend(header);
        }
        let mut signature = None;
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for (name, value) in &params {
            if name.starts_with("oauth_") {
                if !seen.insert(name) {
                    return Err(Error::invalid_request(format!(
                        "protocol parameter `{}` is repeated",
                        printable(name)
                    )));
                }
                if name == "oauth_signature" {
                    signature = Some(value.clone());
                }
            }
        }
        let get = |name: &str| {
            params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let required = |name: &'static str| {
            get(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::invalid_request(format!("the `{name}` parameter is required"))
            })
        };
        let consumer_key = required("oauth_consumer_key")?;
        let method_name = required("oauth_signature_method")?;
        let signature = signature
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Error::invalid_request("the `oauth_signature` parameter is required"))?;
        // RFC 5849 §3.1 lets PLAINTEXT omit these; the contract (§7) checks
        // them for every request, which also makes PLAINTEXT replay-safe.
        let timestamp = required("oauth_timestamp")?;
        let nonce = required("oauth_nonce")?;
        if let Some(v) = get("oauth_version")
            && v != "1.0"
        {
            return Err(Error::invalid_request("`oauth_version` must be 1.0"));
        }
        let timestamp = timestamp
            .parse::<i64>()
            .ok()
            .filter(|t| *t >= 0)
            .ok_or_else(|| {
                Error::invalid_request("`oauth_timestamp` must be a positive integer")
            })?;
        let protocol = ProtocolParams {
            consumer_key,
            token: get("oauth_token").filter(|t| !t.is_empty()),
            signature_method: SignatureMethod::parse(&method_name),
            signature,
            timestamp,
            nonce,
            callback: get("oauth_callback").filter(|c| !c.is_empty()),
            verifier: get("oauth_verifier").filter(|v| !v.is_empty()),
        };
        params.retain(|(n, _)| n != "oauth_signature");
        Ok(Self {
            method: method.to_ascii_uppercase(),
            uris,
            params,
            protocol,
        })
    }

    /// The protocol parameters.
    pub fn protocol(&self) -> &ProtocolParams {
        &self.protocol
    }

    /// Whether the signature matches one of the candidate URIs, compared in
    /// constant time.
    pub fn signature_matches(&self, consumer_secret: &str, token_secret: &str) -> bool {
        let Some(method) = self.protocol.signature_method else {
            return false;
        };
        let given = self.protocol.signature.as_bytes();
        let mut ok = false;
        for uri in &self.uris {
            let base = signature_base_string(&self.method, uri, &self.params);
            let expected = sign(method, &base, consumer_secret, token_secret);
            ok |= bool::from(expected.as_bytes().ct_eq(given));
        }
        ok
    }
}

/// A freshly issued token and its secret (request or access token).
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// `oauth_token`.
    pub token: String,
    /// `oauth_token_secret`.
    pub secret: String,
}

impl fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IssuedToken(<redacted>)")
    }
}

/// The owner's approval of a request token.
#[derive(Clone, PartialEq, Eq)]
pub struct Approval {
    /// The request token approved.
    pub token: String,
    /// `oauth_verifier`, to hand to the consumer.
    pub verifier: String,
    /// Where to send the owner: a URI, or `oob`.
    pub callback: String,
}

impl fmt::Debug for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approval")
            .field("callback", &self.callback)
            .finish_non_exhaustive()
    }
}

/// What the approval page shows about a pending request token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingApproval {
    /// The consumer asking for access.
    pub consumer_key: String,
    /// The scopes it may get (before intersecting with the user's).
    pub scopes: Vec<String>,
}

/// A consumer as listed: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerInfo {
    /// The consumer key.
    pub consumer_key: String,
    /// Scopes the consumer may obtain.
    pub scopes: Vec<String>,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
}

/// A consumer secret, shown once. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsumerSecret(pub String);

impl fmt::Debug for ConsumerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConsumerSecret(<redacted>)")
    }
}

fn consumer_context(key: &str) -> String {
    format!("oauth1-consumer:{key}")
}

fn token_context(id: &str) -> String {
    format!("oauth1-token:{id}")
}

fn open_string(cipher: &KeyCipher, context: &str, sealed: &[u8]) -> Result<String> {
    String::from_utf8(cipher.open_secret(context, sealed)?)
        .map_err(|_| Error::server("a stored secret is not UTF-8"))
}

fn bad_signature() -> Error {
    Error::InvalidClient("the signature is invalid".into())
}

/// A consumer's rate limit, asked once its request verified (signature,
/// timestamp, nonce): `Err(seconds to wait)` refuses it with 429.
pub type Admit<'a> = dyn Fn(&str) -> std::result::Result<(), u64> + Send + Sync + 'a;

fn admitted(admit: &Admit<'_>, consumer: &str) -> Result<()> {
    admit(consumer).map_err(|wait| {
        Error::TooManyRequests(
            "this consumer is over its request rate; retry later".into(),
            wait,
        )
    })
}

/// Which token a request must (or may) carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenUse {
    /// No token: the request-token endpoint.
    None,
    /// A request token: the access-token exchange.
    Request,
    /// An access token, or none (the consumer acting for itself).
    OptionalAccess,
}

/// A verified request: the consumer and the token it used.
#[derive(Debug)]
struct Verified {
    consumer: ConsumerRecord,
    token: Option<(OAuth1TokenRecord, String)>,
}

impl AuthServer {
    /// Consumer administration over this server's store and key cipher.
    pub fn consumers(&self) -> Consumers {
        Consumers::new(
            self.repo().clone(),
            self.clock().clone(),
            self.random().clone(),
            self.cipher().clone(),
        )
    }

    /// RFC 5849 §3.2 verification, in an order where the cheap checks come
    /// first and the nonce is only recorded for an authentic request (so
    /// strangers cannot burn a consumer's nonces).
    async fn verify_oauth1(&self, req: &SignedRequest, use_: TokenUse) -> Result<Verified> {
        let p = &req.protocol;
        if p.signature_method.is_none() {
            return Err(Error::invalid_request(
                "unsupported `oauth_signature_method`; use HMAC-SHA1 or PLAINTEXT",
            ));
        }
        match (use_, &p.token) {
            (TokenUse::None, Some(_)) => {
                return Err(Error::invalid_request(
                    "`oauth_token` is not expected on this request",
                ));
            }
            (TokenUse::Request, None) => {
                return Err(Error::invalid_request(
                    "the `oauth_token` parameter is required",
                ));
            }
            _ => {}
        }
        let now = self.now();
        let window = AuthConfig::secs(self.config().oauth1_timestamp_window);
        let consumer = self
            .repo()
            .get_consumer(&p.consumer_key)
            .await?
            .ok_or_else(|| Error::InvalidClient("unknown consumer".into()))?;
        if (now - p.timestamp).abs() > window {
            return Err(Error::InvalidClient(
                "`oauth_timestamp` is outside the accepted window".into(),
            ));
        }
        let consumer_secret = open_string(
            self.cipher(),
            &consumer_context(&consumer.key),
            &consumer.secret_sealed,
        )?;
        let token = match &p.token {
            None => None,
            Some(value) => {
                let id = secrets::token_id(value);
                let wanted = match use_ {
                    TokenUse::Request => OAuth1TokenKind::Request,
                    _ => OAuth1TokenKind::Access,
                };
                let record = self
                    .repo()
                    .get_oauth1_token(&id)
                    .await?
                    .filter(|t| {
                        t.kind == wanted && t.consumer_key == consumer.key && t.expires_at > now
                    })
                    .ok_or_else(|| Error::invalid_token("the token is unknown or expired"))?;
                let secret =
                    open_string(self.cipher(), &token_context(&id), &record.secret_sealed)?;
                Some((record, secret))
            }
        };
        let token_secret = token.as_ref().map(|(_, s)| s.as_str()).unwrap_or("");
        if !req.signature_matches(&consumer_secret, token_secret) {
            return Err(bad_signature());
        }
        // A nonce must outlive every timestamp that could be accepted with it.
        let until = now.max(p.timestamp).saturating_add(window);
        if !self
            .repo()
            .insert_nonce(&consumer.key, &p.nonce, until, now)
            .await?
        {
            return Err(Error::InvalidClient("the nonce was already used".into()));
        }
        Ok(Verified { consumer, token })
    }

    async fn issue_oauth1_token(
        &self,
        kind: OAuth1TokenKind,
        consumer_key: &str,
        callback: Option<String>,
        username: Option<String>,
        scopes: Vec<String>,
        ttl: u64,
    ) -> Result<IssuedToken> {
        let now = self.now();
        let token = token_string(self.random().as_ref(), SECRET_BYTES);
        let secret = token_string(self.random().as_ref(), SECRET_BYTES);
        let id = secrets::token_id(&token);
        let sealed = self.cipher().seal_secret(
            self.random().as_ref(),
            &token_context(&id),
            secret.as_bytes(),
        )?;
        let record = OAuth1TokenRecord {
            id,
            kind,
            consumer_key: consumer_key.to_string(),
            secret_sealed: sealed,
            callback,
            verifier_hash: None,
            username,
            scopes,
            created_at: now,
            expires_at: now.saturating_add(AuthConfig::secs(ttl)),
            used_at: None,
        };
        self.repo().insert_oauth1_token(&record).await?;
        Ok(IssuedToken { token, secret })
    }

    /// RFC 5849 §2.1: verifies a signed request for temporary credentials
    /// and issues a request token. `oauth_callback` absent means `oob`.
    /// `from` is the caller's address and `admit` the consumer's rate
    /// limit, asked once the request verified ([`AuthServer::oauth1_charged`]).
    pub async fn oauth1_request_token(
        &self,
        req: &SignedRequest,
        from: Option<IpAddr>,
        admit: &Admit<'_>,
    ) -> Result<IssuedToken> {
        let result = self.request_token(req, admit).await;
        self.oauth1_charged(req, from, result)
    }

    async fn request_token(&self, req: &SignedRequest, admit: &Admit<'_>) -> Result<IssuedToken> {
        let callback = match req.protocol.callback.as_deref() {
            None | Some(OOB) => OOB.to_string(),
            Some(c) if valid_callback(c) => c.to_string(),
            Some(_) => {
                return Err(Error::invalid_request(
                    "`oauth_callback` must be `oob` or an absolute http(s) URI",
                ));
            }
        };
        let v = self.verify_oauth1(req, TokenUse::None).await?;
        admitted(admit, &v.consumer.key)?;
        let token = self
            .issue_oauth1_token(
                OAuth1TokenKind::Request,
                &v.consumer.key,
                Some(callback),
                None,
                Vec::new(),
                self.config().oauth1_request_token_ttl,
            )
            .await?;
        tracing::debug!(consumer = %v.consumer.key, "OAuth 1.0 request token issued");
        Ok(token)
    }

    /// How every OAuth 1.0 entry point (the request-token and access-token
    /// endpoints, signed resource requests) charges the outcome of a signed
    /// request from `from`, with the failed-login throttle the OAuth 2.0
    /// client authentication uses: a refusal of the consumer's credentials
    /// (bad signature, unknown consumer, stale timestamp, replayed nonce,
    /// bad token or verifier) counts against (consumer, address) and the
    /// address, and once those are throttled it is answered 429 instead. A
    /// request that verified is never refused here, whatever others sent
    /// from the same address: the throttle bounds failures, not callers.
    fn oauth1_charged<T>(
        &self,
        req: &SignedRequest,
        from: Option<IpAddr>,
        result: Result<T>,
    ) -> Result<T> {
        let account = Account::Client(&req.protocol.consumer_key);
        let logins = self.login_throttle();
        match result {
            Ok(v) => {
                logins.succeeded(account, from);
                Ok(v)
            }
            Err(
                e @ (Error::InvalidClient(_) | Error::InvalidToken(_) | Error::InvalidGrant(_)),
            ) => {
                let now = self.now();
                if let Err(wait) = logins.check(account, from, now) {
                    return Err(Error::TooManyRequests(
                        "too many refused OAuth 1.0 requests from this address; retry later".into(),
                        wait,
                    ));
                }
                tracing::info!(?from, error = e.code(), "OAuth 1.0 request refused");
                logins.failed(account, from, now);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn pending_request_token(&self, token: &str) -> Result<OAuth1TokenRecord> {
        let now = self.now();
        self.repo()
            .get_oauth1_token(&secrets::token_id(token))
            .await?
            .filter(|t| {
                t.kind == OAuth1TokenKind::Request
                    && t.username.is_none()
                    && t.used_at.is_none()
                    && t.expires_at > now
            })
            .ok_or_else(|| {
                Error::invalid_token("the request token is unknown, expired or already approved")
            })
    }

    /// What the approval page shows for a pending request token.
    pub async fn oauth1_pending(&self, token: &str) -> Result<PendingApproval> {
        let record = self.pending_request_token(token).await?;
        let consumer = self
            .repo()
            .get_consumer(&record.consumer_key)
            .await?
            .ok_or_else(|| Error::invalid_token("the consumer no longer exists"))?;
        Ok(PendingApproval {
            consumer_key: consumer.key,
            scopes: consumer.scopes,
        })
    }

    /// RFC 5849 §2.2: the resource owner (user name and password) approves a
    /// request token; returns the verifier and where to send it. Wrong
    /// credentials are `invalid_grant`; an unknown, expired or already
    /// approved token is `invalid_token`. Failed logins are throttled per
    /// (user, address `from`) like every password check
    /// ([`AuthServer::check_user_password`]).
    pub async fn oauth1_approve(
        &self,
        token: &str,
        username: &str,
        password: &str,
        from: Option<std::net::IpAddr>,
    ) -> Result<Approval> {
        let record = self.pending_request_token(token).await?;
        let user = self.check_user_password(username, password, from).await?;
        let consumer = self
            .repo()
            .get_consumer(&record.consumer_key)
            .await?
            .ok_or_else(|| Error::invalid_token("the consumer no longer exists"))?;
        let scopes = Scopes::from_list(&consumer.scopes)
            .intersection(&Scopes::from_list(&user.scopes))
            .to_vec();
        let verifier = token_string(self.random().as_ref(), SECRET_BYTES);
        if !self
            .repo()
            .approve_request_token(
                &record.id,
                &user.username,
                &secrets::token_id(&verifier),
                &scopes,
                self.now(),
            )
            .await?
        {
            return Err(Error::invalid_token(
                "the request token is unknown, expired or already approved",
            ));
        }
        tracing::info!(consumer = %consumer.key, username = %user.username, "OAuth 1.0 request token approved");
        Ok(Approval {
            token: token.to_string(),
            verifier,
            callback: record.callback.unwrap_or_else(|| OOB.to_string()),
        })
    }

    /// RFC 5849 §2.3: exchanges an approved request token (signed with the
    /// consumer and request-token secrets, with its verifier) for an access
    /// token. The request token works once.
    /// `from` and `admit` as for [`AuthServer::oauth1_request_token`].
    pub async fn oauth1_access_token(
        &self,
        req: &SignedRequest,
        from: Option<IpAddr>,
        admit: &Admit<'_>,
    ) -> Result<IssuedToken> {
        let result = self.access_token(req, admit).await;
        self.oauth1_charged(req, from, result)
    }

    async fn access_token(&self, req: &SignedRequest, admit: &Admit<'_>) -> Result<IssuedToken> {
        if req.protocol.verifier.is_none() {
            return Err(Error::invalid_request(
                "the `oauth_verifier` parameter is required",
            ));
        }
        let v = self.verify_oauth1(req, TokenUse::Request).await?;
        admitted(admit, &v.consumer.key)?;
        let Some((record, _)) = v.token else {
            return Err(Error::invalid_token("the request token is unknown"));
        };
        let given = secrets::token_id(req.protocol.verifier.as_deref().unwrap_or_default());
        let verifier_ok = record
            .verifier_hash
            .as_ref()
            .is_some_and(|h| bool::from(h.as_bytes().ct_eq(given.as_bytes())));
        let Some(username) = record.username.clone().filter(|_| verifier_ok) else {
            return Err(Error::invalid_token(
                "the verifier is wrong or the request token is not approved",
            ));
        };
        if record.used_at.is_some()
            || !self
                .repo()
                .use_request_token(&record.id, self.now())
                .await?
        {
            return Err(Error::invalid_token("the request token was already used"));
        }
        let token = self
            .issue_oauth1_token(
                OAuth1TokenKind::Access,
                &v.consumer.key,
                None,
                Some(username.clone()),
                record.scopes,
                self.config().oauth1_access_ttl,
            )
            .await?;
        tracing::info!(consumer = %v.consumer.key, %username, "OAuth 1.0 access token issued");
        Ok(token)
    }

    /// RFC 5849 §3: a signed resource request. With the consumer alone it
    /// acts as the consumer (its key as subject, its scopes); with an access
    /// token as the approving user, with the token's scopes as still allowed
    /// to both user and consumer (a removed user is refused), and the
    /// user's custom claims as the user record holds them now.
    /// Failures from `from` are charged as [`AuthServer::oauth1_charged`] says.
    pub async fn oauth1_authenticate(
        &self,
        req: &SignedRequest,
        from: Option<IpAddr>,
    ) -> Result<Principal> {
        let result = self.authenticate_signed(req).await;
        self.oauth1_charged(req, from, result)
    }

    async fn authenticate_signed(&self, req: &SignedRequest) -> Result<Principal> {
        let v = self.verify_oauth1(req, TokenUse::OptionalAccess).await?;
        let consumer_scopes = Scopes::from_list(&v.consumer.scopes);
        let Some((token, _)) = v.token else {
            return Ok(Principal::of_oauth1_consumer(
                v.consumer.key,
                consumer_scopes,
            ));
        };
        let username = token
            .username
            .clone()
            .ok_or_else(|| Error::invalid_token("the token has no resource owner"))?;
        let user = self
            .user(&username)
            .await?
            .ok_or_else(|| Error::invalid_token("the resource owner no longer exists"))?;
        let scopes = Scopes::from_list(&token.scopes)
            .intersection(&consumer_scopes)
            .intersection(&Scopes::from_list(&user.scopes));
        Ok(Principal::of_oauth1_user(
            user,
            v.consumer.key,
            scopes,
            token.expires_at,
        ))
    }
}

/// An absolute http(s) URI without whitespace or control characters.
fn valid_callback(c: &str) -> bool {
    let lower = c.to_ascii_lowercase();
    c.len() <= MAX_CALLBACK
        && (lower.starts_with("http://") || lower.starts_with("https://"))
        && c.len() > "https://".len()
        && !c.chars().any(|ch| ch.is_whitespace() || ch.is_control())
}

/// Administration of OAuth 1.0 consumers (`gatehouse consumer …` and
/// `[[bootstrap.consumers]]`). Needs the key cipher: consumer secrets are
/// sealed, not hashed.
pub struct Consumers {
    repo: Arc<dyn AuthRepo>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    cipher: Arc<KeyCipher>,
}

impl fmt::Debug for Consumers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumers")
            .field("repo", &self.repo)
            .finish_non_exhaustive()
    }
}

fn consumer_info(c: &ConsumerRecord) -> ConsumerInfo {
    ConsumerInfo {
        consumer_key: c.key.clone(),
        scopes: c.scopes.clone(),
        created_at: c.created_at,
    }
}

impl Consumers {
    /// Administration over `repo`, sealing secrets with `cipher`.
    pub fn new(
        repo: Arc<dyn AuthRepo>,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        cipher: Arc<KeyCipher>,
    ) -> Self {
        Self {
            repo,
            clock,
            random,
            cipher,
        }
    }

    fn record(
        &self,
        key: &str,
        secret: &str,
        scopes: Vec<String>,
        created_at: i64,
    ) -> Result<ConsumerRecord> {
        Ok(ConsumerRecord {
            key: key.to_string(),
            secret_sealed: self.cipher.seal_secret(
                self.random.as_ref(),
                &consumer_context(key),
                secret.as_bytes(),
            )?,
            scopes,
            created_at,
            updated_at: self.clock.now(),
        })
    }

    /// Registers a consumer with a new random secret (256 bits), returned
    /// once. No user, client or consumer may hold the name.
    pub async fn add(
        &self,
        key: &str,
        scopes: &[String],
    ) -> Result<(ConsumerInfo, ConsumerSecret)> {
        check_name("a consumer key", key)?;
        let scopes = normalize_scopes(scopes)?;
        let secret = token_string(self.random.as_ref(), SECRET_BYTES);
        let record = self.record(key, &secret, scopes, self.clock.now())?;
        register(self.repo.as_ref(), NewIdentity::Consumer(&record), false).await?;
        Ok((consumer_info(&record), ConsumerSecret(secret)))
    }

    /// Every consumer, without secrets.
    pub async fn list(&self) -> Result<Vec<ConsumerInfo>> {
        Ok(self
            .repo
            .list_consumers()
            .await?
            .iter()
            .map(consumer_info)
            .collect())
    }

    /// Removes a consumer; its request and access tokens go with it.
    pub async fn remove(&self, key: &str) -> Result<()> {
        if self.repo.delete_consumer(key).await? {
            Ok(())
        } else {
            Err(Error::NotFound(format!("no consumer named {key:?}").into()))
        }
    }

    /// Creates or updates a consumer with a configured secret, idempotently.
    pub async fn bootstrap(
        &self,
        key: &str,
        secret: &str,
        scopes: &[String],
    ) -> Result<BootstrapOutcome> {
        check_name("a consumer key", key)?;
        if secret.is_empty() || secret.len() > 1024 {
            return Err(Error::InvalidInput(
                "a consumer secret must be 1 to 1024 bytes".into(),
            ));
        }
        let scopes = normalize_scopes(scopes)?;
        let Some(existing) = self.repo.get_consumer(key).await? else {
            let record = self.record(key, secret, scopes, self.clock.now())?;
            let raced = register(self.repo.as_ref(), NewIdentity::Consumer(&record), true).await?;
            return Ok(raced.map_or(BootstrapOutcome::Created, |_| BootstrapOutcome::Unchanged));
        };
        let same_secret = open_string(
            &self.cipher,
            &consumer_context(key),
            &existing.secret_sealed,
        )
        .is_ok_and(|s| bool::from(s.as_bytes().ct_eq(secret.as_bytes())));
        if same_secret && existing.scopes == scopes {
            return Ok(BootstrapOutcome::Unchanged);
        }
        let record = self.record(key, secret, scopes, existing.created_at)?;
        self.repo.upsert_consumer(&record).await?;
        Ok(BootstrapOutcome::Updated)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn s(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// RFC 5849 §3.4.1.1: the example request and its base string.
    #[test]
    fn rfc5849_base_string_example() {
        let uris = candidate_uris("http://example.com", None, "/request");
        let req = SignedRequest::parse(
            "POST",
            uris,
            Some("b5=%3D%253D&a3=a&c%40=&a2=r%20b"),
            Some(
                "OAuth realm=\"Example\", oauth_consumer_key=\"9djdj82h48djs9d2\", \
                 oauth_token=\"kkk9d7dh3k39sjv7\", oauth_signature_method=\"HMAC-SHA1\", \
                 oauth_timestamp=\"137131201\", oauth_nonce=\"7d8f3e4a\", \
                 oauth_signature=\"bYT5CMsGcbgUdFHObYMEfcx6bsw%3D\"",
            ),
            Some(b"c2&a3=2+q"),
        )
        .unwrap();
        let base = signature_base_string(&req.method, &req.uris[0], &req.params);
        assert_eq!(
            base,
            "POST&http%3A%2F%2Fexample.com%2Frequest&a2%3Dr%2520b%26a3%3D2%2520q\
             %26a3%3Da%26b5%3D%253D%25253D%26c%2540%3D%26c2%3D%26oauth_consumer_\
             key%3D9djdj82h48djs9d2%26oauth_nonce%3D7d8f3e4a%26oauth_signature_m\
             ethod%3DHMAC-SHA1%26oauth_timestamp%3D137131201%26oauth_token%3Dkkk\
             9d7dh3k39sjv7"
        );
        assert_eq!(req.protocol().consumer_key, "9djdj82h48djs9d2");
        assert_eq!(req.protocol().token.as_deref(), Some("kkk9d7dh3k39sjv7"));
        assert_eq!(req.protocol().timestamp, 137131201);
    }

    /// RFC 5849 §3.1: the example request signed with HMAC-SHA1 (consumer
    /// secret `kd94hf93k423kf44`, token secret `pfkkdhi9sl3r4s00`), and the
    /// signature the RFC gives for it.
    #[test]
    fn rfc5849_hmac_sha1_example() {
        let uris = candidate_uris("http://photos.example.net", None, "/photos");
        let req = SignedRequest::parse(
            "GET",
            uris,
            Some("file=vacation.jpg&size=original"),
            Some(
                "OAuth realm=\"Photos\", oauth_consumer_key=\"dpf43f3p2l4k3l03\", \
                 oauth_token=\"nnch734d00sl2jdk\", oauth_signature_method=\"HMAC-SHA1\", \
                 oauth_timestamp=\"137131202\", oauth_nonce=\"chapoH\", \
                 oauth_signature=\"MdpQcU8iPSUjWoN%2FUDMsK2sui9I%3D\"",
            ),
            None,
        )
        .unwrap();
        assert_eq!(
            signature_base_string(&req.method, &req.uris[0], &req.params),
            "GET&http%3A%2F%2Fphotos.example.net%2Fphotos&file%3Dvacation.jpg%26\
             oauth_consumer_key%3Ddpf43f3p2l4k3l03%26oauth_nonce%3DchapoH%26oauth\
             _signature_method%3DHMAC-SHA1%26oauth_timestamp%3D137131202%26oauth_\
             token%3Dnnch734d00sl2jdk%26size%3Doriginal"
        );
        assert!(req.signature_matches("kd94hf93k423kf44", "pfkkdhi9sl3r4s00"));
        assert!(!req.signature_matches("kd94hf93k423kf44", "wrong"));
        assert!(!req.signature_matches("wrong", "pfkkdhi9sl3r4s00"));
    }

    /// RFC 5849 §1.2: the PLAINTEXT temporary-credentials request.
    #[test]
    fn rfc5849_plaintext_example() {
        let req = SignedRequest::parse(
            "POST",
            candidate_uris("https://photos.example.net", None, "/initiate"),
            None,
            Some(
                "OAuth realm=\"Photos\", oauth_consumer_key=\"dpf43f3p2l4k3l03\", \
                 oauth_signature_method=\"PLAINTEXT\", oauth_timestamp=\"137131200\", \
                 oauth_nonce=\"wIjqoS\", oauth_callback=\"http%3A%2F%2Fprinter.example.com%2Fready\", \
                 oauth_signature=\"kd94hf93k423kf44%26\"",
            ),
            None,
        )
        .unwrap();
        assert!(req.signature_matches("kd94hf93k423kf44", ""));
        assert!(!req.signature_matches("kd94hf93k423kf45", ""));
        assert_eq!(
            req.protocol().callback.as_deref(),
            Some("http://printer.example.com/ready")
        );
    }

    #[test]
    fn percent_encoding_follows_3_6() {
        assert_eq!(
            percent_encode("Ladies + Gentlemen"),
            "Ladies%20%2B%20Gentlemen"
        );
        assert_eq!(
            percent_encode("An encoded string!"),
            "An%20encoded%20string%21"
        );
        assert_eq!(
            percent_encode("Dogs, Cats & Mice"),
            "Dogs%2C%20Cats%20%26%20Mice"
        );
        assert_eq!(percent_encode("☃"), "%E2%98%83");
        assert_eq!(percent_encode("-._~azAZ09"), "-._~azAZ09");
    }

    #[test]
    fn base_string_uri_normalizes_scheme_host_and_port() {
        assert_eq!(
            base_string_uri("HTTP", "EXAMPLE.COM:80", "/r%20v/X").unwrap(),
            "http://example.com/r%20v/X"
        );
        assert_eq!(
            base_string_uri(
                "https",
                "www.example.net:8080",
                "/?q=1".split('?').next().unwrap()
            )
            .unwrap(),
            "https://www.example.net:8080/"
        );
        assert_eq!(
            base_string_uri("https", "example.net:443", "/a").unwrap(),
            "https://example.net/a"
        );
        assert_eq!(
            base_string_uri("http", "[::1]:8080", "/a").unwrap(),
            "http://[::1]:8080/a"
        );
        assert!(base_string_uri("ftp", "example.net", "/").is_none());
        assert_eq!(
            candidate_uris("http://127.0.0.1:8080", Some("localhost:8080"), "/v1/books"),
            vec![
                "http://127.0.0.1:8080/v1/books".to_string(),
                "http://localhost:8080/v1/books".to_string()
            ]
        );
    }

    fn header(extra: &str) -> String {
        format!(
            "OAuth oauth_consumer_key=\"k\", oauth_signature_method=\"PLAINTEXT\", \
             oauth_timestamp=\"1\", oauth_nonce=\"n\", oauth_signature=\"s%26\"{extra}"
        )
    }

    fn parse(
        query: Option<&str>,
        auth: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<SignedRequest> {
        SignedRequest::parse("GET", vec!["http://h/".into()], query, auth, body)
    }

    #[test]
    fn duplicated_protocol_parameters_are_refused() {
        // Twice in the header.
        let e = parse(None, Some(&header(", oauth_nonce=\"m\"")), None).unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
        // Header and query.
        let e = parse(Some("oauth_nonce=x"), Some(&header("")), None).unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
        // Query and body.
        let e = parse(
            Some("oauth_consumer_key=k"),
            None,
            Some(b"oauth_consumer_key=k"),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e:?}");
        // Non-protocol parameters may repeat (they are all signed).
        assert!(parse(Some("a=1&a=2"), Some(&header("")), None).is_ok());
    }

    #[test]
    fn missing_protocol_parameters_are_refused() {
        for missing in [
            "oauth_consumer_key",
            "oauth_signature_method",
            "oauth_timestamp",
            "oauth_nonce",
            "oauth_signature",
        ] {
            let all = [
                ("oauth_consumer_key", "k"),
                ("oauth_signature_method", "PLAINTEXT"),
                ("oauth_timestamp", "1"),
                ("oauth_nonce", "n"),
                ("oauth_signature", "s&"),
            ];
            let q: Vec<String> = all
                .iter()
                .filter(|(n, _)| *n != missing)
                .map(|(n, v)| format!("{n}={}", percent_encode(v)))
                .collect();
            let e = parse(Some(&q.join("&")), None, None).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidRequest(d) if d.contains(missing)),
                "{missing}: {e:?}"
            );
        }
    }

    #[test]
    fn malformed_input_is_a_400() {
        for bad in [
            "OAuth oauth_consumer_key=k",
            "OAuth oauth_consumer_key=\"k",
            "OAuth =\"k\"",
            "OAuth oauth_consumer_key=\"k\" oauth_nonce=\"n\"",
            "OAuth oauth_consumer_key=\"%FF\"",
        ] {
            let e = parse_authorization(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidRequest(_)), "{bad}: {e:?}");
        }
        assert!(parse_authorization("Bearer abc").unwrap().is_none());
        let e = parse(Some("oauth_version=2.0"), Some(&header("")), None).unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)));
        let e = parse(
            None,
            Some(&header("").replace("oauth_timestamp=\"1\"", "oauth_timestamp=\"x\"")),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)));
        // An unknown method parses but has no method; callers answer 400.
        let r = parse(
            None,
            Some(&header("").replace("PLAINTEXT", "RSA-SHA1")),
            None,
        )
        .unwrap();
        assert!(r.protocol().signature_method.is_none());
        assert!(!r.signature_matches("s", ""));
    }

    #[test]
    fn realm_is_not_signed_and_empty_header_values_are_kept() {
        let p = parse_authorization("OAuth realm=\"x\",a=\"\", b=\"c%20d\"")
            .unwrap()
            .unwrap();
        assert_eq!(p, s(&[("a", ""), ("b", "c d")]));
    }

    #[tokio::test]
    async fn bootstrap_is_idempotent_and_secrets_are_sealed() {
        use crate::{ManualClock, MemoryRepo, SeededRandom};
        let repo = Arc::new(MemoryRepo::new());
        let cipher = Arc::new(KeyCipher::from_secret("a test secret").unwrap());
        let c = Consumers::new(
            repo.clone(),
            Arc::new(ManualClock::at_secs(1_000)),
            Arc::new(SeededRandom::new(7)),
            cipher.clone(),
        );
        let scopes = vec!["read".to_string()];
        assert_eq!(
            c.bootstrap("k", "s1", &scopes).await.unwrap(),
            BootstrapOutcome::Created
        );
        assert_eq!(
            c.bootstrap("k", "s1", &scopes).await.unwrap(),
            BootstrapOutcome::Unchanged
        );
        assert_eq!(
            c.bootstrap("k", "s2", &scopes).await.unwrap(),
            BootstrapOutcome::Updated
        );
        let stored = repo.get_consumer("k").await.unwrap().unwrap();
        assert!(!stored.secret_sealed.windows(2).any(|w| w == b"s2"));
        assert_eq!(
            open_string(&cipher, &consumer_context("k"), &stored.secret_sealed).unwrap(),
            "s2"
        );
        // Bound to its record: it does not open as another consumer's.
        assert!(open_string(&cipher, &consumer_context("x"), &stored.secret_sealed).is_err());
        assert!(c.bootstrap("k", "", &scopes).await.is_err());
        assert!(c.bootstrap("bad key", "s", &scopes).await.is_err());
        let (info, secret) = c.add("new", &scopes).await.unwrap();
        assert_eq!((info.consumer_key.as_str(), secret.0.len()), ("new", 43));
        assert!(matches!(
            c.add("new", &scopes).await,
            Err(Error::Conflict(_))
        ));
        assert_eq!(c.list().await.unwrap().len(), 2);
        c.remove("new").await.unwrap();
        assert!(matches!(c.remove("new").await, Err(Error::NotFound(_))));
    }

    #[test]
    fn detection_of_oauth1_requests() {
        assert!(has_oauth1_params(Some("OAuth a=\"b\""), None, None));
        assert!(has_oauth1_params(
            None,
            Some("x=1&oauth_consumer_key=k"),
            None
        ));
        assert!(has_oauth1_params(None, None, Some(b"oauth_consumer_key=k")));
        assert!(!has_oauth1_params(
            Some("Bearer x"),
            Some("x=1"),
            Some(b"grant_type=password")
        ));
        // A percent-encoded name is still the name; text that only
        // contains it is not.
        assert!(has_oauth1_params(
            None,
            Some("x=1&oauth%5Fconsumer%5fkey=k"),
            None
        ));
        assert!(has_oauth1_params(
            None,
            Some("%6Fauth_consumer_key=k"),
            None
        ));
        assert!(!has_oauth1_params(None, Some("q=oauth_consumer_key"), None));
        assert!(!has_oauth1_params(
            None,
            Some("xoauth_consumer_key=k"),
            None
        ));
    }
}
