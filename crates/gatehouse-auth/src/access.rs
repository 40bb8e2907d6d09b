//! From an authenticated caller to the access context the store decides
//! rows for: the one conversion every entry point (GraphQL, REST,
//! subscriptions) uses.

use gatehouse_access::AccessContext;
use serde_json::{Map, Value as Json};

use crate::Principal;

impl Principal {
    /// The scopes and claims row policies and field scopes are decided on:
    /// `sub` (the user; absent for anonymous callers and for clients and
    /// consumers acting for themselves, [`Principal::user`]), `client_id`
    /// (for a token issued to a client) and the custom claims. An
    /// anonymous caller may only read.
    pub fn access_context(&self) -> AccessContext {
        // Custom claims never hold `sub` or `client_id` (reserved names).
        let mut claims = self.claims.clone();
        if let Some(user) = self.user() {
            claims.insert("sub".into(), Json::String(user.to_string()));
        }
        if let Some(c) = &self.client_id {
            claims.insert("client_id".into(), Json::String(c.clone()));
        }
        AccessContext::caller(self.scopes.clone(), claims, self.is_anonymous())
    }
}

/// The access context of a request that carries `principal`; without one,
/// the trusted in-process caller when requests need no credentials
/// (`required` false: embedders running the routers without the
/// authentication layer), else a caller holding nothing.
pub fn access_context_of(principal: Option<&Principal>, required: bool) -> AccessContext {
    match principal {
        Some(p) => p.access_context(),
        None if !required => AccessContext::system(),
        None => AccessContext::caller(Default::default(), Map::new(), true),
    }
}
