//! The change feed: every committed write yields an event; with PostgreSQL,
//! events cross instances.

use std::time::Duration;

use gatehouse_store::{ChangeEvent, ChangeKind, Store, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::json;
use tokio::sync::broadcast::Receiver;

use crate::common::{SDL, author, book, row};
use crate::conformance;

async fn next(rx: &mut Receiver<ChangeEvent>) -> ChangeEvent {
    match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
        Ok(Ok(ev)) => ev,
        other => panic!("no change event: {other:?}"),
    }
}

async fn nothing(rx: &mut Receiver<ChangeEvent>) {
    if let Ok(ev) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

/// Two stores on one fresh PostgreSQL database (two instances, each with
/// its own listener); `None` without PostgreSQL (the kit says so).
async fn two_instances() -> Option<(TestDb, Store, Store)> {
    let db = TestDb::postgres().await?;
    let one = db.open(SDL).await;
    let two = db.open_with(SDL, StoreOptions::default()).await.unwrap();
    Some((db, one, two))
}

conformance!(events_on_insert_update_replace_delete, |db, s| {
    let mut rx = s.subscribe();
    let a = author(&s, "A").await;
    let ev = next(&mut rx).await;
    assert_eq!(
        (ev.entity.as_str(), ev.kind, ev.id.as_str()),
        ("Author", ChangeKind::Created, a.as_str())
    );
    assert_eq!(ev.new.as_ref().unwrap()["name"], json!("A"));
    assert!(ev.old.is_none());

    let b = book(&s, &a, "T", json!({"year": 1})).await;
    let id = b["id"].as_str().unwrap();
    assert_eq!(next(&mut rx).await.kind, ChangeKind::Created);

    s.entity("Book")
        .unwrap()
        .update(
            &gatehouse_store::AccessContext::system(),
            id,
            row(json!({"year": 2})),
        )
        .await
        .unwrap();
    let ev = next(&mut rx).await;
    assert_eq!(ev.kind, ChangeKind::Updated);
    assert_eq!(ev.old.as_ref().unwrap()["year"], json!(1));
    assert_eq!(ev.new.as_ref().unwrap()["year"], json!(2));
    assert_eq!(ev.new.as_ref().unwrap()["title"], json!("T"));

    s.entity("Book")
        .unwrap()
        .replace(
            &gatehouse_store::AccessContext::system(),
            id,
            row(json!({"title": "R", "status": "LOST", "author": a})),
        )
        .await
        .unwrap();
    let ev = next(&mut rx).await;
    assert_eq!(ev.kind, ChangeKind::Updated);
    assert_eq!(ev.new.as_ref().unwrap()["year"], json!(null));

    s.entity("Book")
        .unwrap()
        .delete(&gatehouse_store::AccessContext::system(), id)
        .await
        .unwrap();
    let ev = next(&mut rx).await;
    assert_eq!((ev.kind, ev.id.as_str()), (ChangeKind::Deleted, id));
    assert!(ev.new.is_none());
    assert_eq!(ev.old.as_ref().unwrap()["title"], json!("R"));

    // failed and no-op writes publish nothing
    let _ = s
        .entity("Author")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            row(json!({"name": "A"})),
        )
        .await;
    let _ = s
        .entity("Book")
        .unwrap()
        .delete(&gatehouse_store::AccessContext::system(), id)
        .await;
    let _ = s
        .entity("Book")
        .unwrap()
        .update(
            &gatehouse_store::AccessContext::system(),
            "missing",
            row(json!({"year": 3})),
        )
        .await;
    nothing(&mut rx).await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_change_reaches_another_instance() {
    let Some((_db, one, two)) = two_instances().await else {
        return;
    };
    let mut rx_two = two.subscribe();
    let mut rx_one = one.subscribe();

    let a = author(&one, "Cross").await;
    let ev = next(&mut rx_two).await;
    assert_eq!(
        (ev.entity.as_str(), ev.kind, ev.id.as_str()),
        ("Author", ChangeKind::Created, a.as_str())
    );
    assert_eq!(ev.new.unwrap()["name"], json!("Cross"));
    // the writer sees its own event exactly once
    assert_eq!(next(&mut rx_one).await.id, a);

    // a row too large for a NOTIFY payload (8000 bytes) travels by reference
    let big = "x".repeat(20_000);
    let b = book(&two, &a, &big, json!({})).await;
    let ev = next(&mut rx_one).await;
    assert_eq!(ev.id, b["id"].as_str().unwrap());
    assert_eq!(next(&mut rx_two).await.id, ev.id, "own event, once");
    assert_eq!(ev.new.unwrap()["title"].as_str().unwrap().len(), 20_000);

    one.entity("Book")
        .unwrap()
        .delete(
            &gatehouse_store::AccessContext::system(),
            b["id"].as_str().unwrap(),
        )
        .await
        .unwrap();
    let ev = next(&mut rx_two).await;
    assert_eq!(ev.kind, ChangeKind::Deleted);
    assert_eq!(ev.old.unwrap()["title"].as_str().unwrap().len(), 20_000);

    assert_eq!(
        next(&mut rx_one).await.kind,
        ChangeKind::Deleted,
        "own event, once"
    );
    nothing(&mut rx_one).await;
    nothing(&mut rx_two).await;
    one.close().await;
    two.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_listener_loss_ends_the_feeds_that_may_have_missed_events() {
    let Some((db, one, two)) = two_instances().await else {
        return;
    };
    let mut before = two.subscribe();
    // Cut every listener's connection to this database (both stores').
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(!cut.is_empty(), "no listener connection found");
    // The receiver that may have missed events is closed, not left waiting.
    match tokio::time::timeout(Duration::from_secs(10), before.recv()).await {
        Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {}
        other => panic!("expected the feed to end, got {other:?}"),
    }
    // Once listening again, a new receiver gets other instances' events.
    let mut after = two.subscribe();
    let a = author(&one, "After the gap").await;
    assert_eq!(next(&mut after).await.id, a);
    one.close().await;
    two.close().await;
}
