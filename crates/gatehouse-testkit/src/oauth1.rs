//! Signing OAuth 1.0 requests (RFC 5849), as a consumer would.

use gatehouse_auth::oauth1::{SignatureMethod, percent_encode, sign, signature_base_string};

/// A nonce no other request of this test binary uses.
pub fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("nonce-{}", N.fetch_add(1, Ordering::SeqCst))
}

/// How to sign one request: the fields are public so a test can spoil one
/// (a wrong secret, a stale timestamp) before signing.
#[derive(Debug, Clone)]
pub struct OAuth1Sig<'a> {
    /// PLAINTEXT or HMAC-SHA1.
    pub method: SignatureMethod,
    /// The consumer key and secret.
    pub consumer: (&'a str, &'a str),
    /// The token and its secret, when signing for one.
    pub token: Option<(&'a str, &'a str)>,
    /// `oauth_timestamp`: the server's clock, in seconds.
    pub timestamp: i64,
    /// `oauth_nonce`.
    pub nonce: String,
    /// Other protocol parameters (`oauth_callback`, `oauth_verifier`).
    pub extra: Vec<(&'a str, &'a str)>,
    /// The `realm` of the header (RFC 5849 §3.5.1; not signed).
    pub realm: Option<&'a str>,
}

impl<'a> OAuth1Sig<'a> {
    /// An HMAC-SHA1 signing by `consumer` at `timestamp`, with a fresh
    /// nonce.
    pub fn new(consumer: (&'a str, &'a str), timestamp: i64) -> Self {
        OAuth1Sig {
            method: SignatureMethod::HmacSha1,
            consumer,
            token: None,
            timestamp,
            nonce: nonce(),
            extra: Vec::new(),
            realm: None,
        }
    }

    /// Signs with `method` instead.
    pub fn method(mut self, method: SignatureMethod) -> Self {
        self.method = method;
        self
    }

    /// Signs for `token`.
    pub fn token(mut self, token: &'a str, secret: &'a str) -> Self {
        self.token = Some((token, secret));
        self
    }

    /// Adds the protocol parameter `name`.
    pub fn with(mut self, name: &'a str, value: &'a str) -> Self {
        self.extra.push((name, value));
        self
    }

    /// Names `realm` in the header.
    pub fn realm(mut self, realm: &'a str) -> Self {
        self.realm = Some(realm);
        self
    }

    /// The protocol parameters with `oauth_signature`, signed over the
    /// request's `other` (query and form) parameters too.
    pub fn params(
        &self,
        http_method: &str,
        url: &str,
        other: &[(&str, &str)],
    ) -> Vec<(String, String)> {
        let method_name = match self.method {
            SignatureMethod::Plaintext => "PLAINTEXT",
            SignatureMethod::HmacSha1 => "HMAC-SHA1",
        };
        let mut oauth: Vec<(String, String)> = vec![
            ("oauth_consumer_key".into(), self.consumer.0.into()),
            ("oauth_signature_method".into(), method_name.into()),
            ("oauth_timestamp".into(), self.timestamp.to_string()),
            ("oauth_nonce".into(), self.nonce.clone()),
            ("oauth_version".into(), "1.0".into()),
        ];
        if let Some((t, _)) = self.token {
            oauth.push(("oauth_token".into(), t.into()));
        }
        for (k, v) in &self.extra {
            oauth.push((k.to_string(), v.to_string()));
        }
        let mut all = oauth.clone();
        all.extend(other.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let base = signature_base_string(http_method, url, &all);
        let token_secret = self.token.map_or("", |(_, s)| s);
        let signature = sign(self.method, &base, self.consumer.1, token_secret);
        oauth.push(("oauth_signature".into(), signature));
        oauth
    }

    /// The `Authorization: OAuth ...` header value (RFC 5849 §3.5.1).
    pub fn header(&self, http_method: &str, url: &str, other: &[(&str, &str)]) -> String {
        let mut parts: Vec<String> = self
            .realm
            .map(|r| format!("realm=\"{r}\""))
            .into_iter()
            .collect();
        parts.extend(
            self.params(http_method, url, other)
                .iter()
                .map(|(k, v)| format!("{}=\"{}\"", percent_encode(k), percent_encode(v))),
        );
        format!("OAuth {}", parts.join(", "))
    }
}
