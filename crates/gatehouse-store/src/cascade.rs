//! What deleting a row does to the rows that reference it
//! (`@relation(onDelete:)` on their to-one field): `CASCADE` deletes them,
//! `SET_NULL` clears the reference (stamping `@updatedAt`), `RESTRICT` is left to the foreign key
//! (a conflict while they exist). Done by the store, in the delete's
//! transaction, rather than by `ON DELETE` clauses: the store needs every
//! row it deletes or changes for the change feed, and changing a field's
//! `onDelete` then needs no migration. This is schema integrity, not the
//! caller's right: the referencing rows are changed whoever deletes,
//! without their policies (`docs/design/relations.md`).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use gatehouse_schema::{AccessContext, ChangeKind, EntityId, Generated, OnDelete};
use sea_query::{Expr, ExprTrait, Query};
use serde_json::Value as Json;

use gatehouse_db::{Built, Tx};

use crate::Store;
use crate::error::from_db;
use crate::feed::ChangeEvent;
use crate::query::{col, columns};
use crate::store::{id_field, kinds, row_id, to_row};
use crate::txn::Failure;
use crate::value::to_sql;

/// The rows already deleted by one delete, so a cycle of `CASCADE`
/// relations ends.
pub(crate) type Seen = HashSet<(EntityId, String)>;

/// Who deletes, and when (the transaction's time, `Unit::write`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct By<'a> {
    /// The caller: a conflict names only what it may read.
    pub(crate) ctx: &'a AccessContext,
    /// What a cleared reference stamps `@updatedAt` with.
    pub(crate) now: i64,
}

type Step<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

impl Store {
    /// Applies `onDelete` of every to-one field that references row `id`
    /// of `target`, before that row is deleted `by` a caller: referencing rows are
    /// deleted first (recursively) or have the reference cleared, and an
    /// event for each is pushed to `events`.
    pub(crate) fn apply_on_delete<'a>(
        &'a self,
        tx: &'a mut Tx,
        by: By<'a>,
        target: EntityId,
        id: &'a str,
        seen: &'a mut Seen,
        events: &'a mut Vec<ChangeEvent>,
    ) -> Step<'a> {
        Box::pin(async move {
            let model = self.model().clone();
            let d = self.dialect();
            let refs: Vec<_> = model
                .references_to(target)
                .filter(|(_, on)| *on != OnDelete::Restrict)
                .collect();
            for (field_id, on_delete) in refs {
                let child_id = field_id.entity;
                let child = model.entity_at(child_id);
                let f = model.field_at(field_id);
                let cols = columns(&model, child, None)?;
                let mut q = self.select(child, &cols);
                q.and_where(col(child, f).eq(id));
                let rows = tx
                    .conn()
                    .fetch(Built::of(d, &q), &kinds(&cols))
                    .await
                    .map_err(from_db)?;
                let id_col = id_field(child)?.column.clone();
                for old in rows.into_iter().map(|r| to_row(&cols, r)) {
                    let cid = row_id(&old);
                    if !seen.insert((child_id, cid.clone())) {
                        // A cycle: the row is being deleted further up.
                        // Its reference to this row would keep this row's
                        // delete from passing the foreign key, so it is
                        // cleared when it may be (a required one is left,
                        // and the delete refused as a conflict).
                        if on_delete == OnDelete::Cascade && !f.required {
                            let mut up = Query::update();
                            up.table(child.table.clone())
                                .value(f.column.clone(), Expr::cust("NULL"))
                                .and_where(Expr::col(id_col.clone()).eq(cid.as_str()));
                            tx.conn()
                                .execute(Built::of(d, &up))
                                .await
                                .map_err(from_db)?;
                        }
                        continue;
                    }
                    let ev = match on_delete {
                        OnDelete::Cascade => {
                            self.apply_on_delete(tx, by, child_id, &cid, seen, events)
                                .await?;
                            let mut del = Query::delete();
                            del.from_table(child.table.clone())
                                .and_where(Expr::col(id_col.clone()).eq(cid.as_str()));
                            if let Err(err) = tx.conn().execute(Built::of(d, &del)).await {
                                return Err(Failure::refused(
                                    child_id,
                                    err,
                                    None,
                                    Some((&cid, by.ctx)),
                                ));
                            }
                            ChangeEvent {
                                entity: child.name.clone(),
                                kind: ChangeKind::Deleted,
                                id: cid,
                                new: None,
                                old: Some(old),
                            }
                        }
                        OnDelete::SetNull | OnDelete::Restrict => {
                            // A row set null now may still be deleted by
                            // another path of the cascade: it is not seen.
                            seen.remove(&(child_id, cid.clone()));
                            let mut up = Query::update();
                            up.table(child.table.clone())
                                .value(f.column.clone(), Expr::cust("NULL"))
                                .and_where(Expr::col(id_col.clone()).eq(cid.as_str()));
                            let mut new = old.clone();
                            new.insert(f.name.clone(), Json::Null);
                            // Clearing the reference writes the row: its
                            // `@updatedAt` is stamped as by an update.
                            for c in &cols {
                                if c.field.generated == Some(Generated::UpdatedAt) {
                                    let v = self.generate(Generated::UpdatedAt, by.now);
                                    up.value(c.field.column.clone(), to_sql(d, &c.ty, &v));
                                    new.insert(c.field.name.clone(), v);
                                }
                            }
                            tx.conn()
                                .execute(Built::of(d, &up))
                                .await
                                .map_err(from_db)?;
                            ChangeEvent {
                                entity: child.name.clone(),
                                kind: ChangeKind::Updated,
                                id: cid,
                                new: Some(new),
                                old: Some(old),
                            }
                        }
                    };
                    events.push(ev);
                }
            }
            Ok(())
        })
    }
}
