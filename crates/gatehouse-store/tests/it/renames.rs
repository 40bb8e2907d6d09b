//! `@renamed(from:)`: the migration renames a column or a table instead of
//! dropping it and adding another, and the data stays.

use gatehouse_db::{Built, Dialect, SqlKind};
use gatehouse_store::{AccessContext, MigrationStep, Store, StoreError, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::row;

const V1: &str = r#"
type Query { books: [Book!]! }
type Writer { id: ID! name: String! @unique books: [Book!]! }
type Book { id: ID! title: String! @index pages: Int writer: Writer! }
"#;

fn no_migrate() -> StoreOptions {
    StoreOptions {
        migrate: false,
        ..Default::default()
    }
}

fn plan_text(plan: &[MigrationStep]) -> Vec<String> {
    plan.iter().map(ToString::to_string).collect()
}

/// The names of the indexes and (PostgreSQL) constraints in the database.
async fn db_names(s: &Store) -> Vec<String> {
    let sql = match s.db().dialect() {
        Dialect::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'"
        }
        Dialect::Postgres => {
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() \
             UNION SELECT conname FROM pg_constraint WHERE contype = 'f'"
        }
    };
    let mut pooled = s.db().write().await.unwrap();
    let rows = pooled
        .conn()
        .fetch(Built::raw(sql, vec![]), &[SqlKind::Text])
        .await
        .unwrap();
    rows.into_iter()
        .filter_map(|r| r.first().and_then(|v| v.as_str()).map(str::to_string))
        .collect()
}

fn has_names(names: &[String], present: &[&str], absent: &[&str]) {
    for n in present {
        assert!(names.iter().any(|x| x == n), "{n} missing: {names:?}");
    }
    for n in absent {
        assert!(!names.iter().any(|x| x == n), "{n} left behind: {names:?}");
    }
}

/// Opens V1 with one writer and one book; returns (writer id, book id).
async fn v1_with_rows(db: &TestDb) -> (String, String) {
    let s = db.open(V1).await;
    let ctx = AccessContext::system();
    let w = s
        .entity("Writer")
        .unwrap()
        .insert(&ctx, row(json!({"name": "Le Guin"})))
        .await
        .unwrap();
    let w = w["id"].as_str().unwrap().to_string();
    let b = s
        .entity("Book")
        .unwrap()
        .insert(
            &ctx,
            row(json!({"title": "The Dispossessed", "pages": 387, "writer": w})),
        )
        .await
        .unwrap();
    s.close().await;
    (w, b["id"].as_str().unwrap().to_string())
}

/// Opens `sdl` without migrating and returns its plan, checking that it
/// has no destructive step.
async fn additive_plan(db: &TestDb, sdl: &str) -> Vec<String> {
    let s = db.open_with(sdl, no_migrate()).await.unwrap();
    let plan = s.plan().await.unwrap();
    let text = plan_text(&plan);
    assert!(plan.iter().all(|p| !p.is_destructive()), "{text:?}");
    s.close().await;
    text
}

/// Migrates `sdl`, then checks that opening it again plans nothing and
/// records no new version.
async fn migrate_twice(db: &TestDb, sdl: &str) -> Store {
    let s = db.open(sdl).await;
    let version = s.schema_version().await.unwrap();
    s.close().await;
    let s = db.open(sdl).await;
    assert!(
        s.plan().await.unwrap().is_empty(),
        "{}: {:?}",
        db.backend(),
        plan_text(&s.plan().await.unwrap())
    );
    assert_eq!(
        s.schema_version().await.unwrap(),
        version,
        "{}",
        db.backend()
    );
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_fields_keep_their_values_and_references() {
    const V2: &str = r#"
type Query { books: [Book!]! }
type Writer { id: ID! name: String! @unique books: [Book!]! @relation(field: "author") }
type Book {
  id: ID!
  heading: String! @index @renamed(from: "title")
  pages: Int
  author: Writer! @renamed(from: "writer")
}
"#;
    for db in TestDb::each().await {
        let (w, b) = v1_with_rows(&db).await;
        let text = additive_plan(&db, V2).await;
        assert_eq!(
            text,
            vec![
                "rename column book.title to book.heading (values kept)",
                "rename column book.writer_id to book.author_id (values kept)",
            ],
            "{}",
            db.backend()
        );

        let s = migrate_twice(&db, V2).await;
        let ctx = AccessContext::system();
        let names = db_names(&s).await;
        has_names(
            &names,
            &["book_heading_idx", "book_author_id_idx"],
            &["book_title_idx", "book_writer_id_idx"],
        );
        if s.db().dialect() == Dialect::Postgres {
            has_names(&names, &["book_author_id_fkey"], &["book_writer_id_fkey"]);
        }
        let books = s.entity("Book").unwrap();
        let got = books.get(&ctx, &b).await.unwrap().unwrap();
        assert_eq!(
            got["heading"],
            json!("The Dispossessed"),
            "{}",
            db.backend()
        );
        assert_eq!(got["author"], json!(w));
        assert_eq!(got["pages"], json!(387));
        // The reference still holds: a writer with books cannot go.
        let gone = s.entity("Writer").unwrap().delete(&ctx, &w).await;
        assert!(matches!(gone, Err(StoreError::Conflict { .. })), "{gone:?}");
        let more = books
            .insert(&ctx, row(json!({"heading": "Lavinia", "author": w})))
            .await
            .unwrap();
        assert_eq!(more["heading"], json!("Lavinia"));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_type_keeps_its_rows_and_the_references_to_it() {
    const V2: &str = r#"
type Query { books: [Book!]! }
type Author @renamed(from: "Writer") { id: ID! name: String! @unique books: [Book!]! }
type Book { id: ID! title: String! @index pages: Int writer: Author! }
"#;
    for db in TestDb::each().await {
        let (w, b) = v1_with_rows(&db).await;
        let text = additive_plan(&db, V2).await;
        assert_eq!(
            text,
            vec!["rename table writer to author (rows kept)"],
            "{}",
            db.backend()
        );

        let s = migrate_twice(&db, V2).await;
        let ctx = AccessContext::system();
        let names = db_names(&s).await;
        has_names(&names, &["author_name_key"], &["writer_name_key"]);
        if s.db().dialect() == Dialect::Postgres {
            has_names(&names, &["author_pkey"], &["writer_pkey"]);
        }
        let a = s.entity("Author").unwrap().get(&ctx, &w).await.unwrap();
        assert_eq!(a.unwrap()["name"], json!("Le Guin"), "{}", db.backend());
        let got = s.entity("Book").unwrap().get(&ctx, &b).await.unwrap();
        assert_eq!(got.unwrap()["writer"], json!(w));
        let gone = s.entity("Author").unwrap().delete(&ctx, &w).await;
        assert!(matches!(gone, Err(StoreError::Conflict { .. })), "{gone:?}");
        // A unique name is still unique under the new table name.
        let dup = s
            .entity("Author")
            .unwrap()
            .insert(&ctx, row(json!({"name": "Le Guin"})))
            .await;
        assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
        s.close().await;

        // A later change to the renamed table migrates as any other.
        const V3: &str = r#"
type Query { books: [Book!]! }
type Author @renamed(from: "Writer") { id: ID! name: String! @unique born: Int books: [Book!]! }
type Book { id: ID! title: String! @index pages: Int! writer: Author! }
"#;
        let s = db
            .open_with(
                V3,
                StoreOptions {
                    allow_destructive: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let got = s.entity("Book").unwrap().get(&ctx, &b).await.unwrap();
        assert_eq!(got.unwrap()["pages"], json!(387), "{}", db.backend());
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_from_a_missing_name_is_an_add() {
    const V2: &str = r#"
type Query { books: [Book!]! }
type Writer { id: ID! name: String! @unique books: [Book!]! }
type Book { id: ID! title: String! @index pages: Int writer: Writer! subtitle: String @renamed(from: "tagline") }
type Shelf @renamed(from: "Rack") { id: ID! label: String }
"#;
    for db in TestDb::each().await {
        v1_with_rows(&db).await;
        let text = additive_plan(&db, V2).await;
        for line in [
            "nothing to rename: no table rack, so table shelf is created",
            "nothing to rename: no column book.tagline, so book.subtitle is added",
            "create table shelf",
            "add column book.subtitle (String, nullable)",
        ] {
            assert!(
                text.contains(&line.to_string()),
                "{}: {text:?}",
                db.backend()
            );
        }
        migrate_twice(&db, V2).await.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_is_refused_when_both_names_exist() {
    const BOTH: &str = r#"
type Query { books: [Book!]! }
type Writer { id: ID! name: String! @unique books: [Book!]! }
type Author { id: ID! name: String }
type Book { id: ID! title: String! @index heading: String pages: Int writer: Writer! }
"#;
    const FIELD: &str = r#"
type Query { books: [Book!]! }
type Writer { id: ID! name: String! @unique books: [Book!]! }
type Author { id: ID! name: String }
type Book { id: ID! heading: String @renamed(from: "title") pages: Int writer: Writer! }
"#;
    const TYPE: &str = r#"
type Query { books: [Book!]! }
type Author @renamed(from: "Writer") { id: ID! name: String! @unique books: [Book!]! }
type Book { id: ID! title: String! @index heading: String pages: Int writer: Author! }
"#;
    for db in TestDb::each().await {
        db.open(BOTH).await.close().await;
        for (sdl, names) in [
            (FIELD, ["book.title", "book.heading"]),
            (TYPE, ["table writer", "author"]),
        ] {
            let s = db.open_with(sdl, no_migrate()).await.unwrap();
            let err = s.plan().await.unwrap_err().to_string();
            for n in names {
                assert!(err.contains(n), "{}: {err}", db.backend());
            }
            assert!(err.contains("both"), "{err}");
            s.close().await;
            let opened = db.open_with(sdl, StoreOptions::default()).await;
            let Err(err) = opened else {
                panic!("{}: the store opened", db.backend());
            };
            let err = err.to_string();
            assert!(err.contains(names[0]), "{}: {err}", db.backend());
        }
        // Nothing changed.
        let s = db.open_with(BOTH, no_migrate()).await.unwrap();
        assert!(s.plan().await.unwrap().is_empty(), "{}", db.backend());
        s.close().await;
    }
}
