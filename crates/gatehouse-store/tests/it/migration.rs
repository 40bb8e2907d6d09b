//! Migrations derived from the Model: additive steps apply on connect,
//! destructive ones are refused until allowed.

use gatehouse_store::{MigrationStep, StoreError, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::row;

const V1: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! size: Int color: Color }
"#;

fn no_migrate() -> StoreOptions {
    StoreOptions {
        migrate: false,
        ..Default::default()
    }
}

fn destructive() -> StoreOptions {
    StoreOptions {
        allow_destructive: true,
        ..Default::default()
    }
}

fn refused(r: Result<gatehouse_store::Store, StoreError>) -> String {
    match r {
        Err(e @ StoreError::DestructiveMigration { .. }) => e.to_string(),
        Err(other) => panic!("expected a refused migration, got {other:?}"),
        Ok(_) => panic!("expected a refused migration, the store opened"),
    }
}

/// Opens V1 with one row (`size` 3) and returns the row id.
async fn v1_with_row(db: &TestDb) -> String {
    let s = db.open(V1).await;
    let r = s
        .entity("Item")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            row(json!({"name": "a", "size": 3, "color": "RED"})),
        )
        .await
        .unwrap();
    s.close().await;
    r["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_database_records_version_one_and_reopening_is_a_no_op() {
    for db in TestDb::each().await {
        let s = db.open(V1).await;
        assert_eq!(s.schema_version().await.unwrap(), 1, "{}", db.backend());
        assert!(s.plan().await.unwrap().is_empty());
        s.close().await;
        let s = db.open(V1).await;
        assert_eq!(s.schema_version().await.unwrap(), 1);
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn additive_changes_apply_on_connect() {
    const V2: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN BLUE }
type Item { id: ID! name: String! size: Int @index color: Color note: String tag: Tag }
type Tag { id: ID! label: String! @unique }
"#;
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let s = db.open_with(V2, no_migrate()).await.unwrap();
        let plan = s.plan().await.unwrap();
        let text: Vec<String> = plan.iter().map(ToString::to_string).collect();
        assert!(plan.iter().all(|p| !p.is_destructive()), "{text:?}");
        assert!(
            plan.contains(&MigrationStep::CreateTable {
                table: "tag".into()
            }),
            "{text:?}"
        );
        assert!(
            text.contains(&"add column item.note (String, nullable)".to_string()),
            "{text:?}"
        );
        assert!(
            text.contains(&"create index on item.size".to_string()),
            "{text:?}"
        );
        assert!(
            text.contains(&"create index on item.tag_id".to_string()),
            "{text:?}"
        );
        assert!(
            text.contains(&"add value BLUE to enum Color".to_string()),
            "{text:?}"
        );
        s.close().await;

        let s = db.open(V2).await;
        assert_eq!(s.schema_version().await.unwrap(), 2, "{}", db.backend());
        assert!(s.plan().await.unwrap().is_empty());
        let old = s
            .entity("Item")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(old["note"], json!(null));
        assert_eq!(old["size"], json!(3));
        let t = s
            .entity("Tag")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"label": "x"})),
            )
            .await
            .unwrap();
        let n = s
            .entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "b", "color": "BLUE", "note": "hi", "tag": t["id"]})),
            )
            .await
            .unwrap();
        assert_eq!(
            s.entity("Item")
                .unwrap()
                .get(
                    &gatehouse_store::AccessContext::system(),
                    n["id"].as_str().unwrap()
                )
                .await
                .unwrap()
                .unwrap()["tag"],
            t["id"]
        );
        // the new column's foreign key is enforced
        assert!(matches!(
            s.entity("Item")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    row(json!({"name": "c", "tag": "ghost"}))
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
        // and the new unique index
        assert!(matches!(
            s.entity("Tag")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    row(json!({"label": "x"}))
                )
                .await,
            Err(StoreError::Conflict { .. })
        ));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_field_is_refused_then_allowed() {
    const V: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! color: Color }
"#;
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let msg = refused(db.open_with(V, StoreOptions::default()).await);
        assert!(msg.contains("DESTRUCTIVE drop column item.size"), "{msg}");
        assert!(msg.contains("--allow-destructive"), "{msg}");
        // nothing changed
        let s = db.open(V1).await;
        assert_eq!(s.schema_version().await.unwrap(), 1);
        assert_eq!(
            s.entity("Item")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), &id)
                .await
                .unwrap()
                .unwrap()["size"],
            json!(3)
        );
        s.close().await;
        let s = db.open_with(V, destructive()).await.unwrap();
        let r = s
            .entity("Item")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), &id)
            .await
            .unwrap()
            .unwrap();
        assert!(!r.contains_key("size"));
        assert_eq!(r["name"], json!("a"));
        assert_eq!(s.schema_version().await.unwrap(), 2);
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_type_is_refused_then_converted() {
    const V: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! size: Float color: Color }
"#;
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let msg = refused(db.open_with(V, StoreOptions::default()).await);
        assert!(
            msg.contains("change type of item.size from Int to Float"),
            "{msg}"
        );
        let s = db.open_with(V, destructive()).await.unwrap();
        assert_eq!(
            s.entity("Item")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), &id)
                .await
                .unwrap()
                .unwrap()["size"],
            json!(3.0),
            "{}",
            db.backend()
        );
        s.entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "f", "size": 2.5})),
            )
            .await
            .unwrap();
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nullable_to_required_is_refused_then_checked() {
    const V: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! size: Int! color: Color }
"#;
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let s = db.open(V1).await;
        let null_row = s
            .entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "n"})),
            )
            .await
            .unwrap();
        s.close().await;
        let msg = refused(db.open_with(V, StoreOptions::default()).await);
        assert!(msg.contains("make item.size required"), "{msg}");
        // allowed, but a row holds null: the whole migration rolls back
        match db.open_with(V, destructive()).await {
            Err(StoreError::Conflict { message }) => {
                assert!(message.contains("migration failed"), "{message}")
            }
            other => panic!(
                "{}: expected a failed migration, got {:?}",
                db.backend(),
                other.map(|_| ())
            ),
        }
        let s = db.open(V1).await;
        assert_eq!(s.schema_version().await.unwrap(), 1);
        s.entity("Item")
            .unwrap()
            .delete(
                &gatehouse_store::AccessContext::system(),
                null_row["id"].as_str().unwrap(),
            )
            .await
            .unwrap();
        s.close().await;
        let s = db.open_with(V, destructive()).await.unwrap();
        assert_eq!(
            s.entity("Item")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), &id)
                .await
                .unwrap()
                .unwrap()["size"],
            json!(3)
        );
        assert!(matches!(
            s.entity("Item")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    row(json!({"name": "x"}))
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_required_column_is_additive_on_empty_table_and_destructive_otherwise() {
    const V: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! size: Int color: Color weight: Int! shade: Color! }
"#;
    for db in TestDb::each().await {
        // empty table: applies by itself
        let s = db.open(V1).await;
        s.close().await;
        let s = db.open(V).await;
        assert!(matches!(
            s.entity("Item")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    row(json!({"name": "x"}))
                )
                .await,
            Err(StoreError::Invalid { .. })
        ));
        s.entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "x", "weight": 1, "shade": "RED"})),
            )
            .await
            .unwrap();
        s.close().await;
    }
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let msg = refused(db.open_with(V, StoreOptions::default()).await);
        assert!(
            msg.contains(
                "add column item.weight (Int, required): existing rows get a placeholder value"
            ),
            "{msg}"
        );
        let s = db.open_with(V, destructive()).await.unwrap();
        let r = s
            .entity("Item")
            .unwrap()
            .get(&gatehouse_store::AccessContext::system(), &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r["weight"], json!(0), "{}", db.backend());
        assert_eq!(r["shade"], json!("RED"));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_entity_and_enum_value_are_destructive() {
    const TWO: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String! size: Int color: Color }
type Gone { id: ID! item: Item }
"#;
    const LESS: &str = r#"
type Query { items: [Item!]! }
enum Color { RED }
type Item { id: ID! name: String! size: Int color: Color }
"#;
    for db in TestDb::each().await {
        let s = db.open(TWO).await;
        let i = s
            .entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"name": "a"})),
            )
            .await
            .unwrap();
        s.entity("Gone")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"item": i["id"]})),
            )
            .await
            .unwrap();
        s.close().await;
        let msg = refused(db.open_with(LESS, StoreOptions::default()).await);
        assert!(msg.contains("DESTRUCTIVE drop table gone"), "{msg}");
        assert!(
            msg.contains("DESTRUCTIVE remove value GREEN from enum Color"),
            "{msg}"
        );
        let s = db.open_with(LESS, destructive()).await.unwrap();
        // the referenced row is deletable now that its referrer table is gone
        assert!(
            s.entity("Item")
                .unwrap()
                .delete(
                    &gatehouse_store::AccessContext::system(),
                    i["id"].as_str().unwrap()
                )
                .await
                .unwrap()
                .is_some(),
            "{}",
            db.backend()
        );
        assert!(s.plan().await.unwrap().is_empty());
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_to_nullable_and_index_changes_are_additive() {
    const V: &str = r#"
type Query { items: [Item!]! }
enum Color { RED GREEN }
type Item { id: ID! name: String @unique size: Int color: Color @index }
"#;
    for db in TestDb::each().await {
        let id = v1_with_row(&db).await;
        let s = db.open(V).await;
        assert_eq!(s.schema_version().await.unwrap(), 2);
        let n = s
            .entity("Item")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"size": 1})),
            )
            .await
            .unwrap();
        assert_eq!(n["name"], json!(null));
        assert!(matches!(
            s.entity("Item")
                .unwrap()
                .insert(
                    &gatehouse_store::AccessContext::system(),
                    row(json!({"name": "a"}))
                )
                .await,
            Err(StoreError::Conflict { .. })
        ));
        assert_eq!(
            s.entity("Item")
                .unwrap()
                .get(&gatehouse_store::AccessContext::system(), &id)
                .await
                .unwrap()
                .unwrap()["name"],
            json!("a")
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_types_email_becomes_unique_without_regard_to_case() {
    const PLAIN: &str = "type User { id: ID! username: String! @unique email: String @unique }";
    const ACCOUNT: &str =
        "type User @account { id: ID! username: String! @unique email: String @unique }";
    let system = gatehouse_store::AccessContext::system();
    for db in TestDb::each().await {
        let s = db.open(PLAIN).await;
        let users = s.entity("User").unwrap();
        users
            .insert(&system, row(json!({"username": "a", "email": "A@x.org"})))
            .await
            .unwrap();
        let b = users
            .insert(&system, row(json!({"username": "b", "email": "a@x.org"})))
            .await
            .unwrap();
        s.close().await;

        // Existing addresses that differ only by case refuse the key, and
        // the database is left as it was.
        let msg = match db.open_with(ACCOUNT, StoreOptions::default()).await {
            Err(StoreError::Conflict { message }) => message,
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("the store opened over duplicate addresses"),
        };
        assert!(
            msg.contains("User.email unique without regard to case"),
            "{msg}"
        );

        let s = db.open(PLAIN).await;
        s.entity("User")
            .unwrap()
            .update(
                &system,
                b["id"].as_str().unwrap(),
                row(json!({"email": "b@x.org"})),
            )
            .await
            .unwrap();
        s.close().await;

        let s = db.open(ACCOUNT).await;
        let users = s.entity("User").unwrap();
        let err = users
            .insert(&system, row(json!({"username": "c", "email": "B@X.ORG"})))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("User.email must be unique without regard to case"),
            "{}: {err}",
            db.backend()
        );
        users
            .insert(&system, row(json!({"username": "c", "email": "c@x.org"})))
            .await
            .unwrap();
        s.close().await;
    }
}
