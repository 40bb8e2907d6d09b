//! [`EntityStore`]: the rows of one entity, every read and write GraphQL
//! and REST make, with the caller's policies in each statement.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Instant;

use gatehouse_schema::{
    AccessContext, AccountType, Action, ChangeKind, Entity, EntityId, Field, FieldKind, Generated,
    Model, RelationId, RelationKind,
};
use sea_query::{Expr, ExprTrait, Func, LockType, Order, Query, SelectStatement, WindowStatement};
use serde_json::Value as Json;

use gatehouse_db::{Built, DbRow, Tx};

use crate::error::from_db;
use crate::feed::ChangeEvent;
use crate::policy;
use crate::query::{
    Col, Filter, JoinOne, ListQuery, OrderBy, apply_order, col, columns, condition, keyset,
    ordering, stored_field,
};
use crate::store::{
    COUNT_CACHE_TTL, Whole, id_field, kinds, names, row_id, row_set, to_row, unstorable,
};
use crate::txn::{Failure, Unit, WriteTxn};
use crate::value::{Dialect, SqlKind, check_field, check_keys, to_sql};
use crate::{Row, RowSet, Store, StoreError};
use gatehouse_schema::CONNECT;

/// The rows of one entity of the store's Model: a handle resolved once by
/// [`Store::entity`], cheap to clone and to keep (in a cached plan, say).
///
/// Every read and write takes the caller's [`AccessContext`]: its scopes
/// and row policies are part of the statement, never checked beside it.
#[derive(Debug, Clone)]
pub struct EntityStore {
    store: Store,
    /// The entity's index in the Model's entities.
    index: usize,
    /// The transaction its reads and writes run in ([`EntityStore::within`]);
    /// `None`: each write is a transaction of its own.
    txn: Option<WriteTxn>,
}

/// A page of [`EntityStore::list`]: the listed rows, then one set per join
/// of the query, row `k` of which belongs to listed row `k` (all null when
/// the reference is null, dangling or not readable by the caller).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// The listed rows.
    pub rows: RowSet,
    /// One set per [`ListQuery::joins`], aligned with `rows`.
    pub joined: Vec<RowSet>,
}

/// The to-many batch of [`EntityStore::children`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Children {
    /// The children of all parents, each parent's together and in order.
    pub rows: RowSet,
    /// The parent id of each row, aligned with `rows`.
    pub parents: Vec<String>,
}

/// A list statement built by [`EntityStore::prepare`] or
/// [`EntityStore::prepare_template`], run by [`PreparedList::run`].
#[derive(Debug)]
pub struct PreparedList {
    entity: EntityStore,
    /// `None` for a page of zero rows: nothing to run.
    built: Option<Built>,
    kinds: Vec<SqlKind>,
    /// The listed entity's fields, in select-list order.
    columns: Vec<String>,
    /// Each join's fields, in the order they follow `columns`.
    joined: Vec<Vec<String>>,
    /// The entities it reads: the listed one, then each join's target.
    read: Vec<usize>,
    /// [`EntityStore::statement_caller`] of the caller it was built for.
    caller: String,
    /// The scopes what it compares needs ([`policy::needs`]).
    needs: Vec<policy::Need>,
    /// `(bound value position, text index)`: where run's texts go.
    slots: Vec<(usize, usize)>,
    /// How many texts run takes.
    texts: usize,
}

impl Store {
    /// The handle on the rows of `name`; `Invalid` when the Model has no
    /// such entity.
    pub fn entity(&self, name: &str) -> Result<EntityStore, StoreError> {
        let index = self
            .model()
            .entities
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| StoreError::invalid(name, format!("unknown entity `{name}`")))?;
        Ok(EntityStore {
            store: self.clone(),
            index,
            txn: None,
        })
    }

    /// The handle on the rows of the entity `id` names (an id of this
    /// store's Model, such as a relation's target).
    pub fn entity_at(&self, id: EntityId) -> EntityStore {
        EntityStore {
            store: self.clone(),
            index: id.index(),
            txn: None,
        }
    }

    /// The handle on the rows a relation field reaches.
    pub(crate) fn target_of(&self, field: &Field) -> Result<EntityStore, StoreError> {
        let r = self
            .model()
            .relation_of(field)
            .ok_or_else(|| StoreError::invalid(&field.name, "is not a relation"))?;
        Ok(self.entity_at(r.target))
    }
}

impl Store {
    /// The handles on every entity's rows, in the order of the Model's
    /// entities.
    pub fn entities(&self) -> impl Iterator<Item = EntityStore> + '_ {
        (0..self.model().entities.len()).map(|index| EntityStore {
            store: self.clone(),
            index,
            txn: None,
        })
    }
}

impl EntityStore {
    /// The entity, as the Model defines it.
    pub fn def(&self) -> &Entity {
        &self.store.model().entities[self.index]
    }

    /// The same rows, read and written in `txn`: its writes join the
    /// transaction instead of committing on their own, and its reads see
    /// the transaction's writes.
    pub fn within(&self, txn: &WriteTxn) -> EntityStore {
        EntityStore {
            store: self.store.clone(),
            index: self.index,
            txn: Some(txn.clone()),
        }
    }

    /// The entity's id in the Model.
    pub(crate) fn id(&self) -> EntityId {
        EntityId::from_index(self.index)
    }

    /// The transaction it is bound to, if any.
    pub(crate) fn txn(&self) -> Option<&WriteTxn> {
        self.txn.as_ref()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The handle on the entity a relation field reaches, in the same
    /// transaction as this one.
    fn target(&self, field: &Field) -> Result<EntityStore, StoreError> {
        let t = self.store.target_of(field)?;
        Ok(EntityStore {
            store: t.store,
            index: t.index,
            txn: self.txn.clone(),
        })
    }

    /// Runs a read: in the bound transaction once it has begun (so it sees
    /// its writes), else on a read connection.
    async fn fetch_read(&self, q: Built, kinds: &[SqlKind]) -> Result<Vec<DbRow>, StoreError> {
        if let Some(t) = &self.txn
            && let Some(rows) = t.fetch_begun(&q, kinds).await
        {
            return rows;
        }
        self.store.fetch_read(q, kinds).await
    }

    // ---------------------------------------------------------------- reads

    /// The row of `entity` with `id`, or `None` (also when `ctx` may not read it).
    pub async fn get(&self, ctx: &AccessContext, id: &str) -> Result<Option<Row>, StoreError> {
        let (s, e) = (&self.store, self.def());
        if unstorable(id) {
            return Ok(None);
        }
        let cols = columns(&s.inner.model, e, None)?;
        let mut q = s.select(e, &cols);
        q.and_where(col(e, id_field(e)?).eq(id));
        s.restrict(&mut q, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(s.dialect(), &q), &kinds(&cols))
            .await?;
        Ok(rows.into_iter().next().map(|r| to_row(&cols, r)))
    }

    /// The rows whose ids are in `ids`, in one statement (the to-one batch
    /// of a relation), reading only `select` (plus `id`, always first) when
    /// given. Rows come in no particular order; missing ids have none.
    pub async fn get_many(
        &self,
        ctx: &AccessContext,
        ids: &[String],
        select: Option<&[String]>,
    ) -> Result<RowSet, StoreError> {
        let (s, e) = (&self.store, self.def());
        let cols = columns(&s.inner.model, e, select)?;
        let ids: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|i| !unstorable(i))
            .collect();
        if ids.is_empty() {
            return Ok(row_set(&cols, Vec::new()));
        }
        let mut q = s.select(e, &cols);
        q.and_where(col(e, id_field(e)?).is_in(ids.iter().map(|i| Expr::val(*i))));
        s.restrict(&mut q, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(s.dialect(), &q), &kinds(&cols))
            .await?;
        Ok(row_set(&cols, rows))
    }

    /// Clears, in `set` (rows of this entity read for `ctx`), each to-one
    /// reference to a row `ctx` may not read: such a reference reads as
    /// null, as the relation does in GraphQL, whose loaders ask the
    /// target's [`EntityStore::get_many`] the same question. REST bodies,
    /// which show references as ids, ask here. One statement per to-one
    /// field whose target's read policy filters `ctx`; none otherwise.
    pub async fn hide_unseen_references(
        &self,
        ctx: &AccessContext,
        set: &mut RowSet,
    ) -> Result<(), StoreError> {
        for f in self.def().stored_fields() {
            if !matches!(f.kind, FieldKind::ToOne { .. }) {
                continue;
            }
            let Some(i) = set.position(&f.name) else {
                continue;
            };
            let t = self.target(f)?;
            if !policy::read_filtered(t.def(), ctx) {
                continue;
            }
            let mut ids: Vec<String> = set
                .rows
                .iter()
                .filter_map(|r| r.get(i)?.as_str().map(str::to_string))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() {
                continue;
            }
            let seen = t.get_many(ctx, &ids, Some(&[])).await?;
            let seen: std::collections::HashSet<&str> = seen
                .rows
                .iter()
                .filter_map(|r| r.first()?.as_str())
                .collect();
            for r in &mut set.rows {
                if let Some(v) = r.get_mut(i)
                    && v.as_str().is_some_and(|id| !seen.contains(id))
                {
                    *v = Json::Null;
                }
            }
        }
        Ok(())
    }

    /// [`EntityStore::hide_unseen_references`] for one row.
    pub async fn hide_unseen_references_in(
        &self,
        ctx: &AccessContext,
        row: &mut Row,
    ) -> Result<(), StoreError> {
        let model = self.store.model();
        let filtered = self.def().stored_fields().any(|f| match &f.kind {
            FieldKind::ToOne { .. } => {
                row.contains_key(&f.name)
                    && model
                        .target_of(f)
                        .is_some_and(|t| policy::read_filtered(t, ctx))
            }
            _ => false,
        });
        if !filtered {
            return Ok(());
        }
        let mut set = RowSet {
            columns: row.keys().cloned().collect(),
            rows: vec![row.values().cloned().collect()],
        };
        self.hide_unseen_references(ctx, &mut set).await?;
        if let Some(one) = set.into_rows().pop() {
            *row = one;
        }
        Ok(())
    }

    /// Refuses (`Forbidden`) a filter or order that compares a field `ctx`
    /// may not read (`Model::field_read_scope`): comparing a field tells
    /// its values. Every read the store runs asks it; so do readers that
    /// match rows themselves, such as subscriptions matching change events.
    pub fn may_compare(
        &self,
        ctx: &AccessContext,
        filter: Option<&Filter>,
        order: &[OrderBy],
    ) -> Result<(), StoreError> {
        let needs = policy::needs(&self.store.inner.model, self.def(), filter, order);
        policy::check_needs(ctx, &needs)
    }

    /// The rows that match `query`, ordered and paged, with the rows its
    /// joins refer to.
    pub async fn list(&self, ctx: &AccessContext, query: &ListQuery) -> Result<Page, StoreError> {
        self.prepare(ctx, query)?.run(ctx, &[]).await
    }

    /// The statement of [`EntityStore::list`], built once to be run as
    /// often as needed: a caller that reads the same page again and again
    /// (REST's list cache, the planned executor) skips building the SQL
    /// each time. It reads what the store holds when it runs, not when it
    /// was built, and it runs only for callers that get the same answers as
    /// `ctx` (see [`EntityStore::statement_caller`]).
    pub fn prepare(
        &self,
        ctx: &AccessContext,
        query: &ListQuery,
    ) -> Result<PreparedList, StoreError> {
        let (s, e) = (&self.store, self.def());
        let model = &s.inner.model;
        let needs = policy::needs(model, e, query.filter.as_ref(), &query.order);
        policy::check_needs(ctx, &needs)?;
        let cols = columns(model, e, query.select.as_deref())?;
        let mut q = s.select(e, &cols);
        let mut kinds = kinds(&cols);
        let mut joined = Vec::with_capacity(query.joins.len());
        for (j, join) in query.joins.iter().enumerate() {
            let field = stored_field(e, &join.field)?;
            let (t, _) = join_target(model, e, &join.field)?;
            let t_cols = columns(model, t, Some(&join.select))?;
            let alias = sea_query::Alias::new(format!("j{j}"));
            let mut on = Expr::col((alias.clone(), id_field(t)?.column.clone()))
                .equals((e.table.clone(), field.column.clone()));
            // A referenced row the caller may not read joins as nulls.
            if let Some(c) = policy::condition(model, t, s.dialect(), Action::Read, ctx)? {
                let mut visible = Query::select();
                visible
                    .expr(col(t, id_field(t)?))
                    .from(t.table.clone())
                    .and_where(c);
                on = on.and(
                    Expr::col((alias.clone(), id_field(t)?.column.clone())).in_subquery(visible),
                );
            }
            q.join_as(
                sea_query::JoinType::LeftJoin,
                t.table.clone(),
                alias.clone(),
                on,
            );
            for c in &t_cols {
                q.expr(Expr::col((alias.clone(), c.field.column.clone())));
            }
            kinds.extend(t_cols.iter().map(Col::kind));
            joined.push(names(&t_cols));
        }
        if let Some(f) = &query.filter {
            q.and_where(condition(model, e, s.dialect(), f, ctx)?);
        }
        // A cursor's bounds, in the same statement as the policy and the
        // filter: a cursor never reaches a row the caller cannot read.
        for (bound, forward, arg) in [
            (&query.after, true, "after"),
            (&query.before, false, "before"),
        ] {
            if let Some(values) = bound {
                q.and_where(keyset(
                    model,
                    e,
                    s.dialect(),
                    &query.order,
                    values,
                    forward,
                    arg,
                )?);
            }
        }
        s.restrict(&mut q, e, Action::Read, ctx)?;
        apply_order(&mut q, e, &query.order, query.reverse)?;
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
            let mut b = Built::of(s.dialect(), &q);
            if query.limit.is_some() || query.offset > 0 {
                let limit = match (query.limit, s.dialect()) {
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
        let mut read = std::iter::once(Ok(self.index))
            .chain(
                query
                    .joins
                    .iter()
                    .map(|j| Ok(join_target(model, e, &j.field)?.1)),
            )
            .collect::<Result<Vec<usize>, StoreError>>()?;
        if let Some(f) = &query.filter {
            policy::reached(model, e, f, &mut read);
        }
        let caller =
            caller_key(read.iter().filter_map(|&i| model.entities.get(i)), ctx).to_string();
        Ok(PreparedList {
            entity: self.clone(),
            built,
            kinds,
            columns: names(&cols),
            joined,
            caller,
            read,
            needs,
            slots: Vec::new(),
            texts: 0,
        })
    }

    /// A statement for every list query `build` makes out of `texts.len()`
    /// texts (ids or strings from a request), built once and run with other
    /// texts bound in their place ([`PreparedList::run`]): building the SQL
    /// is a large share of a lookup by id. `texts` are this request's.
    ///
    /// `Ok(None)` when the queries are not all one statement: a text that
    /// changes the SQL, is bound inside a pattern (`_contains`) or is bound
    /// changed (a canonical date) cannot be a parameter. An error is this
    /// request's own (its query is refused), not the shape's.
    pub fn prepare_template(
        &self,
        ctx: &AccessContext,
        texts: &[&str],
        build: impl Fn(&[&str]) -> Option<ListQuery>,
    ) -> Result<Option<PreparedList>, StoreError> {
        if let Some(t) = texts.iter().find(|t| unstorable(t)) {
            return Err(StoreError::invalid(
                &self.def().name,
                format!(
                    "`{}` holds U+0000, which no stored text can",
                    t.escape_debug()
                ),
            ));
        }
        let Some(query) = build(texts) else {
            return Ok(None);
        };
        let actual = self.prepare(ctx, &query)?;
        let markers: Vec<String> = (0..texts.len())
            .map(|i| format!("\u{1}gatehouse-template-{i}\u{1}"))
            .collect();
        let marked: Vec<&str> = markers.iter().map(String::as_str).collect();
        let Some(Ok(mut template)) = build(&marked).map(|q| self.prepare(ctx, &q)) else {
            return Ok(None);
        };
        if template.built.as_ref().map(|b| &b.sql) != actual.built.as_ref().map(|b| &b.sql) {
            return Ok(None);
        }
        for (i, (marker, text)) in markers.iter().zip(texts).enumerate() {
            let (at, inside) = template.text_positions(marker);
            if inside {
                return Ok(None);
            }
            // This request's own statement binds its own text there.
            let (own, _) = actual.text_positions(text);
            for p in at {
                if !own.contains(&p) {
                    return Ok(None);
                }
                template.slots.push((p, i));
            }
        }
        template.texts = texts.len();
        Ok(Some(template))
    }

    /// The empty string when statements and counts of this entity, with
    /// `joins`, answer every caller alike; otherwise [`AccessContext::key`]:
    /// a row policy puts the caller's values in them. Caches of prepared
    /// statements are keyed by it. A filter through a to-many relation
    /// (`Filter::Related`) puts the read rules of the rows it reaches in
    /// the statement too, which this does not see: a statement with one
    /// runs only for its own caller ([`PreparedList::run`] refuses the
    /// others), so such statements are not for shared caches.
    pub fn statement_caller<'c>(&self, ctx: &'c AccessContext, joins: &[JoinOne]) -> &'c str {
        let (model, e) = (&self.store.inner.model, self.def());
        // A join that is no to-one relation fails `prepare`: no statement
        // to key.
        let targets = joins
            .iter()
            .filter_map(|j| join_target(model, e, &j.field).ok().map(|(t, _)| t));
        caller_key(std::iter::once(e).chain(targets), ctx)
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
        filter: Option<&Filter>,
    ) -> Result<u64, StoreError> {
        let (s, e) = (&self.store, self.def());
        self.may_compare(ctx, filter, &[])?;
        if self.txn.is_some() {
            // A count in a transaction may see its writes, which are no
            // one else's until it commits: never cached.
            return self.count_rows(ctx, e, filter).await;
        }
        // The read rules of the rows its relation filters reach are in the
        // statement too.
        let mut read = vec![self.index];
        if let Some(f) = filter {
            policy::reached(&s.inner.model, e, f, &mut read);
        }
        let entities = &s.inner.model.entities;
        let caller = caller_key(read.iter().filter_map(|&i| entities.get(i)), ctx);
        let key = format!("{}\0{filter:?}\0{caller}", e.name);
        let generation = s.inner.writes.load(Ordering::SeqCst);
        // Freshness is part of the value (as for every cache here): the
        // count is as old as the statement's start, which is what is checked.
        let fresh =
            |(g, at, _): &(u64, Instant, u64)| *g == generation && at.elapsed() < COUNT_CACHE_TTL;
        match s.inner.counts.get(&key) {
            Some(v) if fresh(&v) => return Ok(v.2),
            // Expired: taken out, so that the callers that find it so wait
            // for one new count below instead of each running their own.
            // Only a stale value goes: `remove` would also take out the
            // placeholder of a caller already counting (or the fresh count
            // it just stored), and start a second count beside it.
            Some(_) => {
                s.inner.counts.remove_if(&key, |v| !fresh(v));
            }
            None => {}
        }
        // One count per key at a time: when a count expires under load,
        // every request of the moment would otherwise count the table at
        // once (the p99 of REST lists on PostgreSQL was 66 ms).
        let guard = match s.inner.counts.get_value_or_guard_async(&key).await {
            // Counted by the caller that held the key; fresh for this
            // caller unless a write came before it asked.
            Ok(v) if fresh(&v) => return Ok(v.2),
            Ok(_) => None,
            Err(guard) => Some(guard),
        };
        let at = Instant::now();
        let n = self.count_rows(ctx, e, filter).await?;
        if let Some(guard) = guard {
            // Stamped with the generation the count started in, even when a
            // write came while it ran: the callers waiting since before that
            // write take it (their question is no newer than the count), and
            // every later caller finds it stale. Not stored, each waiter
            // would count in turn while writes keep coming.
            let _ = guard.insert((generation, at, n));
        }
        Ok(n)
    }

    async fn count_rows(
        &self,
        ctx: &AccessContext,
        e: &Entity,
        filter: Option<&Filter>,
    ) -> Result<u64, StoreError> {
        let s = &self.store;
        let mut q = Query::select();
        q.expr(Expr::cust("COUNT(*)")).from(e.table.clone());
        if let Some(f) = filter {
            q.and_where(condition(&s.inner.model, e, s.dialect(), f, ctx)?);
        }
        s.restrict(&mut q, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(s.dialect(), &q), &[SqlKind::Count])
            .await?;
        Ok(rows
            .first()
            .and_then(|r| r.first())
            .and_then(Json::as_u64)
            .unwrap_or(0))
    }

    /// How many rows of this entity each of `parent_ids` has through the
    /// to-one field `via` (the count of a to-many relation), matching
    /// `filter` and readable by `ctx`, in ONE statement grouped by parent
    /// whatever the number of parents. A parent without rows is absent
    /// (its count is 0). The same rows [`EntityStore::children`] would list
    /// without a page: the policy and the filter are in the statement.
    pub async fn count_children(
        &self,
        ctx: &AccessContext,
        via: &str,
        parent_ids: &[String],
        filter: Option<&Filter>,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        let via_field = stored_field(self.def(), via)?;
        if !matches!(via_field.kind, FieldKind::ToOne { .. }) {
            return Err(StoreError::invalid(via, "is not a to-one relation"));
        }
        self.count_linked(ctx, Link::Via(via_field), parent_ids, filter)
            .await
    }

    /// How many rows of this entity the to-many `relation` (whose target
    /// this entity is) gives each of `parent_ids`: [`EntityStore::count_children`]
    /// for a one-to-many relation; for a many-to-many relation the rows
    /// linked through join rows, where the caller must be able to read
    /// both the row and the join row linking it.
    pub async fn count_related(
        &self,
        ctx: &AccessContext,
        relation: RelationId,
        parent_ids: &[String],
        filter: Option<&Filter>,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        let model = self.store.model().clone();
        let link = self.link(&model, ctx, relation)?;
        self.count_linked(ctx, link, parent_ids, filter).await
    }

    async fn count_linked(
        &self,
        ctx: &AccessContext,
        link: Link<'_>,
        parent_ids: &[String],
        filter: Option<&Filter>,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        let (s, e) = (&self.store, self.def());
        self.may_compare(ctx, filter, &[])?;
        let mut out = std::collections::HashMap::new();
        if parent_ids.is_empty() {
            return Ok(out);
        }
        let d = s.dialect();
        let fk = link.parent(e);
        let mut q = Query::select();
        q.expr_as(fk.clone(), "_gh_parent")
            .expr(Expr::cust("COUNT(*)"))
            .from(e.table.clone());
        link.join(s, &mut q, e, ctx)?;
        q.and_where(
            fk.clone()
                .is_in(parent_ids.iter().map(|i| Expr::val(i.as_str()))),
        )
        .add_group_by([fk]);
        if let Some(f) = filter {
            q.and_where(condition(&s.inner.model, e, d, f, ctx)?);
        }
        s.restrict(&mut q, e, Action::Read, ctx)?;
        let rows = self
            .fetch_read(Built::of(d, &q), &[SqlKind::Text, SqlKind::Count])
            .await?;
        for r in rows {
            if let (Some(Json::String(p)), Some(n)) = (r.first(), r.get(1).and_then(Json::as_u64)) {
                out.insert(p.clone(), n);
            }
        }
        Ok(out)
    }

    /// How the to-many `relation`, whose target this entity is, ties this
    /// entity's rows to their parents.
    fn link<'m>(
        &self,
        model: &'m Model,
        ctx: &AccessContext,
        relation: RelationId,
    ) -> Result<Link<'m>, StoreError> {
        let r = model
            .relations
            .get(relation.index())
            .filter(|r| r.target.index() == self.index)
            .ok_or_else(|| {
                StoreError::internal(format!(
                    "relation {relation:?} does not list {}",
                    self.def().name
                ))
            })?;
        match r.kind {
            RelationKind::OneToMany { inverse } => Ok(Link::Via(model.field_at(inverse))),
            RelationKind::ManyToMany { through, near, far } => {
                let join = model.entity_at(through);
                // The join rows are read too: without their read scope the
                // links are not the caller's to see.
                if !ctx.allows(join.read_scope(), true) {
                    let field = model.field_at(r.field);
                    return Err(StoreError::forbidden(format!(
                        "reading `{}.{}` needs the scope `{}` of {}",
                        model.entity_at(r.field.entity).name,
                        field.name,
                        join.read_scope(),
                        join.name
                    )));
                }
                Ok(Link::Through {
                    join,
                    near: model.field_at(near),
                    far: model.field_at(far),
                })
            }
            RelationKind::ManyToOne { .. } => Err(StoreError::internal(format!(
                "relation {relation:?} is not a to-many relation"
            ))),
        }
    }

    /// The rows the to-many `relation` (whose target this entity is) gives
    /// each of `parent_ids`, as [`EntityStore::children`] gives them: for a
    /// one-to-many relation the children through its inverse; for a
    /// many-to-many relation the rows linked by join rows, in one statement
    /// that joins the join entity, with the read policies of both this
    /// entity and the join entity in it (a join row the caller cannot read
    /// links nothing).
    pub async fn related(
        &self,
        ctx: &AccessContext,
        relation: RelationId,
        parent_ids: &[String],
        query: &ListQuery,
    ) -> Result<Children, StoreError> {
        let model = self.store.model().clone();
        let link = self.link(&model, ctx, relation)?;
        self.linked(ctx, link, parent_ids, query).await
    }

    /// The to-many batch of a relation: the rows whose to-one field `via`
    /// references one of `parent_ids`, in ONE statement whatever the number
    /// of parents, each parent's rows together and in order, with the
    /// parent of each row beside them. `query`'s filter, order, limit and
    /// offset apply per parent (via `ROW_NUMBER() OVER (PARTITION BY ...)`
    /// when paged); it joins nothing.
    ///
    /// For `Author.books` (the inverse of `Book.author`): `children` of
    /// `Book` via `author`.
    pub async fn children(
        &self,
        ctx: &AccessContext,
        via: &str,
        parent_ids: &[String],
        query: &ListQuery,
    ) -> Result<Children, StoreError> {
        let via_field = stored_field(self.def(), via)?;
        if !matches!(via_field.kind, FieldKind::ToOne { .. }) {
            return Err(StoreError::invalid(via, "is not a to-one relation"));
        }
        self.linked(ctx, Link::Via(via_field), parent_ids, query)
            .await
    }

    async fn linked(
        &self,
        ctx: &AccessContext,
        link: Link<'_>,
        parent_ids: &[String],
        query: &ListQuery,
    ) -> Result<Children, StoreError> {
        let (s, e) = (&self.store, self.def());
        self.may_compare(ctx, query.filter.as_ref(), &query.order)?;
        if !query.joins.is_empty() {
            return Err(StoreError::invalid(
                &e.name,
                "children are read without joins",
            ));
        }
        let cols = columns(&s.inner.model, e, query.select.as_deref())?;
        if parent_ids.is_empty() || query.limit == Some(0) {
            return Ok(Children {
                rows: row_set(&cols, Vec::new()),
                parents: Vec::new(),
            });
        }
        let d = s.dialect();
        let fk = link.parent(e);
        let mut inner = Query::select();
        inner.from(e.table.clone());
        link.join(s, &mut inner, e, ctx)?;
        for c in &cols {
            inner.expr_as(col(e, c.field), format!("c_{}", c.field.column));
        }
        inner.expr_as(fk.clone(), "_gh_parent");
        inner.and_where(
            fk.clone()
                .is_in(parent_ids.iter().map(|i| Expr::val(i.as_str()))),
        );
        if let Some(f) = &query.filter {
            inner.and_where(condition(&s.inner.model, e, d, f, ctx)?);
        }
        s.restrict(&mut inner, e, Action::Read, ctx)?;
        let paged = query.limit.is_some() || query.offset > 0;
        let stmt: SelectStatement = if paged {
            let mut w = WindowStatement::partition_by(link.partition(e));
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
            apply_order(&mut inner, e, &query.order, false)?;
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
        Ok(Children {
            rows: row_set(&cols, rows),
            parents,
        })
    }

    // ---------------------------------------------------------------- writes

    /// Inserts a row and returns it as stored. The id is a new UUIDv7 unless
    /// `row` gives one; a taken id or `@unique` value is a `Conflict`; a
    /// reference to a missing row is `Invalid` naming the field.
    ///
    /// With a create policy, fields it ties to a claim are filled from
    /// `ctx` when left out, and a row that would not match it is
    /// `Forbidden` and not written.
    ///
    /// Nested create: a one-to-many field of `row` (`books` of an Author)
    /// holds new rows of its target, created in the same transaction with
    /// their back-reference (`author`) set to the new row, each under its
    /// own entity's write scope, field scopes and create policy, and so on
    /// for their own children. Any failure writes none of them. The row
    /// returned carries the created children under the same field.
    pub async fn insert(&self, ctx: &AccessContext, row: Row) -> Result<Row, StoreError> {
        Unit::write(self, async |tx, events, now| {
            self.insert_in(tx, events, now, ctx, row, None).await
        })
        .await
    }

    /// [`EntityStore::insert`] in `tx`, its change events (the row's, then
    /// its nested children's, depth first) pushed to `events`. `nested_via`:
    /// the to-one field a nested create set to the parent it just created.
    fn insert_in<'a>(
        &'a self,
        tx: &'a mut Tx,
        events: &'a mut Vec<ChangeEvent>,
        now: i64,
        ctx: &'a AccessContext,
        row: Row,
        nested_via: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = Result<Row, Failure>> + Send + 'a>> {
        Box::pin(async move {
            let mut row = row;
            let nested = self.take_nested(ctx, &mut row)?;
            let mut created = self
                .insert_one(tx, events, now, ctx, row, nested_via)
                .await?;
            let id = Json::String(row_id(&created));
            for n in nested {
                match n {
                    Nested::Create {
                        field,
                        child,
                        via,
                        rows,
                    } => {
                        let mut out = Vec::with_capacity(rows.len());
                        for (i, mut r) in rows.into_iter().enumerate() {
                            r.insert(via.clone(), id.clone());
                            let at = format!("{field}[{i}]");
                            out.push(Json::Object(
                                child
                                    .insert_in(tx, events, now, ctx, r, Some(&via))
                                    .await
                                    .map_err(|e| e.nested_in(&at))?,
                            ));
                        }
                        created.insert(field, Json::Array(out));
                    }
                    Nested::Connect {
                        field,
                        join,
                        near,
                        far,
                        target,
                        ids,
                    } => {
                        target.check_connectable(tx, ctx, &field, &ids).await?;
                        for (i, other) in ids.into_iter().enumerate() {
                            let mut link = Row::new();
                            link.insert(near.clone(), id.clone());
                            link.insert(far.clone(), Json::String(other));
                            let at = format!("{field}.connect[{i}]");
                            join.insert_in(tx, events, now, ctx, link, Some(&near))
                                .await
                                .map_err(|e| e.nested_in(&at))?;
                        }
                    }
                }
            }
            Ok(created)
        })
    }

    /// Takes the nested values out of a new row: for each one-to-many
    /// field it gives (a list of new rows of the relation's target), the
    /// target's handle, the to-one field of the target that points back
    /// (set to the new row's id; a child may not give it), and the rows;
    /// for each many-to-many field it gives (`{connect: [ids]}`, where
    /// [`Model::connect_of`] allows it), the join type's handle, its two
    /// to-one fields and the ids. Creating children needs the target's
    /// write scope; linking rows, the join type's.
    fn take_nested(&self, ctx: &AccessContext, row: &mut Row) -> Result<Vec<Nested>, StoreError> {
        let (model, e) = (&self.store.inner.model, self.def());
        let mut out = Vec::new();
        for f in &e.fields {
            if !matches!(f.kind, FieldKind::ToMany { .. }) {
                continue;
            }
            let Some(given) = row.remove(&f.name) else {
                continue;
            };
            if model.through_of(f).is_some() {
                if let Some(n) = self.take_connect(ctx, f, given)? {
                    out.push(n);
                }
                continue;
            }
            let Some(via) = model.inverse_of(f) else {
                return Err(StoreError::invalid(
                    &f.name,
                    "the rows of this relation cannot be created with the row",
                ));
            };
            let child = self.target(f)?;
            let items = match given {
                Json::Null => continue,
                Json::Array(items) => items,
                _ => {
                    return Err(StoreError::invalid(
                        &f.name,
                        format!("takes a list of new {} rows", child.def().name),
                    ));
                }
            };
            let scope = child.def().write_scope();
            if !items.is_empty() && ctx.check_scope(scope, false).is_err() {
                return Err(StoreError::forbidden(format!(
                    "creating {} rows (`{}.{}`) needs the scope `{scope}`",
                    child.def().name,
                    e.name,
                    f.name
                )));
            }
            let mut rows = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let Json::Object(r) = item else {
                    return Err(StoreError::invalid(
                        format!("{}[{i}]", f.name),
                        format!("is not a {} row (an object)", child.def().name),
                    ));
                };
                if r.contains_key(&via.name) {
                    return Err(StoreError::invalid(
                        format!("{}[{i}].{}", f.name, via.name),
                        format!("is set to the new {} by the nesting: leave it out", e.name),
                    ));
                }
                rows.push(r);
            }
            out.push(Nested::Create {
                field: f.name.clone(),
                child,
                via: via.name.clone(),
                rows,
            });
        }
        Ok(out)
    }

    /// The links a new row asks for through the many-to-many field `f`
    /// (`{connect: [ids]}`); `None` for a null. An id given twice is
    /// refused (each row is linked once), and so is a field whose join
    /// type holds more than the link ([`Model::connect_of`]).
    fn take_connect(
        &self,
        ctx: &AccessContext,
        f: &Field,
        given: Json,
    ) -> Result<Option<Nested>, StoreError> {
        let (model, e) = (&self.store.inner.model, self.def());
        let Some((join, near, far)) = model.connect_of(f) else {
            return Err(StoreError::invalid(
                &f.name,
                gatehouse_schema::ValueError::to_many(model, f).to_string(),
            ));
        };
        let target = self.target(f)?;
        let tname = &target.def().name;
        let shape = || {
            StoreError::invalid(
                &f.name,
                format!("takes {{\"{CONNECT}\": [ids of existing {tname} rows]}}"),
            )
        };
        let items = match given {
            Json::Null => return Ok(None),
            Json::Object(mut o) => match (o.remove(CONNECT), o.is_empty()) {
                (Some(Json::Array(items)), true) => items,
                _ => return Err(shape()),
            },
            _ => return Err(shape()),
        };
        let mut ids: Vec<String> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let at = format!("{}.{CONNECT}[{i}]", f.name);
            let id = match item {
                Json::String(id) if !id.is_empty() => id,
                other => {
                    return Err(StoreError::invalid(
                        at,
                        format!(
                            "must be the id of a {tname} (a non-empty string), not {}",
                            gatehouse_schema::json_kind(&other)
                        ),
                    ));
                }
            };
            if let Some(j) = ids.iter().position(|x| *x == id) {
                return Err(StoreError::invalid(
                    at,
                    format!("repeats `{id}` ({CONNECT}[{j}]): each {tname} is linked once"),
                ));
            }
            ids.push(id);
        }
        let scope = join.write_scope();
        if !ids.is_empty() && ctx.check_scope(scope, false).is_err() {
            return Err(StoreError::forbidden(format!(
                "linking {tname} rows (`{}.{}`) creates {} rows, which needs the scope `{scope}`",
                e.name, f.name, join.name
            )));
        }
        let join_id = model
            .relation_of(f)
            .and_then(|r| match r.kind {
                RelationKind::ManyToMany { through, .. } => Some(through),
                _ => None,
            })
            .ok_or_else(|| StoreError::internal("a connect without a join type"))?;
        Ok(Some(Nested::Connect {
            field: f.name.clone(),
            join: EntityStore {
                store: self.store.clone(),
                index: join_id.index(),
                txn: self.txn.clone(),
            },
            near: near.name.clone(),
            far: far.name.clone(),
            target,
            ids,
        }))
    }

    /// Refuses (`Invalid`, naming `field.connect[i]`) the first of `ids`
    /// that is not a row of this entity `ctx` may read, in `tx`: one
    /// statement under the read policy, and the entity's read scope. A row
    /// the caller may not read is refused in the words of a missing one.
    async fn check_connectable(
        &self,
        tx: &mut Tx,
        ctx: &AccessContext,
        field: &str,
        ids: &[String],
    ) -> Result<(), StoreError> {
        let (s, e) = (&self.store, self.def());
        let missing = |i: usize, id: &str| {
            StoreError::invalid(
                format!("{field}.{CONNECT}[{i}]"),
                format!("there is no {} with id `{id}`", e.name),
            )
        };
        if ids.is_empty() {
            return Ok(());
        }
        if !ctx.allows(e.read_scope(), true) {
            return Err(missing(0, &ids[0]));
        }
        let storable: Vec<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|i| !unstorable(i))
            .collect();
        let mut seen = std::collections::HashSet::new();
        if !storable.is_empty() {
            let idf = id_field(e)?;
            let cols = columns(&s.inner.model, e, Some(&[]))?;
            let mut q = s.select(e, &cols);
            q.and_where(col(e, idf).is_in(storable.iter().map(|i| Expr::val(*i))));
            s.restrict(&mut q, e, Action::Read, ctx)?;
            let rows = tx
                .conn()
                .fetch(Built::of(s.dialect(), &q), &kinds(&cols))
                .await
                .map_err(from_db)?;
            seen.extend(
                rows.into_iter()
                    .filter_map(|r| r.into_iter().next()?.as_str().map(str::to_string)),
            );
        }
        match ids.iter().enumerate().find(|(_, id)| !seen.contains(*id)) {
            Some((i, id)) => Err(missing(i, id)),
            None => Ok(()),
        }
    }

    /// Inserts one row (no nested children) in `tx`; `nested_via` as for
    /// [`EntityStore::insert_in`].
    async fn insert_one(
        &self,
        tx: &mut Tx,
        events: &mut Vec<ChangeEvent>,
        now: i64,
        ctx: &AccessContext,
        row: Row,
        nested_via: Option<&str>,
    ) -> Result<Row, Failure> {
        self.insert_unless_taken(tx, events, now, ctx, row, nested_via, None)
            .await?
            .ok_or_else(|| StoreError::internal("an insert without a key inserted nothing").into())
    }

    /// [`EntityStore::insert_one`]; with `key` (the fields of a unique
    /// key), a row whose key is taken is not inserted (`None`) rather
    /// than refused, in the one statement (`ON CONFLICT DO NOTHING`): an
    /// upsert that found no row by the key goes on to update the row a
    /// concurrent transaction just made.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_unless_taken(
        &self,
        tx: &mut Tx,
        events: &mut Vec<ChangeEvent>,
        now: i64,
        ctx: &AccessContext,
        mut row: Row,
        nested_via: Option<&str>,
        key: Option<&[&Field]>,
    ) -> Result<Option<Row>, Failure> {
        let (s, e) = (&self.store, self.def());
        // A null sets nothing on a new row: only values need the scope.
        let given: Row = row
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        policy::check_written(&s.inner.model, e, ctx, &given)?;
        policy::inject_owner(e, ctx, &mut row);
        policy::check_owner_claims(e, ctx, &row)?;
        let row = s.full_row(e, &row, Whole::New { now })?;
        let d = s.dialect();
        let cols = columns(&s.inner.model, e, None)?;
        let mut ins = Query::insert();
        ins.into_table(e.table.clone())
            .columns(cols.iter().map(|c| c.field.column.clone()));
        ins.values(
            cols.iter()
                .map(|c| to_sql(d, &c.ty, row.get(&c.field.name).unwrap_or(&Json::Null))),
        )
        .map_err(StoreError::internal)?;
        let id = row_id(&row);
        // References and the policy are decided before the INSERT: a row
        // the caller may not create is refused the same way whether or not
        // a unique key of it is taken by a row it cannot see.
        s.check_references(tx, e, &row, ctx, nested_via).await?;
        if !s.row_matches(tx, e, &row, Action::Create, ctx).await? {
            return Err(StoreError::forbidden(format!(
                "the new {} does not match its create policy",
                e.name
            ))
            .into());
        }
        let inserted = match key {
            None => tx.conn().execute(Built::of(d, &ins)).await.map(|_| true),
            Some(key) => {
                ins.on_conflict(
                    sea_query::OnConflict::columns(key.iter().map(|f| f.column.clone()))
                        .do_nothing()
                        .to_owned(),
                )
                .returning(Query::returning().column(id_field(e)?.column.clone()));
                tx.conn()
                    .fetch(Built::of(d, &ins), &[SqlKind::Text])
                    .await
                    .map(|rows| !rows.is_empty())
            }
        };
        match inserted {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(err) => return Err(Failure::refused(self.id(), err, Some(&row), None)),
        }
        events.push(ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Created,
            id,
            new: Some(row.clone()),
            old: None,
        });
        Ok(Some(row))
    }

    /// Partial update: fields in `patch` are set (explicit null clears),
    /// omitted ones are untouched. `NotFound` when there is no such row;
    /// `Invalid` naming the field when a required field is set to null.
    ///
    /// A row `ctx` may not read is `NotFound`; one it may read but not
    /// change, a change that would leave the update policy, or a change of
    /// an owner field (write-once unless `ctx` bypasses the policy) is
    /// `Forbidden`.
    pub async fn update(
        &self,
        ctx: &AccessContext,
        id: &str,
        patch: Row,
    ) -> Result<Row, StoreError> {
        let values = self.patch_values(ctx, Some(id), &patch)?;
        if unstorable(id) {
            return Err(StoreError::NotFound);
        }
        self.write_existing(ctx, id, values).await
    }

    /// [`EntityStore::update`] that also sets fields only the server
    /// writes (`emailVerified`, which every other write refuses), for the
    /// server's own flows: `server` holds them, `patch` ordinary fields.
    /// Only [`AccessContext::system`] may call it (`Forbidden` otherwise);
    /// timestamps and ids stay the store's to make.
    pub async fn update_with_server_fields(
        &self,
        ctx: &AccessContext,
        id: &str,
        patch: Row,
        server: Row,
    ) -> Result<Row, StoreError> {
        if !ctx.is_system() {
            return Err(StoreError::forbidden(
                "only the server sets server-set fields",
            ));
        }
        let mut values = self.patch_values(ctx, Some(id), &patch)?;
        let e = self.def();
        for (k, v) in server {
            let f = stored_field(e, &k)?;
            if f.generated != Some(Generated::EmailVerified) {
                return Err(StoreError::invalid(
                    &k,
                    "is not a field the server's flows set",
                ));
            }
            values.insert(k, check_field(&self.store.inner.model, f, &v)?);
        }
        if unstorable(id) {
            return Err(StoreError::NotFound);
        }
        self.write_existing(ctx, id, values).await
    }

    /// The values a partial update sets, checked: known stored fields the
    /// caller may write, each value of its field's type and rules. The id
    /// may be repeated (`id` of the row updated) but not changed; with no
    /// row (a bulk update) it may not be given.
    pub(crate) fn patch_values(
        &self,
        ctx: &AccessContext,
        id: Option<&str>,
        patch: &Row,
    ) -> Result<Row, StoreError> {
        let (s, e) = (&self.store, self.def());
        check_keys(e, patch)?;
        policy::check_written(&s.inner.model, e, ctx, patch)?;
        let mut values = Row::new();
        for (k, v) in patch {
            let f = stored_field(e, k)?;
            if matches!(f.kind, FieldKind::Id) {
                if id.is_none() || v.as_str() != id {
                    return Err(StoreError::invalid(
                        "id",
                        "the id of a row cannot be changed",
                    ));
                }
                continue;
            }
            values.insert(k.clone(), check_field(&s.inner.model, f, v)?);
        }
        // A verified flag belongs to the address it was confirmed for: a
        // write that gives the account's `email` clears it, unless the
        // server's flow sets it in the same write
        // (`update_with_server_fields`, which sets it after this).
        if patch.contains_key(AccountType::EMAIL)
            && let Some(a) = &s.inner.model.account
            && a.email_verified
            && s.inner.model.entity_at(a.entity).name == e.name
        {
            values.insert(AccountType::EMAIL_VERIFIED.into(), Json::Bool(false));
        }
        Ok(values)
    }

    /// Whole replacement: every field takes its value from `row` (omitted
    /// nullable fields become null). `row` may repeat the id but not change it.
    /// Fields `ctx` may not write keep their values, and so do owner
    /// fields it leaves out (they are write-once for callers the policy
    /// filters). Policies apply as for [`EntityStore::update`].
    pub async fn replace(
        &self,
        ctx: &AccessContext,
        id: &str,
        row: Row,
    ) -> Result<Row, StoreError> {
        let (s, e) = (&self.store, self.def());
        let given: Row = row
            .iter()
            .filter(|(k, v)| !v.is_null() && k.as_str() != "id")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        policy::check_written(&s.inner.model, e, ctx, &given)?;
        let full = s.full_row(e, &row, Whole::Replacing(id))?;
        let model = &s.inner.model;
        let values = full
            .into_iter()
            .filter(|(k, v)| {
                k != "id"
                    && policy::may_write(model, e, ctx, k)
                    && !(v.is_null() && policy::kept_when_omitted(e, ctx, k))
            })
            .collect();
        if unstorable(id) {
            return Err(StoreError::NotFound);
        }
        self.write_existing(ctx, id, values).await
    }

    async fn write_existing(
        &self,
        ctx: &AccessContext,
        id: &str,
        values: Row,
    ) -> Result<Row, StoreError> {
        Unit::write(self, async |tx, events, now| {
            self.write_existing_in(tx, events, now, ctx, id, values)
                .await
        })
        .await
    }

    /// [`EntityStore::write_existing`] in `tx`, its change event pushed to
    /// `events`.
    pub(crate) async fn write_existing_in(
        &self,
        tx: &mut Tx,
        events: &mut Vec<ChangeEvent>,
        now: i64,
        ctx: &AccessContext,
        id: &str,
        values: Row,
    ) -> Result<Row, Failure> {
        let (s, e) = (&self.store, self.def());
        let d = s.dialect();
        let cols = columns(&s.inner.model, e, None)?;
        let idf = id_field(e)?;
        let mut sel = s.select(e, &cols);
        sel.and_where(col(e, idf).eq(id));
        s.restrict(&mut sel, e, Action::Read, ctx)?;
        if d == Dialect::Postgres {
            sel.lock(LockType::Update);
        }
        let old = tx
            .conn()
            .fetch(Built::of(d, &sel), &kinds(&cols))
            .await
            .map_err(from_db)?
            .into_iter()
            .next()
            .map(|r| to_row(&cols, r))
            .ok_or(StoreError::NotFound)?;
        if !s.matches(tx, e, id, Action::Update, ctx).await? {
            return Err(forbidden_change(e).into());
        }
        policy::check_owners_kept(e, ctx, &old, &values)?;
        if values.is_empty() {
            return Ok(old);
        }
        let mut values = values;
        for f in e.stored_fields() {
            if let Some(g @ Generated::UpdatedAt) = f.generated {
                values.insert(f.name.clone(), s.generate(g, now));
            }
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
        upd.values(sets)
            .and_where(Expr::col(idf.column.clone()).eq(id));
        // As for a new row: the result is judged before the UPDATE, so no
        // unique key answers for a change the caller may not make.
        s.check_references(tx, e, &values, ctx, None).await?;
        if !s.row_matches(tx, e, &new, Action::Update, ctx).await? {
            return Err(StoreError::forbidden(format!(
                "the change would take the {} out of its update policy",
                e.name
            ))
            .into());
        }
        if let Err(err) = tx.conn().execute(Built::of(d, &upd)).await {
            return Err(Failure::refused(self.id(), err, Some(&values), None));
        }
        events.push(ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Updated,
            id: id.to_string(),
            new: Some(new.clone()),
            old: Some(old),
        });
        Ok(new)
    }

    /// Deletes the row and returns it (`None` when there was none). Deleting a
    /// row that other rows reference is a `Conflict` naming the referencing field.
    ///
    /// A row `ctx` may not read is `None` (as if missing); one it may read
    /// but not delete is `Forbidden`.
    pub async fn delete(&self, ctx: &AccessContext, id: &str) -> Result<Option<Row>, StoreError> {
        if unstorable(id) {
            return Ok(None);
        }
        Unit::write(self, async |tx, events, now| {
            self.delete_in(tx, events, now, ctx, id).await
        })
        .await
    }

    /// [`EntityStore::delete`] in `tx`, the change events of the row and
    /// its cascade pushed to `events`.
    pub(crate) async fn delete_in(
        &self,
        tx: &mut Tx,
        events: &mut Vec<ChangeEvent>,
        now: i64,
        ctx: &AccessContext,
        id: &str,
    ) -> Result<Option<Row>, Failure> {
        let (s, e) = (&self.store, self.def());
        let d = s.dialect();
        let cols = columns(&s.inner.model, e, None)?;
        let mut del = Query::delete();
        del.from_table(e.table.clone())
            .and_where(Expr::col(id_field(e)?.column.clone()).eq(id))
            .returning(Query::returning().columns(cols.iter().map(|c| c.field.column.clone())));
        if policy::read_filtered(e, ctx) || e.policy.rule_for(Action::Delete, ctx).is_some() {
            if !s.matches(tx, e, id, Action::Read, ctx).await? {
                return Ok(None);
            }
            if !s.matches(tx, e, id, Action::Delete, ctx).await? {
                return Err(StoreError::forbidden(format!(
                    "the {} may not be deleted by this caller (its delete policy)",
                    e.name
                ))
                .into());
            }
        }
        // `onDelete` of the rows referencing this one, in this transaction.
        // Its events go first, then the row's own; a miss adds none.
        let mut cascaded = Vec::new();
        let me = EntityId::from_index(self.index);
        let mut seen = crate::cascade::Seen::new();
        seen.insert((me, id.to_string()));
        let by = crate::cascade::By { ctx, now };
        s.apply_on_delete(tx, by, me, id, &mut seen, &mut cascaded)
            .await?;
        let rows = match tx.conn().fetch(Built::of(d, &del), &kinds(&cols)).await {
            Ok(rows) => rows,
            Err(err) => {
                return Err(Failure::refused(self.id(), err, None, Some((id, ctx))));
            }
        };
        let Some(old) = rows.into_iter().next().map(|r| to_row(&cols, r)) else {
            return Ok(None);
        };
        events.extend(cascaded);
        events.push(ChangeEvent {
            entity: e.name.clone(),
            kind: ChangeKind::Deleted,
            id: id.to_string(),
            new: None,
            old: Some(old.clone()),
        });
        Ok(Some(old))
    }

    /// Whether `ctx` may read `row` of `entity` as it stands (a row from a
    /// change event, which may since have changed or been deleted): the read
    /// policy is evaluated by the database over the row's values, so it means
    /// exactly what it means in every other statement.
    ///
    /// A rule that follows a to-one field to a row deleted with this one
    /// (the parent whose delete cascaded to it) sees that row as it was
    /// just before (kept for a while by every instance that published the
    /// commit: the one that deleted it and those listening), so the
    /// readers of a cascaded child get its delete event.
    pub async fn visible(&self, ctx: &AccessContext, row: &Row) -> Result<bool, StoreError> {
        let (s, e) = (&self.store, self.def());
        let model = &s.inner.model;
        let mut gone = Vec::new();
        if let Some(rule) = e.policy.rule_for(Action::Read, ctx) {
            let by_id = |t: &Entity, id: &str| s.inner.events.gone_row(&t.name, id);
            // The children deleted with a row (the members of an org):
            // found by their reference, among the few rows kept.
            let by_reference = |t: &Entity, field: &str, id: &str| {
                s.inner.events.gone_referencing(&t.name, field, id)
            };
            let lookup = policy::GoneRows {
                by_id: &by_id,
                by_reference: &by_reference,
            };
            policy::gone_rows(model, e, rule, row, &lookup, &mut gone);
        }
        let Some(q) = s.row_test_beside(e, row, Action::Read, ctx, &gone)? else {
            return Ok(true);
        };
        Ok(!self.fetch_read(q, &[]).await?.is_empty())
    }
}

/// A nested value of a new row ([`EntityStore::take_nested`]).
enum Nested {
    /// New rows of a one-to-many relation.
    Create {
        field: String,
        child: EntityStore,
        /// The child's to-one field set to the new row.
        via: String,
        rows: Vec<Row>,
    },
    /// Existing rows linked through a many-to-many relation's join type.
    Connect {
        field: String,
        join: EntityStore,
        /// The join type's to-one field set to the new row.
        near: String,
        /// Its to-one field set to each id.
        far: String,
        /// The linked rows' entity.
        target: EntityStore,
        ids: Vec<String>,
    },
}

impl PreparedList {
    /// Runs the statement for `ctx`, with `texts` in the places of the
    /// template's texts (none for [`EntityStore::prepare`]'s). A caller
    /// other than the one it was built for gets the same answers or a
    /// refusal: one whose policies differ is refused, and so is one that
    /// may not compare the fields it compares.
    pub async fn run(&self, ctx: &AccessContext, texts: &[&str]) -> Result<Page, StoreError> {
        let (s, e) = (&self.entity.store, self.entity.def());
        // `statement_caller`, over the entities resolved when it was built.
        let entities = &s.inner.model.entities;
        if caller_key(self.read.iter().filter_map(|&i| entities.get(i)), ctx) != self.caller {
            return Err(StoreError::internal(format!(
                "a statement over {} prepared for another caller",
                e.name
            )));
        }
        policy::check_needs(ctx, &self.needs)?;
        if texts.len() != self.texts {
            return Err(StoreError::internal(format!(
                "the statement takes {} texts, not {}",
                self.texts,
                texts.len()
            )));
        }
        let set = |columns: &Vec<String>, rows| RowSet {
            columns: columns.clone(),
            rows,
        };
        let Some(built) = &self.built else {
            return Ok(Page {
                rows: set(&self.columns, Vec::new()),
                joined: self.joined.iter().map(|c| set(c, Vec::new())).collect(),
            });
        };
        let mut built = built.clone();
        for &(at, i) in &self.slots {
            let text = texts[i];
            if unstorable(text) {
                return Err(StoreError::invalid(
                    &e.name,
                    format!(
                        "`{}` holds U+0000, which no stored text can",
                        text.escape_debug()
                    ),
                ));
            }
            match built.values.0.get_mut(at) {
                Some(sea_query::Value::String(Some(v))) => text.clone_into(v),
                _ => {
                    return Err(StoreError::internal(format!(
                        "statement value {at} is not a text value"
                    )));
                }
            }
        }
        let rows = self.entity.fetch_read(built, &self.kinds).await?;
        if self.joined.is_empty() {
            return Ok(Page {
                rows: set(&self.columns, rows),
                joined: Vec::new(),
            });
        }
        // Each row holds the listed columns, then each join's: split them.
        let width = self.columns.len();
        let mut sets: Vec<Vec<DbRow>> = self
            .joined
            .iter()
            .map(|_| Vec::with_capacity(rows.len()))
            .collect();
        let mut own = Vec::with_capacity(rows.len());
        for mut row in rows {
            let mut rest = row.split_off(width.min(row.len()));
            for (rows, t_cols) in sets.iter_mut().zip(&self.joined) {
                let tail = rest.split_off(t_cols.len().min(rest.len()));
                rows.push(std::mem::replace(&mut rest, tail));
            }
            own.push(row);
        }
        Ok(Page {
            rows: set(&self.columns, own),
            joined: self
                .joined
                .iter()
                .zip(sets)
                .map(|(c, rows)| set(c, rows))
                .collect(),
        })
    }

    /// Where `text` is bound in the statement, exactly (positions among its
    /// bound values), and whether it also occurs inside any other bound
    /// value (as in a `_contains` pattern): then it cannot be replaced.
    fn text_positions(&self, text: &str) -> (Vec<usize>, bool) {
        let mut exact = Vec::new();
        let mut inside = false;
        let values = self.built.as_ref().map_or(&[][..], |b| &b.values.0[..]);
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
}

/// [`EntityStore::statement_caller`] of a statement reading `entities`.
fn caller_key<'e, 'c>(
    entities: impl IntoIterator<Item = &'e Entity>,
    ctx: &'c AccessContext,
) -> &'c str {
    if entities.into_iter().any(|e| policy::read_filtered(e, ctx)) {
        ctx.key()
    } else {
        ""
    }
}

/// The entity a to-one field of `e` refers to, and its index in the Model.
fn join_target<'m>(
    model: &'m Model,
    e: &Entity,
    field: &str,
) -> Result<(&'m Entity, usize), StoreError> {
    let f = stored_field(e, field)?;
    let (FieldKind::ToOne { .. }, Some(r)) = (&f.kind, model.relation_of(f)) else {
        return Err(StoreError::invalid(
            field,
            format!("is not a to-one relation of {}", e.name),
        ));
    };
    Ok((model.entity_at(r.target), r.target.index()))
}

fn forbidden_change(e: &Entity) -> StoreError {
    StoreError::forbidden(format!(
        "the {} may not be changed by this caller (its update policy)",
        e.name
    ))
}

/// How the rows of a to-many batch are tied to their parents.
enum Link<'m> {
    /// The listed entity's to-one field holds the parent's id.
    Via(&'m Field),
    /// Rows of a join entity link them: `near` holds the parent's id,
    /// `far` the listed row's.
    Through {
        join: &'m Entity,
        near: &'m Field,
        far: &'m Field,
    },
}

impl Link<'_> {
    /// The column holding each listed row's parent id.
    fn parent(&self, e: &Entity) -> Expr {
        match self {
            Link::Via(via) => col(e, via),
            Link::Through { join, near, .. } => col(join, near),
        }
    }

    /// The same column, as a window partition names it.
    fn partition(&self, e: &Entity) -> (String, String) {
        match self {
            Link::Via(via) => (e.table.clone(), via.column.clone()),
            Link::Through { join, near, .. } => (join.table.clone(), near.column.clone()),
        }
    }

    /// Joins the join entity's rows to `e`'s, under the join entity's read
    /// policy for `ctx`.
    fn join(
        &self,
        s: &Store,
        q: &mut SelectStatement,
        e: &Entity,
        ctx: &AccessContext,
    ) -> Result<(), StoreError> {
        let Link::Through { join, far, .. } = self else {
            return Ok(());
        };
        q.inner_join(
            join.table.clone(),
            col(join, far).equals((e.table.clone(), id_field(e)?.column.clone())),
        );
        s.restrict(q, join, Action::Read, ctx)
    }
}
