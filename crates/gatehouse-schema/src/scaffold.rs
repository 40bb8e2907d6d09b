//! `gatehouse schema scaffold`: the root fields and input types the
//! conventions would bind for a schema's entities, as SDL to copy; and the
//! root types of a schema that declares none, generated at load from the
//! same function.

use std::fmt::Write;

use heck::ToLowerCamelCase;

use crate::model::{COUNT_SUFFIX, Entity, FilterOp, Model, Quantifier, Scalar, ValueType};

/// SDL declaring, for every entity: a list query with paging, filters,
/// `where` and `orderBy`, and its count; a connection (cursor pages) with
/// its types; a lookup by id; a count beside
/// each to-many field (as `extend type`); create/update/delete mutations with
/// input types; and the three change subscriptions.
pub fn scaffold(model: &Model) -> String {
    let mut query = String::new();
    let mut mutation = String::new();
    let mut subscription = String::new();
    let mut types = String::new();
    let mut counts = String::new();
    for e in &model.entities {
        let n = &e.name;
        let one = n.to_lower_camel_case();
        let plural = crate::default_rest_path(n).to_lower_camel_case();
        let many = if plural == one {
            format!("{one}List")
        } else {
            plural
        };
        let _ = writeln!(
            query,
            "  {many}(first: Int, offset: Int, where: {n}Where, orderBy: [{n}OrderBy!]): [{n}!]!\n  {many}Count(where: {n}Where): Int!\n  {one}(id: ID!): {n}"
        );
        connection(model, e, &many, &mut query, &mut types);
        count_fields(model, e, &mut counts);
        let _ = writeln!(
            mutation,
            "  create{n}(input: {n}CreateInput!): {n}!\n  update{n}(id: ID!, input: {n}UpdateInput!): {n}!\n  delete{n}(id: ID!): {n}"
        );
        let _ = writeln!(
            subscription,
            "  {one}Created: {n}!\n  {one}Updated: {n}!\n  {one}Deleted: {n}!"
        );
        // A `where` input, `orderBy` enum or write input the schema
        // already declares is used as it is, not declared again.
        if model.input(&format!("{n}Where")).is_none() {
            where_input(model, e, &mut types);
        }
        if model.enum_def(&format!("{n}OrderBy")).is_none() {
            order_enum(e, &mut types);
        }
        write_inputs(model, e, &mut types);
    }
    let mut out = String::new();
    let _ = writeln!(out, "type Query {{\n{query}}}\n");
    let _ = writeln!(out, "type Mutation {{\n{mutation}}}\n");
    let _ = writeln!(out, "type Subscription {{\n{subscription}}}\n");
    out.push_str(&counts);
    out.push_str(&types);
    out
}

/// `booksConnection`, a Relay connection of the entity, and its
/// connection and edge types unless the schema has them (`PageInfo` is
/// supplied when undeclared). Left out when a stored type has the name.
fn connection(model: &Model, e: &Entity, many: &str, query: &mut String, types: &mut String) {
    let n = &e.name;
    let (conn, edge) = (format!("{n}Connection"), format!("{n}Edge"));
    if model.entity(&conn).is_some() || model.entity(&edge).is_some() {
        return;
    }
    let _ = writeln!(
        query,
        "  {many}Connection(first: Int, after: String, last: Int, before: String, where: {n}Where, orderBy: [{n}OrderBy!]): {conn}!"
    );
    if model.connection(&conn).is_none() {
        let _ = writeln!(
            types,
            "type {conn} {{\n  edges: [{edge}!]!\n  pageInfo: PageInfo!\n  totalCount: Int!\n}}\n\ntype {edge} {{\n  cursor: String!\n  node: {n}!\n}}\n"
        );
    }
}

/// `booksCount` beside each to-many field `books` that has no count yet,
/// as an extension of the entity's type.
fn count_fields(model: &Model, e: &Entity, out: &mut String) {
    let mut fields = String::new();
    for f in e.to_many_fields() {
        if e.count_field_of(&f.name).is_some() {
            continue;
        }
        let Some(target) = model.target_of(f) else {
            continue;
        };
        let _ = writeln!(
            fields,
            "  {}{COUNT_SUFFIX}(where: {}Where): Int!",
            f.name, target.name
        );
    }
    if !fields.is_empty() {
        let _ = writeln!(out, "extend type {} {{\n{fields}}}\n", e.name);
    }
}

fn where_input(model: &Model, e: &Entity, out: &mut String) {
    let n = &e.name;
    let _ = writeln!(out, "input {n}Where {{");
    for f in e.stored_fields() {
        let Some(vt) = f.filter_type() else { continue };
        let t = vt.graphql_name();
        // Ids are opaque: equality and sets are what users filter them by,
        // though orderings and text operators would bind.
        let is_id = vt == ValueType::Scalar(Scalar::Id);
        for &op in f.filter_ops() {
            let suggested = match op {
                // Last, and only where the field can be null.
                FilterOp::IsNull => false,
                _ if is_id && !f.is_list() => !op.is_ordering() && !op.is_text(),
                _ => true,
            };
            if !suggested {
                continue;
            }
            let name = &f.name;
            let suffix = op.suffix();
            if op.takes_list() {
                let _ = writeln!(out, "  {name}{suffix}: [{t}!]");
            } else {
                let _ = writeln!(out, "  {name}{suffix}: {t}");
            }
        }
        if !f.required && f.filter_ops().contains(&FilterOp::IsNull) {
            let _ = writeln!(out, "  {}_is_null: Boolean", f.name);
        }
    }
    // Filters through each to-many relation, with the target's `where`
    // input (the schema's own when it declares one by that name).
    for f in e.to_many_fields() {
        let Some(target) = model.target_of(f) else {
            continue;
        };
        for (suffix, _) in Quantifier::ALL {
            let name = format!("{}{suffix}", f.name);
            if e.field(&name).is_none() {
                let _ = writeln!(out, "  {name}: {}Where", target.name);
            }
        }
    }
    let _ = writeln!(
        out,
        "  AND: [{n}Where!]\n  OR: [{n}Where!]\n  NOT: {n}Where\n}}\n"
    );
}

fn order_enum(e: &Entity, out: &mut String) {
    let _ = writeln!(out, "enum {}OrderBy {{", e.name);
    for f in e.fields.iter().filter(|f| f.is_orderable()) {
        let _ = writeln!(out, "  {0}_ASC\n  {0}_DESC", f.name);
    }
    let _ = writeln!(out, "}}\n");
}

fn write_inputs(model: &Model, e: &Entity, out: &mut String) {
    for (suffix, create) in [("CreateInput", true), ("UpdateInput", false)] {
        if model.input(&format!("{}{suffix}", e.name)).is_some() {
            continue;
        }
        let _ = writeln!(out, "input {}{suffix} {{", e.name);
        for f in e.stored_fields() {
            // Owner fields are write-once: an update input leaves them out.
            if !create && !e.settable_on_update(f) {
                continue;
            }
            let Some(ty) = f.input_type() else { continue };
            let bang = if create && e.required_on_create(f) {
                "!"
            } else {
                ""
            };
            let _ = writeln!(out, "  {}: {ty}{bang}", f.name);
        }
        if create {
            // Nested create: the loader adds these to a create input.
            for f in e.to_many_fields() {
                if model.inverse_of(f).is_some() {
                    let input = crate::bind::nested::input_name(&e.name, &f.name);
                    let _ = writeln!(
                        out,
                        "  # {}: [{input}!] (new rows created with it; added by gatehouse)",
                        f.name
                    );
                }
            }
        }
        let _ = writeln!(out, "}}\n");
    }
}
