//! Data rules every entry point applies: stored defaults (`@default`) and
//! validation (`@constraint`), through GraphQL (root and nested) and REST
//! alike, described in the generated inputs and the OpenAPI document.

use gatehouse_testkit::{TestDb, TestServer, model};
use serde_json::{Value, json};

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

/// `sdl` served from `db` over GraphQL and REST, without authentication.
async fn serve(db: &TestDb, sdl: &str) -> (TestServer, gatehouse_store::Store) {
    let m = model(sdl);
    let store = db.open(&m).await;
    let (server, _) = crate::serve_graphql_and_rest(&store, m).await;
    (server, store)
}

#[tokio::test]
async fn a_create_that_leaves_a_field_out_gets_its_default_everywhere() {
    for db in TestDb::each().await {
        let b = db.backend();
        let (served, store) = serve(&db, SDL).await;
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

const RULES: &str = r#"
type Person {
  id: ID!
  handle: String! @constraint(minLength: 3, maxLength: 12, pattern: "[a-z][a-z0-9_]*")
  email: String @constraint(format: "email")
  site: String @constraint(format: "uri")
  age: Int @constraint(min: 0, max: 150)
  score: Float @constraint(min: 0.5)
  pets: [Pet!]!
}
type Pet { id: ID! name: String! @constraint(maxLength: 5) owner: Person }
"#;

/// `@constraint` is checked by the store on every create and update,
/// whatever the entry point: GraphQL names the field and the rule
/// (`BAD_USER_INPUT`), REST lists every problem (422), nested creates are
/// refused whole, nothing is written; OpenAPI carries the keywords.
#[tokio::test]
async fn constraints_hold_on_every_create_and_update() {
    for db in TestDb::each().await {
        let b = db.backend();
        let (served, store) = serve(&db, RULES).await;
        let (c, base) = (&served.client, served.base.as_str());
        let create = "mutation($i: PersonCreateInput!) { createPerson(input: $i) { id handle } }";
        let ok = gql(c, base, create, json!({"i": {"handle": "ada_1", "email": "ada@example.org", "site": "https://example.org/", "age": 36, "score": 0.5}})).await;
        let id = ok["data"]["createPerson"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{b}: {ok}"))
            .to_string();
        for (input, field, rule) in [
            (json!({"handle": "ab"}), "handle", "at least 3 characters"),
            (
                json!({"handle": "abcdefghijklm"}),
                "handle",
                "at most 12 characters",
            ),
            (
                json!({"handle": "Ada"}),
                "handle",
                "match the pattern `[a-z][a-z0-9_]*`",
            ),
            (
                json!({"handle": "ada", "email": "not-an-address"}),
                "email",
                "e-mail address",
            ),
            (
                json!({"handle": "ada", "site": "example.org"}),
                "site",
                "absolute URI",
            ),
            (json!({"handle": "ada", "age": 151}), "age", "at most 150"),
            (
                json!({"handle": "ada", "score": 0.25}),
                "score",
                "at least 0.5",
            ),
        ] {
            let r = gql(c, base, create, json!({"i": input})).await;
            assert_eq!(
                r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
                "{b}: {r}"
            );
            let message = r["errors"][0]["message"].as_str().unwrap();
            assert!(
                message.contains(field) && message.contains(rule),
                "{b}: {message}"
            );
        }
        // Lengths count characters, not bytes (10 bytes, 5 characters).
        let r = gql(
            c,
            base,
            "mutation { createPet(input: {name: \"ééééé\"}) { name } }",
            json!({}),
        )
        .await;
        assert!(r.get("errors").is_none(), "{b}: {r}");
        // Updates too, and a refused update changes nothing.
        let r = gql(
            c,
            base,
            "mutation($id: ID!) { updatePerson(id: $id, input: {age: -1}) { age } }",
            json!({"id": id}),
        )
        .await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{b}: {r}"
        );
        let r = gql(
            c,
            base,
            "query($id: ID!) { person(id: $id) { age } }",
            json!({"id": id}),
        )
        .await;
        assert_eq!(r["data"]["person"]["age"], 36, "{b}: {r}");
        // A nested child that breaks a rule refuses the whole create.
        let r = gql(c, base, "mutation { createPerson(input: {handle: \"bob\", pets: [{name: \"Rex\"}, {name: \"Bartholomew\"}]}) { id } }", json!({})).await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{b}: {r}"
        );
        let r = gql(c, base, "{ peopleCount petsCount }", json!({})).await;
        assert_eq!(
            r["data"],
            json!({"peopleCount": 1, "petsCount": 1}),
            "{b}: {r}"
        );

        // REST: every problem listed.
        let r = c
            .post(format!("{base}/v1/people"))
            .json(&json!({"handle": "X", "age": 200, "email": "nope"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{b}");
        let problem: Value = r.json().await.unwrap();
        let text = problem.to_string();
        for (field, rule) in [
            ("handle", "at least 3"),
            ("handle", "pattern"),
            ("age", "at most 150"),
            ("email", "e-mail"),
        ] {
            assert!(
                text.contains(field) && text.contains(rule),
                "{b}: {problem}"
            );
        }
        let r = c
            .patch(format!("{base}/v1/people/{id}"))
            .json(&json!({"site": "nope"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{b}");

        // OpenAPI keywords.
        let doc: Value = c
            .get(format!("{base}/v1/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let p = &doc["components"]["schemas"]["PersonCreate"]["properties"];
        assert_eq!(
            (&p["handle"]["minLength"], &p["handle"]["maxLength"]),
            (&json!(3), &json!(12)),
            "{b}: {p}"
        );
        assert_eq!(p["handle"]["pattern"], "^(?:[a-z][a-z0-9_]*)$", "{b}: {p}");
        assert_eq!(
            (&p["email"]["format"], &p["site"]["format"]),
            (&json!("email"), &json!("uri")),
            "{b}: {p}"
        );
        assert_eq!(
            (&p["age"]["minimum"], &p["age"]["maximum"]),
            (&json!(0.0), &json!(150.0)),
            "{b}: {p}"
        );
        store.close().await;
    }
}
