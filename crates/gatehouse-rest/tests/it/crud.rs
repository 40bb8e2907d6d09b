//! Every method on collections and items, and the statuses they answer with.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::{header, problem, start, start_with};

#[tokio::test]
async fn post_creates_with_location_and_get_reads_it() {
    let s = start().await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "Le Guin", "born": "1929-10-21"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(header(&r, "content-type").unwrap(), "application/json");
    let location = header(&r, "location").unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    let id = body["id"].as_str().unwrap();
    assert_eq!(location, format!("/v1/authors/{id}"));
    // To-many relations are not part of bodies.
    assert_eq!(
        body,
        json!({"id": id, "name": "Le Guin", "born": "1929-10-21"})
    );

    let got = s.get_ok(&location).await;
    assert_eq!(got, body);

    // A to-one relation is written and read as the referenced id.
    let b = s
        .create(
            "/v1/books",
            json!({"title": "Earthsea", "status": "AVAILABLE", "author": id, "tags": ["a", "b"], "rating": 4.5, "published": "1968-01-01"}),
        )
        .await;
    assert_eq!(b["author"], id);
    assert_eq!(b["tags"], json!(["a", "b"]));
    assert_eq!(b["year"], json!(null));
    assert!(b.get("reviews").is_none());
}

#[tokio::test]
async fn client_supplied_id_and_duplicates() {
    let s = start().await;
    let a = s
        .create("/v1/authors", json!({"id": "le-guin", "name": "Le Guin"}))
        .await;
    assert_eq!(a["id"], "le-guin");
    s.get_ok("/v1/authors/le-guin").await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"id": "le-guin", "name": "Other"})),
        )
        .await;
    let p = problem(r, 409).await;
    assert!(p["detail"].as_str().unwrap().contains("le-guin"), "{p}");
    // @unique is a conflict too.
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "Le Guin"})),
        )
        .await;
    let p = problem(r, 409).await;
    assert_eq!(p["code"], "CONFLICT");
}

#[tokio::test]
async fn ids_with_reserved_characters_round_trip() {
    let s = start().await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"id": "a/b c?d", "name": "Odd"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = header(&r, "location").unwrap();
    assert_eq!(location, "/v1/authors/a%2Fb%20c%3Fd");
    let got = s.get_ok(&location).await;
    assert_eq!(got["id"], "a/b c?d");
}

#[tokio::test]
async fn get_missing_is_404() {
    let s = start().await;
    let p = problem(s.get("/v1/books/nope").await, 404).await;
    assert_eq!(p["code"], "NOT_FOUND");
    assert!(p["detail"].as_str().unwrap().contains("nope"));
}

#[tokio::test]
async fn get_one_with_sparse_fields() {
    let s = start().await;
    let a = s.author("A", Some("1900-01-01")).await;
    let got = s.get_ok(&format!("/v1/authors/{a}?fields=born")).await;
    assert_eq!(got, json!({"id": a, "born": "1900-01-01"}));
    let p = problem(s.get(&format!("/v1/authors/{a}?fields=nope")).await, 400).await;
    assert_eq!(p["invalid_params"][0]["name"], "fields");
    let p = problem(s.get(&format!("/v1/authors/{a}?page=2")).await, 400).await;
    assert_eq!(p["invalid_params"][0]["name"], "page");
}

#[tokio::test]
async fn put_replaces_the_whole_row() {
    let s = start().await;
    let a = s.author("A", None).await;
    let b = s
        .create(
            "/v1/books",
            json!({"title": "T", "year": 1999, "isbn": "x", "status": "AVAILABLE", "author": a}),
        )
        .await;
    let id = b["id"].as_str().unwrap();
    let path = format!("/v1/books/{id}");
    let r = s
        .send(
            Method::PUT,
            &path,
            Some(json!({"id": id, "title": "T2", "status": "LOST", "author": a})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let got: serde_json::Value = r.json().await.unwrap();
    assert_eq!(got["title"], "T2");
    assert_eq!(got["status"], "LOST");
    // Omitted nullable fields become null.
    assert_eq!(got["year"], json!(null));
    assert_eq!(got["isbn"], json!(null));
    assert_eq!(s.get_ok(&path).await, got);

    // Missing required field: 422 naming it.
    let r = s
        .send(
            Method::PUT,
            &path,
            Some(json!({"title": "T3", "author": a})),
        )
        .await;
    let p = problem(r, 422).await;
    assert_eq!(
        p["errors"],
        json!([{"field": "status", "message": "is required"}])
    );
    // The id cannot change.
    let r = s
        .send(
            Method::PUT,
            &path,
            Some(json!({"id": "other", "title": "T", "status": "LOST", "author": a})),
        )
        .await;
    let p = problem(r, 422).await;
    assert_eq!(p["errors"][0]["field"], "id");
    // PUT never creates.
    let r = s
        .send(
            Method::PUT,
            "/v1/books/absent",
            Some(json!({"title": "T", "status": "LOST", "author": a})),
        )
        .await;
    problem(r, 404).await;
}

#[tokio::test]
async fn patch_is_a_json_merge_patch() {
    let s = start().await;
    let a = s.author("A", None).await;
    let b = s
        .create(
            "/v1/books",
            json!({"title": "T", "year": 1999, "isbn": "x", "rating": 3.5, "status": "AVAILABLE", "author": a}),
        )
        .await;
    let id = b["id"].as_str().unwrap();
    let path = format!("/v1/books/{id}");
    let r = s
        .client
        .patch(s.url(&path))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"year": null, "title": "New"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let got: serde_json::Value = r.json().await.unwrap();
    // null clears, given members are set, omitted members are untouched.
    assert_eq!(got["year"], json!(null));
    assert_eq!(got["title"], "New");
    assert_eq!(got["isbn"], "x");
    assert_eq!(got["rating"], 3.5);
    assert_eq!(s.get_ok(&path).await, got);

    // application/json is accepted too.
    let r = s
        .send(Method::PATCH, &path, Some(json!({"tags": ["t"]})))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let got: serde_json::Value = r.json().await.unwrap();
    assert_eq!(got["tags"], json!(["t"]));
    assert_eq!(got["title"], "New");

    // An empty patch changes nothing.
    let r = s.send(Method::PATCH, &path, Some(json!({}))).await;
    assert_eq!(r.status(), StatusCode::OK);

    // null for a required field: 422 naming it.
    let r = s
        .send(Method::PATCH, &path, Some(json!({"title": null})))
        .await;
    let p = problem(r, 422).await;
    assert_eq!(p["errors"][0]["field"], "title");

    let r = s
        .send(
            Method::PATCH,
            "/v1/books/absent",
            Some(json!({"title": "x"})),
        )
        .await;
    problem(r, 404).await;
}

#[tokio::test]
async fn delete_then_gone_and_referenced_rows_conflict() {
    let s = start().await;
    let a = s.author("A", None).await;
    let b = s.book("T", None, &a).await;
    // The author is referenced by the book: 409.
    let r = s
        .send(Method::DELETE, &format!("/v1/authors/{a}"), None)
        .await;
    let p = problem(r, 409).await;
    assert_eq!(p["code"], "CONFLICT");

    let r = s
        .send(Method::DELETE, &format!("/v1/books/{b}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(r.bytes().await.unwrap().is_empty());
    problem(s.get(&format!("/v1/books/{b}")).await, 404).await;
    let r = s
        .send(Method::DELETE, &format!("/v1/books/{b}"), None)
        .await;
    problem(r, 404).await;

    let r = s
        .send(Method::DELETE, &format!("/v1/authors/{a}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn head_and_options() {
    let s = start().await;
    let r = s.send(Method::HEAD, "/v1/books", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-total-count").unwrap(), "0");
    assert!(r.bytes().await.unwrap().is_empty());
    let r = s.send(Method::OPTIONS, "/v1/books", None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&r, "allow").unwrap(), "GET, HEAD, POST, OPTIONS");
    let r = s.send(Method::OPTIONS, "/v1/books/x", None).await;
    assert_eq!(
        header(&r, "allow").unwrap(),
        "GET, HEAD, PUT, PATCH, DELETE, OPTIONS"
    );
}

#[tokio::test]
async fn vendor_media_type_is_echoed() {
    let s = start().await;
    for (accept, want) in [
        (
            "application/vnd.gatehouse.v1+json",
            "application/vnd.gatehouse.v1+json",
        ),
        ("application/json", "application/json"),
        ("*/*", "application/json"),
        ("text/html;q=0.9, application/*;q=0.5", "application/json"),
        (
            "application/json;q=0.5, application/vnd.gatehouse.v1+json",
            "application/vnd.gatehouse.v1+json",
        ),
    ] {
        let r = s
            .client
            .get(s.url("/v1/books"))
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{accept}");
        assert_eq!(header(&r, "content-type").unwrap(), want, "{accept}");
    }
}

#[tokio::test]
async fn rest_writes_emit_change_events() {
    let s = start().await;
    let mut events = s.store.subscribe();
    let a = s.author("A", None).await;
    let ev = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.entity, "Author");
    assert_eq!(ev.id, a);
    assert_eq!(ev.kind, gatehouse_store::ChangeKind::Created);
    s.send(
        Method::PATCH,
        &format!("/v1/authors/{a}"),
        Some(json!({"born": "2000-01-01"})),
    )
    .await;
    let ev = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.kind, gatehouse_store::ChangeKind::Updated);
}

#[tokio::test]
async fn base_path_shapes_location_and_link() {
    let s = start_with("/api", 1024 * 1024).await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"id": "x", "name": "A"})),
        )
        .await;
    assert_eq!(header(&r, "location").unwrap(), "/api/v1/authors/x");
    let r = s.get("/v1/authors").await;
    assert_eq!(r.status(), StatusCode::OK);
    let link = header(&r, "link").unwrap();
    assert!(
        link.starts_with("</api/v1/authors?page=1&per_page=50>; rel=\"first\""),
        "{link}"
    );
    let doc = s.get_ok("/v1/openapi.json").await;
    assert_eq!(doc["servers"], json!([{"url": "/api"}]));
    problem(s.get("/v2/authors").await, 404).await;
}

#[tokio::test]
async fn merges_beside_the_other_routers_at_the_root() {
    use axum::routing::{get, post};
    let model = gatehouse_testkit::example_model();
    let db = gatehouse_testkit::TestDb::sqlite();
    let store = db.open(&model).await;
    let others = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/graphql",
            get(|| async { "graphql" }).post(|| async { "graphql" }),
        )
        .route("/graphql/schema.json", get(|| async { "schema" }))
        .route("/graphql/assets/{name}", get(|| async { "asset" }))
        .route("/oauth/token", post(|| async { "token" }))
        .route("/.well-known/jwks.json", get(|| async { "jwks" }));
    let app = others.merge(gatehouse_rest::router(crate::state(store, "", 1024)));
    let served = gatehouse_testkit::TestServer::start(app).await;
    let get = |p: &str| served.client.get(served.url(p)).send();
    for (path, body) in [
        ("/healthz", "ok"),
        ("/graphql", "graphql"),
        ("/graphql/schema.json", "schema"),
        ("/graphql/assets/x.js", "asset"),
        ("/.well-known/jwks.json", "jwks"),
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.text().await.unwrap(), body, "{path}");
    }
    assert_eq!(get("/v1/books").await.unwrap().status(), StatusCode::OK);
    let r = get("/v2/books").await.unwrap();
    problem(r, 404).await;
}
