//! What gatehouse's crates share to be observed, with no dependency but the
//! `metrics` facade: per-thread metric handles for hot paths
//! ([`handles::Handles`]), and the [`RouteLabel`] a router gives the
//! responses it resolves, which the HTTP layer's request log and metrics
//! name instead of the raw path.

#![warn(missing_docs)]

pub mod handles;

use std::sync::Arc;

/// The route a request was resolved to, as a template relative to the
/// router's mount point (`/v1/books/{id}/reviews`): set in a response's extensions by the router
/// that parsed the path, read by the request log line and the HTTP
/// metrics. Built only from names the router knows (the schema's
/// collections and relations, `{id}` for values), never from request
/// text, so its values are bounded and say nothing of a caller's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLabel(pub Arc<str>);
