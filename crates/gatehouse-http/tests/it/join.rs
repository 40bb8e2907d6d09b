//! Many-to-many fields through a join type and composite unique keys over
//! GraphQL over HTTP, on every backend: both directions read in one batch,
//! counts, the listed type's and the join type's policies, conflicts on a
//! duplicate key, `onDelete` of the join type's fields, and the planned
//! executor declining many-to-many fields.

use gatehouse_graphql::GraphqlOptions;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_testkit::{TestDb, model};
use serde_json::{Value, json};

use super::{Server, start_model};

const SDL: &str = r#"
type Query {
  books(orderBy: [BookOrderBy!]): [Book!]!
  tags(orderBy: [TagOrderBy!]): [Tag!]!
  bookTags: [BookTag!]!
}
type Mutation {
  createBook(title: String!): Book!
  deleteBook(id: ID!): ID
  createTag(name: String!, public: Boolean!, owner: String): Tag!
  createBookTag(book: ID!, tag: ID!, hidden: Boolean!): BookTag!
  updateBookTag(id: ID!, book: ID, tag: ID): BookTag!
  deleteBookTag(id: ID!): ID
}
enum BookOrderBy { title_ASC title_DESC }
enum TagOrderBy { name_ASC name_DESC }
type Book {
  id: ID!
  title: String!
  tags(first: Int, offset: Int, name_starts_with: String, orderBy: [TagOrderBy!]): [Tag!]! @relation(through: "BookTag")
  tagsCount(name_starts_with: String): Int!
}
type Tag @policy(read: {OR: [{public: true}, {owner: "$sub"}]}) {
  id: ID!
  name: String!
  public: Boolean!
  owner: String
  books(orderBy: [BookOrderBy!]): [Book!]! @relation(through: "BookTag")
  booksCount: Int!
}
type BookTag @unique(fields: ["book", "tag"]) @policy(read: {hidden: false}, bypass: "admin") {
  id: ID!
  book: Book! @relation(onDelete: CASCADE)
  tag: Tag! @relation(onDelete: CASCADE)
  hidden: Boolean!
}
"#;

async fn id(s: &Server, mutation: &str, vars: Value) -> String {
    let d = s.data(mutation, vars).await;
    let (_, v) = d.as_object().unwrap().iter().next().unwrap();
    v["id"].as_str().unwrap().to_string()
}

fn as_user(sub: &str, query: &str) -> Request {
    Request::new(query)
        .variables(Variables::from_json(json!({})))
        .data(crate::user(sub, &["read", "write"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_to_many_over_graphql_on_every_backend() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = start_model(db, model(SDL), GraphqlOptions::default(), 1 << 20).await;
        let book = "mutation($t: String!) { createBook(title: $t) { id } }";
        let tag = "mutation($n: String!, $p: Boolean!, $o: String) { createTag(name: $n, public: $p, owner: $o) { id } }";
        let link = "mutation($b: ID!, $t: ID!, $h: Boolean!) { createBookTag(book: $b, tag: $t, hidden: $h) { id } }";
        let b1 = id(&s, book, json!({"t": "b1"})).await;
        let b2 = id(&s, book, json!({"t": "b2"})).await;
        let _b3 = id(&s, book, json!({"t": "b3"})).await;
        let rust = id(&s, tag, json!({"n": "rust", "p": true})).await;
        let sql = id(&s, tag, json!({"n": "sql", "p": true})).await;
        let mine = id(&s, tag, json!({"n": "mine", "p": false, "o": "ann"})).await;
        for (bk, t, h) in [
            (&b1, &rust, false),
            (&b1, &sql, false),
            (&b1, &mine, false),
            (&b2, &sql, false),
            (&b2, &rust, true),
        ] {
            id(&s, link, json!({"b": bk, "t": t, "h": h})).await;
        }

        // Both ways, with arguments and counts. No principal: the trusted
        // in-process caller, which the policies do not filter.
        let statements = s.store.statements();
        let d = s
            .data(
                "{ books(orderBy: [title_ASC]) { title tags(orderBy: [name_ASC]) { name } tagsCount s: tagsCount(name_starts_with: \"s\") page: tags(first: 1, offset: 1, orderBy: [name_DESC]) { name } } }",
                json!({}),
            )
            .await;
        assert_eq!(
            d,
            json!({"books": [
                {"title": "b1", "tags": [{"name": "mine"}, {"name": "rust"}, {"name": "sql"}], "tagsCount": 3, "s": 1, "page": [{"name": "rust"}]},
                {"title": "b2", "tags": [{"name": "rust"}, {"name": "sql"}], "tagsCount": 2, "s": 1, "page": [{"name": "rust"}]},
                {"title": "b3", "tags": [], "tagsCount": 0, "s": 0, "page": []},
            ]}),
            "{b}"
        );
        // One statement per field and level: the list, then tags, page,
        // and the two counts, each for all three books.
        assert_eq!(s.store.statements() - statements, 5, "{b}: batched, no N+1");
        let d = s
            .data("{ tags(orderBy: [name_ASC]) { name books(orderBy: [title_ASC]) { title } booksCount } }", json!({}))
            .await;
        assert_eq!(
            d["tags"],
            json!([
                {"name": "mine", "books": [{"title": "b1"}], "booksCount": 1},
                {"name": "rust", "books": [{"title": "b1"}, {"title": "b2"}], "booksCount": 2},
                {"name": "sql", "books": [{"title": "b1"}, {"title": "b2"}], "booksCount": 2},
            ]),
            "{b}"
        );

        // A caller: the tag policy hides ann's private tag from bob, the
        // join policy hides the hidden link from both.
        let q = "{ books(orderBy: [title_ASC]) { title tags(orderBy: [name_ASC]) { name } tagsCount } }";
        for (who, want) in [
            ("bob", json!([["rust", "sql"], ["sql"], []])),
            ("ann", json!([["mine", "rust", "sql"], ["sql"], []])),
        ] {
            let r = s.graphql.execute(as_user(who, q)).await;
            assert!(r.response.errors.is_empty(), "{b}: {:?}", r.response.errors);
            let d = serde_json::to_value(&r.response.data).unwrap();
            let got: Vec<Vec<&str>> = d["books"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    b["tags"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["name"].as_str().unwrap())
                        .collect()
                })
                .collect();
            assert_eq!(json!(got), want, "{b}: {who}");
            let counts: Vec<u64> = d["books"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["tagsCount"].as_u64().unwrap())
                .collect();
            let lens: Vec<u64> = got.iter().map(|t| t.len() as u64).collect();
            assert_eq!(counts, lens, "{b}: {who}: counts match the lists");
        }

        // The planned executor declines a many-to-many field; the resolver
        // path served it above.
        let req = Request::new("{ books { title tags { name } } }")
            .variables(Variables::from_json(json!({})));
        let _ = s
            .graphql
            .execute(Request::new("{ books { title tags { name } } }"))
            .await;
        assert!(s.graphql.execute_planned(&req).await.is_none(), "{b}");

        // A duplicate link is a conflict naming the key's fields, on create
        // and on update.
        let r = s.gql(link, json!({"b": b1, "t": rust, "h": false})).await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "CONFLICT", "{b}: {r}");
        assert!(
            r["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("BookTag (book, tag) must be unique together"),
            "{b}: {r}"
        );
        let other = id(&s, link, json!({"b": b2, "t": mine, "h": false})).await;
        let r = s
            .gql(
                "mutation($i: ID!, $t: ID!) { updateBookTag(id: $i, tag: $t) { id } }",
                json!({"i": other, "t": sql}),
            )
            .await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "CONFLICT", "{b}: {r}");

        // Deleting a book follows onDelete of BookTag.book: its links go.
        s.data("mutation($i: ID!) { deleteBook(id: $i) }", json!({"i": b1}))
            .await;
        let d = s
            .data(
                "{ tags(orderBy: [name_ASC]) { name booksCount } bookTags { id } }",
                json!({}),
            )
            .await;
        assert_eq!(
            d["tags"],
            json!([{"name": "mine", "booksCount": 1}, {"name": "rust", "booksCount": 1}, {"name": "sql", "booksCount": 1}]),
            "{b}"
        );
        assert_eq!(d["bookTags"].as_array().unwrap().len(), 3, "{b}");
    }
}
