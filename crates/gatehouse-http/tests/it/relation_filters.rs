//! `where` through to-many relations (`tasks_some`, `tasks_every`,
//! `tasks_none`) over GraphQL: root lists, counts, connections, nested lists
//! and counts, many-to-many; the caller reaches only rows it may read; the
//! planned executor hands these documents to async-graphql rather than
//! leave the filter out.

use gatehouse_auth::Principal;
use gatehouse_graphql::GraphqlOptions;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_store::AccessContext;
use gatehouse_testkit::{TestDb, model};
use serde_json::{Value, json};

use super::{Server, start_model, user};

const SDL: &str = r#"
type Query {
  projects(where: ProjectWhere): [Project!]!
  projectsCount(where: ProjectWhere): Int!
  projectsConnection(first: Int, after: String, where: ProjectWhere): ProjectConnection!
  groups: [Group!]!
  books(where: BookWhere): [Book!]!
}
type ProjectConnection { edges: [ProjectEdge!]! pageInfo: PageInfo! totalCount: Int! }
type ProjectEdge { cursor: String! node: Project! }
enum Status { OPEN DONE }
type Group {
  id: ID!
  name: String!
  projects(where: ProjectWhere): [Project!]!
  projectsCount(where: ProjectWhere): Int!
}
type Project {
  id: ID!
  name: String!
  group: Group
  tasks: [Task!]!
}
type Task @policy(read: {OR: [{secret: false}, {owner: "$sub"}]}) {
  id: ID!
  project: Project!
  status: Status!
  owner: String
  secret: Boolean!
  note: String @auth(read: "notes")
}
type Book { id: ID! title: String! tags: [Tag!]! @relation(through: "BookTag") }
type Tag { id: ID! name: String! }
type BookTag { id: ID! book: Book! tag: Tag! }
input ProjectWhere {
  name: String
  tasks_some: TaskWhere
  tasks_every: TaskWhere
  tasks_none: TaskWhere
  AND: [ProjectWhere!]
  OR: [ProjectWhere!]
  NOT: ProjectWhere
}
input TaskWhere { status: Status note: String }
input BookWhere { title: String tags_some: TagWhere tags_none: TagWhere }
input TagWhere { name: String }
"#;

async fn put(s: &Server, entity: &str, v: Value) -> String {
    let r = s
        .store
        .entity(entity)
        .unwrap()
        .insert(&AccessContext::system(), v.as_object().unwrap().clone())
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

/// Group `g` holds `busy` (an OPEN and a DONE task), `done` (DONE),
/// `empty`, and `hidden` (only an OPEN task secret to alice).
async fn seeded(db: TestDb) -> Server {
    let s = start_model(db, model(SDL), GraphqlOptions::default(), 1 << 20).await;
    let g = put(&s, "Group", json!({"name": "g"})).await;
    for (name, tasks) in [
        ("busy", vec![("OPEN", false), ("DONE", false)]),
        ("done", vec![("DONE", false)]),
        ("empty", vec![]),
        ("hidden", vec![("OPEN", true)]),
    ] {
        let p = put(&s, "Project", json!({"name": name, "group": g})).await;
        for (status, secret) in tasks {
            put(
                &s,
                "Task",
                json!({"project": p, "status": status, "secret": secret, "owner": "alice"}),
            )
            .await;
        }
    }
    let sf = put(&s, "Tag", json!({"name": "sf"})).await;
    let dune = put(&s, "Book", json!({"title": "Dune"})).await;
    put(&s, "Book", json!({"title": "Emma"})).await;
    put(&s, "BookTag", json!({"book": dune, "tag": sf})).await;
    s
}

fn request(query: &str, variables: Value, who: &Principal) -> Request {
    Request::new(query)
        .variables(Variables::from_json(variables))
        .data(who.clone())
}

/// The answer of async-graphql, after checking that the planned executor
/// declines the document (it must never answer it without the filter).
async fn answer(s: &Server, query: &str, variables: Value, who: &Principal) -> Value {
    let r = s
        .graphql
        .execute(request(query, variables.clone(), who))
        .await;
    // Validated and cached now: a plan would be used if it ran these.
    assert!(
        s.graphql
            .execute_planned(&request(query, variables.clone(), who))
            .await
            .is_none(),
        "{query}: the planned executor must decline a relation filter"
    );
    serde_json::to_value(&r.response).unwrap()
}

fn names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["name"]
                .as_str()
                .or(p["title"].as_str())
                .unwrap()
                .to_string()
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_filters_through_to_many_relations_in_lists_counts_and_connections() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = seeded(db).await;
        let bob = user("bob", &["read"]);
        let alice = user("alice", &["read"]);
        let q = r#"query($w: ProjectWhere) {
            projects(where: $w) { name }
            projectsCount(where: $w)
            projectsConnection(first: 10, where: $w) { totalCount edges { node { name } } }
            groups { projects(where: $w) { name } projectsCount(where: $w) }
        }"#;
        for (w, bobs, alices) in [
            (
                json!({"tasks_some": {"status": "OPEN"}}),
                vec!["busy"],
                vec!["busy", "hidden"],
            ),
            (
                json!({"tasks_every": {"status": "DONE"}}),
                vec!["done", "empty", "hidden"],
                vec!["done", "empty"],
            ),
            (
                json!({"tasks_none": {}}),
                vec!["empty", "hidden"],
                vec!["empty"],
            ),
            (
                json!({"OR": [{"name": "empty"}, {"tasks_some": {}}]}),
                vec!["busy", "done", "empty"],
                vec!["busy", "done", "empty", "hidden"],
            ),
        ] {
            for (who, expected) in [(&bob, bobs), (&alice, alices)] {
                let r = answer(&s, q, json!({ "w": w }), who).await;
                assert!(r["errors"].is_null(), "{backend} {w}: {r}");
                let d = &r["data"];
                let expected: Vec<String> = expected.iter().map(|n| n.to_string()).collect();
                assert_eq!(names(&d["projects"]), expected, "{backend} {w} {who:?}");
                assert_eq!(d["projectsCount"], expected.len(), "{w}");
                let c = &d["projectsConnection"];
                assert_eq!(c["totalCount"], expected.len(), "{w}");
                let nodes: Vec<Value> = c["edges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e["node"].clone())
                    .collect();
                assert_eq!(names(&Value::Array(nodes)), expected, "{w}");
                let g = &d["groups"][0];
                assert_eq!(names(&g["projects"]), expected, "nested {w}");
                assert_eq!(g["projectsCount"], expected.len(), "nested count {w}");
            }
        }
        // Only in a nested list, and only in a connection: still declined.
        for q in [
            r#"{ groups { projects(where: {tasks_some: {status: OPEN}}) { name } } }"#,
            r#"{ projectsConnection(first: 5, where: {tasks_none: {}}) { edges { node { name } } } }"#,
        ] {
            let r = answer(&s, q, json!({}), &bob).await;
            assert!(r["errors"].is_null(), "{r}");
        }
        // Many-to-many, written in the document rather than a variable.
        let r = answer(
            &s,
            r#"{ a: books(where: {tags_some: {name: "sf"}}) { title } b: books(where: {tags_none: {name: "sf"}}) { title } }"#,
            json!({}),
            &bob,
        )
        .await;
        assert_eq!(names(&r["data"]["a"]), ["Dune"], "{r}");
        assert_eq!(names(&r["data"]["b"]), ["Emma"], "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_the_caller_may_not_read_is_forbidden_inside_a_relation_filter() {
    let s = seeded(TestDb::sqlite()).await;
    let q = r#"{ projects(where: {tasks_some: {note: "x"}}) { name } }"#;
    let r = answer(&s, q, json!({}), &user("bob", &["read"])).await;
    assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Task.note"),
        "{r}"
    );
    let r = answer(&s, q, json!({}), &user("bob", &["read", "notes"])).await;
    assert!(r["errors"].is_null(), "{r}");
}
