//! The planned executor answers exactly what async-graphql answers, and
//! declines whatever it does not run.

use gatehouse_auth::Principal;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_store::Store;
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use super::{Server, start, start_in};

async fn seeded() -> Server {
    seed(start().await).await
}

async fn seed(s: Server) -> Server {
    let le_guin = s.author("Ursula K. Le Guin", Some("1929-10-21")).await;
    let lem = s.author("Stanisław Lem", None).await;
    s.author("Nobody \"Quoted\" Yet", None).await;
    let mut book = None;
    for (i, (title, year, status, author)) in [
        ("A Wizard of Earthsea", Some(1968), "AVAILABLE", &le_guin),
        ("The Dispossessed", Some(1974), "ON_LOAN", &le_guin),
        ("Solaris", Some(1961), "LOST", &lem),
        ("Fiasco \u{2014} \"late\"", None, "AVAILABLE", &lem),
    ]
    .into_iter()
    .enumerate()
    {
        let mut input = json!({"title": title, "status": status, "author": author,
                               "year": year, "isbn": format!("isbn-{i}")});
        if i % 2 == 0 {
            input["tags"] = json!(["sf", "classic"]);
            input["rating"] = json!(4.5);
            input["published"] = json!("1968-01-01");
        }
        book.get_or_insert(s.book(input).await);
    }
    let book = book.unwrap();
    s.data(
        "mutation($b: ID!) { addReview(book: $b, reviewer: \"r\", stars: 5, postedOn: \"2024-02-29\") { id } }",
        json!({"b": book}),
    )
    .await;
    s
}

fn request(query: &str, variables: Value, principal: Option<Principal>) -> Request {
    let mut r = Request::new(query).variables(Variables::from_json(variables));
    if let Some(p) = principal {
        r = r.data(p);
    }
    r
}

/// Runs `query` through async-graphql (which validates and caches the
/// variant), then through its plan; the bodies must be identical.
async fn same_answer(s: &Server, query: &str, variables: Value) -> Value {
    same_answer_of(&s.graphql, query, variables).await
}

async fn same_answer_of(graphql: &Graphql, query: &str, variables: Value) -> Value {
    let slow = graphql
        .execute(request(query, variables.clone(), None))
        .await;
    assert!(
        slow.response.errors.is_empty(),
        "{query}: {:?}",
        slow.response.errors
    );
    let slow_bytes = serde_json::to_vec(&slow.response).unwrap();
    let slow = serde_json::to_value(&slow.response).unwrap();
    let planned = graphql
        .execute_planned(&request(query, variables, None))
        .await
        .unwrap_or_else(|| panic!("{query}: the planned executor declined it"));
    // Byte for byte: both write the keys in selection order (async-graphql
    // after `order.rs` puts back what parallel resolution shuffled).
    assert_eq!(
        String::from_utf8_lossy(&planned),
        String::from_utf8_lossy(&slow_bytes),
        "{query}"
    );
    slow
}

#[tokio::test]
async fn planned_connection_pages_equal_async_graphql() {
    for db in TestDb::each().await {
        let s = seed(start_in(db, super::open_options(), 1 << 20).await).await;
        let page = "query($n: Int, $a: String, $l: Int, $b: String) { \
            booksConnection(first: $n, after: $a, last: $l, before: $b, orderBy: [year_ASC]) { \
              __typename totalCount \
              e: edges { __typename cursor node { title year author { name books(first: 1) { title } } } } \
              pageInfo { __typename hasNextPage hasPreviousPage startCursor endCursor } } }";
        // Forwards two by two, then backwards from the end, every page
        // the same from both executors.
        let mut after = Value::Null;
        let mut seen = 0;
        loop {
            let d = same_answer(&s, page, json!({"n": 2, "a": after})).await;
            let c = &d["data"]["booksConnection"];
            seen += c["e"].as_array().unwrap().len();
            if c["pageInfo"]["hasNextPage"] == json!(false) {
                break;
            }
            after = c["pageInfo"]["endCursor"].clone();
        }
        assert_eq!(seen, 4);
        let d = same_answer(&s, page, json!({"l": 3})).await;
        let before = d["data"]["booksConnection"]["pageInfo"]["startCursor"].clone();
        same_answer(&s, page, json!({"l": 3, "b": before})).await;
        for q in [
            "{ booksConnection { totalCount } }",
            "{ booksConnection(first: 1) { pageInfo { endCursor } } }",
            "{ booksConnection(first: 3, status: AVAILABLE) { edges { node { ...B } } } } \
             fragment B on Book { id title }",
            "{ booksConnection(first: 0) { edges { cursor } pageInfo { startCursor hasNextPage } } }",
        ] {
            same_answer(&s, q, json!({})).await;
        }
        // A page built once (constant arguments) reads what the store
        // holds when it runs.
        let first_page = "{ booksConnection(first: 10) { edges { node { title } } totalCount } }";
        let before = same_answer(&s, first_page, json!({})).await;
        let lem = s.author("Later Author", None).await;
        s.book(json!({"title": "Added later", "status": "AVAILABLE", "author": lem}))
            .await;
        let after = same_answer(&s, first_page, json!({})).await;
        let count = |d: &Value| d["data"]["booksConnection"]["totalCount"].as_i64().unwrap();
        assert_eq!(count(&after), count(&before) + 1);
        assert!(after.to_string().contains("Added later"), "{after}");
        // `node` selected twice, and a bad cursor: async-graphql answers.
        for (q, v) in [
            (
                "{ booksConnection(first: 1) { a: edges { node { title } } b: edges { node { year } } } }",
                json!({}),
            ),
            (page, json!({"n": 1, "a": "garbage!"})),
        ] {
            let _ = s.graphql.execute(request(q, v.clone(), None)).await;
            assert!(
                s.graphql
                    .execute_planned(&request(q, v, None))
                    .await
                    .is_none(),
                "{q}"
            );
        }
    }
}

#[tokio::test]
async fn planned_answers_equal_async_graphql() {
    let s = seeded().await;
    let queries = [
        ("{ books(first: 10) { title year } }", json!({})),
        (
            "{ books(first: 10) { title year author { name } } }",
            json!({}),
        ),
        (
            "{ books { id title year isbn status tags rating published author { id name born } } }",
            json!({}),
        ),
        (
            "{ authors(orderBy: name_ASC) { name born books(first: 5) { title status reviews(first: 5) { stars postedOn body } } } }",
            json!({}),
        ),
        (
            "query Q($n: Int, $s: BookStatus) { books(first: $n, status: $s) { title } }",
            json!({"n": 3, "s": "AVAILABLE"}),
        ),
        (
            "query($w: BookWhere) { books(where: $w, orderBy: [year_DESC, title_ASC]) { title year } }",
            json!({"w": {"OR": [{"year_gt": 1965}, {"year_is_null": true}]}}),
        ),
        (
            "query($y: Int = 1970) { authors { name books(year_gt: $y, first: 1) { title } } }",
            json!({}),
        ),
        (
            "{ __typename a: books(first: 2, offset: 1) { __typename ...B ... on Book { t: title } } \
               b: authors(limit: 1) { ... { name } } } \
             fragment B on Book { id author { __typename name } }",
            json!({}),
        ),
        (
            "{ bookByIsbn(isbn: \"isbn-2\") { title author { name } } }",
            json!({}),
        ),
        ("{ bookByIsbn(isbn: \"none\") { title } }", json!({})),
    ];
    for (q, v) in queries {
        same_answer(&s, q, v).await;
    }
    // Named operations of one document each get their own plan.
    let doc = "query A { authors { name } } query B { books(first: 1) { title } }";
    for name in ["A", "B"] {
        let slow = s
            .graphql
            .execute(request(doc, json!({}), None).operation_name(name))
            .await;
        let planned = s
            .graphql
            .execute_planned(&request(doc, json!({}), None).operation_name(name))
            .await
            .expect("planned");
        let planned: Value = serde_json::from_slice(&planned).unwrap();
        assert_eq!(planned, serde_json::to_value(&slow.response).unwrap());
    }
    // The lookup by id, with the id of a stored book.
    let d = same_answer(&s, "{ books(first: 1) { id } }", json!({})).await;
    let id = d["data"]["books"][0]["id"].as_str().unwrap().to_string();
    let d = same_answer(
        &s,
        "query($id: ID!) { book(id: $id) { title reviews { reviewer } } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(d["data"]["book"]["reviews"][0]["reviewer"], "r");
}

fn principal(scopes: &[&str]) -> Principal {
    crate::user("u", scopes)
}

#[tokio::test]
async fn the_planned_executor_declines_what_it_does_not_run() {
    let s = seeded().await;
    let declined = |q: &'static str, v: Value, p: Option<Principal>| {
        let s = &s;
        async move {
            // Executed first, so the variant is validated and a plan would be used.
            let _ = s.graphql.execute(request(q, v.clone(), p.clone())).await;
            s.graphql.execute_planned(&request(q, v, p)).await
        }
    };
    // Not validated yet: the first request of a variant.
    assert!(
        s.graphql
            .execute_planned(&request("{ authors { born } }", json!({}), None))
            .await
            .is_none()
    );
    let cases = [
        ("{ books(first: 100000) { title } }", json!({})),
        (
            "query($i: Boolean!) { books { title @include(if: $i) } }",
            json!({"i": true}),
        ),
        ("{ __schema { queryType { name } } }", json!({})),
        ("mutation { createAuthor(name: \"x\") { id } }", json!({})),
        (
            "{ book(id: \"missing\") { title } books { title } }",
            json!({}),
        ),
        // Several operations and no name: an error async-graphql reports.
        (
            "query A { authors { name } } query B { authors { name } }",
            json!({}),
        ),
        // The same key twice (fields merged): left to async-graphql.
        ("{ books { title title } }", json!({})),
    ];
    for (q, v) in cases {
        // Twice: a plan remembers what it refused, and refuses it again.
        assert_eq!(
            declined(q, v.clone(), None).await.is_some(),
            declined(q, v.clone(), None).await.is_some(),
            "{q}"
        );
        let planned = declined(q, v, None).await;
        // `book(id: "missing")` is null, a plain success: planned.
        if q.starts_with("{ book(") {
            assert!(planned.is_some(), "{q}");
        } else {
            assert!(planned.is_none(), "{q}");
        }
    }
    // A caller without the scope gets async-graphql's error, not a plan.
    let q = "{ books { title } }";
    assert!(declined(q, json!({}), Some(principal(&[]))).await.is_none());
    assert!(
        declined(q, json!({}), Some(principal(&["read"])))
            .await
            .is_some()
    );
    // An anonymous caller may read, as with async-graphql.
    assert!(
        declined(q, json!({}), Some(Principal::anonymous()))
            .await
            .is_some()
    );
    // The statement is built once per plan, the scope checked on every run.
    assert!(declined(q, json!({}), Some(principal(&[]))).await.is_none());
}

#[tokio::test]
async fn a_plan_built_once_reads_what_the_store_holds_when_it_runs() {
    let s = seeded().await;
    let queries = [
        "{ books(first: 10, orderBy: title_ASC) { title author { name } } }",
        "{ bookByIsbn(isbn: \"isbn-9\") { title author { name } } }",
        "{ authors(orderBy: name_ASC) { name books { title } } }",
    ];
    let before: Vec<Value> =
        futures::future::join_all(queries.iter().map(|q| same_answer(&s, q, json!({})))).await;
    assert_eq!(before[1]["data"]["bookByIsbn"], Value::Null);
    let author = s.author("Aaa First", None).await;
    s.book(json!({"title": "0 AAA", "status": "AVAILABLE", "author": author, "isbn": "isbn-9"}))
        .await;
    let after: Vec<Value> =
        futures::future::join_all(queries.iter().map(|q| same_answer(&s, q, json!({})))).await;
    assert_eq!(
        after[0]["data"]["books"][0],
        json!({"title": "0 AAA", "author": {"name": "Aaa First"}})
    );
    assert_eq!(
        after[1]["data"]["bookByIsbn"]["author"]["name"],
        "Aaa First"
    );
    assert_eq!(
        after[2]["data"]["authors"][0]["books"],
        json!([{"title": "0 AAA"}])
    );
}

/// An executor without authentication over a new store in `db` with
/// schema `sdl`.
async fn own_schema(sdl: &str, db: &TestDb) -> (Graphql, Store) {
    let model = gatehouse_testkit::model(sdl);
    let store = db.open(&model).await;
    let opts = GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    };
    let graphql = Graphql::new(model, store.clone(), &opts).unwrap();
    (graphql, store)
}

/// To-one relations read by the root statement: null references, the same
/// target for several rows, and relations below them.
#[tokio::test]
async fn joined_to_one_relations_answer_as_async_graphql_does() {
    let sdl = "type Person { id: ID! name: String! mentor: Person pupils(first: Int): [Person!]! } \
               enum PersonOrderBy { name_ASC name_DESC } \
               type Query { people(orderBy: [PersonOrderBy!]): [Person!]! person(id: ID!): Person }";
    let db = TestDb::sqlite();
    let (graphql, store) = own_schema(sdl, &db).await;
    let add = |name: &str, mentor: Option<&str>| {
        let mut row = gatehouse_store::Row::new();
        row.insert("name".into(), json!(name));
        row.insert("mentor".into(), json!(mentor));
        let store = store.clone();
        async move {
            store
                .entity("Person")
                .unwrap()
                .insert(&gatehouse_store::AccessContext::system(), row)
                .await
                .unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let ada = add("Ada", None).await;
    let bob = add("Bob", Some(&ada)).await;
    add("Cy", Some(&ada)).await;
    add("Dee", Some(&bob)).await;
    for q in [
        "{ people(orderBy: name_ASC) { name mentor { name } } }",
        "{ people(orderBy: name_ASC) { name mentor { name mentor { name } pupils(first: 5) { name mentor { name } } } } }",
        "{ people(orderBy: name_DESC) { a: mentor { name } name b: mentor { id } } }",
    ] {
        let d = same_answer_of(&graphql, q, json!({})).await;
        assert_eq!(d["data"]["people"].as_array().unwrap().len(), 4, "{q}");
    }
    let d = same_answer_of(
        &graphql,
        "query($id: ID!) { person(id: $id) { name mentor { name pupils { name } } } }",
        json!({"id": bob}),
    )
    .await;
    assert_eq!(
        d["data"]["person"]["mentor"]["pupils"],
        json!([{"name": "Bob"}, {"name": "Cy"}])
    );
    let d = same_answer_of(
        &graphql,
        "query($id: ID!) { person(id: $id) { name mentor { name } } }",
        json!({"id": ada}),
    )
    .await;
    assert_eq!(d["data"]["person"]["mentor"], Value::Null);
}

/// Runs a variant async-graphql has not validated through the planned
/// executor first (it must take it), then through async-graphql: the same
/// bytes, no error.
async fn planned_first(s: &Server, query: &str, variables: Value) {
    let planned = s
        .graphql
        .execute_planned(&request(query, variables.clone(), None))
        .await
        .unwrap_or_else(|| panic!("{variables}: not planned"));
    let slow = s
        .graphql
        .execute(request(query, variables.clone(), None))
        .await;
    assert!(
        slow.response.errors.is_empty(),
        "{variables}: {:?}",
        slow.response.errors
    );
    assert_eq!(
        String::from_utf8_lossy(&planned),
        serde_json::to_string(&slow.response).unwrap(),
        "{variables}"
    );
}

/// The planned executor declines a variant async-graphql has not
/// validated, and async-graphql answers it, with an error or without.
async fn declined_first(s: &Server, query: &str, variables: Value, is_error: bool) {
    assert!(
        s.graphql
            .execute_planned(&request(query, variables.clone(), None))
            .await
            .is_none(),
        "{variables}: planned"
    );
    let slow = s
        .graphql
        .execute(request(query, variables.clone(), None))
        .await;
    assert_eq!(
        !slow.response.errors.is_empty(),
        is_error,
        "{variables}: {:?}",
        slow.response.errors
    );
}

#[tokio::test]
async fn new_variables_of_a_validated_operation_run_planned_when_certainly_valid() {
    let s = seeded().await;
    let q = "query($id: ID!, $n: Int, $s: BookStatus, $o: [BookOrderBy!], $b: Date) { \
               book(id: $id) { title } \
               books(first: $n, status: $s, orderBy: $o) { title year } \
               authors(born_lt: $b) { name } }";
    let d = same_answer(&s, "{ books { id } }", json!({})).await;
    let ids: Vec<String> = d["data"]["books"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    // Never validated: async-graphql runs it, once.
    let first =
        json!({"id": ids[0], "n": 2, "s": "AVAILABLE", "o": ["title_ASC"], "b": "1950-01-01"});
    assert!(
        s.graphql
            .execute_planned(&request(q, first.clone(), None))
            .await
            .is_none()
    );
    same_answer(&s, q, first).await;
    // Other values of the same operation: planned at once, the same answer.
    let fresh = [
        json!({"id": ids[1], "n": 3, "s": "ON_LOAN", "o": ["year_DESC"], "b": "2000-02-29"}),
        json!({"id": ids[2], "s": "LOST", "o": "title_DESC"}),
        json!({"id": "no-such-book", "n": 10, "o": ["year_ASC", "title_ASC"], "b": "1930-01-01"}),
        json!({"id": ids[3], "n": 0}),
        json!({"id": ids[1], "n": null, "s": null, "o": null, "b": null}),
    ];
    for v in fresh {
        planned_first(&s, q, v).await;
    }
    // The statement of a shape is built once and run with each request's
    // ids and strings; where a string is bound inside a pattern
    // (`_contains`), it is built per request. Same answers either way.
    let authors = same_answer(&s, "{ authors { id } }", json!({})).await;
    let by_author = "query($a: ID, $n: Int) { books(author: $a, first: $n) { title } }";
    let title = "query($t: String) { books(title_contains: $t) { title } }";
    let first_id = authors["data"]["authors"][0]["id"].clone();
    same_answer(&s, by_author, json!({"a": first_id, "n": 5})).await;
    same_answer(&s, title, json!({"t": "the"})).await;
    for a in authors["data"]["authors"].as_array().unwrap() {
        planned_first(&s, by_author, json!({"a": a["id"], "n": 5})).await;
        planned_first(&s, by_author, json!({"a": a["id"], "n": 1})).await;
    }
    for t in ["o", "Solaris", "%", "_", "\\"] {
        planned_first(&s, title, json!({"t": t})).await;
    }
    // A NUL in an id is refused by the store, template or not.
    declined_first(&s, q, json!({"id": "a\u{0}b"}), true).await;
    declined_first(&s, by_author, json!({"a": "a\u{0}b"}), true).await;
    // Values validation refuses, or that are not certainly fine: declined,
    // so async-graphql answers them (with an error where one is due).
    let refused = [
        (json!({"id": ids[0], "n": 2.5}), true),
        (json!({"id": ids[0], "n": "3"}), true),
        (json!({"id": ids[0], "n": 1_u64 << 40}), true),
        (json!({"id": ids[0], "s": "NOPE"}), true),
        (json!({"id": ids[0], "o": ["nope_ASC"]}), true),
        (json!({"id": ids[0], "b": "2024-13-01"}), true),
        (json!({"id": ids[0], "s": {"x": 1}}), true),
        (json!({"id": null}), true),
        (json!({}), true),
        (json!({"id": 7}), true),
    ];
    for (v, is_error) in refused {
        declined_first(&s, q, v, is_error).await;
    }
    // A nullable variable with a default may stand for a non-null
    // argument, but then a null is an error: not planned.
    let q = "query($id: ID = \"none\") { book(id: $id) { title } }";
    same_answer(&s, q, json!({"id": ids[0]})).await;
    planned_first(&s, q, json!({"id": ids[1]})).await;
    declined_first(&s, q, json!({"id": null}), true).await;
    // Another operation of the same document has not been validated.
    let doc = "query A($n: Int) { books(first: $n) { title } } query B($n: Int) { authors(limit: $n) { name } }";
    let _ = s
        .graphql
        .execute(request(doc, json!({"n": 1}), None).operation_name("A"))
        .await;
    let planned = |name: &'static str| {
        let s = &s;
        async move {
            s.graphql
                .execute_planned(&request(doc, json!({"n": 2}), None).operation_name(name))
                .await
        }
    };
    assert!(planned("A").await.is_some());
    assert!(planned("B").await.is_none());
}

#[tokio::test]
async fn new_input_object_variables_run_planned_when_certainly_valid() {
    let s = seeded().await;
    let q =
        "query($w: BookWhere, $o: [BookOrderBy!]) { books(where: $w, orderBy: $o) { title year } }";
    same_answer(&s, q, json!({"w": {"year_gt": 1900}, "o": ["title_ASC"]})).await;
    let fresh = [
        json!({"w": {"OR": [{"year_gt": 1965}, {"year_is_null": true}]}}),
        json!({"w": {"status_in": ["LOST", "ON_LOAN"]}, "o": "year_DESC"}),
        json!({"w": {"AND": [{"title_contains": "s"}], "NOT": {"year_lt": 1962}}}),
        json!({"w": {"published_gte": "1968-01-01", "status_in": "AVAILABLE"}}),
        json!({"w": {}}),
        json!({"w": {"OR": {"year_gt": 1970}, "AND": {"status": "ON_LOAN"}}}),
        json!({"w": {"year": null, "OR": null}}),
        json!({"w": null, "o": null}),
    ];
    for v in fresh {
        planned_first(&s, q, v).await;
    }
    // A single value stands for a list of one (GraphQL spec §3.11), in a
    // literal as in a variable, and filters as the list would.
    for (q, v) in [
        (
            q,
            json!({"w": {"status_in": "LOST", "OR": {"year_lt": 1970}}}),
        ),
        (
            "{ books(where: {status_in: LOST, OR: {year_lt: 1970}}) { title year } }",
            json!({}),
        ),
    ] {
        let d = same_answer(&s, q, v).await;
        assert_eq!(
            d["data"]["books"],
            json!([{"title": "Solaris", "year": 1961}])
        );
    }
    let refused = [
        (json!({"w": {"nope": 1}}), true),
        (json!({"w": {"year_gt": "x"}}), true),
        (json!({"w": {"status_in": ["NOPE"]}}), true),
        (json!({"w": {"published_gte": "1968-02-30"}}), true),
        (json!({"w": {"OR": [{"year_gt": 2.5}]}}), true),
        (json!({"w": [1]}), true),
        (json!({"w": {"OR": [1]}}), true),
        (json!({"w": {"status_in": [null]}}), true),
    ];
    for (v, is_error) in refused {
        declined_first(&s, q, v, is_error).await;
    }
}

#[tokio::test]
async fn statements_reused_across_ids_answer_alike_on_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = seed(start_in(db, GraphqlOptions::default(), 1 << 20).await).await;
    let d = same_answer(&s, "{ books { id author { id } } }", json!({})).await;
    let books = d["data"]["books"].as_array().unwrap().clone();
    let lookup = "query($id: ID!) { book(id: $id) { title year author { name } } }";
    let by_author = "query($a: ID) { books(author: $a) { title } }";
    let title = "query($t: String) { books(title_contains: $t) { title } }";
    same_answer(&s, lookup, json!({"id": books[0]["id"]})).await;
    same_answer(&s, by_author, json!({"a": books[0]["author"]["id"]})).await;
    same_answer(&s, title, json!({"t": "the"})).await;
    // Twice round: the third request of a shape onwards runs its template.
    for _ in 0..2 {
        for b in &books {
            planned_first(&s, lookup, json!({"id": b["id"]})).await;
            planned_first(&s, by_author, json!({"a": b["author"]["id"]})).await;
        }
        planned_first(&s, lookup, json!({"id": "no-such-book"})).await;
        for t in ["o", "%", "_", "\\"] {
            planned_first(&s, title, json!({"t": t})).await;
        }
    }
    declined_first(&s, lookup, json!({"id": "a\u{0}b"}), true).await;
    s.store.close().await;
}

/// Strings with every character JSON escapes, booleans, enums, nulls,
/// aliases, `__typename` and joined rows answer byte for byte as
/// async-graphql does; stored values async-graphql would refuse to show
/// (written behind the store's back) are declined.
#[tokio::test]
async fn stored_values_answer_as_async_graphql_does_or_are_declined() {
    let sdl = "type Owner { id: ID! name: String! active: Boolean } \
               enum Kind { A B } \
               type Item { id: ID! name: String! note: String done: Boolean! flag: Boolean \
                           kind: Kind! size: Int owner: Owner! helper: Owner } \
               enum ItemOrderBy { name_ASC name_DESC } \
               type Query { items(orderBy: [ItemOrderBy!]): [Item!]! item(id: ID!): Item }";
    let db = TestDb::sqlite();
    let file = db.sqlite_path().unwrap();
    let (graphql, store) = own_schema(sdl, &db).await;
    let insert = |entity: &'static str, row: Value| {
        let store = store.clone();
        async move {
            let row = row.as_object().unwrap().clone();
            store
                .entity(entity)
                .unwrap()
                .insert(&gatehouse_store::AccessContext::system(), row)
                .await
                .unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    // Every control character but NUL, which the store refuses.
    let controls: String = (1u8..0x20).map(char::from).collect();
    let ann = insert(
        "Owner",
        json!({"name": format!("Ann {controls}"), "active": true}),
    )
    .await;
    let bo = insert(
        "Owner",
        json!({"name": "Bo \"\\/\u{7f}é😀", "active": null}),
    )
    .await;
    insert(
        "Item",
        json!({"name": "a\u{2028}\u{2029}", "note": "x'y", "done": true, "flag": false,
               "kind": "A", "size": -7, "owner": ann, "helper": bo}),
    )
    .await;
    let b = insert(
        "Item",
        json!({"name": "b", "note": null, "done": false, "flag": null, "kind": "B",
               "size": null, "owner": bo, "helper": null}),
    )
    .await;
    for q in [
        "{ items(orderBy: name_ASC) { id name note done flag kind size } }",
        "{ items(orderBy: name_DESC) { __typename n: name owner { __typename name active } helper { name active } } }",
        "{ items { name o: owner { id } h: helper { id } } }",
    ] {
        let d = same_answer_of(&graphql, q, json!({})).await;
        assert_eq!(d["data"]["items"].as_array().unwrap().len(), 2, "{q}");
    }
    let lookup = "query($id: ID!) { item(id: $id) { name flag helper { name } owner { name } } }";
    same_answer_of(&graphql, lookup, json!({"id": b})).await;
    same_answer_of(&graphql, lookup, json!({"id": "none"})).await;

    // Stored values that async-graphql refuses to show, written behind the
    // store's back: the planned executor must decline, not print them.
    let db = rusqlite::Connection::open(&file).unwrap();
    let queries = [
        "{ items(orderBy: name_ASC) { name kind } }",
        "{ items(orderBy: name_ASC) { name size } }",
        "{ items(orderBy: name_ASC) { name owner { name } } }",
    ];
    for (tamper, query) in [
        ("UPDATE item SET kind = 'C' WHERE name = 'b'", queries[0]),
        ("UPDATE item SET size = 'big' WHERE name = 'b'", queries[1]),
        ("UPDATE item SET size = 1.5 WHERE name = 'b'", queries[1]),
        (
            "PRAGMA foreign_keys = OFF; UPDATE item SET owner_id = 'gone' WHERE name = 'b'",
            queries[2],
        ),
    ] {
        let slow = graphql.execute(request(query, json!({}), None)).await;
        assert!(
            slow.response.errors.is_empty(),
            "{query}: {:?}",
            slow.response.errors
        );
        assert!(
            graphql
                .execute_planned(&request(query, json!({}), None))
                .await
                .is_some()
        );
        db.execute_batch(tamper).unwrap();
        assert!(
            graphql
                .execute_planned(&request(query, json!({}), None))
                .await
                .is_none(),
            "{tamper}: planned"
        );
        let slow = graphql.execute(request(query, json!({}), None)).await;
        assert!(!slow.response.errors.is_empty(), "{tamper}: no error");
        db.execute_batch("DELETE FROM item WHERE name = 'b'")
            .unwrap();
        insert(
            "Item",
            json!({"name": "b", "done": false, "kind": "B", "owner": bo}),
        )
        .await;
    }
}

/// A schema whose authors need a scope of their own, for the field-error tests.
const SECRET_AUTHORS: &str = "
type Author @auth(read: \"secret\") { id: ID! name: String! }
type Book { id: ID! title: String! author: Author! }
type Query { books: [Book!] }
type Subscription { bookCreated: Book }
";

/// GraphQL spec §6.4.4: a forbidden non-null relation (`Book.author:
/// Author!`) makes its nearest nullable parent null: here the list
/// `books` (its items are non-null), with the FORBIDDEN error at the
/// relation's path and no internal note. Before, the `author` key was left
/// out of each book and the books answered anyway.
#[tokio::test]
async fn a_forbidden_non_null_relation_nulls_its_nearest_nullable_parent() {
    let db = TestDb::sqlite();
    let (graphql, store) = own_schema(SECRET_AUTHORS, &db).await;
    let mut author = gatehouse_store::Row::new();
    author.insert("name".into(), json!("A"));
    let id = store
        .entity("Author")
        .unwrap()
        .insert(&gatehouse_store::AccessContext::system(), author)
        .await
        .unwrap()["id"]
        .clone();
    let mut book = gatehouse_store::Row::new();
    book.insert("title".into(), json!("T"));
    book.insert("author".into(), id);
    store
        .entity("Book")
        .unwrap()
        .insert(&gatehouse_store::AccessContext::system(), book)
        .await
        .unwrap();
    let q = "{ books { title author { name } } }";
    let r = graphql
        .execute(request(q, json!({}), Some(principal(&["read"]))))
        .await;
    let v = serde_json::to_value(&r.response).unwrap();
    assert_eq!(v["data"], json!({"books": null}), "{v}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v}");
    assert_eq!(errors[0]["extensions"]["code"], "FORBIDDEN");
    assert_eq!(errors[0]["path"], json!(["books", 0, "author"]));
    // With the scope, the same query answers.
    let r = graphql
        .execute(request(q, json!({}), Some(principal(&["read", "secret"]))))
        .await;
    let v = serde_json::to_value(&r.response).unwrap();
    assert_eq!(v["data"]["books"][0]["author"]["name"], "A", "{v}");
}

/// A subscription event whose non-null relation is forbidden carries the
/// FORBIDDEN error (before, async-graphql dropped it and the client got
/// "internal: non-null types require a return value").
#[tokio::test]
async fn a_subscription_event_reports_a_forbidden_relation() {
    use futures::StreamExt;
    let db = TestDb::sqlite();
    let (graphql, store) = own_schema(SECRET_AUTHORS, &db).await;
    let mut events = Box::pin(graphql.execute_stream(request(
        "subscription { bookCreated { title author { name } } }",
        json!({}),
        Some(principal(&["read"])),
    )));
    let mut author = gatehouse_store::Row::new();
    author.insert("name".into(), json!("A"));
    let id = store
        .entity("Author")
        .unwrap()
        .insert(&gatehouse_store::AccessContext::system(), author)
        .await
        .unwrap()["id"]
        .clone();
    let writer = async {
        // The event is written once the subscription listens.
        gatehouse_testkit::listening(&store, 1).await;
        let mut book = gatehouse_store::Row::new();
        book.insert("title".into(), json!("T"));
        book.insert("author".into(), id);
        store
            .entity("Book")
            .unwrap()
            .insert(&gatehouse_store::AccessContext::system(), book)
            .await
            .unwrap();
    };
    let (event, ()) = tokio::join!(
        tokio::time::timeout(std::time::Duration::from_secs(20), events.next()),
        writer
    );
    let event = event.expect("an event in time").expect("an event");
    let v = serde_json::to_value(&event.response).unwrap();
    assert_eq!(v["data"], json!({"bookCreated": null}), "{v}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v}");
    assert_eq!(errors[0]["extensions"]["code"], "FORBIDDEN", "{v}");
    assert_eq!(errors[0]["path"], json!(["bookCreated", "author"]));
    assert!(!v.to_string().contains("internal"), "{v}");
}

fn caller(subject: &str, scopes: &[&str], org: Option<&str>) -> Principal {
    let mut p = crate::user(subject, scopes);
    if let Some(org) = org {
        p.claims.insert("org".into(), json!(org));
    }
    p
}

/// [`same_answer_of`] for a caller: async-graphql first, then the plan.
async fn same_answer_for(graphql: &Graphql, query: &str, variables: Value, p: &Principal) -> Value {
    let slow = graphql
        .execute(request(query, variables.clone(), Some(p.clone())))
        .await;
    assert!(
        slow.response.errors.is_empty(),
        "{query}: {:?}",
        slow.response.errors
    );
    let slow_bytes = serde_json::to_vec(&slow.response).unwrap();
    let planned = graphql
        .execute_planned(&request(query, variables, Some(p.clone())))
        .await
        .unwrap_or_else(|| panic!("{query}: the planned executor declined it"));
    assert_eq!(
        String::from_utf8_lossy(&planned),
        String::from_utf8_lossy(&slow_bytes),
        "{query} as {}",
        p.subject
    );
    serde_json::to_value(&slow.response).unwrap()
}

/// Under row policies both executors answer each caller the same rows:
/// owner-only and published rows, a rule through a to-one path, a tenant
/// claim, and a statement cached for one caller never serving another.
#[tokio::test]
async fn planned_answers_equal_async_graphql_under_policies() {
    let sdl = "type Memo @policy(read: {OR: [{published: true}, {owner: \"$sub\"}]}, write: {owner: \"$sub\"}, bypass: \"admin\") \
                 { id: ID! owner: String title: String! published: Boolean! remarks(first: Int): [Remark!]! } \
               type Remark @policy(read: {memo: {OR: [{published: true}, {owner: \"$sub\"}]}}) \
                 { id: ID! memo: Memo! body: String! } \
               type Invoice @policy(all: {org: \"$org\"}) { id: ID! org: String! total: Float! } \
               enum MemoOrderBy { title_ASC } \
               type Query { memos(first: Int, orderBy: [MemoOrderBy!]): [Memo!]! memo(id: ID!): Memo \
                            remarks: [Remark!]! invoices: [Invoice!]! }";
    let db = TestDb::sqlite();
    let (graphql, store) = own_schema(sdl, &db).await;
    let sys = gatehouse_store::AccessContext::system();
    let insert = |entity: &'static str, row: Value| {
        let store = store.clone();
        let sys = sys.clone();
        async move {
            let row = row.as_object().unwrap().clone();
            store
                .entity(entity)
                .unwrap()
                .insert(&sys, row)
                .await
                .unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let mut memos = Vec::new();
    for (title, owner, published) in [
        ("a-open", "alice", true),
        ("a-private", "alice", false),
        ("b-private", "bob", false),
        ("b-open", "bob", true),
    ] {
        let m = insert(
            "Memo",
            json!({"title": title, "owner": owner, "published": published}),
        )
        .await;
        insert("Remark", json!({"memo": m, "body": format!("on {title}")})).await;
        memos.push(m);
    }
    insert("Invoice", json!({"org": "acme", "total": 1.5})).await;
    insert("Invoice", json!({"org": "globex", "total": 2.5})).await;

    let alice = caller("alice", &["read"], Some("acme"));
    let bob = caller("bob", &["read"], Some("globex"));
    let admin = caller("root", &["read", "admin"], None);
    let list = "{ memos(orderBy: title_ASC) { title owner remarks { body } } }";
    let joined = "{ remarks { body memo { title } } }";
    let titles = |v: &Value| -> Vec<String> {
        v["data"]["memos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["title"].as_str().unwrap().to_string())
            .collect()
    };
    // Each caller twice: the second run uses the statement kept for it.
    for _ in 0..2 {
        let a = same_answer_for(&graphql, list, json!({}), &alice).await;
        assert_eq!(titles(&a), ["a-open", "a-private", "b-open"]);
        let b = same_answer_for(&graphql, list, json!({}), &bob).await;
        assert_eq!(titles(&b), ["a-open", "b-open", "b-private"]);
        let r = same_answer_for(&graphql, list, json!({}), &admin).await;
        assert_eq!(titles(&r).len(), 4);
        let r = same_answer_for(&graphql, joined, json!({}), &bob).await;
        assert_eq!(r["data"]["remarks"].as_array().unwrap().len(), 3, "{r}");
        let r = same_answer_for(&graphql, "{ invoices { org total } }", json!({}), &alice).await;
        assert_eq!(
            r["data"]["invoices"],
            json!([{"org": "acme", "total": 1.5}])
        );
        // No `org` claim: no invoice at all.
        let r = same_answer_for(&graphql, "{ invoices { org } }", json!({}), &admin).await;
        assert_eq!(r["data"]["invoices"], json!([]));
        // A lookup of a row the caller may not read is null; paging is
        // never short.
        let lookup = "query($id: ID!) { memo(id: $id) { title } }";
        let r = same_answer_for(&graphql, lookup, json!({"id": memos[1]}), &bob).await;
        assert_eq!(r["data"]["memo"], Value::Null);
        let r = same_answer_for(&graphql, lookup, json!({"id": memos[1]}), &alice).await;
        assert_eq!(r["data"]["memo"]["title"], "a-private");
        let r = same_answer_for(
            &graphql,
            "{ memos(first: 2, orderBy: title_ASC) { title } }",
            json!({}),
            &bob,
        )
        .await;
        assert_eq!(titles(&r), ["a-open", "b-open"]);
    }
}

/// GraphQL spec §6.4.1: a non-null variable sent as null, or left out
/// without a default, refuses the request before anything runs, whatever
/// the argument it stands for (here a nullable `first`), and the plan
/// does not run it. Before, async-graphql checked the value only against
/// the argument: `$n: Int!` sent as null read every book, and a variable
/// left out beside `__typename` failed the field with an internal error.
#[tokio::test]
async fn a_non_null_variable_null_or_left_out_is_refused_before_execution() {
    let s = seeded().await;
    let q = "query($n: Int!) { __typename books(first: $n) { title } }";
    let with_default = "query($n: Int! = 1) { __typename books(first: $n) { title } }";
    for (q, v, message) in [
        (
            q,
            json!({"n": null}),
            "variable `$n` of non-null type `Int!` cannot be null",
        ),
        (
            q,
            json!({}),
            "variable `$n` of non-null type `Int!` has no default and was not sent",
        ),
        (
            with_default,
            json!({"n": null}),
            "variable `$n` of non-null type `Int!` cannot be null",
        ),
    ] {
        // Twice: a refusal is never cached as validated.
        for _ in 0..2 {
            let r = s.graphql.execute(request(q, v.clone(), None)).await;
            let r = serde_json::to_value(&r.response).unwrap();
            assert_eq!(r["data"], Value::Null, "{q} {v}: {r}");
            assert_eq!(r["errors"].as_array().unwrap().len(), 1, "{r}");
            assert_eq!(r["errors"][0]["message"], message, "{r}");
            assert_eq!(
                r["errors"][0]["extensions"]["code"],
                "GRAPHQL_VALIDATION_FAILED"
            );
            assert!(
                s.graphql
                    .execute_planned(&request(q, v.clone(), None))
                    .await
                    .is_none(),
                "{q} {v}"
            );
        }
    }
    // Sent, or left to the default: both executors answer.
    let d = same_answer(&s, q, json!({"n": 2})).await;
    assert_eq!(d["data"]["books"].as_array().unwrap().len(), 2);
    let d = same_answer(&s, with_default, json!({})).await;
    assert_eq!(d["data"]["books"].as_array().unwrap().len(), 1);
}
