//! The two backends behind one small surface: run a built statement, decode
//! its rows by the column kinds the caller expects.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sea_query::{PostgresQueryBuilder, SqliteQueryBuilder, Values};
use sea_query_sqlx::{SqlxBinder, SqlxValues};
use serde_json::Value as Json;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, Postgres, Row as _, Transaction};

use crate::error::{Backend, open_failure};
use crate::sqlite::{ReadConn, SqliteDb, SqliteOptions, SqliteTx, WriteConn};
use crate::{DbError, Dialect, SqlKind, format_date};
use gatehouse_telemetry::handles::Handles;

/// A decoded result row, in select-list order.
pub type DbRow = Vec<Json>;

/// A statement ready to run: SQL text and its parameters.
#[derive(Debug, Clone)]
pub struct Built {
    /// The SQL text, with the dialect's placeholders.
    pub sql: String,
    /// The bound values, in placeholder order.
    pub values: SqlxValues,
}

impl Built {
    /// Builds a sea-query statement for `dialect`.
    pub fn of<S: SqlxBinder>(dialect: Dialect, stmt: &S) -> Built {
        let (sql, values) = match dialect {
            Dialect::Sqlite => stmt.build_sqlx(SqliteQueryBuilder),
            Dialect::Postgres => stmt.build_sqlx(PostgresQueryBuilder),
        };
        Built { sql, values }
    }

    /// SQL built from identifiers of the Model and fixed text only, with
    /// values passed as parameters (`?` on SQLite, `$n` on PostgreSQL).
    pub fn raw(sql: impl Into<String>, values: Vec<sea_query::Value>) -> Built {
        Built {
            sql: sql.into(),
            values: SqlxValues(Values(values)),
        }
    }
}

/// How to open a [`Db`].
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Pool size (default: 4 SQLite readers, 10 PostgreSQL connections).
    pub max_connections: Option<u32>,
    /// How long to wait for a free connection before failing with
    /// [`DbError::Unavailable`] (also SQLite's busy timeout).
    pub acquire_timeout: std::time::Duration,
    /// SQLite only: fsync every commit (`synchronous=FULL`) instead of at
    /// checkpoints (`NORMAL`).
    pub sqlite_sync_every_commit: bool,
}

/// The connection pools of one backend.
#[derive(Debug, Clone)]
enum Pools {
    /// SQLite allows one writer at a time: writes go through one connection
    /// (no SQLITE_BUSY between our own writers), reads through read-only
    /// connections that WAL lets run beside the writer (see [`crate::sqlite`]).
    Sqlite(SqliteDb),
    /// PostgreSQL: one pool for everything.
    Postgres(PgPool),
}

/// The database of one instance: its pools and the statement counter.
/// Cheap to clone (shared inside).
#[derive(Debug, Clone)]
pub struct Db {
    pools: Pools,
    statements: Arc<AtomicU64>,
    /// PostgreSQL connections kept between single statements ([`Warm`]).
    warm: Arc<Warm>,
    /// PostgreSQL connections opened since the database was opened.
    opened: Arc<AtomicU64>,
}

/// PostgreSQL connections kept out of the sqlx pool between single
/// statements (`Db::read`, `Db::write`), so the next statement skips the
/// pool.
///
/// Why: sqlx's pool tests every connection handed back to it with a
/// round trip to the server (`ping` in `return_to_pool`, a task spawned by
/// the connection's `Drop`), whatever the connection just did. For a
/// request made of one short read, that doubles the round trips and most
/// of the server's work per request. A connection is kept here only after
/// its last statement completed (a statement cancelled half way, or one
/// that failed, leaves it to the pool's test), each for at most
/// [`WARM_FOR`], after which the pool takes it back and applies its own
/// lifetime and idle rules.
///
/// Statements that find neither a kept connection nor an idle one in a
/// pool that has all its connections open wait here and in the pool at
/// once: a connection finished with is handed to the longest-waiting
/// statement directly (first come, first served, no round trip), or the
/// pool answers first. (Below its size, the pool opens a connection for the
/// caller; that is never raced, as a dropped `acquire` loses the
/// connection it was opening.) At most all but two
/// of the pool's connections are kept (none with a pool of 2): one is the
/// change-feed listener's, and one always goes back through the pool, so
/// its other users (the listener reconnecting, a notification's payload
/// read) are served. While a transaction of ours waits in the pool,
/// connections go back to it instead, and a transaction that finds the
/// pool without an idle connection hands every kept one back first.
#[derive(Debug, Default)]
struct Warm {
    state: std::sync::Mutex<WarmState>,
    max: usize,
    /// Set when the store closes: the pool's close waits for every
    /// connection, so none may be kept from then on.
    closed: std::sync::atomic::AtomicBool,
    /// Transactions of ours waiting in the pool ([`Waiting`]): while there
    /// are any, connections go back to the pool, which serves its waiters
    /// in order.
    waiting: AtomicU64,
}

/// A connection out of the pool and when it was taken out.
type Kept = (PoolConnection<Postgres>, Instant);

#[derive(Debug, Default)]
struct WarmState {
    idle: Vec<Kept>,
    /// Statements waiting for a connection, oldest first.
    waiters: std::collections::VecDeque<tokio::sync::oneshot::Sender<Kept>>,
}

/// Counts a caller waiting in the pool for as long as it lives (a
/// cancelled wait included).
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        // A pooled connection dropped goes back to the pool through a task
        // it spawns, which needs a runtime. A store dropped outside one
        // (after its runtime ended) closes its kept connections instead.
        if tokio::runtime::Handle::try_current().is_err()
            && let Ok(state) = self.state.get_mut()
        {
            for (conn, _) in state.idle.drain(..) {
                drop(conn.detach());
            }
        }
    }
}

/// How long a connection stays out of the sqlx pool ([`Warm`]).
const WARM_FOR: std::time::Duration = std::time::Duration::from_secs(30);

impl Warm {
    /// A kept connection, taken out of the pool less than [`WARM_FOR`]
    /// ago; else, when `wait`, a place in the queue of waiting statements.
    fn take(&self, wait: bool) -> Result<Kept, Option<tokio::sync::oneshot::Receiver<Kept>>> {
        let mut expired = Vec::new();
        let found = {
            let Ok(mut state) = self.state.lock() else {
                return Err(None);
            };
            loop {
                match state.idle.pop() {
                    Some((c, since)) if since.elapsed() < WARM_FOR => break Ok((c, since)),
                    Some(old) => expired.push(old),
                    None if wait && !self.closed.load(Ordering::Acquire) => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        state.waiters.push_back(tx);
                        break Err(Some(rx));
                    }
                    None => break Err(None),
                }
            }
        };
        // Handed back to the pool outside the lock.
        drop(expired);
        found
    }

    /// Hands `conn` (taken out of the pool at `since`) to the oldest
    /// waiting statement, or keeps it if there is room; else it goes back
    /// to the pool.
    fn put(&self, conn: PoolConnection<Postgres>, since: Instant) {
        if self.closed.load(Ordering::Acquire)
            || since.elapsed() >= WARM_FOR
            || self.waiting.load(Ordering::Acquire) > 0
        {
            return drop(conn);
        }
        let rejected = match self.state.lock() {
            Ok(mut state) => {
                let mut kept = (conn, since);
                loop {
                    match state.waiters.pop_front() {
                        // A waiter that gave up hands it back.
                        Some(waiter) => match waiter.send(kept) {
                            Ok(()) => break None,
                            Err(back) => kept = back,
                        },
                        None if state.idle.len() < self.max => {
                            state.idle.push(kept);
                            break None;
                        }
                        None => break Some(kept),
                    }
                }
            }
            Err(_) => Some((conn, since)),
        };
        drop(rejected);
    }

    /// Hands every kept connection back to the pool and keeps none from
    /// now on; waiting statements turn to the pool.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiters = self
            .state
            .lock()
            .map(|mut state| std::mem::take(&mut state.waiters))
            .unwrap_or_default();
        drop(waiters);
        self.clear();
    }

    /// Hands every kept connection back to the pool.
    fn clear(&self) {
        let all = self
            .state
            .lock()
            .map(|mut state| std::mem::take(&mut state.idle))
            .unwrap_or_default();
        drop(all);
    }

    fn len(&self) -> usize {
        self.state.lock().map_or(0, |state| state.idle.len())
    }
}

impl Db {
    /// Opens the pools for `url` (`sqlite://PATH` or `postgres://...`).
    pub async fn open(url: &str, opts: &DbOptions) -> Result<Db, DbError> {
        let opened = Arc::new(AtomicU64::new(0));
        let pools = if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() || path == ":memory:" {
                return Err(DbError::invalid(
                    "database",
                    "an SQLite database needs a file path (sqlite://PATH); in-memory databases are not supported",
                ));
            }
            if let Some(parent) = Path::new(path).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent).map_err(|e| {
                    DbError::invalid(
                        "database",
                        format!("cannot create {}: {e}", parent.display()),
                    )
                })?;
            }
            Pools::Sqlite(
                SqliteDb::open(SqliteOptions {
                    path: path.into(),
                    sync_every_commit: opts.sqlite_sync_every_commit,
                    acquire_timeout: opts.acquire_timeout,
                    max_readers: opts.max_connections.unwrap_or(4).max(1),
                })
                .map_err(|e| open_error(Backend::Sqlite, e))?,
            )
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)
                .map_err(|e| DbError::invalid("database", format!("bad PostgreSQL URL: {e}")))?;
            let counted = opened.clone();
            let pool = match PgPoolOptions::new()
                .max_connections(opts.max_connections.unwrap_or(10).max(2))
                .acquire_timeout(opts.acquire_timeout)
                .test_before_acquire(false)
                .after_connect(move |_, _| {
                    counted.fetch_add(1, Ordering::Relaxed);
                    Box::pin(async { Ok(()) })
                })
                .connect_with(options.clone())
                .await
            {
                Ok(pool) => pool,
                // The pool retries refused connections until its timeout
                // and then says only that it timed out: one direct attempt
                // says why (connection refused, no such host).
                Err(e @ sqlx::Error::PoolTimedOut) => {
                    let attempt = tokio::time::timeout(
                        opts.acquire_timeout,
                        <sqlx::PgConnection as sqlx::Connection>::connect_with(&options),
                    )
                    .await;
                    let cause = match attempt {
                        Ok(Err(why)) => why,
                        _ => e,
                    };
                    return Err(open_error(Backend::Postgres, cause));
                }
                Err(e) => return Err(open_error(Backend::Postgres, e)),
            };
            Pools::Postgres(pool)
        } else {
            return Err(DbError::invalid(
                "database",
                "the database URL must start with sqlite:// or postgres://",
            ));
        };
        let mut warm = Warm::default();
        if let Pools::Postgres(pool) = &pools {
            // The change-feed listener holds one connection for good, and
            // one goes back through the pool (see `Warm`).
            warm.max = pool.options().get_max_connections().saturating_sub(2) as usize;
        }
        Ok(Db {
            pools,
            statements: Arc::new(AtomicU64::new(0)),
            warm: Arc::new(warm),
            opened,
        })
    }

    /// The dialect of the backend.
    pub fn dialect(&self) -> Dialect {
        match self.pools {
            Pools::Sqlite(_) => Dialect::Sqlite,
            Pools::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The PostgreSQL pool, for the change-feed listener (`None` on SQLite).
    pub fn pg_pool(&self) -> Option<&PgPool> {
        match &self.pools {
            Pools::Postgres(pool) => Some(pool),
            Pools::Sqlite(_) => None,
        }
    }

    /// How many PostgreSQL connections were opened since the database was
    /// opened (0 on SQLite): a steady load reuses its connections, so this
    /// stays at the pool's size.
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// How many statements were sent since the database was opened
    /// (queries and writes, not transaction control or DDL).
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// A connection for reads outside a transaction.
    pub async fn read(&self) -> Result<Pooled, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteRead(db.read().await?),
            Pools::Postgres(pool) => self.pg(pool).await?,
        };
        Ok(Pooled {
            inner,
            counter: self.statements.clone(),
        })
    }

    /// A connection for one auto-committed write statement.
    pub async fn write(&self) -> Result<Pooled, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteWrite(db.write().await?),
            Pools::Postgres(pool) => self.pg(pool).await?,
        };
        Ok(Pooled {
            inner,
            counter: self.statements.clone(),
        })
    }

    /// A PostgreSQL connection for single statements: a kept one
    /// ([`Warm`]), else an idle one of the pool, else the first of a kept
    /// one handed over and the pool's wait.
    async fn pg(&self, pool: &PgPool) -> Result<PooledInner, DbError> {
        let (conn, since) = match self.warm.take(false) {
            Ok(kept) => kept,
            Err(_) => match pool.try_acquire() {
                Some(c) => (c, Instant::now()),
                // Not at its size yet: the pool opens a connection at once.
                // A connection being opened is lost if its `acquire` is
                // dropped, so it is never raced with a hand-over.
                None if pool.size() < pool.options().get_max_connections() => {
                    (Box::pin(pool.acquire()).await?, Instant::now())
                }
                None => {
                    // The pool's `acquire` future is large (copying it
                    // dominates a request's `memcpy`): only built here.
                    let acquire = Box::pin(pool.acquire());
                    match self.warm.take(true) {
                        Ok(kept) => kept,
                        Err(None) => (acquire.await?, Instant::now()),
                        Err(Some(handed)) => tokio::select! {
                            biased;
                            Ok(kept) = handed => kept,
                            c = acquire => (c?, Instant::now()),
                        },
                    }
                }
            },
        };
        Ok(PooledInner::Pg {
            conn: Some(conn),
            since,
            clean: false,
            warm: self.warm.clone(),
        })
    }

    /// A write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so a read-then-write never fails half way with BUSY.
    pub async fn begin(&self) -> Result<Tx, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => TxInner::Sqlite(db.begin().await?),
            Pools::Postgres(pool) => {
                // Kept connections are out of the pool: when it has no idle
                // one, hand them back rather than wait for a busy one.
                if pool.num_idle() == 0 {
                    self.warm.clear();
                }
                let _waiting = Waiting::new(&self.warm.waiting);
                TxInner::Pg(Box::pin(pool.begin()).await?)
            }
        };
        Ok(Tx {
            inner,
            counter: self.statements.clone(),
        })
    }

    /// `(pool name, open connections, idle connections, maximum)` of every pool.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        match &self.pools {
            Pools::Sqlite(db) => {
                let stats = |pool, (size, idle, max)| PoolStats {
                    pool,
                    size,
                    idle,
                    max,
                };
                vec![
                    stats("read", db.read_stats()),
                    stats("write", db.write_stats()),
                ]
            }
            Pools::Postgres(pool) => vec![PoolStats {
                pool: "main",
                size: pool.size(),
                idle: u32::try_from(pool.num_idle() + self.warm.len()).unwrap_or(u32::MAX),
                max: pool.options().get_max_connections(),
            }],
        }
    }

    /// Closes the pools.
    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite(db) => db.close().await,
            Pools::Postgres(pool) => {
                // The pool waits for every connection out of it.
                self.warm.close();
                pool.close().await;
            }
        }
    }
}

fn open_error(backend: Backend, e: sqlx::Error) -> DbError {
    match e {
        sqlx::Error::Configuration(_) => DbError::invalid("database", e.to_string()),
        other => open_failure(backend, other),
    }
}

/// The state of one connection pool, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// `read` or `write` (SQLite), `main` (PostgreSQL).
    pub pool: &'static str,
    /// Open connections, idle or in use.
    pub size: u32,
    /// Open connections not in use.
    pub idle: u32,
    /// The most connections the pool opens.
    pub max: u32,
}

/// A pooled connection of either backend.
#[derive(Debug)]
pub struct Pooled {
    inner: PooledInner,
    counter: Arc<AtomicU64>,
}

#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "a SQLite read connection carries its snapshot's WAL state (100 bytes); boxing it would allocate per statement"
)]
enum PooledInner {
    SqliteRead(ReadConn),
    SqliteWrite(WriteConn),
    Pg {
        /// `None` once handed on (in `Drop`).
        conn: Option<PoolConnection<Postgres>>,
        /// When it was taken out of the pool.
        since: Instant,
        /// Whether its last statement ran to completion: only then is it
        /// kept ([`Warm`]) instead of going back to the pool's test.
        clean: bool,
        warm: Arc<Warm>,
    },
}

impl Pooled {
    /// The connection, for running statements.
    pub fn conn(&mut self) -> Conn<'_> {
        let (inner, clean) = match &mut self.inner {
            PooledInner::SqliteRead(c) => (ConnInner::Sqlite(c.conn()), None),
            PooledInner::SqliteWrite(c) => (ConnInner::Sqlite(Some(c.conn())), None),
            PooledInner::Pg { conn, clean, .. } => match conn {
                Some(c) => (ConnInner::Pg(c), Some(clean)),
                None => (ConnInner::Sqlite(None), None),
            },
        };
        Conn {
            inner,
            counter: &self.counter,
            clean,
        }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let PooledInner::Pg {
            conn,
            since,
            clean: true,
            warm,
        } = &mut self.inner
            && let Some(c) = conn.take()
        {
            warm.put(c, *since);
        }
    }
}

/// An open transaction of either backend; dropped without commit, it rolls back.
#[derive(Debug)]
pub struct Tx {
    inner: TxInner,
    counter: Arc<AtomicU64>,
}

#[derive(Debug)]
enum TxInner {
    Sqlite(SqliteTx),
    Pg(Transaction<'static, Postgres>),
}

impl Tx {
    /// The transaction's connection, for running statements.
    pub fn conn(&mut self) -> Conn<'_> {
        let inner = match &mut self.inner {
            TxInner::Sqlite(t) => ConnInner::Sqlite(t.conn()),
            TxInner::Pg(t) => ConnInner::Pg(t),
        };
        Conn {
            inner,
            counter: &self.counter,
            clean: None,
        }
    }

    /// Commits; on SQLite this returns once the commit is in the WAL (and,
    /// with `sqlite_sync_every_commit`, synced to disk).
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self.inner {
            TxInner::Sqlite(t) => t.commit(),
            TxInner::Pg(t) => t.commit().await,
        }
    }
}

/// A borrowed connection of either backend.
#[derive(Debug)]
pub struct Conn<'a> {
    inner: ConnInner<'a>,
    counter: &'a AtomicU64,
    /// A pooled PostgreSQL connection's "last statement completed" flag.
    clean: Option<&'a mut bool>,
}

#[derive(Debug)]
enum ConnInner<'a> {
    /// `None` only for a connection already handed back (never, in practice).
    Sqlite(Option<&'a mut rusqlite::Connection>),
    Pg(&'a mut PgConnection),
}

/// Records a statement's duration (`gatehouse_store_query_duration_seconds`)
/// when dropped, so failed and cancelled statements count too.
struct QueryTimer {
    backend: &'static str,
    kind: &'static str,
    start: Instant,
}

impl QueryTimer {
    fn start(backend: &'static str, kind: &'static str) -> Self {
        Self {
            backend,
            kind,
            start: Instant::now(),
        }
    }
}

impl Drop for QueryTimer {
    fn drop(&mut self) {
        let seconds = self.start.elapsed().as_secs_f64();
        QUERY_HISTOGRAMS.with_borrow_mut(|handles| {
            let h = handles.get(self.backend, self.kind, || {
                metrics::histogram!(
                    "gatehouse_store_query_duration_seconds",
                    "backend" => self.backend,
                    "kind" => self.kind
                )
            });
            h.record(seconds);
        });
    }
}

thread_local! {
    /// The statement histograms' handles, by backend and kind (four at
    /// most): registering the labels for every statement costs more than a
    /// SQLite read of a row by key.
    static QUERY_HISTOGRAMS: std::cell::RefCell<Handles<metrics::Histogram>> =
        const { std::cell::RefCell::new(Handles::new()) };
}

impl Conn<'_> {
    fn backend(&self) -> &'static str {
        match self.inner {
            ConnInner::Sqlite(_) => "sqlite",
            ConnInner::Pg(_) => "postgres",
        }
    }

    /// Runs a statement and decodes the first `kinds.len()` columns of every row.
    pub async fn fetch(&mut self, q: Built, kinds: &[SqlKind]) -> Result<Vec<DbRow>, sqlx::Error> {
        self.counter.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(sql = %q.sql, "fetch");
        let _timer = QueryTimer::start(self.backend(), "fetch");
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::fetch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, &q, kinds)
            }
            ConnInner::Pg(c) => {
                set(&mut self.clean, false);
                let query = sqlx::query_with(AssertSqlSafe(q.sql), q.values);
                let rows = outside_span(|| Executor::fetch_all(&mut **c, query)).await?;
                set(&mut self.clean, true);
                decode_pg_rows(&rows, kinds)
            }
        }
    }

    /// Runs a statement and returns the number of rows it affected.
    pub async fn execute(&mut self, q: Built) -> Result<u64, sqlx::Error> {
        self.counter.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(sql = %q.sql, "execute");
        let _timer = QueryTimer::start(self.backend(), "execute");
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::execute(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, &q)
            }
            ConnInner::Pg(c) => {
                set(&mut self.clean, false);
                let query = sqlx::query_with(AssertSqlSafe(q.sql), q.values);
                let done = outside_span(|| Executor::execute(&mut **c, query)).await?;
                set(&mut self.clean, true);
                Ok(done.rows_affected())
            }
        }
    }

    /// Runs DDL or other parameterless SQL (not counted: it is not part of serving requests).
    pub async fn ddl(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        tracing::debug!(sql = %sql, "ddl");
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::batch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, sql)?;
            }
            ConnInner::Pg(c) => {
                set(&mut self.clean, false);
                sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                    .execute(&mut **c)
                    .await?;
                set(&mut self.clean, true);
            }
        }
        Ok(())
    }

    /// Checks that the connection answers.
    pub async fn ping(&mut self) -> Result<(), sqlx::Error> {
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::batch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, "SELECT 1")
            }
            ConnInner::Pg(c) => c.ping().await,
        }
    }
}

/// Builds a sqlx statement future with no current tracing span.
///
/// sqlx runs a statement as a stream instrumented with the span current
/// when it is built (`in_current_span`), and enters and leaves that span
/// on every poll: once per row and more, in the subscriber, the registry
/// and the filter: about 12k instructions of a ten-row list under a
/// request's span. Built here, the outer stream carries no span, which
/// saves about 3.5k of them (`bench/RESULTS.md`); the inner stream, built
/// while the request runs, still carries it. Events still name the
/// request: while the statement runs, the request's own span is entered
/// around it. Nothing in building the future logs (it only takes the
/// statement's text and arguments).
fn outside_span<T>(build: impl FnOnce() -> T) -> T {
    tracing::dispatcher::with_default(&tracing::Dispatch::none(), build)
}

/// Sets a pooled PostgreSQL connection's "last statement completed" flag.
fn set(clean: &mut Option<&mut bool>, value: bool) {
    if let Some(flag) = clean {
        **flag = value;
    }
}

/// Decodes a result set. The column types are checked once, on the first
/// row (every row of a result has the same ones), and the values decoded
/// without sqlx's per-value check, which was about 3% of a list request's
/// instructions. A result whose columns do not all match (a `NULL` literal
/// has type `text`) keeps the per-value check, which passes nulls.
fn decode_pg_rows(rows: &[PgRow], kinds: &[SqlKind]) -> Result<Vec<DbRow>, sqlx::Error> {
    let checked = rows.first().is_some_and(|r| !pg_types_match(r, kinds));
    rows.iter().map(|r| decode_pg(r, kinds, checked)).collect()
}

/// Whether each column of `row` holds what its kind decodes: the check
/// `Row::try_get` makes for every non-null value.
fn pg_types_match(row: &PgRow, kinds: &[SqlKind]) -> bool {
    use sqlx::{Column as _, Type};
    row.len() >= kinds.len()
        && kinds.iter().enumerate().all(|(i, kind)| {
            let ty = row.column(i).type_info();
            match kind {
                SqlKind::Text => <String as Type<Postgres>>::compatible(ty),
                SqlKind::Date => <time::Date as Type<Postgres>>::compatible(ty),
                SqlKind::Int => <i32 as Type<Postgres>>::compatible(ty),
                SqlKind::Count => <i64 as Type<Postgres>>::compatible(ty),
                SqlKind::Bytes => <Vec<u8> as Type<Postgres>>::compatible(ty),
                SqlKind::Float => <f64 as Type<Postgres>>::compatible(ty),
                SqlKind::Bool => <bool as Type<Postgres>>::compatible(ty),
                SqlKind::Json => <Json as Type<Postgres>>::compatible(ty),
            }
        })
}

/// One row; with `checked`, each value's type is checked as it is read.
fn decode_pg(row: &PgRow, kinds: &[SqlKind], checked: bool) -> Result<DbRow, sqlx::Error> {
    fn get<'r, T>(row: &'r PgRow, i: usize, checked: bool) -> Result<T, sqlx::Error>
    where
        T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        if checked {
            row.try_get(i)
        } else {
            row.try_get_unchecked(i)
        }
    }
    let mut out = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let v = match kind {
            SqlKind::Text => get::<Option<String>>(row, i, checked)?.map(Json::String),
            SqlKind::Date => match get::<Option<time::Date>>(row, i, checked)? {
                Some(d) => Some(Json::String(
                    format_date(d).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                )),
                None => None,
            },
            SqlKind::Int => get::<Option<i32>>(row, i, checked)?.map(Json::from),
            SqlKind::Count => get::<Option<i64>>(row, i, checked)?.map(Json::from),
            SqlKind::Bytes => {
                get::<Option<Vec<u8>>>(row, i, checked)?.map(|b| Json::String(hex::encode(b)))
            }
            SqlKind::Float => get::<Option<f64>>(row, i, checked)?
                .and_then(serde_json::Number::from_f64)
                .map(Json::Number),
            SqlKind::Bool => get::<Option<bool>>(row, i, checked)?.map(Json::Bool),
            SqlKind::Json => get::<Option<Json>>(row, i, checked)?,
        };
        out.push(v.unwrap_or(Json::Null));
    }
    Ok(out)
}
