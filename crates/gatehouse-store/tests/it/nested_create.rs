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

/// Books linked to tags through `BookTag`; a tag is readable when public
/// or by its owner; linking needs the scope `link` (the join type's write
/// scope).
const CONNECT_SDL: &str = r#"
type Query { authors: [Author!]! books: [Book!]! tags: [Tag!]! bookTags: [BookTag!]! }
type Author { id: ID! name: String! books: [Book!]! }
type Book {
  id: ID!
  title: String!
  author: Author
  tags: [Tag!]! @relation(through: "BookTag")
}
type Tag @policy(read: {OR: [{public: true}, {owner: "$sub"}]}) {
  id: ID!
  name: String!
  public: Boolean!
  owner: String
}
type BookTag @unique(fields: ["book", "tag"]) @auth(write: "link") {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
}
"#;

fn reader(sub: &str, scopes: &[&str]) -> AccessContext {
    crate::common::caller_with(scopes, json!({ "sub": sub }))
}

async fn tag(s: &Store, name: &str, public: bool, owner: &str) -> String {
    let r = s
        .entity("Tag")
        .unwrap()
        .insert(
            &sys(),
            row(json!({"name": name, "public": public, "owner": owner})),
        )
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

/// The names of the tags linked to `book`, as `ctx` reads `Book.tags`.
async fn tags_of(s: &Store, ctx: &AccessContext, book: &str) -> Vec<String> {
    let r = s
        .model()
        .entity("Book")
        .unwrap()
        .field("tags")
        .unwrap()
        .relation()
        .unwrap();
    let got = s
        .entity("Tag")
        .unwrap()
        .related(ctx, r, &[book.to_string()], &ListQuery::default())
        .await
        .unwrap();
    let mut names: Vec<String> = got
        .rows
        .into_rows()
        .into_iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// A create links existing rows through a many-to-many field: one join
/// row per id, in the same transaction, each with its event after the
/// new row's; the links read back through the field. Nested children link
/// theirs the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_connects_existing_rows_through_a_many_to_many_field() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(CONNECT_SDL).await;
        let rust = tag(&s, "rust", true, "x").await;
        let sql = tag(&s, "sql", true, "x").await;
        let mine = tag(&s, "mine", false, "ann").await;
        let ann = reader("ann", &["read", "write", "link"]);
        let mut rx = s.subscribe();
        let book = s
            .entity("Book")
            .unwrap()
            .insert(
                &ann,
                row(json!({"title": "B", "tags": {"connect": [rust, mine]}})),
            )
            .await
            .unwrap();
        let id = book["id"].as_str().unwrap();
        assert_eq!(tags_of(&s, &ann, id).await, ["mine", "rust"], "{b}");
        let mut events = Vec::new();
        for _ in 0..3 {
            let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(ev.kind, ChangeKind::Created);
            events.push(ev.entity);
        }
        assert_eq!(events, ["Book", "BookTag", "BookTag"], "{b}");

        // Nested: a new author's new book links a tag.
        let author = s
            .entity("Author")
            .unwrap()
            .insert(
                &ann,
                row(json!({"name": "A", "books": [{"title": "C", "tags": {"connect": [sql]}}]})),
            )
            .await
            .unwrap();
        let c = author["books"][0]["id"].as_str().unwrap();
        assert_eq!(tags_of(&s, &ann, c).await, ["sql"], "{b}");
        // An empty list or a null links nothing.
        for tags in [json!({"connect": []}), json!(null)] {
            s.entity("Book")
                .unwrap()
                .insert(&ann, row(json!({"title": "D", "tags": tags})))
                .await
                .unwrap();
        }
        assert_eq!(count(&s, "BookTag").await, 3, "{b}");
        s.close().await;
    }
}

/// A connected row must exist and be readable by the caller: one it may
/// not read is refused in the words of a missing one, and a refused link
/// writes nothing (not the new row, not the other links).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_a_row_the_caller_cannot_read_is_refused_like_a_missing_one() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(CONNECT_SDL).await;
        let rust = tag(&s, "rust", true, "x").await;
        let mine = tag(&s, "mine", false, "ann").await;
        let bob = reader("bob", &["read", "write", "link"]);
        let books = s.entity("Book").unwrap();
        let authors = s.entity("Author").unwrap();
        let cases = [
            // Ann's private tag, which Bob cannot read.
            (
                bob.clone(),
                json!({"title": "B", "tags": {"connect": [rust, mine]}}),
                "tags.connect[1]",
                format!("there is no Tag with id `{mine}`"),
            ),
            // A missing one: the same words.
            (
                bob.clone(),
                json!({"title": "B", "tags": {"connect": ["nope", rust]}}),
                "tags.connect[0]",
                "there is no Tag with id `nope`".to_string(),
            ),
            // Without the read scope of Tag, no tag is readable.
            (
                reader("bob", &["write", "link"]),
                json!({"title": "B", "tags": {"connect": [rust]}}),
                "tags.connect[0]",
                format!("there is no Tag with id `{rust}`"),
            ),
        ];
        for (who, input, field, message) in cases {
            match books.insert(&who, row(input.clone())).await {
                Err(StoreError::Invalid {
                    field: f,
                    message: m,
                }) => {
                    assert_eq!(
                        (f.as_str(), m.as_str()),
                        (field, message.as_str()),
                        "{b}: {input}"
                    );
                }
                other => panic!("{b}: {input}: {other:?}"),
            }
        }
        // Nested: the author is not created either.
        let r = authors
            .insert(
                &bob,
                row(json!({"name": "A", "books": [{"title": "C", "tags": {"connect": [mine]}}]})),
            )
            .await;
        match r {
            Err(StoreError::Invalid { field, .. }) => {
                assert_eq!(field, "books[0].tags.connect[0]", "{b}");
            }
            other => panic!("{b}: {other:?}"),
        }
        // A repeated id, a wrong shape: refused before anything is written.
        for (input, field) in [
            (
                json!({"title": "B", "tags": {"connect": [rust, rust]}}),
                "tags.connect[1]",
            ),
            (json!({"title": "B", "tags": [rust]}), "tags"),
            (
                json!({"title": "B", "tags": {"connect": [1]}}),
                "tags.connect[0]",
            ),
        ] {
            match books.insert(&bob, row(input.clone())).await {
                Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field, "{b}: {input}"),
                other => panic!("{b}: {input}: {other:?}"),
            }
        }
        // Linking creates join rows: the join type's write scope is needed.
        let r = books
            .insert(
                &reader("bob", &["read", "write"]),
                row(json!({"title": "B", "tags": {"connect": [rust]}})),
            )
            .await;
        assert!(matches!(r, Err(StoreError::Forbidden { .. })), "{b}: {r:?}");
        assert_eq!(count(&s, "Book").await, 0, "{b}");
        assert_eq!(count(&s, "Author").await, 0, "{b}");
        assert_eq!(count(&s, "BookTag").await, 0, "{b}");
        s.close().await;
    }
}
