//! The requests most tests begin with.

use serde_json::{Value, json};

/// POSTs a GraphQL request to `url` (with `token` as its bearer, if any)
/// and returns the JSON body whatever the status; panics when the body is
/// not JSON.
pub async fn graphql(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    query: &str,
    variables: Value,
) -> Value {
    let mut req = client
        .post(url)
        .json(&json!({"query": query, "variables": variables}));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let text = req.send().await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// The token response (RFC 6749 §5.1) of a password grant at
/// `{base}/oauth/token` for `user`, the OAuth client authenticating with
/// HTTP Basic; panics unless it answers 200.
pub async fn password_token(
    client: &reqwest::Client,
    base: &str,
    oauth_client: (&str, &str),
    user: (&str, &str),
    scope: Option<&str>,
) -> Value {
    let mut form = vec![
        ("grant_type", "password"),
        ("username", user.0),
        ("password", user.1),
    ];
    if let Some(s) = scope {
        form.push(("scope", s));
    }
    let r = client
        .post(format!("{base}/oauth/token"))
        .basic_auth(oauth_client.0, Some(oauth_client.1))
        .form(&form)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "token for {}: {text}", user.0);
    serde_json::from_str(&text).unwrap()
}

/// The value of `r`'s header `name`, when present; panics when it is not
/// visible ASCII.
pub fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

/// The payload of a compact JWS (an access or ID token), decoded without
/// checking its signature: for asserting what a token states.
pub fn jwt_payload(jwt: &str) -> Value {
    use base64::Engine;
    let payload = jwt.split('.').nth(1).expect("a compact JWS has a payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("the payload is base64url");
    serde_json::from_slice(&bytes).expect("the payload is JSON")
}
