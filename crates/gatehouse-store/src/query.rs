//! Filters, ordering and paging: the query vocabulary of GraphQL and REST,
//! turned into SQL expressions for one entity.

use gatehouse_schema::{
    AccessContext, Entity, Field, FieldKind, FilterOp, Model, Quantifier, ValueType,
};
use sea_query::{Expr, ExprTrait, Func, NullOrdering, Order, SelectStatement};
use serde_json::Value as Json;

use crate::StoreError;
use crate::value::{ColType, Dialect, SqlKind, check_scalar, to_sql, to_value};

/// A filter expression over one entity's fields.
///
/// Comparisons follow SQL semantics for null: a comparison with a null field
/// is not true, so `year_not: 1999` does not match rows whose `year` is null
/// (use `IsNull` for those), and neither does `NOT(year: 1999)`.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Every sub-filter holds (an empty list always holds).
    And(Vec<Filter>),
    /// At least one sub-filter holds (an empty list never holds).
    Or(Vec<Filter>),
    /// The sub-filter does not hold.
    Not(Box<Filter>),
    /// One comparison of a stored field with a value.
    Cmp {
        /// GraphQL field name (a to-one relation compares its referenced id).
        field: String,
        /// Operator.
        op: FilterOp,
        /// Operand: a value of the field's type, a list of them for `In` /
        /// `NotIn`, a Boolean for `IsNull`; `null` with `Eq` / `Not` means
        /// "is null" / "is not null".
        value: Json,
    },
    /// A condition on the rows a to-many field reaches (`tasks_some`),
    /// many-to-many included: ONE `EXISTS` subquery in the statement,
    /// never a query per row. Only rows the caller may read are reached,
    /// and comparing their fields needs the same scopes as anywhere.
    Related {
        /// The to-many field of this entity.
        field: String,
        /// How the reached rows are judged.
        quantifier: Quantifier,
        /// What a reached row must match (`Filter::And(vec![])`: any row).
        filter: Box<Filter>,
    },
}

impl Filter {
    /// Calls `f` with the name of every field of this entity this filter
    /// compares; a relation filter names its to-many field (the fields of
    /// the rows it reaches are another entity's).
    pub fn for_each_field<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Filter::And(all) | Filter::Or(all) => {
                for sub in all {
                    sub.for_each_field(f);
                }
            }
            Filter::Not(sub) => sub.for_each_field(f),
            Filter::Cmp { field, .. } | Filter::Related { field, .. } => f(field),
        }
    }

    /// Whether the filter goes through a to-many relation anywhere.
    pub fn has_related(&self) -> bool {
        match self {
            Filter::And(all) | Filter::Or(all) => all.iter().any(Filter::has_related),
            Filter::Not(sub) => sub.has_related(),
            Filter::Cmp { .. } => false,
            Filter::Related { .. } => true,
        }
    }

    /// A comparison (shorthand for [`Filter::Cmp`]).
    pub fn cmp(field: impl Into<String>, op: FilterOp, value: impl Into<Json>) -> Filter {
        Filter::Cmp {
            field: field.into(),
            op,
            value: value.into(),
        }
    }

    /// Equality (shorthand for [`Filter::Cmp`] with [`FilterOp::Eq`]).
    pub fn eq(field: impl Into<String>, value: impl Into<Json>) -> Filter {
        Filter::cmp(field, FilterOp::Eq, value)
    }

    /// The conjunction of `all`: none for an empty list, the filter itself
    /// for one.
    pub fn all_of(mut all: Vec<Filter>) -> Option<Filter> {
        match all.len() {
            0 => None,
            1 => all.pop(),
            _ => Some(Filter::And(all)),
        }
    }
}

/// One ordering key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderBy {
    /// GraphQL field name of a stored, non-list field.
    pub field: String,
    /// Descending. Nulls sort as the largest value: last ascending, first descending.
    pub desc: bool,
}

impl OrderBy {
    /// Ascending on `field`.
    pub fn asc(field: impl Into<String>) -> Self {
        OrderBy {
            field: field.into(),
            desc: false,
        }
    }

    /// Descending on `field`.
    pub fn desc(field: impl Into<String>) -> Self {
        OrderBy {
            field: field.into(),
            desc: true,
        }
    }
}

/// What to list: filter, order, page and selected fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    /// Rows must match this filter.
    pub filter: Option<Filter>,
    /// Ordering keys; `id` ascending is always added as the final tie-breaker.
    pub order: Vec<OrderBy>,
    /// At most this many rows (`None`: no limit; the API layers enforce their page sizes).
    pub limit: Option<u64>,
    /// Rows to skip.
    pub offset: u64,
    /// Fields to return (`None`: every stored field). `id` is always returned.
    pub select: Option<Vec<String>>,
    /// To-one relations read in the same statement
    /// ([`crate::EntityStore::list`]; not by `children`).
    pub joins: Vec<JoinOne>,
    /// Keyset bound: only rows strictly after this position of `order`
    /// (its keys' values, the `id` tie-breaker last, as a cursor holds
    /// them: [`crate::Cursor`]). Not by `children`.
    pub after: Option<Vec<Json>>,
    /// Keyset bound: only rows strictly before this position of `order`.
    pub before: Option<Vec<Json>>,
    /// Read `order` backwards (the last rows of a list first); the bounds
    /// keep their meaning. Not by `children`.
    pub reverse: bool,
}

/// A to-one relation read in the same statement as the rows that refer to
/// it ([`crate::EntityStore::list`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JoinOne {
    /// The to-one field of the listed entity.
    pub field: String,
    /// The target's fields to read; `id` is always read, first.
    pub select: Vec<String>,
}

/// A stored field with its column type, resolved against the Model.
#[derive(Debug, Clone)]
pub(crate) struct Col<'m> {
    pub field: &'m Field,
    pub ty: ColType,
}

impl Col<'_> {
    pub fn kind(&self) -> SqlKind {
        self.ty.kind()
    }
}

/// The stored fields of `entity`, or the selected ones (with `id` first).
pub(crate) fn columns<'m>(
    model: &'m Model,
    entity: &'m Entity,
    select: Option<&[String]>,
) -> Result<Vec<Col<'m>>, StoreError> {
    let mut cols = Vec::new();
    match select {
        None => {
            for f in entity.stored_fields() {
                if let Some(ty) = ColType::of(model, f) {
                    cols.push(Col { field: f, ty });
                }
            }
        }
        Some(names) => {
            cols.push(Col {
                field: entity.field("id").ok_or_else(|| {
                    StoreError::internal(format!("entity {} has no id", entity.name))
                })?,
                ty: ColType::Id,
            });
            for name in names {
                if name == "id" || cols.iter().any(|c| c.field.name == *name) {
                    continue;
                }
                let f = stored_field(entity, name)?;
                if let Some(ty) = ColType::of(model, f) {
                    cols.push(Col { field: f, ty });
                }
            }
        }
    }
    Ok(cols)
}

/// The stored field `name` of `entity`, or an Invalid error naming it.
pub(crate) fn stored_field<'m>(entity: &'m Entity, name: &str) -> Result<&'m Field, StoreError> {
    match entity.field(name) {
        Some(f) if f.is_stored() => Ok(f),
        Some(_) => Err(StoreError::invalid(
            name,
            format!("is a relation list of {}, not a stored field", entity.name),
        )),
        None => Err(StoreError::invalid(
            name,
            format!("{} has no field `{name}`", entity.name),
        )),
    }
}

/// A column reference qualified by the entity's table.
pub(crate) fn col(entity: &Entity, field: &Field) -> Expr {
    col_at(&entity.table, field)
}

/// A column reference qualified by `at`: the table, or the alias a row
/// goes by inside a relation filter's subquery.
pub(crate) fn col_at(at: &str, field: &Field) -> Expr {
    Expr::col((at.to_string(), field.column.clone()))
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Most values one `_in` / `_not_in` list may hold.
pub(crate) const MAX_IN_VALUES: usize = 1000;

/// Most values one filter may compare with, all its lists together
/// (SQLite binds at most 32,766 values in one statement).
pub(crate) const MAX_FILTER_VALUES: usize = 5000;

/// Builds the SQL condition for `filter` on `entity`, a caller's filter:
/// a relation filter reaches only the rows `ctx` may read. A list longer
/// than [`MAX_IN_VALUES`], or lists holding more than
/// [`MAX_FILTER_VALUES`] together, are [`StoreError::Invalid`] (a user's
/// mistake, not the database's "too many SQL variables").
pub(crate) fn condition(
    model: &Model,
    entity: &Entity,
    dialect: Dialect,
    filter: &Filter,
    ctx: &AccessContext,
) -> Result<Expr, StoreError> {
    let mut walk = Walk {
        model,
        dialect,
        ctx,
        budget: MAX_FILTER_VALUES,
    };
    walk.condition(entity, &entity.table, 0, filter)
}

/// A caller's filter being turned into SQL.
struct Walk<'a> {
    model: &'a Model,
    dialect: Dialect,
    ctx: &'a AccessContext,
    /// The values comparisons may still bind.
    budget: usize,
}

impl Walk<'_> {
    /// The condition on the row of `entity` named `at`, inside `depth`
    /// relation filters.
    fn condition(
        &mut self,
        entity: &Entity,
        at: &str,
        depth: usize,
        filter: &Filter,
    ) -> Result<Expr, StoreError> {
        let (model, dialect) = (self.model, self.dialect);
        Ok(match filter {
            Filter::And(parts) => {
                let mut out = Vec::with_capacity(parts.len());
                for p in parts {
                    out.push(self.condition(entity, at, depth, p));
                }
                all_of(out.into_iter())?
            }
            Filter::Or(parts) => {
                let mut out = Vec::with_capacity(parts.len());
                for p in parts {
                    out.push(self.condition(entity, at, depth, p));
                }
                any_of(out.into_iter())?
            }
            Filter::Not(inner) => self.condition(entity, at, depth, inner)?.not(),
            Filter::Related {
                field,
                quantifier,
                filter,
            } => {
                let reach = crate::related::Reach::of(model, entity, at, field, depth)?;
                let inner = self.condition(reach.target, &reach.alias, depth + 1, filter)?;
                // Only rows the caller may read are reached, and only
                // through join rows it may read.
                let mut guards = Vec::new();
                if let Some((join, alias)) = &reach.join
                    && let Some(c) = crate::policy::condition_at(
                        model,
                        join,
                        alias,
                        depth + 1,
                        dialect,
                        gatehouse_schema::Action::Read,
                        self.ctx,
                    )?
                {
                    guards.push(c);
                }
                if let Some(c) = crate::policy::condition_at(
                    model,
                    reach.target,
                    &reach.alias,
                    depth + 1,
                    dialect,
                    gatehouse_schema::Action::Read,
                    self.ctx,
                )? {
                    guards.push(c);
                }
                reach.quantify(*quantifier, guards, inner)?
            }
            Filter::Cmp { field, op, value } => self.comparison(entity, at, field, *op, value)?,
        })
    }

    /// One comparison, its values taken from the budget.
    fn comparison(
        &mut self,
        entity: &Entity,
        at: &str,
        field: &str,
        op: FilterOp,
        value: &Json,
    ) -> Result<Expr, StoreError> {
        let values = match value {
            Json::Array(items) => items.len(),
            _ => 1,
        };
        if values > MAX_IN_VALUES {
            return Err(StoreError::invalid(
                format!("{field}{}", op.suffix()),
                format!("{values} values given; a list may hold at most {MAX_IN_VALUES}"),
            ));
        }
        self.budget = self.budget.checked_sub(values).ok_or_else(|| {
            StoreError::invalid(
                format!("{field}{}", op.suffix()),
                format!("the filter compares with more than {MAX_FILTER_VALUES} values in all"),
            )
        })?;
        comparison(self.model, entity, at, self.dialect, field, op, value)
    }
}

/// The conjunction of `parts` (true when there are none).
pub(crate) fn all_of(
    parts: impl Iterator<Item = Result<Expr, StoreError>>,
) -> Result<Expr, StoreError> {
    fold(parts, ExprTrait::and, always_true)
}

/// The disjunction of `parts` (false when there are none).
pub(crate) fn any_of(
    parts: impl Iterator<Item = Result<Expr, StoreError>>,
) -> Result<Expr, StoreError> {
    fold(parts, ExprTrait::or, always_false)
}

/// `parts` joined by `join` as a balanced tree, in their order; `empty()`
/// when there are none. A chain `a OR b OR c ...` would be an expression
/// as deep as it is long: SQLite refuses one deeper than 1,000 ("Expression
/// tree is too large") and writing or dropping it recurses once per term.
/// Balanced, `n` terms nest about log2(n) deep (a 5,000-term `OR` 14),
/// however the filter is written; the SQL keeps the parentheses that make
/// the database parse the same tree.
fn fold(
    parts: impl Iterator<Item = Result<Expr, StoreError>>,
    join: fn(Expr, Expr) -> Expr,
    empty: fn() -> Expr,
) -> Result<Expr, StoreError> {
    let mut level = parts.collect::<Result<Vec<Expr>, StoreError>>()?;
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        let mut terms = level.into_iter();
        while let Some(a) = terms.next() {
            next.push(match terms.next() {
                Some(b) => join(a, b),
                None => a,
            });
        }
        level = next;
    }
    Ok(level.pop().unwrap_or_else(empty))
}

pub(crate) fn always_true() -> Expr {
    Expr::cust("1 = 1")
}

pub(crate) fn always_false() -> Expr {
    Expr::cust("1 = 0")
}

/// A comparison of field `name` of the row of `entity` named `at`.
pub(crate) fn comparison(
    model: &Model,
    entity: &Entity,
    at: &str,
    dialect: Dialect,
    name: &str,
    op: FilterOp,
    value: &Json,
) -> Result<Expr, StoreError> {
    let field = stored_field(entity, name)?;
    let ty =
        ColType::of(model, field).ok_or_else(|| StoreError::invalid(name, "cannot be filtered"))?;
    let elem = field
        .filter_type()
        .ok_or_else(|| StoreError::invalid(name, "cannot be filtered"))?;
    let c = col_at(at, field);
    let arg = format!("{name}{}", op.suffix());
    if field.check_filter_op(op).is_err() {
        return Err(StoreError::invalid(
            &arg,
            format!(
                "the `{}` operator does not apply to {} fields",
                op.label(),
                ty
            ),
        ));
    }

    if op == FilterOp::IsNull {
        return match value {
            Json::Bool(true) => Ok(c.is_null()),
            Json::Bool(false) => Ok(c.is_not_null()),
            other => Err(StoreError::invalid(
                &arg,
                format!("expected a Boolean, got {other}"),
            )),
        };
    }
    if field.is_list() {
        // `_contains`, the one other operator a list takes: an element.
        let v = check_scalar(model, &arg, &elem, value)?;
        return Ok(match dialect {
            Dialect::Sqlite => Expr::cust_with_values(
                format!(
                    "EXISTS (SELECT 1 FROM json_each({}.{}) WHERE json_each.value = ?)",
                    quoted(at),
                    quoted(&field.column)
                ),
                [scalar_value(dialect, &elem, &v)],
            ),
            Dialect::Postgres => Expr::cust_with_exprs(
                "$1 @> $2",
                [
                    c,
                    Expr::val(sea_query::Value::Json(Some(Box::new(Json::Array(vec![v]))))),
                ],
            ),
        });
    }

    let one = |v: &Json| -> Result<Expr, StoreError> {
        let v = check_scalar(model, &arg, &elem, v)?;
        Ok(to_sql(dialect, &ty, &v))
    };
    Ok(match op {
        FilterOp::Eq if value.is_null() => c.is_null(),
        FilterOp::Not if value.is_null() => c.is_not_null(),
        FilterOp::Eq => c.eq(one(value)?),
        FilterOp::Not => c.ne(one(value)?),
        FilterOp::In | FilterOp::NotIn => {
            let Json::Array(items) = value else {
                return Err(StoreError::invalid(&arg, "expected a list"));
            };
            if items.is_empty() {
                return Ok(if op == FilterOp::In {
                    always_false()
                } else {
                    always_true()
                });
            }
            let exprs = items.iter().map(one).collect::<Result<Vec<_>, _>>()?;
            if op == FilterOp::In {
                c.is_in(exprs)
            } else {
                c.is_not_in(exprs)
            }
        }
        FilterOp::Lt | FilterOp::Lte | FilterOp::Gt | FilterOp::Gte => {
            let v = one(value)?;
            match op {
                FilterOp::Lt => c.lt(v),
                FilterOp::Lte => c.lte(v),
                FilterOp::Gt => c.gt(v),
                _ => c.gte(v),
            }
        }
        FilterOp::Contains | FilterOp::StartsWith | FilterOp::EndsWith => {
            // Functions rather than LIKE: no wildcard escaping, and the same
            // case-sensitive semantics on both backends.
            let v = check_scalar(model, &arg, &elem, value)?;
            let p = || Expr::val(to_value(dialect, &ty, &v));
            // (sea-query's `cust_with_exprs` leaves `$n` unreplaced for SQLite:
            // plain function calls are used instead.)
            let f = |name: &'static str, args: Vec<Expr>| Expr::from(Func::cust(name).args(args));
            let len = |e: Expr| f("length", vec![e]);
            match (op, dialect) {
                (FilterOp::Contains, Dialect::Sqlite) => f("instr", vec![c, p()]).gt(0),
                (FilterOp::Contains, Dialect::Postgres) => f("strpos", vec![c, p()]).gt(0),
                (FilterOp::StartsWith, Dialect::Sqlite) => {
                    f("substr", vec![c, Expr::val(1), len(p())]).eq(p())
                }
                (FilterOp::StartsWith, Dialect::Postgres) => f("left", vec![c, len(p())]).eq(p()),
                // substr(c, length(c) - length(v) + 1) = v
                (_, Dialect::Sqlite) => {
                    f("substr", vec![c.clone(), len(c).sub(len(p())).add(1)]).eq(p())
                }
                (_, Dialect::Postgres) => f("right", vec![c, len(p())]).eq(p()),
            }
        }
        FilterOp::IEq | FilterOp::IContains | FilterOp::IStartsWith | FilterOp::IEndsWith => {
            // Both sides folded by the database, the same way on both
            // backends (`gatehouse_db::fold_case`); functions, not LIKE, so
            // `%`, `_` and `\` in the value are plain characters.
            let v = check_scalar(model, &arg, &elem, value)?;
            let p = || fold_case(dialect, Expr::val(to_value(dialect, &ty, &v)));
            let c = fold_case(dialect, c);
            let f = |name: &'static str, args: Vec<Expr>| Expr::from(Func::cust(name).args(args));
            let len = |e: Expr| f("length", vec![e]);
            match (op, dialect) {
                (FilterOp::IEq, _) => c.eq(p()),
                (FilterOp::IContains, Dialect::Sqlite) => f("instr", vec![c, p()]).gt(0),
                (FilterOp::IContains, Dialect::Postgres) => f("strpos", vec![c, p()]).gt(0),
                (FilterOp::IStartsWith, Dialect::Sqlite) => {
                    f("substr", vec![c, Expr::val(1), len(p())]).eq(p())
                }
                (FilterOp::IStartsWith, Dialect::Postgres) => f("left", vec![c, len(p())]).eq(p()),
                (_, Dialect::Sqlite) => {
                    f("substr", vec![c.clone(), len(c).sub(len(p())).add(1)]).eq(p())
                }
                (_, Dialect::Postgres) => f("right", vec![c, len(p())]).eq(p()),
            }
        }
        FilterOp::IsNull => unreachable_is_null(),
    })
}

/// `e` case-folded ([`gatehouse_db::fold_case`]): the registered function
/// on SQLite, `lower()` under the `C.utf8` collation on PostgreSQL (text
/// columns are `COLLATE "C"`, under which `lower()` folds ASCII only).
fn fold_case(dialect: Dialect, e: Expr) -> Expr {
    match dialect {
        Dialect::Sqlite => Expr::from(Func::cust(gatehouse_db::FOLD_FUNCTION).arg(e)),
        Dialect::Postgres => Expr::cust_with_exprs("lower($1 COLLATE \"C.utf8\")", [e]),
    }
}

#[allow(clippy::missing_const_for_fn)]
fn unreachable_is_null() -> Expr {
    // IsNull returns early above; kept total without a panic.
    always_false()
}

fn scalar_value(dialect: Dialect, ty: &ValueType, v: &Json) -> sea_query::Value {
    to_value(dialect, &ColType::of_value(ty), v)
}

/// The keys a list is ordered by: each field with whether it descends,
/// ending with the id (ascending unless `order` names it), so that every
/// row has its own position. Keys after the id would order nothing and are
/// left out.
pub(crate) fn order_keys<'m>(
    entity: &'m Entity,
    order: &[OrderBy],
) -> Result<Vec<(&'m Field, bool)>, StoreError> {
    let mut out = Vec::with_capacity(order.len() + 1);
    let mut has_id = false;
    for o in order {
        let f = stored_field(entity, &o.field)?;
        if !f.is_orderable() {
            return Err(StoreError::invalid(
                &o.field,
                "a list field cannot be ordered on",
            ));
        }
        has_id |= matches!(f.kind, FieldKind::Id);
        out.push((f, o.desc));
        if has_id {
            break;
        }
    }
    if !has_id {
        out.push((stored_field(entity, "id")?, false));
    }
    Ok(out)
}

/// The ordering expressions (with the id tie-breaker) as (expr, order,
/// nulls). Nulls sort as the largest value, so reading the order backwards
/// flips both.
pub(crate) fn ordering(
    entity: &Entity,
    order: &[OrderBy],
) -> Result<Vec<(Expr, Order, NullOrdering)>, StoreError> {
    Ok(order_keys(entity, order)?
        .into_iter()
        .map(|(f, desc)| {
            let (ord, nulls) = if desc {
                (Order::Desc, NullOrdering::First)
            } else {
                (Order::Asc, NullOrdering::Last)
            };
            (col(entity, f), ord, nulls)
        })
        .collect())
}

/// Applies `ordering` to a select, backwards when `reverse`.
pub(crate) fn apply_order(
    select: &mut SelectStatement,
    entity: &Entity,
    order: &[OrderBy],
    reverse: bool,
) -> Result<(), StoreError> {
    for (expr, ord, nulls) in ordering(entity, order)? {
        let (ord, nulls) = match (reverse, ord) {
            (false, ord) => (ord, nulls),
            (true, Order::Desc) => (Order::Asc, NullOrdering::Last),
            (true, _) => (Order::Desc, NullOrdering::First),
        };
        select.order_by_expr_with_nulls(expr, ord, nulls);
    }
    Ok(())
}

/// The rows strictly after (`forward`) or before the position `values`
/// holds in `order` ([`order_keys`]): the keyset condition
/// `(k1, k2, id) > (v1, v2, vid)`, written out as
/// `k1 > v1 OR (k1 = v1 AND (k2 > v2 OR (k2 = v2 AND id > vid)))` so that
/// each key may run its own direction, with nulls as the largest value (as
/// [`ordering`] sorts them): beyond a value `v` towards larger values lie
/// `k > v OR k IS NULL`, beyond a null nothing; towards smaller values lie
/// `k < v`, and beyond a null every non-null. A required field's clause
/// leaves the null test out. `arg` names the cursor in errors.
pub(crate) fn keyset(
    model: &Model,
    entity: &Entity,
    dialect: Dialect,
    order: &[OrderBy],
    values: &[Json],
    forward: bool,
    arg: &str,
) -> Result<Expr, StoreError> {
    let keys = order_keys(entity, order)?;
    if keys.len() != values.len() {
        return Err(StoreError::invalid(
            arg,
            "the cursor belongs to another order of this list",
        ));
    }
    // (equal, beyond) conditions per key.
    let mut parts = Vec::with_capacity(keys.len());
    for ((f, desc), v) in keys.iter().zip(values) {
        let c = col(entity, f);
        let ty = ColType::of(model, f).ok_or_else(|| StoreError::invalid(arg, "not a cursor"))?;
        let elem = f
            .filter_type()
            .ok_or_else(|| StoreError::invalid(arg, "not a cursor"))?;
        // Towards larger values (nulls last) or smaller ones.
        let larger = forward != *desc;
        if v.is_null() {
            if f.required {
                return Err(StoreError::invalid(arg, "not a cursor of this list"));
            }
            let beyond = if larger {
                always_false()
            } else {
                c.clone().is_not_null()
            };
            parts.push((c.is_null(), beyond));
            continue;
        }
        let v = check_scalar(model, arg, &elem, v)
            .map_err(|_| StoreError::invalid(arg, "not a cursor of this list"))?;
        let v = to_sql(dialect, &ty, &v);
        let beyond = match (larger, f.required) {
            (true, true) => c.clone().gt(v.clone()),
            (true, false) => c.clone().gt(v.clone()).or(c.clone().is_null()),
            (false, _) => c.clone().lt(v.clone()),
        };
        parts.push((c.eq(v), beyond));
    }
    // Built from the last key outwards: beyond_i OR (equal_i AND rest).
    let mut parts = parts.into_iter().rev();
    let Some((_, mut out)) = parts.next() else {
        return Ok(always_true());
    };
    for (equal, beyond) in parts {
        out = beyond.or(equal.and(out));
    }
    Ok(out)
}
