//! The two backends behind one small surface: run a built statement, decode
//! its rows by the column kinds the caller expects. Everything above this
//! module is backend-agnostic apart from the [`Dialect`] it builds SQL for.

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
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Row as _, Transaction};

use crate::metric_handles::Handles;
use crate::sqlite::{ReadConn, SqliteDb, SqliteOptions, SqliteTx, WriteConn};
use crate::value::{Dialect, SqlKind, format_date};
use crate::{StoreError, StoreOptions, error::from_sqlx};

/// A decoded result row, in select-list order.
pub(crate) type DbRow = Vec<Json>;

/// A statement ready to run: SQL text and its parameters.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub sql: String,
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

/// The connection pools of one backend.
#[derive(Debug, Clone)]
pub(crate) enum Pools {
    /// SQLite allows one writer at a time: writes go through one connection
    /// (no SQLITE_BUSY between our own writers), reads through read-only
    /// connections that WAL lets run beside the writer (see [`crate::sqlite`]).
    Sqlite(SqliteDb),
    /// PostgreSQL: one pool for everything.
    Postgres(PgPool),
}

/// Both backends' pools plus the statement counter.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub pools: Pools,
    pub statements: Arc<AtomicU64>,
}

impl Db {
    /// Opens the pools for `url` (`sqlite://PATH` or `postgres://...`).
    pub async fn open(url: &str, opts: &StoreOptions) -> Result<Db, StoreError> {
        let pools = if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() || path == ":memory:" {
                return Err(StoreError::invalid(
                    "database",
                    "an SQLite database needs a file path (sqlite://PATH); in-memory databases are not supported",
                ));
            }
            if let Some(parent) = Path::new(path).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StoreError::invalid(
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
                .map_err(open_error)?,
            )
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)
                .map_err(|e| StoreError::invalid("database", format!("bad PostgreSQL URL: {e}")))?;
            let pool = PgPoolOptions::new()
                .max_connections(opts.max_connections.unwrap_or(10).max(2))
                .acquire_timeout(opts.acquire_timeout)
                .test_before_acquire(false)
                .connect_with(options)
                .await
                .map_err(open_error)?;
            Pools::Postgres(pool)
        } else {
            return Err(StoreError::invalid(
                "database",
                "the database URL must start with sqlite:// or postgres://",
            ));
        };
        Ok(Db {
            pools,
            statements: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The dialect of the backend.
    pub fn dialect(&self) -> Dialect {
        match self.pools {
            Pools::Sqlite(_) => Dialect::Sqlite,
            Pools::Postgres(_) => Dialect::Postgres,
        }
    }

    /// A connection for reads outside a transaction.
    pub async fn read(&self) -> Result<Pooled, StoreError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteRead(db.read().await.map_err(from_sqlx)?),
            Pools::Postgres(pool) => {
                PooledInner::Pg(Box::pin(pool.acquire()).await.map_err(from_sqlx)?)
            }
        };
        Ok(Pooled {
            inner,
            counter: self.statements.clone(),
        })
    }

    /// A connection for one auto-committed write statement.
    pub async fn write(&self) -> Result<Pooled, StoreError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => PooledInner::SqliteWrite(db.write().await.map_err(from_sqlx)?),
            Pools::Postgres(pool) => {
                PooledInner::Pg(Box::pin(pool.acquire()).await.map_err(from_sqlx)?)
            }
        };
        Ok(Pooled {
            inner,
            counter: self.statements.clone(),
        })
    }

    /// A write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so a read-then-write never fails half way with BUSY.
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        let inner = match &self.pools {
            Pools::Sqlite(db) => TxInner::Sqlite(db.begin().await.map_err(from_sqlx)?),
            Pools::Postgres(pool) => TxInner::Pg(Box::pin(pool.begin()).await.map_err(from_sqlx)?),
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
                idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
                max: pool.options().get_max_connections(),
            }],
        }
    }

    /// Closes the pools.
    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite(db) => db.close().await,
            Pools::Postgres(pool) => pool.close().await,
        }
    }
}

fn open_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Configuration(_) => StoreError::invalid("database", e.to_string()),
        other => from_sqlx(other),
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
pub(crate) struct Pooled {
    inner: PooledInner,
    counter: Arc<AtomicU64>,
}

#[derive(Debug)]
enum PooledInner {
    SqliteRead(ReadConn),
    SqliteWrite(WriteConn),
    Pg(PoolConnection<Postgres>),
}

impl Pooled {
    /// The connection, for running statements.
    pub fn conn(&mut self) -> Conn<'_> {
        let inner = match &mut self.inner {
            PooledInner::SqliteRead(c) => ConnInner::Sqlite(c.conn()),
            PooledInner::SqliteWrite(c) => ConnInner::Sqlite(Some(c.conn())),
            PooledInner::Pg(c) => ConnInner::Pg(c),
        };
        Conn {
            inner,
            counter: &self.counter,
        }
    }
}

/// An open transaction of either backend; dropped without commit, it rolls back.
#[derive(Debug)]
pub(crate) struct Tx {
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
pub(crate) struct Conn<'a> {
    inner: ConnInner<'a>,
    counter: &'a AtomicU64,
}

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
    /// most): registering the labels for every statement cost more than a
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
                let rows =
                    Box::pin(sqlx::query_with(AssertSqlSafe(q.sql), q.values).fetch_all(&mut **c))
                        .await?;
                rows.iter().map(|r| decode_pg(r, kinds)).collect()
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
            ConnInner::Pg(c) => Ok(Box::pin(
                sqlx::query_with(AssertSqlSafe(q.sql), q.values).execute(&mut **c),
            )
            .await?
            .rows_affected()),
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
                sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                    .execute(&mut **c)
                    .await?;
            }
        }
        Ok(())
    }

    /// Checks that the connection answers.
    #[allow(dead_code)]
    pub async fn ping(&mut self) -> Result<(), sqlx::Error> {
        match &mut self.inner {
            ConnInner::Sqlite(c) => {
                crate::sqlite::batch(c.as_deref_mut().ok_or(sqlx::Error::PoolClosed)?, "SELECT 1")
            }
            ConnInner::Pg(c) => c.ping().await,
        }
    }
}

fn decode_pg(row: &PgRow, kinds: &[SqlKind]) -> Result<DbRow, sqlx::Error> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let v = match kind {
            SqlKind::Text => row.try_get::<Option<String>, _>(i)?.map(Json::String),
            SqlKind::Date => match row.try_get::<Option<time::Date>, _>(i)? {
                Some(d) => Some(Json::String(
                    format_date(d).map_err(|e| sqlx::Error::Decode(e.to_string().into()))?,
                )),
                None => None,
            },
            SqlKind::Int => row.try_get::<Option<i32>, _>(i)?.map(Json::from),
            SqlKind::Count => row.try_get::<Option<i64>, _>(i)?.map(Json::from),
            SqlKind::Bytes => row
                .try_get::<Option<Vec<u8>>, _>(i)?
                .map(|b| Json::String(hex(&b))),
            SqlKind::Float => row
                .try_get::<Option<f64>, _>(i)?
                .and_then(serde_json::Number::from_f64)
                .map(Json::Number),
            SqlKind::Bool => row.try_get::<Option<bool>, _>(i)?.map(Json::Bool),
            SqlKind::Json => row.try_get::<Option<Json>, _>(i)?,
        };
        out.push(v.unwrap_or(Json::Null));
    }
    Ok(out)
}

/// Lowercase hex of `bytes`: how a [`SqlKind::Bytes`] column travels in a [`DbRow`].
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// The inverse of [`hex`]; `None` for anything that is not even-length hex.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|p| Some((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}
