//! Many-to-many links and composite unique keys over REST, on every
//! backend: a link is a row of the join type's own collection; a
//! duplicate key on POST, PUT or PATCH is a 409 naming the fields; a
//! many-to-many field has no nested path.

use gatehouse_testkit::{TestDb, model};
use reqwest::Method;
use serde_json::json;

use crate::{problem, start_in};

const SDL: &str = r#"
type Query { books: [Book!]! tags: [Tag!]! bookTags: [BookTag!]! }
type Book { id: ID! title: String! tags: [Tag!]! @relation(through: "BookTag") }
type Tag { id: ID! name: String! books: [Book!]! @relation(through: "BookTag") }
type BookTag @unique(fields: ["book", "tag"]) {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
  note: String
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_join_rows_and_a_duplicate_is_409() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = start_in(db, model(SDL), "", 1 << 20).await;
        let book = s.create("/v1/books", json!({"title": "b"})).await["id"].clone();
        let other = s.create("/v1/books", json!({"title": "o"})).await["id"].clone();
        let tag = s.create("/v1/tags", json!({"name": "t"})).await["id"].clone();
        let link = s
            .create("/v1/book-tags", json!({"book": book, "tag": tag}))
            .await;
        let second = s
            .create("/v1/book-tags", json!({"book": other, "tag": tag}))
            .await;
        let id2 = second["id"].as_str().unwrap();

        // Listed and filtered at the join type's own collection.
        let rows = s
            .get_ok(&format!("/v1/book-tags?book={}", book.as_str().unwrap()))
            .await;
        assert_eq!(rows.as_array().unwrap().len(), 1, "{b}");
        assert_eq!(rows[0]["id"], link["id"], "{b}");

        let want = "BookTag (book, tag) must be unique together";
        let r = s
            .send(
                Method::POST,
                "/v1/book-tags",
                Some(json!({"book": book, "tag": tag})),
            )
            .await;
        let p = problem(r, 409).await;
        assert!(p["detail"].as_str().unwrap().contains(want), "{b}: {p}");
        let r = s
            .send(
                Method::PATCH,
                &format!("/v1/book-tags/{id2}"),
                Some(json!({"book": book})),
            )
            .await;
        let p = problem(r, 409).await;
        assert!(p["detail"].as_str().unwrap().contains(want), "{b}: {p}");
        let r = s
            .send(
                Method::PUT,
                &format!("/v1/book-tags/{id2}"),
                Some(json!({"book": book, "tag": tag})),
            )
            .await;
        problem(r, 409).await;

        // No nested path for a many-to-many field (a decision of
        // docs/design/relations.md); a new row may only connect existing
        // rows through it, and a change cannot set it.
        let r = s
            .get(&format!("/v1/books/{}/tags", book.as_str().unwrap()))
            .await;
        problem(r, 404).await;
        let r = s
            .send(
                Method::POST,
                "/v1/books",
                Some(json!({"title": "x", "tags": [tag]})),
            )
            .await;
        let p = problem(r, 422).await;
        assert!(
            p.to_string().contains("ids of existing Tag rows"),
            "{b}: {p}"
        );
        let r = s
            .send(
                Method::PATCH,
                &format!("/v1/books/{}", book.as_str().unwrap()),
                Some(json!({"tags": {"connect": [tag]}})),
            )
            .await;
        let p = problem(r, 422).await;
        assert!(
            p.to_string().contains("create or delete BookTag rows"),
            "{b}: {p}"
        );
    }
}
