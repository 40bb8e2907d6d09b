//! PostgreSQL through tokio-postgres: a few connections shared by every
//! single statement, a pool of connections for transactions, and the
//! change-feed listener's connection.
//!
//! Why shared connections: a tokio-postgres connection runs in a task of
//! its own, and the statements of every caller holding its client go out
//! in one write and come back in one read when they overlap (pipelining).
//! Under load a request then costs a fraction of a round trip's system
//! calls and wake-ups, in gatehouse and in PostgreSQL alike; with one
//! connection per statement (sqlx's pool) each request paid a whole round
//! trip, and the machine spent most of a request's CPU in the kernel
//! (`bench/RESULTS.md`, "PostgreSQL through shared, pipelined
//! connections"). A single statement is atomic on its own, so sharing a
//! connection between callers is safe; a transaction takes a connection
//! of its own from the pool.
//!
//! Errors are reported as `sqlx::Error`s, the layer's error type: a
//! database error keeps PostgreSQL's SQLSTATE, message and constraint
//! name ([`PgError`]), so callers classify both backends alike.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use futures::{StreamExt, TryStreamExt};
use sea_query::Value;
use serde_json::Value as Json;
use sqlx::error::{DatabaseError, ErrorKind};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Row, Statement};

use crate::{Built, DbRow, SqlKind, format_date};

/// Prepared statements kept per connection (as sqlx kept).
const STATEMENT_CACHE: usize = 100;

/// One PostgreSQL connection: its client and the statements prepared on it.
pub(crate) struct PgConn {
    client: Client,
    /// By SQL text; a statement prepared with other parameter types than
    /// a new call's is prepared again and replaces it.
    statements: quick_cache::sync::Cache<String, Statement>,
    /// Statements sent and not yet answered, and since when the
    /// connection has made no progress: whether it is stalled
    /// ([`PgConn::stalled`]).
    progress: Progress,
    /// A transaction began on it ([`PgDb::begin`]) and its `BEGIN` is
    /// still to be sent: with its first statement, in the same write.
    begin_owed: AtomicBool,
    /// A cancel request was sent for one of its statements
    /// ([`PgConn::bounded`]): it may still arrive and cancel whatever the
    /// connection runs next, so the connection is not used again.
    cancelled: AtomicBool,
}

/// A connection's statements in flight and the time ([`micros`]) of its
/// last progress: the last answer, or the first statement sent while
/// none was in flight.
#[derive(Default)]
struct Progress {
    in_flight: AtomicUsize,
    at: AtomicU64,
}

/// How long a connection with statements in flight may go without an
/// answer before the statements that follow avoid it: far above the
/// time a request's statement takes, even queued under load.
const STALL: Duration = Duration::from_millis(20);

/// Microseconds since the first call: a monotonic clock that fits an
/// atomic.
fn micros() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Counts a statement in its connection's [`Progress`] until it is
/// answered (or its caller gives up on it).
struct InFlight<'a>(&'a Progress);

impl<'a> InFlight<'a> {
    fn new(p: &'a Progress) -> Self {
        if p.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            p.at.store(micros(), Ordering::Relaxed);
        }
        InFlight(p)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.at.store(micros(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConn")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

/// A new connection, counted in `opened`; the caller runs its
/// [`tokio_postgres::Connection`].
async fn open_counted(
    config: &Config,
    opened: &AtomicU64,
) -> Result<
    (
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    tokio_postgres::Error,
> {
    let opening = config.connect(NoTls).await?;
    opened.fetch_add(1, Ordering::Relaxed);
    Ok(opening)
}

/// Opens a connection and starts the task that runs it.
async fn connect(config: &Config, opened: &AtomicU64) -> Result<PgConn, tokio_postgres::Error> {
    let (client, connection) = open_counted(config, opened).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(PgConn {
        client,
        statements: quick_cache::sync::Cache::new(STATEMENT_CACHE),
        progress: Progress::default(),
        begin_owed: AtomicBool::new(false),
        cancelled: AtomicBool::new(false),
    })
}

impl PgConn {
    /// Whether statements are waiting on this connection and none has
    /// been answered for [`STALL`]: a slow statement holds it (PostgreSQL
    /// answers a connection's statements in order).
    fn stalled(&self, now: u64) -> bool {
        self.progress.in_flight.load(Ordering::Relaxed) > 0
            && now.saturating_sub(self.progress.at.load(Ordering::Relaxed))
                > STALL.as_micros() as u64
    }

    /// The prepared statement for `q`'s SQL with its values' types: the
    /// one kept, unless it was prepared with other types.
    async fn statement(&self, q: &Built) -> Result<Statement, sqlx::Error> {
        let values = &q.values.0;
        if let Some(s) = self.statements.get(q.sql.as_str())
            && s.params().len() == values.len()
            && s.params()
                .iter()
                .zip(values)
                .all(|(t, v)| type_of(v).is_ok_and(|w| *t == w))
        {
            return Ok(s);
        }
        let types = values.iter().map(type_of).collect::<Result<Vec<_>, _>>()?;
        let s = self
            .client
            .prepare_typed(&q.sql, &types)
            .await
            .map_err(to_sqlx)?;
        self.statements.insert(q.sql.clone(), s.clone());
        Ok(s)
    }

    /// Runs a statement and decodes the first `kinds.len()` columns of
    /// every row, as they arrive. With `again` (a single statement, not
    /// part of a transaction), a kept statement that a migration made
    /// stale ([`is_stale_plan`]) is prepared afresh and run once more;
    /// in a transaction the error aborts it, so it is returned, and the
    /// next use prepares afresh.
    pub(crate) async fn fetch(
        &self,
        q: &Built,
        kinds: &[SqlKind],
        again: bool,
    ) -> Result<Vec<DbRow>, sqlx::Error> {
        self.begun_with(self.again_if_stale(q, again, || self.fetch_once(q, kinds)))
            .await
    }

    /// Runs `run`, preceded by the `BEGIN` this connection owes, if any:
    /// polled in order, the `BEGIN` is queued before `run` sends anything,
    /// and both travel in one write, so beginning a transaction costs no
    /// round trip of its own. A `BEGIN` is refused only with a connection
    /// that is failing, which fails `run`'s statement too.
    async fn begun_with<T>(
        &self,
        run: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        if !self.begin_owed.swap(false, Ordering::Relaxed) {
            return run.await;
        }
        let (begun, ran) = futures::join!(self.client.batch_execute("BEGIN"), run);
        begun.map_err(to_sqlx)?;
        ran
    }

    async fn fetch_once(&self, q: &Built, kinds: &[SqlKind]) -> Result<Vec<DbRow>, sqlx::Error> {
        let _counted = InFlight::new(&self.progress);
        let st = self.statement(q).await?;
        let rows = self
            .client
            .query_raw(&st, q.values.0.iter().map(Param))
            .await
            .map_err(to_sqlx)?;
        let mut rows = std::pin::pin!(rows);
        let mut out = Vec::new();
        while let Some(row) = rows.try_next().await.map_err(to_sqlx)? {
            out.push(decode_row(&row, kinds)?);
        }
        Ok(out)
    }

    /// Runs a statement and returns the number of rows it affected
    /// (`again` as for [`PgConn::fetch`]).
    pub(crate) async fn execute(&self, q: &Built, again: bool) -> Result<u64, sqlx::Error> {
        self.begun_with(self.again_if_stale(q, again, || self.execute_once(q)))
            .await
    }

    /// Runs `run`; when PostgreSQL refuses `q`'s kept statement as stale
    /// ([`is_stale_plan`]), forgets it, and with `again` runs once more
    /// (preparing it afresh).
    async fn again_if_stale<T, Fut>(
        &self,
        q: &Built,
        again: bool,
        run: impl Fn() -> Fut,
    ) -> Result<T, sqlx::Error>
    where
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        match run().await {
            Err(e) if is_stale_plan(&e) => {
                self.statements.remove(q.sql.as_str());
                if !again {
                    return Err(e);
                }
                run().await
            }
            result => result,
        }
    }

    async fn execute_once(&self, q: &Built) -> Result<u64, sqlx::Error> {
        let _counted = InFlight::new(&self.progress);
        let st = self.statement(q).await?;
        self.client
            .execute_raw(&st, q.values.0.iter().map(Param))
            .await
            .map_err(to_sqlx)
    }

    /// Runs parameterless SQL, several statements allowed.
    pub(crate) async fn batch(&self, sql: &str) -> Result<(), sqlx::Error> {
        self.begun_with(async { self.client.batch_execute(sql).await.map_err(to_sqlx) })
            .await
    }

    /// Runs `run`, a statement of this connection's only user (a
    /// transaction's, or a single statement moved off the shared
    /// connections), until `deadline`. Past it, or when the caller gives
    /// up (the future is dropped) before the answer came, a cancel
    /// request stops the statement in PostgreSQL, and the connection is
    /// not used again: the request may arrive after the statement ended
    /// and would cancel the next one. Exact, since nothing else runs on
    /// the connection.
    pub(crate) async fn bounded<T>(
        &self,
        deadline: Instant,
        timeout: Duration,
        run: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        let mut armed = CancelOnDrop(Some(self));
        let mut run = std::pin::pin!(run);
        if let Ok(result) = tokio::time::timeout_at(deadline.into(), run.as_mut()).await {
            armed.0 = None;
            return result;
        }
        // Past the deadline: the statement is cancelled, and its own answer
        // awaited a moment, so that the caller is told what happened. A
        // statement left to run on (a dropped connection does not stop a
        // backend waiting on a lock) would take effect after its caller was
        // told it timed out: a refresh token marked used by a request
        // answered `temporarily_unavailable` is then refused as reused.
        armed.0 = None;
        self.cancelled.store(true, Ordering::Relaxed);
        let token = self.client.cancel_token();
        // Boxed, as the rare path of `PgDb::single` is.
        let cancel = Box::pin(tokio::time::timeout(CANCEL_WAIT, token.cancel_query(NoTls)));
        match cancel.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot cancel a statement"),
            Err(_) => tracing::warn!("cannot cancel a statement: no answer"),
        }
        match tokio::time::timeout(CANCEL_WAIT, run).await {
            // It finished before the cancel reached it: its answer stands.
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) | Err(_) => Err(timed_out(timeout)),
        }
    }

    /// Whether a cancel request was sent for one of its statements.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Sends a cancel request for its connection's running statement when
/// dropped armed ([`PgConn::bounded`]).
struct CancelOnDrop<'a>(Option<&'a PgConn>);

/// How long a cancel request may take to be delivered (it opens a
/// connection of its own to the server).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.0.take() else {
            return;
        };
        conn.cancelled.store(true, Ordering::Relaxed);
        let token = conn.client.cancel_token();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                match tokio::time::timeout(CANCEL_WAIT, token.cancel_query(NoTls)).await {
                    Ok(Ok(())) => tracing::debug!("statement cancelled"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot cancel a statement"),
                    Err(_) => tracing::warn!("cannot cancel a statement: no answer"),
                }
            });
        }
    }
}

/// The error of a statement that did not answer within `timeout`:
/// SQLSTATE 57014 (`query_canceled`), as PostgreSQL's own
/// `statement_timeout` reports it, so both are classified alike
/// ([`crate::DbError::Timeout`]).
pub(crate) fn timed_out(timeout: Duration) -> sqlx::Error {
    sqlx::Error::Database(Box::new(Deadline(timeout)))
}

/// gatehouse's own statement deadline passed ([`timed_out`]).
#[derive(Debug)]
pub(crate) struct Deadline(Duration);

impl std::fmt::Display for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no answer from the database within the statement timeout ({} ms)",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for Deadline {}

impl DatabaseError for Deadline {
    fn message(&self) -> &str {
        "no answer from the database within the statement timeout"
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed("57014"))
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
        ErrorKind::Other
    }
}

/// Whether PostgreSQL stopped the statement before it ended: a statement
/// timeout or a cancel request (57014), a lock it could not take in time
/// (55P03). Such a statement changed nothing.
fn is_cut_short(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("57014" | "55P03")))
        && !matches!(e, sqlx::Error::Database(d) if d.as_error().is::<Deadline>())
}

/// Whether `e` is PostgreSQL's refusal to run a kept statement whose
/// result columns changed since it was prepared ("cached plan must not
/// change result type", SQLSTATE 0A000): a migration by another instance
/// altered a table under it. The statement ran nothing; prepared again,
/// it runs.
fn is_stale_plan(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d)
        if d.code().as_deref() == Some("0A000")
            && d.message().starts_with("cached plan must not change result type"))
}

/// A value's parameter type: the one sqlx sent for it, so the server
/// checks and coerces values as it did.
fn type_of(v: &Value) -> Result<Type, sqlx::Error> {
    Ok(match v {
        Value::Bool(_) => Type::BOOL,
        Value::TinyInt(_) | Value::SmallInt(_) | Value::TinyUnsigned(_) => Type::INT2,
        Value::Int(_) | Value::SmallUnsigned(_) => Type::INT4,
        Value::BigInt(_) | Value::Unsigned(_) | Value::BigUnsigned(_) => Type::INT8,
        Value::Float(_) => Type::FLOAT4,
        Value::Double(_) => Type::FLOAT8,
        Value::String(_) | Value::Char(_) => Type::TEXT,
        Value::Bytes(_) => Type::BYTEA,
        Value::Uuid(_) => Type::UUID,
        Value::Json(_) => Type::JSONB,
        // Never quoted: the message is logged, and values never are.
        _ => {
            return Err(sqlx::Error::Protocol(
                "a value of a kind the PostgreSQL layer does not bind (dates, decimals, arrays)"
                    .into(),
            ));
        }
    })
}

/// A sea-query value bound as the type [`type_of`] gave it.
#[derive(Debug)]
struct Param<'a>(&'a Value);

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        match self.0 {
            Value::Bool(Some(b)) => b.to_sql(ty, out),
            Value::TinyInt(Some(i)) => i16::from(*i).to_sql(ty, out),
            Value::SmallInt(Some(i)) => i.to_sql(ty, out),
            Value::TinyUnsigned(Some(i)) => i16::from(*i).to_sql(ty, out),
            Value::Int(Some(i)) => i.to_sql(ty, out),
            Value::SmallUnsigned(Some(i)) => i32::from(*i).to_sql(ty, out),
            Value::BigInt(Some(i)) => i.to_sql(ty, out),
            Value::Unsigned(Some(i)) => i64::from(*i).to_sql(ty, out),
            Value::BigUnsigned(Some(i)) => i64::try_from(*i)?.to_sql(ty, out),
            Value::Float(Some(f)) => f.to_sql(ty, out),
            Value::Double(Some(f)) => f.to_sql(ty, out),
            Value::String(Some(s)) => s.as_str().to_sql(ty, out),
            Value::Char(Some(c)) => c.to_string().to_sql(ty, out),
            Value::Bytes(Some(b)) => b.as_slice().to_sql(ty, out),
            Value::Uuid(Some(u)) => u.to_sql(ty, out),
            Value::Json(Some(j)) => j.as_ref().to_sql(ty, out),
            _ => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        // The statement was prepared with this value's own type.
        true
    }

    to_sql_checked!();
}

/// A column's raw bytes, `None` for SQL `NULL`, whatever its type.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// One row. A `NULL` decodes as JSON null whatever the column's type (a
/// `NULL` literal has type `text`); any other value must have a type its
/// kind reads.
fn decode_row(row: &Row, kinds: &[SqlKind]) -> Result<DbRow, sqlx::Error> {
    let columns = row.columns();
    if columns.len() < kinds.len() {
        return Err(sqlx::Error::ColumnIndexOutOfBounds {
            index: kinds.len() - 1,
            len: columns.len(),
        });
    }
    let mut out = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        let Raw(raw) = row.try_get(i).map_err(to_sqlx)?;
        let v = match raw {
            None => Json::Null,
            Some(raw) => decode(*kind, columns[i].type_(), raw).map_err(|source| {
                sqlx::Error::ColumnDecode {
                    index: i.to_string(),
                    source,
                }
            })?,
        };
        out.push(v);
    }
    Ok(out)
}

fn decode(kind: SqlKind, ty: &Type, raw: &[u8]) -> Result<Json, BoxError> {
    fn read<'a, T: FromSql<'a>>(ty: &Type, raw: &'a [u8]) -> Result<T, BoxError> {
        if !T::accepts(ty) {
            return Err(format!(
                "mismatched types: a column of type {ty} cannot be read as {}",
                std::any::type_name::<T>()
            )
            .into());
        }
        T::from_sql(ty, raw)
    }
    Ok(match kind {
        SqlKind::Text => Json::String(read::<&str>(ty, raw)?.to_owned()),
        SqlKind::Date => Json::String(format_date(read::<time::Date>(ty, raw)?)?),
        SqlKind::Int => Json::from(read::<i32>(ty, raw)?),
        SqlKind::Count => Json::from(read::<i64>(ty, raw)?),
        SqlKind::Bytes => Json::String(hex::encode(read::<&[u8]>(ty, raw)?)),
        // Not finite: null, as `serde_json` converts it.
        SqlKind::Float => Json::from(read::<f64>(ty, raw)?),
        SqlKind::Bool => Json::Bool(read::<bool>(ty, raw)?),
        SqlKind::Json => read::<Json>(ty, raw)?,
    })
}

/// A PostgreSQL error as the layer reports it.
#[derive(Debug)]
pub(crate) struct PgError(tokio_postgres::error::DbError);

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for PgError {}

impl DatabaseError for PgError {
    fn message(&self) -> &str {
        self.0.message()
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.0.code().code()))
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

    fn constraint(&self) -> Option<&str> {
        self.0.constraint()
    }

    fn table(&self) -> Option<&str> {
        self.0.table()
    }

    fn kind(&self) -> ErrorKind {
        match self.0.code().code() {
            "23505" => ErrorKind::UniqueViolation,
            "23503" => ErrorKind::ForeignKeyViolation,
            "23502" => ErrorKind::NotNullViolation,
            "23514" => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

/// A driver error as the layer's error type: a database error keeps its
/// SQLSTATE ([`PgError`]); a lost or refused connection is I/O (the
/// database is unavailable); the rest are protocol errors.
pub(crate) fn to_sqlx(e: tokio_postgres::Error) -> sqlx::Error {
    if let Some(db) = e.as_db_error() {
        return sqlx::Error::Database(Box::new(PgError(db.clone())));
    }
    if e.is_closed() {
        return sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            e.to_string(),
        ));
    }
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return sqlx::Error::Io(std::io::Error::new(io.kind(), crate::with_sources(&e)));
        }
        source = s.source();
    }
    sqlx::Error::Protocol(crate::with_sources(&e))
}

/// Creates and checks the pool's connections.
#[derive(Debug)]
struct Manager {
    config: Arc<Config>,
    opened: Arc<AtomicU64>,
}

impl managed::Manager for Manager {
    type Type = PgConn;
    type Error = tokio_postgres::Error;

    async fn create(&self) -> Result<PgConn, tokio_postgres::Error> {
        connect(&self.config, &self.opened).await
    }

    async fn recycle(
        &self,
        conn: &mut PgConn,
        _: &Metrics,
    ) -> RecycleResult<tokio_postgres::Error> {
        if conn.client.is_closed() {
            return Err(RecycleError::message("the connection is closed"));
        }
        if conn.is_cancelled() {
            return Err(RecycleError::message("a cancel request may still arrive"));
        }
        Ok(())
    }
}

type Pool = managed::Pool<Manager>;

/// A connection of the pool, held by a transaction.
type Pooled = managed::Object<Manager>;

/// `url` with its host left out when its query names one (`host=`):
/// libpq's rule, that the query's host is the one used, as in
/// `postgres://user@localhost/db?host=/var/run/postgresql`. tokio-postgres
/// would try both, the URL's first.
fn query_host_wins(url: &str) -> Cow<'_, str> {
    let names_host = url::Url::parse(url).is_ok_and(|u| {
        u.query_pairs().any(|(k, _)| k == "host") && u.host_str().is_some_and(|h| !h.is_empty())
    });
    let Some((scheme, rest)) = url.split_once("://").filter(|_| names_host) else {
        return Cow::Borrowed(url);
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((user, host_port)) => (Some(user), host_port),
        None => (None, authority),
    };
    // `[::1]:5432` has a port, `[::1]` none.
    let port = host_port
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let mut out = format!("{scheme}://");
    if let Some(user) = user {
        out.push_str(user);
        out.push('@');
    }
    if let Some(port) = port {
        out.push(':');
        out.push_str(port);
    }
    out.push_str(tail);
    Cow::Owned(out)
}

/// One of the shared connections, replaced when it is lost.
#[derive(Default)]
struct Slot {
    conn: std::sync::RwLock<Option<Arc<PgConn>>>,
    /// Held while a replacement is being opened, so callers wait for one
    /// connection instead of each opening its own.
    opening: tokio::sync::Mutex<()>,
    /// A replacement is being opened in the background ([`PgDb::shared`]).
    reopening: AtomicBool,
}

impl Slot {
    fn open(&self) -> Option<Arc<PgConn>> {
        let conn = self.conn.read().ok()?;
        conn.as_ref().filter(|c| !c.client.is_closed()).cloned()
    }
}

/// Opens `slot`'s connection unless it is open, within `timeout`; callers
/// finding it closed together wait for one connection.
async fn open_slot(
    slot: &Slot,
    config: &Config,
    opened: &AtomicU64,
    timeout: Duration,
) -> Result<Arc<PgConn>, sqlx::Error> {
    let opening = async {
        let _one = slot.opening.lock().await;
        if let Some(c) = slot.open() {
            return Ok(c);
        }
        let c = Arc::new(connect(config, opened).await.map_err(to_sqlx)?);
        if let Ok(mut s) = slot.conn.write() {
            *s = Some(c.clone());
        }
        Ok(c)
    };
    tokio::time::timeout(timeout, opening)
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

/// Closes the connections of `pool` unused for `idle` or longer.
fn shrink(pool: &Pool, idle: Duration) -> usize {
    pool.retain(|_, m| m.last_used() < idle).removed.len()
}

/// The PostgreSQL side of a [`crate::Db`].
pub(crate) struct PgDb {
    config: Arc<Config>,
    /// `config` with PostgreSQL's `statement_timeout` set to
    /// [`SHARED_LIMIT`]: the shared connections' ([`PgDb::single`]).
    shared_config: Arc<Config>,
    /// The shared connections: the first `active` taken in turn, the rest
    /// spares for when those are stalled ([`split`]).
    shared: Box<[Arc<Slot>]>,
    active: usize,
    next: AtomicUsize,
    pool: Pool,
    acquire_timeout: Duration,
    opened: Arc<AtomicU64>,
    closed: AtomicBool,
    /// The SQL of single statements that were stopped on a shared
    /// connection ([`SHARED_LIMIT`]): they go straight to a connection of
    /// their own from then on.
    slow: quick_cache::sync::Cache<String, ()>,
    /// Whether `slow` has any entry (most databases never see one: no
    /// lookup then).
    any_slow: AtomicBool,
    /// Single statements on connections of their own at once: at most
    /// half the transactions' pool, so slow statements never take every
    /// connection writes need.
    own: Arc<tokio::sync::Semaphore>,
}

/// How long a single statement may run on a shared connection
/// (PostgreSQL's `statement_timeout` of those sessions; it counts the
/// statement's own time in the server, lock waits included, not the time
/// it waited in the pipeline). Statements queued behind a slow or
/// blocked one wait at most this long; the stopped one changed nothing
/// and runs again on a connection of its own, with the rest of its
/// deadline (`docs/design/database.md`, "Slow statements"). Far above an
/// indexed statement's time, even under load.
const SHARED_LIMIT: Duration = Duration::from_millis(50);

/// How long a connection of the transactions' pool may stay unused before
/// it is closed: the pool grows under load and shrinks back when the load
/// is gone, so an idle instance holds few of PostgreSQL's connections
/// (its `max_connections` is shared by every instance). Checked every
/// [`POOL_IDLE_CHECK`].
const POOL_IDLE: Duration = Duration::from_secs(300);
const POOL_IDLE_CHECK: Duration = Duration::from_secs(30);

/// Single statements remembered as slow ([`PgDb::single`]).
const SLOW_STATEMENTS: usize = 1024;

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("shared", &self.shared.len())
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

/// How the `max_connections` connections are used: one listens for other
/// instances' changes; `active` carry single statements in turn (one per
/// two threads of the runtime serving requests, `workers`, rounded up, at
/// most half of the rest); with one active, a `spare` takes the single
/// statements while that one is stalled, so a slow statement never holds
/// up every request; the rest are the transactions' pool. Returns
/// `(active, spare, pooled)`.
///
/// One per two workers: the fewer the connections, the more statements
/// travel together on each, which saves both gatehouse and PostgreSQL CPU
/// per statement; and a PostgreSQL backend, which runs on one core, spends
/// about half of gatehouse's CPU on a typical statement, so it keeps up
/// with two busy workers (`docs/design/database.md`).
fn split(max_connections: u32, workers: usize) -> (usize, usize, usize) {
    let max = max_connections.max(3) as usize;
    let active = workers.div_ceil(2).min((max - 1) / 2).max(1);
    let spare = usize::from(active == 1 && max - 1 - active >= 2);
    (active, spare, max - 1 - active - spare)
}

impl PgDb {
    /// Parses `url`, opens one shared connection (so a bad URL, a missing
    /// database or refused credentials fail here) and sets up the rest.
    pub(crate) async fn open(
        url: &str,
        max_connections: u32,
        acquire_timeout: Duration,
        opened: Arc<AtomicU64>,
    ) -> Result<PgDb, crate::DbError> {
        let mut config = Config::from_str(&query_host_wins(url))
            .map_err(|e| crate::DbError::invalid("database", format!("bad PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(acquire_timeout);
        }
        let mut shared_config = config.clone();
        let options = format!(
            "{} -c statement_timeout={}",
            config.get_options().unwrap_or(""),
            SHARED_LIMIT.as_millis()
        );
        shared_config.options(options.trim_start());
        let config = Arc::new(config);
        let shared_config = Arc::new(shared_config);
        let workers =
            tokio::runtime::Handle::try_current().map_or(1, |rt| rt.metrics().num_workers());
        let (active, spare, pooled) = split(max_connections, workers);
        let pool = Pool::builder(Manager {
            config: config.clone(),
            opened: opened.clone(),
        })
        .max_size(pooled)
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(acquire_timeout))
        .create_timeout(Some(acquire_timeout))
        .build()
        .map_err(|e| crate::DbError::invalid("database", e.to_string()))?;
        let db = PgDb {
            config,
            shared_config,
            slow: quick_cache::sync::Cache::new(SLOW_STATEMENTS),
            any_slow: AtomicBool::new(false),
            own: Arc::new(tokio::sync::Semaphore::new((pooled / 2).max(1))),
            shared: (0..active + spare).map(|_| Arc::default()).collect(),
            active,
            next: AtomicUsize::new(0),
            pool,
            acquire_timeout,
            opened,
            closed: AtomicBool::new(false),
        };
        // Ends with the pool (a weak reference: it never keeps it open).
        let weak = db.pool.weak();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POOL_IDLE_CHECK);
            loop {
                tick.tick().await;
                let Some(pool) = weak.upgrade() else { return };
                if pool.is_closed() {
                    return;
                }
                shrink(&pool, POOL_IDLE);
            }
        });
        let first = connect(&db.shared_config, &db.opened)
            .await
            .map_err(|e| crate::error::open_failure(crate::error::Backend::Postgres, to_sqlx(e)))?;
        if let Ok(mut slot) = db.shared[0].conn.write() {
            *slot = Some(Arc::new(first));
        }
        Ok(db)
    }

    /// A shared connection for single statements: the active ones taken
    /// in turn, passing over a stalled one ([`PgConn::stalled`]) for the
    /// next one that is not (a spare included), so a slow statement holds
    /// up only the statements sent to its connection before it was found
    /// stalled. In turn, not by the fewest statements in flight:
    /// statements sent to a connection whose task is already writing
    /// travel together (pipelining), while the least busy connection is
    /// usually an idle one, which costs a wake-up and a write of its own
    /// per statement (measured: more CPU per request, up to twice as much
    /// for a list with a joined relation).
    ///
    /// A lost connection is reopened in the background while the
    /// statement takes the next open one: no request waits for a
    /// connection to open (seconds when the server is struggling) while
    /// another is at hand. Only when none is open does it wait.
    pub(crate) async fn shared(&self) -> Result<Arc<PgConn>, sqlx::Error> {
        if self.closed.load(Ordering::Acquire) {
            return Err(sqlx::Error::PoolClosed);
        }
        let first = self.next.fetch_add(1, Ordering::Relaxed) % self.active;
        let n = self.shared.len();
        let now = micros();
        // The first connection from `first` on that is open and not
        // stalled, else the open stalled one with the fewest statements
        // waiting.
        let mut best: Option<Arc<PgConn>> = None;
        for k in 0..n {
            let slot = &self.shared[(first + k) % n];
            let Some(c) = slot.open() else {
                self.reopen_in_background(slot);
                continue;
            };
            if n == 1 || c.progress.in_flight.load(Ordering::Relaxed) == 0 || !c.stalled(now) {
                return Ok(c);
            }
            let fewer = |b: &Arc<PgConn>| {
                c.progress.in_flight.load(Ordering::Relaxed)
                    < b.progress.in_flight.load(Ordering::Relaxed)
            };
            if best.as_ref().is_none_or(fewer) {
                best = Some(c);
            }
        }
        match best {
            Some(c) => Ok(c),
            None => self.reopen(&self.shared[first]).await,
        }
    }

    /// Starts reopening `slot` unless that is under way already.
    fn reopen_in_background(&self, slot: &Arc<Slot>) {
        if slot.reopening.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            slot.reopening.store(false, Ordering::Release);
            return;
        };
        let (slot, config, opened) = (
            slot.clone(),
            self.shared_config.clone(),
            self.opened.clone(),
        );
        let timeout = self.acquire_timeout;
        rt.spawn(async move {
            if let Err(e) = open_slot(&slot, &config, &opened, timeout).await {
                tracing::debug!(error = %e, "a shared PostgreSQL connection could not be reopened yet");
            }
            slot.reopening.store(false, Ordering::Release);
        });
    }

    /// Opens `slot`'s connection, lost or never opened; callers finding it
    /// so together wait for one connection.
    async fn reopen(&self, slot: &Slot) -> Result<Arc<PgConn>, sqlx::Error> {
        open_slot(
            slot,
            &self.shared_config,
            &self.opened,
            self.acquire_timeout,
        )
        .await
    }

    /// Runs a single statement (`run` on `shared`, or `alone` on a
    /// connection of its own) within `timeout`.
    ///
    /// On the shared connection PostgreSQL stops it after [`SHARED_LIMIT`]
    /// (a slow scan, a lock wait), so it holds up the statements queued
    /// behind it that long at most; it changed nothing, and runs again on
    /// a connection of its own (its SQL is remembered: it goes there
    /// first from then on), bounded by the rest of the deadline and
    /// cancelled if its caller gives up ([`PgConn::bounded`]). A shared
    /// connection that does not answer within the whole deadline is
    /// taken out of service (a lost network: the server would have ended
    /// the statement long before), and the statement fails as timed out.
    pub(crate) async fn single<T, F, G>(
        &self,
        shared: &PgConn,
        sql: &str,
        timeout: Duration,
        run: F,
        alone: G,
    ) -> Result<T, sqlx::Error>
    where
        F: std::future::Future<Output = Result<T, sqlx::Error>>,
        G: AsyncFnOnce(&PgConn) -> Result<T, sqlx::Error>,
    {
        let deadline = Instant::now() + timeout;
        let known_slow = self.any_slow.load(Ordering::Relaxed) && self.slow.get(sql).is_some();
        if !known_slow {
            match tokio::time::timeout_at(deadline.into(), run).await {
                Ok(Err(e)) if is_cut_short(&e) => {
                    tracing::debug!(error = %e, "a statement moves off the shared connection");
                    self.slow.insert(sql.to_string(), ());
                    self.any_slow.store(true, Ordering::Relaxed);
                }
                Ok(result) => return result,
                Err(_) => {
                    tracing::warn!(
                        "a shared PostgreSQL connection did not answer within the statement \
                         timeout; it is replaced"
                    );
                    self.retire(shared);
                    return Err(timed_out(timeout));
                }
            }
        }
        // The rare path, boxed: its futures (a pool's wait, a connection of
        // its own, a cancel request) would otherwise be part of every
        // statement's future, which is built and moved for each one.
        Box::pin(async move {
            let permit = tokio::time::timeout_at(deadline.into(), self.own.clone().acquire_owned())
                .await
                .map_err(|_| timed_out(timeout))?
                .map_err(|_| sqlx::Error::PoolClosed)?;
            let conn = tokio::time::timeout_at(deadline.into(), self.pooled())
                .await
                .map_err(|_| timed_out(timeout))??;
            let result = conn.bounded(deadline, timeout, alone(&conn)).await;
            drop(permit);
            result
        })
        .await
    }

    /// Takes `conn` out of the shared connections: the statements that
    /// follow open a new one. Those in flight on it keep it until they end.
    fn retire(&self, conn: &PgConn) {
        for slot in &self.shared {
            if let Ok(mut s) = slot.conn.write()
                && s.as_deref().is_some_and(|c| std::ptr::eq(c, conn))
            {
                *s = None;
            }
        }
    }

    /// A connection of the pool.
    async fn pooled(&self) -> Result<Pooled, sqlx::Error> {
        self.pool.get().await.map_err(|e| match e {
            managed::PoolError::Timeout(_) => sqlx::Error::PoolTimedOut,
            managed::PoolError::Backend(e) => to_sqlx(e),
            _ => sqlx::Error::PoolClosed,
        })
    }

    /// A transaction, on a connection of its own.
    pub(crate) async fn begin(&self) -> Result<PgTx, sqlx::Error> {
        let conn = self.pooled().await?;
        // Sent with the transaction's first statement (`PgConn::begun_with`).
        conn.begin_owed.store(true, Ordering::Relaxed);
        Ok(PgTx { conn: Some(conn) })
    }

    /// Closes the pool's connections unused for `idle` (see [`shrink`]).
    pub(crate) fn close_idle(&self, idle: Duration) -> usize {
        shrink(&self.pool, idle)
    }

    /// `(open, idle, maximum)` connections, the listener's aside.
    pub(crate) fn stats(&self) -> (u32, u32, u32) {
        let shared = self.shared.iter().filter(|s| s.open().is_some()).count();
        let status = self.pool.status();
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        (
            n(shared + status.size),
            // Shared connections are always free to take.
            n(shared + status.available),
            n(self.shared.len() + status.max_size),
        )
    }

    /// Closes every connection; statements from now on fail.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for slot in &self.shared {
            if let Ok(mut s) = slot.conn.write() {
                *s = None;
            }
        }
        self.pool.close();
    }

    /// Starts listening on `channel` on a connection of its own.
    pub(crate) async fn listen(&self, channel: &str) -> Result<Listener, sqlx::Error> {
        let (client, mut connection) = open_counted(&self.config, &self.opened)
            .await
            .map_err(to_sqlx)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        if tx.send(n.payload().to_owned()).is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "PostgreSQL listener connection ended");
                        break;
                    }
                }
            }
        });
        // An idle listener is the normal case, not a forgotten session:
        // `idle_session_timeout` (PostgreSQL 14 on) would end it whenever
        // the instance has nothing to do, and every subscription with it.
        // Older servers do not know the setting, and need nothing.
        if let Err(e) = client.batch_execute("SET idle_session_timeout = 0").await {
            tracing::debug!(error = %e, "the server has no idle_session_timeout");
        }
        let listen = format!("LISTEN {}", crate::q(channel));
        client.batch_execute(&listen).await.map_err(to_sqlx)?;
        let mut heartbeat = tokio::time::interval(LISTENER_HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        heartbeat.reset();
        Ok(Listener {
            client,
            listen,
            rx,
            heartbeat,
        })
    }
}

/// How often an idle listener checks that its connection still answers:
/// a connection lost without a word (a network partition) delivers no
/// notification and reports no error, and would keep subscriptions open
/// that miss every event.
const LISTENER_HEARTBEAT: Duration = Duration::from_secs(10);

/// A connection listening for notifications ([`crate::Db::listen`]).
#[derive(Debug)]
pub struct Listener {
    /// Keeps the connection open; pings it ([`LISTENER_HEARTBEAT`]).
    client: Client,
    /// The `LISTEN` statement: the ping (a no-op on a channel listened
    /// to, and the session still shows as the listener's).
    listen: String,
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    heartbeat: tokio::time::Interval,
}

impl Listener {
    /// The next notification's payload; `None` once the connection is
    /// lost, or does not answer a ping within [`LISTENER_HEARTBEAT`]
    /// (the notifications sent from then on are not received).
    pub async fn recv(&mut self) -> Option<String> {
        loop {
            tokio::select! {
                biased;
                payload = self.rx.recv() => return payload,
                _ = self.heartbeat.tick() => {
                    let ping = self.client.batch_execute(&self.listen);
                    match tokio::time::timeout(LISTENER_HEARTBEAT, ping).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "the listener's connection failed");
                            return None;
                        }
                        Err(_) => {
                            tracing::warn!("the listener's connection does not answer");
                            return None;
                        }
                    }
                }
            }
        }
    }
}

/// A transaction's connection: `BEGIN` has run on it. Dropped before
/// [`PgTx::commit`], it is rolled back by a task before it goes back to
/// the pool (or closed, outside a runtime), so no lock outlives it.
#[derive(Debug)]
pub(crate) struct PgTx {
    conn: Option<Pooled>,
}

impl PgTx {
    pub(crate) fn conn(&self) -> Option<&PgConn> {
        self.conn.as_deref()
    }

    pub(crate) async fn commit(mut self, timeout: Duration) -> Result<(), sqlx::Error> {
        let Some(conn) = self.conn.take() else {
            return Err(sqlx::Error::PoolClosed);
        };
        let deadline = Instant::now() + timeout;
        match conn.bounded(deadline, timeout, conn.batch("COMMIT")).await {
            Ok(()) => Ok(()),
            Err(e) => {
                // Its state is unknown: the connection is not reused.
                drop(managed::Object::take(conn));
                Err(e)
            }
        }
    }

    /// Runs `statements`, whose results nobody reads, then commits, all
    /// sent in one write: one round trip instead of one per statement and
    /// one for the `COMMIT`. The statements are prepared first, so that
    /// each one's execution is sent before the `COMMIT`, in order. Should
    /// one fail, PostgreSQL refuses the rest of the transaction and ends
    /// it at the `COMMIT` without committing anything; its error is
    /// returned.
    pub(crate) async fn commit_after(
        mut self,
        statements: &[Built],
        timeout: Duration,
    ) -> Result<(), sqlx::Error> {
        let conn = self.conn.as_deref().ok_or(sqlx::Error::PoolClosed)?;
        let deadline = Instant::now() + timeout;
        let result = conn
            .bounded(deadline, timeout, Self::send_with_commit(conn, statements))
            .await;
        let conn = self.conn.take();
        if result.is_err()
            && let Some(conn) = conn
        {
            // Its state is unknown: the connection is not reused.
            drop(managed::Object::take(conn));
        }
        result
    }

    /// [`PgTx::commit_after`]'s statements and `COMMIT`, in one write.
    async fn send_with_commit(conn: &PgConn, statements: &[Built]) -> Result<(), sqlx::Error> {
        // A `BEGIN` still owed (no statement ran yet) goes first.
        conn.begun_with(async { Ok(()) }).await?;
        let mut prepared = Vec::with_capacity(statements.len());
        for q in statements {
            prepared.push(conn.statement(q).await?);
        }
        // tokio-postgres queues a statement's messages when its future is
        // first polled: poll each once, in order, then the `COMMIT`.
        let mut runs: Vec<_> = prepared
            .iter()
            .zip(statements)
            .map(|(st, q)| {
                Box::pin(futures::future::maybe_done(
                    conn.client.execute_raw(st, q.values.0.iter().map(Param)),
                ))
            })
            .collect();
        for run in &mut runs {
            let _ = futures::poll!(run.as_mut());
            if let Some(Err(_)) = run.as_mut().output_mut()
                && let Some(Err(e)) = run.as_mut().take_output()
            {
                // Refused before it was sent (a value that cannot be
                // encoded), and no `COMMIT` was: dropping `self` rolls the
                // transaction back.
                return Err(to_sqlx(e));
            }
        }
        let committed = conn.batch("COMMIT");
        let committed = futures::join!(futures::future::join_all(runs.iter_mut()), committed).1;
        let failed = runs
            .iter_mut()
            .find_map(|run| run.as_mut().take_output().and_then(Result::err));
        let result = match failed {
            Some(e) => Err(to_sqlx(e)),
            None => committed,
        };
        if result.as_ref().is_err_and(is_stale_plan) {
            for q in statements {
                conn.statements.remove(q.sql.as_str());
            }
        }
        result
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.is_cancelled() {
            // Closing the connection rolls the transaction back; a
            // `ROLLBACK` could meet the cancel request still on its way.
            drop(managed::Object::take(conn));
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if conn.batch("ROLLBACK").await.is_err() {
                        drop(managed::Object::take(conn));
                    }
                });
            }
            // Closing the connection rolls the transaction back.
            Err(_) => drop(managed::Object::take(conn)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{query_host_wins, split};

    #[test]
    fn connections_are_split_between_single_statements_and_transactions() {
        // (max_connections, workers) -> (active, spare, transactions)
        for ((max, workers), expected) in [
            ((10, 2), (1, 1, 7)),
            ((10, 1), (1, 1, 7)),
            ((10, 4), (2, 0, 7)),
            ((10, 16), (4, 0, 5)),
            ((40, 16), (8, 0, 31)),
            ((5, 1), (1, 1, 2)),
            ((4, 1), (1, 1, 1)),
            ((3, 8), (1, 0, 1)),
            ((1, 1), (1, 0, 1)),
        ] {
            assert_eq!(split(max, workers), expected, "{max} {workers}");
        }
    }

    #[test]
    fn a_host_in_the_query_replaces_the_urls_host() {
        for (url, expected) in [
            (
                "postgres://u:p@localhost:5433/db?host=/var/run/postgresql",
                "postgres://u:p@:5433/db?host=/var/run/postgresql",
            ),
            (
                "postgresql://u@localhost/db?sslmode=disable&host=/tmp",
                "postgresql://u@/db?sslmode=disable&host=/tmp",
            ),
            (
                "postgres://[::1]:5432/db?host=/tmp",
                "postgres://:5432/db?host=/tmp",
            ),
            ("postgres://u@/db?host=/tmp", "postgres://u@/db?host=/tmp"),
            ("postgres://u@localhost/db", "postgres://u@localhost/db"),
            (
                "postgres://u@localhost/db?hostaddr=::1",
                "postgres://u@localhost/db?hostaddr=::1",
            ),
        ] {
            assert_eq!(query_host_wins(url), expected, "{url}");
        }
    }
}
