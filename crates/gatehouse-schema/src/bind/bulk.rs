//! Upsert and bulk writes: `upsert<Type>(input:, onConflict:)`,
//! `update<Types>(where:, set:)` and `delete<Types>(where:)`, and the
//! result type the bulk ones return,
//! `type <Type>BulkResult { count: Int! rows: [<Type>!]! }`, which is a
//! shape of an answer (no `id`), not a stored type.

use apollo_compiler::Node;
use apollo_compiler::ast::FieldDefinition;
use apollo_compiler::schema::{ExtendedType, ObjectType};

use super::{Binder, desc};
use crate::model::*;

fn result_hint(entity: &str) -> String {
    format!(
        "a bulk result is `type {entity}{BULK_RESULT_SUFFIX} {{ count: Int! rows: [{entity}!]! }}`"
    )
}

/// Whether `obj` is a bulk result type by its shape: no `id`, named
/// `<X>BulkResult`.
pub(super) fn is_bulk_result(obj: &ObjectType) -> bool {
    let name = obj.name.as_str();
    !obj.fields.contains_key("id")
        && name.len() > BULK_RESULT_SUFFIX.len()
        && name.ends_with(BULK_RESULT_SUFFIX)
}

impl Binder<'_> {
    /// Checks each bulk result type (`count: Int!` and `rows: [<Type>!]!`
    /// of the entity its name begins with) and records those that are right.
    pub(super) fn bind_bulk_results(&mut self, objects: &[&Node<ObjectType>]) {
        for obj in objects {
            let name = obj.name.as_str();
            let entity = name.strip_suffix(BULK_RESULT_SUFFIX).unwrap_or(name);
            if self.entity_named(entity).is_none() {
                self.error(
                    obj.location(),
                    format!(
                        "`{name}` looks like a bulk result (no `id`, named `…{BULK_RESULT_SUFFIX}`), but `{entity}` is not a stored type"
                    ),
                    Some(format!(
                        "name it after the type whose rows it holds, or give it `id: ID!` to store it; {}",
                        result_hint("Book")
                    )),
                );
                continue;
            }
            let mut ok = true;
            for (field, want) in [
                ("count", "Int!".to_string()),
                ("rows", format!("[{entity}!]!")),
            ] {
                match obj.fields.get(field) {
                    Some(f) if f.ty.to_string() == want && f.arguments.is_empty() => {}
                    Some(f) => {
                        ok = false;
                        self.error(
                            f.location(),
                            format!(
                                "`{name}.{field}` must be `{want}` with no arguments, found `{}`",
                                f.ty
                            ),
                            Some(result_hint(entity)),
                        );
                    }
                    None => {
                        ok = false;
                        self.error(
                            obj.location(),
                            format!("bulk result `{name}` has no `{field}: {want}` field"),
                            Some(result_hint(entity)),
                        );
                    }
                }
            }
            for f in obj.fields.values() {
                if f.name != "count" && f.name != "rows" {
                    ok = false;
                    self.error(
                        f.location(),
                        format!("`{name}.{}` is not a field of a bulk result", f.name),
                        Some(result_hint(entity)),
                    );
                }
            }
            if ok {
                self.bulk_results.push(BulkResult {
                    name: name.to_string(),
                    description: desc(&obj.description),
                    entity: entity.to_string(),
                });
            }
        }
    }

    /// `upsert<Type>(input: <Type>CreateInput!, onConflict: [<Type>UniqueField!]!): <Type>!`:
    /// the create input, and a list of an enum whose values are fields of
    /// the type's unique keys ([`Entity::unique_key_fields`]); which key a
    /// request names is checked when it runs ([`Entity::unique_key`]).
    pub(super) fn bind_upsert(
        &mut self,
        field: &Node<FieldDefinition>,
        fname: &str,
        entity: &Entity,
    ) -> Option<(String, Binding)> {
        let n = &entity.name;
        let hint = format!(
            "declare it `{}(input: {n}CreateInput!, onConflict: [{n}UniqueField!]!): {n}!` with `enum {n}UniqueField` listing fields of its unique keys",
            field.name
        );
        if field.ty.inner_named_type().as_str() != n || field.ty.is_list() {
            self.error(
                field.location(),
                format!("`{fname}` must return `{n}`, found `{}`", field.ty),
                Some(hint),
            );
            return None;
        }
        let mut on_conflict = None;
        let mut rest = Vec::new();
        for a in &field.arguments {
            if a.name == "onConflict" {
                on_conflict = Some(a);
            } else {
                rest.push(a);
            }
        }
        let Some(key) = on_conflict else {
            self.error(
                field.location(),
                format!(
                    "`{fname}` has no `onConflict` argument naming the unique key to match rows by"
                ),
                Some(hint),
            );
            return None;
        };
        let tname = key.ty.inner_named_type().as_str();
        let Some(ExtendedType::Enum(en)) = self.schema.types.get(tname) else {
            self.error(
                key.location(),
                format!("argument `onConflict` of `{fname}` must be a list of an enum of `{n}`'s unique fields, found `{}`", key.ty),
                Some(hint),
            );
            return None;
        };
        if !key.ty.is_list() || key.ty.item_type().is_list() {
            self.error(
                key.location(),
                format!(
                    "argument `onConflict` of `{fname}` must be a list, found `{}`",
                    key.ty
                ),
                Some(hint),
            );
            return None;
        }
        let keyed: Vec<String> = entity
            .unique_key_fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let mut ok = true;
        for v in en.values.keys() {
            if !keyed.iter().any(|k| k == v.as_str()) {
                ok = false;
                self.error(
                    en.values.get(v).and_then(|d| d.location()),
                    format!("`{tname}.{v}` is not a field of a unique key of `{n}`"),
                    Some(format!(
                        "its values are fields of `{n}` that are the id, `@unique`, or in an `@unique(fields:)` key: {}",
                        keyed.join(", ")
                    )),
                );
            }
        }
        let input = self.bind_write_input(entity, &rest, fname, true, field.location());
        if !ok {
            return None;
        }
        Some((
            n.clone(),
            Binding::Upsert {
                input: input?,
                on_conflict: key.name.to_string(),
            },
        ))
    }

    /// `update<Types>(where: <Type>Where!, set: <Type>UpdateInput!)` or
    /// `delete<Types>(where: <Type>Where!)` returning `<Type>BulkResult!`,
    /// `<Types>` being [`Entity::bulk_name`].
    pub(super) fn bind_bulk(
        &mut self,
        field: &Node<FieldDefinition>,
        fname: &str,
        update: bool,
        named: &str,
        result: &BulkResult,
    ) -> Option<(String, Binding)> {
        let entity = self.entity_named(&result.entity)?.clone();
        let n = &entity.name;
        let many = entity.bulk_name();
        let verb = if update { "update" } else { "delete" };
        let shape = if update {
            format!(
                "update{many}(where: {n}Where!, set: {n}UpdateInput!): {}!",
                result.name
            )
        } else {
            format!("delete{many}(where: {n}Where!): {}!", result.name)
        };
        if named != many {
            self.error(
                field.location(),
                format!("`{fname}` returns `{}`, so it must be named `{verb}{many}` (after the REST collection of `{n}`)", result.name),
                Some(format!("declare it `{shape}`")),
            );
            return None;
        }
        if field.ty.is_list() {
            self.error(
                field.location(),
                format!(
                    "`{fname}` must return `{}!`, found `{}`",
                    result.name, field.ty
                ),
                Some(format!("declare it `{shape}`")),
            );
            return None;
        }
        let mut where_arg = None;
        let mut set = None;
        let mut ok = true;
        for a in &field.arguments {
            match a.name.as_str() {
                "where" => where_arg = self.bind_where_arg(n, a, fname),
                "set" if update => {
                    set = self.bind_write_input(&entity, &[a], fname, false, a.location());
                    if !matches!(set, Some(WriteInput::Object { .. })) {
                        ok = false;
                    }
                }
                other => {
                    ok = false;
                    self.error(
                        a.location(),
                        format!("`{fname}` takes no argument `{other}`"),
                        Some(format!("declare it `{shape}`")),
                    );
                }
            }
        }
        let Some(where_arg) = where_arg else {
            if !field.arguments.iter().any(|a| a.name == "where") {
                self.error(
                    field.location(),
                    format!("`{fname}` has no `where` argument selecting its rows"),
                    Some(format!("declare it `{shape}`")),
                );
            }
            return None;
        };
        if !ok {
            return None;
        }
        let binding = if update {
            let Some(set) = set else {
                self.error(
                    field.location(),
                    format!("`{fname}` has no `set` argument with the values to write"),
                    Some(format!("declare it `{shape}`")),
                );
                return None;
            };
            Binding::UpdateMany { where_arg, set }
        } else {
            Binding::DeleteMany { where_arg }
        };
        Some((n.clone(), binding))
    }
}
