//! A mutation request is one transaction (`docs/design/transactions.md`):
//! all of its root fields are applied, or none; a rolled-back request
//! answers `data: null` with the failing field's error and announces no
//! change; its selection sets read its own writes; other readers never see
//! half of it. On every backend.

use std::time::Duration;

use gatehouse_graphql::GraphqlOptions;
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::{Server, start_in};

async fn servers() -> Vec<Server> {
    let mut out = Vec::new();
    for db in TestDb::each().await {
        out.push(start_in(db, GraphqlOptions::default(), 1 << 20).await);
    }
    out
}

async fn author_names(s: &Server) -> Vec<String> {
    let d = s
        .data("{ authors(orderBy: name_ASC) { name } }", json!({}))
        .await;
    d["authors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}

/// `r` is a rolled-back answer: `data` null, one error at `path` with `code`.
fn rolled_back(r: &Value, path: &str, code: &str) {
    assert_eq!(r["data"], Value::Null, "{r}");
    let errors = r["errors"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(errors.len(), 1, "{r}");
    assert_eq!(errors[0]["path"], json!([path]), "{r}");
    assert_eq!(errors[0]["extensions"]["code"], json!(code), "{r}");
}

#[tokio::test]
async fn both_root_fields_are_written_when_both_succeed() {
    for s in servers().await {
        let d = s
            .data(
                r#"mutation { d: createAuthor(name: "D") { name } e: createAuthor(name: "E") { name } }"#,
                json!({}),
            )
            .await;
        assert_eq!(d, json!({"d": {"name": "D"}, "e": {"name": "E"}}));
        assert_eq!(author_names(&s).await, vec!["D", "E"]);
    }
}

#[tokio::test]
async fn a_failing_second_root_field_leaves_nothing_written() {
    for s in servers().await {
        let taken = s.author("Taken", None).await;
        let cases = [
            (
                "conflict",
                r#"mutation { d: createAuthor(name: "D") { id } e: createAuthor(name: "Taken") { id } }"#
                    .to_string(),
                "CONFLICT",
            ),
            (
                "not found",
                r#"mutation { d: createAuthor(name: "D") { id } e: updateAuthor(id: "nope", name: "X") { id } }"#
                    .to_string(),
                "NOT_FOUND",
            ),
            (
                "missing reference",
                r#"mutation { d: createAuthor(name: "D") { id } e: createBook(input: {title: "T", status: AVAILABLE, author: "nobody"}) { id } }"#
                    .to_string(),
                "BAD_USER_INPUT",
            ),
            (
                "bad value",
                r#"mutation { d: createAuthor(name: "D") { id } e: createAuthor(name: "nul \u0000 inside") { id } }"#
                    .to_string(),
                "BAD_USER_INPUT",
            ),
            (
                "an update then a failing delete",
                format!(
                    r#"mutation {{ d: updateAuthor(id: "{taken}", name: "Renamed") {{ id }} e: deleteAuthor(id: "nope") }}"#
                ),
                "NOT_FOUND",
            ),
        ];
        let mut rx = s.store.subscribe();
        for (cause, q, code) in cases {
            let r = s.gql(&q, json!({})).await;
            rolled_back(&r, "e", code);
            assert_eq!(author_names(&s).await, vec!["Taken"], "{cause}");
        }
        // Nothing was announced for the rolled-back requests.
        if let Ok(ev) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
            panic!("an event of a rolled-back request: {ev:?}");
        }
        // The same writes alone succeed, and are announced.
        s.author("D", None).await;
        let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ev.new.unwrap()["name"], json!("D"));
    }
}

#[tokio::test]
async fn the_root_fields_after_a_failed_one_do_not_run() {
    for s in servers().await {
        s.author("Taken", None).await;
        let r = s
            .gql(
                r#"mutation { d: createAuthor(name: "Taken") { id } e: createAuthor(name: "E") { id } f: createAuthor(name: "F") { id } }"#,
                json!({}),
            )
            .await;
        rolled_back(&r, "d", "CONFLICT");
        assert_eq!(author_names(&s).await, vec!["Taken"]);
    }
}

/// The returned object's relations are read in the request's transaction:
/// they include what the request itself wrote.
#[tokio::test]
async fn a_mutations_selection_reads_its_own_writes() {
    for s in servers().await {
        let a = s.author("A", None).await;
        let d = s
            .data(
                r#"mutation($a: ID!) {
                    one: createBook(input: {title: "One", status: AVAILABLE, author: $a}) { title }
                    two: createBook(input: {title: "Two", status: AVAILABLE, author: $a}) {
                        author { name booksCount books(orderBy: [title_ASC]) { title } }
                    }
                }"#,
                json!({"a": a}),
            )
            .await;
        assert_eq!(
            d["two"]["author"],
            json!({"name": "A", "booksCount": 2, "books": [{"title": "One"}, {"title": "Two"}]})
        );
    }
}

/// Readers running beside mutations of two creates each never see one of
/// the two without the other.
#[tokio::test]
async fn a_concurrent_reader_never_sees_half_a_request() {
    for s in servers().await {
        let writes = (0..12).map(|i| {
            let q = format!(
                r#"mutation {{ a: createAuthor(name: "a{i}") {{ id }} b: createAuthor(name: "b{i}") {{ id }} }}"#
            );
            let s = &s;
            async move {
                s.data(&q, json!({})).await;
            }
        });
        let reads = (0..24).map(|_| {
            let s = &s;
            async move { author_names(s).await.len() }
        });
        let (_, seen) = tokio::join!(
            futures::future::join_all(writes),
            futures::future::join_all(reads)
        );
        for n in seen {
            assert_eq!(n % 2, 0, "a reader saw {n} authors");
        }
        assert_eq!(author_names(&s).await.len(), 24);
    }
}

/// Nested create: `createAuthor(books: [...])` writes the author and its
/// books in the request's transaction and returns them.
#[tokio::test]
async fn nested_create_writes_and_returns_the_children() {
    for s in servers().await {
        let d = s
            .data(
                r#"mutation {
                    createAuthor(name: "X", books: [
                        {title: "Y", status: AVAILABLE, reviews: [{reviewer: "r", stars: 4, postedOn: "2024-01-02"}]},
                        {title: "Z", status: LOST}
                    ]) {
                        name booksCount
                        books(orderBy: [title_ASC]) { title author { name } reviews { stars } }
                    }
                }"#,
                json!({}),
            )
            .await;
        assert_eq!(
            d["createAuthor"],
            json!({"name": "X", "booksCount": 2, "books": [
                {"title": "Y", "author": {"name": "X"}, "reviews": [{"stars": 4}]},
                {"title": "Z", "author": {"name": "X"}, "reviews": []},
            ]})
        );
        // The input object form (`createBook(input:)`) takes them too.
        let a = s.author("A", None).await;
        let d = s
            .data(
                r#"mutation($a: ID!) {
                    createBook(input: {title: "T", status: AVAILABLE, author: $a,
                        reviews: [{reviewer: "r", stars: 1, postedOn: "2024-01-02"}]}) { reviews { stars } }
                }"#,
                json!({"a": a}),
            )
            .await;
        assert_eq!(d["createBook"]["reviews"], json!([{"stars": 1}]));
    }
}

#[tokio::test]
async fn a_failing_child_rolls_back_the_nested_create() {
    for s in servers().await {
        let a = s.author("Other", None).await;
        s.book(json!({"title": "T", "status": "AVAILABLE", "author": a, "isbn": "1"}))
            .await;
        let cases = [
            (
                r#"mutation { createAuthor(name: "X", books: [{title: "Y", status: AVAILABLE, isbn: "1"}]) { id } }"#,
                "CONFLICT",
            ),
            (
                r#"mutation { createAuthor(name: "X", books: [{title: "Y", status: AVAILABLE}, {title: "nul \u0000", status: AVAILABLE}]) { id } }"#,
                "BAD_USER_INPUT",
            ),
        ];
        for (q, code) in cases {
            let r = s.gql(q, json!({})).await;
            rolled_back(&r, "createAuthor", code);
            assert_eq!(author_names(&s).await, vec!["Other"], "{q}");
            let d = s.data("{ booksCount }", json!({})).await;
            assert_eq!(d["booksCount"], json!(1), "{q}");
        }
        // The back-reference is not part of a child's input.
        let r = s
            .gql(
                r#"mutation { createAuthor(name: "X", books: [{title: "Y", status: AVAILABLE, author: "a"}]) { id } }"#,
                json!({}),
            )
            .await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"],
            json!("GRAPHQL_VALIDATION_FAILED"),
            "{r}"
        );
    }
}

/// The derived input type is part of the served schema.
#[tokio::test]
async fn the_nested_input_is_in_the_schema() {
    let s = crate::start().await;
    let d = s
        .data(
            r#"{ __type(name: "AuthorBooksInput") { inputFields { name type { kind name ofType { name } } } } }"#,
            json!({}),
        )
        .await;
    let fields: Vec<&str> = d["__type"]["inputFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"title") && fields.contains(&"reviews"),
        "{d}"
    );
    assert!(!fields.contains(&"author"), "{d}");
    assert!(s.graphql.sdl().contains("input AuthorBooksInput"));
}
