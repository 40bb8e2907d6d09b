//! The OpenAPI document: served, described, snapshotted.

use serde_json::Value;

use crate::{header, start};

#[tokio::test]
async fn served_document_matches_the_snapshot() {
    let s = start().await;
    let r = s.get("/v1/openapi.json").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type").unwrap(), "application/json");
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    insta::assert_json_snapshot!("openapi", doc);
}

#[tokio::test]
async fn every_path_parameter_and_body_is_described() {
    let s = start().await;
    let doc = s.get_ok("/v1/openapi.json").await;
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/books",
        "/v1/books/{id}",
        "/v1/authors",
        "/v1/authors/{id}",
        "/v1/authors/{authorId}/books",
        "/v1/books/{bookId}/reviews",
        "/v1/reviews",
        "/v1/reviews/{id}",
        "/v1/openapi.json",
    ] {
        assert!(paths.contains_key(p), "{p} missing");
    }
    let params = doc["components"]["parameters"].as_object().unwrap();
    for op in [
        "", "_not", "_in", "_not_in", "_lt", "_lte", "_gt", "_gte", "_is_null",
    ] {
        assert!(params.contains_key(&format!("Book.year{op}")), "year{op}");
    }
    for op in ["_contains", "_starts_with", "_ends_with"] {
        assert!(params.contains_key(&format!("Book.title{op}")), "title{op}");
        assert!(!params.contains_key(&format!("Book.year{op}")), "year{op}");
    }
    assert!(params.contains_key("Book.tags_contains"));
    assert!(!params.contains_key("Book.tags"));
    assert_eq!(params["per_page"]["schema"]["maximum"], 500);
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for n in [
        "Book",
        "BookSelection",
        "BookCreate",
        "BookReplace",
        "BookPatch",
        "BookCreateViaAuthor",
        "BookStatus",
        "Problem",
    ] {
        assert!(schemas.contains_key(n), "{n}");
    }
    assert!(
        schemas["BookCreateViaAuthor"]["properties"]
            .get("author")
            .is_none()
    );
    let patch = &paths["/v1/books/{id}"]["patch"]["requestBody"]["content"];
    assert!(patch.get("application/merge-patch+json").is_some());
    assert!(doc["components"]["securitySchemes"]["bearerAuth"].is_object());
    // The function and the endpoint agree.
    let store = s.store.clone();
    let same = gatehouse_rest::openapi_document(&crate::state(store, "", 1024));
    assert_eq!(same, doc);
}
