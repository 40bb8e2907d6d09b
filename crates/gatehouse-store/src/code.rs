//! The stable error codes of the API ([`Code`]): GraphQL's
//! `extensions.code` and the `code` member of REST's problem bodies, one
//! vocabulary for both. They live beside the store's errors, which most of
//! them come from ([`crate::StoreError::code`]), in the crate both APIs
//! share.

/// A stable machine-readable error code: the string clients match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The query is deeper than `limits.max_depth`.
    QueryTooDeep,
    /// The query's complexity or field selections exceed the limits.
    QueryTooComplex,
    /// A count argument above `limits.max_page_size`.
    PageSizeExceeded,
    /// A value the schema accepts but the data rules do not (bad Date, Int
    /// out of range, ...), or a request refused before GraphQL reads it.
    BadUserInput,
    /// The addressed row or resource does not exist (or may not be seen).
    NotFound,
    /// Unique violation, duplicate id, or deleting a row others reference.
    Conflict,
    /// No or bad credentials, or credentials could help.
    Unauthenticated,
    /// Credentials lack the scope, or a policy refuses.
    Forbidden,
    /// Too many failed attempts from this caller; retry later.
    TooManyRequests,
    /// A subscription ended because the change feed was interrupted and
    /// events may have been missed; subscribe again.
    FeedInterrupted,
    /// The GraphQL query text does not parse.
    GraphqlParseFailed,
    /// The GraphQL query does not validate against the schema.
    GraphqlValidationFailed,
    /// REST: query parameters (or a request line) that cannot be used (400).
    BadRequest,
    /// REST: a body that is not JSON (400).
    MalformedJson,
    /// REST: body fields that do not fit the entity (422).
    ValidationFailed,
    /// REST: the resource does not allow the method (405).
    MethodNotAllowed,
    /// REST: no acceptable response media type (406).
    NotAcceptable,
    /// REST: the body is larger than `limits.max_body_bytes` (413).
    PayloadTooLarge,
    /// REST: the body's media type is not accepted (415).
    UnsupportedMediaType,
    /// The store cannot be reached right now; retry later.
    ServiceUnavailable,
    /// A statement did not end within the statement timeout; retry later.
    Timeout,
    /// A bug; details are in the server log only.
    InternalServerError,
}

impl Code {
    /// Every code, for reading one back from its string.
    pub const ALL: [Code; 22] = [
        Code::QueryTooDeep,
        Code::QueryTooComplex,
        Code::PageSizeExceeded,
        Code::BadUserInput,
        Code::NotFound,
        Code::Conflict,
        Code::Unauthenticated,
        Code::Forbidden,
        Code::TooManyRequests,
        Code::FeedInterrupted,
        Code::GraphqlParseFailed,
        Code::GraphqlValidationFailed,
        Code::BadRequest,
        Code::MalformedJson,
        Code::ValidationFailed,
        Code::MethodNotAllowed,
        Code::NotAcceptable,
        Code::PayloadTooLarge,
        Code::UnsupportedMediaType,
        Code::ServiceUnavailable,
        Code::Timeout,
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
            Code::TooManyRequests => "TOO_MANY_REQUESTS",
            Code::FeedInterrupted => "FEED_INTERRUPTED",
            Code::GraphqlParseFailed => "GRAPHQL_PARSE_FAILED",
            Code::GraphqlValidationFailed => "GRAPHQL_VALIDATION_FAILED",
            Code::BadRequest => "BAD_REQUEST",
            Code::MalformedJson => "MALFORMED_JSON",
            Code::ValidationFailed => "VALIDATION_FAILED",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::NotAcceptable => "NOT_ACCEPTABLE",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::ServiceUnavailable => "SERVICE_UNAVAILABLE",
            Code::Timeout => "TIMEOUT",
            Code::InternalServerError => "INTERNAL_SERVER_ERROR",
        }
    }

    /// The code whose wire string is `s`.
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// A GraphQL error (`{"message", "extensions": {"code"}}`) with this
    /// code, for answers written outside a GraphQL executor (refusals
    /// before execution, transport errors).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_string_and_reads_back() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(Code::parse(code.as_str()), Some(code));
        }
        assert_eq!(Code::parse("SOMETHING_ELSE"), None);
    }
}
