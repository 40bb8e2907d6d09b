//! Prepared list statements: built for one caller, they run for another
//! only when that caller gets the same answers, and a template binds other
//! texts only where the request's own texts were bound, verbatim.

use gatehouse_store::{AccessContext, Filter, FilterOp, ListQuery, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::row;

const SDL: &str = r#"
type Query { memos: [Memo!]! notes: [Note!]! }
type Memo @policy(read: {owner: "$sub"}) {
  id: ID!
  owner: String!
  title: String!
}
type Note {
  id: ID!
  title: String!
  grade: Int @auth(read: "grades")
  due: Date
}
"#;

fn caller(sub: &str, scopes: &[&str]) -> AccessContext {
    crate::common::caller_with(scopes, json!({ "sub": sub }))
}

fn titles(page: &gatehouse_store::Page) -> Vec<String> {
    let at = page.rows.position("title").unwrap();
    page.rows
        .rows
        .iter()
        .map(|r| r[at].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_list_runs_only_for_callers_with_its_policy_inputs() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let memos = s.entity("Memo").unwrap();
        let system = AccessContext::system();
        for (owner, title) in [("alice", "a"), ("bob", "b")] {
            memos
                .insert(&system, row(json!({"owner": owner, "title": title})))
                .await
                .unwrap();
        }
        let (alice, bob) = (caller("alice", &[]), caller("bob", &[]));
        let prepared = memos.prepare(&alice, &ListQuery::default()).unwrap();
        assert_eq!(titles(&prepared.run(&alice, &[]).await.unwrap()), ["a"]);
        // Another caller, whose policy inputs differ, is refused: never
        // answered with alice's rows.
        for other in [&bob, &system] {
            let refused = prepared.run(other, &[]).await;
            assert!(
                matches!(refused, Err(StoreError::Internal(_))),
                "{}: {refused:?}",
                db.backend()
            );
        }
        // The same inputs are the same caller.
        let alice_again = caller("alice", &[]);
        assert_eq!(
            titles(&prepared.run(&alice_again, &[]).await.unwrap()),
            ["a"]
        );
        assert_eq!(
            memos.statement_caller(&alice, &[]),
            alice.key(),
            "a policy keys statements by the caller"
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_list_checks_the_scopes_of_compared_fields_on_every_run() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let notes = s.entity("Note").unwrap();
        let q = ListQuery {
            filter: Some(Filter::cmp("grade", FilterOp::Gte, json!(3))),
            ..Default::default()
        };
        let (grader, student) = (caller("t", &["grades"]), caller("s", &[]));
        // Without a policy the statement serves every caller...
        assert_eq!(notes.statement_caller(&student, &[]), "");
        let prepared = notes.prepare(&grader, &q).unwrap();
        prepared.run(&grader, &[]).await.unwrap();
        // ...but comparing `grade` still needs its scope.
        assert!(matches!(
            prepared.run(&student, &[]).await,
            Err(StoreError::Forbidden { .. })
        ));
        assert!(matches!(
            notes.prepare(&student, &q),
            Err(StoreError::Forbidden { .. })
        ));
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_binds_other_texts_where_the_request_bound_its_own() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let notes = s.entity("Note").unwrap();
        let system = AccessContext::system();
        let mut ids = Vec::new();
        for title in ["one", "two"] {
            let r = notes
                .insert(&system, row(json!({"title": title})))
                .await
                .unwrap();
            ids.push(r["id"].as_str().unwrap().to_string());
        }
        let by_id = |texts: &[&str]| {
            Some(ListQuery {
                filter: Some(Filter::eq("id", texts[0])),
                limit: Some(2),
                ..Default::default()
            })
        };
        let template = notes
            .prepare_template(&system, &[&ids[0]], by_id)
            .unwrap()
            .expect("a lookup by id is one statement");
        assert_eq!(
            titles(&template.run(&system, &[&ids[1]]).await.unwrap()),
            ["two"]
        );
        assert_eq!(
            titles(&template.run(&system, &[&ids[0]]).await.unwrap()),
            ["one"]
        );
        // The number of texts is the template's.
        assert!(template.run(&system, &[]).await.is_err());
        // A NUL is refused, never bound.
        assert!(matches!(
            template.run(&system, &["a\0b"]).await,
            Err(StoreError::Invalid { .. })
        ));
        // A request whose own text is refused says so; the shape is not judged.
        assert!(matches!(
            notes.prepare_template(&system, &["a\0b"], by_id),
            Err(StoreError::Invalid { .. })
        ));
        // A substring is bound as it is (no LIKE pattern): a parameter too.
        let contains = |texts: &[&str]| {
            Some(ListQuery {
                filter: Some(Filter::cmp("title", FilterOp::Contains, json!(texts[0]))),
                ..Default::default()
            })
        };
        let template = notes
            .prepare_template(&system, &["on"], contains)
            .unwrap()
            .expect("a substring is bound verbatim");
        assert_eq!(
            titles(&template.run(&system, &["tw"]).await.unwrap()),
            ["two"]
        );
        // A text that only some texts can be (a date) is no parameter: the
        // store checks each value, which a template would skip.
        let due = |texts: &[&str]| {
            Some(ListQuery {
                filter: Some(Filter::eq("due", texts[0])),
                ..Default::default()
            })
        };
        assert!(
            notes
                .prepare_template(&system, &["2024-02-29"], due)
                .unwrap()
                .is_none()
        );
        s.close().await;
    }
}
