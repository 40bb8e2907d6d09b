//! Filters through to-many relations (`tasks_some`, `members_every`,
//! `tags_none`): the rows a to-many field reaches from one row, as ONE
//! correlated subquery, for a caller's filter (`crate::query`) and for a
//! policy rule (`crate::policy`) alike.
//!
//! The reached rows go by an alias of their own (`_gh_r<depth>`, the join
//! rows of a many-to-many relation `_gh_j<depth>`), one per nesting level,
//! so a relation of a type to itself (`Category.children`) correlates with
//! the row it starts from and not with itself.

use gatehouse_schema::{Entity, FieldKind, Model, Quantifier, RelationKind};
use sea_query::{Alias, Expr, ExprTrait, Func, JoinType, Query, SelectStatement, UnionType};

use crate::query::{all_of, col, col_at, columns};
use crate::store::id_field;
use crate::value::{Dialect, to_sql};
use crate::{Row, StoreError};

/// The rows the to-many field of one row reaches, ready to be judged.
pub(crate) struct Reach<'m> {
    /// The relation's target entity.
    pub target: &'m Entity,
    /// The name its rows go by in the subquery.
    pub alias: String,
    /// For a many-to-many relation, the join entity and the name its rows
    /// go by.
    pub join: Option<(&'m Entity, String)>,
    /// The subquery's `FROM` (and join), correlated with the row it starts
    /// from.
    select: SelectStatement,
}

impl<'m> Reach<'m> {
    /// The rows `field` (a to-many field of `e`) reaches from the row of
    /// `e` named `at`, inside `depth` relation filters.
    pub(crate) fn of(
        model: &'m Model,
        e: &Entity,
        at: &str,
        field: &str,
        depth: usize,
    ) -> Result<Self, StoreError> {
        Self::beside(model, e, at, field, depth, &[], Dialect::Sqlite)
    }

    /// [`Reach::of`], where the rows of `gone` (entity, row as it was) of
    /// the target or join type are reached beside their table: rows
    /// deleted since, as a change event of their parent is to see them
    /// (the members of an org deleted with it, see
    /// [`crate::EntityStore::visible`]). Each stands in for itself as long
    /// as no row of its id is there again.
    pub(crate) fn beside(
        model: &'m Model,
        e: &Entity,
        at: &str,
        field: &str,
        depth: usize,
        gone: &[(&Entity, Row)],
        dialect: Dialect,
    ) -> Result<Self, StoreError> {
        let f = e
            .field(field)
            .filter(|f| matches!(f.kind, FieldKind::ToMany { .. }))
            .ok_or_else(|| {
                StoreError::invalid(field, format!("is not a to-many field of {}", e.name))
            })?;
        let relation = model
            .relation_of(f)
            .ok_or_else(|| StoreError::internal(format!("{}.{field} has no relation", e.name)))?;
        let target = model.entity_at(relation.target);
        let depth = depth + 1;
        let alias = format!("_gh_r{depth}");
        let parent_id = col_at(at, id_field(e)?);
        let mut select = Query::select();
        select.expr(Expr::cust("1"));
        match with_gone(model, target, gone, dialect)? {
            Some(rows) => select.from_subquery(rows, Alias::new(alias.clone())),
            None => select.from_as(target.table.clone(), Alias::new(alias.clone())),
        };
        let join = match relation.kind {
            RelationKind::OneToMany { inverse } => {
                let via = model.field_at(inverse);
                select.and_where(col_at(&alias, via).eq(parent_id));
                None
            }
            RelationKind::ManyToMany { through, near, far } => {
                let join = model.entity_at(through);
                let join_alias = format!("_gh_j{depth}");
                let on =
                    col_at(&join_alias, model.field_at(far)).eq(col_at(&alias, id_field(target)?));
                match with_gone(model, join, gone, dialect)? {
                    Some(rows) => select.join_subquery(
                        JoinType::InnerJoin,
                        rows,
                        Alias::new(join_alias.clone()),
                        on,
                    ),
                    None => select.join_as(
                        JoinType::InnerJoin,
                        join.table.clone(),
                        Alias::new(join_alias.clone()),
                        on,
                    ),
                };
                select.and_where(col_at(&join_alias, model.field_at(near)).eq(parent_id));
                Some((join, join_alias))
            }
            RelationKind::ManyToOne { .. } => {
                return Err(StoreError::internal(format!(
                    "{}.{field} is not a to-many relation",
                    e.name
                )));
            }
        };
        Ok(Reach {
            target,
            alias,
            join,
            select,
        })
    }

    /// The condition on the starting row: `EXISTS` (`_some`) or `NOT
    /// EXISTS` (`_none`) of a reached row that meets `guards` (which rows
    /// count at all: read policies, the row being written left out) and
    /// matches `cond`; `_every` is `NOT EXISTS` of a reached row meeting
    /// `guards` whose `cond` is not true (false or null: a comparison
    /// with null is not a match), so it holds when there is none.
    pub(crate) fn quantify(
        self,
        quantifier: Quantifier,
        guards: Vec<Expr>,
        cond: Expr,
    ) -> Result<Expr, StoreError> {
        let mut select = self.select;
        if !guards.is_empty() {
            select.and_where(all_of(guards.into_iter().map(Ok))?);
        }
        Ok(match quantifier {
            Quantifier::Some => {
                select.and_where(cond);
                Expr::exists(select)
            }
            Quantifier::None => {
                select.and_where(cond);
                Expr::not_exists(select)
            }
            Quantifier::Every => {
                select.and_where(Expr::from(Func::coalesce([cond, Expr::cust("FALSE")])).not());
                Expr::not_exists(select)
            }
        })
    }
}

impl Reach<'_> {
    /// [`Reach::quantify`] of a child rule that depends on a claim the
    /// caller lacks, given as two conditions: `lower` (true only where the
    /// rule holds whatever the claim) and `upper` (false only where it
    /// fails whatever the claim). The answer is true or false where both
    /// agree and SQL's unknown elsewhere: `_some` is true when a child
    /// meets `lower`, unknown when one meets `upper`; `_every` is false
    /// when a child fails `upper`, unknown when one fails `lower`; `_none`
    /// is the negation of `_some`. So a missing claim never matches,
    /// whatever the quantifier or a `NOT` around it.
    pub(crate) fn quantify_between(
        self,
        quantifier: Quantifier,
        guards: Vec<Expr>,
        lower: Expr,
        upper: Expr,
    ) -> Result<Expr, StoreError> {
        let mut base = self.select;
        if !guards.is_empty() {
            base.and_where(all_of(guards.into_iter().map(Ok))?);
        }
        let with = |cond: Expr| {
            let mut s = base.clone();
            s.and_where(cond);
            s
        };
        let not_true = |cond: Expr| Expr::from(Func::coalesce([cond, Expr::cust("FALSE")])).not();
        let unknown = Expr::cust("CAST(NULL AS BOOLEAN)");
        let some = || -> Expr {
            Expr::case(Expr::exists(with(lower.clone())), Expr::cust("TRUE"))
                .case(Expr::exists(with(upper.clone())), unknown.clone())
                .finally(Expr::cust("FALSE"))
                .into()
        };
        Ok(match quantifier {
            Quantifier::Some => some(),
            Quantifier::None => some().not(),
            Quantifier::Every => Expr::case(
                Expr::exists(with(not_true(upper.clone()))),
                Expr::cust("FALSE"),
            )
            .case(Expr::exists(with(not_true(lower.clone()))), unknown.clone())
            .finally(Expr::cust("TRUE"))
            .into(),
        })
    }
}

/// The rows of `t` with those of `gone` beside them (`SELECT <columns> FROM
/// t UNION ALL SELECT <values> WHERE <no row of its id>` ...), or `None`
/// when `gone` holds none of `t`'s.
fn with_gone(
    model: &Model,
    t: &Entity,
    gone: &[(&Entity, Row)],
    dialect: Dialect,
) -> Result<Option<SelectStatement>, StoreError> {
    let mut rows = gone.iter().filter(|(g, _)| g.name == t.name).peekable();
    if rows.peek().is_none() {
        return Ok(None);
    }
    let cols = columns(model, t, None)?;
    let id = id_field(t)?;
    let mut all = Query::select();
    all.from(t.table.clone());
    for c in &cols {
        all.expr_as(col(t, c.field), Alias::new(c.field.column.clone()));
    }
    let null = serde_json::Value::Null;
    for (_, row) in rows {
        let mut values = Query::select();
        let mut own_id = None;
        for c in &cols {
            let v = to_sql(dialect, &c.ty, row.get(&c.field.name).unwrap_or(&null));
            if c.field.name == id.name {
                own_id = Some(v.clone());
            }
            values.expr_as(v, Alias::new(c.field.column.clone()));
        }
        let own_id =
            own_id.ok_or_else(|| StoreError::internal(format!("{} has no id column", t.name)))?;
        let mut live = Query::select();
        live.expr(col(t, id)).from(t.table.clone());
        values.and_where(own_id.not_in_subquery(live));
        all.union(UnionType::All, values);
    }
    Ok(Some(all))
}
