//! Many-to-many relations through a join type (one statement per level,
//! the read policies of the listed type and of the join type in it) and
//! composite unique keys (a duplicate is a conflict naming the fields;
//! migrations add the key, refusing one existing rows violate).

use std::collections::BTreeSet;

use gatehouse_store::{
    AccessContext, Filter, FilterOp, ListQuery, OrderBy, Store, StoreError, StoreOptions,
};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::row;

/// Books and tags linked through `BookTag`; a tag is readable by its
/// owner or when public, a link by everyone but the hidden ones' owner.
const SDL: &str = r#"
type Query { books: [Book!]! tags: [Tag!]! bookTags: [BookTag!]! }
type Book {
  id: ID!
  title: String!
  tags: [Tag!]! @relation(through: "BookTag")
  tagsCount: Int!
}
type Tag @policy(read: {OR: [{public: true}, {owner: "$sub"}]}) {
  id: ID!
  name: String!
  public: Boolean!
  owner: String
  books: [Book!]! @relation(through: "BookTag")
}
type BookTag @unique(fields: ["book", "tag"]) @policy(read: {hidden: false}, bypass: "admin") {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
  hidden: Boolean!
}
"#;

fn caller(sub: &str) -> AccessContext {
    crate::common::caller_with(&["read", "write"], json!({ "sub": sub }))
}

async fn insert(
    s: &Store,
    ctx: &AccessContext,
    entity: &str,
    v: Value,
) -> Result<String, StoreError> {
    let r = s.entity(entity).unwrap().insert(ctx, row(v)).await?;
    Ok(r["id"].as_str().unwrap().to_string())
}

async fn sys(s: &Store, entity: &str, v: Value) -> String {
    insert(s, &AccessContext::system(), entity, v)
        .await
        .unwrap()
}

fn relation(s: &Store, entity: &str, field: &str) -> gatehouse_schema::RelationId {
    let m = s.model();
    m.entity(entity)
        .unwrap()
        .field(field)
        .unwrap()
        .relation()
        .unwrap()
}

/// `entity.field` for each parent, by the related rows' names (or titles).
async fn related(
    s: &Store,
    ctx: &AccessContext,
    (owner, field, target): (&str, &str, &str),
    parents: &[String],
    q: &ListQuery,
) -> Result<Vec<Vec<String>>, StoreError> {
    let r = relation(s, owner, field);
    let got = s
        .entity(target)
        .unwrap()
        .related(ctx, r, parents, q)
        .await?;
    let mut out = vec![Vec::new(); parents.len()];
    for (row, parent) in got.rows.into_rows().into_iter().zip(got.parents) {
        let i = parents.iter().position(|p| *p == parent).unwrap();
        let name = row.get("name").or_else(|| row.get("title")).unwrap();
        out[i].push(name.as_str().unwrap().to_string());
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_to_many_reads_both_ways_in_one_statement_under_both_policies() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let b1 = sys(&s, "Book", json!({"title": "b1"})).await;
        let b2 = sys(&s, "Book", json!({"title": "b2"})).await;
        let b3 = sys(&s, "Book", json!({"title": "b3"})).await;
        let rust = sys(&s, "Tag", json!({"name": "rust", "public": true})).await;
        let sql = sys(&s, "Tag", json!({"name": "sql", "public": true})).await;
        let mine = sys(
            &s,
            "Tag",
            json!({"name": "mine", "public": false, "owner": "ann"}),
        )
        .await;
        let link = |b: &str, t: &str, hidden: bool| json!({"book": b, "tag": t, "hidden": hidden});
        sys(&s, "BookTag", link(&b1, &rust, false)).await;
        sys(&s, "BookTag", link(&b1, &sql, false)).await;
        sys(&s, "BookTag", link(&b1, &mine, false)).await;
        sys(&s, "BookTag", link(&b2, &sql, false)).await;
        // A hidden link: only the policy bypass sees it.
        sys(&s, "BookTag", link(&b2, &rust, true)).await;

        let books = vec![b1.clone(), b2.clone(), b3.clone()];
        let by_name = ListQuery {
            order: vec![OrderBy::asc("name")],
            ..Default::default()
        };
        let before = s.statements();
        let got = related(
            &s,
            &caller("bob"),
            ("Book", "tags", "Tag"),
            &books,
            &by_name,
        )
        .await
        .unwrap();
        assert_eq!(
            s.statements() - before,
            1,
            "{b}: one statement for every parent"
        );
        // bob: no private tag of ann's, no hidden link.
        assert_eq!(got, [vec!["rust", "sql"], vec!["sql"], vec![]], "{b}");
        let got = related(
            &s,
            &caller("ann"),
            ("Book", "tags", "Tag"),
            &books,
            &by_name,
        )
        .await
        .unwrap();
        assert_eq!(got[0], ["mine", "rust", "sql"], "{b}");
        let got = related(
            &s,
            &AccessContext::system(),
            ("Book", "tags", "Tag"),
            &books,
            &by_name,
        )
        .await
        .unwrap();
        assert_eq!(
            got[1],
            ["rust", "sql"],
            "{b}: the system caller sees the hidden link"
        );

        // Paged per parent, filtered, ordered.
        let q = ListQuery {
            order: vec![OrderBy::desc("name")],
            limit: Some(1),
            offset: 1,
            ..Default::default()
        };
        let got = related(&s, &caller("ann"), ("Book", "tags", "Tag"), &books, &q)
            .await
            .unwrap();
        assert_eq!(got, [vec!["rust"], vec![], vec![]], "{b}");
        let q = ListQuery {
            filter: Some(Filter::cmp("name", FilterOp::StartsWith, json!("s"))),
            ..Default::default()
        };
        let got = related(&s, &caller("bob"), ("Book", "tags", "Tag"), &books, &q)
            .await
            .unwrap();
        assert_eq!(got, [vec!["sql"], vec!["sql"], vec![]], "{b}");

        // The other way: Tag.books.
        let tags = vec![rust.clone(), sql.clone(), mine.clone()];
        let by_title = ListQuery {
            order: vec![OrderBy::asc("title")],
            ..Default::default()
        };
        let got = related(
            &s,
            &caller("bob"),
            ("Tag", "books", "Book"),
            &tags,
            &by_title,
        )
        .await
        .unwrap();
        assert_eq!(got, [vec!["b1"], vec!["b1", "b2"], vec!["b1"]], "{b}");

        // Counts: the same rows, one grouped statement.
        let r = relation(&s, "Book", "tags");
        let before = s.statements();
        let counts = s
            .entity("Tag")
            .unwrap()
            .count_related(&caller("bob"), r, &books, None)
            .await
            .unwrap();
        assert_eq!(s.statements() - before, 1, "{b}");
        assert_eq!(
            (counts.get(&b1), counts.get(&b2), counts.get(&b3)),
            (Some(&2), Some(&1), None),
            "{b}"
        );
        let counts = s
            .entity("Tag")
            .unwrap()
            .count_related(&caller("ann"), r, &books, None)
            .await
            .unwrap();
        assert_eq!(counts.get(&b1), Some(&3), "{b}");

        // The join type's read scope is needed too.
        let no_join_scope = AccessContext::caller(
            BTreeSet::from(["write".to_string()]),
            Default::default(),
            false,
        );
        let err = related(
            &s,
            &no_join_scope,
            ("Book", "tags", "Tag"),
            &books,
            &by_name,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, StoreError::Forbidden { .. }), "{b}: {err:?}");
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_row_is_written_only_where_both_ends_are_visible() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let book = sys(&s, "Book", json!({"title": "b1"})).await;
        let hidden = sys(
            &s,
            "Tag",
            json!({"name": "secret", "public": false, "owner": "ann"}),
        )
        .await;
        // bob cannot read ann's private tag: linking to it reads as a
        // reference to a missing row.
        let err = insert(
            &s,
            &caller("bob"),
            "BookTag",
            json!({"book": book, "tag": hidden, "hidden": false}),
        )
        .await
        .unwrap_err();
        match &err {
            StoreError::Invalid { field, message } => {
                assert_eq!(field, "tag", "{b}");
                assert!(message.contains("there is no Tag"), "{b}: {message}");
            }
            other => panic!("{b}: {other:?}"),
        }
        // ann can.
        insert(
            &s,
            &caller("ann"),
            "BookTag",
            json!({"book": book, "tag": hidden, "hidden": false}),
        )
        .await
        .unwrap();
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_book_follows_the_join_fields_on_delete() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let book = sys(&s, "Book", json!({"title": "b1"})).await;
        let tag = sys(&s, "Tag", json!({"name": "t", "public": true})).await;
        sys(
            &s,
            "BookTag",
            json!({"book": book, "tag": tag, "hidden": false}),
        )
        .await;
        s.entity("Book")
            .unwrap()
            .delete(&AccessContext::system(), &book)
            .await
            .unwrap();
        let left = s
            .entity("BookTag")
            .unwrap()
            .list(&AccessContext::system(), &ListQuery::default())
            .await
            .unwrap();
        assert!(
            left.rows.into_rows().is_empty(),
            "{b}: the link cascaded away"
        );
        s.close().await;
    }
    // RESTRICT (the default): deleting a linked book is a conflict.
    let restrict = SDL.replace("book: Book! @relation(onDelete: CASCADE)", "book: Book!");
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(restrict.as_str()).await;
        let book = sys(&s, "Book", json!({"title": "b1"})).await;
        let tag = sys(&s, "Tag", json!({"name": "t", "public": true})).await;
        sys(
            &s,
            "BookTag",
            json!({"book": book, "tag": tag, "hidden": false}),
        )
        .await;
        let err = s
            .entity("Book")
            .unwrap()
            .delete(&AccessContext::system(), &book)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{b}: {err:?}");
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_composite_key_is_a_conflict_naming_its_fields() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let book = sys(&s, "Book", json!({"title": "b1"})).await;
        let other = sys(&s, "Book", json!({"title": "b2"})).await;
        let tag = sys(&s, "Tag", json!({"name": "t", "public": true})).await;
        let first = sys(
            &s,
            "BookTag",
            json!({"book": book, "tag": tag, "hidden": false}),
        )
        .await;
        let second = sys(
            &s,
            "BookTag",
            json!({"book": other, "tag": tag, "hidden": false}),
        )
        .await;
        let expect = "BookTag (book, tag) must be unique together";
        // Insert.
        let err = insert(
            &s,
            &AccessContext::system(),
            "BookTag",
            json!({"book": book, "tag": tag, "hidden": true}),
        )
        .await
        .unwrap_err();
        match &err {
            StoreError::Conflict { message } => assert!(message.contains(expect), "{b}: {message}"),
            other => panic!("{b}: {other:?}"),
        }
        // Update onto the other's combination.
        let err = s
            .entity("BookTag")
            .unwrap()
            .update(
                &AccessContext::system(),
                &second,
                row(json!({"book": book})),
            )
            .await
            .unwrap_err();
        match &err {
            StoreError::Conflict { message } => assert!(message.contains(expect), "{b}: {message}"),
            other => panic!("{b}: {other:?}"),
        }
        // Replace likewise.
        let err = s
            .entity("BookTag")
            .unwrap()
            .replace(
                &AccessContext::system(),
                &second,
                row(json!({"book": book, "tag": tag, "hidden": false})),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{b}: {err:?}");
        // A different combination is fine; the first row is untouched.
        assert!(
            s.entity("BookTag")
                .unwrap()
                .get(&AccessContext::system(), &first)
                .await
                .unwrap()
                .is_some()
        );
        s.close().await;
    }
}

const VOTES_V1: &str = r#"
type Query { votes: [Vote!]! }
type Vote { id: ID! user: String! link: String note: String }
"#;

fn opts() -> StoreOptions {
    StoreOptions::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_composite_key_migrates_and_is_refused_over_duplicates() {
    let v2 = VOTES_V1.replace(
        "type Vote {",
        "type Vote @unique(fields: [\"user\", \"link\"]) {",
    );
    for db in TestDb::each().await {
        let b = db.backend();
        // Rows that do not clash (a null part never clashes): the key is added.
        let s = db.open(VOTES_V1).await;
        sys(&s, "Vote", json!({"user": "u", "link": "a"})).await;
        sys(&s, "Vote", json!({"user": "u", "link": "b"})).await;
        sys(&s, "Vote", json!({"user": "u"})).await;
        sys(&s, "Vote", json!({"user": "u"})).await;
        s.close().await;
        let model = gatehouse_testkit::model(&v2);
        let planned = db
            .open_with(
                model.clone(),
                StoreOptions {
                    migrate: false,
                    ..opts()
                },
            )
            .await
            .unwrap();
        let plan: Vec<String> = planned
            .plan()
            .await
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(plan, ["create unique index on vote (user, link)"], "{b}");
        planned.close().await;
        let s = db.open(model).await;
        let err = insert(
            &s,
            &AccessContext::system(),
            "Vote",
            json!({"user": "u", "link": "a"}),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("Vote (user, link) must be unique together"),
            "{b}: {err}"
        );
        s.close().await;
    }
    for db in TestDb::each().await {
        let b = db.backend();
        // Rows that clash: the migration is refused, naming the key, and
        // nothing changes.
        let s = db.open(VOTES_V1).await;
        sys(&s, "Vote", json!({"user": "u", "link": "a"})).await;
        sys(&s, "Vote", json!({"user": "u", "link": "a"})).await;
        s.close().await;
        let model = gatehouse_testkit::model(&v2);
        let err = db.open_with(model, opts()).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StoreError::Conflict { .. }), "{b}: {err:?}");
        assert!(
            text.contains("cannot add the unique key (user, link) to Vote"),
            "{b}: {text}"
        );
        let s = db.open(VOTES_V1).await;
        sys(&s, "Vote", json!({"user": "u", "link": "a"})).await;
        s.close().await;
    }
}
