//! Relay connections (CONTRACT §13): walks by cursor through GraphQL over
//! HTTP on every backend, rows inserted between pages, ties, `last`/`before`,
//! `totalCount`, row policies, bad cursors and page sizes. The requests
//! go the way HTTP sends them: through the planned executor, which serves
//! connection pages (`planned.rs` compares its answers with async-graphql's),
//! and async-graphql for what it declines.

use gatehouse_auth::Principal;
use gatehouse_graphql::Graphql;
use gatehouse_graphql::async_graphql::Request;
use gatehouse_store::AccessContext;
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::{Server, open_options, start_in};

const PAGE: &str =
    "query($first: Int, $after: String, $last: Int, $before: String, $order: [BookOrderBy!]) {
  booksConnection(first: $first, after: $after, last: $last, before: $before, orderBy: $order) {
    edges { cursor node { title year } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    totalCount
  }
}";

async fn add_book(s: &Server, author: &str, title: &str, year: Option<i64>) {
    s.book(json!({"title": title, "year": year, "status": "AVAILABLE", "author": author}))
        .await;
}

fn titles(conn: &Value) -> Vec<String> {
    conn["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["title"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_walked_both_ways_while_books_are_added() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = start_in(db, open_options(), 1 << 20).await;
        let a = s.author("Le Guin", None).await;
        for (t, y) in [
            ("a", 1990),
            ("b", 1990),
            ("c", 1990),
            ("d", 2000),
            ("e", 2010),
        ] {
            add_book(&s, &a, t, Some(y)).await;
        }
        add_book(&s, &a, "n", None).await;

        // Forwards by year (ties on 1990, a null last), two per page.
        let mut seen = Vec::new();
        let mut after = Value::Null;
        let mut pages = 0;
        loop {
            let d = s
                .data(
                    PAGE,
                    json!({"first": 2, "after": after, "order": ["year_ASC"]}),
                )
                .await;
            let c = &d["booksConnection"];
            let edges = c["edges"].as_array().unwrap();
            assert_eq!(c["pageInfo"]["hasPreviousPage"], json!(!after.is_null()));
            assert_eq!(c["pageInfo"]["startCursor"], edges[0]["cursor"]);
            assert_eq!(c["pageInfo"]["endCursor"], edges[edges.len() - 1]["cursor"]);
            seen.extend(titles(c));
            if pages == 0 {
                // Before the cursor (never read) and after it (read once).
                add_book(&s, &a, "early", Some(1900)).await;
                add_book(&s, &a, "late", Some(2005)).await;
            }
            pages += 1;
            if c["pageInfo"]["hasNextPage"] == json!(false) {
                assert_eq!(c["totalCount"], 8, "{backend}");
                break;
            }
            after = c["pageInfo"]["endCursor"].clone();
        }
        assert_eq!(seen, ["a", "b", "c", "d", "late", "e", "n"], "{backend}");

        // Backwards, by title descending, one page of three then the rest.
        let d = s
            .data(PAGE, json!({"last": 3, "order": ["title_DESC"]}))
            .await;
        let c = &d["booksConnection"];
        assert_eq!(titles(c), ["c", "b", "a"], "{backend}");
        assert_eq!(c["pageInfo"]["hasPreviousPage"], true);
        assert_eq!(c["pageInfo"]["hasNextPage"], false);
        let d = s
            .data(
                PAGE,
                json!({"last": 10, "before": c["pageInfo"]["startCursor"], "order": ["title_DESC"]}),
            )
            .await;
        let c = &d["booksConnection"];
        assert_eq!(titles(c), ["n", "late", "early", "e", "d"], "{backend}");
        assert_eq!(c["pageInfo"]["hasPreviousPage"], false);
        assert_eq!(c["pageInfo"]["hasNextPage"], true);

        // No count given: the default page size, forwards.
        let d = s
            .data(
                "{ booksConnection { edges { node { title } } } }",
                json!({}),
            )
            .await;
        assert_eq!(titles(&d["booksConnection"]).len(), 8);
        // Filters apply to the page and to totalCount.
        let d = s
            .data(
                r#"{ booksConnection(first: 1, where: {year: 1990}) { edges { node { title } } totalCount pageInfo { hasNextPage } } }"#,
                json!({}),
            )
            .await;
        assert_eq!(d["booksConnection"]["totalCount"], 3);
        assert_eq!(d["booksConnection"]["pageInfo"]["hasNextPage"], true);
    }
}

#[tokio::test]
async fn bad_cursors_and_page_sizes_are_refused_with_their_codes() {
    let s = start_in(TestDb::sqlite(), open_options(), 1 << 20).await;
    let a = s.author("Lem", None).await;
    add_book(&s, &a, "Solaris", Some(1961)).await;
    add_book(&s, &a, "Eden", Some(1959)).await;
    let d = s
        .data(PAGE, json!({"first": 1, "order": ["year_ASC"]}))
        .await;
    let by_year = d["booksConnection"]["pageInfo"]["endCursor"].clone();
    for vars in [
        json!({"first": 1, "after": "garbage!"}),
        json!({"first": 1, "after": "e30"}),
        // A cursor of another order.
        json!({"first": 1, "after": by_year, "order": ["title_ASC"]}),
        json!({"last": 1, "before": by_year}),
        json!({"first": 1, "last": 1}),
        json!({"first": -1}),
    ] {
        let r = s.gql(PAGE, vars.clone()).await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{vars}: {r}"
        );
        assert_eq!(r["data"], Value::Null, "{vars}: {r}");
    }
    assert_eq!(
        s.error_code(PAGE, json!({"first": 501})).await,
        "PAGE_SIZE_EXCEEDED"
    );
    assert_eq!(
        s.error_code(PAGE, json!({"last": 501})).await,
        "PAGE_SIZE_EXCEEDED"
    );
    // `edges` counts like a list of `first`: 500 books each listing 500
    // of their author's books is refused before execution.
    assert_eq!(
        s.error_code(
            "{ booksConnection(first: 500) { edges { node { author { books(first: 500) { title } } } } } }",
            json!({})
        )
        .await,
        "QUERY_TOO_COMPLEX"
    );
}

const POLICY_SDL: &str = r#"
type Query {
  notesConnection(first: Int, after: String, orderBy: NoteOrder): NoteConnection!
}
enum NoteOrder { title_ASC secret_ASC }
type Note @policy(read: {OR: [{owner: "$sub"}, {shared: true}]}) {
  id: ID!
  owner: String
  shared: Boolean!
  title: String!
  secret: String @auth(read: "secret")
}
type NoteConnection { edges: [NoteEdge!]! pageInfo: PageInfo! totalCount: Int! }
type NoteEdge { cursor: String! node: Note! }
"#;

fn user(sub: &str) -> Principal {
    crate::user(sub, &["read"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_shows_and_counts_only_rows_the_caller_may_read() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let store = db.open(POLICY_SDL).await;
        let g = Graphql::new(store.model().clone(), store.clone(), &open_options()).unwrap();
        let notes = store.entity("Note").unwrap();
        for (i, (owner, shared)) in [
            ("ann", false),
            ("bob", false),
            ("bob", true),
            ("ann", false),
            ("bob", false),
        ]
        .iter()
        .enumerate()
        {
            let row =
                json!({"owner": owner, "shared": shared, "title": format!("n{i}"), "secret": "s"});
            notes
                .insert(&AccessContext::system(), row.as_object().unwrap().clone())
                .await
                .unwrap();
        }
        let run = |q: String| {
            let g = g.clone();
            async move {
                let r = g.execute(Request::new(q).data(user("ann"))).await;
                serde_json::to_value(&r.response).unwrap()
            }
        };
        let mut seen = Vec::new();
        let mut after = "null".to_string();
        loop {
            let r = run(format!(
                "{{ notesConnection(first: 1, after: {after}, orderBy: title_ASC) {{ edges {{ node {{ title }} }} pageInfo {{ hasNextPage endCursor }} totalCount }} }}"
            ))
            .await;
            let c = &r["data"]["notesConnection"];
            assert_eq!(c["totalCount"], 3, "{backend}: {r}");
            seen.extend(titles(c));
            if c["pageInfo"]["hasNextPage"] == json!(false) {
                break;
            }
            after = c["pageInfo"]["endCursor"].to_string();
        }
        assert_eq!(seen, ["n0", "n2", "n3"], "{backend}");
        // Ordering by a field the caller may not read: refused.
        let r =
            run("{ notesConnection(first: 1, orderBy: secret_ASC) { totalCount } }".into()).await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
        // The planned executor serves a caller who may read every field,
        // with the same policy in its statement and its count.
        let q = "{ notesConnection(first: 2, orderBy: secret_ASC) { edges { cursor node { title } } pageInfo { hasNextPage endCursor } totalCount } }";
        let req = || Request::new(q).data(crate::user("ann", &["read", "secret"]));
        let slow = serde_json::to_value(&g.execute(req()).await.response).unwrap();
        assert_eq!(
            slow["data"]["notesConnection"]["totalCount"], 3,
            "{backend}: {slow}"
        );
        let planned = g.execute_planned(&req()).await.expect("planned");
        assert_eq!(
            serde_json::from_slice::<Value>(&planned).unwrap(),
            slow,
            "{backend}"
        );
        store.close().await;
    }
}
