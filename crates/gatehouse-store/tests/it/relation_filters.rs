//! Filters through to-many relations (`tasks_some`, `tasks_every`,
//! `tasks_none`) in a caller's filter: what each quantifier means, over
//! one-to-many, many-to-many and self relations, and that a caller reaches
//! only the rows it may read and compares only the fields it may read.

use gatehouse_store::{AccessContext, Filter, ListQuery, Quantifier, Row, Store, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::{caller_with, row};

const SDL: &str = r#"
type Query { projects: [Project!]! tasks: [Task!]! books: [Book!]! tags: [Tag!]! bookTags: [BookTag!]! categories: [Category!]! }
enum Status { OPEN DONE }
type Project {
  id: ID!
  name: String!
  tasks: [Task!]!
}
type Task @policy(read: {OR: [{secret: false}, {owner: "$sub"}]}) {
  id: ID!
  project: Project!
  status: Status!
  points: Int
  owner: String
  secret: Boolean!
  note: String @auth(read: "notes")
}
type Book {
  id: ID!
  title: String!
  tags: [Tag!]! @relation(through: "BookTag")
}
type Tag {
  id: ID!
  name: String!
}
type BookTag {
  id: ID!
  book: Book!
  tag: Tag!
}
type Category {
  id: ID!
  name: String!
  parent: Category
  children: [Category!]!
}
"#;

fn system() -> AccessContext {
    AccessContext::system()
}

fn reader(sub: &str) -> AccessContext {
    caller_with(&["read", "write"], json!({ "sub": sub }))
}

async fn insert(s: &Store, entity: &str, v: Value) -> String {
    let r = s
        .entity(entity)
        .unwrap()
        .insert(&system(), row(v))
        .await
        .unwrap_or_else(|e| panic!("insert {entity}: {e:?}"));
    r["id"].as_str().unwrap().to_string()
}

fn related(field: &str, quantifier: Quantifier, filter: Filter) -> Filter {
    Filter::Related {
        field: field.into(),
        quantifier,
        filter: Box::new(filter),
    }
}

fn any() -> Filter {
    Filter::And(vec![])
}

/// The `name` (or `title`) of each row listed by `ctx` under `filter`,
/// sorted, and checks that the count agrees.
async fn names(s: &Store, entity: &str, ctx: &AccessContext, filter: Filter) -> Vec<String> {
    let rows = s.entity(entity).unwrap();
    let page = rows
        .list(
            ctx,
            &ListQuery {
                filter: Some(filter.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{filter:?}: {e:?}"));
    let mut out: Vec<String> = page
        .rows
        .into_rows()
        .iter()
        .map(|r: &Row| {
            r.get("name")
                .or_else(|| r.get("title"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect();
    out.sort();
    let counted = rows.count(ctx, Some(&filter)).await.unwrap();
    assert_eq!(counted, out.len() as u64, "count of {filter:?}");
    out
}

/// Four projects: `busy` (OPEN 5, DONE 3), `done` (DONE 1), `empty` (no
/// tasks), `vague` (OPEN, no points).
async fn projects(s: &Store) {
    let busy = insert(s, "Project", json!({"name": "busy"})).await;
    let done = insert(s, "Project", json!({"name": "done"})).await;
    insert(s, "Project", json!({"name": "empty"})).await;
    let vague = insert(s, "Project", json!({"name": "vague"})).await;
    for (p, status, points) in [
        (&busy, "OPEN", json!(5)),
        (&busy, "DONE", json!(3)),
        (&done, "DONE", json!(1)),
        (&vague, "OPEN", Value::Null),
    ] {
        insert(
            s,
            "Task",
            json!({"project": p, "status": status, "points": points, "secret": false}),
        )
        .await;
    }
}

fn v(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn some_every_and_none_mean_what_they_say_including_empty_children_and_nulls() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        projects(&s).await;
        let ctx = system();
        let open = || Filter::eq("status", "OPEN");
        let done = || Filter::eq("status", "DONE");
        let big = || Filter::cmp("points", gatehouse_store::FilterOp::Gt, 2);
        let some = |f| related("tasks", Quantifier::Some, f);
        let every = |f| related("tasks", Quantifier::Every, f);
        let none = |f| related("tasks", Quantifier::None, f);
        let backend = db.backend();

        // `_some`: one child matches.
        assert_eq!(
            names(&s, "Project", &ctx, some(open())).await,
            v(&["busy", "vague"]),
            "{backend}"
        );
        // `_every`: every child matches; true with no children.
        assert_eq!(
            names(&s, "Project", &ctx, every(done())).await,
            v(&["done", "empty"])
        );
        // `_none`: no child matches.
        assert_eq!(
            names(&s, "Project", &ctx, none(open())).await,
            v(&["done", "empty"])
        );
        // `{}` matches any child.
        assert_eq!(
            names(&s, "Project", &ctx, some(any())).await,
            v(&["busy", "done", "vague"])
        );
        assert_eq!(names(&s, "Project", &ctx, none(any())).await, v(&["empty"]));
        assert_eq!(
            names(&s, "Project", &ctx, every(any())).await,
            v(&["busy", "done", "empty", "vague"])
        );
        // A comparison with null is not a match: `vague`'s task has no
        // points, so it is not `points_gt: 2` (fails `_every`) and does not
        // count for `_none` either.
        assert_eq!(
            names(&s, "Project", &ctx, every(big())).await,
            v(&["busy", "empty"])
        );
        assert_eq!(
            names(&s, "Project", &ctx, none(big())).await,
            v(&["done", "empty", "vague"])
        );
        // Combined with the filter language around it.
        assert_eq!(
            names(
                &s,
                "Project",
                &ctx,
                Filter::And(vec![
                    some(open()),
                    Filter::Not(Box::new(Filter::eq("name", "busy")))
                ])
            )
            .await,
            v(&["vague"])
        );
        assert_eq!(
            names(&s, "Project", &ctx, Filter::Not(Box::new(every(done())))).await,
            v(&["busy", "vague"])
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_to_many_and_self_relations_filter_through_their_links() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let sf = insert(&s, "Tag", json!({"name": "sf"})).await;
        let old = insert(&s, "Tag", json!({"name": "old"})).await;
        let dune = insert(&s, "Book", json!({"title": "Dune"})).await;
        let emma = insert(&s, "Book", json!({"title": "Emma"})).await;
        insert(&s, "Book", json!({"title": "Blank"})).await;
        for (b, t) in [(&dune, &sf), (&dune, &old), (&emma, &old)] {
            insert(&s, "BookTag", json!({"book": b, "tag": t})).await;
        }
        let ctx = system();
        let tags = |q, f| related("tags", q, f);
        assert_eq!(
            names(
                &s,
                "Book",
                &ctx,
                tags(Quantifier::Some, Filter::eq("name", "sf"))
            )
            .await,
            v(&["Dune"]),
            "{}",
            db.backend()
        );
        assert_eq!(
            names(
                &s,
                "Book",
                &ctx,
                tags(Quantifier::Every, Filter::eq("name", "old"))
            )
            .await,
            v(&["Blank", "Emma"])
        );
        assert_eq!(
            names(
                &s,
                "Book",
                &ctx,
                tags(Quantifier::None, Filter::eq("name", "sf"))
            )
            .await,
            v(&["Blank", "Emma"])
        );

        // A type related to itself: each row's own children are reached.
        let root = insert(&s, "Category", json!({"name": "root"})).await;
        let a = insert(&s, "Category", json!({"name": "a", "parent": root})).await;
        insert(&s, "Category", json!({"name": "a1", "parent": a})).await;
        let children = |q, f| related("children", q, f);
        assert_eq!(
            names(
                &s,
                "Category",
                &ctx,
                children(Quantifier::Some, Filter::eq("name", "a1"))
            )
            .await,
            v(&["a"])
        );
        assert_eq!(
            names(&s, "Category", &ctx, children(Quantifier::None, any())).await,
            v(&["a1"])
        );
        // Nested: categories with a child that has a child.
        assert_eq!(
            names(
                &s,
                "Category",
                &ctx,
                children(Quantifier::Some, children(Quantifier::Some, any()))
            )
            .await,
            v(&["root"])
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_child_does_not_make_its_parent_match() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let p = insert(&s, "Project", json!({"name": "p"})).await;
        insert(&s, "Project", json!({"name": "q"})).await;
        // The only OPEN task of `p` is alice's secret.
        insert(
            &s,
            "Task",
            json!({"project": p, "status": "OPEN", "secret": true, "owner": "alice"}),
        )
        .await;
        insert(
            &s,
            "Task",
            json!({"project": p, "status": "DONE", "secret": false}),
        )
        .await;
        let open = related("tasks", Quantifier::Some, Filter::eq("status", "OPEN"));
        let (alice, bob) = (reader("alice"), reader("bob"));
        // Asked by bob first: a count cached for him must not answer alice.
        assert_eq!(
            names(&s, "Project", &bob, open.clone()).await,
            Vec::<String>::new(),
            "{}",
            db.backend()
        );
        assert_eq!(names(&s, "Project", &alice, open.clone()).await, v(&["p"]));
        assert_eq!(names(&s, "Project", &bob, open).await, Vec::<String>::new());
        // Nor can a hidden child keep its parent out of `_none`.
        let none_open = related("tasks", Quantifier::None, Filter::eq("status", "OPEN"));
        assert_eq!(
            names(&s, "Project", &bob, none_open.clone()).await,
            v(&["p", "q"])
        );
        assert_eq!(names(&s, "Project", &alice, none_open).await, v(&["q"]));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_the_caller_may_not_read_is_forbidden_inside_a_relation_filter() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        projects(&s).await;
        let projects = s.entity("Project").unwrap();
        let by_note = related("tasks", Quantifier::Some, Filter::eq("note", "x"));
        let q = ListQuery {
            filter: Some(by_note.clone()),
            ..Default::default()
        };
        for r in [
            projects.list(&reader("bob"), &q).await.map(|_| ()),
            projects
                .count(&reader("bob"), Some(&by_note))
                .await
                .map(|_| ()),
        ] {
            match r {
                Err(StoreError::Forbidden { message }) => {
                    assert!(message.contains("Task.note"), "{message}");
                    assert!(message.contains("notes"), "{message}");
                }
                other => panic!("{}: expected Forbidden, got {other:?}", db.backend()),
            }
        }
        // With the scope it is a filter like any other.
        let with_scope = caller_with(&["read", "notes"], json!({"sub": "bob"}));
        projects.list(&with_scope, &q).await.unwrap();
        // Filtering through a relation needs its target's read scope.
        let without_read = caller_with(&["other"], json!({"sub": "bob"}));
        let through = related("tasks", Quantifier::Some, any());
        match projects.count(&without_read, Some(&through)).await {
            Err(StoreError::Forbidden { message }) => {
                assert!(message.contains("Project.tasks"), "{message}")
            }
            other => panic!("expected Forbidden, got {other:?}"),
        }
        // A relation filter names a to-many field.
        let wrong = related("name", Quantifier::Some, any());
        assert!(matches!(
            projects.count(&system(), Some(&wrong)).await,
            Err(StoreError::Invalid { .. })
        ));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_through_a_many_to_many_relation_leaves_out_the_link_being_written() {
    // A book's links may change only while another link gives it the
    // `open` tag; tags themselves are hidden from callers.
    const LINKS: &str = r#"
type Query { books: [Book!]! tags: [Tag!]! bookTags: [BookTag!]! }
type Book @policy(read: {tags_some: {name: "open"}}) {
  id: ID!
  title: String!
  tags: [Tag!]! @relation(through: "BookTag")
}
type Tag @policy(read: {name: "never"}) { id: ID! name: String! }
type BookTag @policy(update: {book: {tags_some: {name: "open"}}}) { id: ID! book: Book! tag: Tag! }
"#;
    for db in TestDb::each().await {
        let s = db.open(LINKS).await;
        let open = insert(&s, "Tag", json!({"name": "open"})).await;
        let other = insert(&s, "Tag", json!({"name": "other"})).await;
        let book = insert(&s, "Book", json!({"title": "b"})).await;
        insert(&s, "Book", json!({"title": "closed"})).await;
        let link = insert(&s, "BookTag", json!({"book": book, "tag": open})).await;
        let bob = reader("bob");
        // The rule reads the tags without their own (hiding) policy.
        let books = s.entity("Book").unwrap();
        assert_eq!(
            books.count(&bob, None).await.unwrap(),
            1,
            "{}",
            db.backend()
        );
        let links = s.entity("BookTag").unwrap();
        let touch = |id: String| {
            let links = links.clone();
            let bob = bob.clone();
            let book = book.clone();
            async move { links.update(&bob, &id, row(json!({"book": book}))).await }
        };
        // The only `open` link cannot vouch for a change to itself...
        assert!(
            matches!(touch(link.clone()).await, Err(StoreError::Forbidden { .. })),
            "{}: the only open link vouched for itself",
            db.backend()
        );
        // ...but another one can.
        let second = insert(&s, "BookTag", json!({"book": book, "tag": open})).await;
        touch(link.clone()).await.unwrap();
        // Once the first no longer says `open`, the second is the last.
        links
            .update(&system(), &link, row(json!({"tag": other})))
            .await
            .unwrap();
        assert!(
            matches!(touch(second).await, Err(StoreError::Forbidden { .. })),
            "the last open link vouched for itself"
        );
        s.close().await;
    }
}
