//! Counts (CONTRACT §13): `<list>Count` at the root and `<toMany>Count` on
//! an entity equal the lengths of the lists they count, under the same
//! filters and beyond the page size, on every backend; a level of parents
//! is counted in one grouped statement; the planned executor declines them
//! and the resolver path answers.

use gatehouse_graphql::Graphql;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_store::AccessContext;
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use super::open_options;

const SDL: &str = r#"
type Query {
  authors(first: Int): [Author!]!
  authorsCount: Int!
  books(first: Int, year_gt: Int, where: BookWhere): [Book!]!
  booksCount(year_gt: Int, where: BookWhere): Int!
}
input BookWhere { year_lt: Int title_starts_with: String }
type Author {
  id: ID!
  name: String!
  books(first: Int, year_gt: Int): [Book!]!
  booksCount(year_gt: Int): Int!
}
type Book { id: ID! title: String! year: Int! author: Author! }
"#;

async fn run(g: &Graphql, query: &str) -> Value {
    let r = g
        .execute(Request::new(query).variables(Variables::from_json(json!({}))))
        .await;
    assert!(
        r.response.errors.is_empty(),
        "{query}: {:?}",
        r.response.errors
    );
    serde_json::to_value(&r.response.data).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_equal_the_lists_they_count_beyond_the_page_size() {
    for db in TestDb::each().await {
        let b = db.backend();
        let store = db.open(SDL).await;
        let g = Graphql::new(store.model().clone(), store.clone(), &open_options()).unwrap();
        let sys = AccessContext::system();
        let mut authors = Vec::new();
        for (name, n) in [("many", 150), ("few", 3), ("none", 0)] {
            let a = store
                .entity("Author")
                .unwrap()
                .insert(&sys, json!({"name": name}).as_object().unwrap().clone())
                .await
                .unwrap();
            let id = a["id"].as_str().unwrap().to_string();
            for y in 1..=n {
                let row = json!({"title": format!("{name}-{y}"), "year": y, "author": id});
                store
                    .entity("Book")
                    .unwrap()
                    .insert(&sys, row.as_object().unwrap().clone())
                    .await
                    .unwrap();
            }
            authors.push(id);
        }

        // Root: not capped by the page size (100 here), filtered like the list.
        let d = run(&g, "{ books(first: 100) { id } booksCount authorsCount }").await;
        assert_eq!(d["books"].as_array().unwrap().len(), 100, "{b}");
        assert_eq!(d["booksCount"], json!(153), "{b}");
        assert_eq!(d["authorsCount"], json!(3), "{b}");
        for (args, want) in [
            ("year_gt: 100", 50),
            ("where: {year_lt: 10}", 12),
            ("year_gt: 1, where: {title_starts_with: \"few\"}", 2),
        ] {
            let d = run(
                &g,
                &format!("{{ books(first: 500, {args}) {{ id }} booksCount({args}) }}"),
            )
            .await;
            let listed = d["books"].as_array().unwrap().len();
            assert_eq!(d["booksCount"], json!(listed), "{b}: {args}");
            assert_eq!(listed, want, "{b}: {args}");
        }

        // Nested: per parent, with the to-many field's filters, one
        // grouped statement per distinct count of the level.
        let before = store.statements();
        let d = run(
            &g,
            "{ authors { name booksCount late: booksCount(year_gt: 140) } }",
        )
        .await;
        let statements = store.statements() - before;
        assert!(statements <= 3, "{b}: {statements} statements");
        let got: Vec<(String, i64, i64)> = d["authors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["name"].as_str().unwrap().to_string(),
                    a["booksCount"].as_i64().unwrap(),
                    a["late"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("many".to_string(), 150, 10),
                ("few".to_string(), 3, 0),
                ("none".to_string(), 0, 0)
            ],
            "{b}"
        );

        // The planned executor declines counts; the resolver path answered.
        for q in ["{ booksCount }", "{ authors { booksCount } }"] {
            let r = Request::new(q);
            assert!(g.execute_planned(&r).await.is_none(), "{b}: {q}");
        }
        store.close().await;
    }
}
