//! Nested create: a new row carries new rows of its one-to-many relations,
//! written in the same transaction with their back-reference set, each
//! under its own entity's write scope, field scopes and create policy; any
//! failure writes none of them.

use std::time::Duration;

use gatehouse_store::{AccessContext, ChangeKind, ListQuery, Store, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::row;
use crate::conformance;

fn sys() -> AccessContext {
    AccessContext::system()
}

async fn count(s: &Store, entity: &str) -> u64 {
    s.entity(entity).unwrap().count(&sys(), None).await.unwrap()
}

conformance!(
    children_and_grandchildren_are_created_with_the_row,
    |db, s| {
        let mut rx = s.subscribe();
        let created = s
        .entity("Author")
        .unwrap()
        .insert(
            &sys(),
            row(json!({
                "name": "X",
                "books": [
                    {"title": "Y", "status": "AVAILABLE", "reviews": [{"stars": 5}, {"stars": 3}]},
                    {"title": "Z", "status": "LOST"},
                ],
            })),
        )
        .await
        .unwrap();
        let id = created["id"].as_str().unwrap();
        let books = created["books"].as_array().unwrap();
        assert_eq!(books.len(), 2);
        assert_eq!(books[0]["author"], json!(id));
        assert_eq!(books[0]["title"], json!("Y"));
        let reviews = books[0]["reviews"].as_array().unwrap();
        assert_eq!(reviews.len(), 2);
        assert_eq!(reviews[0]["book"], books[0]["id"]);
        // Stored: the children reference the new row.
        let stored = crate::common::by_parent(
            &s,
            "Book",
            "author",
            &[id.to_string()],
            &ListQuery::default(),
        )
        .await
        .unwrap();
        assert_eq!(stored[id].len(), 2);
        assert_eq!(count(&s, "Review").await, 2);
        // One event per row, parent first.
        let mut kinds = Vec::new();
        for _ in 0..5 {
            let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(ev.kind, ChangeKind::Created);
            kinds.push(ev.entity);
        }
        assert_eq!(kinds, vec!["Author", "Book", "Review", "Review", "Book"]);
    }
);

conformance!(an_invalid_child_writes_nothing, |db, s| {
    let authors = s.entity("Author").unwrap();
    let cases = [
        // A required field missing, one level down and two.
        (
            json!({"name": "X", "books": [{"status": "AVAILABLE"}]}),
            "books[0].title",
        ),
        (
            json!({"name": "X", "books": [{"title": "Y", "status": "AVAILABLE", "reviews": [{"stars": "five"}]}]}),
            "books[0].reviews[0].stars",
        ),
        // The back-reference is the nesting's.
        (
            json!({"name": "X", "books": [{"title": "Y", "status": "AVAILABLE", "author": "a"}]}),
            "books[0].author",
        ),
        // Not a list of rows.
        (json!({"name": "X", "books": {"title": "Y"}}), "books"),
        (json!({"name": "X", "books": ["Y"]}), "books[0]"),
    ];
    for (input, field) in cases {
        match authors.insert(&sys(), row(input.clone())).await {
            Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field, "{input}"),
            other => panic!("{input}: {other:?}"),
        }
    }
    // A conflict of a child (its unique isbn) too.
    crate::common::book(
        &s,
        &crate::common::author(&s, "Other").await,
        "T",
        json!({"isbn": "1"}),
    )
    .await;
    let r = authors
        .insert(
            &sys(),
            row(
                json!({"name": "X", "books": [{"title": "Y", "status": "AVAILABLE", "isbn": "1"}]}),
            ),
        )
        .await;
    assert!(matches!(r, Err(StoreError::Conflict { .. })), "{r:?}");
    assert_eq!(count(&s, "Author").await, 1);
    assert_eq!(count(&s, "Book").await, 1);
});

const POLICY_SDL: &str = r#"
type Query { projects: [Project!]! tasks: [Task!]! }
type Project @policy(all: {org: "$org"}) {
  id: ID!
  org: String!
  name: String!
  tasks: [Task!]!
}
type Task @policy(all: {org: "$org"}) @auth(write: "tasks") {
  id: ID!
  org: String!
  title: String!
  secret: String @auth(write: "admin")
  project: Project!
}
"#;

fn caller(org: &str, scopes: &[&str]) -> AccessContext {
    let all: Vec<&str> = ["read", "write"].iter().chain(scopes).copied().collect();
    crate::common::caller_with(&all, json!({"sub": "u", "org": org}))
}

/// Each child is checked as its own create: its type's write scope, its
/// fields' scopes and its create policy; a refusal writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_checked_as_their_own_creates() {
    for db in TestDb::each().await {
        let s = db.open(POLICY_SDL).await;
        let projects = s.entity("Project").unwrap();
        let full = caller("acme", &["tasks"]);
        let made = projects
            .insert(
                &full,
                row(json!({"name": "P", "tasks": [{"title": "t1"}, {"title": "t2"}]})),
            )
            .await
            .unwrap();
        // Owner fields of the children are filled from the caller's claims.
        assert_eq!(made["tasks"][0]["org"], json!("acme"));
        assert_eq!(count(&s, "Task").await, 2);

        let refusals = [
            // The child's type needs `tasks` to be written.
            (
                caller("acme", &[]),
                json!({"name": "Q", "tasks": [{"title": "t"}]}),
            ),
            // A field of the child needs `admin`.
            (
                full.clone(),
                json!({"name": "Q", "tasks": [{"title": "t", "secret": "s"}]}),
            ),
            // The child would leave its create policy.
            (
                full.clone(),
                json!({"name": "Q", "tasks": [{"title": "t"}, {"title": "u", "org": "other"}]}),
            ),
        ];
        for (who, input) in refusals {
            let r = projects.insert(&who, row(input.clone())).await;
            assert!(
                matches!(r, Err(StoreError::Forbidden { .. })),
                "{}: {input}: {r:?}",
                db.backend()
            );
            assert_eq!(count(&s, "Project").await, 1, "{input}");
            assert_eq!(count(&s, "Task").await, 2, "{input}");
        }
        // No children, no scope needed for them.
        projects
            .insert(&caller("acme", &[]), row(json!({"name": "R", "tasks": []})))
            .await
            .unwrap();
        s.close().await;
    }
}
