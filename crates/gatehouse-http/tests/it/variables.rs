//! Input coercion of variables (GraphQL spec §6.4.1, §3.10): a declared
//! variable the request does not send, and that has no default, leaves the
//! argument or input field it stands for absent: a create takes the
//! declared default, an update leaves the field as it is, a filter does
//! not apply. An explicit `null` is still null. Both executors, argument
//! and input-object style, both backends.

use gatehouse_graphql::GraphqlOptions;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_schema::{Source, load_sources};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::{Server, start_in, start_model};

/// Memos are written in the argument style, tasks with input objects.
const SCHEMA: &str = r#"
type Query {
  memos(level: Int, where: MemoWhere): [Memo!]!
  tasks(level: Int, where: TaskWhere): [Task!]!
}
type Mutation {
  createMemo(name: String!, level: Int = 3, note: String): Memo!
  updateMemo(id: ID!, name: String, level: Int, note: String): Memo!
  createTask(input: TaskInput!): Task!
  updateTask(id: ID!, patch: TaskPatch!): Task!
}
input MemoWhere { name: String level: Int note: String }
input TaskWhere { name: String level: Int note: String }
input TaskInput { name: String! level: Int = 3 note: String }
input TaskPatch { name: String level: Int note: String }
type Memo { id: ID! name: String! level: Int note: String }
type Task { id: ID! name: String! level: Int note: String }
"#;

async fn server(db: TestDb) -> Server {
    let model = load_sources(&[Source {
        path: "variables.graphql".into(),
        text: SCHEMA.into(),
    }])
    .unwrap();
    start_model(db, model.into(), GraphqlOptions::default(), 1 << 20).await
}

fn names(v: &Value) -> Vec<&str> {
    let mut out: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    out.sort_unstable();
    out
}

#[tokio::test]
async fn an_unsent_variable_leaves_the_argument_absent_in_both_write_styles() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = server(db).await;
        // Creates: the unsent `$l` takes the declared default (3), the
        // unsent `$n` leaves `note` unset; an explicit null stays null.
        let memo = s
            .data(
                "mutation($name: String!, $l: Int, $n: String) { createMemo(name: $name, level: $l, note: $n) { id level note } }",
                json!({"name": "m"}),
            )
            .await["createMemo"]
            .clone();
        assert_eq!(memo["level"], json!(3), "{backend:?}: {memo}");
        let task = s
            .data(
                "mutation($name: String!, $l: Int, $n: String) { createTask(input: {name: $name, level: $l, note: $n}) { id level note } }",
                json!({"name": "t"}),
            )
            .await["createTask"]
            .clone();
        assert_eq!(task["level"], json!(3), "{backend:?}: {task}");
        let nulled = s
            .data(
                "mutation($l: Int) { createMemo(name: \"z\", level: $l) { level } }",
                json!({"l": null}),
            )
            .await;
        assert_eq!(nulled["createMemo"]["level"], Value::Null, "{backend:?}");

        // Updates: only what is sent changes.
        let d = s
            .data(
                "mutation($id: ID!, $name: String, $l: Int, $n: String) { updateMemo(id: $id, name: $name, level: $l, note: $n) { name level note } }",
                json!({"id": memo["id"], "n": "noted"}),
            )
            .await;
        assert_eq!(
            d["updateMemo"],
            json!({"name": "m", "level": 3, "note": "noted"}),
            "{backend:?}"
        );
        let d = s
            .data(
                "mutation($id: ID!, $name: String, $l: Int, $n: String) { updateTask(id: $id, patch: {name: $name, level: $l, note: $n}) { name level note } }",
                json!({"id": task["id"], "n": "noted"}),
            )
            .await;
        assert_eq!(
            d["updateTask"],
            json!({"name": "t", "level": 3, "note": "noted"}),
            "{backend:?}"
        );
        // An explicit null still clears.
        let d = s
            .data(
                "mutation($id: ID!, $l: Int) { updateTask(id: $id, patch: {level: $l}) { level note } }",
                json!({"id": task["id"], "l": null}),
            )
            .await;
        assert_eq!(
            d["updateTask"],
            json!({"level": null, "note": "noted"}),
            "{backend:?}"
        );
    }
}

fn request(query: &str, variables: Value) -> Request {
    Request::new(query).variables(Variables::from_json(variables))
}

/// An unsent filter variable filters nothing, whichever executor answers:
/// async-graphql, then the planned executor for the same request.
#[tokio::test]
async fn an_unsent_filter_variable_applies_no_filter_in_both_executors() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = server(db).await;
        for (name, level) in [("a", json!(1)), ("b", Value::Null)] {
            s.data(
                "mutation($name: String!, $l: Int) { createMemo(name: $name, level: $l) { id } t: createTask(input: {name: $name, level: $l}) { id } }",
                json!({"name": name, "l": level}),
            )
            .await;
        }
        for (root, query) in [
            ("memos", "query($l: Int) { memos(level: $l) { name } }"),
            (
                "memos",
                "query($l: Int) { memos(where: {level: $l}) { name } }",
            ),
            ("tasks", "query($l: Int) { tasks(level: $l) { name } }"),
            (
                "tasks",
                "query($l: Int, $n: String) { tasks(where: {level: $l, name: $n}) { name } }",
            ),
        ] {
            let slow = s.graphql.execute(request(query, json!({}))).await;
            assert!(
                slow.response.errors.is_empty(),
                "{query}: {:?}",
                slow.response.errors
            );
            let slow = serde_json::to_value(&slow.response).unwrap();
            assert_eq!(
                names(&slow["data"][root]),
                ["a", "b"],
                "{backend:?} {query}"
            );
            let planned = s
                .graphql
                .execute_planned(&request(query, json!({})))
                .await
                .unwrap_or_else(|| panic!("{query}: the planned executor declined it"));
            let planned: Value = serde_json::from_slice(&planned).unwrap();
            assert_eq!(planned, slow, "{backend:?} {query}");
            // An explicit null compares with null.
            let d = s.data(query, json!({"l": null})).await;
            assert_eq!(names(&d[root]), ["b"], "{backend:?} {query}");
        }
    }
}

/// The example's own case, over HTTP.
#[tokio::test]
async fn an_unsent_variable_does_not_clear_a_book_field() {
    for db in TestDb::each().await {
        let s = start_in(db, crate::open_options(), 1 << 20).await;
        let author = s.author("Le Guin", Some("1929-10-21")).await;
        let book = s
            .book(
                json!({"title": "Earthsea", "year": 1968, "status": "AVAILABLE", "author": author}),
            )
            .await;
        let d = s
            .data(
                "mutation($id: ID!, $t: String, $y: Int) { updateBook(id: $id, patch: {title: $t, year: $y}) { title year } }",
                json!({"id": book, "t": "A Wizard of Earthsea"}),
            )
            .await;
        assert_eq!(
            d["updateBook"],
            json!({"title": "A Wizard of Earthsea", "year": 1968})
        );
        let d = s
            .data(
                "mutation($id: ID!, $n: String, $b: Date) { updateAuthor(id: $id, name: $n, born: $b) { name born } }",
                json!({"id": author, "n": "Ursula K. Le Guin"}),
            )
            .await;
        assert_eq!(
            d["updateAuthor"],
            json!({"name": "Ursula K. Le Guin", "born": "1929-10-21"})
        );
    }
}

/// A mutation validated once keeps its verdict for new variables only
/// when they certainly pass: a value of the wrong type, an unknown input
/// field or an explicit null is validated again and refused as before,
/// and nothing is written.
#[tokio::test]
async fn a_mutations_kept_validation_refuses_what_validation_refuses() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = server(db).await;
        let create = "mutation($n: String!, $l: Int, $in: TaskInput!) { \
                      createMemo(name: $n, level: $l) { name level } \
                      createTask(input: $in) { name } }";
        let ok = s
            .data(create, json!({"n": "a", "l": 1, "in": {"name": "t1"}}))
            .await;
        assert_eq!(
            ok["createMemo"],
            json!({"name": "a", "level": 1}),
            "{backend}"
        );
        // Another variant: kept, and written.
        let ok = s
            .data(create, json!({"n": "b", "l": 2, "in": {"name": "t2"}}))
            .await;
        assert_eq!(
            ok["createMemo"],
            json!({"name": "b", "level": 2}),
            "{backend}"
        );
        for bad in [
            json!({"n": "c", "l": "high", "in": {"name": "t3"}}),
            json!({"n": "c", "l": 1.5, "in": {"name": "t3"}}),
            json!({"n": 7, "l": 1, "in": {"name": "t3"}}),
            json!({"n": "c", "l": 1, "in": {"name": "t3", "colour": "red"}}),
            json!({"n": "c", "l": 1, "in": {"level": 2}}),
            json!({"n": "c", "l": 1, "in": "t3"}),
        ] {
            let r = s.gql(create, bad.clone()).await;
            assert!(r["errors"].is_array(), "{backend} {bad}: {r}");
            assert!(
                r.get("data").is_none_or(Value::is_null),
                "{backend} {bad}: {r}"
            );
        }
        // A null where the argument is nullable: validated, and written.
        let ok = s
            .data(create, json!({"n": "d", "l": null, "in": {"name": "t4"}}))
            .await;
        assert_eq!(
            ok["createMemo"],
            json!({"name": "d", "level": null}),
            "{backend}"
        );
        let memos = s.data("{ memos { name } }", json!({})).await;
        assert_eq!(names(&memos["memos"]), ["a", "b", "d"], "{backend}");
        let tasks = s.data("{ tasks { name } }", json!({})).await;
        assert_eq!(names(&tasks["tasks"]), ["t1", "t2", "t4"], "{backend}");
    }
}
