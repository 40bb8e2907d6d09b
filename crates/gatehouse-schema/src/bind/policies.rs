//! Who may do what: `@policy` row rules on an entity, in the language of
//! `where` inputs with claims as operands, and the three places `@auth`
//! goes (`read:`/`write:` on an entity type or field, `scope:` on a root
//! field), each refusing the other's arguments.

use apollo_compiler::Node;
use apollo_compiler::ast::{self, FieldDefinition};
use apollo_compiler::schema::{DirectiveList, ObjectType};

use super::Binder;
use super::arguments::{parse_filter_name, stored_field_names};
use crate::model::*;
use crate::policy::{Operand, Policy, Rule};

impl Binder<'_> {
    /// Binds `@policy` on an entity: each argument a rule over its fields,
    /// then the most specific argument chosen for each action.
    pub(super) fn bind_policy(&mut self, obj: &Node<ObjectType>) -> Policy {
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
        let e = self.entity_named(entity)?.clone();
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

    /// One `<field><suffix>: value` entry of a rule; a to-one field compared
    /// with an object is a path into the target's rule.
    fn policy_cmp(
        &mut self,
        e: &Entity,
        key: &str,
        value: &Node<ast::Value>,
        at: &str,
    ) -> Option<Rule> {
        let loc = value.location();
        let entity = e.name.as_str();
        if let Some((field, quantifier, target)) = self.relation_filter_target(entity, key) {
            // The rows reached are read without their own policies (the
            // rule's author decides); the store excludes the row being
            // written from them.
            let rule = self.policy_rule(&target, value, at)?;
            return Some(Rule::Related {
                field,
                quantifier,
                rule: Box::new(rule),
            });
        }
        let Some((field, op)) = parse_filter_name(e, key) else {
            let fields = stored_field_names(e);
            self.error(
                loc,
                format!("`{key}` in `{at}` on `{entity}` binds to nothing"),
                Some(format!(
                    "a policy takes `AND`, `OR`, `NOT`, a to-many field with `_some`, `_every` or `_none`, or a field of `{entity}` ({fields}) with an optional operator suffix ({}), as a `where` input does",
                    FilterOp::suffix_list()
                )),
            );
            return None;
        };
        let f = e.field(&field)?;
        if let (FieldKind::ToOne { .. }, FilterOp::Eq, ast::Value::Object(_)) =
            (&f.kind, op, value.as_ref())
        {
            let target = self.target_of(f)?.name.clone();
            let rule = self.policy_rule(&target, value, at)?;
            return Some(Rule::Path {
                field,
                target,
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
        let json = literal_json(v, ty).and_then(|l| match l {
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

    /// `@auth` on an entity type: the scopes reading and writing it need.
    pub(super) fn type_auth(&mut self, name: &str, directives: &DirectiveList) -> TypeAuth {
        let Some(d) = directives.get("auth").map(|c| &c.node) else {
            return TypeAuth::default();
        };
        self.read_write_scopes(
            d,
            format!("`@auth(scope:)` on the type `{name}`: a type takes `read:` and `write:`"),
        )
    }

    /// `@auth(read:, write:)` on an entity field: the scopes its value needs
    /// beyond the type's own.
    pub(super) fn field_auth(&mut self, entity: &str, field: &Node<FieldDefinition>) -> TypeAuth {
        let Some(d) = field.directives.get("auth") else {
            return TypeAuth::default();
        };
        self.read_write_scopes(
            d,
            format!(
                "`@auth(scope:)` on the field `{entity}.{}`: an entity field takes `read:` and `write:`",
                field.name
            ),
        )
    }

    /// The `read:` and `write:` scopes of an entity's `@auth`; `scope:`,
    /// which belongs to root fields, is refused with `refusal`.
    fn read_write_scopes(&mut self, d: &Node<ast::Directive>, refusal: String) -> TypeAuth {
        if d.specified_argument_by_name("scope").is_some() {
            self.error(
                d.location(),
                refusal,
                Some("`@auth(scope:)` goes on a root field".into()),
            );
        }
        let read = self.scope_arg(d, "read");
        let write = self.scope_arg(d, "write");
        TypeAuth { read, write }
    }

    /// The scope a root field needs (`@auth(scope:)`); the directives that
    /// belong to entity fields are refused on it.
    pub(super) fn root_scope(
        &mut self,
        root: &str,
        field: &Node<FieldDefinition>,
    ) -> Option<String> {
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

    /// A string argument of `d` that must be an OAuth scope.
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
}

/// A policy literal as JSON, by its GraphQL kind first (an enum type takes
/// enum literals, not strings); the value checker every layer uses runs on
/// the result.
pub(super) fn literal_json(v: &ast::Value, ty: &ValueType) -> Option<serde_json::Value> {
    match (v, ty) {
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
    }
}

/// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
pub fn valid_scope(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Binds `text`, a GraphQL object literal in the language of `where`
/// inputs (`{status: DONE, project: {archived: false}}`), to a [`Rule`]
/// over the rows of `entity`, exactly as a `@policy` rule is bound, but
/// with literals only: a rule written outside the schema (a webhook's
/// `where`) is judged without a caller, so a claim (`"$sub"`) is refused.
///
/// Diagnostics name `origin` as their file, with lines and columns in
/// `text`.
pub fn bind_filter(
    model: &Model,
    entity: &str,
    text: &str,
    origin: &str,
) -> Result<Rule, crate::Diagnostics> {
    // The literal is parsed as an argument of a one-field query, on a line
    // of its own: two lines come before it.
    const LINES_BEFORE: usize = 2;
    let source = format!("{{\n  f(where:\n{text}\n  )\n}}\n");
    let mut diags = crate::Diagnostics::default();
    let doc = match ast::Document::parse(source, origin) {
        Ok(doc) => doc,
        Err(with_errors) => {
            crate::load::push_apollo(&with_errors.errors, &mut diags);
            for d in &mut diags.0 {
                d.line = d.line.saturating_sub(LINES_BEFORE);
                d.message = format!("`where` does not parse: {}", d.message);
            }
            return Err(diags);
        }
    };
    let value = doc.definitions.iter().find_map(|d| match d {
        ast::Definition::OperationDefinition(op) => op.selection_set.iter().find_map(|s| match s {
            ast::Selection::Field(f) => f.arguments.first().map(|a| a.value.clone()),
            _ => None,
        }),
        _ => None,
    });
    let Some(value) = value else {
        diags.0.push(crate::Diagnostic {
            file: origin.to_string(),
            line: 0,
            column: 0,
            severity: crate::Severity::Error,
            message: "`where` must be one object like `{status: DONE}`".into(),
            hint: None,
        });
        return Err(diags);
    };
    if model.entity(entity).is_none() {
        diags.0.push(crate::Diagnostic {
            file: origin.to_string(),
            line: 0,
            column: 0,
            severity: crate::Severity::Error,
            message: format!("the schema has no type `{entity}`"),
            hint: None,
        });
        return Err(diags);
    }
    let mut schema = apollo_compiler::Schema::new();
    schema.sources = doc.sources.clone();
    let rule = {
        let mut b = Binder::over(&schema, &mut diags, model);
        b.policy_rule(entity, &value, "where")
    };
    let mut claims = Vec::new();
    if let Some(r) = &rule {
        claims_of(r, &mut claims);
    }
    for claim in claims {
        diags.0.push(crate::Diagnostic {
            file: origin.to_string(),
            line: 0,
            column: 0,
            severity: crate::Severity::Error,
            message: format!(
                "`where` compares with the claim `\"${claim}\"`, but it is judged without a caller"
            ),
            hint: Some("compare with values; write `$$` for a string starting with `$`".into()),
        });
    }
    for d in &mut diags.0 {
        d.line = d.line.saturating_sub(LINES_BEFORE);
    }
    match rule {
        Some(rule) if !diags.has_errors() => Ok(rule),
        _ => Err(diags),
    }
}

/// The claims `rule` compares with, at any depth.
fn claims_of(rule: &Rule, out: &mut Vec<String>) {
    fn operand(o: &Operand, out: &mut Vec<String>) {
        match o {
            Operand::Literal(_) => {}
            Operand::Claim(c) => out.push(c.clone()),
            Operand::List(items) => items.iter().for_each(|i| operand(i, out)),
        }
    }
    match rule {
        Rule::And(all) | Rule::Or(all) => all.iter().for_each(|r| claims_of(r, out)),
        Rule::Not(r) => claims_of(r, out),
        Rule::Cmp { value, .. } => operand(value, out),
        Rule::Path { rule, .. } | Rule::Related { rule, .. } => claims_of(rule, out),
    }
}
