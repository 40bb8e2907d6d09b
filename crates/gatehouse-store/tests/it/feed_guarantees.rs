//! The change feed's guarantee across instances (PostgreSQL): every
//! committed change reaches each subscriber, or the subscription ends; an
//! event is never skipped, and an idle instance keeps its subscriptions.
//! The faults are the tests' own.

use std::time::Duration;

use gatehouse_store::{ChangeEvent, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::json;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use crate::common::{SDL, author, book};

async fn recv(rx: &mut Receiver<ChangeEvent>, within: Duration) -> Result<ChangeEvent, String> {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Ok(ev)) => Ok(ev),
        Ok(Err(RecvError::Closed)) => Err("closed".into()),
        Ok(Err(e)) => Err(format!("{e}")),
        Err(_) => Err("nothing".into()),
    }
}

/// An event too large for a notification is stored and read back by the
/// listening instance. When that read finds nothing (here a trigger of the
/// test deletes every stored event as it is written), the subscriptions
/// of the listening instance end; they do not go on without the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_large_event_that_cannot_be_read_ends_the_subscriptions() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let one = db.open(SDL).await;
    let two = db.open_with(SDL, StoreOptions::default()).await.unwrap();
    // Subscribed before the first write, so its event cannot pass by first.
    let mut rx = two.subscribe();
    let a = author(&one, "A").await;
    // The author's event, small, comes through.
    assert_eq!(recv(&mut rx, Duration::from_secs(5)).await.unwrap().id, a);
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    admin
        .batch_execute(
            "CREATE FUNCTION lose_event() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN DELETE FROM _gatehouse_events WHERE id = NEW.id; RETURN NULL; END $$; \
             CREATE TRIGGER lose_event AFTER INSERT ON _gatehouse_events \
             FOR EACH ROW EXECUTE FUNCTION lose_event()",
        )
        .await
        .unwrap();
    let big = "x".repeat(10_000);
    book(&one, &a, &big, json!({})).await;
    // A small change after it: the big one must not be skipped for it.
    author(&one, "After").await;
    match recv(&mut rx, Duration::from_secs(10)).await {
        Err(e) if e == "closed" => {}
        other => panic!("expected the feed to end, got {other:?}"),
    }
    // New subscribers get the events from then on, large ones included.
    admin
        .batch_execute("DROP TRIGGER lose_event ON _gatehouse_events")
        .await
        .unwrap();
    let mut after = two.subscribe();
    let b = book(&one, &a, &big, json!({})).await;
    let ev = recv(&mut after, Duration::from_secs(5)).await.unwrap();
    assert_eq!(ev.id, b["id"].as_str().unwrap());
    assert_eq!(ev.new.unwrap()["title"], json!(big));
    one.close().await;
    two.close().await;
}

/// With `idle_session_timeout` set on the database, an idle instance's
/// listener is not ended: its subscriptions stay open and receive the
/// next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_idle_instance_keeps_its_subscriptions() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let name = db
        .url()
        .split('?')
        .next()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or_default()
        .to_string();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{name}\" SET idle_session_timeout = '500ms'"
        ))
        .await
        .unwrap();
    let one = db.open(SDL).await;
    let two = db.open_with(SDL, StoreOptions::default()).await.unwrap();
    let mut rx = two.subscribe();
    // Idle for several times the timeout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = author(&one, "A").await;
    match recv(&mut rx, Duration::from_secs(5)).await {
        Ok(ev) => assert_eq!(ev.id, a),
        Err(e) => panic!("the idle instance lost its subscription: {e}"),
    }
    one.close().await;
    two.close().await;
}
