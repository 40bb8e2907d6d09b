//! The SQLite backend's connections, on rusqlite.
//!
//! Statements run in-process on the calling task's thread. SQLite is a
//! library, not a server: an indexed, paged statement takes a few to a few
//! tens of microseconds, less than handing it to a worker thread and being
//! woken with the answer costs (sqlx-sqlite's design; `bench/RESULTS.md` has
//! the comparison). The price is that a slow
//! statement (a `_contains` filter over a large unindexed table) holds one
//! runtime worker while it runs; page sizes are bounded by `limits`.
//!
//! One write connection (SQLite has one writer at a time; an async mutex
//! queues our own writers instead of letting them meet SQLITE_BUSY) and a
//! bounded set of read-only connections, which WAL lets run beside it. A
//! read connection keeps its read transaction (its snapshot of the
//! database) from one statement to the next while the WAL index shows that
//! nothing was committed since it began ([`Reader`], [`crate::wal_index`]).
//!
//! Errors are reported as `sqlx::Error`s (a database error keeps SQLite's
//! extended code and message), so one classification serves both backends.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags, ffi};
use sea_query::Value;
use serde_json::Value as Json;
use sqlx::error::{DatabaseError, ErrorKind};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use crate::SqlKind;
use crate::db::{Built, DbRow};
use crate::wal_index::{Index, WalState};

/// Prepared statements kept per connection (sqlx's default is 100).
const STATEMENT_CACHE: usize = 256;

/// Virtual machine instructions between two checks of the statement's
/// deadline (a few tens of microseconds of work).
const DEADLINE_CHECK_OPS: std::ffi::c_int = 1000;

thread_local! {
    /// The deadline of the statement running on this thread, if any
    /// ([`Deadline`]). Statements run on the calling task's thread and
    /// never yield, so the thread is the statement's while it runs.
    static DEADLINE: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Bounds the statements run on this thread until dropped: SQLite
/// interrupts one that runs past the deadline (`SQLITE_INTERRUPT`,
/// [`crate::DbError::Timeout`]) through every connection's progress
/// handler. A statement runs on the calling task's thread without an
/// await, so its future cannot be dropped half way: a client that gives
/// up is noticed between statements, and the deadline bounds the one
/// running.
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline(DEADLINE.replace(Instant::now().checked_add(timeout)))
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        DEADLINE.set(self.0);
    }
}

/// The progress handler: whether the running statement is past its deadline.
fn past_deadline() -> bool {
    DEADLINE.get().is_some_and(|t| Instant::now() >= t)
}

/// How connections are opened.
#[derive(Debug, Clone)]
pub(crate) struct SqliteOptions {
    /// The database file.
    pub path: PathBuf,
    /// `synchronous=FULL` (fsync every commit) instead of `NORMAL`.
    pub sync_every_commit: bool,
    /// How long to wait for a connection (and SQLite's busy timeout).
    pub acquire_timeout: Duration,
    /// Most read connections.
    pub max_readers: u32,
}

/// The connections of one SQLite database.
#[derive(Debug, Clone)]
pub(crate) struct SqliteDb {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    opts: SqliteOptions,
    writer: Arc<tokio::sync::Mutex<Writer>>,
    readers: Arc<Mutex<Vec<Reader>>>,
    read_permits: Arc<Semaphore>,
    open_readers: Arc<AtomicU32>,
    /// Set by `close` (and when the last handle goes); also stops the checkpointer.
    closed: Arc<AtomicBool>,
    /// The WAL index, which kept snapshots are checked against; `None` if
    /// it cannot be read.
    index: Option<Index>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// The write connection.
#[derive(Debug)]
struct Writer {
    conn: Connection,
    /// Dropped after `conn` (see [`crate::wal_index`]).
    _index: Option<Index>,
}

/// How long a read connection keeps one snapshot at most, however current
/// the WAL index says it is: a bound in case the file read is not the one
/// SQLite uses.
const SNAPSHOT_FOR: Duration = Duration::from_millis(100);

/// A read transaction kept open on a read connection.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    /// The WAL index as read before the snapshot was taken: while it reads
    /// the same, nothing was committed or checkpointed since.
    wal: WalState,
    began: Instant,
}

impl Snapshot {
    fn current(&self, wal: Option<WalState>, now: Instant) -> bool {
        wal == Some(self.wal) && now.saturating_duration_since(self.began) < SNAPSHOT_FOR
    }
}

/// A read-only connection and the snapshot it keeps, if any.
///
/// Beginning and ending a read transaction takes and releases a read lock
/// in the WAL index: two `fcntl` calls, behind a mutex every reader of the
/// process takes (contended by the runtime's threads on every statement).
/// Checking that a kept one is current reads 100 bytes of that file.
/// Checkpoints end kept snapshots too: a reader that starts after
/// everything was copied reads the database file alone, which lets the next
/// commit start the WAL over, and a kept snapshot would hold that back.
#[derive(Debug)]
struct Reader {
    conn: Connection,
    snapshot: Option<Snapshot>,
    /// Without it, no snapshot is kept. After `conn`: dropped after it.
    index: Option<Index>,
    /// The count of open read connections, less one when this one closes.
    open: Arc<AtomicU32>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reader {
    fn open(db: &Inner) -> Result<Reader, sqlx::Error> {
        let conn = open_connection(&db.opts, true)?;
        db.open_readers.fetch_add(1, Ordering::Relaxed);
        Ok(Reader {
            conn,
            snapshot: None,
            index: db.index.clone(),
            open: db.open_readers.clone(),
        })
    }

    fn wal(&self) -> Option<WalState> {
        self.index.as_ref().and_then(Index::read)
    }

    /// Makes the next statement read the current state: the kept snapshot
    /// if it still is, else a new one (kept if the WAL index can be read).
    fn begin(&mut self) -> Result<(), sqlx::Error> {
        let now = Instant::now();
        let wal = self.wal();
        match self.snapshot {
            Some(s) if s.current(wal, now) && !self.conn.is_autocommit() => return Ok(()),
            Some(_) => self.end()?,
            None => {}
        }
        let Some(wal) = wal else {
            // Each statement in its own transaction, as SQLite does by itself.
            return Ok(());
        };
        // Deferred: the snapshot is taken by the first statement, after
        // `wal` was read.
        self.conn
            .prepare_cached("BEGIN")
            .and_then(|mut s| s.raw_execute())
            .map_err(to_sqlx)?;
        self.snapshot = Some(Snapshot { wal, began: now });
        Ok(())
    }

    /// Ends the kept snapshot.
    fn end(&mut self) -> Result<(), sqlx::Error> {
        self.snapshot = None;
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.raw_execute())
            .map(|_| ())
            .map_err(to_sqlx)
    }
}

/// Ends the snapshots of idle read connections that are no longer current,
/// so that they hold back neither a checkpoint nor the WAL's restart; a
/// connection that fails to end one is closed.
fn end_stale_snapshots(readers: &Mutex<Vec<Reader>>) {
    let Ok(mut idle) = readers.lock() else {
        return;
    };
    let now = Instant::now();
    idle.retain_mut(|r| match r.snapshot {
        Some(s) if !s.current(r.wal(), now) => r.end().is_ok(),
        _ => true,
    });
}

/// How often the background thread checkpoints the WAL.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(200);

/// WAL length (frames, about a page each) from which the checkpointer
/// finishes its round with the write connection held (SQLite's own
/// autocheckpoint threshold).
const CHECKPOINT_FINISH_FRAMES: i64 = 1000;

/// Starts the thread that checkpoints the WAL until `closed` is set.
///
/// A PASSIVE checkpoint never blocks readers or the writer, but under a
/// steady stream of commits it never catches up either: the WAL is only
/// rewound to its start by a write that finds it fully checkpointed, so it
/// grows without bound under steady token issuance, and every commit
/// appends pages the kernel has to allocate and zero. So each round copies what it can beside the writers,
/// then, when the WAL is longer than [`CHECKPOINT_FINISH_FRAMES`], holds the
/// write connection (writers wait asynchronously, no runtime thread blocks)
/// while it copies what was committed meanwhile, so the next commit starts
/// the WAL over.
fn spawn_checkpointer(
    opts: &SqliteOptions,
    closed: Arc<AtomicBool>,
    writer: std::sync::Weak<tokio::sync::Mutex<Writer>>,
    readers: Arc<Mutex<Vec<Reader>>>,
    index: Option<Index>,
) -> Result<(), sqlx::Error> {
    let conn = open_connection(opts, false)?;
    // (frames in the WAL, frames checkpointed), as of the checkpoint's start.
    let checkpoint = move || {
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
    };
    std::thread::Builder::new()
        .name("gatehouse-sqlite-checkpoint".into())
        .spawn(move || {
            // The WAL length a finished round left: while it is unchanged,
            // nothing was written since and there is nothing to finish.
            let mut finished_at = -1;
            while !closed.load(Ordering::Acquire) {
                std::thread::sleep(CHECKPOINT_INTERVAL);
                // Before (an old snapshot keeps frames from being copied)
                // and after (one begun before everything was copied keeps
                // the next commit from starting the WAL over).
                end_stale_snapshots(&readers);
                match checkpoint() {
                    Ok((log, _)) if log > CHECKPOINT_FINISH_FRAMES && log != finished_at => {
                        // Weak, so this thread does not keep the write
                        // connection open after the last handle went.
                        let Some(writer) = writer.upgrade() else {
                            break;
                        };
                        // A plain thread, not a runtime one: blocking here is fine.
                        let _writing = writer.blocking_lock();
                        match checkpoint() {
                            Ok((log, _)) => finished_at = log,
                            Err(e) => tracing::debug!(error = %e, "WAL checkpoint"),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "WAL checkpoint"),
                }
                end_stale_snapshots(&readers);
            }
            // The connection first (see `crate::wal_index`).
            drop(checkpoint);
            drop(index);
        })
        .map(|_| ())
        .map_err(sqlx::Error::Io)
}

impl SqliteDb {
    /// Opens (creating if missing) the database and its write connection.
    pub fn open(opts: SqliteOptions) -> Result<SqliteDb, sqlx::Error> {
        create_private(&opts.path)?;
        // Before the first connection, if another store of the process may
        // be using it (see `crate::wal_index`).
        let mut index = Index::open(&opts.path);
        let writer = open_connection(&opts, false)?;
        // WAL persists in the file; setting it needs the write connection.
        let mode: String = writer
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(to_sqlx)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(sqlx::Error::Configuration(
                format!("SQLite refused WAL mode (journal_mode = {mode})").into(),
            ));
        }
        // Checkpoints copy the WAL into the database file and sync it: done
        // by a commit (SQLite's default), that would stall the committing
        // task's runtime thread. A background thread does it instead.
        writer
            .execute_batch("PRAGMA wal_autocheckpoint = 0")
            .map_err(to_sqlx)?;
        if index.is_none() {
            // A read in WAL mode creates the index.
            writer
                .query_row("PRAGMA schema_version", [], |_| Ok(()))
                .map_err(to_sqlx)?;
            index = Index::open(&opts.path);
        }
        let closed = Arc::new(AtomicBool::new(false));
        let writer = Arc::new(tokio::sync::Mutex::new(Writer {
            conn: writer,
            _index: index.clone(),
        }));
        let readers = Arc::new(Mutex::new(Vec::new()));
        spawn_checkpointer(
            &opts,
            closed.clone(),
            Arc::downgrade(&writer),
            readers.clone(),
            index.clone(),
        )?;
        let max = opts.max_readers.max(1);
        Ok(SqliteDb {
            inner: Arc::new(Inner {
                writer,
                readers,
                read_permits: Arc::new(Semaphore::new(max as usize)),
                open_readers: Arc::new(AtomicU32::new(0)),
                closed,
                index,
                opts,
            }),
        })
    }

    /// A read-only connection.
    pub async fn read(&self) -> Result<ReadConn, sqlx::Error> {
        let permit = self.permit().await?;
        let idle = self.inner.readers.lock().ok().and_then(|mut r| r.pop());
        let mut reader = match idle {
            Some(r) => r,
            None => Reader::open(&self.inner)?,
        };
        // On failure the connection is closed (dropped), not pooled.
        reader.begin()?;
        Ok(ReadConn {
            reader: Some(reader),
            db: self.inner.clone(),
            _permit: permit,
        })
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, sqlx::Error> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        let wait = self.inner.read_permits.clone().acquire_owned();
        match tokio::time::timeout(self.inner.opts.acquire_timeout, wait).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(sqlx::Error::PoolClosed),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// The write connection, held until dropped.
    pub async fn write(&self) -> Result<WriteConn, sqlx::Error> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        let lock = self.inner.writer.clone().lock_owned();
        match tokio::time::timeout(self.inner.opts.acquire_timeout, lock).await {
            Ok(guard) if !self.inner.closed.load(Ordering::Acquire) => Ok(WriteConn { guard }),
            Ok(_) => Err(sqlx::Error::PoolClosed),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// A write transaction. `BEGIN IMMEDIATE` takes the write lock at once, so
    /// a read-then-write never fails half way with BUSY.
    pub async fn begin(&self) -> Result<SqliteTx, sqlx::Error> {
        let mut conn = self.write().await?;
        conn.conn()
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(to_sqlx)?;
        Ok(SqliteTx { conn: Some(conn) })
    }

    /// `(open, idle, max)` of the read connections.
    pub fn read_stats(&self) -> (u32, u32, u32) {
        let open = self.inner.open_readers.load(Ordering::Relaxed);
        let idle = self
            .inner
            .readers
            .lock()
            .map(|r| u32::try_from(r.len()).unwrap_or(u32::MAX))
            .unwrap_or(0);
        (open, idle, self.inner.opts.max_readers.max(1))
    }

    /// `(open, idle, max)` of the write connection.
    pub fn write_stats(&self) -> (u32, u32, u32) {
        let idle = u32::from(self.inner.writer.try_lock().is_ok());
        (1, idle, 1)
    }

    /// Refuses new work and closes the idle read connections; the write
    /// connection closes when the last handle goes.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.read_permits.close();
        if let Ok(mut r) = self.inner.readers.lock() {
            r.clear();
        }
    }
}

/// Creates the database file, when missing, readable by its owner only:
/// it holds password hashes, token records and sealed keys, and SQLite
/// would create it with the umask's mode (typically 0644). SQLite gives the
/// `-wal` and `-shm` files it creates later the database file's mode, so
/// they are private too. An existing file keeps its mode (it is the
/// operator's), with a warning when others may read it.
#[cfg(unix)]
fn create_private(path: &std::path::Path) -> Result<(), sqlx::Error> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // An empty file is a valid empty SQLite database. `create_new` so that
    // a file another process creates at the same moment is left alone.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if let Ok(meta) = std::fs::metadata(path)
                && meta.permissions().mode() & 0o077 != 0
            {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{:o}", meta.permissions().mode() & 0o777),
                    "the SQLite database is readable or writable by other users; \
                     consider chmod 600 (and its -wal and -shm files)"
                );
            }
            Ok(())
        }
        Err(e) => Err(sqlx::Error::Io(e)),
    }
}

#[cfg(not(unix))]
fn create_private(_path: &std::path::Path) -> Result<(), sqlx::Error> {
    Ok(())
}

fn open_connection(opts: &SqliteOptions, read_only: bool) -> Result<Connection, sqlx::Error> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&opts.path, flags).map_err(to_sqlx)?;
    conn.busy_timeout(opts.acquire_timeout).map_err(to_sqlx)?;
    conn.progress_handler(DEADLINE_CHECK_OPS, Some(past_deadline))
        .map_err(to_sqlx)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner's stability guarantee: a cached statement keeps
    // the plan it was prepared with. Without it SQLite prepares a statement
    // again whenever a parameter its planner looked at is bound to another
    // value (a `LIMIT ?`, a `LIKE ?`), which costs more than running it:
    // the outbox's claim, whose limit is the free send slots, was prepared
    // on nearly every run.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(to_sqlx)?;
    // WAL + NORMAL: a commit is in the WAL (the OS's page cache) before it is
    // acknowledged, so a killed process loses nothing; FULL also fsyncs every
    // commit, for power-loss durability.
    let sync = if opts.sync_every_commit {
        "FULL"
    } else {
        "NORMAL"
    };
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = {sync};"
    ))
    .map_err(to_sqlx)?;
    conn.create_scalar_function(
        crate::FOLD_FUNCTION,
        1,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            Ok(match ctx.get_raw(0) {
                ValueRef::Text(b) => Some(crate::fold_case(&String::from_utf8_lossy(b))),
                _ => None,
            })
        },
    )
    .map_err(to_sqlx)?;
    Ok(conn)
}

/// A pooled read-only connection, reading a current snapshot; back to the
/// pool when dropped.
#[derive(Debug)]
pub(crate) struct ReadConn {
    reader: Option<Reader>,
    db: Arc<Inner>,
    _permit: OwnedSemaphorePermit,
}

impl ReadConn {
    /// The connection (`None` never happens: only `Drop` takes it out).
    pub fn conn(&mut self) -> Option<&mut Connection> {
        self.reader.as_mut().map(|r| &mut r.conn)
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        if let Some(r) = self.reader.take()
            && !self.db.closed.load(Ordering::Acquire)
            && let Ok(mut idle) = self.db.readers.lock()
        {
            idle.push(r);
        }
    }
}

/// The write connection, held exclusively.
#[derive(Debug)]
pub(crate) struct WriteConn {
    guard: OwnedMutexGuard<Writer>,
}

impl WriteConn {
    pub fn conn(&mut self) -> &mut Connection {
        &mut self.guard.conn
    }
}

/// An open write transaction; dropped without [`SqliteTx::commit`], it rolls back.
#[derive(Debug)]
pub(crate) struct SqliteTx {
    conn: Option<WriteConn>,
}

impl SqliteTx {
    /// The connection (`None` never happens: only `commit` takes it out).
    pub fn conn(&mut self) -> Option<&mut Connection> {
        self.conn.as_mut().map(WriteConn::conn)
    }

    /// Commits; returns once the commit is in the WAL (and, with
    /// `sync_every_commit`, synced to disk).
    pub fn commit(mut self) -> Result<(), sqlx::Error> {
        let Some(mut c) = self.conn.take() else {
            return Err(sqlx::Error::WorkerCrashed);
        };
        match c.conn().execute_batch("COMMIT") {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = c.conn().execute_batch("ROLLBACK");
                Err(to_sqlx(e))
            }
        }
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if let Some(mut c) = self.conn.take()
            && !c.conn().is_autocommit()
            && let Err(e) = c.conn().execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %e, "rolling back an abandoned SQLite transaction failed");
        }
    }
}

/// Runs `q` and decodes the first `kinds.len()` columns of every row.
pub(crate) fn fetch(
    conn: &mut Connection,
    q: &Built,
    kinds: &[SqlKind],
) -> Result<Vec<DbRow>, sqlx::Error> {
    let mut stmt = conn.prepare_cached(&q.sql).map_err(to_sqlx)?;
    bind(&mut stmt, &q.values.0)?;
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(to_sqlx)? {
        let mut r = Vec::with_capacity(kinds.len());
        for (i, kind) in kinds.iter().enumerate() {
            r.push(decode(row.get_ref(i).map_err(to_sqlx)?, *kind)?);
        }
        out.push(r);
    }
    Ok(out)
}

/// Runs `q` and returns the number of rows it changed.
pub(crate) fn execute(conn: &mut Connection, q: &Built) -> Result<u64, sqlx::Error> {
    let mut stmt = conn.prepare_cached(&q.sql).map_err(to_sqlx)?;
    bind(&mut stmt, &q.values.0)?;
    let n = stmt.raw_execute().map_err(to_sqlx)?;
    Ok(n as u64)
}

/// Runs parameterless SQL, possibly several statements.
pub(crate) fn batch(conn: &mut Connection, sql: &str) -> Result<(), sqlx::Error> {
    conn.execute_batch(sql).map_err(to_sqlx)
}

fn bind(stmt: &mut rusqlite::CachedStatement<'_>, values: &[Value]) -> Result<(), sqlx::Error> {
    for (i, v) in values.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, to_sql(v)?)
            .map_err(to_sqlx)?;
    }
    Ok(())
}

/// A sea-query value as SQLite stores it (what sea-query-sqlx binds).
fn to_sql(v: &Value) -> Result<ToSqlOutput<'_>, sqlx::Error> {
    fn int(i: Option<i64>) -> ToSqlOutput<'static> {
        ToSqlOutput::Owned(i.map_or(SqlValue::Null, SqlValue::Integer))
    }
    Ok(match v {
        Value::Bool(b) => int(b.map(i64::from)),
        Value::TinyInt(i) => int(i.map(i64::from)),
        Value::SmallInt(i) => int(i.map(i64::from)),
        Value::Int(i) => int(i.map(i64::from)),
        Value::BigInt(i) => int(*i),
        Value::TinyUnsigned(i) => int(i.map(i64::from)),
        Value::SmallUnsigned(i) => int(i.map(i64::from)),
        Value::Unsigned(i) => int(i.map(i64::from)),
        Value::BigUnsigned(i) => match i {
            None => int(None),
            Some(u) => int(Some(
                i64::try_from(*u).map_err(|e| sqlx::Error::Encode(Box::new(e)))?,
            )),
        },
        Value::Float(f) => {
            ToSqlOutput::Owned(f.map_or(SqlValue::Null, |f| SqlValue::Real(f64::from(f))))
        }
        Value::Double(f) => ToSqlOutput::Owned(f.map_or(SqlValue::Null, SqlValue::Real)),
        Value::String(s) => match s {
            Some(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            None => ToSqlOutput::Owned(SqlValue::Null),
        },
        Value::Char(c) => {
            ToSqlOutput::Owned(c.map_or(SqlValue::Null, |c| SqlValue::Text(c.to_string())))
        }
        Value::Bytes(b) => match b {
            Some(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
            None => ToSqlOutput::Owned(SqlValue::Null),
        },
        Value::Json(j) => ToSqlOutput::Owned(match j {
            Some(j) => SqlValue::Text(j.to_string()),
            None => SqlValue::Null,
        }),
        Value::Uuid(u) => ToSqlOutput::Owned(match u {
            Some(u) => SqlValue::Blob(u.as_bytes().to_vec()),
            None => SqlValue::Null,
        }),
        other => {
            return Err(sqlx::Error::Encode(
                format!("no SQLite encoding for {other:?}").into(),
            ));
        }
    })
}

fn decode(v: ValueRef<'_>, kind: SqlKind) -> Result<Json, sqlx::Error> {
    let mismatch = |v: &ValueRef<'_>| {
        sqlx::Error::Decode(format!("expected {kind:?}, found SQLite {:?}", v.data_type()).into())
    };
    let text = |b: &[u8]| -> Result<String, sqlx::Error> {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))
    };
    Ok(match (kind, v) {
        (_, ValueRef::Null) => Json::Null,
        (SqlKind::Text | SqlKind::Date, ValueRef::Text(b)) => Json::String(text(b)?),
        (SqlKind::Text, ValueRef::Integer(i)) => Json::String(i.to_string()),
        (SqlKind::Int | SqlKind::Count, ValueRef::Integer(i)) => Json::from(i),
        // Not finite: null, as `serde_json` converts it.
        (SqlKind::Float, ValueRef::Real(f)) => Json::from(f),
        #[allow(clippy::cast_precision_loss)]
        (SqlKind::Float, ValueRef::Integer(i)) => Json::from(i as f64),
        (SqlKind::Bool, ValueRef::Integer(i)) => Json::Bool(i != 0),
        (SqlKind::Bytes, ValueRef::Blob(b)) => Json::String(hex::encode(b)),
        (SqlKind::Json, ValueRef::Text(b)) => {
            serde_json::from_slice(b).map_err(|e| sqlx::Error::Decode(Box::new(e)))?
        }
        (_, other) => return Err(mismatch(&other)),
    })
}

/// A database error from SQLite, with its extended result code.
#[derive(Debug)]
pub(crate) struct SqliteError {
    code: i32,
    message: String,
}

impl std::fmt::Display for SqliteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(code: {}) {}", self.code, self.message)
    }
}

impl std::error::Error for SqliteError {}

impl DatabaseError for SqliteError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Owned(self.code.to_string()))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        match self.code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

/// rusqlite's errors in sqlx's terms: SQLite failures keep their extended
/// code and message (the store classifies by them); the rest are decode or
/// protocol errors.
pub(crate) fn to_sqlx(e: rusqlite::Error) -> sqlx::Error {
    match e {
        rusqlite::Error::SqliteFailure(err, message) => {
            let message = message.unwrap_or_else(|| err.to_string());
            sqlx::Error::Database(Box::new(SqliteError {
                code: err.extended_code,
                message,
            }))
        }
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::Utf8Error(..)
        | rusqlite::Error::InvalidColumnType(..) => sqlx::Error::Decode(Box::new(e)),
        other => sqlx::Error::Protocol(other.to_string()),
    }
}
