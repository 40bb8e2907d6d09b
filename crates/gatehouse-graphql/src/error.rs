//! Error codes in `extensions.code` ([`Code`]), and how store errors become GraphQL errors.

use async_graphql::{Error, ErrorExtensions};
use gatehouse_store::StoreError;

/// The `extensions.code` of a GraphQL error: the stable string clients
/// match on, attached where the error is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The query is deeper than `limits.max_depth`.
    QueryTooDeep,
    /// The query's complexity exceeds `limits.max_complexity`.
    QueryTooComplex,
    /// A count argument above `limits.max_page_size`.
    PageSizeExceeded,
    /// A value the schema accepts but the data rules do not (bad Date, Int
    /// out of range, ...), or a request refused before GraphQL reads it.
    BadUserInput,
    /// Update or delete of a missing id.
    NotFound,
    /// Unique violation, duplicate id, or deleting a row others reference.
    Conflict,
    /// No or bad credentials.
    Unauthenticated,
    /// Credentials lack the scope a field needs, or a policy refuses.
    Forbidden,
    /// The query text does not parse.
    GraphqlParseFailed,
    /// The query does not validate against the schema.
    GraphqlValidationFailed,
    /// The store cannot be reached right now.
    ServiceUnavailable,
    /// A bug; details are in the server log only.
    InternalServerError,
}

impl Code {
    /// Every code, for reading one back from its string.
    const ALL: [Code; 12] = [
        Code::QueryTooDeep,
        Code::QueryTooComplex,
        Code::PageSizeExceeded,
        Code::BadUserInput,
        Code::NotFound,
        Code::Conflict,
        Code::Unauthenticated,
        Code::Forbidden,
        Code::GraphqlParseFailed,
        Code::GraphqlValidationFailed,
        Code::ServiceUnavailable,
        Code::InternalServerError,
    ];

    /// The wire string (`"BAD_USER_INPUT"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::QueryTooDeep => "QUERY_TOO_DEEP",
            Code::QueryTooComplex => "QUERY_TOO_COMPLEX",
            Code::PageSizeExceeded => "PAGE_SIZE_EXCEEDED",
            Code::BadUserInput => "BAD_USER_INPUT",
            Code::NotFound => "NOT_FOUND",
            Code::Conflict => "CONFLICT",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::Forbidden => "FORBIDDEN",
            Code::GraphqlParseFailed => "GRAPHQL_PARSE_FAILED",
            Code::GraphqlValidationFailed => "GRAPHQL_VALIDATION_FAILED",
            Code::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            Code::InternalServerError => "INTERNAL_SERVER_ERROR",
        }
    }

    /// The code `e` carries; `None` when it carries none (async-graphql's
    /// own errors, until [`Graphql`](crate::Graphql) codes them).
    pub fn of(e: &async_graphql::ServerError) -> Option<Code> {
        match e.extensions.as_ref()?.get("code")? {
            async_graphql::Value::String(s) => Code::ALL.into_iter().find(|c| c.as_str() == s),
            _ => None,
        }
    }

    /// A GraphQL error (`{"message", "extensions": {"code"}}`) with this
    /// code, for answers written outside async-graphql (refusals before
    /// execution, transport errors).
    pub fn error_json(self, message: &str) -> serde_json::Value {
        serde_json::json!({"message": message, "extensions": {"code": self.as_str()}})
    }

    /// Whether it refuses a query for its size (depth or complexity)
    /// before anything runs.
    pub const fn is_size_limit(self) -> bool {
        matches!(self, Code::QueryTooDeep | Code::QueryTooComplex)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
pub fn coded(code: Code, message: impl Into<String>) -> Error {
    Error::new(message).extend_with(|_, e| e.set("code", code.as_str()))
}

/// A store error as a GraphQL error; internal causes stay in the log.
pub fn from_store(e: &StoreError) -> Error {
    match e {
        StoreError::NotFound => coded(Code::NotFound, "no row with this id"),
        StoreError::Conflict { .. } => coded(Code::Conflict, e.to_string()),
        StoreError::Forbidden { .. } => coded(Code::Forbidden, e.to_string()),
        StoreError::Invalid { .. } => coded(Code::BadUserInput, e.to_string()),
        StoreError::Unavailable => coded(
            Code::ServiceUnavailable,
            "storage is unavailable; retry later",
        ),
        _ => {
            tracing::error!(error = ?e, "store error during GraphQL execution");
            coded(Code::InternalServerError, "internal error")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_the_error_it_is_on() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            let e = coded(code, "m").into_server_error(Default::default());
            assert_eq!(Code::of(&e), Some(code));
        }
        let plain = Error::new("m").into_server_error(Default::default());
        assert_eq!(Code::of(&plain), None);
        let foreign = Error::new("m")
            .extend_with(|_, e| e.set("code", "SOMETHING_ELSE"))
            .into_server_error(Default::default());
        assert_eq!(Code::of(&foreign), None);
    }
}
