//! No acknowledged write is lost when the process is killed with SIGKILL.
//!
//! The test re-runs this test binary as a child (env `GATEHOUSE_DURABILITY_DB`
//! set) that inserts rows and prints each id once `insert` has returned; the
//! parent kills it with SIGKILL mid-stream, reopens the database and checks
//! that every printed id is there.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::{SDL, row};

const CHILD_ENV: &str = "GATEHOUSE_DURABILITY_DB";

/// The child's side, run only by `sqlite_acknowledged_writes_survive_sigkill`
/// (ignored otherwise, so a normal run never counts it as a pass). It
/// never returns: it inserts until it is killed, and fails when run on its
/// own, without the database its parent made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of sqlite_acknowledged_writes_survive_sigkill"]
async fn durability_child() {
    let url = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!(
            "durability_child is the child of sqlite_acknowledged_writes_survive_sigkill, \
             which sets {CHILD_ENV}: run that test instead"
        )
    });
    let s = gatehouse_testkit::open_store(&url, gatehouse_testkit::model(SDL), Default::default())
        .await
        .unwrap();
    let a = s
        .entity("Author")
        .unwrap()
        .insert(
            &gatehouse_store::AccessContext::system(),
            row(json!({"name": "durable"})),
        )
        .await
        .unwrap();
    println!("ACK {}", a["id"].as_str().unwrap());
    for i in 0.. {
        let b = s
            .entity("Book")
            .unwrap()
            .insert(
                &gatehouse_store::AccessContext::system(),
                row(json!({"title": format!("b{i}"), "status": "LOST", "author": a["id"]})),
            )
            .await
            .unwrap();
        println!("ACK {}", b["id"].as_str().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("durable.db").display());
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "durability::durability_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        // libtest may print its "test ... " prefix on the same line
        if let Some(id) = line.split_once("ACK ").map(|(_, id)| id.trim()) {
            acked.push(id.to_string());
            if acked.len() == 300 {
                // SIGKILL: no destructor, no flush, no clean close.
                child.kill().unwrap();
                break;
            }
        }
    }
    let _ = child.wait();
    assert_eq!(acked.len(), 300, "the child stopped early");
    let s = gatehouse_testkit::open_store(&url, gatehouse_testkit::model(SDL), Default::default())
        .await
        .unwrap();
    let author = s
        .entity("Author")
        .unwrap()
        .get(&gatehouse_store::AccessContext::system(), &acked[0])
        .await
        .unwrap();
    assert!(author.is_some(), "the first acknowledged row is lost");
    let books = crate::common::by_id(&s, "Book", &acked[1..]).await;
    let lost: Vec<&String> = acked[1..]
        .iter()
        .filter(|id| !books.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged rows lost after SIGKILL: {lost:?}"
    );
    eprintln!(
        "{} acknowledged rows, all present; {} rows stored",
        acked.len(),
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap()
            + 1
    );
}
