//! Scopes decide what a token reaches, through every entry point.

use serde_json::json;

use crate::{APP, Server};

#[tokio::test]
async fn write_only_tokens_cannot_read_through_writes() {
    let server = Server::start("");
    let f = server.fixture().await;
    let writer = server.token("writer").await;
    let (status, body) = server
        .rest("GET", &format!("/v1/books/{}", f.book), Some(&writer), None)
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["code"], "FORBIDDEN", "{body}");
    // Every REST refusal carries its code, the authentication layer's too.
    let (status, body) = server.rest("GET", "/v1/books", None, None).await;
    assert_eq!(status, 401);
    assert_eq!(body["code"], "UNAUTHENTICATED", "{body}");
    let (status, body) = server
        .rest("GET", "/v1/books", Some("not-a-token"), None)
        .await;
    assert_eq!(status, 401);
    assert_eq!(body["code"], "UNAUTHENTICATED", "{body}");
    // REST: the write happens and answers only the id.
    let (status, body) = server
        .rest(
            "PATCH",
            &format!("/v1/books/{}", f.book),
            Some(&writer),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"id": f.book}));
    let (status, body) = server
        .rest(
            "POST",
            "/v1/authors",
            Some(&writer),
            Some(json!({"name": "W"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    // GraphQL: selecting more than `id` is refused before anything is written.
    let before = server.snapshot().await;
    let r = server
        .gql(
            Some(&writer),
            "mutation($b: ID!) { updateBook(id: $b, patch: {title: \"X\"}) { title isbn } }",
            json!({"b": f.book}),
        )
        .await;
    assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
    assert_eq!(server.snapshot().await, before);
    let r = server
        .gql(
            Some(&writer),
            "mutation($b: ID!) { updateBook(id: $b, patch: {year: 2001}) { id __typename } }",
            json!({"b": f.book}),
        )
        .await;
    assert_eq!(r["data"]["updateBook"]["id"], f.book.as_str(), "{r}");
}

#[tokio::test]
async fn introspection_needs_the_read_scope_on_every_route() {
    let server = Server::start("");
    let writer = server.token("writer").await;
    let reader = server.token("reader").await;
    for q in [
        "{ __schema { types { name } } }",
        "{ __type(name: \"Secret\") { fields { name } } }",
    ] {
        let r = server.gql(Some(&writer), q, json!({})).await;
        assert!(r["errors"].is_array(), "{q}: {r}");
        assert!(
            r.get("data").is_none_or(|d| d.is_null()
                || d.get("__schema").is_none_or(|v| v.is_null())
                    && d.get("__type").is_none_or(|v| v.is_null())),
            "{q}: {r}"
        );
        let r = server.gql(Some(&reader), q, json!({})).await;
        assert!(r.get("errors").is_none(), "{q}: {r}");
    }
    let r = server
        .request("GET", "/graphql/schema.json", Some(&writer))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn root_field_and_type_scopes_hold_in_both_executors() {
    let server = Server::start("");
    let f = server.fixture().await;
    let reader = server.token("reader").await;
    let admin = server.token("admin").await;
    // The same plain queries go through the planned executor; variables
    // and a fragment make async-graphql run them.
    for q in [
        "{ adminBooks { id } }",
        "query($n: Int) { adminBooks(first: $n) { ...B } } fragment B on Book { id }",
        "{ secrets { code } }",
        "{ books { id vault { code } } }",
        "{ books { id secrets { code } } }",
    ] {
        let r = server.gql(Some(&reader), q, json!({"n": 5})).await;
        let code = &r["errors"][0]["extensions"]["code"];
        assert_eq!(code, "FORBIDDEN", "{q}: {r}");
        let leaked = r.to_string().contains("s3cr3t");
        assert!(!leaked, "{q}: {r}");
    }
    let d = server
        .data(&admin, "{ adminBooks { id } }", json!({}))
        .await;
    assert_eq!(d["adminBooks"][0]["id"], f.book.as_str());
    // A token from a client that may not grant `secret` cannot hold it.
    let demo = server.token_response(crate::DEMO, "power", None).await;
    assert!(
        !demo["scope"].as_str().unwrap().contains("secret"),
        "{demo}"
    );
    let _ = APP;
}

#[tokio::test]
async fn graphql_cannot_compare_a_relation_the_caller_may_not_read() {
    let server = Server::start("");
    let f = server.fixture().await;
    let reader = server.token("reader").await;
    // Which books link to a given secret would tell that the id exists.
    for (q, vars) in [
        (
            "query($v: ID) { books(where: {vault: $v}) { id } }",
            json!({"v": f.secret}),
        ),
        ("{ books(where: {vault: \"x\"}) { id } }", json!({})),
        (
            "query($v: ID) { authors { books(first: 5) { id } } books(where: {vault: $v}) { title } }",
            json!({"v": f.secret}),
        ),
    ] {
        let r = server.gql(Some(&reader), q, vars).await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "FORBIDDEN",
            "{q}: {r}"
        );
    }
    let power = server.token("power").await;
    let d = server
        .data(
            &power,
            "query($v: ID) { books(where: {vault: $v}) { id } }",
            json!({"v": f.secret}),
        )
        .await;
    assert_eq!(d["books"][0]["id"], f.book.as_str());
}
