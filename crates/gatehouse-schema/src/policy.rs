//! Row policies (`@policy`) and the caller they are decided for.
//!
//! A policy is a filter in the language of `where` inputs whose operands may
//! be claims of the caller's token (`"$sub"`, `"$org"`). It is bound at load
//! time into [`Rule`]s on each [`crate::Entity`]; the store turns a rule and
//! an [`AccessContext`] into part of the SQL statement it runs, so nothing
//! else decides which rows a caller sees.

use std::fmt;

use serde::Serialize;
use serde_json::Value as Json;

use crate::model::{FilterOp, Quantifier};
pub use gatehouse_access::AccessContext;

/// The effective policy of an entity: for each action, the rule a row must
/// match (`None`: every row the scopes allow), and the scope that lifts it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Policy {
    /// Rows a caller may read (lists, lookups, counts, relations, events).
    pub read: Option<Rule>,
    /// What a new row must match.
    pub create: Option<Rule>,
    /// Rows a caller may change, before and after the change.
    pub update: Option<Rule>,
    /// Rows a caller may delete.
    pub delete: Option<Rule>,
    /// A caller holding this scope is not filtered.
    pub bypass: Option<String>,
}

/// The actions a policy distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Reading.
    Read,
    /// Creating.
    Create,
    /// Updating (checked on the row before and after).
    Update,
    /// Deleting.
    Delete,
}

impl Policy {
    /// Whether `ctx` is above the policy: the trusted system caller, or a
    /// caller holding the `bypass` scope. Such a caller is not filtered and
    /// may change owner fields.
    pub fn bypassed(&self, ctx: &AccessContext) -> bool {
        ctx.is_system() || self.bypass.as_deref().is_some_and(|s| ctx.has_scope(s))
    }

    /// The rule `action` must satisfy for `ctx`: `None` when it is not
    /// filtered (no rule, a trusted caller, or the bypass scope).
    pub fn rule_for(&self, action: Action, ctx: &AccessContext) -> Option<&Rule> {
        if self.bypassed(ctx) {
            return None;
        }
        match action {
            Action::Read => self.read.as_ref(),
            Action::Create => self.create.as_ref(),
            Action::Update => self.update.as_ref(),
            Action::Delete => self.delete.as_ref(),
        }
    }

    /// Whether any action is filtered.
    pub fn is_empty(&self) -> bool {
        self.read.is_none()
            && self.create.is_none()
            && self.update.is_none()
            && self.delete.is_none()
    }

    /// The owner fields, each with the claim it is tied to: the fields that
    /// any of the rules compares for equality with a claim (`owner:
    /// "$sub"`, `org: "$org"`), at any depth of `AND`/`OR` but not under
    /// `NOT` (which makes it an inequality) nor through a to-one path or a
    /// to-many relation filter (fields of other rows). The create rule's claim comes first when
    /// rules tie one field to different claims.
    ///
    /// A create fills them from the caller's claims when the new row leaves
    /// them out, and they are write-once: only a caller the policy does not
    /// filter ([`Policy::bypassed`]) may change them afterwards. Otherwise a
    /// member allowed to update a tenant's rows could rewrite `owner` and
    /// then pass an owner-only delete rule.
    ///
    /// The `id` is never one: a rule on it (`{id: "$sub"}` on the account
    /// type) filters and checks rows, but a new row's id is made by the
    /// server or given, never taken from the caller's claims (an admin
    /// creating an account must not give it the admin's own `sub`).
    pub fn owner_fields(&self) -> Vec<(&str, &str)> {
        fn walk<'r>(rule: &'r Rule, out: &mut Vec<(&'r str, &'r str)>) {
            match rule {
                Rule::And(all) | Rule::Or(all) => all.iter().for_each(|r| walk(r, out)),
                Rule::Cmp {
                    field,
                    op: FilterOp::Eq,
                    value: Operand::Claim(claim),
                } if field != "id" && !out.iter().any(|(f, _)| f == field) => {
                    out.push((field, claim))
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for rule in [&self.create, &self.read, &self.update, &self.delete]
            .into_iter()
            .flatten()
        {
            walk(rule, &mut out);
        }
        out
    }

    /// Whether `field` is an owner field ([`Policy::owner_fields`]).
    pub fn is_owner_field(&self, field: &str) -> bool {
        self.owner_fields().iter().any(|(f, _)| *f == field)
    }
}

/// One condition of a policy, over the fields of one entity.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub enum Rule {
    /// Every part holds.
    And(Vec<Rule>),
    /// At least one part holds.
    Or(Vec<Rule>),
    /// The part does not hold.
    Not(Box<Rule>),
    /// A comparison of a stored field (`published: true`, `owner: "$sub"`).
    Cmp {
        /// GraphQL field name.
        field: String,
        /// Operator, from the key's suffix.
        op: FilterOp,
        /// What it compares with.
        value: Operand,
    },
    /// A condition on the row a to-one field refers to
    /// (`{project: {owner: "$sub"}}`); a null reference does not match.
    Path {
        /// The to-one field.
        field: String,
        /// Its target entity.
        target: String,
        /// What the referenced row must match.
        rule: Box<Rule>,
    },
    /// A condition on the rows a to-many field reaches
    /// (`{members_some: {user: "$sub"}}`), many-to-many included. The rows
    /// are read without their own policies, and when the rule judges a
    /// row being created or updated, that row is not among them: a new
    /// row cannot vouch for itself. Their fields are not owner fields.
    Related {
        /// The to-many field.
        field: String,
        /// How the reached rows are judged.
        quantifier: Quantifier,
        /// What a reached row must match.
        rule: Box<Rule>,
    },
}

/// An operand of a policy comparison.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub enum Operand {
    /// A value written in the schema.
    Literal(Json),
    /// A claim of the caller (`$sub`); a missing claim matches nothing.
    Claim(String),
    /// A list (`_in`, `_not_in`), of literals and claims.
    List(Vec<Operand>),
}

impl Operand {
    /// The value for `ctx`; `None` when it names a claim the caller lacks
    /// (then the comparison matches nothing, even under `NOT`).
    pub fn resolve(&self, ctx: &AccessContext) -> Option<Json> {
        match self {
            Operand::Literal(v) => Some(v.clone()),
            Operand::Claim(name) => ctx.claim(name).cloned(),
            Operand::List(items) => items
                .iter()
                .map(|i| i.resolve(ctx))
                .collect::<Option<Vec<_>>>()
                .map(Json::Array),
        }
    }
}

impl Rule {
    /// Whether the rule goes through a to-many relation anywhere
    /// (`_some`, `_every`, `_none`, also behind a to-one path).
    pub fn has_related(&self) -> bool {
        match self {
            Rule::And(all) | Rule::Or(all) => all.iter().any(Rule::has_related),
            Rule::Not(inner) => inner.has_related(),
            Rule::Cmp { .. } => false,
            Rule::Path { rule, .. } => rule.has_related(),
            Rule::Related { .. } => true,
        }
    }
}

// ---- printing, for `gatehouse check --explain` ---------------------------

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, name: &str, all: &[Rule]| {
            write!(f, "{{{name}: [")?;
            for (i, r) in all.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{r}")?;
            }
            f.write_str("]}")
        };
        match self {
            // `{}`: every row (as a relation filter, any child).
            Rule::And(all) if all.is_empty() => f.write_str("{}"),
            Rule::And(all) => list(f, "AND", all),
            Rule::Or(all) => list(f, "OR", all),
            Rule::Not(r) => write!(f, "{{NOT: {r}}}"),
            Rule::Cmp { field, op, value } => write!(f, "{{{field}{}: {value}}}", op.suffix()),
            Rule::Path { field, rule, .. } => write!(f, "{{{field}: {rule}}}"),
            Rule::Related {
                field,
                quantifier,
                rule,
            } => write!(f, "{{{field}{}: {rule}}}", quantifier.suffix()),
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Literal(Json::String(s)) if s.starts_with('$') => {
                write!(f, "{}", Json::String(format!("${s}")))
            }
            Operand::Literal(v) => write!(f, "{v}"),
            Operand::Claim(c) => write!(f, "\"${c}\""),
            Operand::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl Policy {
    /// The effective policy, one line per action, as `check --explain` prints it.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        if self.is_empty() && self.bypass.is_none() {
            return "  rows    every row (no @policy)\n".to_string();
        }
        let line = |out: &mut String, name: &str, r: &Option<Rule>| {
            out.push_str(&match r {
                Some(r) => format!("  {name:<7} {r}\n"),
                None => format!("  {name:<7} every row (scopes only)\n"),
            });
        };
        line(&mut out, "read", &self.read);
        line(&mut out, "create", &self.create);
        line(&mut out, "update", &self.update);
        line(&mut out, "delete", &self.delete);
        if [&self.read, &self.create, &self.update, &self.delete]
            .into_iter()
            .flatten()
            .any(Rule::has_related)
        {
            out.push_str(
                "  note    `_some`/`_every`/`_none` read the rows they reach without those rows' policies, \
                 and leave out the row being created or updated\n",
            );
        }
        if let Some(b) = &self.bypass {
            out.push_str(&format!("  bypass  scope `{b}`\n"));
        }
        out
    }
}
