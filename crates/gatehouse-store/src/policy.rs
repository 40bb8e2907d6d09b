//! The caller's access context in SQL: row policies become part of the
//! statement that reads or writes, and field scopes are checked before it
//! runs. Every read and write of [`crate::Store`] goes through here.

use gatehouse_schema::{AccessContext, Action, Entity, FieldKind, Model, Rule};
use sea_query::{Expr, ExprTrait, Query, SelectStatement};

use crate::StoreError;
use crate::query::{Filter, OrderBy, all_of, any_of, col, columns, comparison, stored_field};
use crate::value::{Dialect, Row, to_sql};

/// The condition rows of `e` must meet for `action` by `ctx`; `None` when
/// the action is not filtered for this caller.
pub(crate) fn condition(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    action: Action,
    ctx: &AccessContext,
) -> Result<Option<Expr>, StoreError> {
    condition_beside(model, e, dialect, action, ctx, &[])
}

/// [`condition`], where a rule that follows a to-one field also finds the
/// rows of `gone` (entity, row as it was): rows deleted since, which the
/// rule is to see as they stood (the parent of a row deleted by its
/// cascade, see [`crate::EntityStore::visible`]).
pub(crate) fn condition_beside(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    action: Action,
    ctx: &AccessContext,
    gone: &[(&Entity, Row)],
) -> Result<Option<Expr>, StoreError> {
    match e.policy.rule_for(action, ctx) {
        None => Ok(None),
        Some(rule) => rule_condition(model, e, dialect, rule, ctx, gone).map(Some),
    }
}

/// `row` of `e` as a one-row derived table, to stand in for the table
/// under its name (`FROM (SELECT ...) AS <table>`): a rule over it means
/// what it means over the stored row.
pub(crate) fn values_table(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    row: &Row,
) -> Result<SelectStatement, StoreError> {
    let mut values = Query::select();
    for c in columns(model, e, None)? {
        let v = row.get(&c.field.name).unwrap_or(&serde_json::Value::Null);
        values.expr_as(to_sql(dialect, &c.ty, v), c.field.column.clone());
    }
    Ok(values)
}

/// The rows `rule` over `row` follows its to-one fields
/// to and that `gone` (entity, id) knows as deleted, as they were, with
/// the ones their own rules reach in turn: what
/// [`condition_beside`] needs to judge `row` once its parent is gone.
pub(crate) fn gone_rows<'m>(
    model: &'m Model,
    rule: &Rule,
    row: &Row,
    gone: &dyn Fn(&'m Entity, &str) -> Option<Row>,
    out: &mut Vec<(&'m Entity, Row)>,
) {
    match rule {
        Rule::And(parts) | Rule::Or(parts) => {
            for p in parts {
                gone_rows(model, p, row, gone, out);
            }
        }
        Rule::Not(inner) => gone_rows(model, inner, row, gone, out),
        Rule::Cmp { .. } => {}
        Rule::Path {
            field,
            target,
            rule,
        } => {
            let (Some(t), Some(id)) = (
                model.entity(target),
                row.get(field).and_then(serde_json::Value::as_str),
            ) else {
                return;
            };
            // A cycle of paths through the same rows ends.
            if out.iter().any(|(o, r)| {
                o.name == t.name && r.get("id").and_then(serde_json::Value::as_str) == Some(id)
            }) {
                return;
            }
            if let Some(parent) = gone(t, id) {
                out.push((t, parent.clone()));
                gone_rows(model, rule, &parent, gone, out);
            }
        }
    }
}

/// Whether reads of `e` are filtered for `ctx` (then cached answers must be
/// keyed by the caller).
pub(crate) fn read_filtered(e: &Entity, ctx: &AccessContext) -> bool {
    e.policy.rule_for(Action::Read, ctx).is_some()
}

/// SQL's unknown truth value: a comparison with a claim the caller lacks.
/// Unlike false it stays unknown under `NOT`, so it never matches.
fn unknown() -> Expr {
    Expr::cust("CAST(NULL AS BOOLEAN)")
}

fn rule_condition(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    rule: &Rule,
    ctx: &AccessContext,
    gone: &[(&Entity, Row)],
) -> Result<Expr, StoreError> {
    Ok(match rule {
        Rule::And(parts) => all_of(
            parts
                .iter()
                .map(|p| rule_condition(model, e, dialect, p, ctx, gone)),
        )?,
        Rule::Or(parts) => any_of(
            parts
                .iter()
                .map(|p| rule_condition(model, e, dialect, p, ctx, gone)),
        )?,
        Rule::Not(inner) => rule_condition(model, e, dialect, inner, ctx, gone)?.not(),
        Rule::Cmp { field, op, value } => match value.resolve(ctx) {
            None => unknown(),
            Some(v) => match comparison(model, e, dialect, field, *op, &v) {
                Ok(c) => c,
                // A claim of another type than the field (a number for a
                // String) matches nothing; literals were checked at load.
                Err(StoreError::Invalid { .. }) => unknown(),
                Err(other) => return Err(other),
            },
        },
        Rule::Path {
            field,
            target,
            rule,
        } => {
            let t = model
                .entity(target)
                .ok_or_else(|| StoreError::internal(format!("unknown entity {target}")))?;
            let f = stored_field(e, field)?;
            let id = t
                .field("id")
                .ok_or_else(|| StoreError::internal(format!("{target} has no id")))?;
            let inner = rule_condition(model, t, dialect, rule, ctx, gone)?;
            let mut sub = Query::select();
            sub.expr(col(t, id))
                .from(t.table.clone())
                .and_where(inner.clone());
            let mut found = col(e, f).in_subquery(sub);
            // Each deleted row stands in for itself, beside the table, as
            // long as no row of its id is there again.
            for (_, row) in gone.iter().filter(|(g, _)| g.name == t.name) {
                let mut sub = Query::select();
                sub.expr(col(t, id))
                    .from_subquery(
                        values_table(model, t, dialect, row)?,
                        sea_query::Alias::new(t.table.clone()),
                    )
                    .and_where(inner.clone());
                let mut live = Query::select();
                live.expr(col(t, id)).from(t.table.clone());
                found = found.or(col(e, f)
                    .in_subquery(sub)
                    .and(col(e, f).not_in_subquery(live)));
            }
            found
        }
    })
}

/// The fields `filter` and `order` compare.
pub(crate) fn compared<'q>(filter: Option<&'q Filter>, order: &'q [OrderBy]) -> Vec<&'q str> {
    let mut out = Vec::new();
    if let Some(f) = filter {
        f.for_each_field(&mut |n| out.push(n));
    }
    out.extend(order.iter().map(|o| o.field.as_str()));
    out
}

/// Refuses filtering or ordering `e` by a field `ctx` may not read
/// (`Model::field_read_scope`): comparing a field tells its values.
/// `fields` as [`compared`] lists them.
pub(crate) fn check_compared(
    model: &Model,
    e: &Entity,
    ctx: &AccessContext,
    fields: &[impl AsRef<str>],
) -> Result<(), StoreError> {
    for name in fields {
        let name = name.as_ref();
        if let Some(scope) = e.field(name).and_then(|f| model.field_read_scope(f))
            && !ctx.allows(scope, true)
        {
            return Err(StoreError::forbidden(format!(
                "comparing `{}.{name}` needs the scope `{scope}`",
                e.name
            )));
        }
    }
    Ok(())
}

/// Of `fields`, those that need a scope to be compared: what a statement
/// built for one caller checks again for the next.
pub(crate) fn scoped(model: &Model, e: &Entity, fields: &[&str]) -> Vec<String> {
    fields
        .iter()
        .filter(|n| e.field(n).and_then(|f| model.field_read_scope(f)).is_some())
        .map(|n| n.to_string())
        .collect()
}

/// Refuses setting a field of `e` that `ctx` may not write
/// (`Model::field_write_scope`); a null for a field it may not write is
/// refused too, as it would clear it.
pub(crate) fn check_written(
    model: &Model,
    e: &Entity,
    ctx: &AccessContext,
    row: &Row,
) -> Result<(), StoreError> {
    for name in row.keys() {
        if let Some(f) = e.field(name)
            && let Some(scope) = model.field_write_scope(f)
            && !ctx.allows(scope, false)
        {
            return Err(StoreError::forbidden(format!(
                "setting `{}.{name}` needs the scope `{scope}`",
                e.name
            )));
        }
    }
    Ok(())
}

/// Whether `ctx` may write field `name` of `e` (a whole replacement keeps
/// the fields it may not).
pub(crate) fn may_write(model: &Model, e: &Entity, ctx: &AccessContext, name: &str) -> bool {
    e.field(name)
        .and_then(|f| model.field_write_scope(f))
        .is_none_or(|scope| ctx.allows(scope, false))
}

/// Fills the owner fields (`Policy::owner_fields`: `owner: "$sub"` in any
/// rule) that the new row leaves out from the caller's claims. A bypass
/// caller's row is filled too: bypass lifts the filter, not the filling,
/// and a value it gives is kept.
pub(crate) fn inject_owner(e: &Entity, ctx: &AccessContext, row: &mut Row) {
    for (field, claim) in e.policy.owner_fields() {
        let given = row.get(field).is_some_and(|v| !v.is_null());
        if !given
            && let Some(v) = ctx.claim(claim)
            && e.field(field).is_some_and(|f| {
                matches!(f.kind, FieldKind::Value { .. } | FieldKind::ToOne { .. })
            })
        {
            row.insert(field.to_string(), v.clone());
        }
    }
}

/// Refuses a new row that leaves out a required owner field (one
/// [`inject_owner`] fills from a claim) when `ctx` has no such claim,
/// naming the claim: the caller cannot tell otherwise why a field it was
/// not asked for is missing. Asked after [`inject_owner`].
pub(crate) fn check_owner_claims(
    e: &Entity,
    ctx: &AccessContext,
    row: &Row,
) -> Result<(), StoreError> {
    for (field, claim) in e.policy.owner_fields() {
        let missing = row.get(field).is_none_or(serde_json::Value::is_null);
        if missing && ctx.claim(claim).is_none() && e.field(field).is_some_and(|f| f.required) {
            return Err(StoreError::invalid(
                field,
                format!(
                    "is required; a new {} takes it from the caller's claim `${claim}`, \
                     and the caller's token has no `{claim}` claim",
                    e.name
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses changing an owner field of `old` (write-once, see
/// `Policy::owner_fields`) unless the policy does not filter `ctx`. Setting
/// it to the value it holds is no change, so a whole replacement may repeat
/// it.
pub(crate) fn check_owners_kept(
    e: &Entity,
    ctx: &AccessContext,
    old: &Row,
    values: &Row,
) -> Result<(), StoreError> {
    if e.policy.bypassed(ctx) {
        return Ok(());
    }
    for (field, _) in e.policy.owner_fields() {
        if let Some(new) = values.get(field)
            && old.get(field).unwrap_or(&serde_json::Value::Null) != new
        {
            return Err(StoreError::forbidden(format!(
                "`{}.{field}` is set when the row is created and cannot be changed",
                e.name
            )));
        }
    }
    Ok(())
}

/// Whether a whole replacement by `ctx` leaves `field` as stored when it
/// gives no value for it: an owner field the caller may not change.
pub(crate) fn kept_when_omitted(e: &Entity, ctx: &AccessContext, field: &str) -> bool {
    !e.policy.bypassed(ctx) && e.policy.is_owner_field(field)
}
