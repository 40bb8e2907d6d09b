//! Several writes in one transaction (`Store::begin_write`): committed
//! together, or none of them; their events only after the commit; reads
//! through the transaction see its writes, other readers never see a part
//! of it (`docs/design/transactions.md`).

use std::time::Duration;

use gatehouse_store::{
    AccessContext, ChangeEvent, ChangeKind, ListQuery, Row, Store, StoreError, WriteTxn,
};
use gatehouse_testkit::TestDb;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::broadcast::Receiver;

use crate::common::{author, row};
use crate::conformance;

fn sys() -> AccessContext {
    AccessContext::system()
}

async fn names(s: &Store) -> Vec<String> {
    let mut out: Vec<String> = s
        .entity("Author")
        .unwrap()
        .list(&sys(), &ListQuery::default())
        .await
        .unwrap()
        .rows
        .into_rows()
        .into_iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

async fn no_event(rx: &mut Receiver<ChangeEvent>) {
    if let Ok(ev) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

async fn next(rx: &mut Receiver<ChangeEvent>) -> ChangeEvent {
    match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
        Ok(Ok(ev)) => ev,
        other => panic!("no change event: {other:?}"),
    }
}

conformance!(writes_of_one_transaction_commit_together, |db, s| {
    let mut rx = s.subscribe();
    let txn = s.begin_write();
    let authors = txn.entity("Author").unwrap();
    let d = authors
        .insert(&sys(), row(json!({"name": "D"})))
        .await
        .unwrap();
    let e = authors
        .insert(&sys(), row(json!({"name": "E"})))
        .await
        .unwrap();
    // Not yet visible to others, nor announced.
    assert!(names(&s).await.is_empty());
    no_event(&mut rx).await;
    // Visible through the transaction.
    let id = d["id"].as_str().unwrap();
    assert!(authors.get(&sys(), id).await.unwrap().is_some());
    assert_eq!(authors.count(&sys(), None).await.unwrap(), 2);
    txn.commit().await.unwrap();
    assert_eq!(names(&s).await, vec!["D", "E"]);
    let first = next(&mut rx).await;
    let second = next(&mut rx).await;
    assert_eq!(
        (first.kind, first.id.as_str(), second.id.as_str()),
        (ChangeKind::Created, id, e["id"].as_str().unwrap())
    );
});

// Each way a second write fails leaves the first unwritten, and announces
// nothing.
conformance!(a_failed_write_rolls_back_the_earlier_ones, |db, s| {
    author(&s, "Taken").await;
    let mut rx = s.subscribe();
    type Second = fn(WriteTxn) -> Pin<Box<dyn Future<Output = Result<Row, StoreError>> + Send>>;
    let cases: Vec<(&str, Second)> = vec![
        ("conflict", |txn| {
            Box::pin(async move {
                let authors = txn.entity("Author").unwrap();
                authors.insert(&sys(), row(json!({"name": "Taken"}))).await
            })
        }),
        ("not found", |txn| {
            Box::pin(async move {
                let authors = txn.entity("Author").unwrap();
                authors
                    .update(&sys(), "no-such-id", row(json!({"name": "Z"})))
                    .await
            })
        }),
        ("invalid value", |txn| {
            Box::pin(async move {
                let authors = txn.entity("Author").unwrap();
                authors.insert(&sys(), row(json!({"name": 5}))).await
            })
        }),
        ("missing reference", |txn| {
            Box::pin(async move {
                let books = txn.entity("Book").unwrap();
                let new = json!({"title": "T", "status": "AVAILABLE", "author": "nobody"});
                books.insert(&sys(), row(new)).await
            })
        }),
    ];
    for (cause, second) in cases {
        let txn = s.begin_write();
        let authors = txn.entity("Author").unwrap();
        authors
            .insert(&sys(), row(json!({"name": "First"})))
            .await
            .unwrap();
        let err = second(txn.clone()).await;
        assert!(err.is_err(), "{cause}: the second write succeeded");
        assert!(txn.is_failed(), "{cause}");
        // A later write is refused, and so is the commit.
        assert!(
            authors
                .insert(&sys(), row(json!({"name": "Later"})))
                .await
                .is_err(),
            "{cause}"
        );
        assert!(txn.commit().await.is_err(), "{cause}");
        assert_eq!(names(&s).await, vec!["Taken"], "{cause}");
    }
    no_event(&mut rx).await;
});

conformance!(
    a_dropped_transaction_rolls_back_and_frees_the_writer,
    |db, s| {
        {
            let txn = s.begin_write();
            txn.entity("Author")
                .unwrap()
                .insert(&sys(), row(json!({"name": "Dropped"})))
                .await
                .unwrap();
        }
        // The next write gets the (SQLite: only) write connection at once.
        tokio::time::timeout(Duration::from_secs(2), author(&s, "After"))
            .await
            .expect("the dropped transaction still holds the writer");
        assert_eq!(names(&s).await, vec!["After"]);
        let txn = s.begin_write();
        txn.entity("Author")
            .unwrap()
            .insert(&sys(), row(json!({"name": "RolledBack"})))
            .await
            .unwrap();
        txn.rollback().await;
        assert_eq!(names(&s).await, vec!["After"]);
    }
);

conformance!(
    a_cascading_delete_in_a_transaction_rolls_back_whole,
    |db, s| {
        let a = author(&s, "A").await;
        let b = crate::common::book(&s, &a, "T", json!({})).await;
        let txn = s.begin_write();
        let books = txn.entity("Book").unwrap();
        books
            .delete(&sys(), b["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        // A failing write afterwards (the author's name is taken) rolls the
        // delete back too.
        assert!(
            txn.entity("Author")
                .unwrap()
                .insert(&sys(), row(json!({"name": "A"})))
                .await
                .is_err()
        );
        assert!(txn.commit().await.is_err());
        assert!(
            s.entity("Book")
                .unwrap()
                .get(&sys(), b["id"].as_str().unwrap())
                .await
                .unwrap()
                .is_some()
        );
    }
);

/// A policy refusal is a failure like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_refusal_rolls_back_the_transaction() {
    const SDL: &str = r#"
type Query { tasks: [Task!]! }
type Task @policy(all: {org: "$org"}) {
  id: ID!
  org: String!
  title: String!
}
"#;
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let alice =
            crate::common::caller_with(&["read", "write"], json!({"sub": "alice", "org": "acme"}));
        let txn = s.begin_write();
        let tasks = txn.entity("Task").unwrap();
        tasks
            .insert(&alice, row(json!({"title": "mine"})))
            .await
            .unwrap();
        let refused = tasks
            .insert(&alice, row(json!({"title": "theirs", "org": "other"})))
            .await;
        assert!(
            matches!(refused, Err(StoreError::Forbidden { .. })),
            "{refused:?}"
        );
        assert!(txn.commit().await.is_err());
        let all = s
            .entity("Task")
            .unwrap()
            .list(&sys(), &ListQuery::default())
            .await
            .unwrap();
        assert!(all.rows.rows.is_empty(), "{}: {:?}", db.backend(), all.rows);
        s.close().await;
    }
}

// A reader running while a transaction is open sees none of it, then all
// of it once committed.
conformance!(
    a_concurrent_reader_never_sees_half_a_transaction,
    |db, s| {
        let txn = s.begin_write();
        let authors = txn.entity("Author").unwrap();
        authors
            .insert(&sys(), row(json!({"name": "One"})))
            .await
            .unwrap();
        let reader = {
            let s = s.clone();
            tokio::spawn(async move { names(&s).await })
        };
        assert!(reader.await.unwrap().is_empty());
        authors
            .insert(&sys(), row(json!({"name": "Two"})))
            .await
            .unwrap();
        assert!(names(&s).await.is_empty());
        txn.commit().await.unwrap();
        assert_eq!(names(&s).await, vec!["One", "Two"]);
    }
);
