//! Relay connections: `type BookConnection { edges: [BookEdge!]! pageInfo:
//! PageInfo! totalCount: Int! }`, `type BookEdge { cursor: String! node:
//! Book! }` and `PageInfo` are shapes of a paged answer, not stored types.
//! They are told apart from entities before entities are bound (by name,
//! and by having no `id`), checked here, and recorded on the Model as
//! [`Connection`]s for root fields to return.

use apollo_compiler::Node;
use apollo_compiler::ast::{FieldDefinition, Type};
use apollo_compiler::schema::{ExtendedType, ObjectType};

use super::{Binder, desc, type_ref};
use crate::model::*;

const CONNECTION_SUFFIX: &str = "Connection";
const EDGE_SUFFIX: &str = "Edge";

const CONNECTION_HINT: &str = "a connection is `type BookConnection { edges: [BookEdge!]! pageInfo: PageInfo! totalCount: Int! }` (`totalCount` may be left out)";
const EDGE_HINT: &str = "an edge is `type BookEdge { cursor: String! node: Book! }`";
const PAGE_INFO_HINT: &str = "declare it `type PageInfo { hasNextPage: Boolean! hasPreviousPage: Boolean! startCursor: String endCursor: String }`, or leave it out and gatehouse supplies it";

/// What a non-root object type is, by its name and fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A stored type.
    Entity,
    /// `PageInfo`: the name is the Relay one, whatever its fields.
    PageInfo,
    /// A type without `id` named `<X>Connection`.
    Connection,
    /// A type without `id` named `<X>Edge`.
    Edge,
    /// A type without `id` named `<X>BulkResult` (`bulk.rs`).
    BulkResult,
}

/// The shape of `obj`: a type that has an `id` field is stored, whatever
/// its name (an entity may be called `Connection`).
pub(super) fn shape_of(obj: &ObjectType) -> Shape {
    let name = obj.name.as_str();
    if name == PAGE_INFO {
        return Shape::PageInfo;
    }
    if obj.fields.contains_key("id") {
        return Shape::Entity;
    }
    if super::bulk::is_bulk_result(obj) {
        return Shape::BulkResult;
    }
    match name {
        n if n.len() > CONNECTION_SUFFIX.len() && n.ends_with(CONNECTION_SUFFIX) => {
            Shape::Connection
        }
        n if n.len() > EDGE_SUFFIX.len() && n.ends_with(EDGE_SUFFIX) => Shape::Edge,
        _ => Shape::Entity,
    }
}

/// `ty` as a plain named type (nullable or not), or `None` for a list.
fn single(ty: &Type) -> Option<&str> {
    (!ty.is_list()).then(|| ty.inner_named_type().as_str())
}

impl Binder<'_> {
    /// Checks `PageInfo`: exactly the four Relay fields, with their types.
    pub(super) fn bind_page_info(&mut self, obj: &Node<ObjectType>) {
        for field in obj.fields.values() {
            let wanted = PAGE_INFO_FIELDS
                .iter()
                .find(|(n, _)| *n == field.name.as_str());
            match wanted {
                None => self.error(
                    field.location(),
                    format!(
                        "`PageInfo.{}` is not a field of the Relay `PageInfo`",
                        field.name
                    ),
                    Some(PAGE_INFO_HINT.into()),
                ),
                Some((_, ty)) if field.ty.to_string() != *ty => self.error(
                    field.location(),
                    format!(
                        "`PageInfo.{}` must be `{ty}`, found `{}`",
                        field.name, field.ty
                    ),
                    Some(PAGE_INFO_HINT.into()),
                ),
                Some(_) => self.no_arguments("PageInfo", field),
            }
        }
        for (name, ty) in PAGE_INFO_FIELDS {
            if !obj.fields.contains_key(name) {
                self.error(
                    obj.location(),
                    format!("`PageInfo` has no `{name}: {ty}` field"),
                    Some(PAGE_INFO_HINT.into()),
                );
            }
        }
    }

    fn no_arguments(&mut self, owner: &str, field: &Node<FieldDefinition>) {
        if let Some(a) = field.arguments.first() {
            self.error(
                a.location(),
                format!("`{owner}.{}` takes no arguments", field.name),
                None,
            );
        }
    }

    /// The entity an edge type's `node` is, with the declared types of
    /// `cursor` and `node`, after checking the edge.
    fn bind_edge(&mut self, obj: &Node<ObjectType>) -> Option<(String, TypeRef, TypeRef)> {
        let name = obj.name.as_str();
        let mut node = None;
        let mut cursor = None;
        let mut has_cursor = false;
        for field in obj.fields.values() {
            self.no_arguments(name, field);
            match field.name.as_str() {
                "cursor" => {
                    has_cursor = true;
                    cursor = Some(type_ref(&field.ty));
                    if single(&field.ty) != Some("String") {
                        self.error(
                            field.location(),
                            format!("`{name}.cursor` must be `String!`, found `{}`", field.ty),
                            Some(EDGE_HINT.into()),
                        );
                    }
                }
                "node" => {
                    let entity = single(&field.ty).and_then(|t| self.entity_named(t));
                    match entity {
                        Some(e) => node = Some((e.name.clone(), type_ref(&field.ty))),
                        None => self.error(
                            field.location(),
                            format!("`{name}.node` must be a stored type, found `{}`", field.ty),
                            Some(EDGE_HINT.into()),
                        ),
                    }
                }
                other => self.error(
                    field.location(),
                    format!("`{name}.{other}` is not a field of a Relay edge"),
                    Some(EDGE_HINT.into()),
                ),
            }
        }
        if !has_cursor {
            self.error(
                obj.location(),
                format!("edge type `{name}` has no `cursor: String!` field"),
                Some(EDGE_HINT.into()),
            );
        }
        if !obj.fields.contains_key("node") {
            self.error(
                obj.location(),
                format!("edge type `{name}` has no `node` field"),
                Some(EDGE_HINT.into()),
            );
        }
        let ((entity, node), cursor) = (node?, cursor?);
        Some((entity, cursor, node))
    }

    /// Checks every connection and edge type and records each connection
    /// whose shape is right. An edge no connection lists is an error: it
    /// binds to nothing.
    pub(super) fn bind_connections(
        &mut self,
        connections: &[&Node<ObjectType>],
        edges: &[&Node<ObjectType>],
    ) {
        let mut edge_nodes = Vec::with_capacity(edges.len());
        for edge in edges {
            let node = self.bind_edge(edge);
            edge_nodes.push((*edge, node));
        }
        let mut used = vec![false; edges.len()];
        for obj in connections {
            let name = obj.name.as_str();
            let mut edge = None;
            let mut edges_ty = None;
            let mut page_info = None;
            let mut total_count = None;
            for field in obj.fields.values() {
                self.no_arguments(name, field);
                match field.name.as_str() {
                    "edges" => {
                        let item = field.ty.item_type();
                        let found = (field.ty.is_list() && !item.is_list())
                            .then(|| {
                                edge_nodes
                                    .iter()
                                    .position(|(e, _)| e.name == *item.inner_named_type())
                            })
                            .flatten();
                        match found {
                            Some(i) => {
                                used[i] = true;
                                edge = Some(i);
                                edges_ty = Some(type_ref(&field.ty));
                            }
                            None => self.error(
                                field.location(),
                                format!(
                                    "`{name}.edges` must be a list of an edge type, found `{}`",
                                    field.ty
                                ),
                                Some(CONNECTION_HINT.into()),
                            ),
                        }
                    }
                    "pageInfo" => {
                        page_info = Some(type_ref(&field.ty));
                        if single(&field.ty) != Some(PAGE_INFO) {
                            self.error(
                                field.location(),
                                format!(
                                    "`{name}.pageInfo` must be `PageInfo!`, found `{}`",
                                    field.ty
                                ),
                                Some(CONNECTION_HINT.into()),
                            );
                        }
                    }
                    "totalCount" => {
                        total_count = Some(type_ref(&field.ty));
                        if single(&field.ty) != Some("Int") {
                            self.error(
                                field.location(),
                                format!("`{name}.totalCount` must be `Int!`, found `{}`", field.ty),
                                Some(CONNECTION_HINT.into()),
                            );
                        }
                    }
                    other => self.error(
                        field.location(),
                        format!("`{name}.{other}` is not a field of a Relay connection"),
                        Some(CONNECTION_HINT.into()),
                    ),
                }
            }
            if !obj.fields.contains_key("edges") {
                self.error(
                    obj.location(),
                    format!("connection type `{name}` has no `edges` field"),
                    Some(CONNECTION_HINT.into()),
                );
            }
            if page_info.is_none() {
                self.error(
                    obj.location(),
                    format!("connection type `{name}` has no `pageInfo: PageInfo!` field"),
                    Some(CONNECTION_HINT.into()),
                );
            }
            let Some((edge_obj, Some((entity, cursor, node)))) =
                edge.map(|i| edge_nodes[i].clone())
            else {
                continue;
            };
            let (Some(edges), Some(page_info)) = (edges_ty, page_info) else {
                continue;
            };
            self.connections.push(Connection {
                name: name.to_string(),
                description: desc(&obj.description),
                entity,
                edge: edge_obj.name.to_string(),
                edge_description: desc(&edge_obj.description),
                edges,
                page_info,
                total_count,
                cursor,
                node,
            });
        }
        for ((edge, _), used) in edge_nodes.iter().zip(used) {
            if !used {
                self.error(
                    edge.location(),
                    format!(
                        "`{}` looks like a Relay edge type (no `id`, named `…Edge`), but no connection lists it",
                        edge.name
                    ),
                    Some(format!(
                        "list it in a connection's `edges`, or give it `id: ID!` to store it; {CONNECTION_HINT}"
                    )),
                );
            }
        }
    }

    /// Whether `name` is a connection type's name (a shape, bound or not).
    pub(super) fn is_connection_shape(&self, name: &str) -> bool {
        matches!(
            self.schema.types.get(name),
            Some(ExtendedType::Object(o)) if shape_of(o) == Shape::Connection
        )
    }
}
