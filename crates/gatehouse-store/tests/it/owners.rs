//! Owner fields (those a policy compares with a claim) are filled on create
//! and write-once afterwards, bypass aside; a to-one reference to a row the
//! caller may not read reads as null (`docs/design/policies.md`).

use gatehouse_store::{AccessContext, ListQuery, Row, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::row;

/// A tenant-wide update rule and an owner-only delete rule: the shape that
/// made rewriting `createdBy` a way to delete other members' tasks.
const SDL: &str = r#"
type Query { tasks: [Task!]! projects: [Project!]! }
type Task @policy(
  all: {org: "$org"}
  delete: {AND: [{org: "$org"}, {createdBy: "$sub"}]}
  bypass: "admin"
) {
  id: ID!
  org: String!
  createdBy: String
  title: String!
  project: Project
}
type Project @policy(read: {owner: "$sub"}, bypass: "admin") {
  id: ID!
  owner: String
  name: String!
}
"#;

fn caller(sub: &str, org: &str, scopes: &[&str]) -> AccessContext {
    // Every caller may read and write; setting a reference needs `read`.
    let all: Vec<&str> = ["read", "write"].iter().chain(scopes).copied().collect();
    crate::common::caller_with(&all, json!({ "sub": sub, "org": org }))
}

fn id(r: &Row) -> String {
    r["id"].as_str().unwrap().to_string()
}

fn forbidden(r: Result<Row, StoreError>) -> String {
    match r {
        Err(StoreError::Forbidden { message }) => message,
        other => panic!("expected Forbidden, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_fields_are_filled_on_create_and_write_once() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let tasks = s.entity("Task").unwrap();
        let alice = caller("alice", "acme", &[]);
        let bob = caller("bob", "acme", &[]);
        let admin = caller("root", "acme", &["admin"]);

        // `createdBy` is tied to a claim only by the delete rule: still filled.
        let t = tasks
            .insert(&alice, row(json!({"title": "a"})))
            .await
            .unwrap();
        assert_eq!(t["createdBy"], "alice", "{}", db.backend());
        assert_eq!(t["org"], "acme");
        let t = id(&t);

        // The tenant-wide update rule lets bob edit other fields...
        tasks
            .update(&bob, &t, row(json!({"title": "b"})))
            .await
            .unwrap();
        // ...but not the owner fields, to another value or to null.
        for patch in [
            json!({"createdBy": "bob"}),
            json!({"createdBy": null}),
            json!({"org": "globex"}),
            json!({"title": "c", "createdBy": "bob"}),
        ] {
            let msg = forbidden(tasks.update(&bob, &t, row(patch.clone())).await);
            assert!(msg.contains("cannot be changed"), "{patch}: {msg}");
        }
        let msg = forbidden(
            tasks
                .replace(
                    &bob,
                    &t,
                    row(json!({"title": "d", "org": "acme", "createdBy": "bob"})),
                )
                .await,
        );
        assert!(msg.contains("Task.createdBy"), "{msg}");
        let stored = tasks.get(&alice, &t).await.unwrap().unwrap();
        assert_eq!(stored["createdBy"], "alice");
        assert_eq!(stored["title"], "b", "a refused write changes nothing");

        // Setting an owner field to the value it holds is no change; a whole
        // replacement that leaves a nullable one out keeps it.
        tasks
            .update(&bob, &t, row(json!({"createdBy": "alice", "org": "acme"})))
            .await
            .unwrap();
        tasks
            .replace(
                &bob,
                &t,
                row(json!({"title": "e", "org": "acme", "createdBy": "alice"})),
            )
            .await
            .unwrap();
        // (`org` is required, so a whole replacement repeats it.)
        let r = tasks
            .replace(&bob, &t, row(json!({"title": "f", "org": "acme"})))
            .await
            .unwrap();
        assert_eq!(
            (&r["createdBy"], &r["org"]),
            (&json!("alice"), &json!("acme"))
        );
        let stored = tasks.get(&alice, &t).await.unwrap().unwrap();
        assert_eq!(stored["createdBy"], "alice");
        assert_eq!(stored["title"], "f");

        // So bob, a member of the tenant, still cannot delete alice's task.
        assert!(matches!(
            tasks.delete(&bob, &t).await,
            Err(StoreError::Forbidden { .. })
        ));

        // The bypass scope may change them.
        let r = tasks
            .update(&admin, &t, row(json!({"createdBy": "bob"})))
            .await
            .unwrap();
        assert_eq!(r["createdBy"], "bob");
        assert!(tasks.delete(&bob, &t).await.unwrap().is_some());
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bypass_create_fills_owner_fields_it_leaves_out() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let tasks = s.entity("Task").unwrap();
        let admin = caller("root", "acme", &["admin"]);
        let r = tasks
            .insert(&admin, row(json!({"title": "a"})))
            .await
            .unwrap();
        assert_eq!(r["createdBy"], "root", "{}", db.backend());
        assert_eq!(r["org"], "acme");
        let stored = tasks.get(&admin, &id(&r)).await.unwrap().unwrap();
        assert_eq!(stored["createdBy"], "root");
        // A value the bypass caller gives is kept.
        let r = tasks
            .insert(
                &admin,
                row(json!({"title": "b", "createdBy": "carol", "org": "globex"})),
            )
            .await
            .unwrap();
        assert_eq!(
            (&r["createdBy"], &r["org"]),
            (&json!("carol"), &json!("globex"))
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn references_to_unseen_rows_read_as_null() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let (tasks, projects) = (s.entity("Task").unwrap(), s.entity("Project").unwrap());
        let alice = caller("alice", "acme", &[]);
        let bob = caller("bob", "acme", &[]);
        let mine = projects
            .insert(&alice, row(json!({"name": "alice's"})))
            .await
            .unwrap();
        let mine = id(&mine);
        let t = tasks
            .insert(&alice, row(json!({"title": "a", "project": mine})))
            .await
            .unwrap();
        let t = id(&t);
        tasks
            .insert(&bob, row(json!({"title": "b"})))
            .await
            .unwrap();

        let q = ListQuery {
            select: Some(vec!["project".into()]),
            ..ListQuery::default()
        };
        for (who, expect) in [(&alice, json!(mine)), (&bob, Value::Null)] {
            let mut page = tasks.list(who, &q).await.unwrap().rows;
            tasks.hide_unseen_references(who, &mut page).await.unwrap();
            let at = page.position("project").unwrap();
            let seen: Vec<&Value> = page.rows.iter().map(|r| &r[at]).collect();
            assert!(seen.contains(&&expect), "{}: {seen:?}", db.backend());
            assert!(!seen.contains(&&json!(mine)) || expect == json!(mine));

            let mut one = tasks.get(who, &t).await.unwrap().unwrap();
            tasks
                .hide_unseen_references_in(who, &mut one)
                .await
                .unwrap();
            assert_eq!(one["project"], expect);
        }
        // The stored reference itself is untouched.
        let one = tasks
            .get(&AccessContext::system(), &t)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(one["project"], json!(mine));
        s.close().await;
    }
}
