//! Building the executable schema from the Model. Every resolver is generated
//! here from a binding the loader decided; there is no user code.

use std::sync::Arc;

use async_graphql::dataloader::DataLoader;
use async_graphql::dynamic::{
    Enum, Field, FieldFuture, FieldValue, InputObject, InputValue, Object, ResolverContext, Scalar,
    Schema, SchemaBuilder, Subscription, SubscriptionField, SubscriptionFieldFuture, TypeRef,
};
use async_graphql::{Error, Value};
use gatehouse_access::ScopeRefusal;
use gatehouse_schema::{
    Binding, ChangeKind, ConstValue, DeleteReturn, Entity, FieldKind, Model, RootField,
    Scalar as ModelScalar, TypeRef as ModelTypeRef,
};
use gatehouse_store::{AccessContext, EntityStore, Filter, Row, Store, WriteTxn};
use serde_json::Value as Json;

use crate::args::{self, PageLimits};
use crate::error::{Code, coded, from_store};
use crate::loader::{ChildSpec, CountKey, CountSpec, ManyKey, OneKey, StoreLoader};
use gatehouse_auth::Principal;

/// What every resolver shares.
pub(crate) struct Shared {
    pub model: Arc<Model>,
    pub store: Store,
    pub limits: PageLimits,
    /// Whether every request must carry a [`Principal`] (the HTTP layer adds one).
    pub auth_required: bool,
}

/// What a resolver's result depends on about its caller: the scheme (an
/// anonymous caller is refused differently) and the granted scopes. Two
/// callers with the same key get the same answer from every resolver, so
/// the transports may execute a subscription once for all of them.
///
/// Invariant: anything [`authorize`] (or any other resolver) starts reading
/// from [`Principal`] must be added here, or subscriptions would be shared
/// between callers that ought to see different results.
pub(crate) fn sharing_key(principal: Option<&Principal>, auth_required: bool) -> String {
    let access = access_of(principal, auth_required);
    match principal {
        None => format!("none:{}", access.key()),
        Some(p) if p.is_anonymous() => format!("anonymous:{}", access.key()),
        Some(_) => format!("caller:{}", access.key()),
    }
}

/// The access context the store decides rows for: the principal's; without
/// one, the trusted in-process caller when requests need none, else a
/// caller holding nothing.
pub(crate) fn access_of(principal: Option<&Principal>, auth_required: bool) -> AccessContext {
    gatehouse_auth::access_context_of(principal, auth_required)
}

/// The request's access context (`Graphql::prepare` adds it).
fn caller<'a>(ctx: &ResolverContext<'a>) -> Result<&'a AccessContext, Error> {
    ctx.data::<AccessContext>()
}

/// Checks that the caller may use `scope` for `what`, by the request's
/// access context (`Graphql::prepare` adds it; the trusted in-process
/// caller when requests need no principal and none is given). Reads only
/// what [`sharing_key`] covers.
fn authorize(
    ctx: &ResolverContext<'_>,
    scope: &str,
    is_read: bool,
    what: &str,
) -> Result<(), Error> {
    match caller(ctx)?.check_scope(scope, is_read) {
        Ok(()) => Ok(()),
        Err(ScopeRefusal::Unauthenticated) => Err(coded(
            Code::Unauthenticated,
            format!("{what} needs credentials with the scope `{scope}`"),
        )),
        Err(ScopeRefusal::Forbidden) => Err(coded(
            Code::Forbidden,
            format!("{what} needs the scope `{scope}`"),
        )),
    }
}

pub(crate) type Loaders = DataLoader<StoreLoader>;

pub(crate) fn schema_builder(shared: Arc<Shared>) -> SchemaBuilder {
    let model = shared.model.clone();
    let mutation = (!model.mutations.is_empty()).then_some("Mutation");
    let subscription = (!model.subscriptions.is_empty()).then_some("Subscription");
    let mut b = Schema::build("Query", mutation, subscription);

    // Only the scalars some field uses: introspection lists no others, and
    // the served SDL must describe the same types.
    let used = |s: ModelScalar| {
        model.entities.iter().flat_map(|e| &e.fields).any(|f| {
            matches!(&f.kind, FieldKind::Value { ty: gatehouse_schema::ValueType::Scalar(t), .. } if *t == s)
        })
    };
    for s in ModelScalar::ALL
        .into_iter()
        .filter(|s| s.is_custom() && used(*s))
    {
        b = b.register(custom_scalar(s));
    }
    for e in &model.enums {
        let mut en = Enum::new(&e.name);
        if let Some(d) = &e.description {
            en = en.description(d);
        }
        b = b.register(en.items(e.values.iter().map(async_graphql::dynamic::EnumItem::new)));
    }
    for i in &model.inputs {
        let mut io = InputObject::new(&i.name);
        if let Some(d) = &i.description {
            io = io.description(d);
        }
        for f in &i.fields {
            io = io.field(input_value(f));
        }
        b = b.register(io);
    }
    for e in &model.entities {
        b = b.register(entity_object(&shared, e));
    }
    if !model.connections.is_empty() {
        b = b.register(page_info_object());
    }
    for c in &model.connections {
        b = b.register(connection_object(c));
        b = b.register(edge_object(c));
    }
    for r in &model.bulk_results {
        b = b.register(bulk_result_object(r));
    }

    let mut query = Object::new("Query");
    for f in &model.queries {
        query = query.field(root_field(&shared, f));
    }
    b = b.register(query);
    if mutation.is_some() {
        let mut m = Object::new("Mutation");
        for f in &model.mutations {
            m = m.field(root_field(&shared, f));
        }
        b = b.register(m);
    }
    if subscription.is_some() {
        let mut s = Subscription::new("Subscription");
        for f in &model.subscriptions {
            s = s.field(subscription_field(&shared, f));
        }
        b = b.register(s);
    }
    b
}

/// A scalar gatehouse declares (`Date`), as the loader declares it, with
/// the Model's check of its values.
fn custom_scalar(s: ModelScalar) -> Scalar {
    let mut scalar = Scalar::new(s.graphql_name());
    if let Some((description, url)) = s.custom_declaration() {
        scalar = scalar.description(description).specified_by_url(url);
    }
    scalar.validator(move |v| {
        v.clone()
            .into_json()
            .is_ok_and(|json| !json.is_null() && s.check(&json).is_ok())
    })
}

fn type_ref(t: &ModelTypeRef) -> TypeRef {
    t.write(
        |n| TypeRef::named(n),
        |t| TypeRef::NonNull(Box::new(t)),
        |t| TypeRef::List(Box::new(t)),
    )
}

pub(crate) fn const_value(v: &ConstValue) -> Value {
    match v {
        ConstValue::Null => Value::Null,
        ConstValue::Int(i) => Value::from(*i),
        ConstValue::Float(f) => Value::from(*f),
        ConstValue::String(s) => Value::from(s.clone()),
        ConstValue::Boolean(b) => Value::from(*b),
        ConstValue::Enum(e) => Value::Enum(async_graphql::Name::new(e)),
        ConstValue::List(items) => Value::List(items.iter().map(const_value).collect()),
        ConstValue::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (async_graphql::Name::new(k), const_value(v)))
                .collect(),
        ),
    }
}

fn input_value(v: &gatehouse_schema::InputValue) -> InputValue {
    let mut iv = InputValue::new(&v.name, type_ref(&v.ty));
    if let Some(d) = &v.default {
        iv = iv.default_value(const_value(d));
    }
    if let Some(d) = &v.description {
        iv = iv.description(d);
    }
    iv
}

/// Reports `e` at this field, with its path, and resolves to null.
/// (Returning `Err` from a dynamic resolver loses the path.) async-graphql's
/// dynamic executor leaves a failed non-null field's key out rather than
/// nulling its parent; `Graphql::execute` puts the null where GraphQL spec
/// §6.4.4 says (the nearest nullable parent) from the error's path. In a
/// subscription's events async-graphql drops the errors resolvers add, so
/// there they go to the stream's [`crate::error::FieldErrors`].
fn fail<'a>(
    ctx: &ResolverContext<'a>,
    _nullable: bool,
    e: Error,
) -> Result<Option<FieldValue<'a>>, Error> {
    let e = ctx.set_error_path(e.into_server_error(ctx.item.pos));
    // A mutation with a failed field applies none of its writes: the
    // transaction is marked failed now, so no later root field writes.
    if let Some(txn) = ctx.data_opt::<WriteTxn>() {
        txn.fail();
    }
    match ctx.data_opt::<Arc<crate::error::FieldErrors>>() {
        Some(sink) => sink.push(e),
        None => ctx.add_error(e),
    }
    Ok(None)
}

/// The arguments of the field `ctx` resolves, coerced as GraphQL spec
/// §6.4.1 says ([`args::coerce_args`]): async-graphql's own `ctx.args` give
/// a nullable variable the request did not send the value null, which
/// would clear the field it is written to.
fn coerced_args(
    ctx: &ResolverContext<'_>,
    declared: &[gatehouse_schema::InputValue],
) -> Vec<(async_graphql::Name, Value)> {
    let env = ctx.ctx.query_env;
    let written = ctx
        .ctx
        .item
        .node
        .arguments
        .iter()
        .map(|(name, value)| (&name.node, &value.node));
    args::coerce_args(written, declared, |name| {
        env.variables.get(name).cloned().or_else(|| {
            env.operation
                .node
                .variable_definitions
                .iter()
                .find(|d| &d.node.name.node == name)
                .and_then(|d| d.node.default_value.as_ref())
                .map(|v| v.node.clone())
        })
    })
}

fn parent_row<'a>(ctx: &ResolverContext<'a>) -> Result<&'a Row, Error> {
    ctx.parent_value.try_downcast_ref::<Row>()
}

fn selection(ctx: &ResolverContext<'_>, entity: &Entity) -> Vec<String> {
    let names: Vec<String> = ctx
        .ctx
        .field()
        .selection_set()
        .map(|f| f.name().to_string())
        .collect();
    args::selected_fields(entity, names.iter().map(String::as_str))
}

/// What reading a field of an entity needs beyond the entity itself
/// (`Model::field_read_scope`), checked for each row that shows it.
#[derive(Clone)]
struct FieldGuard {
    scope: Arc<str>,
    /// The field, as refusals name it.
    what: Arc<str>,
}

impl FieldGuard {
    /// `None` when the field needs no scope beyond its entity's.
    fn new(shared: &Shared, e: &Entity, f: &gatehouse_schema::Field) -> Option<Self> {
        let scope = shared.model.field_read_scope(f)?;
        Some(FieldGuard {
            scope: Arc::from(scope),
            what: Arc::from(format!("`{}.{}`", e.name, f.name)),
        })
    }

    fn check(&self, ctx: &ResolverContext<'_>) -> Result<(), Error> {
        authorize(ctx, &self.scope, true, &self.what)
    }
}

/// The value of a stored field in its row, as GraphQL answers it.
fn stored_value<'a>(row: &Row, f: &gatehouse_schema::Field) -> Option<FieldValue<'a>> {
    row.get(&f.name)
        .filter(|v| !v.is_null())
        .map(|v| FieldValue::value(args::to_graphql(f, v)))
}

fn entity_object(shared: &Arc<Shared>, e: &Entity) -> Object {
    let mut obj = Object::new(&e.name);
    if let Some(d) = &e.description {
        obj = obj.description(d);
    }
    for f in &e.fields {
        let name = f.name.clone();
        let nullable = !f.ty.is_non_null();
        let guard = FieldGuard::new(shared, e, f);
        let mut field = match (&f.kind, guard) {
            (FieldKind::Id | FieldKind::Value { .. }, Some(guard)) => {
                // `@auth(read:)` on the field: checked for every row.
                let model_field = Arc::new(f.clone());
                Field::new(&f.name, type_ref(&f.ty), move |ctx| {
                    let model_field = model_field.clone();
                    let guard = guard.clone();
                    FieldFuture::new(async move {
                        if let Err(e) = guard.check(&ctx) {
                            return fail(&ctx, nullable, e);
                        }
                        Ok(stored_value(parent_row(&ctx)?, &model_field))
                    })
                })
            }
            (FieldKind::Id | FieldKind::Value { .. }, None) => {
                let model_field = Arc::new(f.clone());
                // Stored values are already in the row: resolved synchronously,
                // with no future to allocate per field and row.
                Field::new(&f.name, type_ref(&f.ty), move |ctx| {
                    match parent_row(&ctx) {
                        Ok(row) => FieldFuture::Value(stored_value(row, &model_field)),
                        Err(e) => FieldFuture::new(async move { Err::<Option<Value>, _>(e) }),
                    }
                })
            }
            (FieldKind::Count { .. }, _) => count_field(shared, f),
            (FieldKind::ToOne { .. }, guard) => {
                let target = shared.model.relation_of(f).map(|r| r.target);
                let hidden: Arc<str> = Arc::from(format!(
                    "`{}.{}` refers to a `{}` row this caller may not read",
                    e.name,
                    f.name,
                    target.map_or("", |t| shared.model.entity_at(t).name.as_str())
                ));
                Field::new(&f.name, type_ref(&f.ty), move |ctx| {
                    let name = name.clone();
                    let guard = guard.clone();
                    let hidden = hidden.clone();
                    FieldFuture::new(async move {
                        if let Some(Err(e)) = guard.as_ref().map(|g| g.check(&ctx)) {
                            return fail(&ctx, nullable, e);
                        }
                        let row = parent_row(&ctx)?;
                        let (Some(target), Some(id)) =
                            (target, row.get(&name).and_then(Json::as_str))
                        else {
                            return Ok(None);
                        };
                        let loaders = ctx.data::<Loaders>()?;
                        let key = OneKey {
                            entity: target,
                            id: id.to_string(),
                        };
                        match loaders.load_one(key).await {
                            Ok(Some(found)) => Ok(Some(FieldValue::owned_any(found))),
                            // A row policy hides the referenced row: a
                            // nullable field reads as null (the row is
                            // invisible); a non-null one has no value to
                            // give, so it fails with `FORBIDDEN` at its path
                            // and the null goes up to the nearest nullable
                            // parent (GraphQL spec §6.4.4).
                            Ok(None) if nullable => Ok(None),
                            Ok(None) => fail(&ctx, nullable, coded(Code::Forbidden, &*hidden)),
                            Err(e) => fail(&ctx, nullable, from_store(&e)),
                        }
                    })
                })
            }
            (
                FieldKind::ToMany {
                    list,
                    args: declared,
                    ..
                },
                _,
            ) => {
                let target = shared.model.relation_of(f).map(|r| r.target);
                let relation = f.relation();
                let shared = shared.clone();
                let list = list.clone();
                let declared_args = Arc::new(declared.clone());
                let mut field = Field::new(&f.name, type_ref(&f.ty), move |ctx| {
                    let shared = shared.clone();
                    let list = list.clone();
                    let declared_args = declared_args.clone();
                    FieldFuture::new(async move {
                        let row = parent_row(&ctx)?;
                        let Some(parent) = row.get("id").and_then(Json::as_str) else {
                            return Ok(None);
                        };
                        let (Some(target), Some(relation)) = (target, relation) else {
                            return Ok(None);
                        };
                        let child = shared.model.entity_at(target);
                        let what = format!("`{}`", ctx.ctx.field().name());
                        if let Err(e) = authorize(&ctx, child.read_scope(), true, &what) {
                            return fail(&ctx, nullable, e);
                        }
                        let select = selection(&ctx, child);
                        let query = match args::list_query(
                            &shared.model,
                            &coerced_args(&ctx, &declared_args)[..],
                            &list,
                            shared.limits,
                            Some(select),
                        ) {
                            Ok(q) => q,
                            Err(e) => return fail(&ctx, nullable, e),
                        };
                        let spec = Arc::new(ChildSpec {
                            sig: format!(
                                "{}\u{0}{}\u{0}{query:?}",
                                target.index(),
                                relation.index()
                            ),
                            target,
                            relation,
                            query,
                        });
                        let loaders = ctx.data::<Loaders>()?;
                        let key = ManyKey {
                            spec,
                            parent: parent.to_string(),
                        };
                        match loaders.load_one(key).await {
                            Ok(rows) => Ok(Some(FieldValue::list(
                                rows.unwrap_or_default()
                                    .into_iter()
                                    .map(FieldValue::owned_any),
                            ))),
                            Err(e) => fail(&ctx, nullable, from_store(&e)),
                        }
                    })
                });
                for a in declared {
                    field = field.argument(input_value(a));
                }
                field
            }
        };
        if let Some(d) = &f.description {
            field = field.description(d);
        }
        obj = obj.field(field);
    }
    obj
}

/// `booksCount` beside `books`: the rows `books` would list under the
/// same filters, counted for every parent of one level in one grouped
/// statement (see [`CountKey`]).
fn count_field(shared: &Arc<Shared>, f: &gatehouse_schema::Field) -> Field {
    let nullable = !f.ty.is_non_null();
    let target = shared.model.relation_of(f).map(|r| r.target);
    let relation = f.relation();
    let (list, declared) = match &f.kind {
        FieldKind::Count { list, args, .. } => (list.clone(), args.clone()),
        _ => (Default::default(), Vec::new()),
    };
    let shared = shared.clone();
    let declared_args = Arc::new(declared.clone());
    let mut field = Field::new(&f.name, type_ref(&f.ty), move |ctx| {
        let shared = shared.clone();
        let list = list.clone();
        let declared_args = declared_args.clone();
        FieldFuture::new(async move {
            let row = parent_row(&ctx)?;
            let (Some(target), Some(relation), Some(parent)) =
                (target, relation, row.get("id").and_then(Json::as_str))
            else {
                return Ok(None);
            };
            let child = shared.model.entity_at(target);
            let what = format!("`{}`", ctx.ctx.field().name());
            if let Err(e) = authorize(&ctx, child.read_scope(), true, &what) {
                return fail(&ctx, nullable, e);
            }
            let filter = match args::filter_from_args(
                &shared.model,
                &coerced_args(&ctx, &declared_args)[..],
                &list.filters,
                list.where_arg.as_ref(),
            ) {
                Ok(f) => f,
                Err(e) => return fail(&ctx, nullable, e),
            };
            let spec = Arc::new(CountSpec {
                sig: format!("{}\u{0}{}\u{0}{filter:?}", target.index(), relation.index()),
                target,
                relation,
                filter,
            });
            let loaders = ctx.data::<Loaders>()?;
            let key = CountKey {
                spec,
                parent: parent.to_string(),
            };
            match loaders.load_one(key).await {
                Ok(n) => Ok(Some(FieldValue::value(count_value(n.unwrap_or(0))))),
                Err(e) => fail(&ctx, nullable, from_store(&e)),
            }
        })
    });
    for a in &declared {
        field = field.argument(input_value(a));
    }
    field
}

/// A count as a GraphQL `Int` (32 bits): a count beyond it reads as the
/// largest `Int` rather than failing.
fn count_value(n: u64) -> Value {
    Value::from(count_int(n))
}

/// A count as a GraphQL `Int`: counts past its range read as its maximum.
pub(crate) fn count_int(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn root_field(shared: &Arc<Shared>, f: &RootField) -> Field {
    let shared2 = shared.clone();
    let rf = Arc::new(f.clone());
    // The entity's rows, resolved once (a field of an entity the Model lacks
    // resolves to null).
    let rows = shared.store.entity(&f.entity).ok();
    let nullable = !f.ty.is_non_null();
    let mut field = Field::new(&f.name, type_ref(&f.ty), move |ctx| {
        let shared = shared2.clone();
        let rf = rf.clone();
        let rows = rows.clone();
        FieldFuture::new(async move {
            let Some(rows) = rows else {
                return Ok(None);
            };
            // In a mutation request, the root fields run in its transaction,
            // one after the other; once one failed, the rest do not run (the
            // whole request is rolled back and answers its error).
            let rows = match ctx.data_opt::<WriteTxn>() {
                Some(txn) if txn.is_failed() => return Ok(None),
                Some(txn) => rows.within(txn),
                None => rows,
            };
            match resolve_root(&ctx, &shared, &rows, &rf).await {
                Ok(v) => Ok(v),
                Err(e) => fail(&ctx, nullable, e),
            }
        })
    });
    for a in &f.args {
        field = field.argument(input_value(a));
    }
    if let Some(d) = &f.description {
        field = field.description(d);
    }
    field
}

async fn resolve_root<'a>(
    ctx: &ResolverContext<'a>,
    shared: &Shared,
    store: &EntityStore,
    rf: &RootField,
) -> Result<Option<FieldValue<'a>>, Error> {
    let model = &shared.model;
    let entity = store.def();
    let name = entity.name.as_str();
    let access = model.root_access(rf);
    let what = if access.is_read {
        format!("`Query.{}`", rf.name)
    } else {
        format!("`Mutation.{}`", rf.name)
    };
    authorize(ctx, access.scope, access.is_read, &what)?;
    if !access.is_read {
        authorize_mutation(ctx, entity, rf, &what)?;
    }
    let args = coerced_args(ctx, &rf.args);
    let args = &args[..];
    match &rf.binding {
        Binding::List(list) => {
            let select = selection(ctx, entity);
            let q = args::list_query(model, args, list, shared.limits, Some(select))?;
            let rows = store
                .list(caller(ctx)?, &q)
                .await
                .map_err(|e| from_store(&e))?
                .rows
                .into_rows();
            Ok(Some(FieldValue::list(
                rows.into_iter().map(FieldValue::owned_any),
            )))
        }
        Binding::Connection(c) => {
            let select = node_selection(ctx, entity);
            let (q, page) = args::connection_query(model, args, c, shared.limits, Some(select))?;
            let access = caller(ctx)?;
            let found = store
                .page(access, &q, &page)
                .await
                .map_err(|e| from_store(&e))?;
            let cursors = found.cursors();
            let edges = cursors.into_iter().zip(found.rows.into_rows()).collect();
            Ok(Some(FieldValue::owned_any(ConnectionValue {
                edges,
                has_next_page: found.has_next_page,
                has_previous_page: found.has_previous_page,
                store: store.clone(),
                access: access.clone(),
                filter: q.filter,
            })))
        }
        Binding::Count(list) => {
            let filter =
                args::filter_from_args(model, args, &list.filters, list.where_arg.as_ref())?;
            let n = store
                .count(caller(ctx)?, filter.as_ref())
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::value(count_value(n))))
        }
        Binding::Lookup { filters, where_arg } => {
            let Some(filter) = args::filter_from_args(model, args, filters, where_arg.as_ref())?
            else {
                return Err(coded(
                    Code::BadUserInput,
                    format!(
                        "`{}` needs at least one non-null argument to find a `{name}` by",
                        rf.name
                    ),
                ));
            };
            let q = gatehouse_store::ListQuery {
                filter: Some(filter),
                limit: Some(2),
                select: Some(selection(ctx, entity)),
                ..Default::default()
            };
            let mut rows = store
                .list(caller(ctx)?, &q)
                .await
                .map_err(|e| from_store(&e))?
                .rows
                .into_rows();
            if rows.len() > 1 {
                return Err(coded(
                    Code::BadUserInput,
                    format!(
                        "more than one `{name}` matches the arguments of `{}`",
                        rf.name
                    ),
                ));
            }
            Ok(rows.pop().map(FieldValue::owned_any))
        }
        Binding::Create(input) => {
            let row = args::write_row(model, args, input);
            let created = store
                .insert(caller(ctx)?, row)
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::owned_any(created)))
        }
        Binding::Update { id_arg, input } => {
            let id = id_of(ctx, id_arg)?;
            let patch = args::write_row(model, args, input);
            let updated = store
                .update(caller(ctx)?, &id, patch)
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::owned_any(updated)))
        }
        Binding::Delete { id_arg, returns } => {
            let id = id_of(ctx, id_arg)?;
            match store
                .delete(caller(ctx)?, &id)
                .await
                .map_err(|e| from_store(&e))?
            {
                None => Err(coded(Code::NotFound, format!("no `{name}` with id `{id}`"))),
                Some(row) => Ok(Some(match returns {
                    DeleteReturn::Entity => FieldValue::owned_any(row),
                    DeleteReturn::Id => FieldValue::value(Value::from(id)),
                    DeleteReturn::Boolean => FieldValue::value(Value::from(true)),
                })),
            }
        }
        Binding::Upsert { input, on_conflict } => {
            let row = args::write_row(model, args, input);
            let key = args::Args::arg(args, on_conflict).map(args::to_json);
            let key: Vec<&str> = match &key {
                Some(Json::Array(items)) => items.iter().filter_map(Json::as_str).collect(),
                _ => Vec::new(),
            };
            let (row, _) = store
                .upsert(caller(ctx)?, row, &key)
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::owned_any(row)))
        }
        Binding::UpdateMany { where_arg, set } => {
            let filter = args::filter_from_args(model, args, &[], Some(where_arg))?;
            let patch = args::write_row(model, args, set);
            let rows = store
                .update_where(caller(ctx)?, filter.as_ref(), patch)
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::owned_any(BulkValue { rows })))
        }
        Binding::DeleteMany { where_arg } => {
            let filter = args::filter_from_args(model, args, &[], Some(where_arg))?;
            let rows = store
                .delete_where(caller(ctx)?, filter.as_ref())
                .await
                .map_err(|e| from_store(&e))?;
            Ok(Some(FieldValue::owned_any(BulkValue { rows })))
        }
        Binding::Subscribe { .. } => Ok(None),
    }
}

/// What a bulk write changed, as its result type's fields read it: the
/// rows as updated, or as they were before their delete.
struct BulkValue {
    rows: Vec<Row>,
}

/// A bulk result type: `count` and `rows` of what a bulk write changed.
fn bulk_result_object(r: &gatehouse_schema::BulkResult) -> Object {
    fn bulk<'a>(ctx: &ResolverContext<'a>) -> Option<&'a BulkValue> {
        ctx.parent_value.try_downcast_ref::<BulkValue>().ok()
    }
    let mut obj = Object::new(&r.name);
    if let Some(d) = &r.description {
        obj = obj.description(d);
    }
    obj.field(Field::new(
        "count",
        TypeRef::named_nn(TypeRef::INT),
        |ctx| {
            FieldFuture::Value(
                bulk(&ctx).map(|b| FieldValue::value(count_value(b.rows.len() as u64))),
            )
        },
    ))
    .field(Field::new(
        "rows",
        TypeRef::named_nn_list_nn(&r.entity),
        |ctx| {
            FieldFuture::Value(
                bulk(&ctx)
                    .map(|b| FieldValue::list(b.rows.iter().map(|r| FieldValue::borrowed_any(r)))),
            )
        },
    ))
}

/// A page of a connection, as its fields read it.
struct ConnectionValue {
    /// Each row with its cursor, in the list's order.
    edges: Vec<(String, Row)>,
    has_next_page: bool,
    has_previous_page: bool,
    /// What `totalCount` counts, when selected: the list's filter under the
    /// caller's policy (`EntityStore::count`, as `<list>Count`).
    store: EntityStore,
    access: AccessContext,
    filter: Option<Filter>,
}

/// The stored fields selected under `edges { node { … } }`, for every
/// `edges` and `node` selected (aliases included).
fn node_selection(ctx: &ResolverContext<'_>, entity: &Entity) -> Vec<String> {
    let mut names = Vec::new();
    for edges in ctx
        .ctx
        .field()
        .selection_set()
        .filter(|f| f.name() == "edges")
    {
        for node in edges.selection_set().filter(|f| f.name() == "node") {
            names.extend(node.selection_set().map(|f| f.name().to_string()));
        }
    }
    args::selected_fields(entity, names.iter().map(String::as_str))
}

fn connection_value<'a>(ctx: &ResolverContext<'a>) -> Result<&'a ConnectionValue, Error> {
    ctx.parent_value.try_downcast_ref::<ConnectionValue>()
}

/// The Relay `PageInfo` type (the loader supplies its declaration when the
/// schema has none).
fn page_info_object() -> Object {
    let field = |name: &str, ty: TypeRef, read: fn(&ConnectionValue) -> Value| {
        Field::new(name, ty, move |ctx| {
            FieldFuture::Value(
                connection_value(&ctx)
                    .ok()
                    .map(|c| FieldValue::value(read(c))),
            )
        })
    };
    fn cursor(edge: Option<&(String, Row)>) -> Value {
        edge.map_or(Value::Null, |(k, _)| Value::from(k.as_str()))
    }
    Object::new(gatehouse_schema::PAGE_INFO)
        .description(
            "Where a page of a connection lies in the whole list (Relay cursor connections).",
        )
        .field(field(
            "hasNextPage",
            TypeRef::named_nn(TypeRef::BOOLEAN),
            |c| Value::from(c.has_next_page),
        ))
        .field(field(
            "hasPreviousPage",
            TypeRef::named_nn(TypeRef::BOOLEAN),
            |c| Value::from(c.has_previous_page),
        ))
        .field(field("startCursor", TypeRef::named(TypeRef::STRING), |c| {
            cursor(c.edges.first())
        }))
        .field(field("endCursor", TypeRef::named(TypeRef::STRING), |c| {
            cursor(c.edges.last())
        }))
}

/// A connection type: its edges, its page info and the total count of
/// the rows its filter matches.
fn connection_object(c: &gatehouse_schema::Connection) -> Object {
    let mut obj = Object::new(&c.name);
    if let Some(d) = &c.description {
        obj = obj.description(d);
    }
    obj = obj
        .field(Field::new("edges", type_ref(&c.edges), |ctx| {
            FieldFuture::Value(connection_value(&ctx).ok().map(|conn| {
                FieldValue::list(conn.edges.iter().map(|e| FieldValue::borrowed_any(e)))
            }))
        }))
        .field(Field::new("pageInfo", type_ref(&c.page_info), |ctx| {
            FieldFuture::Value(
                connection_value(&ctx)
                    .ok()
                    .map(|conn| FieldValue::borrowed_any(conn)),
            )
        }));
    if let Some(ty) = &c.total_count {
        let nullable = !ty.is_non_null();
        obj = obj.field(Field::new("totalCount", type_ref(ty), move |ctx| {
            FieldFuture::new(async move {
                let conn = connection_value(&ctx)?;
                match conn.store.count(&conn.access, conn.filter.as_ref()).await {
                    Ok(n) => Ok(Some(FieldValue::value(count_value(n)))),
                    Err(e) => fail(&ctx, nullable, from_store(&e)),
                }
            })
        }));
    }
    obj
}

/// An edge type: a row and its cursor.
fn edge_object(c: &gatehouse_schema::Connection) -> Object {
    let mut obj = Object::new(&c.edge);
    if let Some(d) = &c.edge_description {
        obj = obj.description(d);
    }
    obj.field(Field::new("cursor", type_ref(&c.cursor), |ctx| {
        FieldFuture::Value(edge_of(&ctx).map(|(k, _)| FieldValue::value(Value::from(k.as_str()))))
    }))
    .field(Field::new("node", type_ref(&c.node), |ctx| {
        FieldFuture::Value(edge_of(&ctx).map(|(_, row)| FieldValue::borrowed_any(row)))
    }))
}

/// The edge (cursor and row) an edge field reads.
fn edge_of<'a>(ctx: &ResolverContext<'a>) -> Option<&'a (String, Row)> {
    ctx.parent_value.try_downcast_ref::<(String, Row)>().ok()
}

/// What a mutation needs beyond the entity's write scope, checked before it
/// writes anything: the fields it returns need the entity's read scope (a
/// write-only caller may select only `id`). Which fields the caller may set
/// or compare is the store's decision (`Model::field_write_scope`,
/// `Model::field_read_scope`).
fn authorize_mutation(
    ctx: &ResolverContext<'_>,
    entity: &Entity,
    rf: &RootField,
    what: &str,
) -> Result<(), Error> {
    let field = ctx.ctx.field();
    let beyond_id = |f: async_graphql::SelectionField<'_>| {
        f.selection_set()
            .any(|f| f.name() != "id" && f.name() != "__typename")
    };
    let reads = match &rf.binding {
        Binding::Delete { returns, .. } => {
            matches!(returns, DeleteReturn::Entity) && beyond_id(field)
        }
        // A bulk result's rows: the same, for every `rows` selected.
        Binding::UpdateMany { .. } | Binding::DeleteMany { .. } => field
            .selection_set()
            .filter(|f| f.name() == "rows")
            .any(beyond_id),
        _ => beyond_id(field),
    };
    if reads {
        authorize(
            ctx,
            entity.read_scope(),
            true,
            &format!("reading the result of {what} (beyond `id`)"),
        )?;
    }
    Ok(())
}

fn id_of(ctx: &ResolverContext<'_>, arg: &str) -> Result<String, Error> {
    ctx.args.try_get(arg)?.string().map(str::to_string)
}

fn subscription_field(shared: &Arc<Shared>, f: &RootField) -> SubscriptionField {
    let store = shared.store.clone();
    let rows = shared.store.entity(&f.entity).ok();
    let entity = f.entity.clone();
    let scope = shared.model.root_access(f).scope.to_string();
    let what = format!("`Subscription.{}`", f.name);
    let (kind, filters) = match &f.binding {
        Binding::Subscribe { event, filters } => (*event, filters.clone()),
        _ => (ChangeKind::Created, Vec::new()),
    };
    let declared_args = f.args.clone();
    let mut field = SubscriptionField::new(&f.name, type_ref(&f.ty), move |ctx| {
        let store = store.clone();
        let rows = rows.clone();
        let entity = entity.clone();
        let access = match caller(&ctx) {
            Ok(a) => a.clone(),
            Err(e) => {
                return SubscriptionFieldFuture::new(async move {
                    Err::<futures::stream::Empty<Result<Value, Error>>, _>(e)
                });
            }
        };
        if let Err(e) = authorize(&ctx, &scope, true, &what) {
            // The error ends the stream before it starts; async-graphql adds
            // the field's path, so transports report it as an execution error.
            return SubscriptionFieldFuture::new(async move {
                Err::<futures::stream::Empty<Result<Value, Error>>, _>(e)
            });
        }
        // Equality filters, applied on the server to each event's row.
        let given = coerced_args(&ctx, &declared_args);
        let wanted: Vec<(String, Json)> = filters
            .iter()
            .filter_map(|flt| {
                args::Args::arg(&given[..], &flt.arg).map(|v| (flt.field.clone(), args::to_json(v)))
            })
            .collect();
        // Which fields the caller may compare is the store's rule, as for
        // lists and lookups: matching events by a field it may not read
        // would tell that field's values.
        let compared = Filter::And(
            wanted
                .iter()
                .map(|(field, value)| Filter::eq(field.clone(), value.clone()))
                .collect(),
        );
        if let Some(rows) = &rows
            && let Err(e) = rows.may_compare(&access, Some(&compared), &[])
        {
            let e = from_store(&e);
            return SubscriptionFieldFuture::new(async move {
                Err::<futures::stream::Empty<Result<Value, Error>>, _>(e)
            });
        }
        SubscriptionFieldFuture::new(async move {
            let rx = store.subscribe();
            // `None` once the feed has ended: the stream ends after its last item.
            Ok(futures::stream::unfold(Some(rx), move |state| {
                let entity = entity.clone();
                let wanted = wanted.clone();
                let rows = rows.clone();
                let access = access.clone();
                async move {
                    let mut rx = state?;
                    loop {
                        match rx.recv().await {
                            Ok(ev) if ev.entity == entity && ev.kind == kind => {
                                let row = if kind == ChangeKind::Deleted {
                                    ev.old
                                } else {
                                    ev.new
                                };
                                if let Some(row) = row
                                    && wanted
                                        .iter()
                                        .all(|(f, v)| row.get(f).unwrap_or(&Json::Null) == v)
                                {
                                    // Only rows the subscriber may read (the
                                    // store decides, as for every read).
                                    let visible = match &rows {
                                        Some(rows) => rows.visible(&access, &row).await,
                                        None => Ok(false),
                                    };
                                    match visible {
                                        Ok(true) => {
                                            return Some((
                                                Ok(FieldValue::owned_any(row)),
                                                Some(rx),
                                            ));
                                        }
                                        Ok(false) => {}
                                        Err(e) => return Some((Err(from_store(&e)), Some(rx))),
                                    }
                                }
                            }
                            Ok(_) => {}
                            // Events were missed either way: the subscription
                            // ends with `FEED_INTERRUPTED` (what to do: subscribe
                            // again), never goes on past a gap.
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                                let e = coded(
                                    Code::FeedInterrupted,
                                    format!(
                                        "the subscriber fell behind and missed {n} events; subscribe again"
                                    ),
                                );
                                return Some((Err(e), None));
                            }
                            // The store ended the feed: its PostgreSQL listener
                            // lost its connection, and other instances' events
                            // of that gap are lost (or the store closed).
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                let e = coded(
                                    Code::FeedInterrupted,
                                    "the change feed was interrupted and events may have been missed; subscribe again",
                                );
                                return Some((Err(e), None));
                            }
                        }
                    }
                }
            }))
        })
    });
    for a in &f.args {
        field = field.argument(input_value(a));
    }
    if let Some(d) = &f.description {
        field = field.description(d);
    }
    field
}
