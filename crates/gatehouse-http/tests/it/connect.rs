//! Nested create's links to existing rows: a create of a type with a
//! many-to-many field takes `tags: {connect: [ids]}` (root and nested,
//! GraphQL and REST), writes one join row per id in the same transaction,
//! and refuses a row the caller cannot read like a missing one, writing
//! nothing. The derived input is in the served schema and the OpenAPI
//! document.

use gatehouse_graphql::Graphql;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_store::AccessContext;
use gatehouse_testkit::{TestDb, TestServer, model};
use serde_json::{Value, json};

/// A types-only schema: the roots are generated. A tag is readable when
/// public or by its owner.
const SDL: &str = r#"
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
type BookTag @unique(fields: ["book", "tag"]) {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
}
"#;

async fn gql(c: &reqwest::Client, base: &str, q: &str, v: Value) -> Value {
    gatehouse_testkit::graphql(c, &format!("{base}/graphql"), None, q, v).await
}

/// `SDL` served from `db` over GraphQL and REST, without authentication;
/// the executor too, for requests as a user.
async fn serve(db: &TestDb) -> (TestServer, gatehouse_store::Store, Graphql) {
    let m = model(SDL);
    let store = db.open(&m).await;
    let (server, graphql) = crate::serve_graphql_and_rest(&store, m).await;
    (server, store, graphql)
}

async fn tag(s: &gatehouse_store::Store, name: &str, public: bool, owner: &str) -> String {
    let r = s
        .entity("Tag")
        .unwrap()
        .insert(
            &AccessContext::system(),
            json!({"name": name, "public": public, "owner": owner})
                .as_object()
                .unwrap()
                .clone(),
        )
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

/// The sorted tag names of each book, by title.
fn names(books: &Value) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = books
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let mut t: Vec<String> = b["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect();
            t.sort();
            (b["title"].as_str().unwrap().to_string(), t)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_connect_existing_rows_over_graphql_and_rest() {
    for db in TestDb::each().await {
        let b = db.backend();
        let (served, store, graphql) = serve(&db).await;
        let (c, base) = (&served.client, served.base.as_str());
        let rust = tag(&store, "rust", true, "x").await;
        let sql = tag(&store, "sql", true, "x").await;
        let mine = tag(&store, "mine", false, "ann").await;

        // The derived input, in the served schema.
        let sdl = graphql.sdl();
        assert!(sdl.contains("input BookTagsConnect"), "{b}: {sdl}");

        // GraphQL, root create: the links read back through the field.
        let r = gql(
            c,
            base,
            "mutation($t: [ID!]!) { createBook(input: {title: \"B\", tags: {connect: $t}}) { title tags { name } } }",
            json!({"t": [rust, sql]}),
        )
        .await;
        assert_eq!(
            names(&json!([r["data"]["createBook"]])),
            [("B".to_string(), vec!["rust".to_string(), "sql".to_string()])],
            "{b}: {r}"
        );
        // GraphQL, nested create.
        let r = gql(
            c,
            base,
            "mutation($t: [ID!]!) { createAuthor(input: {name: \"A\", books: [{title: \"C\", tags: {connect: $t}}]}) { books { title tags { name } } } }",
            json!({"t": [sql]}),
        )
        .await;
        assert_eq!(
            names(&r["data"]["createAuthor"]["books"]),
            [("C".to_string(), vec!["sql".to_string()])],
            "{b}: {r}"
        );
        // REST POST.
        let r = c
            .post(format!("{base}/v1/books"))
            .json(&json!({"title": "R", "tags": {"connect": [rust]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{b}");
        let r = gql(c, base, "{ books { title tags { name } } }", json!({})).await;
        assert_eq!(
            names(&r["data"]["books"]),
            [
                ("B".to_string(), vec!["rust".to_string(), "sql".to_string()]),
                ("C".to_string(), vec!["sql".to_string()]),
                ("R".to_string(), vec!["rust".to_string()]),
            ],
            "{b}: {r}"
        );

        // A missing id: refused, nothing written, over both.
        let r = gql(
            c,
            base,
            "mutation { createBook(input: {title: \"X\", tags: {connect: [\"nope\"]}}) { id } }",
            json!({}),
        )
        .await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{b}: {r}"
        );
        assert!(
            r.to_string().contains("there is no Tag with id `nope`"),
            "{b}: {r}"
        );
        let r = c
            .post(format!("{base}/v1/books"))
            .json(&json!({"title": "X", "tags": {"connect": [rust, "nope"]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{b}");
        let problem: Value = r.json().await.unwrap();
        let text = problem.to_string();
        assert!(
            text.contains("tags.connect[1]") && text.contains("there is no Tag with id `nope`"),
            "{b}: {problem}"
        );
        // A wrong shape: 422 before the store.
        let r = c
            .post(format!("{base}/v1/books"))
            .json(&json!({"title": "X", "tags": [rust]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{b}");

        // A tag the caller cannot read (Ann's private one, asked by Bob):
        // the same words as a missing one, and the book is not created.
        let as_bob = |q: &str| {
            Request::new(q)
                .variables(Variables::from_json(json!({})))
                .data(crate::user("bob", &["read", "write"]))
        };
        let q = format!(
            "mutation {{ createAuthor(input: {{name: \"Z\", books: [{{title: \"Z\", tags: {{connect: [\"{rust}\", \"{mine}\"]}}}}]}}) {{ id }} }}"
        );
        let r = graphql.execute(as_bob(&q)).await.response;
        let err = r.errors.first().expect("refused");
        assert!(
            err.message
                .contains(&format!("there is no Tag with id `{mine}`")),
            "{b}: {err:?}"
        );
        // Ann may link her own.
        let q = format!(
            "mutation {{ createBook(input: {{title: \"M\", tags: {{connect: [\"{mine}\"]}}}}) {{ tags {{ name }} }} }}"
        );
        let r = graphql
            .execute(
                Request::new(q)
                    .variables(Variables::from_json(json!({})))
                    .data(crate::user("ann", &["read", "write"])),
            )
            .await
            .response;
        assert!(r.errors.is_empty(), "{b}: {:?}", r.errors);
        let r = gql(
            c,
            base,
            "{ authorsCount booksCount bookTagsCount }",
            json!({}),
        )
        .await;
        assert_eq!(
            r["data"],
            json!({"authorsCount": 1, "booksCount": 4, "bookTagsCount": 5}),
            "{b}: {r}"
        );

        // The OpenAPI document describes the member.
        let doc: Value = c
            .get(format!("{base}/v1/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["BookCreate"]["properties"]["tags"]["$ref"],
            "#/components/schemas/BookTagsConnect",
            "{b}"
        );
        assert_eq!(
            schemas["BookTagsConnect"]["required"],
            json!(["connect"]),
            "{b}"
        );
        store.close().await;
    }
}
