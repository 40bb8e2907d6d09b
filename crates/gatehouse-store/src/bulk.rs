//! Upsert and bulk writes of [`EntityStore`]: built on the one-row write
//! paths of `entity.rs` (the same policy, owner-field, value and reference
//! checks, the same change events), so no rule has a second copy here.
//! See `docs/design/policies.md` ("Upsert and bulk writes").

use gatehouse_schema::{AccessContext, Action, Field};
use sea_query::{ExprTrait, LockType, Order};
use serde_json::Value as Json;

use gatehouse_db::{Built, Tx};

use crate::error::from_db;
use crate::policy;
use crate::query::{Filter, col, columns, condition};
use crate::store::{Whole, id_field};
use crate::txn::{Failure, Unit};
use crate::value::{Dialect, SqlKind, to_sql};
use crate::{EntityStore, Row, StoreError};

/// How often an upsert looks for the row again after a concurrent
/// transaction made one with its key between its look and its insert.
const UPSERT_ATTEMPTS: usize = 3;

impl EntityStore {
    /// Inserts `row`, or updates the row that has the same values of the
    /// unique key `on_conflict` names (its fields, in any order: the id, a
    /// `@unique` field or the fields of an `@unique(fields:)` key).
    /// Returns the row as stored, with whether it was created.
    ///
    /// Which branch happens decides the policy: a new row must match the
    /// create policy (owner fields filled from the caller's claims, as for
    /// [`EntityStore::insert`]); an existing row is updated as
    /// [`EntityStore::update`] updates it with the values given (it must
    /// match the update policy before and after; owner fields are
    /// write-once). A row with the key that the caller may not read is
    /// never updated nor told of: the upsert answers what a create of the
    /// same row answers (refused by the create policy, or the key's
    /// conflict, as a create meets it).
    ///
    /// An upsert writes the row's own fields: nested children are refused.
    pub async fn upsert(
        &self,
        ctx: &AccessContext,
        row: Row,
        on_conflict: &[&str],
    ) -> Result<(Row, bool), StoreError> {
        let (s, e) = (self.store(), self.def());
        let Some(key) = e.unique_key(on_conflict) else {
            let keys: Vec<String> = std::iter::once("[id]".to_string())
                .chain(
                    e.stored_fields()
                        .filter(|f| f.unique)
                        .map(|f| format!("[{}]", f.name)),
                )
                .chain(
                    e.unique_keys
                        .iter()
                        .map(|k| format!("[{}]", k.fields.join(", "))),
                )
                .collect();
            return Err(StoreError::invalid(
                "onConflict",
                format!(
                    "[{}] is not a unique key of {}: name the fields of one of {}",
                    on_conflict.join(", "),
                    e.name,
                    keys.join(", ")
                ),
            ));
        };
        if let Some(f) = e
            .fields
            .iter()
            .find(|f| !f.is_stored() && row.contains_key(&f.name))
        {
            return Err(StoreError::invalid(
                &f.name,
                format!(
                    "an upsert writes the {} itself: create related rows with their own mutations",
                    e.name
                ),
            ));
        }
        // The update branch's values, checked before anything runs (as
        // `update` checks them). The id may be given: it must then be the
        // id of the row found.
        let given_id = row.get("id").and_then(Json::as_str).map(str::to_string);
        let mut patch = row.clone();
        patch.remove("id");
        let values = self.patch_values(ctx, None, &patch)?;
        Unit::write(self, async |tx, events, now| {
            // The key's values as the new row would have them: owner
            // fields from the claims, defaults, canonical values.
            let mut probe = row.clone();
            policy::inject_owner(e, ctx, &mut probe);
            let probe = s.full_row(e, &probe, Whole::New { now })?;
            for _ in 0..UPSERT_ATTEMPTS {
                let found = self.find_by_key(tx, &key, &probe).await?;
                let readable = match &found {
                    Some(id) => s.matches(tx, e, id, Action::Read, ctx).await?,
                    None => false,
                };
                match found {
                    Some(id) if readable => {
                        if given_id.as_deref().is_some_and(|g| g != id) {
                            return Err(StoreError::invalid(
                                "id",
                                "the id of a row cannot be changed",
                            )
                            .into());
                        }
                        let updated = self
                            .write_existing_in(tx, events, now, ctx, &id, values.clone())
                            .await?;
                        return Ok((updated, false));
                    }
                    // A row the caller may not read holds the key: the
                    // insert meets it as a create would (policy first,
                    // then the key's conflict).
                    Some(_) => {
                        let created = self
                            .insert_unless_taken(tx, events, now, ctx, row.clone(), None, None)
                            .await?;
                        return created.map(|r| (r, true)).ok_or_else(|| {
                            StoreError::internal("an insert inserted nothing").into()
                        });
                    }
                    None => {
                        if let Some(created) = self
                            .insert_unless_taken(
                                tx,
                                events,
                                now,
                                ctx,
                                row.clone(),
                                None,
                                Some(&key),
                            )
                            .await?
                        {
                            return Ok((created, true));
                        }
                        // Made by a concurrent transaction since the look
                        // (PostgreSQL): look again.
                    }
                }
            }
            Err(StoreError::conflict(format!(
                "the {} with this key kept changing while it was written: try again",
                e.name
            ))
            .into())
        })
        .await
    }

    /// The id of the row whose `key` fields hold the values `row` has,
    /// whoever may read it (locked for the rest of the transaction on
    /// PostgreSQL). `None` when there is none, or when a value of the key
    /// is null (a key with a null part never clashes).
    async fn find_by_key(
        &self,
        tx: &mut Tx,
        key: &[&Field],
        row: &Row,
    ) -> Result<Option<String>, StoreError> {
        let (s, e) = (self.store(), self.def());
        let d = s.dialect();
        let cols = columns(&s.inner.model, e, None)?;
        let idf = id_field(e)?;
        let mut q = sea_query::Query::select();
        q.expr(col(e, idf)).from(e.table.clone());
        for f in key {
            let v = row.get(&f.name).unwrap_or(&Json::Null);
            if v.is_null() {
                return Ok(None);
            }
            let c = cols
                .iter()
                .find(|c| c.field.name == f.name)
                .ok_or_else(|| StoreError::internal("a key field without a column"))?;
            q.and_where(col(e, f).eq(to_sql(d, &c.ty, v)));
        }
        if d == Dialect::Postgres {
            q.lock(LockType::Update);
        }
        let rows = tx
            .conn()
            .fetch(Built::of(d, &q), &[SqlKind::Text])
            .await
            .map_err(from_db)?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .and_then(|v| v.as_str().map(str::to_string)))
    }

    /// Updates every row that matches `filter` and that `ctx` may change
    /// (it may read it and it matches the update policy) with the values
    /// of `patch`, in one transaction; rows it may read but not change are
    /// left alone. Returns the rows as updated, in id order.
    ///
    /// Each row is written as [`EntityStore::update`] writes one: a change
    /// that would take a row out of the update policy, or change an owner
    /// field, refuses the whole request (`Forbidden`), as does any other
    /// failure; nothing is written then. More rows than
    /// [`crate::StoreOptions::max_bulk_rows`] are refused (`Invalid`)
    /// before anything is written. Each changed row has its change event,
    /// published once the transaction commits.
    pub async fn update_where(
        &self,
        ctx: &AccessContext,
        filter: Option<&Filter>,
        patch: Row,
    ) -> Result<Vec<Row>, StoreError> {
        let values = self.patch_values(ctx, None, &patch)?;
        self.may_compare(ctx, filter, &[])?;
        Unit::write(self, async |tx, events, now| {
            let ids = self.changeable(tx, ctx, filter, Action::Update).await?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(
                    self.write_existing_in(tx, events, now, ctx, &id, values.clone())
                        .await?,
                );
            }
            Ok(out)
        })
        .await
    }

    /// Deletes every row that matches `filter` and that `ctx` may delete
    /// (it may read it and it matches the delete policy), in one
    /// transaction, each as [`EntityStore::delete`] deletes one (its
    /// `onDelete` cascade included); rows it may read but not delete are
    /// left alone. Returns the deleted rows as they were, in id order.
    /// The limit and events are those of [`EntityStore::update_where`].
    pub async fn delete_where(
        &self,
        ctx: &AccessContext,
        filter: Option<&Filter>,
    ) -> Result<Vec<Row>, StoreError> {
        self.may_compare(ctx, filter, &[])?;
        Unit::write(self, async |tx, events, now| {
            let ids = self.changeable(tx, ctx, filter, Action::Delete).await?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                // A row an earlier one's cascade deleted is gone already.
                if let Some(old) = self.delete_in(tx, events, now, ctx, &id).await? {
                    out.push(old);
                }
            }
            Ok(out)
        })
        .await
    }

    /// The ids of the rows matching `filter` that `ctx` may read and that
    /// match the policy of `action`, in id order: one statement, which
    /// reads one row more than the bulk limit so that a larger request is
    /// refused before anything is written.
    async fn changeable(
        &self,
        tx: &mut Tx,
        ctx: &AccessContext,
        filter: Option<&Filter>,
        action: Action,
    ) -> Result<Vec<String>, Failure> {
        let (s, e) = (self.store(), self.def());
        let d = s.dialect();
        let model = &s.inner.model;
        let idf = id_field(e)?;
        let max = s.inner.max_bulk_rows;
        let mut q = sea_query::Query::select();
        q.expr(col(e, idf)).from(e.table.clone());
        if let Some(f) = filter {
            q.and_where(condition(model, e, d, f, ctx)?);
        }
        s.restrict(&mut q, e, Action::Read, ctx)?;
        s.restrict(&mut q, e, action, ctx)?;
        q.order_by_expr(col(e, idf), Order::Asc)
            .limit(u64::from(max) + 1);
        let ids: Vec<String> = tx
            .conn()
            .fetch(Built::of(d, &q), &[SqlKind::Text])
            .await
            .map_err(from_db)?
            .into_iter()
            .filter_map(|r| r.into_iter().next()?.as_str().map(str::to_string))
            .collect();
        if ids.len() > max as usize {
            let verb = if action == Action::Delete {
                "delete"
            } else {
                "change"
            };
            return Err(StoreError::invalid(
                "where",
                format!(
                    "matches more than {max} {} rows this caller may {verb}, the most one request may {verb} (`limits.max_bulk_rows`): narrow it",
                    e.name
                ),
            )
            .into());
        }
        Ok(ids)
    }
}
