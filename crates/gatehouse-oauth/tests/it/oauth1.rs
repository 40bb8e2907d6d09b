//! OAuth 1.0 endpoints: request tokens, approval, the OAuth
//! 1.0 exchange on `/oauth/access_token`, and every refusal. Requests are
//! signed here with the RFC 5849 rules (the base string and signature are
//! unit-tested against the RFC's examples in `gatehouse-auth`; the Python
//! `oauthlib` script in `tests/external/` checks interoperability).

use gatehouse_auth::oauth1::SignatureMethod;
use gatehouse_testkit::{Browser, OAuth1Sig, Page, authorize_url, pkce_challenge, pkce_verifier};
use reqwest::StatusCode;

use crate::{Server, start, start_with};

const KEY: &str = "printer";
const SECRET: &str = "printer-secret";

async fn with_consumer(s: &Server) {
    s.auth
        .consumers()
        .bootstrap(KEY, SECRET, &["read".to_string(), "write".to_string()])
        .await
        .unwrap();
}

/// A signing by the `printer` consumer at the server's time.
fn signer(s: &Server, method: SignatureMethod) -> OAuth1Sig<'static> {
    OAuth1Sig::new((KEY, SECRET), s.clock_now())
        .method(method)
        .realm("gatehouse")
}

impl Server {
    fn clock_now(&self) -> i64 {
        use gatehouse_auth::Clock;
        self.clock.now()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A signed POST with the protocol parameters in the header.
    async fn signed_post(&self, path: &str, sig: &OAuth1Sig<'_>, form: &[(&str, &str)]) -> Raw {
        let url = self.url(path);
        let auth = sig.header("POST", &url, form);
        let req = self
            .http
            .post(&url)
            .header("authorization", auth)
            .form(form);
        Raw::from(req.send().await.unwrap()).await
    }

    /// A signed GET with every protocol parameter in the query string (the
    /// seed's form of the request-token call).
    async fn signed_get_query(&self, path: &str, sig: &OAuth1Sig<'_>) -> Raw {
        let url = self.url(path);
        let params = sig.params("GET", &url, &[]);
        let req = self.http.get(&url).query(&params);
        Raw::from(req.send().await.unwrap()).await
    }
}

/// A response with its body as text (the OAuth 1.0 success bodies are forms).
struct Raw {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Raw {
    async fn from(resp: reqwest::Response) -> Raw {
        Raw {
            status: resp.status(),
            headers: resp.headers().clone(),
            text: resp.text().await.unwrap(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn form(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(self.text.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    fn get(&self, name: &str) -> String {
        self.form()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.text))
    }

    #[track_caller]
    fn assert_form_ok(&self) {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/x-www-form-urlencoded")
        );
        assert_eq!(self.header("cache-control"), Some("no-store"));
    }

    #[track_caller]
    fn assert_refused(&self, status: u16) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        if status == 401 {
            assert_eq!(
                self.header("www-authenticate"),
                Some(r#"OAuth realm="gatehouse""#)
            );
        }
        let body: serde_json::Value = serde_json::from_str(&self.text).unwrap();
        assert!(body["error"].is_string(), "{body}");
        assert!(body["error_description"].is_string(), "{body}");
    }
}

#[tokio::test]
async fn request_token_in_the_query_string_with_plaintext() {
    let s = start().await;
    with_consumer(&s).await;
    let r = s
        .signed_get_query(
            "/oauth/requestToken",
            &signer(&s, SignatureMethod::Plaintext),
        )
        .await;
    r.assert_form_ok();
    assert_eq!(r.get("oauth_callback_confirmed"), "true");
    assert_eq!(r.get("oauth_token").len(), 43);
    assert_eq!(r.get("oauth_token_secret").len(), 43);
}

#[tokio::test]
async fn request_token_with_the_header_and_hmac_sha1_under_a_base_path() {
    let s = start_with("/api", |_| {}).await;
    with_consumer(&s).await;
    let sig = signer(&s, SignatureMethod::HmacSha1).with("oauth_callback", "https://c.example/cb");
    let r = s
        .signed_post("/oauth/requestToken", &sig, &[("extra", "a b")])
        .await;
    r.assert_form_ok();
    assert_eq!(r.get("oauth_callback_confirmed"), "true");
}

#[tokio::test]
async fn request_token_refusals() {
    let s = start().await;
    with_consumer(&s).await;
    let url = s.url("/oauth/requestToken");

    // 400: a missing protocol parameter.
    let mut params = signer(&s, SignatureMethod::Plaintext).params("GET", &url, &[]);
    params.retain(|(k, _)| k != "oauth_nonce");
    let r = Raw::from(s.http.get(&url).query(&params).send().await.unwrap()).await;
    r.assert_refused(400);

    // 400: a duplicated protocol parameter (query and header).
    let sig = signer(&s, SignatureMethod::Plaintext);
    let r = Raw::from(
        s.http
            .get(&url)
            .query(&[("oauth_nonce", "again")])
            .header("authorization", sig.header("GET", &url, &[]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_refused(400);

    // 400: an unsupported signature method.
    let mut params = signer(&s, SignatureMethod::Plaintext).params("GET", &url, &[]);
    for p in params
        .iter_mut()
        .filter(|(k, _)| k == "oauth_signature_method")
    {
        p.1 = "RSA-SHA1".into();
    }
    let r = Raw::from(s.http.get(&url).query(&params).send().await.unwrap()).await;
    r.assert_refused(400);

    // 400: a bad oauth_version.
    let sig = signer(&s, SignatureMethod::HmacSha1);
    let mut params = sig.params("GET", &url, &[]);
    for p in params.iter_mut().filter(|(k, _)| k == "oauth_version") {
        p.1 = "2.0".into();
    }
    let r = Raw::from(s.http.get(&url).query(&params).send().await.unwrap()).await;
    r.assert_refused(400);

    // 401: an unknown consumer.
    let mut sig = signer(&s, SignatureMethod::HmacSha1);
    sig.consumer.0 = "nobody";
    let unknown = s.signed_post("/oauth/requestToken", &sig, &[]).await;
    unknown.assert_refused(401);

    // 401: the wrong secret, with either method; it reads exactly like an
    // unknown consumer (no oracle for consumer keys).
    for method in [SignatureMethod::HmacSha1, SignatureMethod::Plaintext] {
        let mut sig = signer(&s, method);
        sig.consumer.1 = "not-the-secret";
        let r = s.signed_post("/oauth/requestToken", &sig, &[]).await;
        r.assert_refused(401);
        assert_eq!(r.text, unknown.text);
    }

    // 401: a tampered parameter (signed a=1, sent a=2).
    let sig = signer(&s, SignatureMethod::HmacSha1);
    let header = sig.header("POST", &url, &[("a", "1")]);
    let r = Raw::from(
        s.http
            .post(&url)
            .header("authorization", header)
            .form(&[("a", "2")])
            .send()
            .await
            .unwrap(),
    )
    .await;
    r.assert_refused(401);

    // 401: a timestamp outside the 300 s window, either way.
    for skew in [-301, 301] {
        let mut sig = signer(&s, SignatureMethod::HmacSha1);
        sig.timestamp += skew;
        s.signed_post("/oauth/requestToken", &sig, &[])
            .await
            .assert_refused(401);
    }
    // ... but inside it is fine.
    let mut sig = signer(&s, SignatureMethod::HmacSha1);
    sig.timestamp -= 299;
    s.signed_post("/oauth/requestToken", &sig, &[])
        .await
        .assert_form_ok();

    // 405: another method.
    let r = Raw::from(s.http.put(&url).send().await.unwrap()).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), Some("GET, POST"));
    // The exchange on /oauth/access_token takes GET too, and says so.
    let r = Raw::from(
        s.http
            .put(s.url("/oauth/access_token?oauth_token=t&oauth_verifier=v"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), Some("GET, POST"));
}

#[tokio::test]
async fn a_nonce_is_never_accepted_twice() {
    let s = start().await;
    with_consumer(&s).await;
    let sig = signer(&s, SignatureMethod::HmacSha1);
    s.signed_post("/oauth/requestToken", &sig, &[])
        .await
        .assert_form_ok();
    // The very same request, replayed.
    s.signed_post("/oauth/requestToken", &sig, &[])
        .await
        .assert_refused(401);
    // The same nonce with another (valid) timestamp.
    let mut again = sig.clone();
    again.timestamp += 10;
    s.signed_post("/oauth/requestToken", &again, &[])
        .await
        .assert_refused(401);
    // A failed signature does not burn a nonce.
    let mut fresh = signer(&s, SignatureMethod::HmacSha1);
    fresh.consumer.1 = "wrong";
    s.signed_post("/oauth/requestToken", &fresh, &[])
        .await
        .assert_refused(401);
    fresh.consumer.1 = SECRET;
    s.signed_post("/oauth/requestToken", &fresh, &[])
        .await
        .assert_form_ok();
}

/// Request token → approval page → approval → access token.
async fn request_token(
    s: &Server,
    method: SignatureMethod,
    callback: Option<&str>,
) -> (String, String) {
    let mut sig = signer(s, method);
    if let Some(c) = callback {
        sig = sig.with("oauth_callback", c);
    }
    let r = s.signed_post("/oauth/requestToken", &sig, &[]).await;
    r.assert_form_ok();
    (r.get("oauth_token"), r.get("oauth_token_secret"))
}

/// A browser holding a CSRF cookie of the sign-in pages, and the form
/// field that goes with it (the cookie is the browser's, not a request
/// token's: any page of the server hands one out).
async fn csrf_browser(s: &Server) -> (Browser, String) {
    let mut b = Browser::new();
    let challenge = pkce_challenge(&pkce_verifier("oauth1"));
    let url = authorize_url(
        &s.base,
        &[
            ("response_type", "code"),
            ("client_id", "web"),
            ("redirect_uri", "https://web.example/cb"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ],
    );
    let page = b.get(&url).await;
    let csrf = page.hidden("csrf").unwrap();
    (b, csrf)
}

fn raw(page: Page) -> Raw {
    Raw {
        status: StatusCode::from_u16(page.status).unwrap(),
        headers: page.headers,
        text: page.body,
    }
}

/// The owner's approval of `token`, posted by a browser as the approval
/// form does (CSRF cookie and field included).
async fn approve(s: &Server, token: &str, password: &str) -> Raw {
    let (mut b, csrf) = csrf_browser(s).await;
    let form = [
        ("oauth_token", token),
        ("username", "alice"),
        ("password", password),
        ("csrf", csrf.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    raw(b.post(&s.url("/oauth/authorize"), &form).await)
}

/// The approval form carries the CSRF field of the sign-in pages: posted
/// from its page it approves; without the field, with another browser's
/// field, or without the cookie, it is refused before the password is
/// looked at (403, the HTML page, nothing redirected).
#[tokio::test]
async fn the_approval_form_is_protected_against_forgery() {
    let s = start().await;
    with_consumer(&s).await;
    let (rt, _) = request_token(&s, SignatureMethod::HmacSha1, None).await;
    let url = s.url(&format!("/oauth/authorize?oauth_token={rt}"));
    let mut owner = Browser::new();
    let page = owner.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.header("set-cookie").is_some());
    let field = page.hidden("csrf").unwrap();
    let creds = [("username", "alice"), ("password", "alice-pw")];
    let (_, other_field) = csrf_browser(&s).await;
    for (who, fields) in [
        ("no field", vec![("csrf", "")]),
        (
            "another browser's field",
            vec![("csrf", other_field.as_str())],
        ),
    ] {
        let mut f = creds.to_vec();
        f.extend(fields);
        let r = owner.submit(&s.url("/oauth/authorize"), &page, &f).await;
        assert_eq!(r.status, 403, "{who}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert!(r.location().is_none(), "{who}");
    }
    let mut stranger = Browser::new();
    let r = stranger
        .submit(&s.url("/oauth/authorize"), &page, &creds)
        .await;
    assert_eq!(r.status, 403, "no cookie: {}", r.body);
    assert_eq!(page.hidden("csrf").as_deref(), Some(field.as_str()));
    // The owner's own form approves (out of band: the verifier).
    let r = raw(owner
        .submit(&s.url("/oauth/authorize"), &page, &creds)
        .await);
    r.assert_form_ok();
    assert_eq!(r.get("oauth_token"), rt);
}

#[tokio::test]
async fn three_legged_flow_with_a_callback() {
    let s = start().await;
    with_consumer(&s).await;
    let (rt, rt_secret) = request_token(
        &s,
        SignatureMethod::HmacSha1,
        Some("https://c.example/cb?x=1"),
    )
    .await;

    // The approval page: HTML, escaped, self-contained.
    let page = Raw::from(
        s.http
            .get(s.url("/oauth/authorize"))
            .query(&[("oauth_token", rt.as_str())])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(page.text.contains("printer"), "{}", page.text);
    assert!(page.text.contains("name=\"password\""));
    assert!(!page.text.contains("<script"));
    assert!(!page.text.contains("src="));

    // An unknown token on the page: 401.
    let bad = Raw::from(
        s.http
            .get(s.url("/oauth/authorize?oauth_token=%3Cscript%3E"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(!bad.text.contains("<script>"));

    // A wrong password: 401.
    approve(&s, &rt, "wrong").await.assert_refused(401);

    // Approval: 302 to the callback with both parameters.
    let r = approve(&s, &rt, "alice-pw").await;
    assert_eq!(r.status, StatusCode::FOUND, "{}", r.text);
    let location = r.header("location").unwrap().to_string();
    let url = reqwest::Url::parse(&location).unwrap();
    assert_eq!(url.host_str(), Some("c.example"));
    let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    assert_eq!(q[0], ("x".into(), "1".into()));
    assert_eq!(q[1], ("oauth_token".into(), rt.clone()));
    let verifier = q[2].1.clone();
    assert_eq!(q[2].0, "oauth_verifier");

    // Approving twice is refused.
    approve(&s, &rt, "alice-pw").await.assert_refused(401);

    // A wrong verifier: 401, and the token stays usable.
    let sig = signer(&s, SignatureMethod::HmacSha1)
        .token(&rt, &rt_secret)
        .with("oauth_verifier", "nope");
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_refused(401);

    // The exchange.
    let sig = signer(&s, SignatureMethod::HmacSha1)
        .token(&rt, &rt_secret)
        .with("oauth_verifier", &verifier);
    let r = s.signed_post("/oauth/access_token", &sig, &[]).await;
    r.assert_form_ok();
    let at = r.get("oauth_token");
    assert_ne!(at, rt);
    assert_eq!(r.get("oauth_token_secret").len(), 43);

    // The verifier works once.
    let sig = signer(&s, SignatureMethod::HmacSha1)
        .token(&rt, &rt_secret)
        .with("oauth_verifier", &verifier);
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_refused(401);

    // The access token is not a request token.
    let sig = signer(&s, SignatureMethod::HmacSha1)
        .token(&at, "whatever")
        .with("oauth_verifier", &verifier);
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_refused(401);
}

#[tokio::test]
async fn three_legged_flow_out_of_band_with_plaintext() {
    let s = start().await;
    with_consumer(&s).await;
    let (rt, rt_secret) = request_token(&s, SignatureMethod::Plaintext, None).await;
    let r = approve(&s, &rt, "alice-pw").await;
    r.assert_form_ok();
    assert_eq!(r.get("oauth_token"), rt);
    let verifier = r.get("oauth_verifier");

    // The request token secret is part of the key: the consumer's alone fails.
    let sig = signer(&s, SignatureMethod::Plaintext)
        .token(&rt, "")
        .with("oauth_verifier", &verifier);
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_refused(401);

    let sig = signer(&s, SignatureMethod::Plaintext)
        .token(&rt, &rt_secret)
        .with("oauth_verifier", &verifier);
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_form_ok();
}

#[tokio::test]
async fn an_expired_request_token_is_refused() {
    let s = start().await;
    with_consumer(&s).await;
    let (rt, _) = request_token(&s, SignatureMethod::HmacSha1, None).await;
    s.clock.advance_secs(601);
    approve(&s, &rt, "alice-pw").await.assert_refused(401);
}

#[tokio::test]
async fn access_token_without_oauth1_parameters_stays_oauth2() {
    let s = start().await;
    with_consumer(&s).await;
    let r = s
        .app(
            "/oauth/access_token",
            &[("grant_type", "client_credentials")],
        )
        .await;
    r.assert_token();
    assert!(r.body.get("refresh_token").is_none());
    // An OAuth 1.0 exchange missing its verifier is a 400, not OAuth 2.0.
    let sig = signer(&s, SignatureMethod::HmacSha1).token("t", "s");
    s.signed_post("/oauth/access_token", &sig, &[])
        .await
        .assert_refused(400);
}

#[tokio::test]
async fn authorize_needs_its_fields_and_is_throttled() {
    let s = start().await;
    with_consumer(&s).await;
    let (mut b, csrf) = csrf_browser(&s).await;
    let form = [("oauth_token", "x"), ("csrf", csrf.as_str())]
        .map(|(k, v)| (k.to_string(), v.to_string()));
    raw(b.post(&s.url("/oauth/authorize"), &form).await).assert_refused(400);
    let (rt, _) = request_token(&s, SignatureMethod::HmacSha1, None).await;
    // Free failures, then a delay (per user and address, not global).
    for _ in 0..=gatehouse_auth::FREE_FAILURES_PER_ACCOUNT {
        approve(&s, &rt, "wrong").await.assert_refused(401);
    }
    let r = approve(&s, &rt, "alice-pw").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"));
    s.clock.advance_secs(1);
    approve(&s, &rt, "alice-pw").await.assert_form_ok();
}

/// Failed signatures from an address (of the same consumer key or others)
/// are throttled there, but never refuse a request that verifies, nor use
/// up the consumer's own bucket.
#[tokio::test]
async fn others_failures_never_refuse_a_valid_consumer() {
    let s = start_with("", |c| {
        c.rate_per_second = 1;
        c.rate_burst = 2;
    })
    .await;
    with_consumer(&s).await;
    let forged = || {
        OAuth1Sig::new((KEY, "not-the-secret"), s.clock_now()).method(SignatureMethod::Plaintext)
    };
    let unknown =
        || OAuth1Sig::new(("nobody", "x"), s.clock_now()).method(SignatureMethod::Plaintext);
    let mut throttled = None;
    for i in 0..2 * gatehouse_auth::FREE_FAILURES_PER_ADDRESS {
        let sig = if i % 2 == 0 { forged() } else { unknown() };
        let r = s.signed_get_query("/oauth/requestToken", &sig).await;
        match r.status.as_u16() {
            401 => assert!(throttled.is_none(), "401 after a 429 ({i})"),
            429 => {
                assert!(r.header("retry-after").is_some());
                throttled.get_or_insert(i);
            }
            other => panic!("{other}: {}", r.text),
        }
    }
    assert!(throttled.is_some(), "failures are throttled per address");
    // The consumer's own requests still pass, its bucket whole (burst 2).
    for _ in 0..2 {
        s.signed_get_query(
            "/oauth/requestToken",
            &signer(&s, SignatureMethod::Plaintext),
        )
        .await
        .assert_form_ok();
    }
}

#[tokio::test]
async fn a_consumer_is_charged_once_its_signature_verified() {
    // Burst 2: two requests pass, the third (within the second) does not.
    let s = start_with("", |c| {
        c.rate_per_second = 1;
        c.rate_burst = 2;
    })
    .await;
    with_consumer(&s).await;
    for _ in 0..2 {
        s.signed_get_query(
            "/oauth/requestToken",
            &signer(&s, SignatureMethod::Plaintext),
        )
        .await
        .assert_form_ok();
    }
    let r = s
        .signed_get_query(
            "/oauth/requestToken",
            &signer(&s, SignatureMethod::Plaintext),
        )
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
}
