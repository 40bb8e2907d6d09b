//! Who a request acts for: the [`AccessContext`] (scopes and claims) that
//! every decision of the Model and the store reads, and the one rule for
//! whether it may use a scope ([`AccessContext::check_scope`]).
//!
//! A crate of its own so that the authorization server, which builds an
//! access context from a token, and the schema and store, which decide on
//! one, share it without depending on each other.

#![warn(missing_docs)]

mod claims;

pub use claims::{
    MAX_CLAIM_NAME, PROFILE_CLAIMS, RESERVED_CLAIMS, claim_name_problem, is_reserved_claim,
};

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};

/// Why a caller may not use a scope: what the HTTP layers answer
/// (401 / `UNAUTHENTICATED` or 403 / `FORBIDDEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRefusal {
    /// The caller brought no credentials (anonymous, or none at all):
    /// credentials holding the scope could help.
    Unauthenticated,
    /// The caller's credentials do not hold the scope.
    Forbidden,
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

    /// Whether the caller may use `scope` for a read or a write. Every
    /// entry point (GraphQL's executors, REST, subscriptions, the schema
    /// documents) and the store ask this one rule.
    pub fn allows(&self, scope: &str, is_read: bool) -> bool {
        (is_read || !self.read_only) && self.has_scope(scope)
    }

    /// [`AccessContext::allows`], saying why not: a caller without
    /// credentials (read-only: anonymous or none) is told credentials could
    /// help, one whose credentials lack the scope that they do not.
    pub fn check_scope(&self, scope: &str, is_read: bool) -> Result<(), ScopeRefusal> {
        if self.allows(scope, is_read) {
            Ok(())
        } else if self.read_only {
            Err(ScopeRefusal::Unauthenticated)
        } else {
            Err(ScopeRefusal::Forbidden)
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes(s: &[&str]) -> BTreeSet<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_rule_for_every_kind_of_caller() {
        let user = AccessContext::caller(scopes(&["read"]), Map::new(), false);
        assert_eq!(user.check_scope("read", true), Ok(()));
        assert_eq!(user.check_scope("read", false), Ok(()));
        assert_eq!(
            user.check_scope("write", false),
            Err(ScopeRefusal::Forbidden)
        );
        // Anonymous callers (and requests without credentials) only read,
        // and are told credentials could help.
        let anonymous = AccessContext::caller(scopes(&["read"]), Map::new(), true);
        assert_eq!(anonymous.check_scope("read", true), Ok(()));
        assert_eq!(
            anonymous.check_scope("read", false),
            Err(ScopeRefusal::Unauthenticated)
        );
        let nobody = AccessContext::caller(BTreeSet::new(), Map::new(), true);
        assert_eq!(
            nobody.check_scope("read", true),
            Err(ScopeRefusal::Unauthenticated)
        );
        let system = AccessContext::system();
        assert_eq!(system.check_scope("anything", false), Ok(()));
    }
}
