//! A schema of types only (the example without `root.graphql`) gets the
//! root types `schema scaffold` prints, generated at load, and serves the
//! same answers as the hand-written example to the requests both APIs
//! share. The hand-written roots differ in shape (mutations take fields as
//! arguments or other inputs, some lists take filters as arguments, and
//! there are lookups by other fields, such as `bookByIsbn`), so those are
//! compared where the two agree: lists with paging, `where` and `orderBy`,
//! their counts, lookups by id, relations and to-many counts.

use std::sync::Arc;

use gatehouse_graphql::GraphqlOptions;
use gatehouse_schema::{LoadOptions, load_sources, load_sources_with, scaffold};
use gatehouse_store::{AccessContext, Store};
use gatehouse_testkit::{TestDb, example_model, example_sources};
use serde_json::{Value, json};

use super::{Server, start_model};

fn types_only() -> Vec<gatehouse_schema::Source> {
    example_sources()
        .into_iter()
        .filter(|s| s.path != "root.graphql")
        .collect()
}

async fn seed(store: &Store) {
    let sys = AccessContext::system();
    let put = |entity: &'static str, v: Value| {
        let store = store.clone();
        let sys = sys.clone();
        async move {
            store
                .entity(entity)
                .unwrap()
                .insert(&sys, v.as_object().unwrap().clone())
                .await
                .unwrap();
        }
    };
    put(
        "Author",
        json!({"id": "a1", "name": "Le Guin", "born": "1929-10-21"}),
    )
    .await;
    put("Author", json!({"id": "a2", "name": "Lem"})).await;
    for (id, title, year, author) in [
        ("b1", "The Dispossessed", 1974, "a1"),
        ("b2", "Solaris", 1961, "a2"),
        ("b3", "The Lathe of Heaven", 1971, "a1"),
    ] {
        put(
            "Book",
            json!({"id": id, "title": title, "year": year, "status": "AVAILABLE", "author": author}),
        )
        .await;
    }
    put(
        "Review",
        json!({"id": "r1", "book": "b1", "reviewer": "x", "stars": 5, "postedOn": "2024-01-01"}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_only_serves_what_the_hand_written_example_serves() {
    // The generated roots are what `schema scaffold` prints for the types.
    let types = load_sources_with(
        &types_only(),
        LoadOptions {
            require_query: false,
        },
    )
    .unwrap();
    let generated = load_sources(&types_only()).unwrap();
    let printed = scaffold(&types);
    let query = printed.split("\n\n").next().unwrap();
    for line in query.lines().filter(|l| l.starts_with("  ")) {
        assert!(
            generated.sdl.contains(line.trim()),
            "{line}\n{}",
            generated.sdl
        );
    }
    assert!(generated.mutations.iter().any(|m| m.name == "createReview"));
    assert!(
        generated
            .subscriptions
            .iter()
            .any(|m| m.name == "noteDeleted")
    );

    for db in TestDb::each().await {
        let b = db.backend();
        let written = start_model(db, example_model(), GraphqlOptions::default(), 1 << 20).await;
        let db = TestDb::each()
            .await
            .into_iter()
            .find(|d| d.backend() == b)
            .unwrap();
        let typed = start_model(
            db,
            Arc::new(generated.clone()),
            GraphqlOptions::default(),
            1 << 20,
        )
        .await;
        seed(&written.store).await;
        seed(&typed.store).await;
        for q in [
            "{ books(first: 2, offset: 1, orderBy: [title_ASC]) { id title year author { name } reviews { stars } } }",
            "{ books(where: {year_gt: 1965, OR: [{title_contains: \"Lathe\"}, {year: 1974}]}) { title } booksCount(where: {year_gt: 1965}) }",
            "{ book(id: \"b1\") { title author { name booksCount books(orderBy: [year_DESC]) { title } } } }",
            "{ author(id: \"a2\") { name born books { title } } }",
            "{ reviews(first: 10) { reviewer book { title } } }",
        ] {
            let want = written.data(q, json!({})).await;
            let got = typed.data(q, json!({})).await;
            assert_eq!(got, want, "{b}: {q}");
        }
        check_mutations(&typed).await;
    }
}

/// The generated mutations work (their shapes differ from the example's).
async fn check_mutations(s: &Server) {
    let d = s
        .data(
            "mutation { createAuthor(input: {name: \"New\"}) { id name } }",
            json!({}),
        )
        .await;
    let id = d["createAuthor"]["id"].clone();
    let d = s
        .data(
            "mutation($i: ID!) { updateAuthor(id: $i, input: {born: \"2000-01-01\"}) { born } deleteAuthor(id: $i) { name } }",
            json!({"i": id}),
        )
        .await;
    assert_eq!(
        d,
        json!({"updateAuthor": {"born": "2000-01-01"}, "deleteAuthor": {"name": "New"}})
    );
}

/// A to-many field declared without arguments takes those of its type's
/// generated root list, so a nested list pages, filters and sorts as the
/// root list does; one declared with arguments keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_nested_lists_page_filter_and_sort_like_root_lists() {
    let model = load_sources(&[gatehouse_schema::Source {
        path: "s.graphql".into(),
        text: "type Project { id: ID! name: String! tasks: [Task!]! late(first: Int): [Task!]! @relation(field: \"project\") }\n\
               type Task { id: ID! title: String! done: Boolean! project: Project! }"
            .into(),
    }])
    .unwrap();
    assert!(
        model.sdl.contains(
            "tasks(first: Int, offset: Int, where: TaskWhere, orderBy: [TaskOrderBy!]): [Task!]!"
        ),
        "{}",
        model.sdl
    );
    assert!(
        model.sdl.contains("late(first: Int): [Task!]!"),
        "{}",
        model.sdl
    );
    for db in TestDb::each().await {
        let b = db.backend();
        let s = start_model(
            db,
            Arc::new(model.clone()),
            GraphqlOptions::default(),
            1 << 20,
        )
        .await;
        let sys = AccessContext::system();
        let put = |entity: &str, v: Value| {
            let store = s.store.clone();
            let (sys, entity) = (sys.clone(), entity.to_string());
            async move {
                store
                    .entity(&entity)
                    .unwrap()
                    .insert(&sys, v.as_object().unwrap().clone())
                    .await
                    .unwrap();
            }
        };
        put("Project", json!({"id": "p1", "name": "Moon"})).await;
        for (id, title, done) in [("t1", "a", true), ("t2", "b", false), ("t3", "c", false)] {
            put(
                "Task",
                json!({"id": id, "title": title, "done": done, "project": "p1"}),
            )
            .await;
        }
        let d = s
            .data(
                "{ projects { tasks(where: {done: false}, orderBy: [title_DESC], first: 1, offset: 1) { title } all: tasks { title } } }",
                json!({}),
            )
            .await;
        assert_eq!(
            d,
            json!({"projects": [{"tasks": [{"title": "b"}], "all": [{"title": "a"}, {"title": "b"}, {"title": "c"}]}]}),
            "{b}"
        );
    }
}
