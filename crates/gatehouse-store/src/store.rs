//! The [`Store`]: every operation GraphQL and REST need, over either backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gatehouse_schema::{AccessContext, Action, ChangeKind, Entity, FieldKind, Model};
use sea_query::{Expr, ExprTrait, Func, LockType, Order, Query, SelectStatement, WindowStatement};
use serde_json::Value as Json;
use sqlx::error::ErrorKind;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use gatehouse_db::{Built, Conn, Db, DbOptions, DbRow, PoolStats, SCHEMA_LOCK};

use crate::error::from_sqlx;
use crate::feed::{self, ChangeEvent};
use crate::migrate::{self, Layout, MigrationStep, q};
use crate::policy;
use crate::query::{
    Col, Filter, JoinOne, ListQuery, apply_order, col, columns, condition, ordering, stored_field,
};
use crate::value::{Dialect, SqlKind, check_field, check_keys, to_sql};
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
    /// Pool size (default: 4 SQLite readers, 10 PostgreSQL connections).
    pub max_connections: Option<u32>,
    /// How long an operation waits for a free connection before failing with
    /// [`StoreError::Unavailable`] (default 5 s).
    pub acquire_timeout: Duration,
    /// Events buffered per subscriber before a slow one starts missing them
    /// (it then gets `RecvError::Lagged`). Default 1024.
    pub event_capacity: usize,
    /// SQLite only: fsync every commit (`synchronous=FULL`), so that even a
    /// power loss keeps acknowledged writes. The default (`false`,
    /// `synchronous=NORMAL` in WAL mode) keeps them through a killed process
    /// (SIGKILL, crash) and fsyncs at checkpoints: several times the write
    /// throughput on slow disks.
    pub sqlite_sync_every_commit: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            migrate: true,
            allow_destructive: false,
            max_connections: None,
            acquire_timeout: Duration::from_secs(5),
            event_capacity: 1024,
            sqlite_sync_every_commit: false,
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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Db,
    model: Arc<Model>,
    events: Arc<feed::Local>,
    /// This instance's id, carried by its PostgreSQL notifications.
    origin: String,
    listener: Option<JoinHandle<()>>,
    /// The internal tables are known to exist (created by a migration or
    /// [`Store::ensure_internal_tables`] of this instance).
    internal_ready: AtomicBool,
    /// Bumped after every write of this instance and every change another
    /// instance announces: a count taken before a bump is stale.
    writes: Arc<AtomicU64>,
    /// `entity \0 filter \0 caller` -> (writes generation, when the count
    /// began, count); see [`Store::count`]. Why: REST lists answer
    /// `X-Total-Count`, so every page would also count the whole filtered
    /// table, which costs more than reading the page.
    counts: quick_cache::sync::Cache<String, (u64, Instant, u64)>,
}

/// How long a cached count is trusted without a write being seen: bounds
/// staleness when a change is not announced (a write made outside gatehouse,
/// a notification lost while the listener reconnects).
const COUNT_CACHE_TTL: Duration = Duration::from_secs(1);
/// Counts kept at most.
const COUNT_CACHE_MAX: usize = 1024;

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
            },
        )
        .await?;
        let events = Arc::new(feed::Local::new(opts.event_capacity));
        let origin = uuid::Uuid::now_v7().to_string();
        let writes = Arc::new(AtomicU64::new(0));
        let listener = match db.pg_pool() {
            Some(pool) => {
                let l = feed::listen(pool).await.map_err(from_sqlx)?;
                Some(tokio::spawn(feed::run_listener(
                    l,
                    pool.clone(),
                    origin.clone(),
                    events.clone(),
                    writes.clone(),
                )))
            }
            None => None,
        };
        let store = Store {
            inner: Arc::new(Inner {
                db,
                model,
                events,
                origin,
                listener,
                internal_ready: AtomicBool::new(false),
                writes,
                counts: quick_cache::sync::Cache::new(COUNT_CACHE_MAX),
            }),
        };
        if opts.migrate {
            store.migrate(opts.allow_destructive).await?;
        }
        Ok(store)
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

    /// Checks that the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut c = self.inner.db.read().await?;
        c.conn().ping().await.map_err(from_sqlx)
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
            c.ddl(SCHEMA_LOCK).await.map_err(from_sqlx)?;
        }
        migrate::ensure_internal(&mut c, d)
            .await
            .map_err(from_sqlx)?;
        tx.commit().await.map_err(from_sqlx)?;
        self.inner.internal_ready.store(true, Ordering::Release);
        Ok(())
    }

    fn entity(&self, name: &str) -> Result<&Entity, StoreError> {
        self.inner
            .model
            .entity(name)
            .ok_or_else(|| StoreError::invalid(name, format!("unknown entity `{name}`")))
    }

    // ---------------------------------------------------------------- migration

    /// The steps that would bring the tables to the Model (empty when they match).
    pub async fn plan(&self) -> Result<Vec<MigrationStep>, StoreError> {
        let mut pooled = self.inner.db.write().await?;
        let mut c = pooled.conn();
        migrate::ensure_internal(&mut c, self.dialect())
            .await
            .map_err(from_sqlx)?;
        let (steps, _, _) = self.compute_plan(&mut c).await?;
        Ok(steps)
    }

    /// The applied layout version (0 before the first migration).
    pub async fn schema_version(&self) -> Result<u64, StoreError> {
        let mut pooled = self.inner.db.write().await?;
        let mut c = pooled.conn();
        migrate::ensure_internal(&mut c, self.dialect())
            .await
            .map_err(from_sqlx)?;
        Ok(migrate::recorded(&mut c).await?.1)
    }

    async fn compute_plan(
        &self,
        c: &mut Conn<'_>,
    ) -> Result<(Vec<MigrationStep>, Layout, u64), StoreError> {
        let (old, version) = migrate::recorded(c).await?;
        let new = Layout::from_model(&self.inner.model);
        let mut nonempty = std::collections::BTreeSet::new();
        for t in migrate::tables_needing_row_check(&old, &new) {
            if migrate::has_rows(c, &t).await? {
                nonempty.insert(t);
            }
        }
        let steps = migrate::plan(&old, &new, &|t| nonempty.contains(t));
        Ok((steps, new, version))
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
                c.ddl("PRAGMA foreign_keys = OFF")
                    .await
                    .map_err(from_sqlx)?;
                let result = self.migrate_in(&mut c, allow_destructive).await;
                let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
                let ended = c.ddl(end).await;
                c.ddl("PRAGMA foreign_keys = ON").await.map_err(from_sqlx)?;
                let steps = result?;
                ended.map_err(from_sqlx)?;
                self.inner.internal_ready.store(true, Ordering::Release);
                Ok(steps)
            }
            Dialect::Postgres => {
                let mut tx = self.inner.db.begin().await?;
                let steps = self.migrate_in(&mut tx.conn(), allow_destructive).await?;
                tx.commit().await.map_err(from_sqlx)?;
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
            Dialect::Sqlite => c.ddl("BEGIN IMMEDIATE").await.map_err(from_sqlx)?,
            // Instances starting together on one database migrate one at a time.
            Dialect::Postgres => c.ddl(SCHEMA_LOCK).await.map_err(from_sqlx)?,
        }
        migrate::ensure_internal(c, d).await.map_err(from_sqlx)?;
        let (steps, new, version) = self.compute_plan(c).await?;
        if steps.iter().any(MigrationStep::is_destructive) && !allow_destructive {
            return Err(StoreError::DestructiveMigration {
                steps: steps.iter().map(ToString::to_string).collect(),
            });
        }
        if steps.is_empty() && version > 0 {
            return Ok(steps);
        }
        let (old, _) = migrate::recorded(c).await?;
        migrate::apply(c, d, &self.inner.model, &old, &new, &steps)
            .await
            .map_err(migration_error)?;
        if d == Dialect::Sqlite {
            let bad = c
                .fetch(Built::raw("PRAGMA foreign_key_check", vec![]), &[])
                .await
                .map_err(from_sqlx)?;
            if !bad.is_empty() {
                return Err(StoreError::conflict(
                    "migration failed: rows would reference missing rows after it",
                ));
            }
        }
        c.execute(migrate::record_sql(d, &new, version + 1)?)
            .await
            .map_err(from_sqlx)?;
        tracing::info!(
            version = version + 1,
            steps = steps.len(),
            "schema migrated"
        );
        Ok(steps)
    }

    // ---------------------------------------------------------------- reads

    /// The row of `entity` with `id`, or `None` (also when `ctx` may not read it).
    pub async fn get(
        &self,
        ctx: &AccessContext,
        entity: &str,
        id: &str,
    ) -> Result<Option<Row>, StoreError> {
        let e = self.entity(entity)?;
        if unstorable(id) {
            return Ok(None);
        }
        let cols = columns(&self.inner.model, e, None)?;
        let mut s = self.select(e, &cols);
        s.and_where(col(e, id_field(e)?).eq(id));
        self.restrict(&mut s, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(self.dialect(), &s), &kinds(&cols))
            .await?;
        Ok(rows.into_iter().next().map(|r| to_row(&cols, r)))
    }

    /// The rows of `entity` whose ids are in `ids`, by id, in one statement
    /// (the to-one batch of a relation). Missing ids are absent from the map.
    pub async fn get_many(
        &self,
        ctx: &AccessContext,
        entity: &str,
        ids: &[String],
    ) -> Result<HashMap<String, Row>, StoreError> {
        Ok(self
            .get_many_set(ctx, entity, ids, None)
            .await?
            .into_rows()
            .into_iter()
            .filter_map(|r| Some((r.get("id")?.as_str()?.to_string(), r)))
            .collect())
    }

    /// [`Store::get_many`] in column form, reading only `select` (plus
    /// `id`, always first) when given. Rows come in no particular order;
    /// missing ids have none.
    pub async fn get_many_set(
        &self,
        ctx: &AccessContext,
        entity: &str,
        ids: &[String],
        select: Option<&[String]>,
    ) -> Result<RowSet, StoreError> {
        let e = self.entity(entity)?;
        let cols = columns(&self.inner.model, e, select)?;
        let ids: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|i| !unstorable(i))
            .collect();
        if ids.is_empty() {
            return Ok(empty_set(&cols));
        }
        let mut s = self.select(e, &cols);
        s.and_where(col(e, id_field(e)?).is_in(ids.iter().map(|i| Expr::val(*i))));
        self.restrict(&mut s, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(self.dialect(), &s), &kinds(&cols))
            .await?;
        Ok(row_set(&cols, rows))
    }

    /// The rows of `entity` that match `query`, ordered and paged.
    pub async fn list(
        &self,
        ctx: &AccessContext,
        entity: &str,
        query: &ListQuery,
    ) -> Result<Vec<Row>, StoreError> {
        Ok(self.list_set(ctx, entity, query).await?.into_rows())
    }

    /// [`Store::list`] in column form.
    pub async fn list_set(
        &self,
        ctx: &AccessContext,
        entity: &str,
        query: &ListQuery,
    ) -> Result<RowSet, StoreError> {
        Ok(self.list_joined(ctx, entity, query, &[]).await?.0)
    }

    /// [`Store::list_set`] that also reads, in the same statement, the row
    /// each of `joins` refers to (a `LEFT JOIN` per to-one field): the
    /// listed rows, then one set per join, row `k` of which belongs to
    /// listed row `k` (all null when the reference is null or dangling).
    /// A to-one relation then costs no statement of its own.
    pub async fn list_joined(
        &self,
        ctx: &AccessContext,
        entity: &str,
        query: &ListQuery,
        joins: &[JoinOne],
    ) -> Result<(RowSet, Vec<RowSet>), StoreError> {
        let prepared = self.prepare_list(ctx, entity, query, joins)?;
        self.run_list(&prepared).await
    }

    /// Builds the statement of [`Store::list_joined`] without running it, to
    /// be run by [`Store::run_list`] as often as needed: a caller that reads
    /// the same page again and again (the planned executor, for a query
    /// whose arguments hold no variables) skips building the SQL each time.
    /// It reads what the store holds when it runs, not when it was built,
    /// for the caller `ctx` it was built for: run it for no other (see
    /// [`AccessContext::key`]).
    pub fn prepare_list(
        &self,
        ctx: &AccessContext,
        entity: &str,
        query: &ListQuery,
        joins: &[JoinOne],
    ) -> Result<PreparedList, StoreError> {
        let model = &self.inner.model;
        let e = self.entity(entity)?;
        policy::check_compared(model, e, ctx, query.filter.as_ref(), &query.order)?;
        let cols = columns(model, e, query.select.as_deref())?;
        let mut s = self.select(e, &cols);
        let mut kinds = kinds(&cols);
        let mut joined = Vec::with_capacity(joins.len());
        for (j, join) in joins.iter().enumerate() {
            let field = stored_field(e, &join.field)?;
            let FieldKind::ToOne { target } = &field.kind else {
                return Err(StoreError::invalid(
                    &join.field,
                    format!("is not a to-one relation of {}", e.name),
                ));
            };
            let t = self.entity(target)?;
            let t_cols = columns(model, t, Some(&join.select))?;
            let alias = sea_query::Alias::new(format!("j{j}"));
            let mut on = Expr::col((alias.clone(), id_field(t)?.column.clone()))
                .equals((e.table.clone(), field.column.clone()));
            // A referenced row the caller may not read joins as nulls.
            if let Some(c) = policy::condition(model, t, self.dialect(), Action::Read, ctx)? {
                let mut visible = Query::select();
                visible
                    .expr(col(t, id_field(t)?))
                    .from(t.table.clone())
                    .and_where(c);
                on = on.and(
                    Expr::col((alias.clone(), id_field(t)?.column.clone())).in_subquery(visible),
                );
            }
            s.join_as(
                sea_query::JoinType::LeftJoin,
                t.table.clone(),
                alias.clone(),
                on,
            );
            for c in &t_cols {
                s.expr(Expr::col((alias.clone(), c.field.column.clone())));
            }
            kinds.extend(t_cols.iter().map(Col::kind));
            joined.push(names(&t_cols));
        }
        if let Some(f) = &query.filter {
            s.and_where(condition(model, e, self.dialect(), f)?);
        }
        self.restrict(&mut s, e, Action::Read, ctx)?;
        apply_order(&mut s, e, &query.order)?;
        let built = if query.limit == Some(0) {
            None
        } else {
            // The page numbers are written into the SQL, not bound. They are
            // ours (integers, never text from a request), and both backends
            // plan a bound LIMIT badly. SQLite (3.47+) reads it while
            // planning and so re-prepares the statement every time one is
            // bound. PostgreSQL cannot cost a generic plan with an unknown
            // LIMIT, finds it dearer than a plan for the values, and so
            // plans the prepared statement again on every execution
            // (`pgbench -M prepared`, a page of books joined to their
            // authors: 19k transactions/s bound, 51k written). Written, each
            // page size keeps one prepared statement and, on PostgreSQL,
            // its generic plan.
            let mut b = Built::of(self.dialect(), &s);
            if query.limit.is_some() || query.offset > 0 {
                let limit = match (query.limit, self.dialect()) {
                    (Some(l), _) => i64::try_from(l).unwrap_or(i64::MAX).to_string(),
                    // SQLite has no OFFSET without LIMIT; -1 means no limit.
                    (None, Dialect::Sqlite) => "-1".to_string(),
                    (None, Dialect::Postgres) => "ALL".to_string(),
                };
                b.sql
                    .push_str(&format!(" LIMIT {limit} OFFSET {}", query.offset));
            }
            Some(b)
        };
        Ok(PreparedList {
            built,
            kinds,
            columns: names(&cols),
            joined,
        })
    }

    /// Runs a statement [`Store::prepare_list`] built: the listed rows, then
    /// one set per join, as [`Store::list_joined`] returns them.
    pub async fn run_list(
        &self,
        prepared: &PreparedList,
    ) -> Result<(RowSet, Vec<RowSet>), StoreError> {
        self.run_list_with_texts(prepared, &[]).await
    }

    /// [`Store::run_list`] with some of the statement's bound text values
    /// replaced: `(position, text)` pairs, positions as
    /// [`PreparedList::text_positions`] finds them. Lets a caller build a
    /// statement once per shape and run it with other ids or strings.
    pub async fn run_list_with_texts(
        &self,
        prepared: &PreparedList,
        texts: &[(usize, &str)],
    ) -> Result<(RowSet, Vec<RowSet>), StoreError> {
        let set = |columns: &Vec<String>, rows| RowSet {
            columns: columns.clone(),
            rows,
        };
        let Some(built) = &prepared.built else {
            let joined = prepared.joined.iter().map(|c| set(c, Vec::new())).collect();
            return Ok((set(&prepared.columns, Vec::new()), joined));
        };
        let mut built = built.clone();
        for &(i, text) in texts {
            match built.values.0.0.get_mut(i) {
                Some(sea_query::Value::String(Some(v))) => text.clone_into(v),
                _ => {
                    return Err(StoreError::internal(format!(
                        "statement value {i} is not a text value"
                    )));
                }
            }
        }
        let rows = self.fetch_read(built, &prepared.kinds).await?;
        if prepared.joined.is_empty() {
            return Ok((set(&prepared.columns, rows), Vec::new()));
        }
        // Each row holds the listed columns, then each join's: split them.
        let width = prepared.columns.len();
        let mut sets: Vec<Vec<DbRow>> = prepared
            .joined
            .iter()
            .map(|_| Vec::with_capacity(rows.len()))
            .collect();
        let mut own = Vec::with_capacity(rows.len());
        for mut row in rows {
            let mut rest = row.split_off(width.min(row.len()));
            for (rows, t_cols) in sets.iter_mut().zip(&prepared.joined) {
                let tail = rest.split_off(t_cols.len().min(rest.len()));
                rows.push(std::mem::replace(&mut rest, tail));
            }
            own.push(row);
        }
        let joined = prepared
            .joined
            .iter()
            .zip(sets)
            .map(|(c, rows)| set(c, rows))
            .collect();
        Ok((set(&prepared.columns, own), joined))
    }

    /// How many rows of `entity` match `filter` (all of them for `None`).
    ///
    /// Counts are cached until the next write this instance makes or hears
    /// of (any write: a cascade changes other entities' counts), and for at
    /// most [`COUNT_CACHE_TTL`]. A count is only kept when no write was seen
    /// while it ran, so a cached count never predates a write it should see.
    pub async fn count(
        &self,
        ctx: &AccessContext,
        entity: &str,
        filter: Option<&Filter>,
    ) -> Result<u64, StoreError> {
        let e = self.entity(entity)?;
        policy::check_compared(&self.inner.model, e, ctx, filter, &[])?;
        // A policy makes the count the caller's own.
        let caller = if policy::read_filtered(e, ctx) {
            ctx.key()
        } else {
            ""
        };
        let key = format!("{entity}\0{filter:?}\0{caller}");
        let generation = self.inner.writes.load(Ordering::SeqCst);
        // Freshness is part of the value (as for every cache here): the
        // count is as old as the statement's start, which is what is checked.
        if let Some((g, at, n)) = self.inner.counts.get(&key)
            && g == generation
            && at.elapsed() < COUNT_CACHE_TTL
        {
            return Ok(n);
        }
        let at = Instant::now();
        let n = self.count_rows(ctx, e, filter).await?;
        if self.inner.writes.load(Ordering::SeqCst) == generation {
            self.inner.counts.insert(key, (generation, at, n));
        }
        Ok(n)
    }

    async fn count_rows(
        &self,
        ctx: &AccessContext,
        e: &Entity,
        filter: Option<&Filter>,
    ) -> Result<u64, StoreError> {
        let mut s = Query::select();
        s.expr(Expr::cust("COUNT(*)")).from(e.table.clone());
        if let Some(f) = filter {
            s.and_where(condition(&self.inner.model, e, self.dialect(), f)?);
        }
        self.restrict(&mut s, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(self.dialect(), &s), &[SqlKind::Count])
            .await?;
        Ok(rows
            .first()
            .and_then(|r| r.first())
            .and_then(Json::as_u64)
            .unwrap_or(0))
    }

    /// The to-many batch of a relation: the rows of `entity` whose to-one
    /// field `via` references one of `parent_ids`, grouped by parent, in ONE
    /// statement whatever the number of parents. `query`'s filter, order,
    /// limit and offset apply per parent (via `ROW_NUMBER() OVER (PARTITION
    /// BY ...)` when paged). Every parent id is a key of the result.
    ///
    /// For `Author.books` (the inverse of `Book.author`): `load_children("Book", "author", ...)`.
    pub async fn load_children(
        &self,
        ctx: &AccessContext,
        entity: &str,
        via: &str,
        parent_ids: &[String],
        query: &ListQuery,
    ) -> Result<HashMap<String, Vec<Row>>, StoreError> {
        let (set, parents) = self
            .load_children_set(ctx, entity, via, parent_ids, query)
            .await?;
        let mut out: HashMap<String, Vec<Row>> =
            parent_ids.iter().map(|p| (p.clone(), Vec::new())).collect();
        for (row, parent) in set.into_rows().into_iter().zip(parents) {
            if let Some(list) = out.get_mut(&parent) {
                list.push(row);
            }
        }
        Ok(out)
    }

    /// [`Store::load_children`] in column form: the children of all
    /// parents, each parent's in order, and beside them the parent id of
    /// each row (aligned with `rows`).
    pub async fn load_children_set(
        &self,
        ctx: &AccessContext,
        entity: &str,
        via: &str,
        parent_ids: &[String],
        query: &ListQuery,
    ) -> Result<(RowSet, Vec<String>), StoreError> {
        let e = self.entity(entity)?;
        policy::check_compared(
            &self.inner.model,
            e,
            ctx,
            query.filter.as_ref(),
            &query.order,
        )?;
        let via_field = stored_field(e, via)?;
        if !matches!(via_field.kind, FieldKind::ToOne { .. }) {
            return Err(StoreError::invalid(via, "is not a to-one relation"));
        }
        let cols = columns(&self.inner.model, e, query.select.as_deref())?;
        if parent_ids.is_empty() || query.limit == Some(0) {
            return Ok((empty_set(&cols), Vec::new()));
        }
        let d = self.dialect();
        let fk = col(e, via_field);
        let mut inner = Query::select();
        inner.from(e.table.clone());
        for c in &cols {
            inner.expr_as(col(e, c.field), format!("c_{}", c.field.column));
        }
        inner.expr_as(fk.clone(), "_gh_parent");
        inner.and_where(
            fk.clone()
                .is_in(parent_ids.iter().map(|i| Expr::val(i.as_str()))),
        );
        if let Some(f) = &query.filter {
            inner.and_where(condition(&self.inner.model, e, d, f)?);
        }
        self.restrict(&mut inner, e, Action::Read, ctx)?;
        let paged = query.limit.is_some() || query.offset > 0;
        let stmt: SelectStatement = if paged {
            let mut w = WindowStatement::partition_by((e.table.clone(), via_field.column.clone()));
            for (expr, ord, nulls) in ordering(e, &query.order)? {
                w.order_by_expr_with_nulls(expr, ord, nulls);
            }
            inner.expr_window_as(Func::cust("ROW_NUMBER"), w, "_gh_rn");
            let mut outer = Query::select();
            for c in &cols {
                outer.column(format!("c_{}", c.field.column));
            }
            outer.column("_gh_parent");
            outer.from_subquery(inner, "_gh_sub");
            let lo = query.offset;
            outer.and_where(
                Expr::col("_gh_rn").gt(Expr::val(i64::try_from(lo).unwrap_or(i64::MAX))),
            );
            if let Some(l) = query.limit {
                let hi = lo.saturating_add(l);
                outer.and_where(
                    Expr::col("_gh_rn").lte(Expr::val(i64::try_from(hi).unwrap_or(i64::MAX))),
                );
            }
            outer
                .order_by("_gh_parent", Order::Asc)
                .order_by("_gh_rn", Order::Asc);
            outer
        } else {
            apply_order(&mut inner, e, &query.order)?;
            inner
        };
        let mut ks = kinds(&cols);
        ks.push(SqlKind::Text);
        let mut rows = self.fetch_read(Built::of(d, &stmt), &ks).await?;
        let parents = rows
            .iter_mut()
            .map(|r| match r.pop() {
                Some(Json::String(p)) => p,
                _ => String::new(),
            })
            .collect();
        Ok((row_set(&cols, rows), parents))
    }

    // ---------------------------------------------------------------- writes

    /// Inserts a row and returns it as stored. The id is a new UUIDv7 unless
    /// `row` gives one; a taken id or `@unique` value is a `Conflict`; a
    /// reference to a missing row is `Invalid` naming the field.
    ///
    /// With a create policy, fields it ties to a claim are filled from
    /// `ctx` when left out, and a row that would not match it is
    /// `Forbidden` and not written.
    pub async fn insert(
        &self,
        ctx: &AccessContext,
        entity: &str,
        mut row: Row,
    ) -> Result<Row, StoreError> {
        let e = self.entity(entity)?;
        // A null sets nothing on a new row: only values need the scope.
        let given: Row = row
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        policy::check_written(&self.inner.model, e, ctx, &given)?;
        policy::inject_owner(e, ctx, &mut row);
        let row = self.full_row(e, &row, None)?;
        let d = self.dialect();
        let cols = columns(&self.inner.model, e, None)?;
        let mut ins = Query::insert();
        ins.into_table(e.table.clone())
            .columns(cols.iter().map(|c| c.field.column.clone()));
        ins.values(
            cols.iter()
                .map(|c| to_sql(d, &c.ty, row.get(&c.field.name).unwrap_or(&Json::Null))),
        )
        .map_err(StoreError::internal)?;
        let id = row_id(&row);
        let ev = ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Created,
            id,
            new: Some(row.clone()),
            old: None,
        };
        let mut tx = self.inner.db.begin().await?;
        if let Err(err) = tx.conn().execute(Built::of(d, &ins)).await {
            drop(tx);
            return Err(self.write_error(e, err, Some(&row), None).await);
        }
        self.check_references(&mut tx, e, &row, ctx).await?;
        if !self
            .matches(&mut tx, e, &ev.id, Action::Create, ctx)
            .await?
        {
            drop(tx);
            return Err(StoreError::forbidden(format!(
                "the new {} does not match its create policy",
                e.name
            )));
        }
        self.commit(tx, ev).await?;
        Ok(row)
    }

    /// Partial update: fields in `patch` are set (explicit null clears),
    /// omitted ones are untouched. `NotFound` when there is no such row;
    /// `Invalid` naming the field when a required field is set to null.
    ///
    /// A row `ctx` may not read is `NotFound`; one it may read but not
    /// change, or a change that would leave the update policy, is `Forbidden`.
    pub async fn update(
        &self,
        ctx: &AccessContext,
        entity: &str,
        id: &str,
        patch: Row,
    ) -> Result<Row, StoreError> {
        let e = self.entity(entity)?;
        check_keys(e, &patch)?;
        policy::check_written(&self.inner.model, e, ctx, &patch)?;
        let mut values = Row::new();
        for (k, v) in &patch {
            let f = stored_field(e, k)?;
            if matches!(f.kind, FieldKind::Id) {
                if v.as_str() != Some(id) {
                    return Err(StoreError::invalid(
                        "id",
                        "the id of a row cannot be changed",
                    ));
                }
                continue;
            }
            values.insert(k.clone(), check_field(&self.inner.model, f, v)?);
        }
        if unstorable(id) {
            return Err(StoreError::NotFound);
        }
        self.write_existing(ctx, e, id, values, false).await
    }

    /// Whole replacement: every field takes its value from `row` (omitted
    /// nullable fields become null). `row` may repeat the id but not change it.
    /// Fields `ctx` may not write keep their values. Policies apply as
    /// for [`Store::update`].
    pub async fn replace(
        &self,
        ctx: &AccessContext,
        entity: &str,
        id: &str,
        row: Row,
    ) -> Result<Row, StoreError> {
        let e = self.entity(entity)?;
        let given: Row = row
            .iter()
            .filter(|(k, v)| !v.is_null() && k.as_str() != "id")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        policy::check_written(&self.inner.model, e, ctx, &given)?;
        let full = self.full_row(e, &row, Some(id))?;
        let model = &self.inner.model;
        let values = full
            .into_iter()
            .filter(|(k, _)| k != "id" && policy::may_write(model, e, ctx, k))
            .collect();
        if unstorable(id) {
            return Err(StoreError::NotFound);
        }
        self.write_existing(ctx, e, id, values, true).await
    }

    async fn write_existing(
        &self,
        ctx: &AccessContext,
        e: &Entity,
        id: &str,
        values: Row,
        whole: bool,
    ) -> Result<Row, StoreError> {
        let d = self.dialect();
        let cols = columns(&self.inner.model, e, None)?;
        let idf = id_field(e)?;
        let mut sel = self.select(e, &cols);
        sel.and_where(col(e, idf).eq(id));
        self.restrict(&mut sel, e, Action::Read, ctx)?;
        if d == Dialect::Postgres {
            sel.lock(LockType::Update);
        }
        let mut tx = self.inner.db.begin().await?;
        let old = tx
            .conn()
            .fetch(Built::of(d, &sel), &kinds(&cols))
            .await
            .map_err(from_sqlx)?
            .into_iter()
            .next()
            .map(|r| to_row(&cols, r))
            .ok_or(StoreError::NotFound)?;
        if !self.matches(&mut tx, e, id, Action::Update, ctx).await? {
            return Err(forbidden_change(e));
        }
        if values.is_empty() {
            return Ok(old);
        }
        let mut new = old.clone();
        let mut upd = Query::update();
        upd.table(e.table.clone());
        let mut sets = Vec::new();
        for c in &cols {
            if let Some(v) = values.get(&c.field.name) {
                sets.push((c.field.column.clone(), to_sql(d, &c.ty, v)));
                new.insert(c.field.name.clone(), v.clone());
            }
        }
        let _ = whole;
        upd.values(sets)
            .and_where(Expr::col(idf.column.clone()).eq(id));
        if let Err(err) = tx.conn().execute(Built::of(d, &upd)).await {
            drop(tx);
            return Err(self.write_error(e, err, Some(&values), None).await);
        }
        self.check_references(&mut tx, e, &values, ctx).await?;
        if !self.matches(&mut tx, e, id, Action::Update, ctx).await? {
            drop(tx);
            return Err(StoreError::forbidden(format!(
                "the change would take the {} out of its update policy",
                e.name
            )));
        }
        let ev = ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Updated,
            id: id.to_string(),
            new: Some(new.clone()),
            old: Some(old),
        };
        self.commit(tx, ev).await?;
        Ok(new)
    }

    /// Deletes the row and returns it (`None` when there was none). Deleting a
    /// row that other rows reference is a `Conflict` naming the referencing field.
    ///
    /// A row `ctx` may not read is `None` (as if missing); one it may read
    /// but not delete is `Forbidden`.
    pub async fn delete(
        &self,
        ctx: &AccessContext,
        entity: &str,
        id: &str,
    ) -> Result<Option<Row>, StoreError> {
        let e = self.entity(entity)?;
        if unstorable(id) {
            return Ok(None);
        }
        let d = self.dialect();
        let cols = columns(&self.inner.model, e, None)?;
        let mut del = Query::delete();
        del.from_table(e.table.clone())
            .and_where(Expr::col(id_field(e)?.column.clone()).eq(id))
            .returning(Query::returning().columns(cols.iter().map(|c| c.field.column.clone())));
        let mut tx = self.inner.db.begin().await?;
        if policy::read_filtered(e, ctx) || e.policy.rule_for(Action::Delete, ctx).is_some() {
            if !self.matches(&mut tx, e, id, Action::Read, ctx).await? {
                return Ok(None);
            }
            if !self.matches(&mut tx, e, id, Action::Delete, ctx).await? {
                return Err(StoreError::forbidden(format!(
                    "the {} may not be deleted by this caller (its delete policy)",
                    e.name
                )));
            }
        }
        let rows = match tx.conn().fetch(Built::of(d, &del), &kinds(&cols)).await {
            Ok(rows) => rows,
            Err(err) => {
                drop(tx);
                return Err(self.write_error(e, err, None, Some(id)).await);
            }
        };
        let Some(old) = rows.into_iter().next().map(|r| to_row(&cols, r)) else {
            return Ok(None);
        };
        let ev = ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Deleted,
            id: id.to_string(),
            new: None,
            old: Some(old.clone()),
        };
        self.commit(tx, ev).await?;
        Ok(Some(old))
    }

    // ---------------------------------------------------------------- helpers

    /// Adds the policy of `action` on `e` for `ctx` to `s`.
    fn restrict(
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
    async fn matches(
        &self,
        tx: &mut gatehouse_db::Tx,
        e: &Entity,
        id: &str,
        action: Action,
        ctx: &AccessContext,
    ) -> Result<bool, StoreError> {
        let d = self.dialect();
        let Some(c) = policy::condition(&self.inner.model, e, d, action, ctx)? else {
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
            .map_err(from_sqlx)?;
        Ok(!rows.is_empty())
    }

    /// Refuses a reference in `row` to a row `ctx` may not read, in the
    /// words of a reference to a missing row: a write must not tell which
    /// ids of invisible rows exist.
    async fn check_references(
        &self,
        tx: &mut gatehouse_db::Tx,
        e: &Entity,
        row: &Row,
        ctx: &AccessContext,
    ) -> Result<(), StoreError> {
        for f in e.stored_fields() {
            let (FieldKind::ToOne { target }, Some(Json::String(id))) = (&f.kind, row.get(&f.name))
            else {
                continue;
            };
            let t = self.entity(target)?;
            if !self.matches(tx, t, id, Action::Read, ctx).await? {
                return Err(StoreError::invalid(
                    &f.name,
                    format!("there is no {target} with id `{id}`"),
                ));
            }
        }
        Ok(())
    }

    /// Whether `ctx` may read `row` of `entity` as it stands (a row from a
    /// change event, which may since have changed or been deleted): the read
    /// policy is evaluated by the database over the row's values, so it means
    /// exactly what it means in every other statement.
    pub async fn visible(
        &self,
        ctx: &AccessContext,
        entity: &str,
        row: &Row,
    ) -> Result<bool, StoreError> {
        let e = self.entity(entity)?;
        let d = self.dialect();
        let Some(c) = policy::condition(&self.inner.model, e, d, Action::Read, ctx)? else {
            return Ok(true);
        };
        let cols = columns(&self.inner.model, e, None)?;
        let mut values = Query::select();
        for col in &cols {
            let v = row.get(&col.field.name).unwrap_or(&Json::Null);
            values.expr_as(to_sql(d, &col.ty, v), col.field.column.clone());
        }
        let mut s = Query::select();
        s.expr(Expr::cust("1"))
            .from_subquery(values, sea_query::Alias::new(e.table.clone()))
            .and_where(c);
        Ok(!self.fetch_read(Built::of(d, &s), &[]).await?.is_empty())
    }

    fn select(&self, e: &Entity, cols: &[Col<'_>]) -> SelectStatement {
        let mut s = Query::select();
        s.from(e.table.clone());
        for c in cols {
            s.expr(col(e, c.field));
        }
        s
    }

    async fn fetch_read(&self, q: Built, ks: &[SqlKind]) -> Result<Vec<DbRow>, StoreError> {
        let mut c = self.inner.db.read().await?;
        c.conn().fetch(q, ks).await.map_err(from_sqlx)
    }

    /// Validates a whole row (insert, replace) and returns it canonical, with an id.
    fn full_row(&self, e: &Entity, row: &Row, fixed_id: Option<&str>) -> Result<Row, StoreError> {
        check_keys(e, row)?;
        let model = &self.inner.model;
        let mut out = Row::new();
        for f in e.stored_fields() {
            let given = row.get(&f.name).unwrap_or(&Json::Null);
            let v = if matches!(f.kind, FieldKind::Id) {
                match (given, fixed_id) {
                    (Json::Null, Some(id)) => Json::String(id.to_string()),
                    (Json::Null, None) => Json::String(uuid::Uuid::now_v7().to_string()),
                    (v, Some(id)) if v.as_str() != Some(id) => {
                        return Err(StoreError::invalid(
                            "id",
                            "the id of a row cannot be changed",
                        ));
                    }
                    (v, _) => check_field(model, f, v)?,
                }
            } else {
                check_field(model, f, given)?
            };
            out.insert(f.name.clone(), v);
        }
        Ok(out)
    }

    /// Notifies other instances (PostgreSQL, inside the transaction), commits,
    /// then publishes locally.
    async fn commit(&self, mut tx: gatehouse_db::Tx, ev: ChangeEvent) -> Result<(), StoreError> {
        if self.dialect() == Dialect::Postgres {
            let origin = &self.inner.origin;
            let mut payload = feed::payload(origin, &ev);
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
                    .map_err(from_sqlx)?;
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
                .map_err(from_sqlx)?;
                payload = feed::reference(origin, id);
            }
            c.fetch(
                Built::raw(
                    "SELECT pg_notify($1, $2)",
                    vec![
                        sea_query::Value::String(Some(feed::CHANNEL.to_string())),
                        sea_query::Value::String(Some(payload)),
                    ],
                ),
                &[],
            )
            .await
            .map_err(from_sqlx)?;
        }
        let committed = tx.commit().await;
        // Even after a failed commit: whether it took effect is unknown.
        self.inner.writes.fetch_add(1, Ordering::SeqCst);
        committed.map_err(from_sqlx)?;
        self.inner.events.send(ev);
        Ok(())
    }

    /// Classifies a failed write by the database's error code (sqlx maps
    /// SQLite extended codes and PostgreSQL SQLSTATEs to the same kinds), then
    /// finds the field concerned to name it in the error.
    async fn write_error(
        &self,
        e: &Entity,
        err: sqlx::Error,
        row: Option<&Row>,
        deleting: Option<&str>,
    ) -> StoreError {
        let sqlx::Error::Database(db) = &err else {
            return from_sqlx(err);
        };
        match kind_of(db.as_ref()) {
            ErrorKind::UniqueViolation => {
                let column = match db.constraint() {
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
                        .message()
                        .rsplit(": ")
                        .next()
                        .and_then(|s| s.split(", ").next())
                        .and_then(|s| s.rsplit('.').next())
                        .map(str::to_string),
                };
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
            ErrorKind::ForeignKeyViolation => {
                if let Some(id) = deleting {
                    return self.referenced_conflict(e, id).await;
                }
                if let Some(row) = row {
                    for f in e.stored_fields() {
                        let (FieldKind::ToOne { target }, Some(Json::String(v))) =
                            (&f.kind, row.get(&f.name))
                        else {
                            continue;
                        };
                        match self.get(&AccessContext::system(), target, v).await {
                            Ok(None) => {
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
            _ => from_sqlx(err),
        }
    }

    async fn referenced_conflict(&self, e: &Entity, id: &str) -> StoreError {
        for child in &self.inner.model.entities {
            for f in child.stored_fields() {
                let FieldKind::ToOne { target } = &f.kind else {
                    continue;
                };
                if *target != e.name {
                    continue;
                }
                let mut s = Query::select();
                s.expr(Expr::cust("1"))
                    .from(child.table.clone())
                    .and_where(col(child, f).eq(id))
                    .limit(1);
                match self.fetch_read(Built::of(self.dialect(), &s), &[]).await {
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

fn forbidden_change(e: &Entity) -> StoreError {
    StoreError::forbidden(format!(
        "the {} may not be changed by this caller (its update policy)",
        e.name
    ))
}

fn id_field(e: &Entity) -> Result<&gatehouse_schema::Field, StoreError> {
    e.fields
        .iter()
        .find(|f| matches!(f.kind, FieldKind::Id))
        .ok_or_else(|| StoreError::internal(format!("entity {} has no id field", e.name)))
}

fn row_id(row: &Row) -> String {
    row.get("id")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

fn kinds(cols: &[Col<'_>]) -> Vec<SqlKind> {
    cols.iter().map(Col::kind).collect()
}

fn to_row(cols: &[Col<'_>], values: DbRow) -> Row {
    cols.iter()
        .zip(values)
        .map(|(c, v)| (c.field.name.clone(), v))
        .collect()
}

fn names(cols: &[Col<'_>]) -> Vec<String> {
    cols.iter().map(|c| c.field.name.clone()).collect()
}

fn empty_set(cols: &[Col<'_>]) -> RowSet {
    row_set(cols, Vec::new())
}

fn row_set(cols: &[Col<'_>], rows: Vec<DbRow>) -> RowSet {
    RowSet {
        columns: names(cols),
        rows,
    }
}

impl PreparedList {
    /// Where `text` is bound in the statement, exactly (positions among its
    /// bound values), and whether it also occurs inside any other bound
    /// value (as in a `_contains` pattern): then it cannot be replaced.
    pub fn text_positions(&self, text: &str) -> (Vec<usize>, bool) {
        let mut exact = Vec::new();
        let mut inside = false;
        let values = self.built.as_ref().map_or(&[][..], |b| &b.values.0.0[..]);
        for (i, v) in values.iter().enumerate() {
            if let sea_query::Value::String(Some(s)) = v {
                if s == text {
                    exact.push(i);
                } else if s.contains(text) {
                    inside = true;
                }
            }
        }
        (exact, inside)
    }

    /// Whether both run the same SQL text (their bound values may differ).
    pub fn same_sql(&self, other: &PreparedList) -> bool {
        self.built.as_ref().map(|b| &b.sql) == other.built.as_ref().map(|b| &b.sql)
    }
}

/// A list statement built by [`Store::prepare_list`], run by
/// [`Store::run_list`]. It holds SQL for the store that built it only.
#[derive(Debug)]
pub struct PreparedList {
    /// `None` for a page of zero rows: nothing to run.
    built: Option<Built>,
    kinds: Vec<SqlKind>,
    /// The listed entity's fields, in select-list order.
    columns: Vec<String>,
    /// Each join's fields, in the order they follow `columns`.
    joined: Vec<Vec<String>>,
}

/// The kind of a constraint violation, by error code. Beyond what sqlx maps,
/// SQLite reports `ON DELETE RESTRICT` as SQLITE_CONSTRAINT_TRIGGER (1811):
/// the store creates no triggers, so that code is always a restricted delete.
fn kind_of(db: &dyn sqlx::error::DatabaseError) -> ErrorKind {
    match db.kind() {
        ErrorKind::Other if db.code().as_deref() == Some("1811") => ErrorKind::ForeignKeyViolation,
        k => k,
    }
}

fn migration_error(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) => {
            tracing::warn!(error = %db, "migration step failed");
            StoreError::conflict(format!("migration failed: {}", db.message()))
        }
        _ => from_sqlx(e),
    }
}

/// An id no row can have (U+0000 is refused on every write, and PostgreSQL
/// cannot even compare it): a lookup by it is a miss without a round trip.
fn unstorable(id: &str) -> bool {
    id.contains('\0')
}
