//! The planned executor: a fast path for the queries clients send most.
//!
//! A query operation made only of stored fields, relations and
//! `__typename` (no directives, no introspection, no fragments on another
//! type) is compiled once into a [`Plan`]: which store call each field makes
//! and what it writes. Running a plan makes one store call per root field
//! and one per relation and level (the batching the data loaders do, without
//! their wait), and writes the response bytes straight from the stored rows,
//! with no intermediate GraphQL value tree. The to-one relations of a root
//! field's rows are read by the root field's own statement (a `LEFT JOIN`
//! each), so `{ books { title author { name } } }` is one statement.
//!
//! A plan only runs for an operation async-graphql has already validated
//! (the validation cache in `cache.rs` keeps that verdict), so the limits
//! and every rule that depends on the document alone have been checked;
//! with the same variables, or with others that [`Plan::accepts`] finds
//! certainly valid for their declared types. Anything that would not be a
//! plain success (a missing scope, a bad argument, a store error, a null
//! where the schema promises a value, a stored value the schema would
//! refuse) makes the run give up, and the request is executed by
//! async-graphql, which reports it. Plans only read, so running a request a
//! second time changes nothing.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use async_graphql::parser::types::{
    BaseType, ExecutableDocument, Field as QueryField, OperationType, Selection, SelectionSet, Type,
};
use async_graphql::{Name, Value, Variables};
use async_graphql_value::Value as InputValue;
use futures::future::BoxFuture;
use gatehouse_json as json;
use gatehouse_schema::{
    Binding, Entity, FieldKind, ListBinding, Model, RootField, Scalar, TypeLayer, TypeRef,
    ValueType, Wire,
};
use gatehouse_store::{
    AccessContext, EntityStore, JoinOne, ListQuery, Page, PreparedList, PreparedPage, RowSet, Store,
};
use quick_cache::sync::Cache;
use serde_json::Value as Json;

use crate::args;
use crate::build::{self, Shared};

/// Deepest fragment nesting followed while planning (validation has
/// already refused cycles; this only bounds the walk).
const MAX_FRAGMENT_NESTING: usize = 32;

/// A compiled query operation.
pub(crate) struct Plan {
    /// The operation's variables, as declared.
    variables: Vec<VariableDef>,
    roots: Vec<(Key, Root)>,
}

/// A variable the operation declares.
struct VariableDef {
    name: Name,
    ty: TypeRef,
    /// The value used when the request has none (`None`: no default; a
    /// nullable variable without one then leaves what it stands for absent).
    default: Option<Value>,
    /// Whether an explicit null is certainly valid: the variable's type is
    /// nullable and no argument or input field it stands for is non-null
    /// (where a non-null argument with a default lets a nullable variable
    /// in, validation still refuses a null).
    null_ok: bool,
}

impl Plan {
    /// Whether `variables` certainly pass the checks validation makes of
    /// variable values, so that a plan may run for a variant of the
    /// operation that async-graphql has not validated itself (the document
    /// has passed with other variables: every other rule and limit depends
    /// on the document alone). Each value is checked against its
    /// variable's declared type, which validation has found allowed where
    /// the variable is used. Only the common cases are accepted: values of
    /// the built-in scalars, `Date`, enums and the schema's input objects,
    /// lists of them, and nulls where the type allows them. Anything else
    /// (a missing variable without a default, a number that is not plainly
    /// an `Int`, an `ID` that is not a string) answers `false`, and the
    /// request goes through async-graphql, which decides.
    pub(crate) fn accepts(&self, model: &Model, variables: &Variables) -> bool {
        self.variables.iter().all(|v| v.accepts(model, variables))
    }
}

impl VariableDef {
    /// Whether the value `variables` give this variable certainly passes
    /// validation (see [`Plan::accepts`]).
    fn accepts(&self, model: &Model, variables: &Variables) -> bool {
        match variables.get(&self.name) {
            Some(Value::Null) => self.null_ok,
            Some(value) => input_value_ok(model, &self.ty, value),
            // Absent: its default, or (nullable) what it stands for is left out.
            None => self.default.is_some() || !self.ty.is_non_null(),
        }
    }
}

/// The variables `op` declares, none yet known to take a null
/// ([`VariableDef::null_ok`] is decided by what a plan makes of them).
fn declared(op: &async_graphql::parser::types::OperationDefinition) -> Vec<VariableDef> {
    op.variable_definitions
        .iter()
        .map(|d| VariableDef {
            name: d.node.name.node.clone(),
            ty: type_ref(&d.node.var_type.node),
            // Only a declared default: a nullable variable the request
            // leaves out is absent, not null (`args::coerce_args`).
            default: d.node.default_value.as_ref().map(|v| v.node.clone()),
            null_ok: false,
        })
        .collect()
}

/// Whether `variables` certainly pass validation for mutation
/// `operation_name` of `doc`, as [`Plan::accepts`] decides it for a query
/// (an explicit null never does): a mutation async-graphql has validated
/// with other variables then keeps that verdict (`cache.rs`), since every
/// other rule and limit depends on the document alone. `false` for an
/// operation that is not a mutation.
pub(crate) fn mutation_accepts(
    model: &Model,
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
    variables: &Variables,
) -> bool {
    crate::cache::operation(doc, operation_name).is_some_and(|op| {
        op.ty == OperationType::Mutation && declared(op).iter().all(|v| v.accepts(model, variables))
    })
}

/// Whether `value` is a value of the enum called `name`.
fn enum_has(model: &Model, name: &str, value: &str) -> bool {
    model.enum_def(name).is_some_and(|e| e.has(value))
}

/// See [`Plan::accepts`]: `true` only for a value that GraphQL's input
/// coercion accepts for `ty` (GraphQL spec §3.5, §3.9, §3.10, §3.11).
fn input_value_ok(model: &Model, ty: &TypeRef, value: &Value) -> bool {
    match (ty, value) {
        (TypeRef::NonNull(_), Value::Null) => false,
        (_, Value::Null) => true,
        (TypeRef::NonNull(inner), v) => input_value_ok(model, inner, v),
        (TypeRef::List(item), Value::List(items)) => {
            items.iter().all(|v| input_value_ok(model, item, v))
        }
        // A single value stands for a list of one.
        (TypeRef::List(item), v) => input_value_ok(model, item, v),
        (TypeRef::Named(name), v) => match (Scalar::from_graphql(name), v) {
            // `JSON` takes any value; the Model refuses NUL in its text.
            (Some(s), v) if s.info().wire == Wire::Any => v
                .clone()
                .into_json()
                .is_ok_and(|json| s.check(&json).is_ok()),
            // async-graphql's `Int` takes integers only, where the Model
            // also takes `3.0`.
            (Some(Scalar::Int), Value::Number(n)) => {
                n.as_i64().is_some() && Scalar::Int.check_number(n).is_ok()
            }
            (Some(s), Value::Number(n)) => s.check_number(n).is_ok(),
            (Some(s), Value::String(text)) => s.check_text(text).is_ok(),
            (Some(s), Value::Boolean(_)) => s.info().wire == Wire::Boolean,
            (Some(_), _) => false,
            (None, Value::String(s)) => enum_has(model, name, s),
            (None, Value::Enum(s)) => enum_has(model, name, s),
            (None, Value::Object(fields)) => model.input(name).is_some_and(|input| {
                fields
                    .keys()
                    .all(|k| input.fields.iter().any(|f| f.name == k.as_str()))
                    && input
                        .fields
                        .iter()
                        .all(|f| match fields.get(f.name.as_str()) {
                            Some(v) => input_value_ok(model, &f.ty, v),
                            None => !f.ty.is_non_null() || f.default.is_some(),
                        })
            }),
            _ => false,
        },
    }
}

/// Adds to `out` the variables `value` (an argument or input field of type
/// `ty`, as written) puts where a non-null value is required.
fn non_null_uses(model: &Model, value: &InputValue, ty: &TypeRef, out: &mut Vec<Name>) {
    match value {
        InputValue::Variable(name) if ty.is_non_null() => out.push(name.clone()),
        InputValue::List(items) => {
            let item = match ty.nullable() {
                TypeRef::List(item) => item.as_ref(),
                other => other,
            };
            for v in items {
                non_null_uses(model, v, item, out);
            }
        }
        InputValue::Object(fields) => {
            if let TypeRef::Named(name) = ty.nullable()
                && let Some(input) = model.input(name)
            {
                for (k, v) in fields {
                    if let Some(f) = input.fields.iter().find(|f| f.name == k.as_str()) {
                        non_null_uses(model, v, &f.ty, out);
                    }
                }
            }
        }
        _ => {}
    }
}

/// [`non_null_uses`] over the arguments of a field.
fn non_null_arg_uses(
    model: &Model,
    written: &[(Name, InputValue)],
    declared: &[gatehouse_schema::InputValue],
    out: &mut Vec<Name>,
) {
    for (name, value) in written {
        if let Some(d) = declared.iter().find(|d| d.name == name.as_str()) {
            non_null_uses(model, value, &d.ty, out);
        }
    }
}

/// [`non_null_uses`] over the relation arguments of a selection.
fn non_null_sel_uses(model: &Model, sel: &Sel, out: &mut Vec<Name>) {
    for (_, item) in &sel.items {
        match item {
            Item::ToMany(t) => {
                non_null_arg_uses(model, &t.args, &t.declared, out);
                non_null_sel_uses(model, &t.sel, out);
            }
            Item::ToOne { sel, .. } => non_null_sel_uses(model, sel, out),
            Item::Typename | Item::Value(_) => {}
        }
    }
}

/// The schema's form of a variable's declared type.
fn type_ref(ty: &Type) -> TypeRef {
    TypeRef::read(ty, |t| {
        let layer = match &t.base {
            BaseType::Named(name) => TypeLayer::Named(name.as_str()),
            BaseType::List(item) => TypeLayer::List(item.as_ref()),
        };
        (!t.nullable, layer)
    })
}

/// A response key, written as `"key":`.
struct Key(Vec<u8>);

impl Key {
    fn new(key: &str) -> Option<Self> {
        let mut out = serde_json::to_vec(key).ok()?;
        out.push(b':');
        Some(Self(out))
    }
}

enum Root {
    Typename,
    Field(Box<RootPlan>),
}

struct RootPlan {
    field: RootField,
    /// Arguments as written in the query (variables unresolved).
    args: Vec<(Name, InputValue)>,
    /// The rows' selection (of a connection: its nodes').
    sel: Sel,
    /// For a connection root field: what it selects around its nodes.
    connection: Option<ConnSel>,
    /// The to-one relations of `sel` its statement reads ([`to_one_joins`]).
    joins: Vec<JoinOne>,
    /// The index among `sel`'s items of each of `joins`.
    join_items: Vec<usize>,
    /// Whether the arguments hold no variables: then every run reads the
    /// same page, and its statement is built once, into `prepared` (`None`
    /// when the arguments are refused: async-graphql reports them).
    constant: bool,
    prepared: OnceLock<Option<PreparedList>>,
    /// A connection's page when its arguments hold no variables and its
    /// statement serves every caller.
    prepared_page: OnceLock<Option<PreparedPage>>,
    /// For arguments with variables: statements by [`Run::template_key`],
    /// so a repeated shape skips building its SQL.
    templates: Cache<String, Shape>,
    /// For constant arguments and a caller whose rows a policy filters:
    /// statements by [`EntityStore::statement_caller`] (the caller's policy
    /// inputs are the key, so a statement never serves another caller's
    /// policy).
    per_caller: Cache<String, Arc<PreparedList>>,
}

/// What is known of one shape of a root field's variables.
#[derive(Clone)]
enum Shape {
    /// Seen once: a shape seen only once (a page offset, a search) is
    /// not worth the second build a template takes.
    Seen,
    /// Its statement, to run with each request's texts.
    Template(Arc<PreparedList>),
    /// It cannot be reused (see [`EntityStore::prepare_template`]).
    Unusable,
}

/// Template shapes (and per-caller statements) kept per root field.
const MAX_TEMPLATES: usize = 32;

/// What a connection root field selects beside its nodes.
struct ConnSel {
    /// The connection type's name (`BookConnection`).
    name: String,
    /// The edge type's name (`BookEdge`).
    edge: String,
    items: Vec<(Key, ConnItem)>,
}

enum ConnItem {
    Typename,
    TotalCount,
    Edges(Vec<(Key, EdgeItem)>),
    PageInfo(Vec<(Key, PageItem)>),
}

enum EdgeItem {
    Typename,
    Cursor,
    Node,
}

enum PageItem {
    Typename,
    HasNext,
    HasPrevious,
    Start,
    End,
}

/// What is selected from one entity.
struct Sel {
    /// The entity's rows.
    rows: EntityStore,
    /// The stored columns read (what the resolvers would read).
    columns: Vec<String>,
    items: Vec<(Key, Item)>,
}

enum Item {
    Typename,
    Value(ValueItem),
    ToOne {
        name: String,
        required: bool,
        sel: Sel,
    },
    ToMany(Box<ToMany>),
}

struct ToMany {
    via: String,
    list: ListBinding,
    declared: Vec<gatehouse_schema::InputValue>,
    args: Vec<(Name, InputValue)>,
    sel: Sel,
}

struct ValueItem {
    name: String,
    required: bool,
    /// `Some(items_required)` for a list.
    list: Option<bool>,
    check: Check,
}

/// What async-graphql checks of an output value beyond nullness.
enum Check {
    None,
    /// A scalar gatehouse declares ([`Scalar::is_custom`]): its validator.
    Custom(Scalar),
    Enum(gatehouse_schema::EnumDef),
}

impl Check {
    fn accepts(&self, v: &Json) -> bool {
        match self {
            Check::None => true,
            Check::Custom(s) => s.check(v).is_ok(),
            Check::Enum(def) => v.as_str().is_some_and(|s| def.has(s)),
        }
    }
}

/// Why an operation has no plan, so that async-graphql's resolvers run it.
/// Each is a `reason` of `gatehouse_graphql_fallback_total` (see
/// [`crate::Fallback`]); [`compile`] decides all but
/// [`Unsupported::Extensions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// Not a query: a mutation or a subscription (never counted as a
    /// fallback: only reads are).
    Operation,
    /// The request carries `extensions`.
    Extensions,
    /// An introspection field (`__schema`, `__type`).
    Introspection,
    /// A directive: `@skip`, `@include`, or one on the operation.
    Directive,
    /// A fragment on a type other than the one it is spread in.
    Fragment,
    /// A count field (`booksCount`, or a relation's count).
    Count,
    /// Another selection the plan does not make: a response key selected
    /// twice (field merging), a connection's `node` selected more than
    /// once, or a field of another kind.
    Selection,
}

impl Unsupported {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Operation => "operation",
            Self::Extensions => "extensions",
            Self::Introspection => "introspection",
            Self::Directive => "directive",
            Self::Fragment => "fragment",
            Self::Count => "count",
            Self::Selection => "selection",
        }
    }
}

/// What [`compile`] and its parts answer: a value, or why there is no plan.
type Compiled<T> = Result<T, Unsupported>;

/// `Err(Unsupported::Selection)` for `None`: a part the plan does not
/// find where validation found it (an unknown name, a key that does not
/// serialize), which async-graphql reports if it is an error.
fn found<T>(v: Option<T>) -> Compiled<T> {
    v.ok_or(Unsupported::Selection)
}

/// Compiles operation `operation_name` of `doc`, or says why it is not a
/// query the planned executor runs (async-graphql then runs it).
pub(crate) fn compile(
    store: &Store,
    doc: &ExecutableDocument,
    operation_name: Option<&str>,
) -> Compiled<Plan> {
    let model = &**store.model();
    // Every case it refuses is an error async-graphql reports.
    let op = crate::cache::operation(doc, operation_name).ok_or(Unsupported::Operation)?;
    if op.ty != OperationType::Query {
        return Err(Unsupported::Operation);
    }
    if !op.directives.is_empty() {
        return Err(Unsupported::Directive);
    }
    let mut variables = declared(op);
    let mut fields = Vec::new();
    flatten(doc, &op.selection_set.node, "Query", &mut fields, 0)?;
    let mut roots: Vec<(Key, Root)> = Vec::with_capacity(fields.len());
    // Response keys seen: a hash set, not a search per field (a document can
    // hold thousands of aliases).
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    for f in fields {
        if !seen.insert(f.response_key().node.as_str()) {
            return Err(Unsupported::Selection);
        }
        let key = found(Key::new(f.response_key().node.as_str()))?;
        let name = f.name.node.as_str();
        let root = if name == "__typename" {
            Root::Typename
        } else if name == "__schema" || name == "__type" {
            return Err(Unsupported::Introspection);
        } else {
            let rf = found(model.queries.iter().find(|q| q.name == name))?;
            let entity = found(model.entity(&rf.entity))?;
            let args = written_args(f);
            let (sel, connection) = match &rf.binding {
                Binding::List(_) | Binding::Lookup { .. } => (
                    compile_sel(store, doc, entity, &f.selection_set.node)?,
                    None,
                ),
                Binding::Connection(c) => {
                    let c = found(model.connection(&c.connection))?;
                    let (conn, node) = compile_connection(doc, c, &f.selection_set.node)?;
                    let empty = SelectionSet::default();
                    let sel = compile_sel(store, doc, entity, node.unwrap_or(&empty))?;
                    (sel, Some(conn))
                }
                Binding::Count(_) => return Err(Unsupported::Count),
                _ => return Err(Unsupported::Selection),
            };
            // A page read by cursor reads its to-one relations by id.
            let (joins, join_items) = match connection {
                None => to_one_joins(&sel),
                Some(_) => (Vec::new(), Vec::new()),
            };
            Root::Field(Box::new(RootPlan {
                field: rf.clone(),
                constant: args.iter().all(|(_, v)| v.clone().into_const().is_some()),
                args,
                sel,
                connection,
                joins,
                join_items,
                prepared: OnceLock::new(),
                prepared_page: OnceLock::new(),
                templates: Cache::new(MAX_TEMPLATES),
                per_caller: Cache::new(MAX_TEMPLATES),
            }))
        };
        roots.push((key, root));
    }
    let mut strict = Vec::new();
    for (_, root) in &roots {
        if let Root::Field(r) = root {
            non_null_arg_uses(model, &r.args, &r.field.args, &mut strict);
            non_null_sel_uses(model, &r.sel, &mut strict);
        }
    }
    for v in &mut variables {
        v.null_ok = !v.ty.is_non_null() && !strict.contains(&v.name);
    }
    Ok(Plan { variables, roots })
}

fn written_args(f: &QueryField) -> Vec<(Name, InputValue)> {
    f.arguments
        .iter()
        .map(|(n, v)| (n.node.clone(), v.node.clone()))
        .collect()
}

/// The fields of `set` on `type_name`, fragments expanded; refused when a
/// directive or a fragment on another type is met.
fn flatten<'d>(
    doc: &'d ExecutableDocument,
    set: &'d SelectionSet,
    type_name: &str,
    out: &mut Vec<&'d QueryField>,
    nesting: usize,
) -> Compiled<()> {
    if nesting > MAX_FRAGMENT_NESTING {
        return Err(Unsupported::Fragment);
    }
    for sel in &set.items {
        let inner = match &sel.node {
            Selection::Field(f) => {
                if !f.node.directives.is_empty() {
                    return Err(Unsupported::Directive);
                }
                out.push(&f.node);
                continue;
            }
            Selection::InlineFragment(i) => {
                if !i.node.directives.is_empty() {
                    return Err(Unsupported::Directive);
                }
                let same_type = i
                    .node
                    .type_condition
                    .as_ref()
                    .is_none_or(|t| t.node.on.node == type_name);
                if !same_type {
                    return Err(Unsupported::Fragment);
                }
                &i.node.selection_set
            }
            Selection::FragmentSpread(s) => {
                let frag = doc
                    .fragments
                    .get(&s.node.fragment_name.node)
                    .ok_or(Unsupported::Fragment)?;
                if !s.node.directives.is_empty() || !frag.node.directives.is_empty() {
                    return Err(Unsupported::Directive);
                }
                if frag.node.type_condition.node.on.node != type_name {
                    return Err(Unsupported::Fragment);
                }
                &frag.node.selection_set
            }
        };
        flatten(doc, &inner.node, type_name, out, nesting + 1)?;
    }
    Ok(())
}

/// The selection of a connection root field around its nodes, and the
/// selection set of its one `node`; refused (async-graphql runs it) when
/// `node` is selected more than once (aliases, or several `edges`), since
/// a plan reads one selection of rows per root field.
fn compile_connection<'d>(
    doc: &'d ExecutableDocument,
    c: &gatehouse_schema::Connection,
    set: &'d SelectionSet,
) -> Compiled<(ConnSel, Option<&'d SelectionSet>)> {
    let mut node = None;
    let mut fields = Vec::new();
    flatten(doc, set, &c.name, &mut fields, 0)?;
    let mut items = Vec::with_capacity(fields.len());
    for f in fields {
        let key = found(Key::new(f.response_key().node.as_str()))?;
        let item = match f.name.node.as_str() {
            "__typename" => ConnItem::Typename,
            "totalCount" if c.total_count.is_some() => ConnItem::TotalCount,
            "pageInfo" => {
                let mut inner = Vec::new();
                flatten(
                    doc,
                    &f.selection_set.node,
                    gatehouse_schema::PAGE_INFO,
                    &mut inner,
                    0,
                )?;
                let mut page = Vec::with_capacity(inner.len());
                for p in inner {
                    let item = match p.name.node.as_str() {
                        "__typename" => PageItem::Typename,
                        "hasNextPage" => PageItem::HasNext,
                        "hasPreviousPage" => PageItem::HasPrevious,
                        "startCursor" => PageItem::Start,
                        "endCursor" => PageItem::End,
                        _ => return Err(Unsupported::Selection),
                    };
                    page.push((found(Key::new(p.response_key().node.as_str()))?, item));
                }
                ConnItem::PageInfo(page)
            }
            "edges" => {
                let mut inner = Vec::new();
                flatten(doc, &f.selection_set.node, &c.edge, &mut inner, 0)?;
                let mut edge = Vec::with_capacity(inner.len());
                for e in inner {
                    let item = match e.name.node.as_str() {
                        "__typename" => EdgeItem::Typename,
                        "cursor" => EdgeItem::Cursor,
                        "node" if node.is_none() => {
                            node = Some(&e.selection_set.node);
                            EdgeItem::Node
                        }
                        _ => return Err(Unsupported::Selection),
                    };
                    edge.push((found(Key::new(e.response_key().node.as_str()))?, item));
                }
                ConnItem::Edges(edge)
            }
            _ => return Err(Unsupported::Selection),
        };
        items.push((key, item));
    }
    // Response keys are unique at each level (a repeated key merges
    // selections, which async-graphql does).
    fn unique<T>(items: &[(Key, T)]) -> bool {
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        items.iter().all(|(k, _)| seen.insert(k.0.as_slice()))
    }
    let nested_unique = items.iter().all(|(_, i)| match i {
        ConnItem::Edges(e) => unique(e),
        ConnItem::PageInfo(p) => unique(p),
        _ => true,
    });
    if !unique(&items) || !nested_unique {
        return Err(Unsupported::Selection);
    }
    Ok((
        ConnSel {
            name: c.name.clone(),
            edge: c.edge.clone(),
            items,
        },
        node,
    ))
}

fn compile_sel(
    store: &Store,
    doc: &ExecutableDocument,
    entity: &Entity,
    set: &SelectionSet,
) -> Compiled<Sel> {
    let model = &**store.model();
    let mut fields = Vec::new();
    flatten(doc, set, &entity.name, &mut fields, 0)?;
    let mut items: Vec<(Key, Item)> = Vec::with_capacity(fields.len());
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    for f in &fields {
        if !seen.insert(f.response_key().node.as_str()) {
            return Err(Unsupported::Selection);
        }
        let key = found(Key::new(f.response_key().node.as_str()))?;
        let name = f.name.node.as_str();
        if name == "__typename" {
            items.push((key, Item::Typename));
            continue;
        }
        let mf = found(entity.field(name))?;
        let required = mf.ty.is_non_null();
        let item = match &mf.kind {
            FieldKind::Id => Item::Value(ValueItem {
                name: mf.name.clone(),
                required,
                list: None,
                check: Check::None,
            }),
            FieldKind::Value { ty, list } => {
                let check = match ty {
                    ValueType::Scalar(s) if s.is_custom() => Check::Custom(*s),
                    ValueType::Enum(e) => Check::Enum(found(model.enum_def(e))?.clone()),
                    ValueType::Scalar(_) => Check::None,
                };
                Item::Value(ValueItem {
                    name: mf.name.clone(),
                    required,
                    list: list.map(|l| l.items_required),
                    check,
                })
            }
            // Counts are served by the resolver path (batched per level).
            FieldKind::Count { .. } => return Err(Unsupported::Count),
            FieldKind::ToOne { .. } => Item::ToOne {
                name: mf.name.clone(),
                required,
                sel: compile_sel(
                    store,
                    doc,
                    found(model.target_of(mf))?,
                    &f.selection_set.node,
                )?,
            },
            FieldKind::ToMany {
                list,
                args: declared,
                ..
            } => Item::ToMany(Box::new(ToMany {
                via: found(model.inverse_of(mf))?.name.clone(),
                list: list.clone(),
                declared: declared.clone(),
                args: written_args(f),
                sel: compile_sel(
                    store,
                    doc,
                    found(model.target_of(mf))?,
                    &f.selection_set.node,
                )?,
            })),
        };
        items.push((key, item));
    }
    Ok(Sel {
        rows: found(store.entity(&entity.name).ok())?,
        columns: args::selected_fields(entity, fields.iter().map(|f| f.name.node.as_str())),
        items,
    })
}

/// What one run reads from.
struct Run<'a> {
    shared: &'a Shared,
    /// The caller the store decides rows for.
    access: &'a AccessContext,
    plan: &'a Plan,
    variables: &'a Variables,
}

/// A stored row, its values in the order of the store's columns.
type Values = Vec<Json>;

/// Where the values a selection writes sit in its rows.
struct Layout {
    id: usize,
    /// Aligned with the selection's items: the column of a value or of a
    /// to-one reference.
    items: Vec<Option<usize>>,
}

impl Layout {
    /// The layout of `sel` over rows with `columns`; `None` when a column
    /// the selection reads is missing (never: the store returns what the
    /// selection asks for).
    fn new(sel: &Sel, columns: &[String]) -> Option<Layout> {
        let position = |name: &str| columns.iter().position(|c| c == name);
        let mut items = Vec::with_capacity(sel.items.len());
        for (_, item) in &sel.items {
            items.push(match item {
                Item::Typename | Item::ToMany(_) => None,
                Item::Value(v) => Some(position(&v.name)?),
                Item::ToOne { name, .. } => Some(position(name)?),
            });
        }
        Some(Layout {
            id: position("id")?,
            items,
        })
    }

    /// The id of `row`.
    fn id<'r>(&self, row: &'r [Json]) -> Option<&'r str> {
        row.get(self.id).and_then(Json::as_str)
    }

    /// The value of item `i` of `row`, if it reads a column.
    fn value<'r>(&self, row: &'r [Json], i: usize) -> Option<&'r Json> {
        self.items
            .get(i)
            .copied()
            .flatten()
            .and_then(|p| row.get(p))
    }
}

/// The rows loaded for each relation of a selection, over all parent rows.
struct Level {
    /// Aligned with the selection's items; `Some` for relations.
    children: Vec<Option<Children>>,
}

struct Children {
    rows: Vec<Values>,
    layout: Layout,
    index: Index,
    level: Level,
}

/// How a parent row finds its rows among [`Children::rows`].
enum Index {
    /// Target id (to-one) or parent id (to-many) -> its rows.
    ById(HashMap<String, Range<usize>>),
    /// Row `k` belongs to parent row `k`, a row of nulls when the parent
    /// refers to none: a to-one relation read by the parents' statement.
    Aligned,
}

/// Runs `plan`: the response body (`{"data":…}`), or `None` when the
/// request needs async-graphql (see the module documentation).
pub(crate) async fn run(
    plan: &Plan,
    shared: &Shared,
    access: &AccessContext,
    variables: &Variables,
) -> Option<Vec<u8>> {
    let run = Run {
        shared,
        access,
        plan,
        variables,
    };
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(b"{\"data\":{");
    for (i, (key, root)) in plan.roots.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&key.0);
        match root {
            Root::Typename => out.extend_from_slice(b"\"Query\""),
            Root::Field(r) => run.root(r, &mut out).await?,
        }
    }
    out.extend_from_slice(b"}}");
    Some(out)
}

impl Run<'_> {
    /// `Some` when the caller may read every field of `entity` (relations,
    /// and values with `@auth(read:)`). The plan neither checks which
    /// fields its arguments compare nor nulls fields: a caller who may not
    /// read some field is handed to async-graphql, whose resolvers refuse
    /// comparing it and report it.
    fn relations_readable(&self, entity: &gatehouse_schema::Entity) -> Option<()> {
        for f in &entity.fields {
            if let Some(scope) = self.shared.model.field_read_scope(f) {
                self.allowed(scope)?;
            }
        }
        Some(())
    }

    fn allowed(&self, scope: &str) -> Option<()> {
        self.access.allows(scope, true).then_some(())
    }

    /// A variable's value: as sent, else its declared default; `None`
    /// when it has neither.
    fn variable(&self, name: &Name) -> Option<Value> {
        let v = self.plan.variables.iter().find(|v| &v.name == name)?;
        self.variables
            .get(&v.name)
            .cloned()
            .or_else(|| v.default.clone())
    }

    /// Argument values as a resolver gets them ([`args::coerce_args`]).
    fn args(
        &self,
        written: &[(Name, InputValue)],
        declared: &[gatehouse_schema::InputValue],
    ) -> Option<Vec<(Name, Value)>> {
        Some(args::coerce_args(
            written.iter().map(|(n, v)| (n, v)),
            declared,
            |var| self.variable(var),
        ))
    }

    /// The store query of a root field, its arguments resolved.
    fn query(&self, r: &RootPlan) -> Option<ListQuery> {
        let shared = self.shared;
        let rf = &r.field;
        let args = self.args(&r.args, &rf.args)?;
        let select = Some(r.sel.columns.clone());
        match &rf.binding {
            Binding::List(list) => {
                let mut q =
                    args::list_query(&shared.model, &args[..], list, shared.limits, select).ok()?;
                q.joins = r.joins.clone();
                unrelated(q)
            }
            Binding::Lookup { filters, where_arg } => {
                let filter =
                    args::filter_from_args(&shared.model, &args[..], filters, where_arg.as_ref())
                        .ok()??;
                unrelated(ListQuery {
                    filter: Some(filter),
                    limit: Some(2),
                    select,
                    joins: r.joins.clone(),
                    ..Default::default()
                })
            }
            _ => None,
        }
    }

    /// The cache key of the request's variables for [`Run::template`]: the
    /// value of every variable, except that the text of a non-null `ID` or
    /// `String` variable is left out (only that it is text counts); and
    /// those variables with their texts, in order.
    fn template_key(&self, r: &RootPlan) -> Option<(String, Vec<(Name, String)>)> {
        let mut key = r
            .sel
            .rows
            .statement_caller(self.access, &r.joins)
            .to_string();
        let mut texts = Vec::new();
        for v in &self.plan.variables {
            let value = self.variable(&v.name);
            let text_type =
                matches!(v.ty.nullable(), TypeRef::Named(n) if n == "ID" || n == "String");
            key.push_str(v.name.as_str());
            match value {
                Some(Value::String(text)) if text_type => {
                    key.push_str(":text;");
                    texts.push((v.name.clone(), text));
                }
                Some(value) => {
                    key.push('=');
                    key.push_str(&serde_json::to_string(&value).ok()?);
                    key.push(';');
                }
                None => key.push_str(":none;"),
            }
        }
        Some((key, texts))
    }

    /// A root field's rows when its arguments hold variables. The statement
    /// is reused for requests whose variables differ only in the text of
    /// `ID` and `String` variables (a lookup by id, say): building it is a
    /// large share of such a request. A shape is reusable when building
    /// it again with markers for those texts gives the same SQL and each
    /// marker bound verbatim (not inside a pattern, as `_contains` binds
    /// it), exactly where the request's own texts are bound. The template
    /// is built on a shape's second request: many shapes are seen once.
    async fn run_templated(&self, r: &RootPlan) -> Option<Page> {
        let rows = &r.sel.rows;
        let plain = || async { rows.list(self.access, &self.query(r)?).await.ok() };
        let Some((key, texts)) = self.template_key(r).filter(|(_, t)| !t.is_empty()) else {
            return plain().await;
        };
        let own: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
        let known = r.templates.get(&key);
        let template = match known {
            Some(Shape::Template(t)) => t,
            Some(Shape::Unusable) => return plain().await,
            None => {
                r.templates.insert(key, Shape::Seen);
                return plain().await;
            }
            Some(Shape::Seen) => {
                // The query this run would make with other texts.
                let build = |with: &[&str]| {
                    let mut variables = self.variables.clone();
                    for ((name, _), text) in texts.iter().zip(with) {
                        variables.insert(name.clone(), Value::String(text.to_string()));
                    }
                    Run {
                        variables: &variables,
                        ..*self
                    }
                    .query(r)
                };
                match rows.prepare_template(self.access, &own, build) {
                    Ok(Some(t)) => {
                        let t = Arc::new(t);
                        r.templates.insert(key, Shape::Template(t.clone()));
                        t
                    }
                    Ok(None) => {
                        r.templates.insert(key, Shape::Unusable);
                        return plain().await;
                    }
                    // This request's own query is refused: not the shape's fault.
                    Err(_) => return plain().await,
                }
            }
        };
        template.run(self.access, &own).await.ok()
    }

    async fn root(&self, r: &RootPlan, out: &mut Vec<u8>) -> Option<()> {
        let shared = self.shared;
        let rf = &r.field;
        let rows = &r.sel.rows;
        self.allowed(shared.model.root_access(rf).scope)?;
        self.relations_readable(rows.def())?;
        if let (Binding::Connection(c), Some(conn)) = (&rf.binding, &r.connection) {
            return self.connection(r, c, conn, out).await;
        }
        // The root field's rows, with the to-one relations its statement read.
        let Page { rows: set, joined } = if r.constant {
            let caller = rows.statement_caller(self.access, &r.joins);
            if caller.is_empty() {
                let prepared = r
                    .prepared
                    .get_or_init(|| rows.prepare(self.access, &self.query(r)?).ok());
                prepared.as_ref()?.run(self.access, &[]).await.ok()?
            } else {
                // A statement with the caller's policy in it serves only
                // callers with the same policy inputs.
                let known = r.per_caller.get(caller);
                let prepared = match known {
                    Some(p) => p,
                    None => {
                        let p = Arc::new(rows.prepare(self.access, &self.query(r)?).ok()?);
                        r.per_caller.insert(caller.to_string(), p.clone());
                        p
                    }
                };
                prepared.run(self.access, &[]).await.ok()?
            }
        } else {
            self.run_templated(r).await?
        };
        let layout = Layout::new(&r.sel, &set.columns)?;
        let joined = r.join_items.iter().copied().zip(joined).collect();
        match &rf.binding {
            Binding::List(_) => {
                let level = self.load(&r.sel, &set.rows, &layout, joined).await?;
                write_list(out, &set.rows, 0, &r.sel, &layout, &level)
            }
            Binding::Lookup { .. } => match set.rows.as_slice() {
                [] if rf.ty.is_non_null() => None,
                [] => {
                    out.extend_from_slice(b"null");
                    Some(())
                }
                [row] => {
                    let level = self.load(&r.sel, &set.rows, &layout, joined).await?;
                    write_object(out, row, 0, &r.sel, &layout, &level)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// A connection root field: one page read by cursor (the same store
    /// call and arguments as its resolver), the total count when selected.
    async fn connection(
        &self,
        r: &RootPlan,
        c: &gatehouse_schema::ConnectionBinding,
        conn: &ConnSel,
        out: &mut Vec<u8>,
    ) -> Option<()> {
        let shared = self.shared;
        let rows = &r.sel.rows;
        let args = self.args(&r.args, &r.field.args)?;
        let select = Some(r.sel.columns.clone());
        let (q, page) =
            args::connection_query(&shared.model, &args[..], c, shared.limits, select).ok()?;
        let q = unrelated(q)?;
        let found = if r.constant && rows.statement_caller(self.access, &[]).is_empty() {
            let prepared = r
                .prepared_page
                .get_or_init(|| rows.prepare_page(self.access, &q, &page).ok());
            prepared.as_ref()?.run(self.access).await.ok()?
        } else {
            rows.page(self.access, &q, &page).await.ok()?
        };
        let total = if conn
            .items
            .iter()
            .any(|(_, i)| matches!(i, ConnItem::TotalCount))
        {
            Some(rows.count(self.access, q.filter.as_ref()).await.ok()?)
        } else {
            None
        };
        let set = &found.rows;
        let layout = Layout::new(&r.sel, &set.columns)?;
        let level = self.load(&r.sel, &set.rows, &layout, Vec::new()).await?;
        let cursor = |out: &mut Vec<u8>, c: Option<String>| match c {
            Some(c) => json::write_str(out, &c),
            None => out.extend_from_slice(b"null"),
        };
        write_members(out, &conn.items, |out, _, item| {
            match item {
                ConnItem::Typename => json::write_str(out, &conn.name),
                ConnItem::TotalCount => {
                    json::write_value(out, &Json::from(build::count_int(total?)));
                }
                ConnItem::PageInfo(items) => {
                    write_members(out, items, |out, _, item| {
                        match item {
                            PageItem::Typename => json::write_str(out, gatehouse_schema::PAGE_INFO),
                            PageItem::HasNext => write_bool(out, found.has_next_page),
                            PageItem::HasPrevious => write_bool(out, found.has_previous_page),
                            PageItem::Start => cursor(out, found.first_cursor()),
                            PageItem::End => cursor(out, found.last_cursor()),
                        }
                        Some(())
                    })?;
                }
                ConnItem::Edges(items) => {
                    out.push(b'[');
                    for (k, row) in set.rows.iter().enumerate() {
                        if k > 0 {
                            out.push(b',');
                        }
                        write_members(out, items, |out, _, item| {
                            match item {
                                EdgeItem::Typename => json::write_str(out, &conn.edge),
                                EdgeItem::Cursor => json::write_str(out, &found.cursor(k)?),
                                EdgeItem::Node => {
                                    write_object(out, row, k, &r.sel, &layout, &level)?;
                                }
                            }
                            Some(())
                        })?;
                    }
                    out.push(b']');
                }
            }
            Some(())
        })
    }

    /// Loads every relation of `sel` for all of `rows`, level by level.
    /// `joined` holds the to-one relations the rows' statement already read
    /// (by item index, from [`to_one_joins`]).
    fn load<'s>(
        &'s self,
        sel: &'s Sel,
        rows: &'s [Values],
        layout: &'s Layout,
        mut joined: Vec<(usize, RowSet)>,
    ) -> BoxFuture<'s, Option<Level>> {
        Box::pin(async move {
            let mut children = Vec::with_capacity(sel.items.len());
            for (i, (_, item)) in sel.items.iter().enumerate() {
                let loaded = match item {
                    Item::Typename | Item::Value(_) => None,
                    Item::ToOne { sel: child, .. } if joined.iter().any(|(k, _)| *k == i) => {
                        let t = child.rows.def();
                        self.allowed(t.read_scope())?;
                        self.relations_readable(t)?;
                        let at = joined.iter().position(|(k, _)| *k == i)?;
                        let (_, set) = joined.swap_remove(at);
                        let layout = Layout::new(child, &set.columns)?;
                        Some((child, set.rows, layout, Index::Aligned))
                    }
                    Item::ToOne { sel: child, .. } => {
                        let t = child.rows.def();
                        self.allowed(t.read_scope())?;
                        self.relations_readable(t)?;
                        let mut ids: Vec<String> = rows
                            .iter()
                            .filter_map(|r| layout.value(r, i).and_then(Json::as_str))
                            .map(str::to_string)
                            .collect();
                        ids.sort_unstable();
                        ids.dedup();
                        let (rows, layout) = if ids.is_empty() {
                            (Vec::new(), Layout::new(child, &child.columns)?)
                        } else {
                            let set = child
                                .rows
                                .get_many(self.access, &ids, Some(&child.columns))
                                .await
                                .ok()?;
                            let layout = Layout::new(child, &set.columns)?;
                            (set.rows, layout)
                        };
                        let mut index = HashMap::with_capacity(rows.len());
                        for (k, row) in rows.iter().enumerate() {
                            index.insert(layout.id(row)?.to_string(), k..k + 1);
                        }
                        Some((child, rows, layout, Index::ById(index)))
                    }
                    Item::ToMany(many) => {
                        let ToMany {
                            via,
                            list,
                            declared,
                            args: written,
                            sel: child,
                        } = &**many;
                        let child_entity = child.rows.def();
                        self.allowed(child_entity.read_scope())?;
                        self.relations_readable(child_entity)?;
                        let args = self.args(written, declared)?;
                        let q = args::list_query(
                            &self.shared.model,
                            &args[..],
                            list,
                            self.shared.limits,
                            Some(child.columns.clone()),
                        )
                        .ok()
                        .and_then(unrelated)?;
                        let mut parents: Vec<String> = rows
                            .iter()
                            .filter_map(|r| layout.id(r))
                            .map(str::to_string)
                            .collect();
                        parents.sort_unstable();
                        parents.dedup();
                        let found = child
                            .rows
                            .children(self.access, via, &parents, &q)
                            .await
                            .ok()?;
                        let layout = Layout::new(child, &found.rows.columns)?;
                        let (rows, index) = group_by_parent(found.rows.rows, &found.parents);
                        Some((child, rows, layout, Index::ById(index)))
                    }
                };
                let loaded = match loaded {
                    None => None,
                    Some((child, rows, layout, index)) => {
                        let level = self.load(child, &rows, &layout, Vec::new()).await?;
                        Some(Children {
                            rows,
                            layout,
                            index,
                            level,
                        })
                    }
                };
                children.push(loaded);
            }
            Some(Level { children })
        })
    }
}

/// `q`, unless its filter goes through a to-many relation (`tasks_some`):
/// such a statement holds the read rules of the rows it reaches, which the
/// plan's statement caches do not key by, and compares fields of other
/// types than the one whose field scopes the plan checked. Those requests
/// go to async-graphql, whose resolvers answer them.
fn unrelated(q: ListQuery) -> Option<ListQuery> {
    (!q.filter.as_ref().is_some_and(|f| f.has_related())).then_some(q)
}

/// The to-one relations of `sel`, to be read by the statement that reads
/// its rows, and the index of each among `sel`'s items.
fn to_one_joins(sel: &Sel) -> (Vec<JoinOne>, Vec<usize>) {
    sel.items
        .iter()
        .enumerate()
        .filter_map(|(i, (_, item))| match item {
            Item::ToOne { name, sel, .. } => Some((
                JoinOne {
                    field: name.clone(),
                    select: sel.columns.clone(),
                },
                i,
            )),
            _ => None,
        })
        .unzip()
}

/// Puts each parent's children next to each other (keeping their order)
/// and indexes them by parent id.
fn group_by_parent(
    rows: Vec<Values>,
    parent_of: &[String],
) -> (Vec<Values>, HashMap<String, Range<usize>>) {
    let mut order: Vec<usize> = (0..rows.len().min(parent_of.len())).collect();
    // Stable: a parent's children keep the store's order.
    order.sort_by(|a, b| parent_of[*a].cmp(&parent_of[*b]));
    let mut slots: Vec<Option<Values>> = rows.into_iter().map(Some).collect();
    let mut grouped = Vec::with_capacity(order.len());
    let mut index: HashMap<String, Range<usize>> = HashMap::new();
    for k in order {
        let Some(row) = slots.get_mut(k).and_then(Option::take) else {
            continue;
        };
        let at = grouped.len();
        index
            .entry(parent_of[k].clone())
            .and_modify(|r| r.end = at + 1)
            .or_insert(at..at + 1);
        grouped.push(row);
    }
    (grouped, index)
}

/// Writes `rows`, the rows from position `start` on of their level.
fn write_list(
    out: &mut Vec<u8>,
    rows: &[Values],
    start: usize,
    sel: &Sel,
    layout: &Layout,
    level: &Level,
) -> Option<()> {
    out.push(b'[');
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_object(out, row, start + i, sel, layout, level)?;
    }
    out.push(b']');
    Some(())
}

/// Writes `row`, at position `pos` among the rows of its level.
fn write_object(
    out: &mut Vec<u8>,
    row: &[Json],
    pos: usize,
    sel: &Sel,
    layout: &Layout,
    level: &Level,
) -> Option<()> {
    write_members(out, &sel.items, |out, i, item| {
        let loaded = level.children.get(i)?;
        match item {
            Item::Typename => json::write_str(out, &sel.rows.def().name),
            Item::Value(v) => write_value(out, layout.value(row, i), v)?,
            Item::ToOne {
                required,
                sel: child,
                ..
            } => {
                let c = loaded.as_ref()?;
                let found = match &c.index {
                    Index::Aligned => c.rows.get(pos).and_then(|r| c.layout.id(r)).map(|_| pos),
                    Index::ById(index) => layout
                        .value(row, i)
                        .and_then(Json::as_str)
                        .and_then(|id| index.get(id))
                        .map(|r| r.start),
                };
                match found {
                    Some(k) => {
                        write_object(out, c.rows.get(k)?, k, child, &c.layout, &c.level)?;
                    }
                    None if *required => return None,
                    None => out.extend_from_slice(b"null"),
                }
            }
            Item::ToMany(many) => {
                let c = loaded.as_ref()?;
                let Index::ById(index) = &c.index else {
                    return None;
                };
                let range = index.get(layout.id(row)?).cloned().unwrap_or(0..0);
                let rows = c.rows.get(range.clone())?;
                write_list(out, rows, range.start, &many.sel, &c.layout, &c.level)?;
            }
        }
        Some(())
    })
}

/// Writes an object of `items`: each one's key (`"key":`) and what `value`
/// writes for it (given its index), comma-separated.
fn write_members<T>(
    out: &mut Vec<u8>,
    items: &[(Key, T)],
    mut value: impl FnMut(&mut Vec<u8>, usize, &T) -> Option<()>,
) -> Option<()> {
    out.push(b'{');
    for (i, (key, item)) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&key.0);
        value(out, i, item)?;
    }
    out.push(b'}');
    Some(())
}

fn write_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// A stored value, refusing what async-graphql would refuse to output.
fn write_value(out: &mut Vec<u8>, v: Option<&Json>, item: &ValueItem) -> Option<()> {
    let v = match v {
        None | Some(Json::Null) if item.required => return None,
        None | Some(Json::Null) => {
            out.extend_from_slice(b"null");
            return Some(());
        }
        Some(v) => v,
    };
    let ok = match (item.list, v) {
        (Some(items_required), Json::Array(items)) => items.iter().all(|i| {
            if i.is_null() {
                !items_required
            } else {
                item.check.accepts(i)
            }
        }),
        (Some(_), _) => false,
        (None, v) => item.check.accepts(v),
    };
    if !ok {
        return None;
    }
    json::write_value(out, v);
    Some(())
}
