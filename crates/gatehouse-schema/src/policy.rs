//! Row policies (`@policy`) and the caller they are decided for.
//!
//! A policy is a filter in the language of `where` inputs whose operands may
//! be claims of the caller's token (`"$sub"`, `"$org"`). It is bound at load
//! time into [`Rule`]s on each [`crate::Entity`]; the store turns a rule and
//! an [`AccessContext`] into part of the SQL statement it runs, so nothing
//! else decides which rows a caller sees.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::model::FilterOp;

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
        ctx.system || self.bypass.as_deref().is_some_and(|s| ctx.has_scope(s))
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
    /// `NOT` (which makes it an inequality) nor through a to-one path (a
    /// field of another entity). The create rule's claim comes first when
    /// rules tie one field to different claims.
    ///
    /// A create fills them from the caller's claims when the new row leaves
    /// them out, and they are write-once: only a caller the policy does not
    /// filter ([`Policy::bypassed`]) may change them afterwards. Otherwise a
    /// member allowed to update a tenant's rows could rewrite `owner` and
    /// then pass an owner-only delete rule.
    pub fn owner_fields(&self) -> Vec<(&str, &str)> {
        fn walk<'r>(rule: &'r Rule, out: &mut Vec<(&'r str, &'r str)>) {
            match rule {
                Rule::And(all) | Rule::Or(all) => all.iter().for_each(|r| walk(r, out)),
                Rule::Cmp {
                    field,
                    op: FilterOp::Eq,
                    value: Operand::Claim(claim),
                } if !out.iter().any(|(f, _)| f == field) => out.push((field, claim)),
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

/// Who an operation of the store acts for: the scopes and claims its
/// answers depend on. Every read and write of the store takes one; there is
/// no entry point without it.
#[derive(Debug, Clone)]
pub struct AccessContext {
    scopes: BTreeSet<String>,
    claims: Map<String, Json>,
    read_only: bool,
    system: bool,
    /// Identity of the inputs a decision reads, for caches keyed by
    /// caller: made on first use (most requests read no policy).
    key: std::sync::OnceLock<String>,
}

impl PartialEq for AccessContext {
    fn eq(&self, other: &Self) -> bool {
        // `key` is derived from the rest.
        self.scopes == other.scopes
            && self.claims == other.claims
            && self.read_only == other.read_only
            && self.system == other.system
    }
}

impl AccessContext {
    /// A caller holding `scopes` and `claims` (`sub`, `client_id` and any
    /// custom ones). `read_only` callers (anonymous) may only read.
    pub fn caller(scopes: BTreeSet<String>, claims: Map<String, Json>, read_only: bool) -> Self {
        AccessContext {
            scopes,
            claims,
            read_only,
            system: false,
            key: std::sync::OnceLock::new(),
        }
    }

    /// gatehouse itself (bootstrap rows, administration commands, tests of
    /// the store): no scope is required and no policy filters. Say so
    /// explicitly: only trusted, in-process callers use it.
    pub fn system() -> Self {
        AccessContext {
            scopes: BTreeSet::new(),
            claims: Map::new(),
            read_only: false,
            system: true,
            key: std::sync::OnceLock::from("system".to_string()),
        }
    }

    /// Whether this is [`AccessContext::system`].
    pub fn is_system(&self) -> bool {
        self.system
    }

    /// Whether the caller holds `scope` (the system caller holds every one).
    pub fn has_scope(&self, scope: &str) -> bool {
        self.system || self.scopes.contains(scope)
    }

    /// Whether the caller may use `scope` for a read or a write.
    pub fn allows(&self, scope: &str, is_read: bool) -> bool {
        (is_read || !self.read_only) && self.has_scope(scope)
    }

    /// The claim `name`, if the caller has it.
    pub fn claim(&self, name: &str) -> Option<&Json> {
        self.claims.get(name).filter(|v| !v.is_null())
    }

    /// A string identifying everything decisions read of this caller:
    /// equal keys get equal answers (for caches and shared subscriptions).
    pub fn key(&self) -> &str {
        self.key.get_or_init(|| {
            // Scope tokens hold no space (RFC 6749 §3.3); claims are JSON.
            format!(
                "{}\u{0}{}\u{0}{}",
                u8::from(self.read_only),
                self.scopes
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
                Json::Object(self.claims.clone())
            )
        })
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
            Rule::And(all) => list(f, "AND", all),
            Rule::Or(all) => list(f, "OR", all),
            Rule::Not(r) => write!(f, "{{NOT: {r}}}"),
            Rule::Cmp { field, op, value } => write!(f, "{{{field}{}: {value}}}", op.suffix()),
            Rule::Path { field, rule, .. } => write!(f, "{{{field}: {rule}}}"),
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
        if let Some(b) = &self.bypass {
            out.push_str(&format!("  bypass  scope `{b}`\n"));
        }
        out
    }
}
