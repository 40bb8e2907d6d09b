//! Error codes in `extensions.code`, and how store errors become GraphQL errors.

use async_graphql::{Error, ErrorExtensions};
use gatehouse_store::StoreError;

/// The query is deeper than `limits.max_depth`.
pub const QUERY_TOO_DEEP: &str = "QUERY_TOO_DEEP";
/// The query's complexity exceeds `limits.max_complexity`.
pub const QUERY_TOO_COMPLEX: &str = "QUERY_TOO_COMPLEX";
/// A count argument above `limits.max_page_size`.
pub const PAGE_SIZE_EXCEEDED: &str = "PAGE_SIZE_EXCEEDED";
/// A value the schema accepts but the data rules do not (bad Date, Int out of range, ...).
pub const BAD_USER_INPUT: &str = "BAD_USER_INPUT";
/// Update or delete of a missing id.
pub const NOT_FOUND: &str = "NOT_FOUND";
/// Unique violation, duplicate id, or deleting a row others reference.
pub const CONFLICT: &str = "CONFLICT";
/// No or bad credentials.
pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
/// Credentials lack the scope a field needs.
pub const FORBIDDEN: &str = "FORBIDDEN";
/// The query text does not parse.
pub const GRAPHQL_PARSE_FAILED: &str = "GRAPHQL_PARSE_FAILED";
/// The query does not validate against the schema.
pub const GRAPHQL_VALIDATION_FAILED: &str = "GRAPHQL_VALIDATION_FAILED";
/// The store cannot be reached right now.
pub const SERVICE_UNAVAILABLE: &str = "SERVICE_UNAVAILABLE";
/// A bug; details are in the server log only.
pub const INTERNAL_SERVER_ERROR: &str = "INTERNAL_SERVER_ERROR";

/// Field errors reported while a stream (a subscription) executes:
/// async-graphql keeps what resolvers add per request, not per event, and
/// never sends it; the stream takes them out after each event.
#[derive(Debug, Default)]
pub(crate) struct FieldErrors(std::sync::Mutex<Vec<async_graphql::ServerError>>);

impl FieldErrors {
    /// Records `e` for the event being resolved.
    pub(crate) fn push(&self, e: async_graphql::ServerError) {
        if let Ok(mut errors) = self.0.lock() {
            errors.push(e);
        }
    }

    /// The errors recorded since the last call.
    pub(crate) fn take(&self) -> Vec<async_graphql::ServerError> {
        self.0
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

/// An error with `extensions.code`.
pub fn coded(code: &'static str, message: impl Into<String>) -> Error {
    Error::new(message).extend_with(|_, e| e.set("code", code))
}

/// A store error as a GraphQL error; internal causes stay in the log.
pub fn from_store(e: &StoreError) -> Error {
    match e {
        StoreError::NotFound => coded(NOT_FOUND, "no row with this id"),
        StoreError::Conflict { .. } => coded(CONFLICT, e.to_string()),
        StoreError::Forbidden { .. } => coded(FORBIDDEN, e.to_string()),
        StoreError::Invalid { .. } => coded(BAD_USER_INPUT, e.to_string()),
        StoreError::Unavailable => {
            coded(SERVICE_UNAVAILABLE, "storage is unavailable; retry later")
        }
        _ => {
            tracing::error!(error = ?e, "store error during GraphQL execution");
            coded(INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}
