//! Every binding kind, filter operator, ordering, paging, relations and the
//! GraphQL error codes, through HTTP.

use serde_json::{Value, json};

use crate::{Server, start, start_with};

/// Three authors and five books with varied values.
async fn seeded() -> (Server, Vec<String>, Vec<String>) {
    let s = start().await;
    let a = vec![
        s.author("Le Guin", Some("1929-10-21")).await,
        s.author("Lem", Some("1921-09-12")).await,
        s.author("Anonymous", None).await,
    ];
    let books = [
        json!({"title": "The Dispossessed", "year": 1974, "status": "AVAILABLE", "tags": ["sf", "utopia"], "rating": 4.5, "published": "1974-05-01", "author": a[0]}),
        json!({"title": "A Wizard of Earthsea", "year": 1968, "status": "ON_LOAN", "tags": ["fantasy"], "author": a[0]}),
        json!({"title": "Solaris", "year": 1961, "status": "AVAILABLE", "tags": ["sf"], "rating": 4.0, "author": a[1]}),
        json!({"title": "The Cyberiad", "year": 1965, "status": "LOST", "author": a[1]}),
        json!({"title": "Beowulf", "status": "AVAILABLE", "author": a[2], "isbn": "978-0"}),
    ];
    let mut b = Vec::new();
    for book in books {
        b.push(s.book(book).await);
    }
    (s, a, b)
}

fn titles(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| b["title"].as_str().unwrap().to_string())
        .collect()
}

async fn where_titles(s: &Server, filter: Value) -> Vec<String> {
    let d = s
        .data(
            "query($w: BookWhere) { books(where: $w, orderBy: [title_ASC]) { title } }",
            json!({"w": filter}),
        )
        .await;
    titles(&d["books"])
}

#[tokio::test]
async fn create_lookup_update_delete() {
    let (s, a, b) = seeded().await;
    let d = s
        .data(
            "query($id: ID!) { book(id: $id) { id title year tags rating published status author { id name born } } }",
            json!({"id": b[0]}),
        )
        .await;
    assert_eq!(
        d["book"],
        json!({"id": b[0], "title": "The Dispossessed", "year": 1974, "tags": ["sf", "utopia"], "rating": 4.5,
               "published": "1974-05-01", "status": "AVAILABLE", "author": {"id": a[0], "name": "Le Guin", "born": "1929-10-21"}})
    );
    // Lookup by a unique field; a miss is null.
    let d = s
        .data(
            r#"{ bookByIsbn(isbn: "978-0") { title } missing: book(id: "nope") { id } }"#,
            json!({}),
        )
        .await;
    assert_eq!(
        d,
        json!({"bookByIsbn": {"title": "Beowulf"}, "missing": null})
    );

    // Partial update: omitted untouched, explicit null clears.
    let d = s
        .data(
            "mutation($id: ID!) { updateBook(id: $id, patch: {year: 1975, rating: null}) { title year rating } }",
            json!({"id": b[0]}),
        )
        .await;
    assert_eq!(
        d["updateBook"],
        json!({"title": "The Dispossessed", "year": 1975, "rating": null})
    );
    // Update with fields as arguments.
    let d = s
        .data(
            "mutation($id: ID!) { updateAuthor(id: $id, born: null) { name born } }",
            json!({"id": a[0]}),
        )
        .await;
    assert_eq!(d["updateAuthor"], json!({"name": "Le Guin", "born": null}));

    // Delete returning the entity, an ID, and a Boolean.
    let d = s
        .data(
            "mutation($id: ID!) { deleteBook(id: $id) { title } }",
            json!({"id": b[4]}),
        )
        .await;
    assert_eq!(d["deleteBook"]["title"], "Beowulf");
    let d = s
        .data(
            "mutation($id: ID!) { deleteAuthor(id: $id) }",
            json!({"id": a[2]}),
        )
        .await;
    assert_eq!(d["deleteAuthor"], json!(a[2]));
    let d = s
        .data(
            r#"mutation($b: ID!) { r: addReview(book: $b, reviewer: "x", stars: 5, postedOn: "2024-01-01") { id } }"#,
            json!({"b": b[1]}),
        )
        .await;
    let rid = d["r"]["id"].as_str().unwrap().to_string();
    let d = s
        .data(
            "mutation($id: ID!) { removeReview(id: $id) }",
            json!({"id": rid}),
        )
        .await;
    assert_eq!(d["removeReview"], true);
}

#[tokio::test]
async fn client_given_ids_and_duplicates() {
    let s = start().await;
    let a = s.author("A", None).await;
    let input = json!({"id": "book-1", "title": "T", "status": "AVAILABLE", "author": a});
    assert_eq!(s.book(input.clone()).await, "book-1");
    let code = s
        .error_code(
            "mutation($i: BookInput!) { createBook(input: $i) { id } }",
            json!({"i": input}),
        )
        .await;
    assert_eq!(code, "CONFLICT");
}

#[tokio::test]
async fn every_filter_operator() {
    let (s, a, _) = seeded().await;
    let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        where_titles(&s, json!({"title": "Solaris"})).await,
        t(&["Solaris"])
    );
    assert_eq!(
        where_titles(&s, json!({"year": 1965})).await,
        t(&["The Cyberiad"])
    );
    assert_eq!(
        where_titles(&s, json!({"status_not": "AVAILABLE"})).await,
        t(&["A Wizard of Earthsea", "The Cyberiad"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_in": [1961, 1968]})).await,
        t(&["A Wizard of Earthsea", "Solaris"])
    );
    assert_eq!(
        where_titles(&s, json!({"status_in": ["LOST", "ON_LOAN"]})).await,
        t(&["A Wizard of Earthsea", "The Cyberiad"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_lt": 1965})).await,
        t(&["Solaris"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_lte": 1965})).await,
        t(&["Solaris", "The Cyberiad"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_gt": 1968})).await,
        t(&["The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_gte": 1968})).await,
        t(&["A Wizard of Earthsea", "The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"title_contains": "is"})).await,
        t(&["Solaris", "The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"title_starts_with": "The"})).await,
        t(&["The Cyberiad", "The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_is_null": true})).await,
        t(&["Beowulf"])
    );
    assert_eq!(
        where_titles(&s, json!({"year_is_null": false})).await.len(),
        4
    );
    assert_eq!(
        where_titles(&s, json!({"tags_contains": "sf"})).await,
        t(&["Solaris", "The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"author": a[1]})).await,
        t(&["Solaris", "The Cyberiad"])
    );
    assert_eq!(
        where_titles(&s, json!({"published_gte": "1974-01-01"})).await,
        t(&["The Dispossessed"])
    );
    // AND / OR / NOT.
    assert_eq!(
        where_titles(
            &s,
            json!({"OR": [{"year_lt": 1962}, {"title_contains": "Wizard"}]})
        )
        .await,
        t(&["A Wizard of Earthsea", "Solaris"])
    );
    assert_eq!(
        where_titles(
            &s,
            json!({"AND": [{"status": "AVAILABLE"}, {"year_gt": 1960}]})
        )
        .await,
        t(&["Solaris", "The Dispossessed"])
    );
    assert_eq!(
        where_titles(&s, json!({"NOT": {"status": "AVAILABLE"}})).await,
        t(&["A Wizard of Earthsea", "The Cyberiad"])
    );
    // Root-level filter arguments, combined with where.
    let d = s
        .data(
            r#"{ books(status: AVAILABLE, title_contains: "o", orderBy: [title_ASC]) { title } }"#,
            json!({}),
        )
        .await;
    assert_eq!(
        titles(&d["books"]),
        t(&["Beowulf", "Solaris", "The Dispossessed"])
    );
    let d = s
        .data(
            r#"{ authors(name_starts_with: "Le", born_lt: "1925-01-01") { name } }"#,
            json!({}),
        )
        .await;
    assert_eq!(d["authors"], json!([{"name": "Lem"}]));
    // ends_with, not_in on a where-less list via the reviews query's stars_gte.
    let d = s
        .data(
            r#"{ books(where: {title_starts_with: "S"}) { title } }"#,
            json!({}),
        )
        .await;
    assert_eq!(titles(&d["books"]), t(&["Solaris"]));
}

#[tokio::test]
async fn ordering_and_paging() {
    let (s, _, _) = seeded().await;
    let d = s
        .data("{ books(orderBy: [year_DESC]) { title year } }", json!({}))
        .await;
    // The store sorts nulls as the largest value: first when descending.
    let years: Vec<Value> = d["books"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["year"].clone())
        .collect();
    assert_eq!(
        years,
        vec![
            json!(null),
            json!(1974),
            json!(1968),
            json!(1965),
            json!(1961)
        ]
    );
    // Several keys; nulls sort as the largest value.
    let d = s
        .data(
            "{ books(orderBy: [published_DESC, title_ASC]) { title } }",
            json!({}),
        )
        .await;
    assert_eq!(
        titles(&d["books"]),
        vec![
            "A Wizard of Earthsea",
            "Beowulf",
            "Solaris",
            "The Cyberiad",
            "The Dispossessed"
        ]
    );
    let d = s
        .data(
            "{ books(orderBy: [title_ASC], first: 2, offset: 1) { title } }",
            json!({}),
        )
        .await;
    assert_eq!(titles(&d["books"]), vec!["Beowulf", "Solaris"]);
    let d = s
        .data(
            "{ books(orderBy: [title_ASC], first: 2, offset: 4) { title } }",
            json!({}),
        )
        .await;
    assert_eq!(titles(&d["books"]), vec!["The Dispossessed"]);
    let d = s.data("{ books(first: 0) { title } }", json!({})).await;
    assert_eq!(d["books"], json!([]));
    let d = s
        .data(
            "{ authors(limit: 1, skip: 1, orderBy: name_ASC) { name } }",
            json!({}),
        )
        .await;
    assert_eq!(d["authors"], json!([{"name": "Le Guin"}]));
    assert_eq!(
        s.error_code("{ books(first: 501) { title } }", json!({}))
            .await,
        "PAGE_SIZE_EXCEEDED"
    );
    assert_eq!(
        s.error_code("{ books(first: -1) { title } }", json!({}))
            .await,
        "BAD_USER_INPUT"
    );
    assert_eq!(
        s.error_code("{ books(offset: -3) { title } }", json!({}))
            .await,
        "BAD_USER_INPUT"
    );
}

#[tokio::test]
async fn default_page_size_applies() {
    let s = start_with(
        gatehouse_graphql::GraphqlOptions {
            default_page_size: 2,
            max_page_size: 3,
            ..Default::default()
        },
        1 << 20,
    )
    .await;
    for n in ["a", "b", "c", "d"] {
        s.author(n, None).await;
    }
    let d = s.data("{ authors { name } }", json!({})).await;
    assert_eq!(d["authors"].as_array().unwrap().len(), 2);
    assert_eq!(
        s.error_code("{ authors(limit: 4) { name } }", json!({}))
            .await,
        "PAGE_SIZE_EXCEEDED"
    );
}

#[tokio::test]
async fn relations_both_ways_with_arguments() {
    let (s, a, _) = seeded().await;
    let d = s
        .data(
            "query($id: ID!) { author(id: $id) { name books(orderBy: [year_ASC]) { title author { name } } recent: books(year_gt: 1970) { title } page: books(first: 1, offset: 1, orderBy: [year_ASC]) { title } } }",
            json!({"id": a[0]}),
        )
        .await;
    assert_eq!(
        d["author"],
        json!({"name": "Le Guin",
               "books": [{"title": "A Wizard of Earthsea", "author": {"name": "Le Guin"}}, {"title": "The Dispossessed", "author": {"name": "Le Guin"}}],
               "recent": [{"title": "The Dispossessed"}],
               "page": [{"title": "The Dispossessed"}]})
    );
}

#[tokio::test]
async fn relations_are_batched_per_level() {
    let s = start().await;
    // 50 authors with 2 books each, each book with 2 reviews.
    for i in 0..50 {
        let a = s.author(&format!("author {i:02}"), None).await;
        for j in 0..2 {
            let b = s
                .book(json!({"title": format!("book {i}-{j}"), "status": "AVAILABLE", "author": a}))
                .await;
            for k in 0..2 {
                s.data(
                    "mutation($b: ID!, $r: String!) { addReview(book: $b, reviewer: $r, stars: 4, postedOn: \"2024-01-01\") { id } }",
                    json!({"b": b, "r": format!("r{k}")}),
                )
                .await;
            }
        }
    }
    let before = s.store.statements();
    let d = s
        .data(
            "{ authors(limit: 50) { name books(first: 2) { title author { name } reviews(first: 2) { stars book { title } } } } }",
            json!({}),
        )
        .await;
    let used = s.store.statements() - before;
    let authors = d["authors"].as_array().unwrap();
    assert_eq!(authors.len(), 50);
    assert_eq!(
        authors[0]["books"][0]["reviews"].as_array().unwrap().len(),
        2
    );
    // authors list + books + book.author + reviews + review.book = 5 levels of loads.
    assert!(used <= 6, "expected a handful of statements, used {used}");
}

#[tokio::test]
async fn error_codes() {
    let (s, a, b) = seeded().await;
    // Unique violation and deleting a referenced row.
    assert_eq!(
        s.error_code(
            r#"mutation { createAuthor(name: "Lem") { id } }"#,
            json!({})
        )
        .await,
        "CONFLICT"
    );
    assert_eq!(
        s.error_code(
            "mutation($id: ID!) { deleteAuthor(id: $id) }",
            json!({"id": a[0]})
        )
        .await,
        "CONFLICT"
    );
    // Update and delete of a missing id.
    assert_eq!(
        s.error_code(
            r#"mutation { updateAuthor(id: "nope", name: "x") { id } }"#,
            json!({})
        )
        .await,
        "NOT_FOUND"
    );
    assert_eq!(
        s.error_code(r#"mutation { deleteBook(id: "nope") { id } }"#, json!({}))
            .await,
        "NOT_FOUND"
    );
    // A required field cannot be nulled; a reference must exist; Int is 32-bit.
    assert_eq!(
        s.error_code(
            "mutation($id: ID!) { updateBook(id: $id, patch: {title: null}) { id } }",
            json!({"id": b[0]})
        )
        .await,
        "BAD_USER_INPUT"
    );
    let r = s
        .gql(
            "mutation($i: BookInput!) { createBook(input: $i) { id } }",
            json!({"i": {"title": "x", "status": "LOST", "author": "missing-author"}}),
        )
        .await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{r}"
    );
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("author"),
        "{r}"
    );
    let r = s
        .gql(
            "mutation($i: BookInput!) { createBook(input: $i) { id } }",
            json!({"i": {"title": "x", "status": "LOST", "author": a[0], "year": 3_000_000_000i64}}),
        )
        .await;
    assert!(r["errors"].is_array(), "{r}");
    // A bad Date names the rule.
    let r = s
        .gql(
            r#"mutation { createAuthor(name: "D", born: "2021-02-30") { id } }"#,
            json!({}),
        )
        .await;
    let msg = r["errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains("YYYY-MM-DD"), "{msg}");
    let r = s
        .gql(
            "mutation($b: Date) { createAuthor(name: \"D\", born: $b) { id } }",
            json!({"b": "21-1-1"}),
        )
        .await;
    assert!(
        r["errors"][0]["message"].as_str().unwrap().contains("Date"),
        "{r}"
    );
    // An ambiguous lookup.
    s.data(
        "mutation($id: ID!) { updateBook(id: $id, patch: {isbn: \"dup\"}) { id } }",
        json!({"id": b[1]}),
    )
    .await;
    // Errors keep their path and null only their field.
    let r = s
        .gql(
            r#"{ ok: book(id: "nope") { id } bad: books(first: 999) { id } }"#,
            json!({}),
        )
        .await;
    assert_eq!(r["errors"][0]["path"], json!(["bad"]), "{r}");
    assert_eq!(
        r["errors"].as_array().unwrap().len(),
        1,
        "one error per failure: {r}"
    );
}

#[tokio::test]
async fn depth_and_complexity_limits() {
    let s = start_with(
        gatehouse_graphql::GraphqlOptions {
            max_depth: 3,
            max_complexity: 20,
            ..Default::default()
        },
        1 << 20,
    )
    .await;
    assert_eq!(
        s.error_code(
            "{ books { author { books { author { name } } } } }",
            json!({})
        )
        .await,
        "QUERY_TOO_DEEP"
    );
    let wide = format!(
        "{{ {} }}",
        (0..30)
            .map(|i| format!("a{i}: authors {{ name }}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert_eq!(s.error_code(&wide, json!({})).await, "QUERY_TOO_COMPLEX");
}

#[tokio::test]
async fn parse_cache_is_used() {
    let s = start().await;
    let q = "{ authors { id } }";
    assert!(!s.graphql.parse_cache().contains(q));
    s.data(q, json!({})).await;
    assert!(s.graphql.parse_cache().contains(q));
    s.data(q, json!({})).await;
}

#[tokio::test]
async fn subscription_field_streams_changes() {
    use futures::StreamExt;
    let (s, a, _) = seeded().await;
    let req = gatehouse_graphql::async_graphql::Request::new(format!(
        "subscription {{ bookCreated(author: \"{}\") {{ title author {{ name }} }} }}",
        a[1]
    ));
    let mut stream = Box::pin(s.graphql.execute_stream(req));
    let next = tokio::spawn(async move { stream.next().await });
    gatehouse_testkit::listening(&s.store, 1).await;
    s.book(json!({"title": "Not this one", "status": "LOST", "author": a[0]}))
        .await;
    s.book(json!({"title": "His Master's Voice", "status": "LOST", "author": a[1]}))
        .await;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(5), next)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(resp.executed);
    let v = serde_json::to_value(&resp.response).unwrap();
    assert_eq!(
        v["data"]["bookCreated"],
        json!({"title": "His Master's Voice", "author": {"name": "Lem"}})
    );
}

/// Complexity counts every selected field (`__typename` and aliases too)
/// and a list's page size times its selection, for both executors:
/// D3's 2,000 `__typename` aliases on `books(first: 500)` and 1,000 aliases
/// of `books(first: 500)` (32 MB of answer) are refused before anything
/// runs, while ordinary pages pass.
#[tokio::test]
async fn complexity_counts_page_sizes_and_every_field() {
    let s = start().await;
    s.data("{ books(first: 50) { id title } }", json!({})).await;
    s.data(
        "{ books(first: 500) { id title author { name } } }",
        json!({}),
    )
    .await;
    let typenames: Vec<String> = (0..2000).map(|i| format!("a{i}: __typename")).collect();
    let wide = format!("{{ books(first: 500) {{ {} }} }}", typenames.join(" "));
    assert_eq!(s.error_code(&wide, json!({})).await, "QUERY_TOO_COMPLEX");
    let pages: Vec<String> = (0..1000)
        .map(|i| format!("b{i}: books(first: 500) {{ id }}"))
        .collect();
    let many = format!("{{ {} }}", pages.join(" "));
    let r = s.gql(&many, json!({})).await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
        "{r}"
    );
    assert!(r.get("data").is_none(), "refused before execution: {r}");
    assert!(!s.graphql.parse_cache().contains(&many));
    // A page size from a variable counts with each request's value, also
    // once the operation runs planned with other variables.
    let pages: Vec<String> = (0..300)
        .map(|i| format!("c{i}: books(first: $n) {{ id title }}"))
        .collect();
    let q = format!("query($n: Int) {{ {} }}", pages.join(" "));
    for _ in 0..3 {
        s.data(&q, json!({"n": 10})).await;
        s.data(&q, json!({"n": 11})).await;
    }
    assert_eq!(
        s.error_code(&q, json!({"n": 500})).await,
        "QUERY_TOO_COMPLEX"
    );
}

/// B4: a filter costs its terms times the rows of the table it reads,
/// within the complexity limit and before anything runs: an `OR` of 3,000
/// `_contains` terms passes on an empty table and is refused once the table
/// holds 200 rows, in lists, counts and through variables, by both
/// executors (the same document is checked again on every request, since
/// its cost follows the table), while everyday filters pass.
#[tokio::test]
async fn filters_cost_their_terms_times_the_rows_they_read() {
    let s = start_with(
        gatehouse_graphql::GraphqlOptions {
            max_complexity: 1_000,
            ..Default::default()
        },
        1 << 20,
    )
    .await;
    let terms: Vec<String> = (0..3000)
        .map(|i| format!("{{title_contains: \"x{i}\"}}"))
        .collect();
    let wide = format!(
        "{{ books(first: 10, where: {{OR: [{}]}}) {{ id }} }}",
        terms.join(", ")
    );
    let count = format!("{{ booksCount(where: {{OR: [{}]}}) }}", terms.join(", "));
    s.store.refresh_row_estimates().await.unwrap();
    for _ in 0..3 {
        s.data(&wide, json!({})).await;
    }
    s.data(&count, json!({})).await;

    let a = s.author("Lem", None).await;
    for i in 0..200 {
        s.store
            .entity("Book")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                serde_json::from_value(json!({"title": format!("Book {i}"), "status": "AVAILABLE", "author": a, "year": 1900 + i})).unwrap(),
            )
            .await
            .unwrap();
    }
    s.store.refresh_row_estimates().await.unwrap();
    for q in [&wide, &count] {
        for _ in 0..3 {
            let r = s.gql(q, json!({})).await;
            assert_eq!(
                r["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
                "{r}"
            );
            assert!(r.get("data").is_none(), "refused before execution: {r}");
            let message = r["errors"][0]["message"].as_str().unwrap();
            assert!(
                message.contains("a filter its terms times the rows"),
                "{message}"
            );
        }
    }
    let or: Vec<Value> = (0..3000)
        .map(|i| json!({"title_contains": format!("x{i}")}))
        .collect();
    let by_variable = "query($w: BookWhere) { booksCount(where: $w) }";
    assert_eq!(
        s.error_code(by_variable, json!({"w": {"OR": or}})).await,
        "QUERY_TOO_COMPLEX"
    );
    assert_eq!(
        s.data(by_variable, json!({"w": {"year_gt": 1950}})).await["booksCount"],
        149
    );
    // Everyday filters: a few terms on a list, its count and a nested count.
    let d = s
        .data(
            "{ books(first: 5, where: {OR: [{title_contains: \"1\"}, {year_lt: 1910}]}, status: AVAILABLE) { id } \
               authors { booksCount(year_gt: 1990) } }",
            json!({}),
        )
        .await;
    assert_eq!(d["books"].as_array().unwrap().len(), 5);
    assert_eq!(d["authors"][0]["booksCount"], 109);
}

/// The default limits answer three levels of lists at the default page
/// size (complexity 130,101), while a document with more field selections
/// than `max_selections` is refused whatever its cost.
#[tokio::test]
async fn default_limits_answer_everyday_nesting() {
    let s = start().await;
    s.data(
        "{ authors { name books { title reviews { stars } } } }",
        json!({}),
    )
    .await;
    let cheap: Vec<String> = (0..5001).map(|i| format!("a{i}: __typename")).collect();
    let q = format!("{{ {} }}", cheap.join(" "));
    let r = s.gql(&q, json!({})).await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
        "{r}"
    );
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("5001 field selections, the limit is 5000"),
        "{r}"
    );
}

/// D4: documents refused by a limit are not cached (before, each was kept
/// whole, and sixteen 850 KB ones took 600 MB); a document with more field
/// selections than the complexity limit is refused as it parses.
#[tokio::test]
async fn refused_documents_are_not_cached() {
    let s = start().await;
    for k in 0..4 {
        let fields: Vec<String> = (0..20_000).map(|i| format!("x{i}")).collect();
        let q = format!("{{ {} }} #{k}", fields.join(" "));
        let r = s.gql(&q, json!({})).await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
            "{r}"
        );
        assert!(!s.graphql.parse_cache().contains(&q));
    }
    // Invalid documents are not cached either.
    let invalid = "{ books { nope } }";
    let _ = s.gql(invalid, json!({})).await;
    assert!(!s.graphql.parse_cache().contains(invalid));
    assert_eq!(s.graphql.parse_cache().usage().0, 0);
    let ok = "{ books { id } }";
    s.data(ok, json!({})).await;
    assert!(s.graphql.parse_cache().contains(ok));
    let (entries, bytes) = s.graphql.parse_cache().usage();
    assert_eq!(entries, 1);
    assert!(bytes > 0 && bytes < 4096, "{bytes}");
}

/// D12: an `_in` list longer than the store's bound is BAD_USER_INPUT,
/// not an internal error from the database ("too many SQL variables").
#[tokio::test]
async fn an_oversized_in_list_is_bad_user_input() {
    let s = start().await;
    let q = "query($y: [Int!]) { books(where: { year_in: $y }) { id } }";
    let many: Vec<i64> = (0..50_000).collect();
    let r = s.gql(q, json!({"y": many})).await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"],
        "BAD_USER_INPUT",
        "{}",
        &r.to_string()[..300.min(r.to_string().len())]
    );
    assert!(
        r["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("at most 1000")
    );
    let fine: Vec<i64> = (0..1000).collect();
    s.data(q, json!({"y": fine})).await;
}

/// Each location of `errors` is a line and column from 1 (GraphQL spec
/// §7.1.2); an error of the whole request has none.
fn assert_locations_valid(r: &Value) {
    for e in r["errors"].as_array().unwrap() {
        let Some(locations) = e.get("locations") else {
            continue;
        };
        for at in locations.as_array().unwrap() {
            assert!(
                at["line"].as_u64() >= Some(1) && at["column"].as_u64() >= Some(1),
                "{r}"
            );
        }
    }
}

/// A commit that fails (a unique key PostgreSQL checks only at COMMIT,
/// added here from outside) is an error of the whole request: `data: null`,
/// nothing written, and no `locations` of `0:0`.
#[tokio::test]
async fn a_failed_commit_is_a_request_error_without_locations() {
    let Some(db) = gatehouse_testkit::TestDb::postgres().await else {
        return;
    };
    let s = crate::start_in(db, crate::open_options(), 1 << 20).await;
    let table = s.store.model().entity("Book").unwrap().table.clone();
    let admin = gatehouse_testkit::pg_client(s._db.url()).await.unwrap();
    admin
        .batch_execute(&format!(
            "ALTER TABLE \"{table}\" ADD CONSTRAINT title_once UNIQUE (title) DEFERRABLE INITIALLY DEFERRED"
        ))
        .await
        .unwrap();
    let author = s.author("Lem", None).await;
    let r = s
        .gql(
            "mutation($a: ID!) { \
               one: createBook(input: {title: \"Solaris\", status: AVAILABLE, author: $a}) { id } \
               two: createBook(input: {title: \"Solaris\", status: AVAILABLE, author: $a}) { id } }",
            json!({"a": author}),
        )
        .await;
    assert_eq!(r["data"], Value::Null, "{r}");
    assert_eq!(r["errors"].as_array().unwrap().len(), 1, "{r}");
    assert!(r["errors"][0].get("locations").is_none(), "{r}");
    assert_eq!(
        s.data("{ books { id } }", json!({})).await["books"],
        json!([])
    );
}

/// The refusal of introspection to a caller who may not read the schema
/// is an error of the whole request too.
#[tokio::test]
async fn a_refused_introspection_has_no_zero_location() {
    let s = start().await;
    // Requests need a principal here, and this one has none.
    let graphql = gatehouse_graphql::Graphql::new(
        gatehouse_testkit::example_model(),
        s.store.clone(),
        &gatehouse_graphql::GraphqlOptions::default(),
    )
    .unwrap();
    let refused = graphql
        .execute(gatehouse_graphql::async_graphql::Request::new(
            "{ __schema { queryType { name } } }",
        ))
        .await;
    let r = serde_json::to_value(&refused.response).unwrap();
    assert_eq!(
        r["errors"][0]["extensions"]["code"],
        json!("FORBIDDEN"),
        "{r}"
    );
    assert!(r["errors"][0].get("locations").is_none(), "{r}");
    assert_locations_valid(&r);
}
