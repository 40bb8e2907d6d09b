//! Nested collections through to-many relations.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{header, ids, problem, start};

#[tokio::test]
async fn nested_get_lists_the_children() {
    let s = start().await;
    let a = s.author("A", None).await;
    let b = s.author("B", None).await;
    let b1 = s.book("One", Some(2001), &a).await;
    let b2 = s.book("Two", Some(2002), &a).await;
    s.book("Other", Some(2003), &b).await;

    let r = s.get(&format!("/v1/authors/{a}/books?per_page=1")).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-total-count").unwrap(), "2");
    let link = header(&r, "link").unwrap();
    assert!(
        link.contains(&format!(
            "</v1/authors/{a}/books?page=2&per_page=1>; rel=\"next\""
        )),
        "{link}"
    );
    let rows: Value = r.json().await.unwrap();
    assert_eq!(ids(&rows), vec![b1.clone()]);

    // Same filters, sort and fields as the top-level list.
    let rows = s
        .get_ok(&format!("/v1/authors/{a}/books?sort=-year&fields=title"))
        .await;
    assert_eq!(
        rows,
        json!([{"id": b2, "title": "Two"}, {"id": b1, "title": "One"}])
    );
    let rows = s
        .get_ok(&format!("/v1/authors/{a}/books?year_gt=2001"))
        .await;
    assert_eq!(ids(&rows), vec![b2.clone()]);
    // A parent without children: empty.
    let c = s.author("C", None).await;
    assert_eq!(s.get_ok(&format!("/v1/authors/{c}/books")).await, json!([]));

    // Reviews of a book (`@rest(path: "reviews")` collection nested under books).
    let rows = s.get_ok(&format!("/v1/books/{b1}/reviews")).await;
    assert_eq!(rows, json!([]));
}

#[tokio::test]
async fn nested_post_sets_the_parent() {
    let s = start().await;
    let a = s.author("A", None).await;
    let r = s
        .send(
            Method::POST,
            &format!("/v1/authors/{a}/books"),
            Some(json!({"title": "Child", "status": "AVAILABLE"})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = header(&r, "location").unwrap();
    let row: Value = r.json().await.unwrap();
    assert_eq!(row["author"], a);
    assert_eq!(
        location,
        format!("/v1/books/{}", row["id"].as_str().unwrap())
    );
    assert_eq!(s.get_ok(&location).await, row);

    // Repeating the parent is fine; naming another is a 422.
    s.create(
        &format!("/v1/authors/{a}/books"),
        json!({"title": "Child 2", "status": "AVAILABLE", "author": a}),
    )
    .await;
    let r = s
        .send(
            Method::POST,
            &format!("/v1/authors/{a}/books"),
            Some(json!({"title": "Child 3", "status": "AVAILABLE", "author": "someone-else"})),
        )
        .await;
    let p = problem(r, 422).await;
    assert_eq!(p["errors"][0]["field"], "author");
    assert_eq!(
        s.get_ok(&format!("/v1/authors/{a}/books"))
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn missing_parent_is_404() {
    let s = start().await;
    let p = problem(s.get("/v1/authors/absent/books").await, 404).await;
    assert!(p["detail"].as_str().unwrap().contains("absent"), "{p}");
    let r = s
        .send(
            Method::POST,
            "/v1/authors/absent/books",
            Some(json!({"title": "x", "status": "AVAILABLE"})),
        )
        .await;
    problem(r, 404).await;
    // Unknown relation segment.
    let a = s.author("A", None).await;
    let p = problem(s.get(&format!("/v1/authors/{a}/nope")).await, 404).await;
    assert!(p["detail"].as_str().unwrap().contains("books"), "{p}");
    // Wrong method on a nested collection.
    let r = s
        .send(Method::DELETE, &format!("/v1/authors/{a}/books"), None)
        .await;
    assert_eq!(header(&r, "allow").unwrap(), "GET, HEAD, POST, OPTIONS");
    problem(r, 405).await;
}

/// `POST /v1/authors` with `books`: the children are created with the
/// author in one transaction (`docs/design/transactions.md`); the answer
/// is the author, the books are at their nested path.
#[tokio::test]
async fn post_creates_nested_children() {
    let s = start().await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "X", "books": [
                {"title": "Y", "status": "AVAILABLE", "reviews": [{"reviewer": "r", "stars": 2, "postedOn": "2024-01-02"}]},
                {"title": "Z", "status": "LOST"}
            ]})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let author: Value = r.json().await.unwrap();
    assert!(author.get("books").is_none(), "{author}");
    let a = author["id"].as_str().unwrap();
    let books = s
        .get_ok(&format!("/v1/authors/{a}/books?sort=title&fields=title"))
        .await;
    assert_eq!(
        books
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["title"].clone())
            .collect::<Vec<_>>(),
        vec![json!("Y"), json!("Z")]
    );
    let y = books[0]["id"].as_str().unwrap();
    let reviews = s.get_ok(&format!("/v1/books/{y}/reviews")).await;
    assert_eq!(reviews[0]["stars"], json!(2));

    // A bad child: 422 naming it by its path, nothing written.
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "W", "books": [
                {"title": "ok", "status": "AVAILABLE"},
                {"status": "AVAILABLE", "author": a}
            ]})),
        )
        .await;
    let body = problem(r, 422).await;
    let fields: Vec<&str> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"books[1].author"), "{body}");
    assert!(fields.contains(&"books[1].title"), "{body}");
    // The children member is a list, as the OpenAPI document says: a null
    // is refused, not taken for "no children".
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "N", "books": null})),
        )
        .await;
    let body = problem(r, 422).await;
    assert_eq!(body["errors"][0]["field"], json!("books"), "{body}");
    // A child the store refuses (a taken isbn): 409, nothing written.
    s.create(
        "/v1/books",
        json!({"title": "I", "status": "AVAILABLE", "author": a, "isbn": "9"}),
    )
    .await;
    let r = s
        .send(
            Method::POST,
            "/v1/authors",
            Some(json!({"name": "W", "books": [{"title": "ok", "status": "AVAILABLE", "isbn": "9"}]})),
        )
        .await;
    problem(r, 409).await;
    let authors = s.get_ok("/v1/authors").await;
    assert_eq!(authors.as_array().unwrap().len(), 1, "{authors}");
}
