//! `@relation(onDelete:)`: CASCADE deletes the referencing rows and
//! SET_NULL clears the reference, in the delete's transaction, with an
//! event for each changed row; RESTRICT anywhere in the cascade refuses
//! the whole delete and changes nothing; cycles of CASCADE end.

use std::sync::Arc;

use gatehouse_schema::ChangeKind;
use gatehouse_store::{AccessContext, ManualClock, Row, Store, StoreError, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::row;

const SDL: &str = r#"
type Query { projects: [Project!]! tasks: [Task!]! comments: [Comment!]! notes: [Note!]! pins: [Pin!]! }
type Project { id: ID! name: String! tasks: [Task!]! notes: [Note!]! }
type Task {
  id: ID!
  title: String!
  project: Project! @relation(onDelete: CASCADE)
  parent: Task @relation(onDelete: CASCADE)
  children: [Task!]! @relation(field: "parent")
  comments: [Comment!]!
  pins: [Pin!]!
}
type Comment { id: ID! body: String! task: Task! @relation(onDelete: CASCADE) }
type Note { id: ID! text: String! project: Project @relation(onDelete: SET_NULL) }
type Pin { id: ID! task: Task! }
"#;

async fn insert(s: &Store, entity: &str, v: Value) -> String {
    let r = s
        .entity(entity)
        .unwrap()
        .insert(&AccessContext::system(), row(v))
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

async fn get(s: &Store, entity: &str, id: &str) -> Option<Row> {
    s.entity(entity)
        .unwrap()
        .get(&AccessContext::system(), id)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_and_set_null_in_one_transaction() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let p = insert(&s, "Project", json!({"name": "p"})).await;
        let t1 = insert(&s, "Task", json!({"title": "t1", "project": p})).await;
        let t2 = insert(
            &s,
            "Task",
            json!({"title": "t2", "project": p, "parent": t1}),
        )
        .await;
        let c = insert(&s, "Comment", json!({"body": "c", "task": t2})).await;
        let n = insert(&s, "Note", json!({"text": "n", "project": p})).await;

        // RESTRICT deep in the cascade refuses the whole delete.
        let pin = insert(&s, "Pin", json!({"task": t2})).await;
        let err = s
            .entity("Project")
            .unwrap()
            .delete(&AccessContext::system(), &p)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{b}: {err:?}");
        assert!(get(&s, "Project", &p).await.is_some(), "{b}");
        assert!(get(&s, "Task", &t2).await.is_some(), "{b}");
        assert!(get(&s, "Comment", &c).await.is_some(), "{b}");
        assert_eq!(
            get(&s, "Note", &n).await.unwrap()["project"],
            json!(p),
            "{b}"
        );

        s.entity("Pin")
            .unwrap()
            .delete(&AccessContext::system(), &pin)
            .await
            .unwrap();
        let mut rx = s.subscribe();
        let deleted = s
            .entity("Project")
            .unwrap()
            .delete(&AccessContext::system(), &p)
            .await
            .unwrap();
        assert!(deleted.is_some(), "{b}");
        for (e, id) in [
            ("Project", &p),
            ("Task", &t1),
            ("Task", &t2),
            ("Comment", &c),
        ] {
            assert!(get(&s, e, id).await.is_none(), "{b}: {e} {id}");
        }
        assert_eq!(
            get(&s, "Note", &n).await.unwrap()["project"],
            json!(null),
            "{b}"
        );

        let mut got = Vec::new();
        while let Ok(Ok(ev)) =
            tokio::time::timeout(std::time::Duration::from_millis(500), rx.recv()).await
        {
            got.push((ev.entity.clone(), ev.kind, ev.id.clone()));
        }
        got.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
        let mut want = vec![
            ("Comment".to_string(), ChangeKind::Deleted, c.clone()),
            ("Note".to_string(), ChangeKind::Updated, n.clone()),
            ("Project".to_string(), ChangeKind::Deleted, p.clone()),
            ("Task".to_string(), ChangeKind::Deleted, t1.clone()),
            ("Task".to_string(), ChangeKind::Deleted, t2.clone()),
        ];
        want.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
        assert_eq!(got, want, "{b}");
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_cascades_ends() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(SDL).await;
        let p = insert(&s, "Project", json!({"name": "p"})).await;
        let t1 = insert(&s, "Task", json!({"title": "t1", "project": p})).await;
        let t2 = insert(
            &s,
            "Task",
            json!({"title": "t2", "project": p, "parent": t1}),
        )
        .await;
        s.entity("Task")
            .unwrap()
            .update(&AccessContext::system(), &t1, row(json!({"parent": t2})))
            .await
            .unwrap();
        s.entity("Task")
            .unwrap()
            .delete(&AccessContext::system(), &t1)
            .await
            .unwrap();
        assert!(get(&s, "Task", &t1).await.is_none(), "{b}");
        assert!(get(&s, "Task", &t2).await.is_none(), "{b}");
        assert!(get(&s, "Project", &p).await.is_some(), "{b}");
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_null_stamps_updated_at() {
    const STAMPED: &str = r#"
type Query { owners: [Owner!]! items: [Item!]! }
type Owner { id: ID! name: String! items: [Item!]! }
type Item {
  id: ID!
  owner: Owner @relation(onDelete: SET_NULL)
  createdAt: DateTime! @createdAt
  updatedAt: DateTime! @updatedAt
}
"#;
    // 2026-11-27T16:00:00Z in microseconds.
    const T0: i64 = 1_795_795_200_000_000;
    for db in TestDb::each().await {
        let b = db.backend();
        let clock = Arc::new(ManualClock::at_micros(T0));
        let s = db
            .open_with(
                STAMPED,
                StoreOptions {
                    clock: clock.clone(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let o = insert(&s, "Owner", json!({"name": "o"})).await;
        let i = insert(&s, "Item", json!({"owner": o})).await;
        clock.advance_micros(1_000_000);
        let mut feed = s.subscribe();
        s.entity("Owner")
            .unwrap()
            .delete(&AccessContext::system(), &o)
            .await
            .unwrap();
        let item = get(&s, "Item", &i).await.unwrap();
        assert_eq!(item["owner"], Value::Null, "{b}");
        assert_eq!(item["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(item["updatedAt"], "2026-11-27T16:00:01.000000Z", "{b}");
        let mut updated = None;
        while let Ok(Ok(ev)) =
            tokio::time::timeout(std::time::Duration::from_millis(500), feed.recv()).await
        {
            if ev.entity == "Item" {
                assert_eq!(ev.kind, ChangeKind::Updated, "{b}");
                updated = ev.new.map(|r| r["updatedAt"].clone());
            }
        }
        assert_eq!(updated.as_ref(), Some(&item["updatedAt"]), "{b}");
        s.close().await;
    }
}

const TENANTS: &str = r#"
type Query { projects: [Project!]! files: [File!]! pages: [Page!]! }
type Project @policy(all: {org: "$org"}) { id: ID! org: String! files: [File!]! }
type File @policy(read: {project: {org: "$org"}}) {
  id: ID!
  project: Project! @relation(onDelete: CASCADE)
  pages: [Page!]!
}
type Page @policy(read: {file: {project: {org: "$org"}}}) {
  id: ID!
  file: File! @relation(onDelete: CASCADE)
}
"#;

/// Callers of the tenants `acme` and `globex`.
fn tenants() -> (AccessContext, AccessContext) {
    (
        crate::common::caller_with(&["read", "write"], json!({"org": "acme"})),
        crate::common::caller_with(&["read", "write"], json!({"org": "globex"})),
    )
}

/// Makes an acme project with a file and a page on `s` and deletes the
/// project as acme (the cascade takes the file and the page); returns
/// their ids and, for each delete event `judge` publishes, (entity, id,
/// whether acme may read it, whether globex may).
async fn delete_a_project_tree(
    s: &gatehouse_store::Store,
    judge: &gatehouse_store::Store,
) -> (String, String, String, Vec<(String, String, bool, bool)>) {
    let (acme, globex) = tenants();
    let p = insert(s, "Project", json!({"org": "acme"})).await;
    let f = insert(s, "File", json!({"project": p})).await;
    let g = insert(s, "Page", json!({"file": f})).await;
    let mut feed = judge.subscribe();
    s.entity("Project")
        .unwrap()
        .delete(&acme, &p)
        .await
        .unwrap()
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(5), feed.recv())
            .await
            .unwrap()
            .unwrap();
        // Another instance may hear of the creates after it subscribed.
        if ev.kind != ChangeKind::Deleted {
            continue;
        }
        let rows = judge.entity(&ev.entity).unwrap();
        let old = ev.old.clone().unwrap();
        let to_acme = rows.visible(&acme, &old).await.unwrap();
        let to_globex = rows.visible(&globex, &old).await.unwrap();
        seen.push((ev.entity.clone(), ev.id.clone(), to_acme, to_globex));
    }
    (p, f, g, seen)
}

/// The readers of a row deleted by a cascade get its delete event, also
/// when its read policy goes through the deleted parent (CONTRACT §13):
/// the event is judged with the parent as it was, not as it is (gone).
/// Others still do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascaded_events_reach_readers_through_the_deleted_parent() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(TENANTS).await;
        let (acme, globex) = tenants();
        let (p, f, g, mut seen) = delete_a_project_tree(&s, &s).await;
        seen.sort();
        assert_eq!(
            seen,
            vec![
                ("File".to_string(), f.clone(), true, false),
                ("Page".to_string(), g.clone(), true, false),
                ("Project".to_string(), p.clone(), true, false),
            ],
            "{b}"
        );
        // A row of the same id made again by another tenant: its own rule
        // decides, not the deleted row's.
        insert(&s, "Project", json!({"id": p, "org": "globex"})).await;
        let file = s.entity("File").unwrap();
        let old = row(json!({"id": f, "project": p}));
        assert!(!file.visible(&acme, &old).await.unwrap(), "{b}");
        assert!(file.visible(&globex, &old).await.unwrap(), "{b}");
        s.close().await;
    }
}

/// B7: the readers of a cascaded row get its delete event on every
/// instance: another instance listening on the same PostgreSQL database
/// publishes a commit's events together, with its deleted rows kept as
/// they were, so it judges the children with their deleted parent too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascaded_events_reach_readers_on_another_instance() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(TENANTS).await;
    let other = db.open(TENANTS).await;
    let (p, f, g, mut seen) = delete_a_project_tree(&s, &other).await;
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("File".to_string(), f, true, false),
            ("Page".to_string(), g, true, false),
            ("Project".to_string(), p, true, false),
        ]
    );
    s.close().await;
    other.close().await;
}
