//! The caller's access context in SQL: row policies become part of the
//! statement that reads or writes, and field scopes are checked before it
//! runs. Every read and write of [`crate::Store`] goes through here.

use gatehouse_schema::{AccessContext, Action, Entity, FieldKind, Model, Rule};
use sea_query::{Expr, ExprTrait, Query, SelectStatement};

use crate::StoreError;
use crate::query::{
    Filter, OrderBy, all_of, any_of, col, col_at, columns, comparison, stored_field,
};
use crate::related::Reach;
use crate::store::id_field;
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
    condition_at(model, e, &e.table, 0, dialect, action, ctx)
}

/// [`condition`] on the row of `e` named `at` (an alias inside `depth`
/// relation filters of a caller's filter: the read rule of the rows it
/// reaches).
pub(crate) fn condition_at(
    model: &Model,
    e: &Entity,
    at: &str,
    depth: usize,
    dialect: Dialect,
    action: Action,
    ctx: &AccessContext,
) -> Result<Option<Expr>, StoreError> {
    let Some(rule) = e.policy.rule_for(action, ctx) else {
        return Ok(None);
    };
    let cx = RuleCx {
        model,
        dialect,
        ctx,
        gone: &[],
        this: None,
        missing: None,
    };
    cx.rule(e, at, depth, rule).map(Some)
}

/// [`condition`] for judging a write of the row of `e` whose id is `id`
/// (`action` a create or an update): the rule's relation filters do not
/// count that row among the rows they reach, so a new or changed row
/// cannot vouch for itself (a new `Member` cannot make its author an
/// `OWNER`). A rule that follows a to-one field also finds the rows of
/// `gone` (entity, row as it was): rows deleted since, which the rule is
/// to see as they stood (the parent of a row deleted by its cascade, see
/// [`crate::EntityStore::visible`]).
pub(crate) fn condition_for_row(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    action: Action,
    ctx: &AccessContext,
    id: Option<&str>,
    gone: &[(&Entity, Row)],
) -> Result<Option<Expr>, StoreError> {
    let Some(rule) = e.policy.rule_for(action, ctx) else {
        return Ok(None);
    };
    let this = match action {
        Action::Create | Action::Update => id.map(|id| (e.name.as_str(), id)),
        Action::Read | Action::Delete => None,
    };
    let cx = RuleCx {
        model,
        dialect,
        ctx,
        gone,
        this,
        missing: None,
    };
    cx.rule(e, &e.table, 0, rule).map(Some)
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

/// The statement answering whether `row` of `e`, as given rather than as
/// stored, matches `rule`, a filter bound outside the schema
/// (`gatehouse_schema::bind_filter`; a webhook's `where`), judged without a
/// caller: `SELECT 1 FROM (<row>) AS <table> WHERE <rule>`, one row when it
/// does. The database evaluates the rule over the row's values, as it
/// evaluates every filter and policy, so the rule means what it means in
/// a `where` argument; the rows its paths and relation filters reach are
/// those the statement's transaction sees. Run it, or put it in a
/// statement of one's own (`EXISTS (...)`).
pub fn rule_test(
    model: &Model,
    e: &Entity,
    dialect: Dialect,
    rule: &Rule,
    row: &Row,
) -> Result<SelectStatement, StoreError> {
    let ctx = AccessContext::system();
    let cx = RuleCx {
        model,
        dialect,
        ctx: &ctx,
        gone: &[],
        this: None,
        missing: None,
    };
    let mut q = Query::select();
    q.expr(Expr::cust("1"))
        .from_subquery(
            values_table(model, e, dialect, row)?,
            sea_query::Alias::new(e.table.clone()),
        )
        .and_where(cx.rule(e, &e.table, 0, rule)?);
    Ok(q)
}

/// Where deleted rows are found: by entity and id, and by entity, to-one
/// field and the id it holds (the children of a deleted row).
pub(crate) struct GoneRows<'a, 'm> {
    /// The deleted row of an entity with an id.
    pub by_id: &'a dyn Fn(&'m Entity, &str) -> Option<Row>,
    /// The deleted rows of an entity whose to-one field holds an id.
    pub by_reference: &'a dyn Fn(&'m Entity, &str, &str) -> Vec<Row>,
}

/// The rows `rule` over `row` (of `e`) follows its to-one fields to, and
/// the rows its relation filters reach, that `gone` knows as deleted, as
/// they were, with the ones their own rules reach in turn: what
/// [`condition_for_row`] needs to judge `row` once its parent or its
/// children are gone.
pub(crate) fn gone_rows<'m>(
    model: &'m Model,
    e: &'m Entity,
    rule: &Rule,
    row: &Row,
    gone: &GoneRows<'_, 'm>,
    out: &mut Vec<(&'m Entity, Row)>,
) {
    let known = |out: &[(&Entity, Row)], t: &Entity, id: &str| {
        out.iter().any(|(o, r)| {
            o.name == t.name && r.get("id").and_then(serde_json::Value::as_str) == Some(id)
        })
    };
    match rule {
        Rule::And(parts) | Rule::Or(parts) => {
            for p in parts {
                gone_rows(model, e, p, row, gone, out);
            }
        }
        Rule::Not(inner) => gone_rows(model, e, inner, row, gone, out),
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
            if known(out, t, id) {
                return;
            }
            if let Some(parent) = (gone.by_id)(t, id) {
                out.push((t, parent.clone()));
                gone_rows(model, t, rule, &parent, gone, out);
            }
        }
        Rule::Related { field, rule, .. } => {
            let (Some(r), Some(id)) = (
                e.field(field).and_then(|f| model.relation_of(f)),
                row.get("id").and_then(serde_json::Value::as_str),
            ) else {
                return;
            };
            // Only the children deleted with the row itself: a row that
            // stays has lost the children deleted before its event.
            if (gone.by_id)(e, id).is_none() {
                return;
            }
            let t = model.entity_at(r.target);
            let children: Vec<Row> = match r.kind {
                gatehouse_schema::RelationKind::OneToMany { inverse } => {
                    (gone.by_reference)(t, &model.field_at(inverse).name, id)
                }
                gatehouse_schema::RelationKind::ManyToMany { through, near, far } => {
                    let join = model.entity_at(through);
                    let links = (gone.by_reference)(join, &model.field_at(near).name, id);
                    let far = &model.field_at(far).name;
                    let mut targets = Vec::new();
                    for link in links {
                        let Some(link_id) = link.get("id").and_then(serde_json::Value::as_str)
                        else {
                            continue;
                        };
                        if known(out, join, link_id) {
                            continue;
                        }
                        if let Some(target) = link
                            .get(far)
                            .and_then(serde_json::Value::as_str)
                            .and_then(|t_id| (gone.by_id)(t, t_id))
                        {
                            targets.push(target);
                        }
                        out.push((join, link));
                    }
                    targets
                }
                gatehouse_schema::RelationKind::ManyToOne { .. } => Vec::new(),
            };
            for child in children {
                let Some(child_id) = child.get("id").and_then(serde_json::Value::as_str) else {
                    continue;
                };
                // A cycle through the same rows ends.
                if known(out, t, child_id) {
                    continue;
                }
                out.push((t, child.clone()));
                gone_rows(model, t, rule, &child, gone, out);
            }
        }
    }
}

/// Whether reads of `e` are filtered for `ctx` (then cached answers must be
/// keyed by the caller).
pub(crate) fn read_filtered(e: &Entity, ctx: &AccessContext) -> bool {
    e.policy.rule_for(Action::Read, ctx).is_some()
}

/// Whether `rule` compares with a claim `ctx` lacks, at any depth.
fn lacks_claim(rule: &Rule, ctx: &AccessContext) -> bool {
    match rule {
        Rule::And(all) | Rule::Or(all) => all.iter().any(|r| lacks_claim(r, ctx)),
        Rule::Not(inner) => lacks_claim(inner, ctx),
        Rule::Cmp { value, .. } => operand_lacks(value, ctx),
        Rule::Path { rule, .. } | Rule::Related { rule, .. } => lacks_claim(rule, ctx),
    }
}

fn operand_lacks(value: &gatehouse_schema::Operand, ctx: &AccessContext) -> bool {
    match value {
        gatehouse_schema::Operand::Literal(_) => false,
        gatehouse_schema::Operand::Claim(name) => ctx.claim(name).is_none(),
        gatehouse_schema::Operand::List(items) => items.iter().any(|i| operand_lacks(i, ctx)),
    }
}

/// SQL's unknown truth value: a comparison with a claim the caller lacks.
/// Unlike false it stays unknown under `NOT`, so it never matches.
fn unknown() -> Expr {
    Expr::cust("CAST(NULL AS BOOLEAN)")
}

/// What a policy rule is turned into SQL with.
#[derive(Clone, Copy)]
struct RuleCx<'a> {
    model: &'a Model,
    dialect: Dialect,
    ctx: &'a AccessContext,
    /// Deleted rows a to-one path finds beside their table.
    gone: &'a [(&'a Entity, Row)],
    /// The row being written (entity name, id): not among the rows the
    /// rule's relation filters reach.
    this: Option<(&'a str, &'a str)>,
    /// What a comparison with a claim the caller lacks stands for: SQL's
    /// unknown (`None`), or inside a relation filter the bound it is
    /// judged by (`Some(false)` for the lower, `Some(true)` for the upper).
    missing: Option<bool>,
}

impl RuleCx<'_> {
    /// `rule` over the row of `e` named `at`, inside `depth` relation
    /// filters.
    fn rule(&self, e: &Entity, at: &str, depth: usize, rule: &Rule) -> Result<Expr, StoreError> {
        let (model, dialect, ctx) = (self.model, self.dialect, self.ctx);
        Ok(match rule {
            Rule::And(parts) => all_of(parts.iter().map(|p| self.rule(e, at, depth, p)))?,
            Rule::Or(parts) => any_of(parts.iter().map(|p| self.rule(e, at, depth, p)))?,
            Rule::Not(inner) => {
                // Under NOT the lower bound of the inner rule is the upper
                // bound of the whole.
                let flipped = RuleCx {
                    missing: self.missing.map(|m| !m),
                    ..*self
                };
                flipped.rule(e, at, depth, inner)?.not()
            }
            Rule::Cmp { field, op, value } => match value.resolve(ctx) {
                None => self.missing_claim(),
                Some(v) => match comparison(model, e, at, dialect, field, *op, &v) {
                    Ok(c) => c,
                    // A claim of another type than the field (a number for a
                    // String) matches nothing; literals were checked at load.
                    Err(StoreError::Invalid { .. }) => self.missing_claim(),
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
                // The referenced rows are found under their own table's
                // name, in a subquery that correlates with nothing.
                let found = |inner: Expr| -> Result<Expr, StoreError> {
                    let mut sub = Query::select();
                    sub.expr(col(t, id))
                        .from(t.table.clone())
                        .and_where(inner.clone());
                    let mut found = col_at(at, f).in_subquery(sub);
                    // Each deleted row stands in for itself, beside the
                    // table, as long as no row of its id is there again.
                    for (_, row) in self.gone.iter().filter(|(g, _)| g.name == t.name) {
                        let mut sub = Query::select();
                        sub.expr(col(t, id))
                            .from_subquery(
                                values_table(model, t, dialect, row)?,
                                sea_query::Alias::new(t.table.clone()),
                            )
                            .and_where(inner.clone());
                        let mut live = Query::select();
                        live.expr(col(t, id)).from(t.table.clone());
                        found = found.or(col_at(at, f)
                            .in_subquery(sub)
                            .and(col_at(at, f).not_in_subquery(live)));
                    }
                    Ok(found)
                };
                // As for relation filters (below): where the referenced
                // row's rule depends on a claim the caller lacks, the
                // answer is unknown, not "no row matches", so that it
                // cannot match under NOT either.
                let (lower, upper) = self.bounds(t, &t.table, depth, rule)?;
                if lower == upper {
                    found(lower)?
                } else {
                    let unknown = unknown();
                    Expr::case(col_at(at, f).is_null(), unknown.clone())
                        .case(found(lower)?, Expr::cust("TRUE"))
                        .case(found(upper)?, unknown)
                        .finally(Expr::cust("FALSE"))
                        .into()
                }
            }
            Rule::Related {
                field,
                quantifier,
                rule,
            } => {
                // Read without the reached rows' own policies: the rule's
                // author decides. The row being written is not reached.
                let reach = Reach::beside(model, e, at, field, depth, self.gone, dialect)?;
                // A child's rule is judged between two bounds: with every
                // comparison with a missing claim false (lower) and true
                // (upper). Where they differ, the answer depends on the
                // missing claim and is unknown, as a flat comparison's is,
                // so it cannot match under NOT, `_none` or `_every` either.
                let (lower, upper) = self.bounds(reach.target, &reach.alias, depth + 1, rule)?;
                let mut guards = Vec::new();
                if let Some((entity, id)) = self.this {
                    if reach.target.name == entity {
                        guards.push(col_at(&reach.alias, id_field(reach.target)?).ne(id));
                    }
                    if let Some((join, alias)) = &reach.join
                        && join.name == entity
                    {
                        guards.push(col_at(alias, id_field(join)?).ne(id));
                    }
                }
                if lower == upper {
                    reach.quantify(*quantifier, guards, lower)?
                } else {
                    reach.quantify_between(*quantifier, guards, lower, upper)?
                }
            }
        })
    }

    /// `rule` judged with every comparison with a claim the caller lacks
    /// false (the lower bound: true only where the rule holds whatever the
    /// claim) and true (the upper bound). Equal when the rule compares with
    /// no missing claim, or when an outer bound already decided them.
    fn bounds(
        &self,
        e: &Entity,
        at: &str,
        depth: usize,
        rule: &Rule,
    ) -> Result<(Expr, Expr), StoreError> {
        // Inside a bound the claims are decided, and a rule that names no
        // missing claim has one answer: built once.
        if self.missing.is_some() || !lacks_claim(rule, self.ctx) {
            let one = self.rule(e, at, depth, rule)?;
            return Ok((one.clone(), one));
        }
        let bound = |m: bool| {
            let cx = RuleCx {
                missing: Some(self.missing.unwrap_or(m)),
                ..*self
            };
            cx.rule(e, at, depth, rule)
        };
        Ok((bound(false)?, bound(true)?))
    }

    /// A comparison with a claim the caller lacks.
    fn missing_claim(&self) -> Expr {
        match self.missing {
            None => unknown(),
            Some(true) => crate::query::always_true(),
            Some(false) => crate::query::always_false(),
        }
    }
}

/// A scope a filter or an order needs of its caller, and what for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Need {
    scope: String,
    /// What needs it, as the refusal names it.
    what: String,
}

/// The scopes comparing what `filter` and `order` compare on `e` needs:
/// the read scope of each field that has one (comparing a field tells its
/// values), and for each relation filter the read scopes of the rows it
/// reaches (the target's and a join type's), then their own fields'.
pub(crate) fn needs(
    model: &Model,
    e: &Entity,
    filter: Option<&Filter>,
    order: &[OrderBy],
) -> Vec<Need> {
    fn field(model: &Model, e: &Entity, name: &str, out: &mut Vec<Need>) {
        if let Some(scope) = e.field(name).and_then(|f| model.field_read_scope(f)) {
            out.push(Need {
                scope: scope.to_string(),
                what: format!("comparing `{}.{name}`", e.name),
            });
        }
    }
    fn walk(model: &Model, e: &Entity, filter: &Filter, out: &mut Vec<Need>) {
        match filter {
            Filter::And(all) | Filter::Or(all) => all.iter().for_each(|f| walk(model, e, f, out)),
            Filter::Not(inner) => walk(model, e, inner, out),
            Filter::Cmp { field: name, .. } => field(model, e, name, out),
            Filter::Related {
                field: name,
                filter,
                ..
            } => {
                let Some(f) = e.field(name) else { return };
                let what = format!("filtering through `{}.{name}`", e.name);
                if let Some((join, _, _)) = model.through_of(f) {
                    out.push(Need {
                        scope: join.read_scope().to_string(),
                        what: what.clone(),
                    });
                }
                if let Some(t) = model.target_of(f) {
                    out.push(Need {
                        scope: t.read_scope().to_string(),
                        what,
                    });
                    walk(model, t, filter, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    if let Some(f) = filter {
        walk(model, e, f, &mut out);
    }
    for o in order {
        field(model, e, &o.field, &mut out);
    }
    out
}

/// Refuses (`Forbidden`) a filter or order whose [`needs`] `ctx` does not
/// meet.
pub(crate) fn check_needs(ctx: &AccessContext, needs: &[Need]) -> Result<(), StoreError> {
    match needs.iter().find(|n| !ctx.allows(&n.scope, true)) {
        Some(n) => Err(StoreError::forbidden(format!(
            "{} needs the scope `{}`",
            n.what, n.scope
        ))),
        None => Ok(()),
    }
}

/// The entities (their indexes in the Model) whose rows a caller's
/// `filter` on `e` reaches through its relation filters, targets and join
/// types, at any depth: their read rules are in the statement, so the
/// statement is the caller's own when one of them filters it.
pub(crate) fn reached(model: &Model, e: &Entity, filter: &Filter, out: &mut Vec<usize>) {
    match filter {
        Filter::And(all) | Filter::Or(all) => all.iter().for_each(|f| reached(model, e, f, out)),
        Filter::Not(inner) => reached(model, e, inner, out),
        Filter::Cmp { .. } => {}
        Filter::Related { field, filter, .. } => {
            let Some(r) = e.field(field).and_then(|f| model.relation_of(f)) else {
                return;
            };
            if let gatehouse_schema::RelationKind::ManyToMany { through, .. } = r.kind {
                out.push(through.index());
            }
            out.push(r.target.index());
            reached(model, model.entity_at(r.target), filter, out);
        }
    }
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
        if flow_only(model, e, ctx, name) {
            return Err(StoreError::forbidden(format!(
                "`{}.{name}` is changed through `POST /auth/email` (confirmed by the new address); \
                 directly only by a caller that bypasses the type's policy",
                e.name
            )));
        }
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

/// Whether field `name` of `e` is one `ctx` may not write directly: the
/// account type's `email`, which its owner changes through the e-mail
/// change flow; the server and bypass callers write it.
fn flow_only(model: &Model, e: &Entity, ctx: &AccessContext, name: &str) -> bool {
    name == gatehouse_schema::AccountType::EMAIL
        && model
            .account
            .as_ref()
            .is_some_and(|a| a.email && model.entity_at(a.entity).name == e.name)
        && !e.policy.bypassed(ctx)
}

/// Whether `ctx` may write field `name` of `e` (a whole replacement keeps
/// the fields it may not).
pub(crate) fn may_write(model: &Model, e: &Entity, ctx: &AccessContext, name: &str) -> bool {
    !flow_only(model, e, ctx, name)
        && e.field(name)
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
