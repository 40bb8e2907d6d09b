//! GraphQL over HTTP: methods, media types, status codes, limits.

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};

use crate::{start, start_with};

#[tokio::test]
async fn content_negotiation_and_status_codes() {
    let s = start().await;
    let url = format!("{}/graphql", s.base);
    // application/json: a validation failure is still 200.
    let r = s
        .client
        .post(&url)
        .header(ACCEPT, "application/json")
        .json(&json!({"query": "{ nope }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    // application/graphql-response+json: 400 before execution, 200 after.
    let r = s
        .client
        .post(&url)
        .header(ACCEPT, "application/graphql-response+json")
        .json(&json!({"query": "{ nope }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        r.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/graphql-response+json")
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "GRAPHQL_VALIDATION_FAILED"
    );
    let r = s
        .client
        .post(&url)
        .header(ACCEPT, "application/graphql-response+json")
        .json(&json!({"query": "{ books(first: 9999) { id } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "an execution error is 200");
    let r = s
        .client
        .post(&url)
        .header(ACCEPT, "application/graphql-response+json")
        .json(&json!({"query": "{ books { id "}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Unacceptable Accept: 406.
    let r = s
        .client
        .post(&url)
        .header(ACCEPT, "text/csv")
        .json(&json!({"query": "{ __typename }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
    let post: Value = r.json().await.unwrap();
    // GET negotiates by the same rule and says the same.
    let r = s
        .client
        .get(&url)
        .query(&[("query", "{ __typename }")])
        .header(ACCEPT, "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
    let get: Value = r.json().await.unwrap();
    assert_eq!(get, post);
    assert!(
        get["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("application/graphql-response+json")
    );
}

#[tokio::test]
async fn malformed_requests_are_400() {
    let s = start().await;
    let url = format!("{}/graphql", s.base);
    for body in [
        "{not json",
        "[]",
        r#"{"query": 5}"#,
        r#"{"variables": {}}"#,
        r#"{"query": "{ __typename }", "variables": "x"}"#,
        r#"{"query": "{ __typename }", "operationName": 3}"#,
    ] {
        let r = s
            .client
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let v: Value = r.json().await.unwrap();
        assert!(v["errors"][0]["message"].is_string(), "{body}: {v}");
    }
    // Nulls are allowed for the optional members.
    let r = s.client.post(&url)
        .json(&json!({"query": "{ __typename }", "variables": null, "operationName": null, "extensions": null}))
        .send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Wrong content type: 415; a non-utf-8 charset too.
    let r = s
        .client
        .post(&url)
        .header(CONTENT_TYPE, "text/plain")
        .body("{ __typename }")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = s
        .client
        .post(&url)
        .header(CONTENT_TYPE, "application/json; charset=utf-16")
        .body(r#"{"query":"{ __typename }"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn body_size_limit_is_413() {
    let s = start_with(Default::default(), 2048).await;
    let big = "x".repeat(4096);
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .json(&json!({"query": format!("{{ __typename }} # {big}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn get_runs_queries_and_refuses_mutations() {
    let s = start().await;
    let r = s
        .client
        .get(format!("{}/graphql", s.base))
        .query(&[
            ("query", "query Q($n: Int) { authors(limit: $n) { id } }"),
            ("variables", r#"{"n": 1}"#),
            ("operationName", "Q"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"data": {"authors": []}})
    );
    let r = s
        .client
        .get(format!("{}/graphql", s.base))
        .query(&[("query", r#"mutation { createAuthor(name: "x") { id } }"#)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "POST");
    let d = s.data("{ authors { id } }", json!({})).await;
    assert_eq!(d["authors"], json!([]), "the refused mutation did not run");
    let r = s
        .client
        .get(format!("{}/graphql", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .client
        .get(format!("{}/graphql", s.base))
        .query(&[("query", "{ __typename }"), ("variables", "{bad")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .client
        .delete(format!("{}/graphql", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers()["allow"], "GET, POST");
}

#[tokio::test]
async fn graphiql_page_and_assets_are_local() {
    let s = start().await;
    let r = s
        .client
        .get(format!("{}/graphql", s.base))
        .header(ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The page receives authorization codes in its URL: never framed,
    // never cached, no referrer, and only the server's own scripts.
    let header = |name: &str| r.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("cache-control"), "no-store");
    assert_eq!(header("x-frame-options"), "DENY");
    assert_eq!(header("referrer-policy"), "no-referrer");
    let csp = header("content-security-policy");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self';"), "{csp}");
    // The bundled stylesheet's fonts and icons are `data:` URLs: exactly
    // those are allowed beside the server's own files, nothing else.
    let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
    assert_eq!(
        directives,
        [
            "default-src 'self'",
            "img-src 'self' data:",
            "font-src 'self' data:",
            "style-src 'self' 'unsafe-inline'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        ],
        "{csp}"
    );
    let html = r.text().await.unwrap();
    assert!(!html.contains("https://"), "no CDN: {html}");
    assert!(!html.contains("<script>"), "no inline script: {html}");
    assert!(html.contains(">Sign in</button>"), "{html}");
    assert!(html.contains(r#"data-client-id="graphiql""#), "{html}");
    for asset in [
        "graphiql.min.js",
        "graphiql.min.css",
        "gatehouse-graphiql.js",
        "gatehouse-graphiql.css",
        "react.production.min.js",
        "react-dom.production.min.js",
    ] {
        assert!(html.contains(&format!("/graphql/assets/{asset}")));
        let r = s
            .client
            .get(format!("{}/graphql/assets/{asset}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{asset}");
        let bytes = r.bytes().await.unwrap();
        assert!(bytes.len() > 300, "{asset}");
        if asset.ends_with(".css") {
            // What the policy allows from `data:` is what the styles use.
            let css = String::from_utf8_lossy(&bytes);
            for (i, _) in css.match_indices("url(") {
                let target = css[i + 4..].trim_start_matches(['"', '\'']);
                if let Some(kind) = target.strip_prefix("data:") {
                    assert!(
                        kind.starts_with("image/") || kind.starts_with("font/"),
                        "{asset}: {}",
                        &kind[..kind.len().min(40)]
                    );
                }
            }
        }
    }
    let r = s
        .client
        .get(format!("{}/graphql/assets/nope.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn schema_documents() {
    let s = start().await;
    let v: Value = s
        .client
        .get(format!("{}/graphql/schema.json", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"]["__schema"]["queryType"]["name"], "Query");
    let types = v["data"]["__schema"]["types"].as_array().unwrap();
    assert!(
        types
            .iter()
            .any(|t| t["name"] == "Date" && t["kind"] == "SCALAR")
    );
    let sdl = s
        .client
        .get(format!("{}/graphql/schema.graphql", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(sdl.contains("type Book"), "{sdl}");
}

#[tokio::test]
async fn health_and_readiness() {
    let s = start().await;
    let r = s
        .client
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = s
        .client
        .get(format!("{}/readyz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    s.store.close().await;
    let r = s
        .client
        .get(format!("{}/readyz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn graphql_answers_503_while_the_store_is_down() {
    let s = start().await;
    s.store.close().await;
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .header("x-request-id", "down-1")
        .json(&serde_json::json!({"query": "{ books { id } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["x-request-id"], "down-1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "SERVICE_UNAVAILABLE",
        "{body}"
    );
    // A request refused before execution is still the client's problem.
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .json(&serde_json::json!({"query": "{ books { nope } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
