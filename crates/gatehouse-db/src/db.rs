//! The two backends behind one small surface: run a built statement, decode
//! its rows by the column kinds the caller expects.

use crate::error::Error;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sea_query::{PostgresQueryBuilder, QueryStatementWriter, SqliteQueryBuilder, Values};

use crate::error::Backend;
use crate::pg::{Listener, PgConn, PgDb, PgTx};
use crate::sqlite::{ReadConn, SqliteDb, SqliteOptions, SqliteTx, WriteConn};
use crate::{DbError, Dialect, SqlKind};
use gatehouse_telemetry::handles::Handles;

/// A decoded result row, in select-list order.
pub type DbRow = Vec<serde_json::Value>;

/// A statement ready to run: SQL text and its parameters.
#[derive(Debug, Clone)]
pub struct Built {
    /// The SQL text, with the dialect's placeholders.
    pub sql: String,
    /// The bound values, in placeholder order.
    pub values: Values,
}

impl Built {
    /// Builds a sea-query statement for `dialect`.
    pub fn of<S: QueryStatementWriter>(dialect: Dialect, stmt: &S) -> Built {
        let (sql, values) = match dialect {
            Dialect::Sqlite => stmt.build(SqliteQueryBuilder),
            Dialect::Postgres => stmt.build(PostgresQueryBuilder),
        };
        Built { sql, values }
    }

    /// SQL built from identifiers of the Model and fixed text only, with
    /// values passed as parameters (`?` on SQLite, `$n` on PostgreSQL).
    pub fn raw(sql: impl Into<String>, values: Vec<sea_query::Value>) -> Built {
        Built {
            sql: sql.into(),
            values: Values(values),
        }
    }
}

/// How to open a [`Db`].
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Pool size (default: 4 SQLite readers, 10 PostgreSQL connections).
    /// On PostgreSQL (at least 3): one listens for other instances'
    /// changes, one per two runtime worker threads (rounded up, at most
    /// half the rest) carries single statements for every request, with a
    /// spare beside a single one, and the rest serve transactions (`docs/deployment.md`,
    /// "Pool sizing").
    pub max_connections: Option<u32>,
    /// How long to wait for a free connection before failing with
    /// [`DbError::Unavailable`] (also SQLite's busy timeout).
    pub acquire_timeout: std::time::Duration,
    /// SQLite only: fsync every commit (`synchronous=FULL`) instead of at
    /// checkpoints (`NORMAL`).
    pub sqlite_sync_every_commit: bool,
    /// How long a statement (a transaction's `COMMIT` included) may take
    /// before it is cancelled and fails with [`DbError::Timeout`]: every
    /// wait of a request on the database is bounded by it
    /// (`docs/design/database.md`, "Deadlines and cancellation"). DDL
    /// (migrations) is not bounded.
    pub statement_timeout: std::time::Duration,
}

impl DbOptions {
    /// The default statement timeout (the `[database]` section's).
    pub const DEFAULT_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
}

/// The connection pools of one backend.
#[derive(Debug, Clone)]
enum Pools {
    /// SQLite allows one writer at a time: writes go through one connection
    /// (no SQLITE_BUSY between our own writers), reads through read-only
    /// connections that WAL lets run beside the writer (see [`crate::sqlite`]).
    Sqlite(SqliteDb),
    /// PostgreSQL: a few connections shared by single statements, a pool
    /// for transactions (see [`crate::pg`]).
    Postgres(Arc<PgDb>),
}

/// The database of one instance: its pools and the statement counter.
/// Cheap to clone (shared inside).
#[derive(Debug, Clone)]
pub struct Db {
    pools: Pools,
    /// [`DbOptions::statement_timeout`].
    timeout: Duration,
    statements: Arc<AtomicU64>,
    /// PostgreSQL connections opened since the database was opened.
    opened: Arc<AtomicU64>,
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
            Pools::Postgres(Arc::new(
                PgDb::open(
                    url,
                    opts.max_connections.unwrap_or(10),
                    opts.acquire_timeout,
                    opened.clone(),
                )
                .await?,
            ))
        } else {
            return Err(DbError::invalid(
                "database",
                "the database URL must start with sqlite:// or postgres://",
            ));
        };
        Ok(Db {
            pools,
            timeout: opts.statement_timeout,
            statements: Arc::new(AtomicU64::new(0)),
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

    /// On PostgreSQL, a connection of its own listening on `channel`
    /// (`LISTEN`), for the change feed; `None` on SQLite.
    pub async fn listen(&self, channel: &str) -> Result<Option<Listener>, Error> {
        match &self.pools {
            Pools::Postgres(pg) => Ok(Some(pg.listen(channel).await?)),
            Pools::Sqlite(_) => Ok(None),
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

    /// A connection for reads outside a transaction. On PostgreSQL it is
    /// shared with other callers' single statements: never run transaction
    /// control (`BEGIN`, `SET`) on it; [`Db::begin`] gives a connection of
    /// its own.
    pub async fn read(&self) -> Result<Pooled, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteRead(db.read().await?),
            Pools::Postgres(pg) => PooledInner::Pg(pg.shared().await?, pg.clone()),
        };
        Ok(Pooled {
            inner,
            timeout: self.timeout,
            counter: self.statements.clone(),
        })
    }

    /// A connection for one auto-committed write statement (shared on
    /// PostgreSQL, as [`Db::read`]'s).
    pub async fn write(&self) -> Result<Pooled, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteWrite(db.write().await?),
            Pools::Postgres(pg) => PooledInner::Pg(pg.shared().await?, pg.clone()),
        };
        Ok(Pooled {
            inner,
            timeout: self.timeout,
            counter: self.statements.clone(),
        })
    }

    /// A write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so a read-then-write never fails half way with BUSY.
    pub async fn begin(&self) -> Result<Tx, DbError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => TxInner::Sqlite(db.begin().await?),
            Pools::Postgres(pg) => TxInner::Pg(Box::new(pg.begin().await?)),
        };
        Ok(Tx {
            inner,
            timeout: self.timeout,
            counter: self.statements.clone(),
        })
    }

    /// Closes the PostgreSQL transaction connections unused for `idle` or
    /// longer, and says how many: what the pool does by itself every 30 s
    /// for connections unused for 5 minutes (the shared connections stay).
    /// SQLite's connections are files, never closed (0).
    pub fn close_idle_connections(&self, idle: std::time::Duration) -> usize {
        match &self.pools {
            Pools::Sqlite(_) => 0,
            Pools::Postgres(pg) => pg.close_idle(idle),
        }
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
            Pools::Postgres(pg) => {
                let (size, idle, max) = pg.stats();
                vec![PoolStats {
                    pool: "main",
                    size,
                    idle,
                    max,
                }]
            }
        }
    }

    /// Closes the pools.
    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite(db) => db.close().await,
            Pools::Postgres(pg) => pg.close(),
        }
    }
}

fn open_error(backend: Backend, e: sqlx::Error) -> DbError {
    match e {
        sqlx::Error::Configuration(_) => DbError::invalid("database", e.to_string()),
        other => crate::error::open_failure(backend, other),
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
    timeout: Duration,
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
    /// A shared connection ([`crate::pg`]), and the database it is of
    /// (a statement stopped on it moves to a connection of its own).
    Pg(Arc<PgConn>, Arc<PgDb>),
}

impl Pooled {
    /// The same connection, its statements left out of
    /// [`Db::statements`]: for the server's own bookkeeping (table size
    /// estimates), which runs in the background and is no request's.
    pub fn uncounted(mut self) -> Pooled {
        self.counter = Arc::new(AtomicU64::new(0));
        self
    }

    /// The connection, for running statements.
    pub fn conn(&mut self) -> Conn<'_> {
        let inner = match &mut self.inner {
            PooledInner::SqliteRead(c) => ConnInner::Sqlite(c.conn()),
            PooledInner::SqliteWrite(c) => ConnInner::Sqlite(Some(c.conn())),
            PooledInner::Pg(c, db) => ConnInner::Pg {
                conn: Some(c),
                shared: Some(db),
            },
        };
        Conn {
            inner,
            timeout: self.timeout,
            counter: &self.counter,
        }
    }
}

/// An open transaction of either backend; dropped without commit, it rolls back.
#[derive(Debug)]
pub struct Tx {
    inner: TxInner,
    timeout: Duration,
    counter: Arc<AtomicU64>,
}

#[derive(Debug)]
enum TxInner {
    Sqlite(SqliteTx),
    /// Boxed: a pooled connection is large, and a transaction allocates anyway.
    Pg(Box<PgTx>),
}

impl Tx {
    /// The transaction's connection, for running statements.
    pub fn conn(&mut self) -> Conn<'_> {
        let inner = match &mut self.inner {
            TxInner::Sqlite(t) => ConnInner::Sqlite(t.conn()),
            TxInner::Pg(t) => ConnInner::Pg {
                conn: t.conn(),
                shared: None,
            },
        };
        Conn {
            inner,
            timeout: self.timeout,
            counter: &self.counter,
        }
    }

    /// Commits; on SQLite this returns once the commit is in the WAL (and,
    /// with `sqlite_sync_every_commit`, synced to disk).
    pub async fn commit(self) -> Result<(), Error> {
        match self.inner {
            TxInner::Sqlite(t) => t.commit()?,
            TxInner::Pg(t) => t.commit(self.timeout).await?,
        }
        Ok(())
    }

    /// Runs `statements`, whose results nobody reads (a notification,
    /// say), then commits. On PostgreSQL they travel with the `COMMIT`:
    /// one round trip for all of them. Should one fail, nothing is
    /// committed and its error is returned.
    pub async fn commit_after(mut self, statements: &[Built]) -> Result<(), Error> {
        if statements.is_empty() {
            return self.commit().await;
        }
        match self.inner {
            TxInner::Sqlite(_) => {
                for q in statements {
                    self.conn().execute(q.clone()).await?;
                }
                self.commit().await
            }
            TxInner::Pg(t) => {
                self.counter
                    .fetch_add(statements.len() as u64, Ordering::Relaxed);
                let _timer = QueryTimer::start("postgres", "execute");
                Ok(t.commit_after(statements, self.timeout).await?)
            }
        }
    }
}

/// A borrowed connection of either backend.
#[derive(Debug)]
pub struct Conn<'a> {
    inner: ConnInner<'a>,
    /// [`DbOptions::statement_timeout`].
    timeout: Duration,
    counter: &'a AtomicU64,
}

#[derive(Debug)]
enum ConnInner<'a> {
    /// `None` only for a connection already handed back (never, in practice).
    Sqlite(Option<&'a mut rusqlite::Connection>),
    Pg {
        /// `None` only for a transaction already ended (never, in practice).
        conn: Option<&'a PgConn>,
        /// For single statements on a shared connection (not in a
        /// transaction), its database: a statement stopped there runs on
        /// a connection of its own ([`PgDb::single`]), and a stale kept
        /// statement is run again ([`PgConn::fetch`]).
        shared: Option<&'a PgDb>,
    },
}

/// A PostgreSQL statement's run, boxed ([`Conn::fetch`]).
type BoxedRun<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

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
            ConnInner::Pg { .. } => "postgres",
        }
    }

    /// Runs a statement and decodes the first `kinds.len()` columns of every row.
    pub async fn fetch(&mut self, q: Built, kinds: &[SqlKind]) -> Result<Vec<DbRow>, Error> {
        Ok(self.fetch_raw(q, kinds).await?)
    }

    /// [Conn::fetch], with the driver's error.
    async fn fetch_raw(&mut self, q: Built, kinds: &[SqlKind]) -> Result<Vec<DbRow>, sqlx::Error> {
        self.counter.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(sql = %q.sql, "fetch");
        let _timer = QueryTimer::start(self.backend(), "fetch");
        let timeout = self.timeout;
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                let _deadline = crate::sqlite::Deadline::after(timeout);
                crate::sqlite::fetch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, &q, kinds)
            }
            ConnInner::Pg { conn, shared } => {
                let conn = conn.ok_or(sqlx::Error::PoolClosed)?;
                let shared = *shared;
                // Boxed: the deadline, the cancel and the move to a
                // connection of its own nest futures deep enough that
                // callers' futures would exceed the compiler's layout depth.
                let run: BoxedRun<'_, Vec<DbRow>> = Box::pin(async move {
                    match shared {
                        Some(db) => {
                            let run = conn.fetch(&q, kinds, true);
                            db.single(conn, &q.sql, timeout, run, async |own| {
                                own.fetch(&q, kinds, true).await
                            })
                            .await
                        }
                        None => {
                            let deadline = Instant::now() + timeout;
                            conn.bounded(deadline, timeout, conn.fetch(&q, kinds, false))
                                .await
                        }
                    }
                });
                run.await
            }
        }
    }

    /// Runs a statement and returns the number of rows it affected.
    pub async fn execute(&mut self, q: Built) -> Result<u64, Error> {
        Ok(self.execute_raw(q).await?)
    }

    /// [Conn::execute], with the driver's error.
    async fn execute_raw(&mut self, q: Built) -> Result<u64, sqlx::Error> {
        self.counter.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(sql = %q.sql, "execute");
        let _timer = QueryTimer::start(self.backend(), "execute");
        let timeout = self.timeout;
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                let _deadline = crate::sqlite::Deadline::after(timeout);
                crate::sqlite::execute(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, &q)
            }
            ConnInner::Pg { conn, shared } => {
                let conn = conn.ok_or(sqlx::Error::PoolClosed)?;
                let shared = *shared;
                // Boxed, as in `fetch`.
                let run: BoxedRun<'_, u64> = Box::pin(async move {
                    match shared {
                        Some(db) => {
                            let run = conn.execute(&q, true);
                            db.single(conn, &q.sql, timeout, run, async |own| {
                                own.execute(&q, true).await
                            })
                            .await
                        }
                        None => {
                            let deadline = Instant::now() + timeout;
                            conn.bounded(deadline, timeout, conn.execute(&q, false))
                                .await
                        }
                    }
                });
                run.await
            }
        }
    }

    /// Runs DDL or other parameterless SQL (not counted: it is not part of serving requests).
    pub async fn ddl(&mut self, sql: &str) -> Result<(), Error> {
        Ok(self.ddl_raw(sql).await?)
    }

    /// [Conn::ddl], with the driver's error.
    async fn ddl_raw(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        tracing::debug!(sql = %sql, "ddl");
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::batch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, sql)
            }
            ConnInner::Pg { conn, .. } => conn.ok_or(sqlx::Error::PoolClosed)?.batch(sql).await,
        }
    }

    /// Checks that the connection answers (within the statement timeout).
    pub async fn ping(&mut self) -> Result<(), Error> {
        Ok(self.ping_raw().await?)
    }

    /// [Conn::ping], with the driver's error.
    async fn ping_raw(&mut self) -> Result<(), sqlx::Error> {
        let timeout = self.timeout;
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::batch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, "SELECT 1")
            }
            ConnInner::Pg { conn, .. } => {
                let conn = conn.ok_or(sqlx::Error::PoolClosed)?;
                tokio::time::timeout(timeout, conn.batch("SELECT 1"))
                    .await
                    .unwrap_or_else(|_| Err(crate::pg::timed_out(timeout)))
            }
        }
    }
}
