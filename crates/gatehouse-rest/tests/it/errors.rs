//! Error statuses and their RFC 9457 bodies, and malformed input of every
//! kind: none of it may give a 5xx.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{header, problem, start, start_with};

/// Stable parts of a problem body for snapshots.
fn redact(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("instance");
    }
    v
}

#[tokio::test]
async fn other_versions_are_404_naming_v1() {
    let s = start().await;
    for path in [
        "/v2/books",
        "/v0/books",
        "/v10/books/1",
        "/v2",
        "/v3/openapi.json",
    ] {
        let p = problem(s.get(path).await, 404).await;
        assert_eq!(p["supported_versions"], json!(["v1"]), "{path}");
        assert!(p["detail"].as_str().unwrap().contains("v1"), "{path}");
    }
    let p = problem(s.get("/v2/books").await, 404).await;
    insta::assert_json_snapshot!("unsupported_version", redact(p));
    // Not a version at all: a plain 404 problem.
    let p = problem(s.get("/books/x").await, 404).await;
    assert!(p.get("supported_versions").is_none());
}

#[tokio::test]
async fn unknown_collections_and_paths_are_404() {
    let s = start().await;
    let p = problem(s.get("/v1/nope").await, 404).await;
    assert!(
        p["detail"].as_str().unwrap().contains(
            "authors, books, club-picks, group-books, group-members, notes, reading-groups, reviews"
        ),
        "{p}"
    );
    insta::assert_json_snapshot!("unknown_collection", redact(p));
    problem(s.get("/v1").await, 404).await;
    problem(s.get("/v1/books/x/reviews/y").await, 404).await;
    problem(s.get("/v1//books").await, 404).await;
    problem(s.get("/v1/books/%FF").await, 404).await;
    problem(s.get("/v1/books/a%00b").await, 404).await;
    // A trailing slash is tolerated.
    assert_eq!(s.get("/v1/books/").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let s = start().await;
    for (method, path, allow) in [
        (Method::DELETE, "/v1/books", "GET, HEAD, POST, OPTIONS"),
        (Method::PUT, "/v1/books", "GET, HEAD, POST, OPTIONS"),
        (
            Method::POST,
            "/v1/books/x",
            "GET, HEAD, PUT, PATCH, DELETE, OPTIONS",
        ),
        (Method::POST, "/v1/openapi.json", "GET, HEAD, OPTIONS"),
        (
            Method::from_bytes(b"BREW").unwrap(),
            "/v1/books",
            "GET, HEAD, POST, OPTIONS",
        ),
    ] {
        let r = s.send(method.clone(), path, None).await;
        assert_eq!(header(&r, "allow").unwrap(), allow, "{method} {path}");
        let p = problem(r, 405).await;
        assert_eq!(p["code"], "METHOD_NOT_ALLOWED");
    }
    let p = problem(s.send(Method::DELETE, "/v1/books", None).await, 405).await;
    insta::assert_json_snapshot!("method_not_allowed", p);
}

#[tokio::test]
async fn unacceptable_accept_is_406() {
    let s = start().await;
    for accept in [
        "text/html",
        "application/xml",
        "application/json;q=0",
        "application/problem+json",
        "garbage",
    ] {
        let r = s
            .client
            .get(s.url("/v1/books"))
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        problem(r, 406).await;
    }
    let r = s
        .client
        .post(s.url("/v1/authors"))
        .header("accept", "text/csv")
        .json(&json!({"name": "x"}))
        .send()
        .await
        .unwrap();
    let p = problem(r, 406).await;
    insta::assert_json_snapshot!("not_acceptable", p);
    // Nothing was written.
    assert_eq!(s.get_ok("/v1/authors").await, json!([]));
}

#[tokio::test]
async fn non_json_bodies_are_415() {
    let s = start().await;
    let a = s.author("A", None).await;
    for (method, path) in [
        (Method::POST, "/v1/authors".to_string()),
        (Method::PUT, format!("/v1/authors/{a}")),
        (Method::PATCH, format!("/v1/authors/{a}")),
        (Method::POST, format!("/v1/authors/{a}/books")),
    ] {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut req = s
                .client
                .request(method.clone(), s.url(&path))
                .body(r#"{"name":"x"}"#);
            if let Some(ct) = ct {
                req = req.header("content-type", ct);
            }
            let r = req.send().await.unwrap();
            problem(r, 415).await;
        }
    }
    let r = s
        .client
        .post(s.url("/v1/authors"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "accept").unwrap(), "application/json");
    insta::assert_json_snapshot!("unsupported_media_type", problem(r, 415).await);
    // JSON with a charset, and the vendor type, are JSON.
    let r = s
        .client
        .post(s.url("/v1/authors"))
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"name":"y"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = s
        .client
        .post(s.url("/v1/authors"))
        .header("content-type", "application/vnd.gatehouse.v1+json")
        .body(r#"{"name":"z"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn large_bodies_are_413() {
    let s = start_with("", 64).await;
    let big = json!({"name": "x".repeat(100)});
    let p = problem(s.send(Method::POST, "/v1/authors", Some(big)).await, 413).await;
    assert_eq!(p["code"], "PAYLOAD_TOO_LARGE");
    // Within the limit it works.
    s.create("/v1/authors", json!({"name": "x"})).await;

    // A chunked body without Content-Length is cut off at the limit too.
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let chunk = format!(r#"{{"name": "{}"}}"#, "y".repeat(200));
    let req = format!(
        "POST /v1/authors HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(out.contains("application/problem+json"), "{out}");
}

#[tokio::test]
async fn body_validation_is_422_naming_fields() {
    let s = start().await;
    let a = s.author("A", None).await;
    let cases = [
        (json!({"title": "t", "status": "AVAILABLE"}), vec!["author"]),
        (json!({"status": "AVAILABLE", "author": a}), vec!["title"]),
        (
            json!({"title": 5, "status": "AVAILABLE", "author": a}),
            vec!["title"],
        ),
        (
            json!({"title": "t", "status": "NOPE", "author": a}),
            vec!["status"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "year": "1999"}),
            vec!["year"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "year": 1.5}),
            vec!["year"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "year": 3_000_000_000u64}),
            vec!["year"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "published": "1999-02-30"}),
            vec!["published"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "published": "yesterday"}),
            vec!["published"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "rating": "high"}),
            vec!["rating"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "tags": "x"}),
            vec!["tags"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "tags": [null]}),
            vec!["tags"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "tags": [1]}),
            vec!["tags"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "nope": 1}),
            vec!["nope"],
        ),
        (
            // A to-many member takes a list of new rows (nested create).
            json!({"title": "t", "status": "AVAILABLE", "author": a, "reviews": "x"}),
            vec!["reviews"],
        ),
        (
            json!({"title": null, "status": "AVAILABLE", "author": a}),
            vec!["title"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": 7}),
            vec!["author"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": ""}),
            vec!["author"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "id": null}),
            vec!["id"],
        ),
        (
            json!({"title": "t", "status": "AVAILABLE", "author": a, "id": 5}),
            vec!["id"],
        ),
        (
            json!({"title": "a\u{0}b", "status": "AVAILABLE", "author": a}),
            vec!["title"],
        ),
        // A reference to a missing row (found by the store).
        (
            json!({"title": "t", "status": "AVAILABLE", "author": "ghost"}),
            vec!["author"],
        ),
        (
            json!({"year": "x", "nope": 1}),
            vec!["year", "nope", "title", "status", "author"],
        ),
    ];
    for (body, fields) in cases {
        let r = s.send(Method::POST, "/v1/books", Some(body.clone())).await;
        let p = problem(r, 422).await;
        assert_eq!(p["code"], "VALIDATION_FAILED");
        let mut got: Vec<&str> = p["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap())
            .collect();
        let mut want = fields.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{body}: {p}");
    }
    let r = s
        .send(
            Method::POST,
            "/v1/books",
            Some(json!({"title": 5, "status": "AVAILABLE", "author": a})),
        )
        .await;
    insta::assert_json_snapshot!("validation_failed", problem(r, 422).await);
    // Not an object.
    for body in [json!([]), json!("x"), json!(1), json!(null)] {
        let r = s.send(Method::POST, "/v1/authors", Some(body)).await;
        problem(r, 422).await;
    }
}

#[tokio::test]
async fn malformed_json_is_400() {
    let s = start().await;
    for body in [
        "",
        "{",
        "{\"name\": }",
        "nul",
        "{\"a\":1}{",
        "\u{feff}{}",
        "{\"name\": \"\\ud800\"}",
    ] {
        let r = s
            .client
            .post(s.url("/v1/authors"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let p = problem(r, 400).await;
        assert_eq!(p["code"], "MALFORMED_JSON", "{body:?}");
    }
}

/// A tiny deterministic generator, so the fuzz cases are the same every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[(self.next() as usize) % items.len()]
    }
}

#[tokio::test]
async fn odd_queries_and_bodies_never_give_5xx() {
    let s = start().await;
    let a = s.author("A", None).await;
    s.book("T", Some(1), &a).await;
    let names = [
        "page",
        "per_page",
        "sort",
        "fields",
        "year",
        "year_gt",
        "year_in",
        "title_contains",
        "status_in",
        "tags_contains",
        "published_lt",
        "rating",
        "author",
        "id_in",
        "x",
        "",
        "year_is_null",
        "%00",
        "%FF",
        "a[b]",
        "title_not_in",
    ];
    let values = [
        "",
        "0",
        "-1",
        "1",
        "18446744073709551616",
        "1e999",
        "NaN",
        "%00",
        "%FF%FE",
        "a,b,,",
        ",",
        "-",
        "--",
        "title,-year",
        "LOST",
        "2020-02-29",
        "9999-12-31",
        "true",
        "null",
        "%E2%80%AE",
        "+",
        "%2B1",
        "'; DROP TABLE book; --",
        "\\",
        "%22",
    ];
    let mut g = Lcg(7);
    for _ in 0..400 {
        let n = 1 + g.next() % 3;
        let q: Vec<String> = (0..n)
            .map(|_| format!("{}={}", g.pick(&names), g.pick(&values)))
            .collect();
        let path = format!("/v1/books?{}", q.join("&"));
        let r = s.get(&path).await;
        assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
        let path = format!("/v1/authors/{a}/books?{}", q.join("&"));
        let r = s.get(&path).await;
        assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
    }
    let fields = [
        "title",
        "year",
        "status",
        "author",
        "tags",
        "rating",
        "published",
        "id",
        "isbn",
        "reviews",
        "zz",
    ];
    let jsons = [
        "null",
        "1",
        "-2147483649",
        "2147483647",
        "1.5",
        "1e308",
        "\"\"",
        "\"x\"",
        "\"LOST\"",
        "\"2020-02-29\"",
        "[]",
        "[null]",
        "[1]",
        "[\"a\"]",
        "{}",
        "true",
        "\"\\u0000\"",
        "99999999999999999999999",
    ];
    let paths = ["/v1/books".to_string(), format!("/v1/authors/{a}/books")];
    for i in 0..300 {
        let n = g.next() % 5;
        let members: Vec<String> = (0..n)
            .map(|_| format!("\"{}\": {}", g.pick(&fields), g.pick(&jsons)))
            .collect();
        let body = format!("{{{}}}", members.join(", "));
        let (method, path) = match i % 3 {
            0 => (Method::POST, paths[i % 2].clone()),
            1 => (Method::PATCH, "/v1/books/x".to_string()),
            _ => (Method::PUT, "/v1/books/x".to_string()),
        };
        let r = s
            .client
            .request(method.clone(), s.url(&path))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(
            r.status().as_u16() < 500,
            "{method} {path} {body}: {}",
            r.status()
        );
    }
    // Odd paths and headers.
    for path in [
        "/v1/books/%",
        "/v1/books/%zz",
        "/v1/%2e%2e/x",
        "/v1/books/a%00b",
        "/v1/books/a%00b/reviews",
    ] {
        let r = s.get(path).await;
        assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
    }
    for accept in [
        &b","[..],
        b";;;",
        b"*/*;q=abc",
        b"application/json;q=NaN",
        b"*/*;q=-1",
        b"\x80\xff",
    ] {
        let value = reqwest::header::HeaderValue::from_bytes(accept).unwrap();
        let r = s
            .client
            .get(s.url("/v1/books"))
            .header("accept", value)
            .send()
            .await
            .unwrap();
        assert!(r.status().as_u16() < 500, "{accept:?}: {}", r.status());
    }
}

/// D12: an `_in` list longer than the store's bound (1,000 values) is a 400
/// problem naming the parameter, not a 500 from the database.
#[tokio::test]
async fn an_oversized_in_list_is_400() {
    let s = start().await;
    let many: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    let r = s
        .get(&format!("/v1/books?year_in={}", many.join(",")))
        .await;
    let body = problem(r, 400).await;
    assert!(body.to_string().contains("year_in"), "{body}");
    assert!(body.to_string().contains("at most 1000"), "{body}");
    let fine: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let r = s
        .get(&format!("/v1/books?year_in={}", fine.join(",")))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}
