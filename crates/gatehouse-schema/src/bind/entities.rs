//! Entities: each object type other than the roots is a stored collection.
//! Its fields are bound here in the first pass, to-many fields as
//! placeholders that `relations.rs` resolves once every entity is known;
//! then the names the storage and REST layers derive from it (columns,
//! tables, paths) are checked for clashes and length.

use std::collections::HashMap;

use apollo_compiler::Node;
use apollo_compiler::ast::{self, FieldDefinition};
use apollo_compiler::schema::{ExtendedType, ObjectType};
use heck::{ToKebabCase, ToSnakeCase};

use super::{Binder, ListShape, ROOTS, desc, is_id_bang, list_items, list_shape, type_ref};
use crate::model::*;
use crate::policy::Policy;

/// PostgreSQL truncates identifiers longer than this.
const MAX_IDENT: usize = 63;
/// Table-name prefix reserved for gatehouse's own tables.
pub const RESERVED_TABLE_PREFIX: &str = "_gatehouse";

impl Binder<'_> {
    /// Stored fields and to-many placeholders; relations resolved in pass 2.
    pub(super) fn entity_pass1(&mut self, obj: &Node<ObjectType>) -> Entity {
        let name = obj.name.to_string();
        let mut fields = Vec::new();
        let mut id_field = None;
        for field in obj.fields.values() {
            if field.name == "id" {
                id_field = Some(self.id_field(&name, field));
            } else if let Some(f) = self.entity_field(&name, field) {
                fields.push(f);
            }
        }
        match id_field {
            Some(id) => fields.insert(0, id),
            None if obj.fields.contains_key("token") => self.error(
                obj.location(),
                format!("type `{name}` has no `id: ID!` field"),
                Some(format!(
                    "`{name}` holds a `token`, the answer of a sign-in: {}; remove `{name}` and the fields returning it",
                    super::roots::SIGN_IN_HINT
                )),
            ),
            None => self.error(
                obj.location(),
                format!("type `{name}` has no `id: ID!` field"),
                Some("every object type other than Query, Mutation and Subscription is a stored collection and needs `id: ID!`".into()),
            ),
        }

        self.mark_account_fields(obj, &mut fields);
        self.place_relations(&fields);
        self.check_field_renames(&name, obj);
        let table = name.to_snake_case();
        let renamed_from =
            renamed_from(obj.directives.get("renamed").map(|c| &c.node)).map(|(from, _)| Renamed {
                sql: from.to_snake_case(),
                name: from,
            });
        let rest_path = self.rest_path(&name, obj);
        let auth = self.type_auth(&name, &obj.directives);
        self.check_columns(&name, obj, &fields);
        self.check_table(&name, obj, &table);
        let unique_keys = self.unique_keys(&name, &table, obj, &fields);
        Entity {
            name,
            table,
            rest_path,
            description: desc(&obj.description),
            fields,
            auth,
            policy: Policy::default(),
            renamed_from,
            unique_keys,
        }
    }

    /// `@unique(fields: [...])` on the type: each key names at least two
    /// distinct stored fields (a to-one field stands for the referenced
    /// id), and no key is given twice.
    fn unique_keys(
        &mut self,
        name: &str,
        table: &str,
        obj: &Node<ObjectType>,
        fields: &[Field],
    ) -> Vec<UniqueKey> {
        let mut keys: Vec<UniqueKey> = Vec::new();
        for d in obj.directives.get_all("unique") {
            let loc = d.location();
            let Some(list) = d
                .specified_argument_by_name("fields")
                .and_then(|v| v.as_list())
            else {
                self.error(
                    loc,
                    format!("`@unique` on the type `{name}` names no fields"),
                    Some("list the fields whose values are unique together: `@unique(fields: [\"user\", \"link\"])`; for one field, put `@unique` on the field".into()),
                );
                continue;
            };
            let names: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
            let stored: Vec<&str> = fields
                .iter()
                .filter(|f| f.is_stored() && !matches!(f.kind, FieldKind::Id) && !f.is_list())
                .map(|f| f.name.as_str())
                .collect();
            let mut ok = true;
            let mut columns = Vec::new();
            for (i, fname) in names.iter().enumerate() {
                if names[..i].contains(fname) {
                    self.error(
                        loc,
                        format!("`@unique(fields:)` on `{name}` names `{fname}` twice"),
                        Some("name each field of the key once".into()),
                    );
                    ok = false;
                    continue;
                }
                let why = match fields.iter().find(|f| f.name == *fname) {
                    None => format!("`{name}` has no field `{fname}`"),
                    Some(f) if matches!(f.kind, FieldKind::Id) => {
                        format!("`{name}.id` is unique by itself")
                    }
                    Some(f) if !f.is_stored() => {
                        format!("`{name}.{fname}` is a to-many field, which is not stored")
                    }
                    Some(f) if f.is_list() => format!("`{name}.{fname}` is a list"),
                    Some(f) => {
                        columns.push(f.column.clone());
                        continue;
                    }
                };
                self.error(
                    loc,
                    format!("`@unique(fields:)` on `{name}`: {why}"),
                    Some(format!(
                        "a key names stored fields of `{name}` (values or to-one fields): {}",
                        stored.join(", ")
                    )),
                );
                ok = false;
            }
            if ok && names.len() < 2 {
                self.error(
                    loc,
                    format!("`@unique(fields:)` on `{name}` names fewer than two fields"),
                    Some(format!(
                        "for one field, write `@unique` on the field itself{}",
                        names.first().map_or(String::new(), |f| format!(" (`{f}`)"))
                    )),
                );
                ok = false;
            }
            if !ok {
                continue;
            }
            let key = UniqueKey {
                fields: names.iter().map(|f| f.to_string()).collect(),
                columns,
            };
            if keys.iter().any(|k| {
                let mut a = k.fields.clone();
                let mut b = key.fields.clone();
                a.sort();
                b.sort();
                a == b
            }) {
                self.error(
                    loc,
                    format!(
                        "`@unique(fields:)` on `{name}` repeats the key ({})",
                        key.fields.join(", ")
                    ),
                    Some("remove one of them".into()),
                );
                continue;
            }
            if key.index_name(table).len() > MAX_IDENT {
                self.error(
                    loc,
                    format!(
                        "the unique key ({}) of `{name}` gives an index name longer than {MAX_IDENT} bytes",
                        key.fields.join(", ")
                    ),
                    Some("use shorter field or type names".into()),
                );
                continue;
            }
            keys.push(key);
        }
        keys
    }

    /// The `id` field, which keys every stored type: `ID!`, no arguments,
    /// no `@auth` of its own (it is read with the row).
    fn id_field(&mut self, entity: &str, field: &Node<FieldDefinition>) -> Field {
        let loc = field.location();
        let field_auth = self.field_auth(entity, field);
        if !is_id_bang(&field.ty) {
            self.error(
                loc,
                format!("`{entity}.id` must be `ID!`, found `{}`", field.ty),
                Some("every stored type is keyed by `id: ID!`".into()),
            );
        }
        if !field.arguments.is_empty() {
            self.error(loc, format!("`{entity}.id` cannot take arguments"), None);
        }
        if field_auth != TypeAuth::default() {
            self.error(
                loc,
                format!("`@auth` on `{entity}.id`: the id is read with the row"),
                None,
            );
        }
        if let Some(d) = field.directives.get("renamed") {
            self.error(
                d.location(),
                format!("`@renamed` on `{entity}.id`: the id column is always `id`"),
                Some("remove `@renamed` from `id`".into()),
            );
        }
        Field {
            name: field.name.to_string(),
            column: "id".into(),
            description: desc(&field.description),
            kind: FieldKind::Id,
            required: true,
            unique: true,
            index: false,
            ty: type_ref(&field.ty),
            auth: TypeAuth::default(),
            generated: Some(Generated::Id),
            renamed_from: None,
            default: None,
            constraint: None,
        }
    }

    /// A field other than `id`, or `None` where its type binds to nothing
    /// (reported here or by the step that owns that type).
    fn entity_field(&mut self, entity: &str, field: &Node<FieldDefinition>) -> Option<Field> {
        // `@auth` is checked first, so its problems are reported even on a
        // field whose type is refused.
        let field_auth = self.field_auth(entity, field);
        let kind = self.field_kind(entity, field)?;
        self.check_field_use(entity, field, &kind, &field_auth);
        let generated = self.generated(entity, field, &kind);
        let fname = field.name.as_str();
        let column_of = |name: &str| match &kind {
            FieldKind::ToOne { .. } => format!("{}_id", name.to_snake_case()),
            FieldKind::ToMany { .. } | FieldKind::Count { .. } => String::new(),
            _ => name.to_snake_case(),
        };
        let column = column_of(fname);
        let renamed_from = match renamed_from(field.directives.get("renamed")) {
            Some((from, _)) if !column.is_empty() => Some(Renamed {
                sql: column_of(&from),
                name: from,
            }),
            Some((_, loc)) => {
                self.error(
                    loc,
                    format!(
                        "`@renamed` on `{entity}.{fname}`: a to-many field has no column to rename"
                    ),
                    Some("remove `@renamed`; rename the to-one field it lists instead".into()),
                );
                None
            }
            None => None,
        };
        let default = self.field_default(entity, field, &kind, generated);
        let constraint = self.field_constraint(entity, field, &kind);
        Some(Field {
            name: fname.to_string(),
            column,
            description: desc(&field.description),
            kind,
            required: field.ty.is_non_null(),
            unique: field.directives.get("unique").is_some(),
            index: field.directives.get("index").is_some(),
            ty: type_ref(&field.ty),
            auth: field_auth,
            generated,
            renamed_from,
            default,
            constraint,
        })
    }

    /// `@constraint(...)`: bounds on an `Int` or `Float` field; lengths, a
    /// pattern (compiled here) and a format on a `String` field; each at
    /// most once, and a range that admits some value.
    fn field_constraint(
        &mut self,
        entity: &str,
        field: &Node<FieldDefinition>,
        kind: &FieldKind,
    ) -> Option<Constraint> {
        let d = field.directives.get("constraint")?;
        let fname = field.name.as_str();
        let at = format!("`@constraint` on `{entity}.{fname}`");
        let scalar = match kind {
            FieldKind::Value {
                ty: ValueType::Scalar(s),
                list: None,
            } => Some(*s),
            _ => None,
        };
        let numeric = matches!(scalar, Some(Scalar::Int | Scalar::Float));
        let text = matches!(scalar, Some(Scalar::String));
        let mut c = Constraint::default();
        let mut ok = true;
        for arg in &d.arguments {
            let name = arg.name.as_str();
            let v = arg.value.as_ref();
            let fits = match name {
                "min" | "max" => numeric,
                _ => text,
            };
            if !fits {
                let takes = if matches!(name, "min" | "max") {
                    "an `Int` or `Float` field"
                } else {
                    "a `String` field"
                };
                self.error(
                    arg.location(),
                    format!("{at}: `{name}` applies to {takes}"),
                    Some("`min`/`max` bound numbers; `minLength`, `maxLength`, `pattern` and `format` apply to text".into()),
                );
                ok = false;
                continue;
            }
            let number = match v {
                ast::Value::Int(i) => i.try_to_f64().ok(),
                ast::Value::Float(x) => x.try_to_f64().ok(),
                _ => None,
            };
            let count = match v {
                ast::Value::Int(i) => i.as_str().parse::<u64>().ok(),
                _ => None,
            };
            let string = match v {
                ast::Value::String(s) => Some(s.as_str()),
                _ => None,
            };
            let bad = |why: &str| format!("{at}: `{name}: {v}` {why}");
            match name {
                "min" | "max" if number.is_none() => {
                    self.error(arg.location(), bad("is not a number"), None);
                    ok = false;
                }
                "min" => c.min = number,
                "max" => c.max = number,
                "minLength" | "maxLength" if count.is_none() => {
                    self.error(
                        arg.location(),
                        bad("is not a count of characters (0 or more)"),
                        None,
                    );
                    ok = false;
                }
                "minLength" => c.min_length = count,
                "maxLength" => c.max_length = count,
                "pattern" => match string.map(Pattern::new) {
                    Some(Ok(p)) => c.pattern = Some(p),
                    Some(Err(e)) => {
                        self.error(arg.location(), bad("is not a regular expression"), Some(e));
                        ok = false;
                    }
                    None => {
                        self.error(arg.location(), bad("is not a string"), None);
                        ok = false;
                    }
                },
                "format" => match string {
                    Some("email") => c.format = Some(Format::Email),
                    Some("uri") => c.format = Some(Format::Uri),
                    _ => {
                        self.error(
                            arg.location(),
                            bad("is not a known format"),
                            Some("`format` is \"email\" or \"uri\"".into()),
                        );
                        ok = false;
                    }
                },
                // An unknown argument is reported by validation.
                _ => {}
            }
        }
        let empty_range = c.min.zip(c.max).is_some_and(|(a, b)| a > b)
            || c.min_length.zip(c.max_length).is_some_and(|(a, b)| a > b);
        if empty_range {
            self.error(
                d.location(),
                format!("{at}: no value is at once above the least and below the greatest"),
                Some("the bounds are inclusive: `min` at most `max`, `minLength` at most `maxLength`".into()),
            );
            ok = false;
        }
        ok.then_some(c)
    }

    /// `@default(value:)`: a literal of the field's type (a scalar or enum
    /// field, not a list), or `"now"` on a `DateTime`; never on a field the
    /// server sets, and never null (a nullable field left out is null
    /// already).
    fn field_default(
        &mut self,
        entity: &str,
        field: &Node<FieldDefinition>,
        kind: &FieldKind,
        generated: Option<Generated>,
    ) -> Option<FieldDefault> {
        let d = field.directives.get("default")?;
        let fname = field.name.as_str();
        let at = format!("`@default` on `{entity}.{fname}`");
        let ty = match kind {
            FieldKind::Value { ty, list: None } if generated.is_none() => ty,
            _ => {
                self.error(
                    d.location(),
                    format!("{at}: only a scalar or enum field the writes set takes a default"),
                    Some("remove it; `@createdAt` and `@updatedAt` fields are set by the server, and a list or relation has no default".into()),
                );
                return None;
            }
        };
        let v = d.specified_argument_by_name("value")?;
        if matches!(ty, ValueType::Scalar(Scalar::DateTime))
            && matches!(v.as_ref(), ast::Value::String(s) if s.as_str() == "now")
        {
            return Some(FieldDefault::Now);
        }
        let value = super::policies::literal_json(v, ty)
            .filter(|l| !l.is_null())
            .and_then(|l| ty.check(&l, &self.enums).ok().map(|c| c.into_owned()));
        if value.is_none() {
            let now = if matches!(ty, ValueType::Scalar(Scalar::DateTime)) {
                " (or `\"now\"`)"
            } else {
                ""
            };
            self.error(
                v.location(),
                format!("{at}: `{}` is not a `{}` value", v.as_ref(), ty.graphql_name()),
                Some(format!(
                    "give a literal of the field's type{now}; a nullable field left out is null without a default"
                )),
            );
        }
        value.map(FieldDefault::Value)
    }

    /// What a field holds, from its declared type: a scalar or enum value
    /// (or a list of them), a to-one or a to-many relation.
    fn field_kind(&mut self, entity: &str, field: &Node<FieldDefinition>) -> Option<FieldKind> {
        let schema = self.schema;
        let loc = field.location();
        let fname = field.name.as_str();
        let base = field.ty.inner_named_type();
        // An undefined type is reported by validation.
        let base_def = schema.types.get(base)?;
        let list = list_shape(&field.ty);
        if list == ListShape::Nested {
            self.error(
                loc,
                format!("`{entity}.{fname}` is a list of lists, which is not supported"),
                None,
            );
            return None;
        }
        if let Some(count) = super::relations::count_placeholder(schema, entity, field) {
            return Some(count);
        }
        match base_def {
            // A custom scalar is reported at its definition.
            ExtendedType::Scalar(_) => Scalar::from_graphql(base).map(|s| FieldKind::Value {
                ty: ValueType::Scalar(s),
                list: list_items(list),
            }),
            ExtendedType::Enum(_) => Some(FieldKind::Value {
                ty: ValueType::Enum(base.to_string()),
                list: list_items(list),
            }),
            ExtendedType::Object(_) if ROOTS.contains(&base.as_str()) => {
                self.error(
                    loc,
                    format!("`{entity}.{fname}` returns the root type `{base}`"),
                    Some("entity fields return scalars, enums or other entities".into()),
                );
                None
            }
            ExtendedType::Object(_) => {
                let Some(target) = self.entity_ids.get(base.as_str()).copied() else {
                    // A connection, edge or `PageInfo`: shapes of a root
                    // field's answer, not rows a field can reference.
                    self.error(
                        loc,
                        format!("`{entity}.{fname}` returns `{base}`, which is not a stored type"),
                        Some("connections are root fields of `Query` (`booksConnection(first: Int, after: String): BookConnection!`); a field of a stored type lists related rows as `[Book!]!`".into()),
                    );
                    return None;
                };
                Some(if list == ListShape::Single {
                    let on_delete = self.on_delete(entity, field);
                    FieldKind::ToOne {
                        relation: self.add_relation(target, RelationKind::ManyToOne { on_delete }),
                    }
                } else {
                    let unresolved = RelationKind::OneToMany {
                        inverse: FieldId::new(target, usize::MAX),
                    };
                    let relation = self.add_relation(target, unresolved);
                    super::relations::to_many_placeholder(field, list, relation)
                })
            }
            // Interfaces, unions and inputs are reported elsewhere.
            _ => None,
        }
    }

    /// `@relation(onDelete:)` of a to-one field: `RESTRICT` unless given;
    /// `SET_NULL` needs a nullable field.
    fn on_delete(&mut self, entity: &str, field: &Node<FieldDefinition>) -> OnDelete {
        let Some(v) = field
            .directives
            .get("relation")
            .and_then(|d| d.specified_argument_by_name("onDelete"))
        else {
            return OnDelete::Restrict;
        };
        let on_delete = match v.as_ref() {
            apollo_compiler::ast::Value::Enum(e) => OnDelete::from_graphql(e.as_str()),
            _ => None,
        };
        let Some(on_delete) = on_delete else {
            // Validation reports a value outside the enum.
            return OnDelete::Restrict;
        };
        if on_delete == OnDelete::SetNull && field.ty.is_non_null() {
            self.error(
                field.location(),
                format!(
                    "`@relation(onDelete: SET_NULL)` on `{entity}.{}`, which cannot be null",
                    field.name
                ),
                Some(format!(
                    "declare it nullable (`{}: {}`) or use CASCADE",
                    field.name,
                    field.ty.inner_named_type()
                )),
            );
        }
        on_delete
    }

    /// `@createdAt` / `@updatedAt`: a single `DateTime` the server sets.
    fn generated(
        &mut self,
        entity: &str,
        field: &Node<FieldDefinition>,
        kind: &FieldKind,
    ) -> Option<Generated> {
        let fname = field.name.as_str();
        let created = field.directives.get("createdAt");
        let updated = field.directives.get("updatedAt");
        let (g, d) = match (created, updated) {
            (None, None) => return None,
            (Some(_), Some(d)) => {
                self.error(
                    d.location(),
                    format!("`{entity}.{fname}` has both `@createdAt` and `@updatedAt`"),
                    Some("use two fields: `createdAt: DateTime! @createdAt` and `updatedAt: DateTime! @updatedAt`".into()),
                );
                return None;
            }
            (Some(d), None) => (Generated::CreatedAt, d),
            (None, Some(d)) => (Generated::UpdatedAt, d),
        };
        let is_datetime = matches!(
            kind,
            FieldKind::Value {
                ty: ValueType::Scalar(Scalar::DateTime),
                list: None,
            }
        );
        if !is_datetime {
            self.error(
                d.location(),
                format!(
                    "`@{}` on `{entity}.{fname}`, which is `{}`, not `DateTime`",
                    d.name, field.ty
                ),
                Some(format!("declare it `{fname}: DateTime! @{}`", d.name)),
            );
            return None;
        }
        Some(g)
    }

    /// The directives and arguments a field of this kind cannot take.
    fn check_field_use(
        &mut self,
        entity: &str,
        field: &Node<FieldDefinition>,
        kind: &FieldKind,
        field_auth: &TypeAuth,
    ) {
        let loc = field.location();
        let fname = field.name.as_str();
        let unique = field.directives.get("unique").is_some();
        if let Some(d) = field
            .directives
            .get_all("unique")
            .find(|d| d.specified_argument_by_name("fields").is_some())
        {
            self.error(
                d.location(),
                format!("`@unique(fields:)` on the field `{entity}.{fname}`"),
                Some(format!("a key of several fields goes on the type: `type {entity} @unique(fields: [\"{fname}\", \"...\"])`; on a field, write `@unique` alone")),
            );
        }
        let index = field.directives.get("index").is_some();
        let is_to_many = matches!(kind, FieldKind::ToMany { .. });
        let takes_args = is_to_many || matches!(kind, FieldKind::Count { .. });
        if !matches!(kind, FieldKind::Value { .. }) && *field_auth != TypeAuth::default() {
            self.error(
                loc,
                format!("`@auth` on the relation `{entity}.{fname}`"),
                Some(format!(
                    "a relation needs its target's read scope: put `@auth(read:)` on `{}`",
                    field.ty.inner_named_type()
                )),
            );
        }
        if !takes_args && !field.arguments.is_empty() {
            self.error(
                field.arguments.first().and_then(|a| a.location()),
                format!("`{entity}.{fname}` takes arguments, but only to-many relation fields and their counts do"),
                Some("remove the arguments; list fields such as `books: [Book!]!` take count/offset/filter/order arguments".into()),
            );
        }
        if takes_args && (unique || index) {
            self.error(
                loc,
                format!(
                    "`@unique` / `@index` do not apply to `{entity}.{fname}`, which is not stored"
                ),
                Some("put them on the to-one field it is the inverse of".into()),
            );
        }
        if matches!(kind, FieldKind::Value { list: Some(_), .. }) && unique {
            self.error(
                loc,
                format!("`@unique` does not apply to the list field `{entity}.{fname}`"),
                None,
            );
        }
        let relation = field.directives.get("relation");
        let is_to_one = matches!(kind, FieldKind::ToOne { .. });
        let names_field = relation.is_some_and(|d| d.specified_argument_by_name("field").is_some());
        let on_delete =
            relation.is_some_and(|d| d.specified_argument_by_name("onDelete").is_some());
        let through = relation.is_some_and(|d| d.specified_argument_by_name("through").is_some());
        if through && !is_to_many {
            self.error(
                loc,
                format!("`@relation(through:)` on `{entity}.{fname}`, which is not a list of another type"),
                Some(format!("a many-to-many field lists the far side: `{fname}: [{0}!]! @relation(through: \"...\")`", field.ty.inner_named_type())),
            );
        }
        if relation.is_some() && !is_to_many && !is_to_one {
            self.error(
                loc,
                format!("`@relation` on `{entity}.{fname}`, which is not a relation"),
                Some("`@relation(field:)` goes on a list field like `books: [Book!]!` and names the to-one field of Book it inverts; `@relation(onDelete:)` goes on a to-one field".into()),
            );
        } else if is_to_one && names_field {
            self.error(
                loc,
                format!("`@relation(field:)` on the to-one field `{entity}.{fname}`"),
                Some("`field:` names the inverse on a to-many field; a to-one field takes `onDelete:`".into()),
            );
        } else if is_to_many && on_delete {
            self.error(
                loc,
                format!("`@relation(onDelete:)` on the to-many field `{entity}.{fname}`"),
                Some("put `onDelete:` on the to-one field it is the inverse of".into()),
            );
        }
    }

    /// The entity's REST collection path: `@rest(path:)` when it is a valid
    /// segment, the pluralized type name otherwise.
    fn rest_path(&mut self, name: &str, obj: &Node<ObjectType>) -> String {
        let Some(d) = obj.directives.get("rest") else {
            return default_rest_path(name);
        };
        match d
            .specified_argument_by_name("path")
            .and_then(|v| v.as_str())
        {
            Some(p) if valid_segment(p) => p.to_string(),
            Some(p) => {
                self.error(
                    d.location(),
                    format!("`@rest(path: \"{p}\")` on `{name}` is not a valid path segment"),
                    Some(
                        "use lowercase letters, digits and single hyphens, e.g. \"book-reviews\""
                            .into(),
                    ),
                );
                default_rest_path(name)
            }
            None => default_rest_path(name),
        }
    }

    /// Column names and nested REST segments must be distinct within an
    /// entity, and columns short enough for PostgreSQL to keep whole.
    fn check_columns(&mut self, name: &str, obj: &Node<ObjectType>, fields: &[Field]) {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let mut segs: HashMap<&str, &str> = HashMap::new();
        for f in fields {
            let loc = obj.fields.get(f.name.as_str()).and_then(|c| c.location());
            if f.column.len() > MAX_IDENT {
                self.error(
                    loc,
                    format!(
                        "`{name}.{}` is too long to be a column name (at most {MAX_IDENT} bytes)",
                        f.name
                    ),
                    None,
                );
            }
            if !f.column.is_empty()
                && let Some(other) = seen.insert(&f.column, &f.name)
            {
                self.error(
                    loc,
                    format!(
                        "`{name}.{}` and `{name}.{other}` would both be stored in the column `{}`",
                        f.name, f.column
                    ),
                    Some("rename one of them".into()),
                );
            }
            if let FieldKind::ToMany { rest_segment, .. } = &f.kind
                && let Some(other) = segs.insert(rest_segment, &f.name)
            {
                self.error(
                    loc,
                    format!(
                        "`{name}.{}` and `{name}.{other}` would both be the nested REST path `{rest_segment}`",
                        f.name
                    ),
                    Some("rename one of them".into()),
                );
            }
        }
    }

    /// The table name: short enough for PostgreSQL, and outside the prefix
    /// of gatehouse's own tables.
    fn check_table(&mut self, name: &str, obj: &Node<ObjectType>, table: &str) {
        if table.len() > MAX_IDENT {
            self.error(
                obj.location(),
                format!(
                    "type name `{name}` is too long to be a table name (at most {MAX_IDENT} bytes)"
                ),
                None,
            );
        }
        if table.starts_with(RESERVED_TABLE_PREFIX) {
            self.error(
                obj.location(),
                format!("type `{name}` would be stored in `{table}`; the prefix `{RESERVED_TABLE_PREFIX}` is reserved"),
                Some("rename the type".into()),
            );
        }
    }

    /// Two entities cannot share a table or a REST path; checked once every
    /// entity has its names.
    pub(super) fn check_entity_names(&mut self, objects: &[&Node<ObjectType>]) {
        self.check_type_renames(objects);
        let mut tables: HashMap<String, String> = HashMap::new();
        let mut paths: HashMap<String, String> = HashMap::new();
        for (i, obj) in objects.iter().enumerate() {
            let (name, table, path) = {
                let e = &self.entities[i];
                (e.name.clone(), e.table.clone(), e.rest_path.clone())
            };
            if let Some(other) = tables.insert(table.clone(), name.clone()) {
                self.error(
                    obj.location(),
                    format!(
                        "types `{name}` and `{other}` would both be stored in the table `{table}`"
                    ),
                    Some("rename one of them".into()),
                );
            }
            if let Some(other) = paths.insert(path.clone(), name.clone()) {
                self.error(
                    obj.location(),
                    format!("types `{name}` and `{other}` would both be served at `/v1/{path}`"),
                    Some("give one of them `@rest(path: \"...\")`".into()),
                );
            }
        }
    }
}

impl Binder<'_> {
    /// `@renamed(from:)` on the fields of `entity`: not the field's own
    /// name, not a field that still exists, not claimed by two fields.
    fn check_field_renames(&mut self, entity: &str, obj: &Node<ObjectType>) {
        let mut claimed: HashMap<String, String> = HashMap::new();
        for field in obj.fields.values() {
            let Some((from, loc)) = renamed_from(field.directives.get("renamed")) else {
                continue;
            };
            let fname = field.name.as_str();
            if from == fname {
                self.error(
                    loc,
                    format!("`@renamed(from: \"{from}\")` on `{entity}.{fname}` names the field itself"),
                    Some("`from` is the field's earlier name; remove `@renamed` if it was never called anything else".into()),
                );
                continue;
            }
            if obj.fields.contains_key(from.as_str()) {
                self.error(
                    loc,
                    format!("`{entity}.{fname}` is `@renamed(from: \"{from}\")`, but `{entity}.{from}` still exists"),
                    Some(format!("remove `{entity}.{from}` to rename it, or remove `@renamed` to keep both")),
                );
                continue;
            }
            if let Some(other) = claimed.insert(from.clone(), fname.to_string()) {
                self.error(
                    loc,
                    format!("`{entity}.{fname}` and `{entity}.{other}` are both `@renamed(from: \"{from}\")`"),
                    Some(format!("only one field can take over `{from}`'s column; remove `@renamed` from the other")),
                );
            }
        }
    }

    /// `@renamed(from:)` on types: not the type's own name, not a type
    /// that still exists, not claimed by two types.
    fn check_type_renames(&mut self, objects: &[&Node<ObjectType>]) {
        let mut claimed: HashMap<String, String> = HashMap::new();
        for obj in objects {
            let Some((from, loc)) = renamed_from(obj.directives.get("renamed").map(|c| &c.node))
            else {
                continue;
            };
            let name = obj.name.as_str();
            if from == name {
                self.error(
                    loc,
                    format!("`@renamed(from: \"{from}\")` on `{name}` names the type itself"),
                    Some("`from` is the type's earlier name; remove `@renamed` if it was never called anything else".into()),
                );
                continue;
            }
            if self.schema.types.contains_key(from.as_str()) {
                self.error(
                    loc,
                    format!("type `{name}` is `@renamed(from: \"{from}\")`, but type `{from}` still exists"),
                    Some(format!("remove type `{from}` to rename it, or remove `@renamed` to keep both")),
                );
                continue;
            }
            if let Some(other) = claimed.insert(from.clone(), name.to_string()) {
                self.error(
                    loc,
                    format!("types `{name}` and `{other}` are both `@renamed(from: \"{from}\")`"),
                    Some(format!("only one type can take over `{from}`'s table; remove `@renamed` from the other")),
                );
            }
        }
    }
}

/// The `from` of `@renamed` in `directives`, with where it was written.
fn renamed_from(
    directive: Option<&Node<apollo_compiler::ast::Directive>>,
) -> Option<(String, Option<apollo_compiler::parser::SourceSpan>)> {
    let d = directive?;
    let from = d.specified_argument_by_name("from")?.as_str()?;
    Some((from.to_string(), d.location()))
}

/// `BookReview` -> `book-reviews`, `Person` -> `people`.
pub fn default_rest_path(type_name: &str) -> String {
    let kebab = type_name.to_kebab_case();
    match kebab.rsplit_once('-') {
        Some((head, last)) => format!("{head}-{}", pluralizer::pluralize(last, 2, false)),
        None => pluralizer::pluralize(&kebab, 2, false),
    }
}

fn valid_segment(p: &str) -> bool {
    !p.is_empty()
        && p.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}
