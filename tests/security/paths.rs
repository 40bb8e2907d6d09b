//! REST authorization cannot be bypassed by spelling a path differently:
//! every segment percent-encoded in turn (lower- and upper-case hex, one
//! character or all), trailing slashes, on every method and nesting level.
//! A read-only token never writes and never reads a protected type; the
//! same spellings with full rights reach the resource, so the refusals are
//! the authorization's doing, not a 404.

use serde_json::{Value, json};

use crate::{Fixture, Server};

/// `c` percent-encoded, with upper- or lower-case hex digits.
fn pct(c: char, upper: bool) -> String {
    let mut buf = [0u8; 4];
    c.encode_utf8(&mut buf)
        .bytes()
        .map(|b| {
            if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}

/// Other spellings of one path segment that decode to the same text.
fn spellings(seg: &str) -> Vec<String> {
    let first = seg.chars().next().unwrap();
    let last = seg.chars().last().unwrap();
    let rest = &seg[first.len_utf8()..];
    let init = &seg[..seg.len() - last.len_utf8()];
    let mut out = vec![
        format!("{}{rest}", pct(first, false)),
        format!("{}{rest}", pct(first, true)),
        format!("{init}{}", pct(last, true)),
        seg.chars().map(|c| pct(c, false)).collect(),
        seg.chars().map(|c| pct(c, true)).collect(),
    ];
    out.dedup();
    out
}

/// Every spelling of `segments` that differs from the plain path in one
/// segment, plus the plain path, each also with a trailing slash.
fn paths(segments: &[&str]) -> Vec<String> {
    let join = |segs: &[String]| format!("/{}", segs.join("/"));
    let plain: Vec<String> = segments.iter().map(|s| s.to_string()).collect();
    let mut out = vec![join(&plain)];
    for i in 0..segments.len() {
        for s in spellings(segments[i]) {
            let mut segs = plain.clone();
            segs[i] = s;
            out.push(join(&segs));
        }
    }
    let all: Vec<String> = segments
        .iter()
        .map(|s| s.chars().map(|c| pct(c, false)).collect())
        .collect();
    out.push(join(&all));
    let with_slash: Vec<String> = out.iter().map(|p| format!("{p}/")).collect();
    out.extend(with_slash);
    out
}

/// (method, path segments, body) of every request a `read`-only token
/// must not get a 2xx for.
fn forbidden_to_reader(f: &Fixture) -> Vec<(&'static str, Vec<String>, Option<Value>)> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        // Reads of a type that needs `secret`, at every nesting level.
        ("GET", s(&["v1", "secrets"]), None),
        ("HEAD", s(&["v1", "secrets"]), None),
        ("GET", s(&["v1", "secrets", &f.secret]), None),
        ("GET", s(&["v1", "books", &f.book, "secrets"]), None),
        ("GET", s(&["v1", "vaults"]), None),
        ("GET", s(&["v1", "vaults", &f.vault]), None),
        // Open children of a protected parent: the parent is read too.
        ("GET", s(&["v1", "vaults", &f.vault, "notes"]), None),
        (
            "POST",
            s(&["v1", "vaults", &f.vault, "notes"]),
            Some(json!({"text": "planted"})),
        ),
        // Writes, at every nesting level.
        ("POST", s(&["v1", "secrets"]), Some(json!({"code": "x"}))),
        (
            "PATCH",
            s(&["v1", "secrets", &f.secret]),
            Some(json!({"level": 99})),
        ),
        (
            "PUT",
            s(&["v1", "secrets", &f.secret]),
            Some(json!({"code": "y", "level": 98})),
        ),
        ("DELETE", s(&["v1", "secrets", &f.secret]), None),
        (
            "POST",
            s(&["v1", "books", &f.book, "secrets"]),
            Some(json!({"code": "z"})),
        ),
        ("POST", s(&["v1", "authors"]), Some(json!({"name": "Eve"}))),
        (
            "POST",
            s(&["v1", "books"]),
            Some(json!({"title": "T", "status": "AVAILABLE", "author": f.author})),
        ),
        (
            "PATCH",
            s(&["v1", "books", &f.book]),
            Some(json!({"year": 1999})),
        ),
        (
            "PUT",
            s(&["v1", "books", &f.book]),
            Some(json!({"title": "T", "status": "AVAILABLE", "author": f.author})),
        ),
        ("DELETE", s(&["v1", "books", &f.book]), None),
        (
            "POST",
            s(&["v1", "books", &f.book, "reviews"]),
            Some(json!({"stars": 5})),
        ),
        (
            "PATCH",
            s(&["v1", "notes", &f.note]),
            Some(json!({"text": "x"})),
        ),
        ("DELETE", s(&["v1", "authors", &f.author]), None),
    ]
}

async fn no_spelling_bypasses_rest_authorization(server: &Server) {
    let f = server.fixture().await;
    let reader = server.token("reader").await;
    let power = server.token("power").await;
    let before = server.snapshot().await;
    let mut tried = 0;
    for (method, segments, body) in forbidden_to_reader(&f) {
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        for path in paths(&segs) {
            let (status, answer) = server
                .rest(method, &path, Some(&reader), body.clone())
                .await;
            tried += 1;
            assert!(
                !(200..300).contains(&status) && status != 500,
                "{} {method} {path} with a read-only token: {status} {answer}",
                server.backend()
            );
        }
    }
    assert!(tried > 500, "only {tried} requests");
    assert_eq!(
        server.snapshot().await,
        before,
        "a refused request changed data"
    );
    // The spellings do reach the resources: with full rights they answer.
    for segs in [
        vec!["v1", "secrets"],
        vec!["v1", "secrets", &f.secret],
        vec!["v1", "books", &f.book, "secrets"],
        vec!["v1", "vaults", &f.vault, "notes"],
    ] {
        for path in paths(&segs) {
            let (status, answer) = server.rest("GET", &path, Some(&power), None).await;
            assert_eq!(status, 200, "{} GET {path}: {answer}", server.backend());
        }
    }
}

#[tokio::test]
async fn no_spelling_bypasses_rest_authorization_on_each_backend() {
    for server in Server::each_backend("").await {
        no_spelling_bypasses_rest_authorization(&server).await;
    }
}

#[tokio::test]
async fn nested_paths_need_the_parents_read_scope_and_reveal_no_ids() {
    let server = Server::start("");
    let f = server.fixture().await;
    let reader = server.token("reader").await;
    // 403 for an existing and a missing vault alike: no existence oracle.
    let (a, _) = server
        .rest(
            "GET",
            &format!("/v1/vaults/{}/notes", f.vault),
            Some(&reader),
            None,
        )
        .await;
    let (b, _) = server
        .rest("GET", "/v1/vaults/no-such-vault/notes", Some(&reader), None)
        .await;
    assert_eq!((a, b), (403, 403));
    // A to-one reference to a protected type is not shown, as GraphQL
    // refuses `Book.vault`.
    let (status, book) = server
        .rest("GET", &format!("/v1/books/{}", f.book), Some(&reader), None)
        .await;
    assert_eq!(status, 200, "{book}");
    assert!(book.get("vault").is_none(), "{book}");
    assert_eq!(book["title"], "Dune");
    let (status, list) = server.rest("GET", "/v1/books", Some(&reader), None).await;
    assert_eq!(status, 200);
    assert!(list[0].get("vault").is_none(), "{list}");
    // Filtering, sorting or selecting by it is refused.
    for q in [
        format!("vault={}", f.secret),
        "vault_is_null=true".to_string(),
        "fields=title,vault".to_string(),
        "sort=vault".to_string(),
    ] {
        let (status, body) = server
            .rest("GET", &format!("/v1/books?{q}"), Some(&reader), None)
            .await;
        assert_eq!(status, 403, "?{q}: {body}");
    }
    let (status, body) = server
        .rest(
            "GET",
            &format!("/v1/books/{}?fields=vault", f.book),
            Some(&reader),
            None,
        )
        .await;
    assert_eq!(status, 403, "{body}");
    // Setting it does not tell whether an id exists: 403 before any lookup.
    let writer = server
        .token_response(crate::APP, "power", Some("read write"))
        .await;
    let writer = writer["access_token"].as_str().unwrap();
    for id in [f.secret.as_str(), "no-such-secret"] {
        let (status, body) = server
            .rest(
                "PATCH",
                &format!("/v1/books/{}", f.book),
                Some(writer),
                Some(json!({"vault": id})),
            )
            .await;
        assert_eq!(status, 403, "{body}");
        let r = server
            .gql(
                Some(writer),
                "mutation($b: ID!, $v: ID) { updateBook(id: $b, patch: {vault: $v}) { id } }",
                json!({"b": f.book, "v": id}),
            )
            .await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
    }
    // With the scope, the reference is shown.
    let power = server.token("power").await;
    let (_, book) = server
        .rest("GET", &format!("/v1/books/{}", f.book), Some(&power), None)
        .await;
    assert_eq!(book["vault"], f.secret.as_str());
}
