//! From GraphQL argument values to store queries, following the bindings the
//! schema loader decided (nothing here looks at argument names on its own).

use async_graphql::dynamic::ObjectAccessor;
use async_graphql::{Error, Name, Value};
use async_graphql_value::Value as InputValue;
use gatehouse_schema::{
    ConnectionBinding, Entity, Field, FieldKind, Filter as ModelFilter, FilterOp, ListBinding,
    Model, ValueType,
};
use gatehouse_store::{Filter, ListQuery, OrderBy, PageRequest, Row};
use serde_json::Value as Json;

use crate::error::{Code, coded};

/// A field's argument values, by name: what async-graphql hands a resolver,
/// or what the planned executor resolved itself (`crate::plan`).
pub trait Args {
    /// The value of argument `name`, when given or defaulted.
    fn arg(&self, name: &str) -> Option<&Value>;
}

impl Args for ObjectAccessor<'_> {
    fn arg(&self, name: &str) -> Option<&Value> {
        self.get(name).map(|v| v.as_value())
    }
}

impl Args for [(async_graphql::Name, Value)] {
    fn arg(&self, name: &str) -> Option<&Value> {
        self.iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v)
    }
}

/// A field's argument values as GraphQL's input coercion gives them
/// (GraphQL spec §6.4.1 CoerceArgumentValues, §3.10 input objects): the
/// arguments as `written`, each variable replaced by its value. An argument
/// or input-object field whose value is a variable the request did not send
/// and that declares no default is left out, not set to null: a write then
/// leaves that field as it is, and a filter does not compare it (an explicit
/// `null` stays null). A variable inside a list that was not sent is a null
/// item (§3.11). Then the arguments still absent take their `declared`
/// defaults. `variable` answers a variable's value: as sent, else its
/// declared default, else `None`.
///
/// Both executors read arguments through this (async-graphql's own argument
/// values turn an unsent nullable variable into null). The recursion follows
/// the literal as written, whose depth the request's input limit bounds
/// ([`crate::input::MAX_INPUT_DEPTH`]); variables' values are taken whole.
pub fn coerce_args<'w>(
    written: impl IntoIterator<Item = (&'w Name, &'w InputValue)>,
    declared: &[gatehouse_schema::InputValue],
    variable: impl Fn(&Name) -> Option<Value>,
) -> Vec<(Name, Value)> {
    fn coerce(v: &InputValue, variable: &dyn Fn(&Name) -> Option<Value>) -> Option<Value> {
        Some(match v {
            InputValue::Variable(name) => return variable(name),
            InputValue::Null => Value::Null,
            InputValue::Number(n) => Value::Number(n.clone()),
            InputValue::String(s) => Value::String(s.clone()),
            InputValue::Boolean(b) => Value::Boolean(*b),
            InputValue::Binary(b) => Value::Binary(b.clone()),
            InputValue::Enum(e) => Value::Enum(e.clone()),
            InputValue::List(items) => Value::List(
                items
                    .iter()
                    .map(|i| coerce(i, variable).unwrap_or(Value::Null))
                    .collect(),
            ),
            InputValue::Object(fields) => Value::Object(
                fields
                    .iter()
                    .filter_map(|(k, v)| coerce(v, variable).map(|v| (k.clone(), v)))
                    .collect(),
            ),
        })
    }
    let mut out: Vec<(Name, Value)> = written
        .into_iter()
        .filter_map(|(name, v)| coerce(v, &variable).map(|v| (name.clone(), v)))
        .collect();
    for d in declared {
        if let Some(default) = &d.default
            && !out.iter().any(|(n, _)| n.as_str() == d.name)
        {
            out.push((Name::new(&d.name), crate::build::const_value(default)));
        }
    }
    out
}

/// Page-size limits.
#[derive(Debug, Clone, Copy)]
pub struct PageLimits {
    /// Used when no count argument is given.
    pub default: u32,
    /// A count above this is an error.
    pub max: u32,
}

/// A GraphQL input value as JSON (enum values become their names).
pub fn to_json(v: &Value) -> Json {
    v.clone().into_json().unwrap_or(Json::Null)
}

/// A stored JSON value as a GraphQL output value for `field`.
pub fn to_graphql(field: &Field, v: &Json) -> Value {
    let is_enum = matches!(
        &field.kind,
        FieldKind::Value {
            ty: ValueType::Enum(_),
            ..
        }
    );
    json_out(v, is_enum)
}

fn json_out(v: &Json, is_enum: bool) -> Value {
    match v {
        Json::String(s) if is_enum => Value::Enum(async_graphql::Name::new(s)),
        Json::Array(items) => Value::List(items.iter().map(|i| json_out(i, is_enum)).collect()),
        // Direct conversions: `Value::from_json` goes through serde.
        Json::String(s) => Value::String(s.clone()),
        Json::Number(n) => Value::Number(n.clone()),
        Json::Bool(b) => Value::Boolean(*b),
        Json::Null => Value::Null,
        other => Value::from_json(other.clone()).unwrap_or(Value::Null),
    }
}

/// The filter expressed by `filters` and the `where` argument.
pub fn filter_from_args(
    model: &Model,
    args: &(impl Args + ?Sized),
    filters: &[ModelFilter],
    where_arg: Option<&gatehouse_schema::ArgOfType>,
) -> Result<Option<Filter>, Error> {
    let mut all = Vec::new();
    for f in filters {
        if let Some(v) = args.arg(&f.arg)
            && let Some(cmp) = cmp(f, v)
        {
            all.push(cmp);
        }
    }
    if let Some(w) = where_arg
        && let Some(v) = args.arg(&w.arg)
        && let Some(f) = where_filter(model, &w.type_name, v)?
    {
        all.push(f);
    }
    Ok(Filter::all_of(all))
}

/// One comparison; `None` when the value means "no filter".
fn cmp(f: &ModelFilter, v: &Value) -> Option<Filter> {
    let mut json = to_json(v);
    if json.is_null() && !matches!(f.op, FilterOp::Eq | FilterOp::Not) {
        // `year_gt: null` compares with nothing: the filter is not applied.
        return None;
    }
    if matches!(f.op, FilterOp::In | FilterOp::NotIn) && !json.is_array() {
        // GraphQL input coercion (spec §3.11): a single value stands for a
        // list of one (`status_in: LOST`).
        json = Json::Array(vec![json]);
    }
    // `author: null` means "has no author", `author_not: null` "has one".
    Some(Filter::cmp(f.field.clone(), f.op, json))
}

/// `v` with the declared defaults of input object `type_name` filled in for
/// the fields it leaves out, at every depth (GraphQL spec §3.10 input
/// coercion: a field absent from the literal or variable takes its default;
/// an explicit `null` stays null). Anything that is not an object of a
/// known input type is returned as it is.
///
/// One pass, each value copied once: the cost is linear in the size of `v`
/// (its depth is bounded by [`crate::input::MAX_INPUT_DEPTH`]).
pub fn with_input_defaults(model: &Model, type_name: &str, v: &Value) -> Value {
    let (Value::Object(given), Some(input)) = (v, model.input(type_name)) else {
        return v.clone();
    };
    let mut out = async_graphql::indexmap::IndexMap::with_capacity(given.len());
    for (name, value) in given {
        let inner = input
            .fields
            .iter()
            .find(|f| f.name == name.as_str())
            .map(|f| f.ty.base_name());
        let value = match (inner, value) {
            (Some(inner), Value::List(items)) => Value::List(
                items
                    .iter()
                    .map(|item| with_input_defaults(model, inner, item))
                    .collect(),
            ),
            (Some(inner), value) => with_input_defaults(model, inner, value),
            (None, value) => value.clone(),
        };
        out.insert(name.clone(), value);
    }
    for field in &input.fields {
        let name = async_graphql::Name::new(&field.name);
        if !out.contains_key(&name)
            && let Some(default) = &field.default
        {
            let value = crate::build::const_value(default);
            let value = with_input_defaults(model, field.ty.base_name(), &value);
            out.insert(name, value);
        }
    }
    Value::Object(out)
}

/// The filter a `where` value of input type `type_name` expresses. Its
/// defaults are filled in once, for the whole value ([`with_input_defaults`]),
/// and then each level is turned into a filter once: linear in its size.
fn where_filter(model: &Model, type_name: &str, v: &Value) -> Result<Option<Filter>, Error> {
    where_filter_of(model, type_name, &with_input_defaults(model, type_name, v))
}

/// [`where_filter`] of a value whose defaults are filled in. It recurses
/// once per level of `v`, whose depth the request's input limit bounds
/// ([`crate::input::MAX_INPUT_DEPTH`]).
fn where_filter_of(model: &Model, type_name: &str, v: &Value) -> Result<Option<Filter>, Error> {
    let fields = match v {
        Value::Object(fields) => fields,
        Value::Null => return Ok(None),
        // A variable's value is not always checked against the input type
        // before it gets here: refuse it rather than filter nothing.
        _ => {
            return Err(coded(
                Code::BadUserInput,
                format!("a `{type_name}` filter must be an object"),
            ));
        }
    };
    let Some(w) = model.where_input(type_name) else {
        return Ok(None);
    };
    let mut all = Vec::new();
    for (name, value) in fields {
        let name = name.as_str();
        if w.and.as_deref() == Some(name) || w.or.as_deref() == Some(name) {
            // A single value stands for a list of one (spec §3.11);
            // `AND: null` applies nothing.
            let items = match value {
                Value::List(items) => items.as_slice(),
                Value::Null => continue,
                one => std::slice::from_ref(one),
            };
            let mut subs = Vec::with_capacity(items.len());
            for item in items {
                subs.push(where_filter_of(model, type_name, item)?.unwrap_or(Filter::And(vec![])));
            }
            all.push(if w.and.as_deref() == Some(name) {
                Filter::And(subs)
            } else {
                Filter::Or(subs)
            });
        } else if w.not.as_deref() == Some(name) {
            if let Some(inner) = where_filter_of(model, type_name, value)? {
                all.push(Filter::Not(Box::new(inner)));
            }
        } else if let Some(f) = w.filters.iter().find(|f| f.arg == name)
            && let Some(c) = cmp(f, value)
        {
            all.push(c);
        } else if let Some(r) = w.relations.iter().find(|r| r.arg == name) {
            // `tasks_some: null` applies nothing; `{}` matches any row.
            if matches!(value, Value::Null) {
                continue;
            }
            let inner = where_filter_of(model, &r.input, value)?.unwrap_or(Filter::And(vec![]));
            all.push(Filter::Related {
                field: r.field.clone(),
                quantifier: r.quantifier,
                filter: Box::new(inner),
            });
        }
    }
    Ok(Filter::all_of(all))
}

/// A list query from a list binding's arguments.
pub fn list_query(
    model: &Model,
    args: &(impl Args + ?Sized),
    list: &ListBinding,
    limits: PageLimits,
    select: Option<Vec<String>>,
) -> Result<ListQuery, Error> {
    let mut q = ListQuery {
        filter: filter_from_args(model, args, &list.filters, list.where_arg.as_ref())?,
        select,
        ..ListQuery::default()
    };
    q.limit =
        Some(page_size(args, list.count.as_deref(), limits)?.unwrap_or(u64::from(limits.default)));
    if let Some(name) = &list.offset
        && let Some(v) = args.arg(name)
        && let Some(n) = to_json(v).as_i64()
    {
        if n < 0 {
            return Err(coded(
                Code::BadUserInput,
                format!("`{name}` must not be negative"),
            ));
        }
        q.offset = n as u64;
    }
    if let Some(order) = &list.order_by
        && let Some(v) = args.arg(&order.arg)
        && let Some(e) = model.order_enum(&order.type_name)
    {
        let values: Vec<Value> = match v {
            Value::List(items) => items.clone(),
            Value::Null => Vec::new(),
            one => vec![one.clone()],
        };
        for value in values {
            // A variable's enum value arrives as the JSON string it was sent as.
            let name = match &value {
                Value::Enum(name) => name.as_str(),
                Value::String(name) => name.as_str(),
                _ => continue,
            };
            if let Some(ov) = e.values.iter().find(|ov| ov.value == name) {
                q.order.push(if ov.desc {
                    OrderBy::desc(ov.field.clone())
                } else {
                    OrderBy::asc(ov.field.clone())
                });
            }
        }
    }
    Ok(q)
}

/// The value of the count argument `name` (`first`, `last`, ...): `None`
/// when it is not declared, not given or null; refused when negative, and
/// with `PAGE_SIZE_EXCEEDED` above the maximum page size.
fn page_size(
    args: &(impl Args + ?Sized),
    name: Option<&str>,
    limits: PageLimits,
) -> Result<Option<u64>, Error> {
    let Some((name, v)) = name.and_then(|n| args.arg(n).map(|v| (n, v))) else {
        return Ok(None);
    };
    let j = to_json(v);
    if j.is_null() {
        return Ok(None);
    }
    let n = j.as_i64().unwrap_or(-1);
    if n < 0 {
        return Err(coded(
            Code::BadUserInput,
            format!("`{name}` must not be negative"),
        ));
    }
    if n > i64::from(limits.max) {
        return Err(coded(
            Code::PageSizeExceeded,
            format!(
                "`{name}` is {n}, above the maximum page size of {}",
                limits.max
            ),
        ));
    }
    Ok(Some(n as u64))
}

/// The query and the page a connection field's arguments ask for: the
/// list's filters and order, `first`/`after` or `last`/`before` (the
/// default page size forwards when neither count is given).
pub fn connection_query(
    model: &Model,
    args: &(impl Args + ?Sized),
    c: &ConnectionBinding,
    limits: PageLimits,
    select: Option<Vec<String>>,
) -> Result<(ListQuery, PageRequest), Error> {
    let mut q = list_query(model, args, &c.list, limits, select)?;
    q.limit = None;
    let text = |name: &Option<String>| -> Option<String> {
        name.as_deref()
            .and_then(|n| args.arg(n))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
    };
    let mut page = PageRequest {
        first: page_size(args, c.list.count.as_deref(), limits)?,
        after: text(&c.after),
        last: page_size(args, c.last.as_deref(), limits)?,
        before: text(&c.before),
    };
    if page.first.is_none() && page.last.is_none() {
        page.first = Some(u64::from(limits.default));
    }
    Ok((q, page))
}

/// The entity fields set by a create/update, from its arguments.
/// Input-object fields left out take their declared defaults.
pub fn write_row(
    model: &Model,
    args: &(impl Args + ?Sized),
    input: &gatehouse_schema::WriteInput,
) -> Row {
    let mut row = Row::new();
    match input {
        gatehouse_schema::WriteInput::Object { arg, type_name, .. } => {
            if let Some(v) = args.arg(arg)
                && let Value::Object(fields) = with_input_defaults(model, type_name, v)
            {
                for (k, v) in fields {
                    row.insert(k.to_string(), to_json(&v));
                }
            }
        }
        gatehouse_schema::WriteInput::Args { fields } => {
            for f in fields {
                if let Some(v) = args.arg(f) {
                    row.insert(f.clone(), to_json(v));
                }
            }
        }
    }
    row
}

/// Stored fields among the selection (plus what relations below need).
pub fn selected_fields<'a>(entity: &Entity, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out = vec!["id".to_string()];
    for n in names {
        if let Some(f) = entity.field(n)
            && f.is_stored()
            && !out.iter().any(|o| o == n)
        {
            out.push(n.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn model() -> Model {
        gatehouse_schema::load_sources(&[gatehouse_schema::Source {
            path: "test.graphql".into(),
            text: r#"
                type Query { memos(where: MemoWhere): [Memo!]! }
                input MemoWhere {
                  title: String
                  published: Boolean = true
                  AND: [MemoWhere!]
                  OR: [MemoWhere!]
                  NOT: MemoWhere
                }
                type Memo { id: ID! title: String published: Boolean }
            "#
            .into(),
        }])
        .unwrap()
    }

    fn nested_not(levels: usize) -> Value {
        let mut v = Value::from_json(serde_json::json!({"title": "x"})).unwrap();
        for _ in 0..levels {
            let mut map = async_graphql::indexmap::IndexMap::new();
            map.insert(async_graphql::Name::new("NOT"), v);
            v = Value::Object(map);
        }
        v
    }

    fn where_of(model: &Model, v: Value) -> Option<Filter> {
        let Binding::List(list) = &model.queries[0].binding else {
            panic!("a list");
        };
        let args = [(async_graphql::Name::new("where"), v)];
        filter_from_args(model, &args[..], &list.filters, list.where_arg.as_ref()).unwrap()
    }

    use gatehouse_schema::Binding;

    #[test]
    fn defaults_are_filled_at_every_depth() {
        let model = model();
        let f = where_of(&model, nested_not(2)).unwrap();
        // Each level gets `published: true` from the default.
        let mut published = 0;
        f.for_each_field(&mut |n| published += usize::from(n == "published"));
        assert_eq!(published, 3, "{f:?}");
    }

    /// Filling in the defaults once copied each level's whole subtree and
    /// was done again at every level: cubic in the depth (a request of
    /// 1,000 nested `NOT`s held a worker for 47 s). Now linear: a thousand
    /// levels (far beyond what a request may send) take milliseconds.
    #[test]
    fn a_where_value_costs_linear_time_in_its_depth() {
        let model = model();
        let levels = 1000;
        // Deep on purpose: run where a deep recursion has room.
        let took = std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn(move || {
                let v = nested_not(levels);
                let start = std::time::Instant::now();
                let f = where_of(&model, v);
                let took = start.elapsed();
                // Dropped iteratively enough here: the thread has the stack.
                drop(f);
                took
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
    }
}
