//! Bounded waits on the database: a statement past the statement timeout
//! is cancelled and reported as a timeout; a caller that gives up has its
//! statement cancelled; a slow or lock-blocked single statement does not
//! hold up other callers; a write refused at `COMMIT` is a conflict. The
//! faults are the tests' own: slow SQL, a row lock held from a second
//! connection.

use std::time::{Duration, Instant};

use gatehouse_db::{Built, DbError};
use gatehouse_store::{AccessContext, ListQuery, Store, StoreError, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::{SDL, author, book};

/// A statement that runs for minutes unless stopped: a counting recursive
/// query on SQLite, `pg_sleep` on PostgreSQL.
fn slow_sql(db: &TestDb) -> &'static str {
    match db.backend() {
        "sqlite" => {
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) \
             SELECT count(*) FROM c"
        }
        _ => "SELECT pg_sleep(60)",
    }
}

fn with_timeout(timeout: Duration) -> StoreOptions {
    StoreOptions {
        statement_timeout: timeout,
        ..StoreOptions::default()
    }
}

/// Statements of this test's PostgreSQL database still running `pattern`.
async fn running(db: &TestDb, pattern: &str) -> i64 {
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let row = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
            &[&pattern],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Waits up to 3 s for no statement matching `pattern` to be running.
async fn stops_running(db: &TestDb, pattern: &str) {
    let start = Instant::now();
    loop {
        let n = running(db, pattern).await;
        if n == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{n} statement(s) `{pattern}` still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_past_the_statement_timeout_is_cancelled_as_a_timeout() {
    for db in TestDb::each().await {
        let s = db
            .open_with(SDL, with_timeout(Duration::from_millis(400)))
            .await
            .unwrap();
        let sql = slow_sql(&db);
        // A single statement, and one in a transaction.
        for in_transaction in [false, true] {
            let start = Instant::now();
            let failed = if in_transaction {
                let mut tx = s.db().begin().await.unwrap();
                let r = tx.conn().fetch(Built::raw(sql, vec![]), &[]).await;
                drop(tx);
                r
            } else {
                let mut c = s.db().read().await.unwrap();
                c.conn().fetch(Built::raw(sql, vec![]), &[]).await
            };
            let e = failed.expect_err("the slow statement ends in an error");
            let elapsed = start.elapsed();
            assert!(
                elapsed < Duration::from_secs(3),
                "{}: the deadline held for {elapsed:?}",
                db.backend()
            );
            let e = StoreError::from(DbError::from(e));
            assert!(
                matches!(e, StoreError::Timeout),
                "{} (transaction: {in_transaction}): {e:?}",
                db.backend()
            );
            assert_eq!(e.code().as_str(), "TIMEOUT");
            if db.backend() == "postgres" {
                stops_running(&db, "SELECT pg_sleep%").await;
            }
        }
        // The store serves requests afterwards.
        let a = author(&s, "After").await;
        assert!(!a.is_empty());
        s.close().await;
    }
}

/// PostgreSQL's own timeouts (a `statement_timeout` set on the database,
/// SQLSTATE 57014; a `lock_timeout`, 55P03) are timeouts too, not
/// internal errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_own_timeouts_are_timeouts() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let a = author(&s, "A").await;
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET statement_timeout = '300ms'; \
             ALTER DATABASE \"{}\" SET lock_timeout = '200ms'",
            db_name(&db),
            db_name(&db)
        ))
        .await
        .unwrap();
    // Sessions opened from now on have the settings: a new store's.
    let late = db.open_with(SDL, StoreOptions::default()).await.unwrap();
    let mut c = late.db().read().await.unwrap();
    let e = c
        .conn()
        .fetch(Built::raw("SELECT pg_sleep(5)", vec![]), &[])
        .await
        .expect_err("the database's statement_timeout stops it");
    drop(c);
    assert!(
        matches!(StoreError::from(DbError::from(e)), StoreError::Timeout),
        "statement_timeout"
    );
    // A row lock held from outside: the update waits, then fails on the
    // lock timeout.
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM author WHERE id = '{a}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let e = late
        .entity("Author")
        .unwrap()
        .update(
            &AccessContext::system(),
            &a,
            crate::common::row(json!({"name": "B"})),
        )
        .await
        .expect_err("the row is locked");
    assert!(matches!(e, StoreError::Timeout), "lock_timeout: {e:?}");
    assert_eq!(e.code().as_str(), "TIMEOUT");
    admin.batch_execute("ROLLBACK").await.unwrap();
    late.close().await;
    s.close().await;
}

fn db_name(db: &TestDb) -> String {
    let path = db.url().split('?').next().unwrap_or_default();
    path.rsplit('/').next().unwrap_or_default().to_string()
}

/// A caller that gives up (its future dropped, as when an HTTP client goes
/// away) has its statement cancelled in PostgreSQL: single statements and
/// a transaction's alike. (On SQLite a statement runs on the calling
/// thread without yielding, so its future cannot be dropped half way: the
/// deadline bounds it, tested above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_caller_that_gives_up_has_its_statement_cancelled() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    for round in 0..3 {
        let gave_up = tokio::time::timeout(Duration::from_millis(300), async {
            if round == 2 {
                let mut tx = s.db().begin().await.unwrap();
                let r = tx
                    .conn()
                    .fetch(Built::raw("SELECT pg_sleep(30)", vec![]), &[])
                    .await;
                drop(tx);
                r
            } else {
                let mut c = s.db().read().await.unwrap();
                c.conn()
                    .fetch(Built::raw("SELECT pg_sleep(30)", vec![]), &[])
                    .await
            }
        })
        .await;
        assert!(gave_up.is_err(), "round {round}: the caller gave up first");
        stops_running(&db, "SELECT pg_sleep%").await;
    }
    // Fast reads still work, on fresh connections where needed.
    let a = author(&s, "A").await;
    assert!(!a.is_empty());
    s.close().await;
}

async fn list_books(s: &Store) {
    let q = ListQuery {
        limit: Some(5),
        ..ListQuery::default()
    };
    s.entity("Book")
        .unwrap()
        .list(&AccessContext::system(), &q)
        .await
        .expect("list");
}

/// Single statements blocked on a row lock held from outside (the refresh
/// grant's `FOR UPDATE`, an update of a locked row) do not stand in front
/// of other callers' reads on the shared connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_blocked_statement_does_not_hold_up_other_callers() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let a = author(&s, "A").await;
    book(&s, &a, "T", json!({})).await;
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM author WHERE id = '{a}' FOR UPDATE"
        ))
        .await
        .unwrap();
    // Two waiting statements, on the shared connection and its spare.
    let mut blocked = Vec::new();
    for i in 0..2 {
        let s = s.clone();
        let a = a.clone();
        blocked.push(tokio::spawn(async move {
            let mut c = s.db().write().await.unwrap();
            c.conn()
                .execute(Built::raw(
                    "UPDATE author SET name = $1 WHERE id = $2",
                    vec![format!("B{i}").into(), a.into()],
                ))
                .await
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let start = Instant::now();
    for _ in 0..50 {
        list_books(&s).await;
    }
    let took = start.elapsed();
    let still_blocked = blocked.iter().all(|t| !t.is_finished());
    admin.batch_execute("ROLLBACK").await.unwrap();
    assert!(
        still_blocked,
        "the blocked statements ended before the reads"
    );
    assert!(
        took < Duration::from_secs(2),
        "50 reads took {took:?} behind the blocked statements"
    );
    // Once the lock is gone, the waiting writes are applied.
    for t in blocked {
        assert_eq!(t.await.unwrap().expect("update"), 1);
    }
    s.close().await;
}

/// A constraint checked at `COMMIT` (deferred) refuses the write as a
/// conflict, not an internal error, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_at_commit_is_a_conflict() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let (setup, first, second) = match db.backend() {
            "sqlite" => (
                "CREATE TABLE deferred_parent (id INTEGER PRIMARY KEY); \
                 CREATE TABLE deferred_child (id INTEGER PRIMARY KEY, parent INTEGER \
                 REFERENCES deferred_parent (id) DEFERRABLE INITIALLY DEFERRED)",
                "INSERT INTO deferred_child (id, parent) VALUES (1, 42)",
                "INSERT INTO deferred_child (id, parent) VALUES (2, 43)",
            ),
            _ => (
                "CREATE TABLE deferred_unique (v INTEGER, \
                 CONSTRAINT deferred_unique_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)",
                "INSERT INTO deferred_unique (v) VALUES (1)",
                "INSERT INTO deferred_unique (v) VALUES (1)",
            ),
        };
        let mut tx = s.db().begin().await.unwrap();
        tx.conn().ddl(setup).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = s.db().begin().await.unwrap();
        tx.conn().execute(Built::raw(first, vec![])).await.unwrap();
        tx.conn().execute(Built::raw(second, vec![])).await.unwrap();
        let e = tx.commit().await.expect_err("refused at commit");
        let e = StoreError::from(DbError::from(e));
        assert!(
            matches!(e, StoreError::Conflict { .. }),
            "{}: {e:?}",
            db.backend()
        );
        assert_eq!(e.code().as_str(), "CONFLICT");
        s.close().await;
    }
}
