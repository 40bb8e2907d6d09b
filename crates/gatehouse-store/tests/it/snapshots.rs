//! SQLite read connections keep their snapshot between statements only
//! while nothing was committed: a commit by any connection (here another
//! store on the same file, which our write connection never sees) is read
//! at once, and kept snapshots do not keep the WAL from starting over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gatehouse_store::{ListQuery, Store};
use gatehouse_testkit::TestDb;

use crate::common::{SDL, author};

async fn sqlite() -> TestDb {
    TestDb::sqlite()
}

fn file(db: &TestDb) -> String {
    db.sqlite_path().unwrap().display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_by_another_store_is_read_at_once() {
    let db = sqlite().await;
    let reader = db.open(SDL).await;
    let writer = db.open(SDL).await;
    for i in 0..300 {
        // Twice: the second read reuses the first one's snapshot.
        for _ in 0..2 {
            assert_eq!(authors(&reader).await, i);
        }
        author(&writer, &format!("a{i}")).await;
    }
    // A commit by a connection outside any store.
    let conn = rusqlite::Connection::open(file(&db)).unwrap();
    let before = authors(&reader).await;
    conn.execute("DELETE FROM author WHERE name = 'a0'", [])
        .unwrap();
    assert_eq!(authors(&reader).await, before - 1);
}

/// The number of authors, read as a list (counts are cached).
async fn authors(s: &Store) -> usize {
    s.entity("Author")
        .unwrap()
        .list(
            &gatehouse_store::AccessContext::system(),
            &ListQuery::default(),
        )
        .await
        .unwrap()
        .rows
        .into_rows()
        .len()
}

/// Frames in the WAL, as a separate connection sees them.
fn wal_frames(path: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_snapshots_let_the_wal_start_over() {
    let db = sqlite().await;
    let s = db.open(SDL).await;
    let stop = Arc::new(AtomicBool::new(false));
    // Readers that never pause for long, as under load.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    read(&s).await;
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for i in 0..1500 {
        author(&s, &format!("a{i}")).await;
    }
    // The checkpointer copies it all; a commit after that starts the WAL
    // over, unless a reader still reads from it. Commits until one does.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut frames = i64::MAX;
    for k in 0.. {
        author(&s, &format!("after {k}")).await;
        frames = wal_frames(&file(&db));
        if frames < 100 || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    assert!(frames < 100, "the WAL did not start over: {frames} frames");
}

async fn read(s: &Store) {
    let q = ListQuery {
        limit: Some(5),
        ..ListQuery::default()
    };
    s.entity("Author")
        .unwrap()
        .list(&gatehouse_store::AccessContext::system(), &q)
        .await
        .unwrap()
        .rows
        .into_rows();
}
