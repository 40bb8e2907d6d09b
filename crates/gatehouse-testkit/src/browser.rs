//! A browser's part in the authorization code flow, for tests: it follows
//! no redirects (the test looks at each), keeps the sign-in pages' cookie,
//! reads their hidden fields, and makes PKCE pairs.

use std::collections::HashMap;

use base64::Engine;
use sha2::Digest;

/// The S256 `code_challenge` of `verifier` (RFC 7636 §4.2).
pub fn pkce_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// A valid PKCE `code_verifier` (43 unreserved characters) made from `seed`.
pub fn pkce_verifier(seed: &str) -> String {
    let mut v = format!("verifier-{seed}-");
    while v.len() < 43 {
        v.push('x');
    }
    v.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._~".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One answer of the server to the browser.
#[derive(Debug)]
pub struct Page {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as text.
    pub body: String,
}

impl Page {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Location` of a redirect.
    pub fn location(&self) -> Option<&str> {
        self.header("location")
    }

    /// The query parameters of the redirect's `Location`.
    pub fn redirect_params(&self) -> HashMap<String, String> {
        let Some(loc) = self.location() else {
            return HashMap::new();
        };
        let query = loc.split_once('?').map(|(_, q)| q).unwrap_or("");
        form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    /// The page's `<input type="hidden" name=… value=…>` fields, unescaped.
    pub fn hidden_fields(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut rest = self.body.as_str();
        while let Some(i) = rest.find("<input type=\"hidden\" name=\"") {
            rest = &rest[i + "<input type=\"hidden\" name=\"".len()..];
            let Some(end) = rest.find('"') else { break };
            let name = unescape(&rest[..end]);
            rest = &rest[end..];
            let Some(v) = rest.find("value=\"") else {
                break;
            };
            rest = &rest[v + "value=\"".len()..];
            let Some(end) = rest.find('"') else { break };
            out.push((name, unescape(&rest[..end])));
            rest = &rest[end..];
        }
        out
    }

    /// The hidden field `name`.
    pub fn hidden(&self, name: &str) -> Option<String> {
        self.hidden_fields()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// Undoes HTML escaping of attribute values.
pub fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&#47;", "/")
        .replace("&amp;", "&")
        .replace("&#38;", "&")
}

/// A browser without JavaScript: no redirects followed, one cookie jar.
#[derive(Debug)]
pub struct Browser {
    http: reqwest::Client,
    /// `name=value` of every cookie set so far.
    cookies: Vec<String>,
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    /// A browser with no cookies.
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Vec::new(),
        }
    }

    /// Forgets every cookie.
    pub fn clear_cookies(&mut self) {
        self.cookies.clear();
    }

    /// Sets the cookie `name=value` as if a response had set it (a cookie
    /// planted by someone else).
    pub fn set_cookie(&mut self, name: &str, value: &str) {
        self.cookies.retain(|p| !p.starts_with(&format!("{name}=")));
        self.cookies.push(format!("{name}={value}"));
    }

    /// The value of the cookie `name`, if one was set.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
    }

    fn keep_cookies(&mut self, headers: &reqwest::header::HeaderMap) {
        for c in headers.get_all("set-cookie") {
            let Ok(c) = c.to_str() else { continue };
            let pair = c.split(';').next().unwrap_or("").trim().to_string();
            let name = pair.split('=').next().unwrap_or("").to_string();
            self.cookies.retain(|p| !p.starts_with(&format!("{name}=")));
            self.cookies.push(pair);
        }
    }

    async fn send(&mut self, mut req: reqwest::RequestBuilder) -> Page {
        if !self.cookies.is_empty() {
            req = req.header("cookie", self.cookies.join("; "));
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        self.keep_cookies(&headers);
        Page {
            status,
            headers,
            body: r.text().await.unwrap(),
        }
    }

    /// `GET url`.
    pub async fn get(&mut self, url: &str) -> Page {
        let req = self.http.get(url);
        self.send(req).await
    }

    /// `POST url` with a form body.
    pub async fn post(&mut self, url: &str, form: &[(String, String)]) -> Page {
        let req = self.http.post(url).form(form);
        self.send(req).await
    }

    /// Submits the form of `page` to `url` with its hidden fields, changed
    /// or extended by `fields`.
    pub async fn submit(&mut self, url: &str, page: &Page, fields: &[(&str, &str)]) -> Page {
        let mut form = page.hidden_fields();
        for (k, v) in fields {
            form.retain(|(n, _)| n != k);
            form.push((k.to_string(), v.to_string()));
        }
        self.post(url, &form).await
    }
}

/// `{base}/oauth/authorize?…` for a code request with PKCE.
pub fn authorize_url(base: &str, params: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    format!("{base}/oauth/authorize?{}", q.finish())
}

/// The whole browser side of a code flow: the sign-in page, the user's
/// credentials, the consent page when one comes, and the redirect back.
/// Returns the redirect's query parameters (`code`, `state`, `iss`).
pub async fn sign_in_for_code(
    base: &str,
    client_id: &str,
    redirect_uri: &str,
    scope: &str,
    verifier: &str,
    user: (&str, &str),
) -> HashMap<String, String> {
    let mut browser = Browser::new();
    let challenge = pkce_challenge(verifier);
    let url = authorize_url(
        base,
        &[
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect_uri),
            ("scope", scope),
            ("state", "st-1"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ],
    );
    let page = browser.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let action = format!("{base}/oauth/authorize");
    let mut page = browser
        .submit(
            &action,
            &page,
            &[
                ("action", "sign_in"),
                ("username", user.0),
                ("password", user.1),
            ],
        )
        .await;
    if page.status == 200 && page.hidden("ticket").is_some() {
        page = browser
            .submit(&action, &page, &[("action", "consent")])
            .await;
    }
    assert_eq!(page.status, 302, "{}", page.body);
    page.redirect_params()
}
