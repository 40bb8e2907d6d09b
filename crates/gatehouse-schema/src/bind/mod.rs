//! Binding: from the apollo schema to the [`Model`], by the conventions of
//! `docs/design/schema-conventions.md`. Every problem becomes a diagnostic; binding goes on after a
//! problem so one run reports everything.
//!
//! One [`Binder`] carries the state every step shares; each concern adds its
//! methods to it in its own file:
//! - `entities.rs`: stored types, their fields, columns, tables and REST paths;
//! - `relations.rs`: to-many fields and the to-one field each inverts;
//! - `policies.rs`: `@policy` rules and every form of `@auth`;
//! - `connections.rs`: Relay connection, edge and `PageInfo` types;
//! - `roots.rs`: the Query, Mutation and Subscription conventions;
//! - `arguments.rs`: list arguments, filters, `where` inputs, `orderBy` enums
//!   and create/update inputs;
//! - `nested.rs`: nested create, the input types of new children;
//! - `accounts.rs`: the `@account` type and its `@claim` fields;
//! - `bulk.rs`: upsert and bulk writes, and the result type of the latter.
//!
//! This file holds the driver, which runs the steps in the order their
//! inputs need, and the conversions from apollo's AST every step uses.

mod accounts;
mod arguments;
mod bulk;
mod connections;
mod entities;
pub(crate) mod nested;
mod policies;
mod relations;
mod roots;

use std::collections::HashMap;

use apollo_compiler::ast::{self, InputValueDefinition, Type};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::{ExtendedType, ObjectType};
use apollo_compiler::{Node, Schema};

use crate::diag::{Diagnostic, Diagnostics};
use crate::load::at;
use crate::model::*;

pub use entities::{RESERVED_TABLE_PREFIX, default_rest_path};
pub use policies::{bind_filter, valid_scope};

const ROOTS: [&str; 3] = ["Query", "Mutation", "Subscription"];

pub(crate) struct Binder<'a> {
    schema: &'a Schema,
    diags: &'a mut Diagnostics,
    entities: Vec<Entity>,
    /// Every relation field's relation, pushed as its field is bound.
    relations: Vec<Relation>,
    /// Each stored type's id, known before any is bound, so a to-one field
    /// can name a type declared after it.
    entity_ids: HashMap<String, EntityId>,
    where_inputs: Vec<WhereInput>,
    order_enums: Vec<OrderEnum>,
    /// Relay connection types, bound after the entities.
    connections: Vec<Connection>,
    /// Bulk result types, bound after the entities.
    bulk_results: Vec<BulkResult>,
    /// The schema's enums, collected first: `@policy` literals are checked
    /// against them.
    enums: Vec<EnumDef>,
    /// Inputs/enums already checked, with the entity they were bound to.
    checked_where: HashMap<String, Option<String>>,
    checked_order: HashMap<String, Option<String>>,
    /// Declared inputs of nested children already checked, by (input,
    /// child type, field pointing back), with the result.
    checked_nested: HashMap<(String, String, String), bool>,
}

impl<'a> Binder<'a> {
    pub(crate) fn new(schema: &'a Schema, diags: &'a mut Diagnostics) -> Self {
        Self {
            schema,
            diags,
            entities: Vec::new(),
            relations: Vec::new(),
            entity_ids: HashMap::new(),
            where_inputs: Vec::new(),
            order_enums: Vec::new(),
            connections: Vec::new(),
            bulk_results: Vec::new(),
            enums: schema
                .types
                .values()
                .filter_map(|t| match t {
                    ExtendedType::Enum(e) if !t.is_built_in() && e.name != ON_DELETE_ENUM => {
                        Some(EnumDef {
                            name: e.name.to_string(),
                            values: e.values.keys().map(|v| v.to_string()).collect(),
                            description: e.description.as_ref().map(|d| d.to_string()),
                        })
                    }
                    _ => None,
                })
                .collect(),
            checked_where: HashMap::new(),
            checked_order: HashMap::new(),
            checked_nested: HashMap::new(),
        }
    }

    /// A binder over a Model already bound, for a rule written outside the
    /// schema ([`bind_filter`]); `schema` holds only that rule's source.
    pub(crate) fn over(schema: &'a Schema, diags: &'a mut Diagnostics, model: &Model) -> Self {
        let mut b = Binder::new(schema, diags);
        b.entities = model.entities.clone();
        b.relations = model.relations.clone();
        b.entity_ids = model
            .entities
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), EntityId::from_index(i)))
            .collect();
        b.enums = model.enums.clone();
        b
    }

    fn error(&mut self, loc: Option<SourceSpan>, message: String, hint: Option<String>) {
        let d: Diagnostic = at(&self.schema.sources, loc, message, hint);
        self.diags.0.push(d);
    }

    /// Runs the steps in dependency order: every entity's own fields first,
    /// so that relations, policies and root fields can name any entity.
    pub(crate) fn bind(mut self) -> Model {
        let schema = self.schema;
        let shaped: Vec<(&Node<ObjectType>, connections::Shape)> = schema
            .types
            .values()
            .filter_map(|t| match t {
                ExtendedType::Object(o)
                    if !t.is_built_in() && !ROOTS.contains(&o.name.as_str()) =>
                {
                    Some((o, connections::shape_of(o)))
                }
                _ => None,
            })
            .collect();
        let of_shape = |want: connections::Shape| -> Vec<&Node<ObjectType>> {
            shaped
                .iter()
                .filter(|(_, s)| *s == want)
                .map(|(o, _)| *o)
                .collect()
        };
        let objects = of_shape(connections::Shape::Entity);

        self.entity_ids = objects
            .iter()
            .enumerate()
            .map(|(i, o)| (o.name.to_string(), EntityId::from_index(i)))
            .collect();
        for obj in &objects {
            let entity = self.entity_pass1(obj);
            self.entities.push(entity);
        }
        self.check_entity_names(&objects);
        for (i, obj) in objects.iter().enumerate() {
            self.entity_pass2(i, obj);
        }
        for (i, obj) in objects.iter().enumerate() {
            self.bind_counts(i, obj);
        }
        for (i, obj) in objects.iter().enumerate() {
            self.entities[i].policy = self.bind_policy(obj);
        }
        let account = self.bind_account(&objects);
        for page_info in of_shape(connections::Shape::PageInfo) {
            self.bind_page_info(page_info);
        }
        self.bind_connections(
            &of_shape(connections::Shape::Connection),
            &of_shape(connections::Shape::Edge),
        );

        self.bind_bulk_results(&of_shape(connections::Shape::BulkResult));

        let queries = self.root_fields("Query");
        let mut mutations = self.root_fields("Mutation");
        let subscriptions = self.root_fields("Subscription");

        let mut inputs: Vec<InputObject> = schema
            .types
            .values()
            .filter_map(|t| match t {
                ExtendedType::InputObject(i) if !t.is_built_in() => Some(InputObject {
                    name: i.name.to_string(),
                    fields: i.fields.values().map(|f| input_value(f)).collect(),
                    description: i.description.as_ref().map(|d| d.to_string()),
                }),
                _ => None,
            })
            .collect();
        let added = self.nested_creates(&mut mutations, &mut inputs);
        // With errors, root fields may have failed to bind: no guess then.
        if !self.diags.has_errors() {
            self.warn_unreached(&objects, [&queries, &mutations, &subscriptions]);
        }

        Model {
            entities: self.entities,
            relations: self.relations,
            enums: self.enums,
            inputs,
            where_inputs: self.where_inputs,
            order_enums: self.order_enums,
            connections: self.connections,
            bulk_results: self.bulk_results,
            queries,
            mutations,
            subscriptions,
            sdl: nested::printed(schema, &added),
            warnings: Vec::new(),
            account,
        }
    }

    /// Warns about each entity that no root field returns and no relation
    /// leads to from one: GraphQL cannot read it (REST still serves it), a
    /// root field the author likely forgot when writing the roots by hand.
    fn warn_unreached(&mut self, objects: &[&Node<ObjectType>], roots: [&Vec<RootField>; 3]) {
        let mut reached = vec![false; self.entities.len()];
        let mut queue: Vec<usize> = roots
            .iter()
            .flat_map(|fields| fields.iter())
            .filter_map(|r| self.entities.iter().position(|e| e.name == r.entity))
            .collect();
        while let Some(i) = queue.pop() {
            if std::mem::replace(&mut reached[i], true) {
                continue;
            }
            for f in &self.entities[i].fields {
                if let Some(t) = f
                    .relation()
                    .and_then(|r| self.relations.get(r.index()))
                    .map(|r| r.target.index())
                    .filter(|t| !reached[*t])
                {
                    queue.push(t);
                }
            }
        }
        for (i, obj) in objects.iter().enumerate() {
            if reached.get(i).copied().unwrap_or(true) {
                continue;
            }
            let e = &self.entities[i];
            let mut d = at(
                &self.schema.sources,
                obj.location(),
                format!(
                    "type `{}` is returned by no root field and reached by no relation \
                     from one: GraphQL cannot read it (REST serves it at /v1/{})",
                    e.name, e.rest_path
                ),
                Some(
                    "add its root fields (`gatehouse schema scaffold` prints them), or a \
                     relation to it from a type that has them"
                        .into(),
                ),
            );
            d.severity = crate::Severity::Warning;
            self.diags.0.push(d);
        }
    }

    /// A problem that does not stop the schema from serving.
    fn warn(&mut self, loc: Option<SourceSpan>, message: String, hint: Option<String>) {
        let mut d: Diagnostic = at(&self.schema.sources, loc, message, hint);
        d.severity = crate::Severity::Warning;
        self.diags.0.push(d);
    }

    /// The entity named `name`, if it is one: relations, policies and
    /// arguments name their entity by its type name.
    fn entity_named(&self, name: &str) -> Option<&Entity> {
        self.entities.iter().find(|e| e.name == name)
    }

    /// The entity a relation field reaches, once bound.
    fn target_of(&self, f: &Field) -> Option<&Entity> {
        let r = self.relations.get(f.relation()?.index())?;
        self.entities.get(r.target.index())
    }

    /// A new relation declared by a field of the entity being bound; its
    /// field's position is set once the entity's fields are
    /// ([`Binder::place_relations`]).
    fn add_relation(&mut self, target: EntityId, kind: RelationKind) -> RelationId {
        let id = RelationId::from_index(self.relations.len());
        let entity = EntityId::from_index(self.entities.len());
        self.relations.push(Relation {
            field: FieldId::new(entity, usize::MAX),
            target,
            kind,
        });
        id
    }

    /// Points each relation of the entity being bound at its field.
    fn place_relations(&mut self, fields: &[Field]) {
        let entity = EntityId::from_index(self.entities.len());
        for (i, f) in fields.iter().enumerate() {
            // A count field names the relation of the field it counts.
            if matches!(f.kind, FieldKind::Count { .. }) {
                continue;
            }
            if let Some(r) = f.relation().and_then(|r| self.relations.get_mut(r.index())) {
                r.field = FieldId::new(entity, i);
            }
        }
    }
}

// ---- from apollo's AST -----------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListShape {
    Single,
    List { items_required: bool },
    Nested,
}

fn list_shape(ty: &Type) -> ListShape {
    if !ty.is_list() {
        return ListShape::Single;
    }
    let item = ty.item_type();
    if item.is_list() {
        ListShape::Nested
    } else {
        ListShape::List {
            items_required: item.is_non_null(),
        }
    }
}

fn list_items(shape: ListShape) -> Option<ListItems> {
    match shape {
        ListShape::List { items_required } => Some(ListItems { items_required }),
        _ => None,
    }
}

pub(crate) fn type_ref(ty: &Type) -> TypeRef {
    TypeRef::read(ty, |t| {
        let layer = match t {
            Type::Named(n) | Type::NonNullNamed(n) => TypeLayer::Named(n.as_str()),
            Type::List(item) | Type::NonNullList(item) => TypeLayer::List(item.as_ref()),
        };
        (t.is_non_null(), layer)
    })
}

fn input_value(v: &InputValueDefinition) -> InputValue {
    InputValue {
        name: v.name.to_string(),
        ty: type_ref(&v.ty),
        default: v.default_value.as_ref().map(|d| const_value(d)),
        description: desc(&v.description),
    }
}

fn const_value(v: &ast::Value) -> ConstValue {
    match v {
        ast::Value::Null | ast::Value::Variable(_) => ConstValue::Null,
        ast::Value::Enum(n) => ConstValue::Enum(n.to_string()),
        ast::Value::String(s) => ConstValue::String(s.clone()),
        ast::Value::Float(f) => ConstValue::Float(f.try_to_f64().unwrap_or(f64::NAN)),
        ast::Value::Int(i) => match i.as_str().parse::<i64>() {
            Ok(n) => ConstValue::Int(n),
            Err(_) => ConstValue::Float(i.try_to_f64().unwrap_or(f64::NAN)),
        },
        ast::Value::Boolean(b) => ConstValue::Boolean(*b),
        ast::Value::List(items) => ConstValue::List(items.iter().map(|i| const_value(i)).collect()),
        ast::Value::Object(fields) => ConstValue::Object(
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), const_value(v)))
                .collect(),
        ),
    }
}

fn desc(d: &Option<Node<str>>) -> Option<String> {
    d.as_ref().map(|d| d.to_string())
}

fn is_id_bang(ty: &Type) -> bool {
    matches!(ty, Type::NonNullNamed(n) if n == "ID")
}
