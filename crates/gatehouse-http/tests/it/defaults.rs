//! Stored defaults (`@default(value:)`): every create that leaves the field
//! out gets it, through GraphQL (root and nested) and REST alike; the
//! field is optional in the generated create input and in the OpenAPI
//! document, which gives the default; an explicit null is stored where the
//! field is nullable and refused where it is required.

use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::{AppState, app};
use gatehouse_testkit::{TestDb, TestServer, model};
use serde_json::{Value, json};

use crate::ready;

const SDL: &str = r#"
enum Status { OPEN DONE }
type Project { id: ID! name: String! tasks: [Task!]! }
type Task {
  id: ID!
  title: String!
  status: Status! @default(value: OPEN)
  priority: Int! @default(value: 3)
  note: String @default(value: "none")
  due: DateTime @default(value: "now")
  createdAt: DateTime! @createdAt
  project: Project
}
"#;

async fn gql(c: &reqwest::Client, base: &str, q: &str, v: Value) -> Value {
    gatehouse_testkit::graphql(c, &format!("{base}/graphql"), None, q, v).await
}

#[tokio::test]
async fn a_create_that_leaves_a_field_out_gets_its_default_everywhere() {
    for db in TestDb::each().await {
        let b = db.backend();
        let m = model(SDL);
        let store = db.open(&m).await;
        let opts = GraphqlOptions {
            auth_required: false,
            ..GraphqlOptions::default()
        };
        let graphql = Graphql::new(m, store.clone(), &opts).unwrap();
        let rest = gatehouse_rest::router(gatehouse_rest::RestState {
            store: store.clone(),
            default_page_size: 50,
            max_page_size: 500,
            max_body_bytes: 1 << 20,
            base_path: String::new(),
            auth_required: false,
        });
        let state = AppState {
            graphql,
            ready: ready(&store),
            base_path: String::new(),
            max_body_bytes: 1 << 20,
            authn: None,
            subscriptions: Default::default(),
            cors: Default::default(),
        };
        let served = TestServer::start(app(state, vec![rest])).await;
        let (c, base) = (&served.client, served.base.as_str());
        let fields = "title status priority note due createdAt";

        // GraphQL, root create.
        let r = gql(
            c,
            base,
            &format!("mutation {{ createTask(input: {{title: \"a\"}}) {{ {fields} }} }}"),
            json!({}),
        )
        .await;
        let t = &r["data"]["createTask"];
        assert_eq!(
            (&t["status"], &t["priority"], &t["note"]),
            (&json!("OPEN"), &json!(3), &json!("none")),
            "{b}: {r}"
        );
        assert_eq!(
            t["due"], t["createdAt"],
            "{b}: `now` is the write's time: {r}"
        );
        // Given values win; an explicit null is stored where the field
        // is nullable, and refused where it is required.
        let r = gql(c, base, &format!("mutation {{ createTask(input: {{title: \"b\", status: DONE, note: null, due: null}}) {{ {fields} }} }}"), json!({})).await;
        let t = &r["data"]["createTask"];
        assert_eq!(
            (&t["status"], &t["note"], &t["due"]),
            (&json!("DONE"), &Value::Null, &Value::Null),
            "{b}: {r}"
        );
        let r = gql(
            c,
            base,
            "mutation { createTask(input: {title: \"c\", priority: null}) { id } }",
            json!({}),
        )
        .await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{b}: {r}"
        );
        assert!(
            r["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("priority"),
            "{b}: {r}"
        );

        // GraphQL, nested create.
        let r = gql(c, base, "mutation { createProject(input: {name: \"p\", tasks: [{title: \"d\"}]}) { tasks { status priority note } } }", json!({})).await;
        assert_eq!(
            r["data"]["createProject"]["tasks"],
            json!([{"status": "OPEN", "priority": 3, "note": "none"}]),
            "{b}: {r}"
        );

        // REST.
        let r = c
            .post(format!("{base}/v1/tasks"))
            .json(&json!({"title": "e"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{b}");
        let t: Value = r.json().await.unwrap();
        assert_eq!(
            (&t["status"], &t["priority"], &t["note"]),
            (&json!("OPEN"), &json!(3), &json!("none")),
            "{b}: {t}"
        );
        assert!(t["due"].is_string(), "{b}: {t}");

        // The generated input and the OpenAPI document make the fields
        // optional, and OpenAPI gives the defaults.
        let r = gql(
            c,
            base,
            "{ __type(name: \"TaskCreateInput\") { inputFields { name type { kind } } } }",
            json!({}),
        )
        .await;
        let kinds: Vec<(String, String)> = r["data"]["__type"]["inputFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["name"].as_str().unwrap().to_string(),
                    f["type"]["kind"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert!(
            kinds.contains(&("title".into(), "NON_NULL".into())),
            "{b}: {kinds:?}"
        );
        assert!(
            kinds.contains(&("status".into(), "ENUM".into())),
            "{b}: {kinds:?}"
        );
        assert!(
            kinds.contains(&("priority".into(), "SCALAR".into())),
            "{b}: {kinds:?}"
        );
        let doc: Value = c
            .get(format!("{base}/v1/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let create = &doc["components"]["schemas"]["TaskCreate"];
        assert_eq!(
            create["properties"]["status"]["default"], "OPEN",
            "{b}: {create}"
        );
        assert_eq!(
            create["properties"]["priority"]["default"], 3,
            "{b}: {create}"
        );
        assert_eq!(create["required"], json!(["title"]), "{b}: {create}");
        store.close().await;
    }
}
