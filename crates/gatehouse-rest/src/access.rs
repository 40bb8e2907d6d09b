//! Authorization of REST requests, decided on what the router resolved (the
//! collection, the item, the nested relation), never on the raw path: a
//! percent-encoded segment names the same collection here as in the
//! handler, because both read the one decoded route.
//!
//! The scopes themselves come from the Model (`Entity::read_scope`,
//! `Entity::write_scope`, `Model::field_read_scope`); this module only asks
//! whether the caller's [`Principal`] holds them and words the refusal.

use axum::http::{HeaderValue, StatusCode, header};
use gatehouse_access::ScopeRefusal;
use gatehouse_auth::{Principal, challenge};
use gatehouse_schema::{AccessContext, Entity, Model};
use gatehouse_store::Code;

use crate::problem::Problem;

/// Who is calling, as far as authorization is concerned.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// What scopes are checked and the store decides this caller's rows on.
    pub(crate) access: AccessContext,
}

impl Caller {
    /// The caller of a request carrying `principal` (the authentication
    /// layer puts it into the request's extensions); without one, a
    /// trusted in-process caller unless `required` (see
    /// `gatehouse_auth::access_context_of`).
    pub(crate) fn new(principal: Option<&Principal>, required: bool) -> Self {
        Caller {
            access: gatehouse_auth::access_context_of(principal, required),
        }
    }

    /// Whether the caller holds `scope` for reading or writing.
    pub(crate) fn may(&self, scope: &str, is_read: bool) -> bool {
        self.access.allows(scope, is_read)
    }

    /// `Ok` when the caller holds `scope`; otherwise the refusal: 401 for a
    /// caller without credentials (anonymous reads included: credentials
    /// could help), 403 `insufficient_scope` for one whose credentials lack
    /// the scope (RFC 6750 §3.1).
    pub(crate) fn require(&self, scope: &str, is_read: bool) -> Result<(), Problem> {
        match self.access.check_scope(scope, is_read) {
            Ok(()) => Ok(()),
            Err(ScopeRefusal::Unauthenticated) => Err(unauthenticated(&format!(
                "this request needs credentials with the scope `{scope}`"
            ))),
            Err(ScopeRefusal::Forbidden) => Err(Problem::new(
                StatusCode::FORBIDDEN,
                Code::Forbidden,
                format!("this request needs the scope `{scope}`"),
            )
            .with_header(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge::insufficient_scope(scope))
                    .unwrap_or_else(|_| HeaderValue::from_static(challenge::MISSING)),
            )),
        }
    }

    /// Reading rows of `entity`.
    pub(crate) fn read(&self, entity: &Entity) -> Result<(), Problem> {
        self.require(entity.read_scope(), true)
    }

    /// Creating, changing or deleting rows of `entity`.
    pub(crate) fn write(&self, entity: &Entity) -> Result<(), Problem> {
        self.require(entity.write_scope(), false)
    }

    /// The fields of `entity` this caller may not see (a to-one reference
    /// to a type it may not read). Usually empty, which costs nothing.
    pub(crate) fn hidden<'m>(&self, model: &'m Model, entity: &'m Entity) -> Vec<&'m str> {
        entity
            .stored_fields()
            .filter(|f| {
                model
                    .field_read_scope(f)
                    .is_some_and(|scope| !self.may(scope, true))
            })
            .map(|f| f.name.as_str())
            .collect()
    }

    /// `Ok` unless `field` is one of `hidden`: filtering, sorting, selecting
    /// or setting a field the caller may not read is refused, so the answer
    /// never tells which ids it holds.
    pub(crate) fn use_field(
        &self,
        model: &Model,
        entity: &Entity,
        hidden: &[&str],
        field: &str,
    ) -> Result<(), Problem> {
        if !hidden.contains(&field) {
            return Ok(());
        }
        match entity.field(field).and_then(|f| model.field_read_scope(f)) {
            Some(scope) => self.require(scope, true),
            // No scope beyond the entity's (not hidden, then).
            None => self.read(entity),
        }
    }
}

fn unauthenticated(detail: &str) -> Problem {
    Problem::new(StatusCode::UNAUTHORIZED, Code::Unauthenticated, detail).with_header(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge::MISSING),
    )
}
