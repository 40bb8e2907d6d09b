//! Connections between statements: a small pool serves concurrent reads
//! and writes, statements cancelled half way leave no connection in a bad
//! state, and closing waits for nothing.

use std::time::Duration;

use gatehouse_store::{ListQuery, StoreOptions};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::{SDL, author, book, titles};

/// On PostgreSQL, single statements share a few connections while
/// transactions wait in the pool for one of their own (`gatehouse-db`'s
/// `pg` module): with 3 connections one of each beside the listener's,
/// with 10 more. None of them may starve, and none is opened twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_pool_serves_concurrent_reads_and_writes() {
    for size in [3, 4, 10] {
        for db in TestDb::each().await {
            pool_round(db, size).await;
        }
    }
}

async fn pool_round(db: TestDb, size: u32) {
    let opts = StoreOptions {
        max_connections: Some(size),
        acquire_timeout: Duration::from_secs(10),
        ..StoreOptions::default()
    };
    let s = db.open_with(SDL, opts).await.expect("store opens");
    let a = author(&s, "A").await;
    for _ in 0..20 {
        read_books(&s).await;
    }
    let stats = s.pool_stats();
    assert!(stats.iter().all(|p| p.size <= p.max), "{stats:?}");
    let tasks: Vec<_> = (0..80)
        .map(|i| {
            let s = s.clone();
            let a = a.clone();
            tokio::spawn(async move {
                if i % 4 == 0 {
                    book(&s, &a, &format!("t{i:02}"), json!({})).await;
                } else {
                    for _ in 0..10 {
                        read_books(&s).await;
                    }
                    s.entity("Book")
                        .unwrap()
                        .count(&gatehouse_store::AccessContext::system(), None)
                        .await
                        .expect("count");
                }
            })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(30), futures_all(tasks)).await;
    // Each connection is opened once: waiting statements never drop one
    // being opened (a race that reopened connections by the thousand).
    assert!(
        s.db().connections_opened() <= u64::from(size),
        "{} with {size} connections: {} opened",
        db.backend(),
        s.db().connections_opened()
    );
    assert!(
        all.is_ok(),
        "{} with {size} connections: reads and writes did not finish",
        db.backend()
    );
    assert_eq!(
        s.entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .unwrap(),
        20,
        "{}",
        db.backend()
    );
    tokio::time::timeout(Duration::from_secs(10), s.close())
        .await
        .unwrap_or_else(|_| panic!("{}: close did not finish", db.backend()));
}

async fn read_books(s: &gatehouse_store::Store) {
    s.entity("Book")
        .unwrap()
        .list(
            &gatehouse_store::AccessContext::system(),
            &ListQuery::default(),
        )
        .await
        .expect("read");
}

async fn futures_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.expect("task");
    }
}

/// A read cancelled at any point (its request went away) must not leave
/// its connection for the next statement with half an answer in it.
#[tokio::test]
async fn cancelled_reads_leave_connections_usable() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let a = author(&s, "A").await;
        for i in 0..30 {
            book(&s, &a, &format!("b{i:02}"), json!({"tags": ["x", "y"]})).await;
        }
        let all = ListQuery {
            order: vec![gatehouse_store::OrderBy {
                field: "title".into(),
                desc: false,
            }],
            ..ListQuery::default()
        };
        let expected: Vec<String> = (0..30).map(|i| format!("b{i:02}")).collect();
        for round in 0..200u64 {
            // Cancelled after 0-199 µs: before, during and after the statement.
            let _ = tokio::time::timeout(
                Duration::from_micros(round),
                s.entity("Book")
                    .unwrap()
                    .list(&gatehouse_store::AccessContext::system(), &all),
            )
            .await;
            let rows = s
                .entity("Book")
                .unwrap()
                .list(&gatehouse_store::AccessContext::system(), &all)
                .await
                .expect("read after a cancelled one");
            assert_eq!(
                titles(&rows.rows.into_rows()),
                expected,
                "{} round {round}",
                db.backend()
            );
        }
    }
}

/// A store whose runtime has ended can still be dropped: the connections
/// it keeps between statements are closed, not handed to a task.
#[test]
fn a_store_outliving_its_runtime_drops_cleanly() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let stores = rt.block_on(async {
        let mut out = Vec::new();
        for db in TestDb::each().await {
            let s = db.open(SDL).await;
            let a = author(&s, "A").await;
            book(&s, &a, "kept", json!({})).await;
            for _ in 0..5 {
                read_books(&s).await;
            }
            out.push((db, s));
        }
        out
    });
    drop(rt);
    for (db, s) in stores {
        drop(s);
        drop(db);
    }
}

/// Statements that hold their connection a while, many more of them than
/// connections, from a cold pool: every connection is opened once. (A
/// statement waiting for a hand-over used to drop the connection its pool
/// wait was opening, and the pool reopened connections by the thousand.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_statements_open_each_connection_once() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let opts = StoreOptions {
        max_connections: Some(6),
        acquire_timeout: Duration::from_secs(10),
        ..StoreOptions::default()
    };
    let s = db.open_with(SDL, opts).await.expect("store opens");
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    let mut c = s.db().read().await.expect("a connection");
                    c.conn()
                        .fetch(gatehouse_db::Built::raw("SELECT 1", vec![]), &[])
                        .await
                        .expect("statement");
                }
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(60), futures_all(tasks))
        .await
        .expect("statements finish");
    assert!(
        s.db().connections_opened() <= 6,
        "{} connections opened for a pool of 6",
        s.db().connections_opened()
    );
    s.close().await;
}

/// A count that many requests ask for at once is counted once: the others
/// wait for it instead of each counting the table (on every backend, with
/// the count cache cold as when it has just expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_counts_of_one_list_run_one_statement() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let a = author(&s, "A").await;
        for i in 0..5 {
            book(&s, &a, &format!("b{i}"), json!({})).await;
        }
        // On PostgreSQL the inserts' notifications come back through the
        // change feed and mark cached counts stale; a caller that starts
        // after one of them asks a newer question than the count running.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = s.statements();
        let counts: Vec<_> = (0..20)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.entity("Book")
                        .unwrap()
                        .count(&gatehouse_store::AccessContext::system(), None)
                        .await
                        .expect("count")
                })
            })
            .collect();
        for c in counts {
            assert_eq!(c.await.expect("task"), 5, "{}", db.backend());
        }
        assert_eq!(s.statements() - before, 1, "{}", db.backend());
        // A write makes the next count a new one.
        book(&s, &a, "b5", json!({})).await;
        let count = s
            .entity("Book")
            .unwrap()
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .expect("count");
        assert_eq!(count, 6, "{}", db.backend());
        s.close().await;
    }
}

/// Values decode by their column's kind. The column types are checked once
/// per result on PostgreSQL: nulls pass in any column (a `NULL` literal has
/// type `text`), and a column of another type is refused, not misread.
#[tokio::test]
async fn results_decode_by_kind_and_refuse_a_column_of_another_type() {
    use gatehouse_db::{Built, SqlKind};
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let mut c = s.db().read().await.expect("a connection");
        let rows = c
            .conn()
            .fetch(
                Built::raw(
                    "SELECT 1, 'a', CAST(2.5 AS DOUBLE PRECISION) UNION ALL SELECT 2, 'b', NULL",
                    vec![],
                ),
                &[SqlKind::Int, SqlKind::Text, SqlKind::Float],
            )
            .await
            .expect("rows decode");
        assert_eq!(
            rows,
            vec![
                vec![json!(1), json!("a"), json!(2.5)],
                vec![json!(2), json!("b"), Value::Null],
            ],
            "{}",
            db.backend()
        );
        let rows = c
            .conn()
            .fetch(
                Built::raw("SELECT NULL, 7", vec![]),
                &[SqlKind::Int, SqlKind::Int],
            )
            .await
            .expect("a null literal decodes in an Int column");
        assert_eq!(rows, vec![vec![Value::Null, json!(7)]], "{}", db.backend());
        drop(c);
        s.close().await;
    }
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let mut c = s.db().read().await.expect("a connection");
    let err = c
        .conn()
        .fetch(
            Built::raw("SELECT 5000000000::int8", vec![]),
            &[SqlKind::Int],
        )
        .await
        .expect_err("an int8 column is not read as an Int");
    assert!(err.to_string().contains("mismatched types"), "{err}");
    drop(c);
    s.close().await;
}

/// A transaction dropped before its commit (its request went away) is
/// rolled back at once: its row locks do not wait for its connection's
/// next use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_releases_its_locks_at_once() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let a = author(&s, "A").await;
    let update = |name: &str| {
        gatehouse_db::Built::raw(
            "UPDATE author SET name = $1 WHERE id = $2",
            vec![name.into(), a.as_str().into()],
        )
    };
    let mut tx = s.db().begin().await.expect("a transaction");
    assert_eq!(
        tx.conn()
            .execute(update("in the transaction"))
            .await
            .unwrap(),
        1
    );
    drop(tx);
    // The same row, from another connection: it would wait for the lock.
    let mut c = s.db().write().await.expect("a connection");
    let updated = tokio::time::timeout(Duration::from_secs(5), c.conn().execute(update("after")))
        .await
        .expect("the dropped transaction's lock is released")
        .expect("update");
    assert_eq!(updated, 1);
    drop(c);
    s.close().await;
}

/// Connections the server ends (a restart, an administrator) are
/// replaced: once the statements that were running on them have failed,
/// the next ones succeed on new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_ended_by_the_server_are_replaced() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    author(&s, "A").await;
    for _ in 0..10 {
        read_books(&s).await;
    }
    let before = s.db().connections_opened();
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query NOT LIKE 'LISTEN%'",
            &[],
        )
        .await
        .unwrap();
    assert!(!cut.is_empty(), "no connection to end");
    // A statement may still meet a connection whose end it has not seen.
    let mut served = 0;
    for _ in 0..100 {
        let read = s
            .entity("Book")
            .unwrap()
            .list(
                &gatehouse_store::AccessContext::system(),
                &ListQuery::default(),
            )
            .await;
        if read.is_ok() {
            served += 1;
            if served == 10 {
                break;
            }
        } else {
            served = 0;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(served, 10, "reads keep failing after the connections ended");
    assert!(s.db().connections_opened() > before);
    s.close().await;
}

/// A statement kept on a connection survives a migration that changes
/// its result's columns (another instance altering a table): PostgreSQL
/// refuses the stale statement once ("cached plan must not change result
/// type"), and a single statement is prepared afresh and answered. In a
/// transaction the refusal is returned (it aborted the transaction), and
/// the next use of that connection prepares afresh.
#[tokio::test]
async fn kept_statements_survive_a_column_type_change() {
    use gatehouse_db::{Built, SqlKind};
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    admin
        .batch_execute("CREATE TABLE stale_plan (v INTEGER); INSERT INTO stale_plan VALUES (7)")
        .await
        .unwrap();
    let read = || Built::raw("SELECT v FROM stale_plan", vec![]);
    let mut c = s.db().read().await.expect("a connection");
    let rows = c.conn().fetch(read(), &[SqlKind::Int]).await.unwrap();
    assert_eq!(rows, vec![vec![json!(7)]]);
    admin
        .batch_execute("ALTER TABLE stale_plan ALTER COLUMN v TYPE TEXT")
        .await
        .unwrap();
    let rows = c
        .conn()
        .fetch(read(), &[SqlKind::Text])
        .await
        .expect("the stale statement is prepared again");
    assert_eq!(rows, vec![vec![json!("7")]]);
    drop(c);

    // Transactions take their connections from a pool that opens them on
    // demand: one at a time, these three share one.
    let mut tx = s.db().begin().await.expect("a transaction");
    tx.conn().fetch(read(), &[SqlKind::Text]).await.unwrap();
    tx.commit().await.unwrap();
    admin
        .batch_execute("ALTER TABLE stale_plan ALTER COLUMN v TYPE INTEGER USING v::integer")
        .await
        .unwrap();
    let mut tx = s.db().begin().await.expect("a transaction");
    let err = tx
        .conn()
        .fetch(read(), &[SqlKind::Int])
        .await
        .expect_err("in a transaction the stale statement's refusal is returned");
    assert!(err.to_string().contains("cached plan"), "{err}");
    drop(tx);
    let mut tx = s.db().begin().await.expect("a transaction");
    let rows = tx.conn().fetch(read(), &[SqlKind::Int]).await.unwrap();
    assert_eq!(rows, vec![vec![json!(7)]]);
    tx.commit().await.unwrap();
    s.close().await;
}

/// A slow single statement holds up only itself: PostgreSQL answers a
/// connection's statements in order, so once its connection has answered
/// nothing for a while, the statements that follow go to another shared
/// connection instead of queueing behind it. With one or two worker
/// threads (one active shared connection) that is the spare connection.
#[tokio::test]
async fn a_slow_statement_does_not_hold_up_the_others() {
    slow_statement_round(30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_statement_does_not_hold_up_the_others_with_two_workers() {
    slow_statement_round(31).await;
}

/// `seconds`: how long the slow statement sleeps, which also tells the
/// concurrent tests' statements apart.
async fn slow_statement_round(seconds: u32) {
    let slow_sql = format!("SELECT pg_sleep({seconds})");
    use gatehouse_db::Built;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    author(&s, "A").await;
    // The statements' connections are opened before the slow one starts.
    for _ in 0..4 {
        read_books(&s).await;
    }
    let slow_db = s.db().clone();
    let sql = slow_sql.clone();
    let slow = tokio::spawn(async move {
        let mut c = slow_db.read().await.expect("a connection");
        c.conn()
            .fetch(Built::raw(sql, vec![]), &[])
            .await
            .map(|_| ())
    });
    // Until the slow statement is on its way.
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    for _ in 0..200 {
        let sleeping = admin
            .query(
                "SELECT 1 FROM pg_stat_activity WHERE query = $1 AND state = 'active'",
                &[&slow_sql],
            )
            .await
            .unwrap();
        if !sleeping.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Past the time a connection may go without an answer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reads = async {
        for _ in 0..20 {
            read_books(&s).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reads)
        .await
        .expect("reads beside the slow statement are answered");
    slow.abort();
    admin
        .execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query = $1",
            &[&slow_sql],
        )
        .await
        .unwrap();
    s.close().await;
}

/// `Tx::commit_after` sends statements whose results nobody reads (the
/// change feed's notifications) together with the `COMMIT`: on
/// PostgreSQL one round trip for all of them. They run in the
/// transaction, before it commits; should one fail, whether PostgreSQL
/// refuses it when it is prepared or when it runs (with the `COMMIT`
/// already sent behind it), nothing of the transaction is committed, its
/// error is returned, and the transactions that follow are unaffected.
#[tokio::test]
async fn statements_sent_with_the_commit_commit_with_it_or_not_at_all() {
    use gatehouse_db::{Built, SqlKind};
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let insert = |v: i32| {
            Built::raw(
                "INSERT INTO sent_with_commit (v) VALUES ($1)",
                vec![sea_query::Value::Int(Some(v))],
            )
        };
        let values = || async {
            let mut c = s.db().read().await.expect("a connection");
            let rows = c
                .conn()
                .fetch(
                    Built::raw("SELECT v FROM sent_with_commit ORDER BY v", vec![]),
                    &[SqlKind::Int],
                )
                .await
                .unwrap();
            rows.into_iter().map(|r| r[0].clone()).collect::<Vec<_>>()
        };
        let mut tx = s.db().begin().await.unwrap();
        tx.conn()
            .ddl("CREATE TABLE sent_with_commit (v INTEGER CHECK (v < 100))")
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let mut tx = s.db().begin().await.unwrap();
        tx.conn().execute(insert(1)).await.unwrap();
        tx.commit_after(&[insert(2), insert(3)]).await.unwrap();
        assert_eq!(values().await, vec![json!(1), json!(2), json!(3)]);

        // Refused when it runs, between two that succeed.
        let mut tx = s.db().begin().await.unwrap();
        tx.conn().execute(insert(4)).await.unwrap();
        let err = tx
            .commit_after(&[insert(5), insert(500), insert(6)])
            .await
            .expect_err("a statement that fails fails the commit");
        assert!(err.to_string().to_lowercase().contains("check"), "{err}");
        assert_eq!(values().await, vec![json!(1), json!(2), json!(3)]);

        // Refused when it is prepared.
        let mut tx = s.db().begin().await.unwrap();
        tx.conn().execute(insert(7)).await.unwrap();
        let err = tx
            .commit_after(&[
                insert(8),
                Built::raw("INSERT INTO no_such_table VALUES (1)", vec![]),
            ])
            .await
            .expect_err("a statement that cannot be prepared fails the commit");
        assert!(err.to_string().contains("no_such_table"), "{err}");
        assert_eq!(values().await, vec![json!(1), json!(2), json!(3)]);

        // The transactions that follow commit as usual.
        for v in [10, 11, 12] {
            let mut tx = s.db().begin().await.unwrap();
            tx.conn().execute(insert(v)).await.unwrap();
            tx.commit_after(&[]).await.unwrap();
        }
        // With no statement before them, in the transaction all the same.
        let tx = s.db().begin().await.unwrap();
        tx.commit_after(&[insert(13), insert(14)]).await.unwrap();
        let tx = s.db().begin().await.unwrap();
        tx.commit_after(&[insert(15), insert(600)])
            .await
            .expect_err("a statement that fails fails the commit");
        assert_eq!(
            values().await,
            [1, 2, 3, 10, 11, 12, 13, 14].map(|v| json!(v)).to_vec()
        );
        s.close().await;
    }
}

/// A shared connection the server ended is reopened in the background
/// while statements take the other one: with new connections held
/// unanswered (a server too busy to accept), every read is still served,
/// where each read sent to the lost connection used to wait for its
/// reopening (up to the acquire timeout, here a minute), and with it every
/// caller waiting on the same count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_do_not_wait_for_a_lost_shared_connection_to_reopen() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    db.open(SDL).await.close().await;
    let (proxy, url) = gatehouse_testkit::Proxy::postgres(db.url()).await;
    let opts = StoreOptions {
        // Four workers: two shared connections, taken in turn.
        max_connections: Some(10),
        acquire_timeout: Duration::from_secs(60),
        ..StoreOptions::default()
    };
    let model = gatehouse_testkit::model(SDL);
    let s = gatehouse_testkit::open_store(&url, model, opts)
        .await
        .unwrap();
    author(&s, "A").await;
    let open = |s: &gatehouse_store::Store| s.pool_stats()[0].size;
    // Both shared connections serve (the second opens on first use).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while open(&s) < 3 && std::time::Instant::now() < deadline {
        read_books(&s).await;
    }
    let before = open(&s);
    assert!(before >= 3, "{:?}", s.pool_stats());
    proxy.hold();
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query ILIKE 'SELECT%book%' LIMIT 1) one",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(ended.len(), 1, "no shared connection to end");
    // Until the store has seen the connection end, a read may still be
    // sent on it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while open(&s) >= before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(open(&s) < before, "{:?}", s.pool_stats());
    let reads = async {
        for _ in 0..20 {
            read_books(&s).await;
        }
        for _ in 0..5 {
            s.entity("Book")
                .unwrap()
                .count(&gatehouse_store::AccessContext::system(), None)
                .await
                .unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), reads)
        .await
        .expect("reads waited for a connection to open");
    proxy.restore();
    s.close().await;
}

/// The transactions' pool grows under load and shrinks back: connections
/// left unused are closed (every 30 s, those unused for 5 minutes; here at
/// once), the shared ones stay, and the next transaction opens one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_closes_connections_left_unused() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db.open(SDL).await;
    let writes: Vec<_> = (0..12)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                author(&s, &format!("A{i}")).await;
            })
        })
        .collect();
    futures_all(writes).await;
    let grown = s.pool_stats()[0].size;
    assert!(grown >= 3, "{:?}", s.pool_stats());
    assert_eq!(s.db().close_idle_connections(Duration::from_secs(3600)), 0);
    let closed = s.db().close_idle_connections(Duration::ZERO);
    assert!(closed >= 1, "{:?}", s.pool_stats());
    assert_eq!(s.pool_stats()[0].size, grown - closed as u32);
    author(&s, "after").await;
    read_books(&s).await;
    s.close().await;
}
