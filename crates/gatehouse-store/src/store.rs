//! The [`Store`]: every operation GraphQL and REST need, over either backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gatehouse_schema::{AccessContext, Action, Entity, FieldDefault, FieldKind, Generated, Model};
use sea_query::{Expr, ExprTrait, Query, SelectStatement};
use serde_json::Value as Json;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use gatehouse_db::{
    Built, Conn, Db, DbOptions, DbRow, PoolStats, SCHEMA_LOCK, Violation, ViolationKind,
};

use crate::clock::{Clock, SystemClock};
use crate::error::from_db;
use crate::feed::{self, ChangeEvent};
use crate::migrate::{self, Layout, MigrationStep, q};
use crate::policy;
use crate::query::{Col, col};
use crate::value::{Dialect, SqlKind, check_field, check_keys};
use crate::{Row, RowSet, StoreError};

/// How to open a [`Store`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Bring the tables to the Model on connect (default `true`). Set it to
    /// `false` to inspect [`Store::plan`] without changing anything.
    pub migrate: bool,
    /// Apply destructive migration steps too (default `false`: they are refused
    /// with [`StoreError::DestructiveMigration`] listing the plan).
    pub allow_destructive: bool,
    /// Pool size (default: 4 SQLite readers, 10 PostgreSQL connections, at
    /// least 3 of them).
    pub max_connections: Option<u32>,
    /// How long an operation waits for a free connection before failing with
    /// [`StoreError::Unavailable`] (default 5 s).
    pub acquire_timeout: Duration,
    /// How long one statement may take before it is cancelled and fails
    /// with [`StoreError::Timeout`] (default 30 s; `gatehouse_db::DbOptions`).
    pub statement_timeout: Duration,
    /// Events buffered per subscriber before a slow one starts missing them
    /// (it then gets `RecvError::Lagged`). Default 1024.
    pub event_capacity: usize,
    /// SQLite only: fsync every commit (`synchronous=FULL`), so that even a
    /// power loss keeps acknowledged writes. The default (`false`,
    /// `synchronous=NORMAL` in WAL mode) keeps them through a killed process
    /// (SIGKILL, crash) and fsyncs at checkpoints: several times the write
    /// throughput on slow disks.
    pub sqlite_sync_every_commit: bool,
    /// The server's clock: generated times (`@createdAt`, `@updatedAt`)
    /// are read from it. Default: the system clock.
    pub clock: Arc<dyn Clock>,
    /// Most rows one bulk update or delete may change
    /// ([`crate::EntityStore::update_where`]); a request that would change
    /// more is refused before anything is written. Default 1,000.
    pub max_bulk_rows: u32,
}

/// [`StoreOptions::max_bulk_rows`] unless configured.
pub const DEFAULT_MAX_BULK_ROWS: u32 = 1000;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            migrate: true,
            allow_destructive: false,
            max_connections: None,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: DbOptions::DEFAULT_STATEMENT_TIMEOUT,
            event_capacity: 1024,
            sqlite_sync_every_commit: false,
            clock: Arc::new(SystemClock),
            max_bulk_rows: DEFAULT_MAX_BULK_ROWS,
        }
    }
}

/// The storage of one gatehouse instance: rows of the Model's entities in
/// SQLite or PostgreSQL, and the feed of their changes.
///
/// Cheap to clone (shared inside). Rows are JSON maps keyed by GraphQL field
/// names (see [`Row`]); nothing here exposes SQL.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) db: Db,
    pub(crate) model: Arc<Model>,
    /// See [`StoreOptions::clock`].
    pub(crate) clock: Arc<dyn Clock>,
    /// See [`StoreOptions::max_bulk_rows`].
    pub(crate) max_bulk_rows: u32,
    pub(crate) events: Arc<feed::Local>,
    /// This instance's id, carried by its PostgreSQL notifications.
    origin: String,
    listener: Option<JoinHandle<()>>,
    /// The internal tables are known to exist (created by a migration or
    /// [`Store::ensure_internal_tables`] of this instance).
    internal_ready: AtomicBool,
    /// Bumped after every write of this instance and every change another
    /// instance announces: a count taken before a bump is stale.
    pub(crate) writes: Arc<AtomicU64>,
    /// `entity \0 filter \0 caller` -> (writes generation, when the count
    /// began, count); see [`crate::EntityStore::count`]. Why: REST lists answer
    /// `X-Total-Count`, so every page would also count the whole filtered
    /// table, which costs more than reading the page.
    pub(crate) counts: quick_cache::sync::Cache<String, (u64, Instant, u64)>,
    /// Entity -> about how many rows its table holds, and when that was
    /// read ([`Store::row_estimate`]).
    row_estimates: std::sync::RwLock<(HashMap<String, u64>, Option<Instant>)>,
    /// A refresh of [`Inner::row_estimates`] is running.
    estimating: Arc<AtomicBool>,
    /// See [`Store::add_commit_hook`].
    hooks: std::sync::RwLock<Arc<[Arc<dyn CommitHook>]>>,
}

/// Statements that go with changes of rows, run in the writing
/// transaction just before it commits, so they take effect exactly when
/// the changes do, whichever path wrote them (GraphQL, REST, cascades):
/// an account's tokens revoked when its claims change; deliveries of a
/// change queued. See [`Store::add_commit_hook`].
pub trait CommitHook: Send + Sync + std::fmt::Debug {
    /// The statements for one change (none when it concerns the hook not).
    fn statements(&self, change: &ChangeEvent) -> Vec<Built>;

    /// Called once the transaction whose changes gave statements of this
    /// hook has committed (not after a rollback, nor a failed commit):
    /// where a hook that queued work tells whoever does it.
    fn committed(&self) {}
}

/// How long a cached count is trusted without a write being seen: bounds
/// staleness when a change is not announced (a write made outside gatehouse,
/// a notification lost while the listener reconnects).
pub(crate) const COUNT_CACHE_TTL: Duration = Duration::from_secs(1);
/// Counts kept at most.
const COUNT_CACHE_MAX: usize = 1024;
/// How old [`Store::row_estimate`]'s figures may get before a request that
/// reads them starts a new reading.
const ROW_ESTIMATE_TTL: Duration = Duration::from_secs(10);

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = &self.listener {
            h.abort();
        }
    }
}

impl Store {
    /// Opens the database at `url` (`sqlite://PATH`, created with its parent
    /// directory when missing, or `postgres://...`) for `model`, and unless
    /// `opts.migrate` is false brings its tables to the Model.
    pub async fn connect(
        url: &str,
        model: Arc<Model>,
        opts: StoreOptions,
    ) -> Result<Store, StoreError> {
        let db = Db::open(
            url,
            &DbOptions {
                max_connections: opts.max_connections,
                acquire_timeout: opts.acquire_timeout,
                sqlite_sync_every_commit: opts.sqlite_sync_every_commit,
                statement_timeout: opts.statement_timeout,
            },
        )
        .await?;
        let events = Arc::new(feed::Local::new(opts.event_capacity));
        let origin = uuid::Uuid::now_v7().to_string();
        let writes = Arc::new(AtomicU64::new(0));
        let listener = feed::listen(&db).await.map_err(from_db)?.map(|l| {
            tokio::spawn(feed::run_listener(
                l,
                db.clone(),
                origin.clone(),
                events.clone(),
                writes.clone(),
            ))
        });
        let store = Store {
            inner: Arc::new(Inner {
                db,
                model,
                clock: opts.clock.clone(),
                max_bulk_rows: opts.max_bulk_rows,
                events,
                origin,
                listener,
                internal_ready: AtomicBool::new(false),
                writes,
                counts: quick_cache::sync::Cache::new(COUNT_CACHE_MAX),
                row_estimates: Default::default(),
                estimating: Arc::new(AtomicBool::new(false)),
                hooks: std::sync::RwLock::new(Arc::from(Vec::new())),
            }),
        };
        if opts.migrate {
            store.migrate(opts.allow_destructive).await?;
        }
        // Tables not migrated may not exist yet; a database that cannot
        // answer yet has no estimates (every table counts as empty) until
        // the next reading.
        if opts.migrate
            && let Err(e) = store.refresh_row_estimates().await
        {
            tracing::warn!(error = %e, "could not read the tables' sizes");
        }
        Ok(store)
    }

    /// About how many rows the table of `entity` holds: what the cost of a
    /// filter is weighed by ([`gatehouse_schema::filter_cost`]). Read from
    /// the database's own bookkeeping (SQLite: the largest rowid;
    /// PostgreSQL: the planner's and the statistics' row counts), never by
    /// counting: at most [`ROW_ESTIMATE_TTL`] old, refreshed in the
    /// background by the first call that finds it older. 0 for an entity
    /// not known yet.
    pub fn row_estimate(&self, entity: &str) -> u64 {
        let (n, stale) = match self.inner.row_estimates.read() {
            Ok(g) => (
                g.0.get(entity).copied().unwrap_or(0),
                g.1.is_none_or(|at| at.elapsed() >= ROW_ESTIMATE_TTL),
            ),
            Err(_) => (0, false),
        };
        if stale
            && let Ok(rt) = tokio::runtime::Handle::try_current()
            && !self.inner.estimating.swap(true, Ordering::SeqCst)
        {
            let store = self.clone();
            rt.spawn(async move {
                if let Err(e) = store.refresh_row_estimates().await {
                    tracing::warn!(error = %e, "could not read the tables' sizes");
                }
            });
        }
        n
    }

    /// Reads every table's size now (see [`Store::row_estimate`]), in one
    /// statement.
    pub async fn refresh_row_estimates(&self) -> Result<(), StoreError> {
        struct Done(Arc<AtomicBool>);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let _done = Done(self.inner.estimating.clone());
        let entities = &self.inner.model.entities;
        if entities.is_empty() {
            return Ok(());
        }
        let mut map = HashMap::with_capacity(entities.len());
        // SQLite takes at most 500 parts in one compound SELECT.
        for chunk in entities.chunks(250) {
            let mut values = Vec::new();
            let parts: Vec<String> = chunk
                .iter()
                .enumerate()
                .map(|(i, e)| match self.dialect() {
                    // Rowids are given in increasing order: the largest is
                    // at least the row count (more after deletions), read
                    // from the b-tree's end.
                    Dialect::Sqlite => {
                        format!("SELECT {i}, COALESCE(MAX(rowid), 0) FROM {}", q(&e.table))
                    }
                    // `reltuples` is the planner's figure (-1 before the
                    // first ANALYZE); the statistics' live rows follow
                    // writes within seconds.
                    Dialect::Postgres => {
                        values.push(sea_query::Value::from(q(&e.table)));
                        let n = values.len();
                        format!(
                            "SELECT {i}::bigint, COALESCE((SELECT GREATEST(c.reltuples::bigint, \
                             COALESCE(s.n_live_tup, 0), 0) FROM pg_class c \
                             LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
                             WHERE c.oid = to_regclass(${n})), 0)::bigint"
                        )
                    }
                })
                .collect();
            let q = Built::raw(parts.join(" UNION ALL "), values);
            let mut c = self.inner.db.read().await?.uncounted();
            let rows = c
                .conn()
                .fetch(q, &[SqlKind::Count, SqlKind::Count])
                .await
                .map_err(from_db)?;
            for row in rows {
                let at = row.first().and_then(Json::as_u64);
                let n = row.get(1).and_then(Json::as_u64).unwrap_or(0);
                if let Some(e) = at.and_then(|i| chunk.get(i as usize)) {
                    map.insert(e.name.clone(), n);
                }
            }
        }
        if let Ok(mut g) = self.inner.row_estimates.write() {
            *g = (map, Some(Instant::now()));
        }
        Ok(())
    }

    /// Most rows one bulk write may change ([`StoreOptions::max_bulk_rows`]).
    pub fn max_bulk_rows(&self) -> u32 {
        self.inner.max_bulk_rows
    }

    /// The clock the store was opened with: the instance's one clock,
    /// which the authorization server and the outbox read too.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The Model the store serves.
    pub fn model(&self) -> &Arc<Model> {
        &self.inner.model
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        self.dialect().name()
    }

    /// How many SQL statements the store has sent since it was opened
    /// (queries and writes, not transaction control or DDL). Tests use it to
    /// prove that relation loading is batched.
    pub fn statements(&self) -> u64 {
        self.inner.db.statements()
    }

    /// A receiver of every change committed from now on (bounded: see
    /// [`StoreOptions::event_capacity`]). With PostgreSQL it also receives
    /// changes written by other instances on the same database; when the
    /// listener for those lost its connection (so some may have been
    /// missed), the receiver is closed once it listens again: subscribe anew.
    pub fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.inner.events.subscribe()
    }

    /// How many receivers from [`Store::subscribe`] are open: a
    /// subscription is listening once it holds one, so this is the signal
    /// that a change made from now on reaches it (tests wait on it rather
    /// than sleep).
    pub fn feed_receivers(&self) -> usize {
        self.inner.events.receivers()
    }

    /// Checks that the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut c = self.inner.db.read().await?;
        c.conn().ping().await.map_err(from_db)
    }

    /// The state of the connection pools, for metrics.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.inner.db.pool_stats()
    }

    /// Closes the connection pools; later operations fail with `Unavailable`.
    pub async fn close(&self) {
        // The listener holds a pooled connection: stop it first, or closing
        // the pool would wait for that connection forever.
        if let Some(h) = &self.inner.listener {
            h.abort();
        }
        self.inner.db.close().await;
    }

    pub(crate) fn dialect(&self) -> Dialect {
        self.inner.db.dialect()
    }

    /// The database the store runs on, for the repositories that keep
    /// their own tables in it (`gatehouse-auth-store`).
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// Creates the internal tables when missing, one instance at a time (the
    /// same lock as [`Store::migrate`]). `connect` does this when it migrates;
    /// this covers stores opened with `migrate: false`.
    pub(crate) async fn ensure_internal_tables(&self) -> Result<(), StoreError> {
        if self.inner.internal_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let d = self.dialect();
        let mut tx = self.inner.db.begin().await?;
        let mut c = tx.conn();
        if d == Dialect::Postgres {
            c.ddl(SCHEMA_LOCK).await.map_err(from_db)?;
        }
        migrate::ensure_internal(&mut c, d).await.map_err(from_db)?;
        tx.commit().await.map_err(from_db)?;
        self.inner.internal_ready.store(true, Ordering::Release);
        Ok(())
    }

    // ---------------------------------------------------------------- migration

    /// The steps that would bring the tables to the Model (empty when they match).
    pub async fn plan(&self) -> Result<Vec<MigrationStep>, StoreError> {
        let mut pooled = self.inner.db.write().await?;
        let mut c = pooled.conn();
        migrate::ensure_internal(&mut c, self.dialect())
            .await
            .map_err(from_db)?;
        Ok(self.compute_plan(&mut c).await?.steps)
    }

    /// The applied layout version (0 before the first migration).
    pub async fn schema_version(&self) -> Result<u64, StoreError> {
        let mut pooled = self.inner.db.write().await?;
        let mut c = pooled.conn();
        migrate::ensure_internal(&mut c, self.dialect())
            .await
            .map_err(from_db)?;
        Ok(migrate::recorded(&mut c).await?.1)
    }

    async fn compute_plan(&self, c: &mut Conn<'_>) -> Result<Plan, StoreError> {
        let (recorded, version) = migrate::recorded(c).await?;
        let new = Layout::from_model(&self.inner.model);
        // Renames first; the rest is planned from the tables as they are
        // once renamed.
        let (mut steps, renamed) = migrate::renames(&recorded, &new)?;
        let mut nonempty = std::collections::BTreeSet::new();
        for t in migrate::tables_needing_row_check(&renamed, &new) {
            if migrate::has_rows(c, migrate::table_before(&steps, &t)).await? {
                nonempty.insert(t);
            }
        }
        steps.extend(migrate::plan(&renamed, &new, &|t| nonempty.contains(t)));
        Ok(Plan {
            steps,
            recorded,
            renamed,
            new,
            version,
        })
    }

    /// Brings the tables to the Model in one transaction and returns the
    /// steps applied. Destructive steps are refused unless `allow_destructive`.
    pub async fn migrate(&self, allow_destructive: bool) -> Result<Vec<MigrationStep>, StoreError> {
        match self.dialect() {
            Dialect::Sqlite => {
                let mut pooled = self.inner.db.write().await?;
                let mut c = pooled.conn();
                // Table rebuilds drop and rename tables that others reference:
                // foreign keys are switched off around the transaction (the
                // pragma is a no-op inside one) and checked before commit.
                c.ddl("PRAGMA foreign_keys = OFF").await.map_err(from_db)?;
                let result = self.migrate_in(&mut c, allow_destructive).await;
                let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
                let ended = c.ddl(end).await;
                c.ddl("PRAGMA foreign_keys = ON").await.map_err(from_db)?;
                let steps = result?;
                ended.map_err(from_db)?;
                self.inner.internal_ready.store(true, Ordering::Release);
                Ok(steps)
            }
            Dialect::Postgres => {
                let mut tx = self.inner.db.begin().await?;
                let steps = self.migrate_in(&mut tx.conn(), allow_destructive).await?;
                tx.commit().await.map_err(from_db)?;
                self.inner.internal_ready.store(true, Ordering::Release);
                Ok(steps)
            }
        }
    }

    async fn migrate_in(
        &self,
        c: &mut Conn<'_>,
        allow_destructive: bool,
    ) -> Result<Vec<MigrationStep>, StoreError> {
        let d = self.dialect();
        match d {
            Dialect::Sqlite => c.ddl("BEGIN IMMEDIATE").await.map_err(from_db)?,
            // Instances starting together on one database migrate one at a time.
            Dialect::Postgres => c.ddl(SCHEMA_LOCK).await.map_err(from_db)?,
        }
        migrate::ensure_internal(c, d).await.map_err(from_db)?;
        let Plan {
            steps,
            recorded,
            renamed,
            new,
            version,
        } = self.compute_plan(c).await?;
        if steps.iter().any(MigrationStep::is_destructive) && !allow_destructive {
            return Err(StoreError::DestructiveMigration {
                steps: steps.iter().map(ToString::to_string).collect(),
            });
        }
        if steps.is_empty() && version > 0 {
            return Ok(steps);
        }
        migrate::check_new_keys(c, d, &steps, &recorded).await?;
        // Existing rows of a new `@createdAt` / `@updatedAt` column get the
        // migration's time.
        let now = gatehouse_schema::datetime_text(self.inner.clock.now_micros());
        migrate::apply(
            c,
            d,
            &self.inner.model,
            &recorded,
            &renamed,
            &new,
            &steps,
            &now,
        )
        .await
        .map_err(migration_error)?;
        if d == Dialect::Sqlite {
            let bad = c
                .fetch(Built::raw("PRAGMA foreign_key_check", vec![]), &[])
                .await
                .map_err(from_db)?;
            if !bad.is_empty() {
                return Err(StoreError::conflict(
                    "migration failed: rows would reference missing rows after it",
                ));
            }
        }
        c.execute(migrate::record_sql(d, &new, version + 1, &now)?)
            .await
            .map_err(from_db)?;
        tracing::info!(
            version = version + 1,
            steps = steps.len(),
            "schema migrated"
        );
        Ok(steps)
    }

    // ---------------------------------------------------------------- helpers

    /// Adds the policy of `action` on `e` for `ctx` to `s`.
    pub(crate) fn restrict(
        &self,
        s: &mut SelectStatement,
        e: &Entity,
        action: Action,
        ctx: &AccessContext,
    ) -> Result<(), StoreError> {
        if let Some(c) = policy::condition(&self.inner.model, e, self.dialect(), action, ctx)? {
            s.and_where(c);
        }
        Ok(())
    }

    /// Whether row `id` of `e`, as the transaction sees it, matches the
    /// policy of `action` for `ctx` (true when that is not filtered).
    pub(crate) async fn matches(
        &self,
        tx: &mut gatehouse_db::Tx,
        e: &Entity,
        id: &str,
        action: Action,
        ctx: &AccessContext,
    ) -> Result<bool, StoreError> {
        let d = self.dialect();
        let model = &self.inner.model;
        let Some(c) = policy::condition_for_row(model, e, d, action, ctx, Some(id), &[])? else {
            return Ok(true);
        };
        let mut s = Query::select();
        s.expr(Expr::cust("1"))
            .from(e.table.clone())
            .and_where(col(e, id_field(e)?).eq(id))
            .and_where(c);
        let rows = tx
            .conn()
            .fetch(Built::of(d, &s), &[])
            .await
            .map_err(from_db)?;
        Ok(!rows.is_empty())
    }

    /// The statement answering whether `row`, as given rather than as
    /// stored, meets the policy of `action` on `e` for `ctx`: one row when
    /// it does. `None` when the action is not filtered for `ctx`.
    ///
    /// The row's values stand in for the table (a one-row derived table
    /// under the table's name), so the rule means exactly what it means in
    /// every other statement, relations it follows included.
    pub(crate) fn row_test(
        &self,
        e: &Entity,
        row: &Row,
        action: Action,
        ctx: &AccessContext,
    ) -> Result<Option<Built>, StoreError> {
        self.row_test_beside(e, row, action, ctx, &[])
    }

    /// [`Store::row_test`], where the rule also finds the deleted rows of
    /// `gone` ([`policy::condition_beside`]).
    pub(crate) fn row_test_beside(
        &self,
        e: &Entity,
        row: &Row,
        action: Action,
        ctx: &AccessContext,
        gone: &[(&Entity, Row)],
    ) -> Result<Option<Built>, StoreError> {
        let (model, d) = (&self.inner.model, self.dialect());
        let id = row.get("id").and_then(serde_json::Value::as_str);
        let Some(c) = policy::condition_for_row(model, e, d, action, ctx, id, gone)? else {
            return Ok(None);
        };
        let mut q = Query::select();
        q.expr(Expr::cust("1"))
            .from_subquery(
                policy::values_table(model, e, d, row)?,
                sea_query::Alias::new(e.table.clone()),
            )
            .and_where(c);
        Ok(Some(Built::of(d, &q)))
    }

    /// Whether `row` as it would be written meets the policy of `action`
    /// for `ctx`, as the transaction sees the rows it refers to. Asked
    /// before the row is written: a row outside the policy is refused
    /// before a unique key or a foreign key can answer for rows the
    /// caller may not see (`docs/design/policies.md`).
    pub(crate) async fn row_matches(
        &self,
        tx: &mut gatehouse_db::Tx,
        e: &Entity,
        row: &Row,
        action: Action,
        ctx: &AccessContext,
    ) -> Result<bool, StoreError> {
        let Some(q) = self.row_test(e, row, action, ctx)? else {
            return Ok(true);
        };
        let rows = tx.conn().fetch(q, &[]).await.map_err(from_db)?;
        Ok(!rows.is_empty())
    }

    /// Refuses a reference in `row` to a row `ctx` may not read, in the
    /// words of a reference to a missing row: a write must not tell which
    /// ids of invisible rows exist.
    ///
    /// `nested_via` names the reference a nested create set to the row it
    /// has just created in this transaction: that one is not checked. The
    /// caller wrote that row in the same request (nothing about another
    /// row is told), and its read rule may only hold once its children are
    /// written: an org read by its members gets its first member nested in
    /// its create (`docs/design/policies.md`, "Relation rules").
    pub(crate) async fn check_references(
        &self,
        tx: &mut gatehouse_db::Tx,
        e: &Entity,
        row: &Row,
        ctx: &AccessContext,
        nested_via: Option<&str>,
    ) -> Result<(), StoreError> {
        for f in e.stored_fields() {
            if nested_via == Some(f.name.as_str()) {
                continue;
            }
            let (Some(t), Some(Json::String(id))) =
                (self.inner.model.to_one_target(f), row.get(&f.name))
            else {
                continue;
            };
            if !self.matches(tx, t, id, Action::Read, ctx).await? {
                return Err(StoreError::invalid(
                    &f.name,
                    format!("there is no {} with id `{id}`", t.name),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn select(&self, e: &Entity, cols: &[Col<'_>]) -> SelectStatement {
        let mut s = Query::select();
        s.from(e.table.clone());
        for c in cols {
            s.expr(col(e, c.field));
        }
        s
    }

    pub(crate) async fn fetch_read(
        &self,
        q: Built,
        ks: &[SqlKind],
    ) -> Result<Vec<DbRow>, StoreError> {
        let mut c = self.inner.db.read().await?;
        c.conn().fetch(q, ks).await.map_err(from_db)
    }

    /// Validates a whole row (insert, replace) and returns it canonical, with an id.
    pub(crate) fn full_row(
        &self,
        e: &Entity,
        row: &Row,
        whole: Whole<'_>,
    ) -> Result<Row, StoreError> {
        check_keys(e, row)?;
        let model = &self.inner.model;
        let mut out = Row::new();
        for f in e.stored_fields() {
            // Left out of a new row: its stored default, if it has one.
            if let (None, Some(d), Whole::New { now }) = (row.get(&f.name), &f.default, whole) {
                let v = match d {
                    FieldDefault::Value(v) => v.clone(),
                    FieldDefault::Now => Json::String(gatehouse_schema::datetime_text(now)),
                };
                out.insert(f.name.clone(), v);
                continue;
            }
            let given = row.get(&f.name).unwrap_or(&Json::Null);
            let v = match (f.generated, given, whole) {
                (Some(Generated::Id), Json::Null, Whole::Replacing(id)) => {
                    Json::String(id.to_string())
                }
                (Some(Generated::Id), v, Whole::Replacing(id)) if v.as_str() != Some(id) => {
                    return Err(StoreError::invalid(
                        "id",
                        "the id of a row cannot be changed",
                    ));
                }
                // A replacement keeps the creation time; the update stamps
                // the rest (`EntityStore::write_existing`).
                (
                    Some(Generated::CreatedAt | Generated::UpdatedAt | Generated::EmailVerified),
                    _,
                    Whole::Replacing(_),
                ) => {
                    continue;
                }
                (Some(g), Json::Null, Whole::New { now }) => self.generate(g, now),
                _ => check_field(model, f, given)?,
            };
            out.insert(f.name.clone(), v);
        }
        Ok(out)
    }

    /// Adds a hook whose statements run in every writing transaction that
    /// changes rows, before it commits ([`CommitHook`]). A statement that
    /// fails fails the write.
    pub fn add_commit_hook(&self, hook: Arc<dyn CommitHook>) {
        let mut hooks = self.inner.hooks.write().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = hooks.iter().cloned().collect();
        all.push(hook);
        *hooks = Arc::from(all);
    }

    fn commit_hooks(&self) -> Arc<[Arc<dyn CommitHook>]> {
        self.inner
            .hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The value the server gives a generated field of a row written at
    /// `now` (the transaction's time, see `Unit::write`). The one place
    /// generated values are made.
    pub(crate) fn generate(&self, g: Generated, now: i64) -> Json {
        match g {
            // A UUIDv7 whose time is the write's, from the store's clock;
            // one counter for the process keeps ids increasing in the
            // order they are made, also within a millisecond, a manual
            // clock's instant, or a transaction that began earlier.
            Generated::Id => {
                static IDS: std::sync::Mutex<uuid::ContextV7> =
                    std::sync::Mutex::new(uuid::ContextV7::new());
                let secs = u64::try_from(now.div_euclid(1_000_000)).unwrap_or(0);
                let nanos = u32::try_from(now.rem_euclid(1_000_000) * 1_000).unwrap_or(0);
                let ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
                let ts = uuid::Timestamp::from_unix(&*ids, secs, nanos);
                Json::String(uuid::Uuid::new_v7(ts).to_string())
            }
            Generated::CreatedAt | Generated::UpdatedAt => {
                Json::String(gatehouse_schema::datetime_text(now))
            }
            Generated::EmailVerified => Json::Bool(false),
        }
    }

    /// Notifies other instances of `evs` (PostgreSQL, inside the
    /// transaction), commits, then publishes them locally, in order: a
    /// transaction's changes are announced only once it committed, and a
    /// rolled-back one's never (`docs/design/transactions.md`).
    pub(crate) async fn commit_all(
        &self,
        mut tx: gatehouse_db::Tx,
        evs: Vec<ChangeEvent>,
    ) -> Result<(), StoreError> {
        // The hooks' statements and (PostgreSQL) one `pg_notify` per event
        // travel with the `COMMIT`, in one round trip: if one fails, the
        // transaction rolls back with it.
        let hooks = self.commit_hooks();
        let mut with_commit = Vec::new();
        let mut hooked = Vec::new();
        for hook in hooks.iter() {
            let before = with_commit.len();
            for ev in &evs {
                with_commit.extend(hook.statements(ev));
            }
            if with_commit.len() > before {
                hooked.push(hook.clone());
            }
        }
        if self.dialect() == Dialect::Postgres {
            for (i, ev) in evs.iter().enumerate() {
                let origin = &self.inner.origin;
                let more = i + 1 < evs.len();
                let mut payload = feed::payload(origin, ev, more);
                let mut c = tx.conn();
                if payload.len() > feed::MAX_NOTIFY_BYTES {
                    let rows = c
                        .fetch(
                            Built::raw(
                                format!(
                                    "INSERT INTO {} (payload) VALUES ($1) RETURNING id",
                                    q(migrate::EVENTS_TABLE)
                                ),
                                vec![sea_query::Value::String(Some(payload))],
                            ),
                            &[SqlKind::Count],
                        )
                        .await
                        .map_err(from_db)?;
                    let id = rows
                        .first()
                        .and_then(|r| r.first())
                        .and_then(Json::as_i64)
                        .unwrap_or(0);
                    c.execute(Built::raw(
                        format!(
                            "DELETE FROM {} WHERE created_at < now() - interval '1 hour'",
                            q(migrate::EVENTS_TABLE)
                        ),
                        vec![],
                    ))
                    .await
                    .map_err(from_db)?;
                    payload = feed::reference(origin, id, more);
                }
                with_commit.push(Built::raw(
                    "SELECT pg_notify($1, $2)",
                    vec![
                        sea_query::Value::String(Some(feed::CHANNEL.to_string())),
                        sea_query::Value::String(Some(payload)),
                    ],
                ));
            }
        }
        let committed = tx.commit_after(&with_commit).await;
        // Even after a failed commit: whether it took effect is unknown.
        // A transaction that changed nothing leaves the counts as they are.
        if !evs.is_empty() {
            self.inner.writes.fetch_add(1, Ordering::SeqCst);
        }
        committed.map_err(from_db)?;
        for hook in hooked {
            hook.committed();
        }
        self.inner.events.publish_commit(evs);
        Ok(())
    }

    /// Classifies a failed write by the rule it broke (`gatehouse-db` maps
    /// SQLite extended codes and PostgreSQL SQLSTATEs to the same kinds),
    /// then finds the field concerned to name it in the error.
    pub(crate) async fn write_error(
        &self,
        e: &Entity,
        err: gatehouse_db::Error,
        row: Option<&Row>,
        deleting: Option<(&str, &AccessContext)>,
    ) -> StoreError {
        let Some(db) = err.violation() else {
            return from_db(err);
        };
        match db.kind {
            ViolationKind::Unique => {
                // A case-folded key (the account type's `email`) is an
                // index on an expression: PostgreSQL names it, SQLite says
                // "UNIQUE constraint failed: index '<name>'".
                let folded = e.stored_fields().find(|f| {
                    let name = migrate::folded_key_name(&e.table, &f.column);
                    db.constraint == Some(name.as_str())
                        || db.message.ends_with(&format!("index '{name}'"))
                });
                if let Some(f) = folded {
                    return StoreError::conflict(format!(
                        "{}.{} must be unique without regard to case: another {} already has this value",
                        e.name, f.name, e.name
                    ));
                }
                let column = match db.constraint {
                    // PostgreSQL names the constraint: `<table>_<column>_key` / `<table>_pkey`.
                    Some(name) => e
                        .stored_fields()
                        .find(|f| {
                            name == format!("{}_{}_key", e.table, f.column)
                                || (matches!(f.kind, FieldKind::Id)
                                    && name == format!("{}_pkey", e.table))
                        })
                        .map(|f| f.column.clone()),
                    // SQLite only says it in the message: "UNIQUE constraint failed: table.column".
                    None => db
                        .message
                        .rsplit(": ")
                        .next()
                        .and_then(|s| s.split(", ").next())
                        .and_then(|s| s.rsplit('.').next())
                        .map(str::to_string),
                };
                if let Some(key) = composite_key(e, &db) {
                    return StoreError::conflict(format!(
                        "{} ({}) must be unique together: another {} already has these values",
                        e.name,
                        key.fields.join(", "),
                        e.name
                    ));
                }
                let field = column.and_then(|c| e.stored_fields().find(|f| f.column == c));
                match field {
                    Some(f) if matches!(f.kind, FieldKind::Id) => {
                        let id = row
                            .and_then(|r| r.get("id"))
                            .and_then(Json::as_str)
                            .unwrap_or("");
                        StoreError::conflict(format!("a {} with id `{id}` already exists", e.name))
                    }
                    Some(f) => StoreError::conflict(format!(
                        "{}.{} must be unique: another {} already has this value",
                        e.name, f.name, e.name
                    )),
                    None => StoreError::conflict(format!(
                        "a unique value of {} is already taken",
                        e.name
                    )),
                }
            }
            ViolationKind::ForeignKey => {
                if let Some((id, ctx)) = deleting {
                    return self.referenced_conflict(e, id, ctx).await;
                }
                if let Some(row) = row {
                    for f in e.stored_fields() {
                        let (FieldKind::ToOne { .. }, Some(Json::String(v))) =
                            (&f.kind, row.get(&f.name))
                        else {
                            continue;
                        };
                        let found = match self.target_of(f) {
                            Ok(t) => t.get(&AccessContext::system(), v).await,
                            Err(other) => Err(other),
                        };
                        match found {
                            Ok(None) => {
                                let target = self
                                    .inner
                                    .model
                                    .target_of(f)
                                    .map_or("", |t| t.name.as_str());
                                return StoreError::invalid(
                                    &f.name,
                                    format!("there is no {target} with id `{v}`"),
                                );
                            }
                            Ok(Some(_)) => {}
                            Err(other) => return other,
                        }
                    }
                }
                StoreError::invalid(&e.name, "a referenced row does not exist")
            }
            _ => from_db(err),
        }
    }

    /// The conflict of deleting row `id` of `e` while rows still refer to
    /// it under `RESTRICT`. It names what refers to it only as far as
    /// `ctx` may see: the referencing type and field when `ctx` may read at
    /// least one of those rows (and that field), the row itself only when
    /// `ctx` may read it (a row reached by a cascade may be hidden). That
    /// the delete is refused still tells that some row refers to it; which
    /// rows is not told (`docs/design/relations.md`).
    async fn referenced_conflict(&self, e: &Entity, id: &str, ctx: &AccessContext) -> StoreError {
        let model = &self.inner.model;
        let d = self.dialect();
        let mut seen = Query::select();
        seen.expr(Expr::cust("1")).from(e.table.clone());
        let own = match id_field(e) {
            Ok(f) => col(e, f).eq(id),
            Err(other) => return other,
        };
        seen.and_where(own).limit(1);
        if let Err(other) = self.restrict(&mut seen, e, Action::Read, ctx) {
            return other;
        }
        let readable = match self.fetch_read(Built::of(d, &seen), &[]).await {
            Ok(rows) => !rows.is_empty(),
            Err(other) => return other,
        };
        if !readable {
            return StoreError::conflict(
                "cannot delete: a row the delete would cascade to is still referenced by other rows",
            );
        }
        for child in &model.entities {
            if !ctx.allows(child.read_scope(), true) {
                continue;
            }
            for f in child.stored_fields() {
                if model.to_one_target(f).is_none_or(|t| t.name != e.name)
                    || model
                        .field_read_scope(f)
                        .is_some_and(|scope| !ctx.allows(scope, true))
                {
                    continue;
                }
                let mut s = Query::select();
                s.expr(Expr::cust("1"))
                    .from(child.table.clone())
                    .and_where(col(child, f).eq(id))
                    .limit(1);
                if let Err(other) = self.restrict(&mut s, child, Action::Read, ctx) {
                    return other;
                }
                match self.fetch_read(Built::of(d, &s), &[]).await {
                    Ok(rows) if !rows.is_empty() => {
                        return StoreError::conflict(format!(
                            "cannot delete {} `{id}`: {} rows still reference it through `{}`",
                            e.name, child.name, f.name
                        ));
                    }
                    Ok(_) => {}
                    Err(other) => return other,
                }
            }
        }
        StoreError::conflict(format!(
            "cannot delete {} `{id}`: other rows still reference it",
            e.name
        ))
    }
}

/// What [`Store::full_row`] makes a row for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Whole<'a> {
    /// A new row written at `now` (microseconds): generated fields are
    /// made when left out.
    New { now: i64 },
    /// The replacement of the row with this id: the id may be repeated
    /// but not changed, and the stored times are kept.
    Replacing(&'a str),
}

/// The composite key (`@unique(fields:)`) a unique violation is about:
/// PostgreSQL names its index, SQLite lists its columns
/// ("UNIQUE constraint failed: vote.user_id, vote.link_id").
fn composite_key<'e>(e: &'e Entity, db: &Violation<'_>) -> Option<&'e gatehouse_schema::UniqueKey> {
    match db.constraint {
        Some(name) => e
            .unique_keys
            .iter()
            .find(|k| k.index_name(&e.table) == name),
        None => {
            let listed = db.message.rsplit(": ").next()?;
            let columns: Vec<&str> = listed
                .split(", ")
                .filter_map(|s| s.rsplit('.').next())
                .collect();
            e.unique_keys.iter().find(|k| k.columns == columns)
        }
    }
}

pub(crate) fn id_field(e: &Entity) -> Result<&gatehouse_schema::Field, StoreError> {
    e.fields
        .iter()
        .find(|f| matches!(f.kind, FieldKind::Id))
        .ok_or_else(|| StoreError::internal(format!("entity {} has no id field", e.name)))
}

pub(crate) fn row_id(row: &Row) -> String {
    row.get("id")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

pub(crate) fn kinds(cols: &[Col<'_>]) -> Vec<SqlKind> {
    cols.iter().map(Col::kind).collect()
}

pub(crate) fn to_row(cols: &[Col<'_>], values: DbRow) -> Row {
    cols.iter()
        .zip(values)
        .map(|(c, v)| (c.field.name.clone(), v))
        .collect()
}

pub(crate) fn names(cols: &[Col<'_>]) -> Vec<String> {
    cols.iter().map(|c| c.field.name.clone()).collect()
}

pub(crate) fn row_set(cols: &[Col<'_>], rows: Vec<DbRow>) -> RowSet {
    RowSet {
        columns: names(cols),
        rows,
    }
}

fn migration_error(e: gatehouse_db::Error) -> StoreError {
    match e.violation() {
        Some(db) => {
            tracing::warn!(error = %e, "migration step failed");
            StoreError::conflict(format!("migration failed: {}", db.message))
        }
        None => from_db(e),
    }
}

/// An id no row can have (U+0000 is refused on every write, and PostgreSQL
/// cannot even compare it): a lookup by it is a miss without a round trip.
pub(crate) fn unstorable(id: &str) -> bool {
    id.contains('\0')
}

/// A migration plan and the layouts it runs between.
struct Plan {
    steps: Vec<MigrationStep>,
    /// The layout recorded by the last migration.
    recorded: Layout,
    /// `recorded` once the plan's renames are done.
    renamed: Layout,
    /// The Model's layout.
    new: Layout,
    version: u64,
}
