//! Binding: from the apollo schema to the [`Model`], by the conventions of
//! `docs/design/schema-conventions.md`. Every problem becomes a diagnostic; binding goes on after a
//! problem so one run reports everything.

use std::collections::HashMap;

use apollo_compiler::ast::{self, FieldDefinition, InputValueDefinition, Type};
use apollo_compiler::parser::SourceSpan;
use apollo_compiler::schema::{ExtendedType, ObjectType};
use apollo_compiler::{Node, Schema};
use heck::{ToKebabCase, ToLowerCamelCase, ToSnakeCase};

use crate::diag::{Diagnostic, Diagnostics};
use crate::load::at;
use crate::model::*;
use crate::policy::{Operand, Policy, Rule};

const ROOTS: [&str; 3] = ["Query", "Mutation", "Subscription"];
const COUNT_ARGS: [&str; 4] = ["first", "limit", "count", "take"];
const OFFSET_ARGS: [&str; 2] = ["offset", "skip"];
const CREATE_PREFIXES: [&str; 3] = ["create", "add", "insert"];
const DELETE_PREFIXES: [&str; 2] = ["delete", "remove"];
/// PostgreSQL truncates identifiers longer than this.
const MAX_IDENT: usize = 63;
/// Table-name prefix reserved for gatehouse's own tables.
pub const RESERVED_TABLE_PREFIX: &str = "_gatehouse";

pub(crate) struct Binder<'a> {
    schema: &'a Schema,
    diags: &'a mut Diagnostics,
    entities: Vec<Entity>,
    where_inputs: Vec<WhereInput>,
    order_enums: Vec<OrderEnum>,
    /// The schema's enums, collected first: `@policy` literals are checked
    /// against them.
    enums: Vec<EnumDef>,
    /// Inputs/enums already checked, with the entity they were bound to.
    checked_where: HashMap<String, Option<String>>,
    checked_order: HashMap<String, Option<String>>,
}

impl<'a> Binder<'a> {
    pub(crate) fn new(schema: &'a Schema, diags: &'a mut Diagnostics) -> Self {
        Self {
            schema,
            diags,
            entities: Vec::new(),
            where_inputs: Vec::new(),
            order_enums: Vec::new(),
            enums: schema
                .types
                .values()
                .filter_map(|t| match t {
                    ExtendedType::Enum(e) if !t.is_built_in() => Some(EnumDef {
                        name: e.name.to_string(),
                        values: e.values.keys().map(|v| v.to_string()).collect(),
                        description: e.description.as_ref().map(|d| d.to_string()),
                    }),
                    _ => None,
                })
                .collect(),
            checked_where: HashMap::new(),
            checked_order: HashMap::new(),
        }
    }

    fn error(&mut self, loc: Option<SourceSpan>, message: String, hint: Option<String>) {
        let d: Diagnostic = at(&self.schema.sources, loc, message, hint);
        self.diags.0.push(d);
    }

    pub(crate) fn bind(mut self) -> Model {
        let schema = self.schema;
        let objects: Vec<&Node<ObjectType>> = schema
            .types
            .values()
            .filter_map(|t| match t {
                ExtendedType::Object(o)
                    if !t.is_built_in() && !ROOTS.contains(&o.name.as_str()) =>
                {
                    Some(o)
                }
                _ => None,
            })
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
            self.entities[i].policy = self.bind_policy(obj);
        }

        let queries = self.root_fields("Query");
        let mutations = self.root_fields("Mutation");
        let subscriptions = self.root_fields("Subscription");

        let inputs = schema
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

        Model {
            entities: self.entities,
            enums: self.enums,
            inputs,
            where_inputs: self.where_inputs,
            order_enums: self.order_enums,
            queries,
            mutations,
            subscriptions,
            sdl: schema.to_string(),
        }
    }

    // ---- entities -------------------------------------------------------

    /// Stored fields and to-many placeholders; relations resolved in pass 2.
    fn entity_pass1(&mut self, obj: &Node<ObjectType>) -> Entity {
        let schema = self.schema;
        let name = obj.name.to_string();
        let mut fields = Vec::new();
        let mut id_field = None;
        for field in obj.fields.values() {
            let loc = field.location();
            let fname = field.name.to_string();
            let ty = type_ref(&field.ty);
            let required = field.ty.is_non_null();
            let unique = field.directives.get("unique").is_some();
            let index = field.directives.get("index").is_some();
            let relation = field.directives.get("relation");
            let field_auth = self.field_auth(&name, field);
            if fname == "id" {
                if !is_id_bang(&field.ty) {
                    self.error(
                        loc,
                        format!("`{name}.id` must be `ID!`, found `{}`", field.ty),
                        Some("every stored type is keyed by `id: ID!`".into()),
                    );
                }
                if !field.arguments.is_empty() {
                    self.error(loc, format!("`{name}.id` cannot take arguments"), None);
                }
                id_field = Some(Field {
                    name: fname,
                    column: "id".into(),
                    description: desc(&field.description),
                    kind: FieldKind::Id,
                    required: true,
                    unique: true,
                    index: false,
                    ty,
                    auth: TypeAuth::default(),
                });
                if field_auth != TypeAuth::default() {
                    self.error(
                        loc,
                        format!("`@auth` on `{name}.id`: the id is read with the row"),
                        None,
                    );
                }
                continue;
            }
            let base = field.ty.inner_named_type();
            let Some(base_def) = schema.types.get(base) else {
                continue; // undefined type: reported by validation
            };
            let list = list_shape(&field.ty);
            if list == ListShape::Nested {
                self.error(
                    loc,
                    format!("`{name}.{fname}` is a list of lists, which is not supported"),
                    None,
                );
                continue;
            }
            let kind = match base_def {
                ExtendedType::Scalar(_) => match Scalar::from_graphql(base) {
                    Some(s) => FieldKind::Value {
                        ty: ValueType::Scalar(s),
                        list: list_items(list),
                    },
                    None => continue, // custom scalar: reported at its definition
                },
                ExtendedType::Enum(_) => FieldKind::Value {
                    ty: ValueType::Enum(base.to_string()),
                    list: list_items(list),
                },
                ExtendedType::Object(_) if ROOTS.contains(&base.as_str()) => {
                    self.error(
                        loc,
                        format!("`{name}.{fname}` returns the root type `{base}`"),
                        Some("entity fields return scalars, enums or other entities".into()),
                    );
                    continue;
                }
                ExtendedType::Object(_) => match list {
                    ListShape::Single => FieldKind::ToOne {
                        target: base.to_string(),
                    },
                    _ => FieldKind::ToMany {
                        target: base.to_string(),
                        via: String::new(),
                        rest_segment: fname.to_kebab_case(),
                        items_required: list
                            == ListShape::List {
                                items_required: true,
                            },
                        list: ListBinding::default(),
                        args: field.arguments.iter().map(|a| input_value(a)).collect(),
                    },
                },
                _ => continue, // interfaces, unions, inputs: reported elsewhere
            };
            let column = match &kind {
                FieldKind::ToOne { .. } => format!("{}_id", fname.to_snake_case()),
                FieldKind::ToMany { .. } => String::new(),
                _ => fname.to_snake_case(),
            };
            let is_to_many = matches!(kind, FieldKind::ToMany { .. });
            if !matches!(kind, FieldKind::Value { .. }) && field_auth != TypeAuth::default() {
                self.error(
                    loc,
                    format!("`@auth` on the relation `{name}.{fname}`"),
                    Some(format!(
                        "a relation needs its target's read scope: put `@auth(read:)` on `{}`",
                        field.ty.inner_named_type()
                    )),
                );
            }
            let is_list_value = matches!(kind, FieldKind::Value { list: Some(_), .. });
            if !is_to_many && !field.arguments.is_empty() {
                self.error(
                    field.arguments.first().and_then(|a| a.location()),
                    format!("`{name}.{fname}` takes arguments, but only to-many relation fields do"),
                    Some("remove the arguments; list fields such as `books: [Book!]!` take count/offset/filter/order arguments".into()),
                );
            }
            if is_to_many && (unique || index) {
                self.error(
                    loc,
                    format!(
                        "`@unique` / `@index` do not apply to the to-many field `{name}.{fname}`"
                    ),
                    Some("put them on the to-one field it is the inverse of".into()),
                );
            }
            if is_list_value && unique {
                self.error(
                    loc,
                    format!("`@unique` does not apply to the list field `{name}.{fname}`"),
                    None,
                );
            }
            if relation.is_some() && !is_to_many {
                self.error(
                    loc,
                    format!("`@relation` on `{name}.{fname}`, which is not a to-many relation"),
                    Some("`@relation(field:)` goes on a list field like `books: [Book!]!` and names the to-one field of Book it inverts".into()),
                );
            }
            fields.push(Field {
                name: fname,
                column,
                description: desc(&field.description),
                kind,
                required,
                unique,
                index,
                ty,
                auth: field_auth,
            });
        }
        match id_field {
            Some(id) => fields.insert(0, id),
            None => self.error(
                obj.location(),
                format!("type `{name}` has no `id: ID!` field"),
                Some("every object type other than Query, Mutation and Subscription is a stored collection and needs `id: ID!`".into()),
            ),
        }

        let table = name.to_snake_case();
        let rest_path = match obj.directives.get("rest") {
            Some(d) => match d
                .specified_argument_by_name("path")
                .and_then(|v| v.as_str())
            {
                Some(p) if valid_segment(p) => p.to_string(),
                Some(p) => {
                    self.error(
                        d.location(),
                        format!("`@rest(path: \"{p}\")` on `{name}` is not a valid path segment"),
                        Some("use lowercase letters, digits and single hyphens, e.g. \"book-reviews\"".into()),
                    );
                    default_rest_path(&name)
                }
                None => default_rest_path(&name),
            },
            None => default_rest_path(&name),
        };
        let auth = self.type_auth(&name, &obj.directives);
        self.check_columns(&name, obj, &fields, &table);
        Entity {
            name,
            table,
            rest_path,
            description: desc(&obj.description),
            fields,
            auth,
            policy: Policy::default(),
        }
    }

    // ---- policies -------------------------------------------------------

    /// Binds `@policy` on an entity: each argument a rule over its fields,
    /// then the most specific argument chosen for each action.
    fn bind_policy(&mut self, obj: &Node<ObjectType>) -> Policy {
        let mut policy = Policy::default();
        let Some(d) = obj.directives.get("policy") else {
            return policy;
        };
        let name = obj.name.to_string();
        let rule = |b: &mut Self, arg: &str| -> Option<Rule> {
            let v = d.specified_argument_by_name(arg)?;
            b.policy_rule(&name, v, &format!("@policy({arg}:)"))
        };
        let all = rule(self, "all");
        let write = rule(self, "write").or_else(|| all.clone());
        policy.read = rule(self, "read").or_else(|| all.clone());
        policy.create = rule(self, "create").or_else(|| write.clone());
        policy.update = rule(self, "update").or_else(|| write.clone());
        policy.delete = rule(self, "delete").or_else(|| write.clone());
        policy.bypass = self.scope_arg(d, "bypass");
        let has_rule = ["read", "create", "update", "delete", "write", "all"]
            .iter()
            .any(|a| d.specified_argument_by_name(a).is_some());
        if !has_rule {
            self.error(
                d.location(),
                format!("`@policy` on `{name}` has no rule"),
                Some("give it `read:`, `create:`, `update:`, `delete:`, `write:` or `all:`".into()),
            );
        }
        policy
    }

    /// One policy rule: an object in the language of `where` inputs over
    /// `entity`'s fields, whose `"$name"` strings are claims.
    fn policy_rule(&mut self, entity: &str, v: &Node<ast::Value>, at: &str) -> Option<Rule> {
        let loc = v.location();
        let ast::Value::Object(entries) = v.as_ref() else {
            self.error(
                loc,
                format!("`{at}` on `{entity}` must be an object like `{{owner: \"$sub\"}}`"),
                None,
            );
            return None;
        };
        let e = self.entities.iter().find(|e| e.name == entity)?.clone();
        let mut parts: Vec<Option<Rule>> = Vec::new();
        for (key, value) in entries {
            let key = key.as_str();
            let part = match key {
                "AND" | "OR" => {
                    let items: Vec<&Node<ast::Value>> = match value.as_ref() {
                        ast::Value::List(items) => items.iter().collect(),
                        _ => vec![value],
                    };
                    let rules: Vec<Rule> = items
                        .into_iter()
                        .filter_map(|i| self.policy_rule(entity, i, at))
                        .collect();
                    Some(if key == "AND" {
                        Rule::And(rules)
                    } else {
                        Rule::Or(rules)
                    })
                }
                "NOT" => self
                    .policy_rule(entity, value, at)
                    .map(|r| Rule::Not(Box::new(r))),
                _ => self.policy_cmp(&e, key, value, at),
            };
            parts.push(part);
        }
        // Every part is checked, so one run reports each problem.
        let mut parts: Vec<Rule> = parts.into_iter().collect::<Option<_>>()?;
        Some(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Rule::And(parts)
        })
    }

    fn policy_cmp(
        &mut self,
        e: &Entity,
        key: &str,
        value: &Node<ast::Value>,
        at: &str,
    ) -> Option<Rule> {
        let loc = value.location();
        let entity = e.name.as_str();
        let Some((field, op)) = parse_filter_name(e, key) else {
            let fields: Vec<&str> = e.stored_fields().map(|f| f.name.as_str()).collect();
            self.error(
                loc,
                format!("`{key}` in `{at}` on `{entity}` binds to nothing"),
                Some(format!(
                    "a policy takes `AND`, `OR`, `NOT`, or a field of `{entity}` ({}) with an optional operator suffix, as a `where` input does",
                    fields.join(", ")
                )),
            );
            return None;
        };
        let f = e.field(&field)?;
        if let (FieldKind::ToOne { target }, FilterOp::Eq, ast::Value::Object(_)) =
            (&f.kind, op, value.as_ref())
        {
            let rule = self.policy_rule(target, value, at)?;
            return Some(Rule::Path {
                field,
                target: target.clone(),
                rule: Box::new(rule),
            });
        }
        let ty = f.filter_type()?;
        if f.check_filter_op(op).is_err() {
            self.error(
                loc,
                format!(
                    "operator `{}` in `{at}` does not apply to `{entity}.{field}` ({})",
                    op.label(),
                    ty.graphql_name()
                ),
                None,
            );
            return None;
        }
        let expected = if op == FilterOp::IsNull {
            ValueType::Scalar(Scalar::Boolean)
        } else {
            ty
        };
        let operand = if op.takes_list() {
            let ast::Value::List(items) = value.as_ref() else {
                self.error(loc, format!("`{key}` in `{at}` takes a list"), None);
                return None;
            };
            let mut out = Vec::new();
            for i in items {
                out.push(self.policy_operand(i, &expected, key, at)?);
            }
            Operand::List(out)
        } else {
            self.policy_operand(value, &expected, key, at)?
        };
        Some(Rule::Cmp {
            field,
            op,
            value: operand,
        })
    }

    /// A literal of type `ty`, or a claim (`"$name"`; `"$$..."` is a literal `$`).
    fn policy_operand(
        &mut self,
        v: &Node<ast::Value>,
        ty: &ValueType,
        key: &str,
        at: &str,
    ) -> Option<Operand> {
        let loc = v.location();
        if let ast::Value::String(s) = v.as_ref()
            && let Some(rest) = s.strip_prefix('$')
        {
            if let Some(literal) = rest.strip_prefix('$') {
                return Some(Operand::Literal(serde_json::Value::String(format!(
                    "${literal}"
                ))));
            }
            let valid = !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'));
            if !valid {
                self.error(
                    loc,
                    format!("`\"{s}\"` in `{at}` is not a claim name"),
                    Some("a claim is `$` and a name such as `$sub` or `$org`; write `$$` for a literal `$`".into()),
                );
                return None;
            }
            return Some(Operand::Claim(rest.to_string()));
        }
        // The literal's GraphQL kind first (an enum type takes enum
        // literals, not strings), then the value checker every layer uses.
        let literal = match (v.as_ref(), ty) {
            (ast::Value::Null, _) => Some(serde_json::Value::Null),
            (ast::Value::Enum(n), ValueType::Enum(_)) => Some(n.as_str().into()),
            (ast::Value::String(s), ValueType::Scalar(_)) => Some(s.as_str().into()),
            (ast::Value::Boolean(b), ValueType::Scalar(_)) => Some((*b).into()),
            (ast::Value::Int(i), ValueType::Scalar(_)) => match i.as_str().parse::<i64>() {
                Ok(n) => Some(n.into()),
                Err(_) => i
                    .try_to_f64()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(serde_json::Value::Number),
            },
            // GraphQL takes no float literal for an `Int`.
            (ast::Value::Float(_), ValueType::Scalar(Scalar::Int)) => None,
            (ast::Value::Float(x), ValueType::Scalar(_)) => x
                .try_to_f64()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(serde_json::Value::Number),
            _ => None,
        };
        let json = literal.and_then(|l| match l {
            serde_json::Value::Null => Some(l),
            l => ty.check(&l, &self.enums).ok().map(|c| c.into_owned()),
        });
        if json.is_none() {
            self.error(
                loc,
                format!(
                    "`{key}` in `{at}` compares with `{}`, which is not a `{}` value",
                    v,
                    ty.graphql_name()
                ),
                None,
            );
        }
        json.map(Operand::Literal)
    }

    fn check_columns(&mut self, name: &str, obj: &Node<ObjectType>, fields: &[Field], table: &str) {
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
            }
            if let FieldKind::ToMany { rest_segment, .. } = &f.kind
                && let Some(other) = segs.insert(rest_segment, &f.name)
            {
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

    fn check_entity_names(&mut self, objects: &[&Node<ObjectType>]) {
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

    fn type_auth(
        &mut self,
        name: &str,
        directives: &apollo_compiler::schema::DirectiveList,
    ) -> TypeAuth {
        let mut auth = TypeAuth::default();
        let Some(d) = directives.get("auth").map(|c| &c.node) else {
            return auth;
        };
        if d.specified_argument_by_name("scope").is_some() {
            self.error(
                d.location(),
                format!("`@auth(scope:)` on the type `{name}`: a type takes `read:` and `write:`"),
                Some("`@auth(scope:)` goes on a root field".into()),
            );
        }
        auth.read = self.scope_arg(d, "read");
        auth.write = self.scope_arg(d, "write");
        auth
    }

    /// `@auth(read:, write:)` on an entity field: the scopes its value needs
    /// beyond the type's own.
    fn field_auth(&mut self, entity: &str, field: &Node<FieldDefinition>) -> TypeAuth {
        let mut auth = TypeAuth::default();
        let Some(d) = field.directives.get("auth") else {
            return auth;
        };
        if d.specified_argument_by_name("scope").is_some() {
            self.error(
                d.location(),
                format!(
                    "`@auth(scope:)` on the field `{entity}.{}`: an entity field takes `read:` and `write:`",
                    field.name
                ),
                Some("`@auth(scope:)` goes on a root field".into()),
            );
        }
        auth.read = self.scope_arg(d, "read");
        auth.write = self.scope_arg(d, "write");
        auth
    }

    fn scope_arg(&mut self, d: &Node<ast::Directive>, arg: &str) -> Option<String> {
        let value = d.specified_argument_by_name(arg)?.as_str()?.to_string();
        if !valid_scope(&value) {
            self.error(
                d.location(),
                format!("`@auth({arg}: \"{value}\")` is not a valid OAuth scope"),
                Some("a scope is one non-empty word without spaces, quotes or backslashes (RFC 6749 §3.3)".into()),
            );
        }
        Some(value)
    }

    /// Resolves to-many inverses and binds their arguments.
    fn entity_pass2(&mut self, index: usize, obj: &Node<ObjectType>) {
        let name = self.entities[index].name.clone();
        let to_many: Vec<(usize, String, String)> = self.entities[index]
            .fields
            .iter()
            .enumerate()
            .filter_map(|(i, f)| match &f.kind {
                FieldKind::ToMany { target, .. } => Some((i, f.name.clone(), target.clone())),
                _ => None,
            })
            .collect();
        for (fi, fname, target) in to_many {
            let Some(def) = obj.fields.get(fname.as_str()) else {
                continue;
            };
            let loc = def.location();
            let Some(target_entity) = self.entities.iter().find(|e| e.name == target) else {
                continue;
            };
            let candidates: Vec<String> = target_entity
                .fields
                .iter()
                .filter(|f| matches!(&f.kind, FieldKind::ToOne { target } if *target == name))
                .map(|f| f.name.clone())
                .collect();
            let target_has = |f: &str| target_entity.field(f).map(|f| f.kind.clone());
            let via = match def
                .directives
                .get("relation")
                .and_then(|d| d.specified_argument_by_name("field"))
                .and_then(|v| v.as_str())
            {
                Some(named) => {
                    if candidates.iter().any(|c| c == named) {
                        Some(named.to_string())
                    } else {
                        let found = match target_has(named) {
                            None => format!("`{target}` has no field `{named}`"),
                            Some(_) => {
                                format!("`{target}.{named}` is not a to-one field of type `{name}`")
                            }
                        };
                        self.error(
                            loc,
                            format!("`@relation(field: \"{named}\")` on `{name}.{fname}`: {found}"),
                            Some(inverse_hint(&name, &target, &candidates)),
                        );
                        None
                    }
                }
                None => match candidates.as_slice() {
                    [one] => Some(one.clone()),
                    [] => {
                        self.error(
                            loc,
                            format!(
                                "`{name}.{fname}` lists `{target}`, but `{target}` has no to-one field of type `{name}` to be its inverse"
                            ),
                            Some(format!(
                                "add a field like `{}: {name}` to `{target}`",
                                name.to_lower_camel_case()
                            )),
                        );
                        None
                    }
                    many => {
                        self.error(
                            loc,
                            format!(
                                "`{name}.{fname}` is ambiguous: `{target}` has several fields of type `{name}` ({})",
                                many.join(", ")
                            ),
                            Some(format!(
                                "name the inverse with `@relation(field: \"{}\")`",
                                many[0]
                            )),
                        );
                        None
                    }
                },
            };
            let args: Vec<&Node<InputValueDefinition>> = def.arguments.iter().collect();
            let owner = format!("{name}.{fname}");
            let list = self.bind_list_args(&target, &args, &owner);
            if let FieldKind::ToMany {
                via: v, list: l, ..
            } = &mut self.entities[index].fields[fi].kind
            {
                *v = via.unwrap_or_default();
                *l = list;
            }
        }
    }

    // ---- root fields ----------------------------------------------------

    fn root_fields(&mut self, root: &str) -> Vec<RootField> {
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

    fn root_scope(&mut self, root: &str, field: &Node<FieldDefinition>) -> Option<String> {
        let mut scope = None;
        for d in field.directives.iter() {
            if d.name == "auth" {
                if d.specified_argument_by_name("read").is_some()
                    || d.specified_argument_by_name("write").is_some()
                {
                    self.error(
                        d.location(),
                        format!(
                            "`@auth(read:/write:)` on the root field `{root}.{}`: a root field takes `scope:`",
                            field.name
                        ),
                        Some("`@auth(read:, write:)` goes on an entity type".into()),
                    );
                }
                scope = self.scope_arg(d, "scope");
            } else if ["unique", "index", "relation"].contains(&d.name.as_str()) {
                self.error(
                    d.location(),
                    format!(
                        "`@{}` does not apply to the root field `{root}.{}`",
                        d.name, field.name
                    ),
                    None,
                );
            }
        }
        scope
    }

    fn entity_of(&self, ty: &Type) -> Option<&Entity> {
        self.entities
            .iter()
            .find(|e| e.name == ty.inner_named_type().as_str())
    }

    fn bind_query(&mut self, field: &Node<FieldDefinition>) -> Option<(String, Binding)> {
        let fname = format!("Query.{}", field.name);
        let loc = field.location();
        let shape = list_shape(&field.ty);
        let Some(entity) = self.entity_of(&field.ty).map(|e| e.name.clone()) else {
            if self.schema.types.contains_key(field.ty.inner_named_type()) {
                self.error(
                    loc,
                    format!(
                        "`{fname}` returns `{}`, which binds to no convention",
                        field.ty
                    ),
                    Some(QUERY_HINT.into()),
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
            ListShape::Single => {
                if args.is_empty() {
                    self.error(
                        loc,
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
                    if COUNT_ARGS.contains(&aname)
                        || OFFSET_ARGS.contains(&aname)
                        || aname == "orderBy"
                    {
                        self.error(
                            arg.location(),
                            format!("argument `{aname}` of `{fname}`: a lookup returns one row, so paging and ordering do not apply"),
                            Some(format!("return `[{entity}!]!` to bind a list")),
                        );
                    } else if aname == "where" {
                        where_arg = self.bind_where_arg(&entity, arg, &fname);
                    } else if let Some(f) = self.bind_filter(
                        &entity,
                        arg.name.as_str(),
                        &arg.ty,
                        arg.location(),
                        &fname,
                    ) {
                        filters.push(f);
                    }
                }
                Some((entity, Binding::Lookup { filters, where_arg }))
            }
        }
    }

    /// Count, offset, filters, `where` and `orderBy` of a list field.
    fn bind_list_args(
        &mut self,
        entity: &str,
        args: &[&Node<InputValueDefinition>],
        owner: &str,
    ) -> ListBinding {
        let mut list = ListBinding::default();
        for arg in args {
            let aname = arg.name.as_str();
            let loc = arg.location();
            if COUNT_ARGS.contains(&aname) || OFFSET_ARGS.contains(&aname) {
                let is_count = COUNT_ARGS.contains(&aname);
                if arg.ty.inner_named_type() != "Int" || arg.ty.is_list() {
                    self.error(
                        loc,
                        format!(
                            "argument `{aname}` of `{owner}` is the {} and must be `Int`, found `{}`",
                            if is_count { "count" } else { "offset" },
                            arg.ty
                        ),
                        Some(format!("declare it `{aname}: Int`")),
                    );
                    continue;
                }
                let slot = if is_count {
                    &mut list.count
                } else {
                    &mut list.offset
                };
                if let Some(prev) = slot.replace(aname.to_string()) {
                    self.error(
                        loc,
                        format!(
                            "`{owner}` has two {} arguments, `{prev}` and `{aname}`",
                            if is_count { "count" } else { "offset" }
                        ),
                        Some("keep one".into()),
                    );
                }
            } else if aname == "where" {
                list.where_arg = self.bind_where_arg(entity, arg, owner);
            } else if aname == "orderBy" {
                list.order_by = self.bind_order_arg(entity, arg, owner);
            } else if let Some(f) = self.bind_filter(entity, aname, &arg.ty, loc, owner) {
                list.filters.push(f);
            }
        }
        list
    }

    /// Binds an argument (or `where` input field) named `<field><suffix>`.
    fn bind_filter(
        &mut self,
        entity: &str,
        name: &str,
        ty: &Type,
        loc: Option<SourceSpan>,
        owner: &str,
    ) -> Option<Filter> {
        let e = self.entities.iter().find(|e| e.name == entity)?;
        let parsed = parse_filter_name(e, name);
        // Inside a `where` input the names are input fields, not arguments.
        let in_input = owner.starts_with("input ");
        let noun = if in_input { "field" } else { "argument" };
        let Some((field, op)) = parsed else {
            let fields: Vec<&str> = e.stored_fields().map(|f| f.name.as_str()).collect();
            let lead = if in_input {
                "fields of a `where` input are `AND`, `OR`, `NOT`, or"
            } else {
                "arguments are a count (first|limit|count|take), an offset (offset|skip), `where`, `orderBy`, or"
            };
            self.error(
                loc,
                format!("{noun} `{name}` of `{owner}` binds to nothing"),
                Some(format!(
                    "{lead} a field of `{entity}` ({}) with an optional operator suffix (_not, _in, _not_in, _lt, _lte, _gt, _gte, _contains, _starts_with, _ends_with, _is_null)",
                    fields.join(", ")
                )),
            );
            return None;
        };
        let f = e.field(&field)?;
        let fty = f.filter_type()?;
        let fdesc = format!("`{entity}.{field}`");
        let tname = fty.graphql_name().to_string();
        let arg_base = ty.inner_named_type().as_str();
        // Whether the operator applies is the Model's rule; the argument's
        // declared type is checked here, before the operator, so that the
        // first problem named is the one the user wrote.
        let refusal = f.check_filter_op(op).err();
        let problem: Option<(String, String)> = match op {
            FilterOp::IsNull => (arg_base != "Boolean" || ty.is_list()).then(|| {
                (
                    format!("{noun} `{name}` of `{owner}` must be `Boolean`, found `{ty}`"),
                    format!("declare it `{name}: Boolean`"),
                )
            }),
            _ if refusal == Some(OpRefusal::ListField) => Some((
                format!(
                    "operator `{}` does not apply to the list field {fdesc}",
                    op.label()
                ),
                format!(
                    "list fields take `{field}_contains: {tname}` and `{field}_is_null: Boolean`"
                ),
            )),
            FilterOp::In | FilterOp::NotIn => {
                let ok = matches!(ty.item_type(), t if ty.is_list() && !t.is_list() && t.inner_named_type() == tname.as_str());
                (!ok).then(|| {
                    (
                        format!("{noun} `{name}` of `{owner}` must be a list of `{tname}` like {fdesc}, found `{ty}`"),
                        format!("declare it `{name}: [{tname}!]`"),
                    )
                })
            }
            _ if ty.is_list() || arg_base != tname => Some((
                format!("{noun} `{name}` of `{owner}` has type `{ty}`, but {fdesc} is `{tname}`"),
                format!("declare it `{name}: {tname}`"),
            )),
            _ => match refusal {
                Some(OpRefusal::NotOrdered) => Some((
                    format!(
                        "operator `{}` needs an ordered field, but {fdesc} is `{tname}`",
                        op.label()
                    ),
                    "ordered types are Int, Float, String, Date and ID".into(),
                )),
                Some(_) => Some((
                    format!(
                        "operator `{}` needs a String or ID field, but {fdesc} is `{tname}`",
                        op.label()
                    ),
                    "text operators apply to String and ID fields".into(),
                )),
                None => None,
            },
        };
        if let Some((message, hint)) = problem {
            self.error(loc, message, Some(hint));
            return None;
        }
        Some(Filter {
            arg: name.to_string(),
            field,
            op,
        })
    }

    fn bind_where_arg(
        &mut self,
        entity: &str,
        arg: &Node<InputValueDefinition>,
        owner: &str,
    ) -> Option<ArgOfType> {
        let tname = arg.ty.inner_named_type().to_string();
        let is_input = matches!(
            self.schema.types.get(tname.as_str()),
            Some(ExtendedType::InputObject(_))
        );
        if !is_input || arg.ty.is_list() {
            self.error(
                arg.location(),
                format!("argument `where` of `{owner}` must be an input object, found `{}`", arg.ty),
                Some(format!("declare `input {entity}Where {{ ... }}` with fields named after `{entity}`'s fields, plus AND/OR/NOT")),
            );
            return None;
        }
        self.bind_where_input(&tname, entity, arg.location(), owner)
            .then(|| ArgOfType {
                arg: arg.name.to_string(),
                type_name: tname,
            })
    }

    /// Checks a `where` input for `entity` (once per input type).
    fn bind_where_input(
        &mut self,
        tname: &str,
        entity: &str,
        use_loc: Option<SourceSpan>,
        owner: &str,
    ) -> bool {
        if let Some(bound) = self.checked_where.get(tname) {
            return match bound {
                Some(e) if e == entity => true,
                Some(e) => {
                    let e = e.clone();
                    self.error(
                        use_loc,
                        format!("`{owner}` filters `{entity}` with `{tname}`, which filters `{e}`"),
                        Some(format!("declare a separate input for `{entity}`")),
                    );
                    false
                }
                None => false,
            };
        }
        self.checked_where.insert(tname.to_string(), None);
        let Some(ExtendedType::InputObject(input)) = self.schema.types.get(tname) else {
            return false;
        };
        let mut w = WhereInput {
            name: tname.to_string(),
            entity: entity.to_string(),
            filters: Vec::new(),
            and: None,
            or: None,
            not: None,
        };
        let mut ok = true;
        let owner = format!("input {tname}");
        for f in input.fields.values() {
            let fname = f.name.as_str();
            let same = f.ty.inner_named_type() == tname;
            match fname {
                "AND" | "OR" => {
                    let good = same && f.ty.is_list() && !f.ty.item_type().is_list();
                    if !good {
                        ok = false;
                        self.error(
                            f.location(),
                            format!("`{tname}.{fname}` must be `[{tname}!]`, found `{}`", f.ty),
                            None,
                        );
                    } else if fname == "AND" {
                        w.and = Some(fname.to_string());
                    } else {
                        w.or = Some(fname.to_string());
                    }
                }
                "NOT" => {
                    if !same || f.ty.is_list() {
                        ok = false;
                        self.error(
                            f.location(),
                            format!("`{tname}.NOT` must be `{tname}`, found `{}`", f.ty),
                            None,
                        );
                    } else {
                        w.not = Some(fname.to_string());
                    }
                }
                _ => match self.bind_filter(entity, fname, &f.ty, f.location(), &owner) {
                    Some(filter) => w.filters.push(filter),
                    None => ok = false,
                },
            }
        }
        if ok {
            self.checked_where
                .insert(tname.to_string(), Some(entity.to_string()));
            self.where_inputs.push(w);
        }
        ok
    }

    fn bind_order_arg(
        &mut self,
        entity: &str,
        arg: &Node<InputValueDefinition>,
        owner: &str,
    ) -> Option<ArgOfType> {
        let tname = arg.ty.inner_named_type().to_string();
        let is_enum = matches!(
            self.schema.types.get(tname.as_str()),
            Some(ExtendedType::Enum(_))
        );
        let nested = arg.ty.is_list() && arg.ty.item_type().is_list();
        if !is_enum || nested {
            self.error(
                arg.location(),
                format!("argument `orderBy` of `{owner}` must be an enum or a list of one, found `{}`", arg.ty),
                Some(format!("declare `enum {entity}OrderBy {{ title_ASC title_DESC ... }}` and `orderBy: [{entity}OrderBy!]`")),
            );
            return None;
        }
        if let Some(bound) = self.checked_order.get(&tname) {
            return match bound {
                Some(e) if e == entity => Some(ArgOfType {
                    arg: arg.name.to_string(),
                    type_name: tname,
                }),
                Some(e) => {
                    let e = e.clone();
                    self.error(
                        arg.location(),
                        format!("`{owner}` orders `{entity}` with `{tname}`, which orders `{e}`"),
                        Some(format!("declare a separate enum for `{entity}`")),
                    );
                    None
                }
                None => None,
            };
        }
        self.checked_order.insert(tname.clone(), None);
        let Some(ExtendedType::Enum(en)) = self.schema.types.get(tname.as_str()) else {
            return None;
        };
        let e = self.entities.iter().find(|e| e.name == entity)?;
        let mut values = Vec::new();
        let mut problems = Vec::new();
        for v in en.values.values() {
            let value = v.value.as_str();
            let parsed = value
                .strip_suffix("_ASC")
                .map(|f| (f, false))
                .or_else(|| value.strip_suffix("_DESC").map(|f| (f, true)));
            let good = parsed.and_then(|(f, desc)| {
                e.field(f)
                    .filter(|fd| fd.is_orderable())
                    .map(|_| OrderValue {
                        value: value.to_string(),
                        field: f.to_string(),
                        desc,
                    })
            });
            match good {
                Some(ov) => values.push(ov),
                None => problems.push((v.location(), value.to_string())),
            }
        }
        let had_problems = !problems.is_empty();
        for (loc, value) in problems {
            self.error(
                loc,
                format!("value `{value}` of the orderBy enum `{tname}` names no sortable field of `{entity}`"),
                Some(format!("values are `<field>_ASC` or `<field>_DESC` for a non-list field of `{entity}`, e.g. `id_ASC`")),
            );
        }
        if had_problems {
            return None;
        }
        self.checked_order
            .insert(tname.clone(), Some(entity.to_string()));
        self.order_enums.push(OrderEnum {
            name: tname.clone(),
            entity: entity.to_string(),
            values,
        });
        Some(ArgOfType {
            arg: arg.name.to_string(),
            type_name: tname,
        })
    }

    fn bind_mutation(&mut self, field: &Node<FieldDefinition>) -> Option<(String, Binding)> {
        let name = field.name.as_str();
        let fname = format!("Mutation.{name}");
        let loc = field.location();
        let split = |prefixes: &[&str]| {
            prefixes
                .iter()
                .find_map(|p| {
                    name.strip_prefix(p)
                        .filter(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
                })
                .map(str::to_string)
        };
        let (kind, type_name) = if let Some(t) = split(&CREATE_PREFIXES) {
            ("create", t)
        } else if let Some(t) = split(&["update"]) {
            ("update", t)
        } else if let Some(t) = split(&DELETE_PREFIXES) {
            ("delete", t)
        } else {
            self.error(
                loc,
                format!("`{fname}` fits no mutation convention"),
                Some(MUTATION_HINT.into()),
            );
            return None;
        };
        let Some(entity) = self.entities.iter().find(|e| e.name == type_name).cloned() else {
            self.error(
                loc,
                format!("`{fname}` names the type `{type_name}`, which is not a stored type"),
                Some(format!(
                    "{MUTATION_HINT}; the name ends with the type's exact name"
                )),
            );
            return None;
        };
        let ret = field.ty.inner_named_type().as_str();
        let args: Vec<&Node<InputValueDefinition>> = field.arguments.iter().collect();
        match kind {
            "create" | "update" => {
                if ret != entity.name || field.ty.is_list() {
                    self.error(
                        loc,
                        format!(
                            "`{fname}` must return `{}`, found `{}`",
                            entity.name, field.ty
                        ),
                        Some(format!("declare it `{name}(...): {}!`", entity.name)),
                    );
                    return None;
                }
                if kind == "create" {
                    let input = self.bind_write_input(&entity, &args, &fname, true, loc)?;
                    Some((entity.name, Binding::Create(input)))
                } else {
                    let id = args.iter().position(|a| a.name == "id");
                    let Some(id) = id else {
                        self.error(
                            loc,
                            format!(
                                "`{fname}` has no `id: ID!` argument to find the row to update"
                            ),
                            Some(format!(
                                "declare it `{name}(id: ID!, ...): {}!`",
                                entity.name
                            )),
                        );
                        return None;
                    };
                    if !is_id_bang(&args[id].ty) {
                        self.error(
                            args[id].location(),
                            format!(
                                "argument `id` of `{fname}` must be `ID!`, found `{}`",
                                args[id].ty
                            ),
                            None,
                        );
                        return None;
                    }
                    let rest: Vec<_> = args
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
                                entity.name
                            )),
                        );
                        return None;
                    }
                    let input = self.bind_write_input(&entity, &rest, &fname, false, loc)?;
                    Some((
                        entity.name,
                        Binding::Update {
                            id_arg: "id".into(),
                            input,
                        },
                    ))
                }
            }
            _ => {
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
                match args.as_slice() {
                    [a] if is_id_bang(&a.ty) => Some((
                        entity.name,
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
        }
    }

    /// Create/update values: one input object argument, or entity fields as arguments.
    fn bind_write_input(
        &mut self,
        entity: &Entity,
        args: &[&Node<InputValueDefinition>],
        owner: &str,
        create: bool,
        loc: Option<SourceSpan>,
    ) -> Option<WriteInput> {
        let schema = self.schema;
        let object = match args {
            [a] => match schema.types.get(a.ty.inner_named_type()) {
                Some(ExtendedType::InputObject(i)) if !a.ty.is_list() => Some((a, i)),
                _ => None,
            },
            _ => None,
        };
        type Located<'n> = (&'n Node<InputValueDefinition>, Option<SourceSpan>);
        let (values, where_): (Vec<Located>, String) = match &object {
            Some((a, input)) => (
                input
                    .fields
                    .values()
                    .map(|f| (&f.node, f.location()))
                    .collect(),
                format!("input `{}`", a.ty.inner_named_type()),
            ),
            None => (
                args.iter().map(|a| (*a, a.location())).collect(),
                format!("`{owner}`"),
            ),
        };
        let mut ok = true;
        let mut fields = Vec::new();
        for (v, vloc) in &values {
            let vname = v.name.as_str();
            let Some(f) = entity.field(vname) else {
                ok = false;
                self.error(
                    *vloc,
                    format!("`{vname}` of {where_} is not a field of `{}`", entity.name),
                    Some(format!(
                        "{} takes the fields of `{}` by name, or one input object argument",
                        owner, entity.name
                    )),
                );
                continue;
            };
            let expect = match &f.kind {
                FieldKind::ToMany { target, via, .. } => {
                    ok = false;
                    self.error(
                        *vloc,
                        format!(
                            "`{vname}` of {where_} sets the to-many field `{}.{vname}`",
                            entity.name
                        ),
                        Some(format!("set `{target}.{via}` on each `{target}` instead")),
                    );
                    continue;
                }
                FieldKind::Id if !create => {
                    ok = false;
                    self.error(
                        *vloc,
                        format!("`id` of {where_}: an update cannot change the id"),
                        None,
                    );
                    continue;
                }
                _ => f.input_type(),
            };
            let Some(expect) = expect else { continue };
            let got = type_ref(&v.ty);
            if got.nullable() != &expect {
                ok = false;
                self.error(
                    *vloc,
                    format!(
                        "`{vname}` of {where_} has type `{got}`, but `{}.{vname}` takes `{expect}`",
                        entity.name
                    ),
                    Some(format!(
                        "declare it `{vname}: {expect}{}`",
                        if create && entity.required_on_create(f) {
                            "!"
                        } else {
                            ""
                        }
                    )),
                );
                continue;
            }
            if create && entity.required_on_create(f) && !got.is_non_null() {
                ok = false;
                self.error(
                    *vloc,
                    format!("`{vname}` of {where_} must be `{expect}!` because `{}.{vname}` is required", entity.name),
                    None,
                );
                continue;
            }
            fields.push(vname.to_string());
        }
        if create {
            for f in entity.stored_fields() {
                if entity.required_on_create(f)
                    && !fields.contains(&f.name)
                    && values.iter().all(|(v, _)| v.name != f.name.as_str())
                {
                    ok = false;
                    let expect = match f.kind {
                        FieldKind::ToOne { .. } => "ID".to_string(),
                        _ => f.ty.nullable().to_string(),
                    };
                    self.error(
                        loc,
                        format!(
                            "{where_} cannot set the required field `{}.{}`",
                            entity.name, f.name
                        ),
                        Some(format!("add `{}: {expect}!`", f.name)),
                    );
                }
            }
        }
        if !ok {
            return None;
        }
        Some(match object {
            Some((a, input)) => WriteInput::Object {
                arg: a.name.to_string(),
                type_name: input.name.to_string(),
                fields,
            },
            None => WriteInput::Args { fields },
        })
    }

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
            self.error(
                loc,
                format!("`{fname}` fits no subscription convention"),
                Some(SUBSCRIPTION_HINT.into()),
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
        let mut filters = Vec::new();
        for arg in &field.arguments {
            if let Some(f) =
                self.bind_filter(&entity, arg.name.as_str(), &arg.ty, arg.location(), &fname)
            {
                if f.op == FilterOp::Eq {
                    filters.push(f);
                } else {
                    self.error(
                        arg.location(),
                        format!("argument `{}` of `{fname}`: subscription arguments are equality filters", arg.name),
                        Some("name the argument after a field of the type, with no operator suffix".into()),
                    );
                }
            }
        }
        Some((entity, Binding::Subscribe { event, filters }))
    }
}

const QUERY_HINT: &str = "a query field lists a type (`books(first: Int, offset: Int): [Book!]!`) or looks one up (`book(id: ID!): Book`)";
const MUTATION_HINT: &str = "mutation names are create|add|insert<Type>, update<Type> or delete|remove<Type>, e.g. `createBook`, `updateBook`, `deleteBook`";
const SUBSCRIPTION_HINT: &str = "subscription fields are `<type>Created`, `<type>Updated` or `<type>Deleted` returning the type, e.g. `bookCreated: Book!`";

fn inverse_hint(owner: &str, target: &str, candidates: &[String]) -> String {
    if candidates.is_empty() {
        format!("add a to-one field of type `{owner}` to `{target}` and name it here")
    } else {
        format!(
            "to-one fields of `{target}` of type `{owner}`: {}",
            candidates.join(", ")
        )
    }
}

fn parse_filter_name(entity: &Entity, name: &str) -> Option<(String, FilterOp)> {
    if entity.field(name).is_some_and(Field::is_stored) {
        return Some((name.to_string(), FilterOp::Eq));
    }
    FilterOp::SUFFIXED.iter().find_map(|(suffix, op)| {
        let base = name.strip_suffix(suffix)?;
        entity
            .field(base)
            .filter(|f| f.is_stored())
            .map(|_| (base.to_string(), *op))
    })
}

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

/// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
pub fn valid_scope(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

fn is_id_bang(ty: &Type) -> bool {
    matches!(ty, Type::NonNullNamed(n) if n == "ID")
}
