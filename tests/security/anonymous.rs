//! Anonymous reads (`auth.anonymous_read = true`) grant what the default
//! `read` scope grants, nothing more.

use serde_json::json;

use crate::Server;

const OPEN: &str = "[auth]\nanonymous_read = true\n";

#[tokio::test]
async fn anonymous_reads_hold_only_the_default_read_scope() {
    let server = Server::start(OPEN);
    let f = server.fixture().await;
    // Open types: readable without credentials.
    let (status, body) = server.rest("GET", "/v1/books", None, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body[0].get("vault").is_none(), "{body}");
    let r = server.gql(None, "{ books { title } }", json!({})).await;
    assert_eq!(r["data"]["books"][0]["title"], "Dune", "{r}");
    // Protected types and root fields: 401, never data.
    for path in [
        "/v1/secrets".to_string(),
        "/%761/secrets".to_string(),
        format!("/v1/secrets/{}", f.secret),
        format!("/v1/books/{}/%73ecrets", f.book),
        format!("/v1/vaults/{}/notes", f.vault),
    ] {
        let (status, body) = server.rest("GET", &path, None, None).await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    for q in [
        "{ secrets { code } }",
        "{ adminBooks { id } }",
        "{ books { vault { code } } }",
    ] {
        let r = server.gql(None, q, json!({})).await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
            "{q}: {r}"
        );
        assert!(!r.to_string().contains("s3cr3t"), "{q}: {r}");
    }
    // Writes, however spelled: 401.
    let before = server.snapshot().await;
    for path in [
        "/v1/authors",
        "/%761/authors",
        "/v1/%61uthors",
        "/v1/authors/",
    ] {
        let (status, body) = server
            .rest("POST", path, None, Some(json!({"name": "Mallory"})))
            .await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let r = server
        .gql(
            None,
            "mutation { createAuthor(name: \"M\") { id } }",
            json!({}),
        )
        .await;
    assert!(r["errors"].is_array(), "{r}");
    assert_eq!(server.snapshot().await, before);
    // A subscription to a protected type is refused over SSE.
    let r = server
        .client
        .post(format!("{}/graphql", server.base))
        .header("accept", "text/event-stream")
        .json(&json!({"query": "subscription { secretCreated { code } }"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = tokio::time::timeout(std::time::Duration::from_secs(5), r.text())
        .await
        .map(|t| t.unwrap_or_default())
        .unwrap_or_default();
    assert!(
        status == 401 || text.contains("UNAUTHENTICATED") || text.contains("FORBIDDEN"),
        "{status} {text}"
    );
}
