//! GraphQL spec rules the executors must follow beyond async-graphql's own
//! validation: input-object field defaults (§3.10 input coercion) and the
//! single root field of a subscription (§5.2.3.1).

use futures::StreamExt;
use gatehouse_graphql::async_graphql::Request;
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

const NOTES: &str = r#"
type Note { id: ID! title: String! done: Boolean! }
input NoteWhere { title: String = "b"  done: Boolean }
input NoteInput { title: String!  done: Boolean! = false }
type Query { notes(where: NoteWhere): [Note!]! }
type Mutation { createNote(input: NoteInput!): Note! }
type Subscription { noteCreated: Note!  noteDeleted: Note! }
"#;

async fn notes() -> (Graphql, TestDb) {
    let (g, _, db) = notes_and_store().await;
    (g, db)
}

async fn notes_and_store() -> (Graphql, gatehouse_store::Store, TestDb) {
    let db = TestDb::sqlite();
    let model = gatehouse_testkit::model(NOTES);
    let store = db.open(&model).await;
    let options = GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    };
    let g = Graphql::new(model, store.clone(), &options).unwrap();
    (g, store, db)
}

async fn run(g: &Graphql, query: &str) -> Value {
    let executed = g.execute(Request::new(query)).await;
    serde_json::to_value(&executed.response).unwrap()
}

#[tokio::test]
async fn input_object_field_defaults_apply_when_the_query_runs() {
    let (g, _db) = notes().await;
    // `done` left out of the input: its default, false.
    let v = run(
        &g,
        r#"mutation { createNote(input: {title: "a"}) { title done } }"#,
    )
    .await;
    assert_eq!(
        v["data"]["createNote"],
        json!({"title": "a", "done": false}),
        "{v}"
    );
    let v = run(
        &g,
        r#"mutation { createNote(input: {title: "b", done: true}) { done } }"#,
    )
    .await;
    assert_eq!(v["data"]["createNote"]["done"], json!(true), "{v}");

    // `where: {}` filters on `title`'s default, "b".
    let v = run(&g, "{ notes(where: {}) { title } }").await;
    assert_eq!(v["data"]["notes"], json!([{"title": "b"}]), "{v}");
    let v = run(&g, "{ notes(where: {done: false}) { title } }").await;
    assert_eq!(
        v["data"]["notes"],
        json!([]),
        "the default still applies: {v}"
    );
    // An explicit value, or an explicit null, replaces the default.
    let v = run(&g, r#"{ notes(where: {title: "a"}) { title } }"#).await;
    assert_eq!(v["data"]["notes"], json!([{"title": "a"}]), "{v}");
    let v = run(&g, "{ notes(where: {title: null}) { title } }").await;
    assert_eq!(v["data"]["notes"], json!([]), "{v}");
    // No `where` at all: no filter.
    let v = run(&g, "{ notes { title } }").await;
    assert_eq!(v["data"]["notes"].as_array().unwrap().len(), 2, "{v}");
}

#[tokio::test]
async fn a_subscription_with_two_root_fields_is_refused() {
    let (g, store, _db) = notes_and_store().await;
    for query in [
        "subscription { noteCreated { id } noteDeleted { id } }",
        "subscription { noteCreated { id } ...more } fragment more on Subscription { noteDeleted { id } }",
        "subscription S { a: noteCreated { id } b: noteCreated { id } }",
    ] {
        let mut stream = Box::pin(g.execute_stream(Request::new(query)));
        let first = stream.next().await.unwrap();
        assert!(!first.executed, "{query}");
        let v = serde_json::to_value(&first.response).unwrap();
        assert_eq!(
            v["errors"][0]["extensions"]["code"],
            json!("GRAPHQL_VALIDATION_FAILED"),
            "{query}: {v}"
        );
        assert!(
            v["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("exactly one"),
            "{v}"
        );
        assert!(stream.next().await.is_none(), "{query}");
    }
    // One root field is fine.
    let mut stream =
        Box::pin(g.execute_stream(Request::new("subscription { noteCreated { id title } }")));
    let created = tokio::spawn(async move { stream.next().await });
    gatehouse_testkit::listening(&store, 1).await;
    run(&g, r#"mutation { createNote(input: {title: "x"}) { id } }"#).await;
    let event = tokio::time::timeout(std::time::Duration::from_secs(10), created)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(event.executed);
    let v = serde_json::to_value(&event.response).unwrap();
    assert_eq!(v["data"]["noteCreated"]["title"], json!("x"), "{v}");
}
