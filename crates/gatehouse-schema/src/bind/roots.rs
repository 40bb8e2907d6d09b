//! Root fields: each field of Query, Mutation and Subscription binds by
//! convention to one entity: a list or a lookup; a create, update or
//! delete; a created, updated or deleted event. A field that fits no
//! convention is an error naming the conventions.

use apollo_compiler::Node;
use apollo_compiler::ast::{FieldDefinition, InputValueDefinition, Type};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::ExtendedType;
use heck::ToLowerCamelCase;

use super::arguments::{COUNT_ARGS, OFFSET_ARGS};
use super::{Binder, ListShape, desc, input_value, is_id_bang, list_shape, type_ref};
use crate::model::*;

const CREATE_PREFIXES: [&str; 3] = ["create", "add", "insert"];
const DELETE_PREFIXES: [&str; 2] = ["delete", "remove"];

const QUERY_HINT: &str = "a query field lists a type (`books(first: Int, offset: Int): [Book!]!`), pages through a connection (`booksConnection(first: Int, after: String): BookConnection!`), looks one up (`book(id: ID!): Book`) or counts a list (`booksCount(where: BookWhere): Int!` beside `books`)";
const MUTATION_HINT: &str = "mutation names are create|add|insert<Type>, update<Type>, delete|remove<Type> or upsert<Type>, e.g. `createBook`, `updateBook`, `deleteBook`, `upsertBook`, and update<Types> or delete<Types> returning `<Type>BulkResult!` (`updateBooks`, `deleteBooks`)";
/// Mutation names of sign-up and sign-in, which the OAuth server owns.
const SIGN_IN_NAMES: [&str; 7] = [
    "signup",
    "signin",
    "login",
    "logout",
    "register",
    "authenticate",
    "signout",
];
pub(super) const SIGN_IN_HINT: &str = "signing up and signing in are the OAuth server's: users sign up on its sign-up page and get tokens from `POST /oauth/token`, so the API needs no mutation for it";
/// Names of fields that usually record who acted (a vote's `user`, a
/// link's `postedBy`), for the hint that says how to fill them safely.
const ACTOR_NAMES: [&str; 6] = ["user", "owner", "postedBy", "createdBy", "voter", "userId"];
const SUBSCRIPTION_HINT: &str = "subscription fields are `<type>Created`, `<type>Updated` or `<type>Deleted` returning the type, e.g. `bookCreated: Book!`";

/// A mutation field being bound to `entity`: what its diagnostics name.
struct MutationSite<'x> {
    field: &'x Node<FieldDefinition>,
    name: &'x str,
    /// `Mutation.<name>`.
    fname: String,
    loc: Option<SourceSpan>,
    entity: Entity,
    args: Vec<&'x Node<InputValueDefinition>>,
}

/// What a mutation's name says it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MutationKind {
    Create,
    Update,
    Delete,
    Upsert,
}

/// A mutation name's kind and the type name after its prefix
/// (`createBook` -> create `Book`).
fn mutation_kind(name: &str) -> Option<(MutationKind, String)> {
    let split = |prefixes: &[&str]| {
        prefixes
            .iter()
            .find_map(|p| {
                name.strip_prefix(p)
                    .filter(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
            })
            .map(str::to_string)
    };
    if let Some(t) = split(&CREATE_PREFIXES) {
        Some((MutationKind::Create, t))
    } else if let Some(t) = split(&["update"]) {
        Some((MutationKind::Update, t))
    } else if let Some(t) = split(&["upsert"]) {
        Some((MutationKind::Upsert, t))
    } else {
        split(&DELETE_PREFIXES).map(|t| (MutationKind::Delete, t))
    }
}

impl Binder<'_> {
    /// Binds every field of the root type `root`; a field that binds to
    /// nothing is left out of the Model after its diagnostic.
    pub(super) fn root_fields(&mut self, root: &str) -> Vec<RootField> {
        let schema = self.schema;
        let Some(ExtendedType::Object(obj)) = schema.types.get(root) else {
            return Vec::new();
        };
        if let Some(d) = obj.directives.iter().next() {
            self.error(
                d.location(),
                format!("`@{}` on the root type `{root}` is not supported", d.name),
                Some("put `@auth(scope:)` on individual root fields".into()),
            );
        }
        let mut out = Vec::new();
        for field in obj.fields.values() {
            let bound = match root {
                "Query" => self.bind_query(field),
                "Mutation" => self.bind_mutation(field),
                _ => self.bind_subscription(field),
            };
            let scope = self.root_scope(root, field);
            if let Some((entity, binding)) = bound {
                out.push(RootField {
                    name: field.name.to_string(),
                    description: desc(&field.description),
                    entity,
                    args: field.arguments.iter().map(|a| input_value(a)).collect(),
                    ty: type_ref(&field.ty),
                    scope,
                    binding,
                });
            }
        }
        out
    }

    fn entity_of(&self, ty: &Type) -> Option<&Entity> {
        self.entity_named(ty.inner_named_type().as_str())
    }

    /// `booksCount: Int!` beside the list `Query.books`: `None` when the
    /// field has not that shape (it binds as another query then).
    fn bind_root_count(
        &mut self,
        field: &Node<FieldDefinition>,
    ) -> Option<Option<(String, Binding)>> {
        let counted = field.name.as_str().strip_suffix(COUNT_SUFFIX)?;
        if counted.is_empty() || field.ty.is_list() || field.ty.inner_named_type() != "Int" {
            return None;
        }
        let Some(ExtendedType::Object(query)) = self.schema.types.get("Query") else {
            return None;
        };
        let list = query.fields.get(counted)?;
        if !list.ty.is_list() {
            return None;
        }
        let entity = self.entity_of(&list.ty)?.name.clone();
        let fname = format!("Query.{}", field.name);
        let args: Vec<&Node<InputValueDefinition>> = field.arguments.iter().collect();
        let bound = self.bind_count_args(&entity, &args, &fname);
        Some(Some((entity, Binding::Count(bound))))
    }

    /// A query field: a list of an entity, or a lookup of one row.
    fn bind_query(&mut self, field: &Node<FieldDefinition>) -> Option<(String, Binding)> {
        if let Some(count) = self.bind_root_count(field) {
            return count;
        }
        let fname = format!("Query.{}", field.name);
        let loc = field.location();
        if self.is_connection_shape(field.ty.inner_named_type()) {
            return self.bind_connection(field, &fname);
        }
        let shape = list_shape(&field.ty);
        let Some(entity) = self.entity_of(&field.ty).map(|e| e.name.clone()) else {
            if self.schema.types.contains_key(field.ty.inner_named_type()) {
                self.error(
                    loc,
                    format!(
                        "`{fname}` returns `{}`, which binds to no convention",
                        field.ty
                    ),
                    Some(format!("{QUERY_HINT}; there are no resolvers of your own, so remove a field that computes anything else")),
                );
            }
            return None;
        };
        let args: Vec<&Node<InputValueDefinition>> = field.arguments.iter().collect();
        match shape {
            ListShape::Nested => {
                self.error(
                    loc,
                    format!("`{fname}` returns a list of lists"),
                    Some(QUERY_HINT.into()),
                );
                None
            }
            ListShape::List { .. } => {
                let list = self.bind_list_args(&entity, &args, &fname);
                Some((entity, Binding::List(list)))
            }
            ListShape::Single => self.bind_lookup(field, &fname, entity, &args),
        }
    }

    /// A query field returning a connection: `first`/`after`,
    /// `last`/`before`, filters, `where` and `orderBy`; never an offset
    /// (a page is addressed by its cursor).
    fn bind_connection(
        &mut self,
        field: &Node<FieldDefinition>,
        fname: &str,
    ) -> Option<(String, Binding)> {
        let loc = field.location();
        let ty_name = field.ty.inner_named_type().as_str();
        if field.ty.is_list() {
            self.error(
                loc,
                format!("`{fname}` returns a list of connections"),
                Some(format!(
                    "declare it `{}(first: Int, after: String): {ty_name}!`",
                    field.name
                )),
            );
            return None;
        }
        // A connection whose shape is wrong was reported where it is declared.
        let connection = self.connections.iter().find(|c| c.name == ty_name)?.clone();
        let entity = connection.entity.clone();
        let mut binding = ConnectionBinding {
            connection: connection.name,
            ..ConnectionBinding::default()
        };
        let mut rest = Vec::new();
        for arg in &field.arguments {
            let aname = arg.name.as_str();
            let (slot, ty) = match aname {
                "first" => (None, "Int"),
                "last" => (Some(&mut binding.last), "Int"),
                "after" => (Some(&mut binding.after), "String"),
                "before" => (Some(&mut binding.before), "String"),
                _ if COUNT_ARGS.contains(&aname) || OFFSET_ARGS.contains(&aname) => {
                    self.error(
                        arg.location(),
                        format!("argument `{aname}` of `{fname}`: a connection pages with `first`/`after` and `last`/`before`"),
                        Some("a page is addressed by its cursor, not by an offset or another count".into()),
                    );
                    continue;
                }
                _ => {
                    rest.push(arg);
                    continue;
                }
            };
            if arg.ty.is_list() || arg.ty.inner_named_type() != ty {
                self.error(
                    arg.location(),
                    format!(
                        "argument `{aname}` of `{fname}` must be `{ty}`, found `{}`",
                        arg.ty
                    ),
                    Some(format!("declare it `{aname}: {ty}`")),
                );
                continue;
            }
            match slot {
                Some(slot) => *slot = Some(aname.to_string()),
                None => rest.push(arg),
            }
        }
        binding.list = self.bind_list_args(&entity, &rest, fname);
        Some((entity, Binding::Connection(binding)))
    }

    /// A query field returning one row: its arguments are equality (or
    /// suffixed) filters and `where`, never paging or ordering.
    fn bind_lookup(
        &mut self,
        field: &Node<FieldDefinition>,
        fname: &str,
        entity: String,
        args: &[&Node<InputValueDefinition>],
    ) -> Option<(String, Binding)> {
        if let Some((list, target)) = self.page_wrapper(&entity) {
            self.error(
                field.location(),
                format!("`{fname}` returns `{entity}`, a page of `{target}` rows (`{entity}.{list}`) with their count"),
                Some(format!(
                    "return the rows and count them beside: `{0}(...): [{target}!]!` and `{0}Count(...): Int!` (the same filters, no paging), then remove `{entity}`",
                    field.name
                )),
            );
            return None;
        }
        if args.is_empty() {
            self.error(
                field.location(),
                format!("`{fname}` returns one `{entity}` but takes no argument to find it by"),
                Some(format!(
                    "look it up by id: `{}(id: ID!): {entity}`, or return `[{entity}!]!` to list them",
                    field.name
                )),
            );
            return None;
        }
        let mut filters = Vec::new();
        let mut where_arg = None;
        for arg in args {
            let aname = arg.name.as_str();
            if COUNT_ARGS.contains(&aname) || OFFSET_ARGS.contains(&aname) || aname == "orderBy" {
                self.error(
                    arg.location(),
                    format!("argument `{aname}` of `{fname}`: a lookup returns one row, so paging and ordering do not apply"),
                    Some(format!("return `[{entity}!]!` to bind a list")),
                );
            } else if aname == "where" {
                where_arg = self.bind_where_arg(&entity, arg, fname);
            } else if let Some(f) = self.bind_filter(&entity, aname, &arg.ty, arg.location(), fname)
            {
                filters.push(f);
            }
        }
        Some((entity, Binding::Lookup { filters, where_arg }))
    }

    /// A mutation field, by its name's prefix and the entity after it.
    fn bind_mutation(&mut self, field: &Node<FieldDefinition>) -> Option<(String, Binding)> {
        let name = field.name.as_str();
        let fname = format!("Mutation.{name}");
        let loc = field.location();
        let Some((kind, type_name)) = mutation_kind(name) else {
            let returned = field.ty.inner_named_type().as_str();
            let hint = if SIGN_IN_NAMES.contains(&name.to_ascii_lowercase().as_str()) {
                format!(
                    "{SIGN_IN_HINT}; remove `{name}` (and `{returned}` if nothing else returns it)"
                )
            } else if let Some(e) = self.entity_named(returned) {
                let mut hint = format!(
                    "{MUTATION_HINT}; for a field returning `{0}`: `create{0}` (its fields as arguments or one input object), `update{0}(id: ID!, ...)` or `delete{0}(id: ID!)`",
                    e.name
                );
                // A create that takes the acting user as an argument lets
                // any caller act as anyone (a vote "by" another user):
                // point at the owner-field idiom instead.
                if let Some(f) = e
                    .fields
                    .iter()
                    .find(|f| ACTOR_NAMES.contains(&f.name.as_str()))
                {
                    hint.push_str(&format!(
                        "; do not take `{0}` as an argument (any caller could act as anyone): store the caller as `{0}: String` and write `@policy(create: {{{0}: \"$sub\"}})` on `{1}`, which fills it from the token",
                        f.name, e.name
                    ));
                }
                hint
            } else {
                MUTATION_HINT.into()
            };
            self.error(
                loc,
                format!("`{fname}` fits no mutation convention"),
                Some(hint),
            );
            return None;
        };
        // A bulk write is told by what it returns (`<Type>BulkResult`).
        let returned = field.ty.inner_named_type().as_str();
        if let Some(result) = self
            .bulk_results
            .iter()
            .find(|b| b.name == returned)
            .cloned()
        {
            return match kind {
                MutationKind::Update | MutationKind::Delete => self.bind_bulk(
                    field,
                    &fname,
                    kind == MutationKind::Update,
                    &type_name,
                    &result,
                ),
                _ => {
                    self.error(
                        loc,
                        format!("`{fname}` returns `{returned}`, which only bulk updates and deletes return"),
                        Some(MUTATION_HINT.into()),
                    );
                    None
                }
            };
        }
        // A bulk result whose shape is wrong was reported where it is declared.
        if matches!(self.schema.types.get(returned), Some(ExtendedType::Object(o)) if super::bulk::is_bulk_result(o))
        {
            return None;
        }
        let Some(entity) = self.entity_named(&type_name).cloned() else {
            self.error(
                loc,
                format!("`{fname}` names the type `{type_name}`, which is not a stored type"),
                Some(format!(
                    "{MUTATION_HINT}; the name ends with the type's exact name"
                )),
            );
            return None;
        };
        let site = MutationSite {
            field,
            name,
            fname,
            loc,
            entity,
            args: field.arguments.iter().collect(),
        };
        if kind == MutationKind::Delete {
            return self.bind_delete(site);
        }
        if kind == MutationKind::Upsert {
            return self.bind_upsert(field, &site.fname, &site.entity);
        }
        let entity = &site.entity;
        if field.ty.inner_named_type().as_str() != entity.name || field.ty.is_list() {
            self.error(
                loc,
                format!(
                    "`{}` must return `{}`, found `{}`",
                    site.fname, entity.name, field.ty
                ),
                Some(format!("declare it `{name}(...): {}!`", entity.name)),
            );
            return None;
        }
        if kind == MutationKind::Create {
            let input = self.bind_write_input(entity, &site.args, &site.fname, true, loc)?;
            Some((site.entity.name, Binding::Create(input)))
        } else {
            self.bind_update(site)
        }
    }

    /// An update: `id: ID!` finds the row, the other arguments set it.
    fn bind_update(&mut self, site: MutationSite<'_>) -> Option<(String, Binding)> {
        let (name, fname, loc) = (site.name, &site.fname, site.loc);
        let Some(id) = site.args.iter().position(|a| a.name == "id") else {
            self.error(
                loc,
                format!("`{fname}` has no `id: ID!` argument to find the row to update"),
                Some(format!(
                    "declare it `{name}(id: ID!, ...): {}!`",
                    site.entity.name
                )),
            );
            return None;
        };
        if !is_id_bang(&site.args[id].ty) {
            self.error(
                site.args[id].location(),
                format!(
                    "argument `id` of `{fname}` must be `ID!`, found `{}`",
                    site.args[id].ty
                ),
                None,
            );
            return None;
        }
        let rest: Vec<_> = site
            .args
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != id)
            .map(|(_, a)| *a)
            .collect();
        if rest.is_empty() {
            self.error(
                loc,
                format!("`{fname}` takes only `id`, so it has nothing to update"),
                Some(format!(
                    "add the fields of `{}` to set, or one input object argument",
                    site.entity.name
                )),
            );
            return None;
        }
        let input = self.bind_write_input(&site.entity, &rest, fname, false, loc)?;
        Some((
            site.entity.name,
            Binding::Update {
                id_arg: "id".into(),
                input,
            },
        ))
    }

    /// A delete: takes exactly `id: ID!`, returns the row, its id or a
    /// Boolean.
    fn bind_delete(&mut self, site: MutationSite<'_>) -> Option<(String, Binding)> {
        let (field, name, fname, loc) = (site.field, site.name, &site.fname, site.loc);
        let entity = &site.entity;
        let ret = field.ty.inner_named_type().as_str();
        let returns = if ret == entity.name && !field.ty.is_list() {
            DeleteReturn::Entity
        } else if ret == "ID" && !field.ty.is_list() {
            DeleteReturn::Id
        } else if ret == "Boolean" && !field.ty.is_list() {
            DeleteReturn::Boolean
        } else {
            self.error(
                loc,
                format!(
                    "`{fname}` must return `{}`, `ID` or `Boolean`, found `{}`",
                    entity.name, field.ty
                ),
                None,
            );
            return None;
        };
        match site.args.as_slice() {
            [a] if is_id_bang(&a.ty) => Some((
                entity.name.clone(),
                Binding::Delete {
                    id_arg: a.name.to_string(),
                    returns,
                },
            )),
            _ => {
                self.error(
                    loc,
                    format!("`{fname}` must take exactly one argument, `id: ID!`"),
                    Some(format!("declare it `{name}(id: ID!): {}`", entity.name)),
                );
                None
            }
        }
    }

    /// A subscription field: `<type>Created|Updated|Deleted` returning the
    /// type, with equality filters as arguments.
    fn bind_subscription(&mut self, field: &Node<FieldDefinition>) -> Option<(String, Binding)> {
        let name = field.name.as_str();
        let fname = format!("Subscription.{name}");
        let loc = field.location();
        let parsed = [
            ChangeKind::Created,
            ChangeKind::Updated,
            ChangeKind::Deleted,
        ]
        .into_iter()
        .find_map(|k| name.strip_suffix(k.suffix()).map(|p| (k, p.to_string())));
        let entity = parsed.as_ref().and_then(|(_, prefix)| {
            self.entities
                .iter()
                .find(|e| e.name.to_lower_camel_case() == *prefix)
                .map(|e| e.name.clone())
        });
        let (Some((event, _)), Some(entity)) = (parsed, entity) else {
            let hint = match self.entity_named(field.ty.inner_named_type()) {
                Some(e) => format!(
                    "{SUBSCRIPTION_HINT}; for a field returning `{0}`: `{1}Created: {0}!`, `{1}Updated: {0}!` or `{1}Deleted: {0}!`",
                    e.name,
                    e.name.to_lower_camel_case()
                ),
                None => SUBSCRIPTION_HINT.into(),
            };
            self.error(
                loc,
                format!("`{fname}` fits no subscription convention"),
                Some(hint),
            );
            return None;
        };
        if field.ty.inner_named_type() != entity.as_str() || field.ty.is_list() {
            self.error(
                loc,
                format!("`{fname}` must return `{entity}`, found `{}`", field.ty),
                Some(format!("declare it `{name}: {entity}!`")),
            );
            return None;
        }
        let filters = self.subscription_filters(field, &entity, &fname);
        Some((entity, Binding::Subscribe { event, filters }))
    }

    /// A subscription's arguments: equality filters only, which the server
    /// applies to each event's row.
    fn subscription_filters(
        &mut self,
        field: &Node<FieldDefinition>,
        entity: &str,
        fname: &str,
    ) -> Vec<Filter> {
        let mut filters = Vec::new();
        for arg in &field.arguments {
            let Some(f) =
                self.bind_filter(entity, arg.name.as_str(), &arg.ty, arg.location(), fname)
            else {
                continue;
            };
            if f.op == FilterOp::Eq {
                filters.push(f);
            } else {
                self.error(
                    arg.location(),
                    format!(
                        "argument `{}` of `{fname}`: subscription arguments are equality filters",
                        arg.name
                    ),
                    Some(
                        "name the argument after a field of the type, with no operator suffix"
                            .into(),
                    ),
                );
            }
        }
        filters
    }
}
