//! RFC 9457 problem details: the one error type of the REST API.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_store::Code;
use gatehouse_store::StoreError;
use serde::Serialize;
use serde_json::{Value as Json, json};

/// The media type of every error body (RFC 9457 §3).
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// One body field that failed validation (422).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// The field name as written in the body.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// One query parameter that could not be used (400).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct InvalidParam {
    /// The parameter name as written in the query string.
    pub name: String,
    /// Why it was refused.
    pub reason: String,
}

/// An error answer: status, a message safe to show, and the details a client
/// can act on. Internal causes are logged where they are turned into a
/// `Problem`, never carried in it.
#[derive(Debug, Clone)]
pub(crate) struct Problem(Box<Details>);

/// The members of a [`Problem`], boxed so that `Result<_, Problem>` stays small.
#[derive(Debug, Clone)]
struct Details {
    status: StatusCode,
    /// Stable machine-readable code, the same vocabulary as GraphQL's `extensions.code`.
    code: Code,
    detail: String,
    errors: Vec<FieldError>,
    invalid_params: Vec<InvalidParam>,
    extra: Option<(&'static str, Json)>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem with `status`, `code` and a human-readable `detail`.
    pub fn new(status: StatusCode, code: Code, detail: impl Into<String>) -> Self {
        Problem(Box::new(Details {
            status,
            code,
            detail: detail.into(),
            errors: Vec::new(),
            invalid_params: Vec::new(),
            extra: None,
            headers: Vec::new(),
        }))
    }

    /// 400 for query parameters that cannot be used.
    pub fn bad_params(params: Vec<InvalidParam>) -> Self {
        let detail = match params.as_slice() {
            [one] => format!("query parameter `{}`: {}", one.name, one.reason),
            many => format!(
                "{} query parameters cannot be used: {}",
                many.len(),
                many.iter()
                    .map(|p| format!("`{}`", p.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut p = Problem::new(StatusCode::BAD_REQUEST, Code::BadRequest, detail);
        p.0.invalid_params = params;
        p
    }

    /// 400 for one query parameter.
    pub fn bad_param(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Problem::bad_params(vec![InvalidParam {
            name: name.into(),
            reason: reason.into(),
        }])
    }

    /// 422 for body fields that do not fit the entity.
    pub fn invalid_body(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] => format!("field `{}`: {}", one.field, one.message),
            many => format!(
                "{} fields are invalid: {}",
                many.len(),
                many.iter()
                    .map(|e| format!("`{}`", e.field))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut p = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::ValidationFailed,
            detail,
        );
        p.0.errors = errors;
        p
    }

    /// 422 about one body field.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem::invalid_body(vec![FieldError {
            field: field.into(),
            message: message.into(),
        }])
    }

    /// 404 with `detail`.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, Code::NotFound, detail)
    }

    /// 405 with the `Allow` header (RFC 9110 §15.5.6 requires it).
    pub fn method_not_allowed(allow: &'static str) -> Self {
        Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Code::MethodNotAllowed,
            format!("this resource allows {allow}"),
        )
        .with_header(header::ALLOW, HeaderValue::from_static(allow))
    }

    /// 500 for a cause that is logged here and never shown.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error in the REST API");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::InternalServerError,
            "the server could not complete the request",
        )
    }

    /// A store error on a write: `Invalid` is a body problem (422).
    pub fn from_write(e: StoreError) -> Self {
        match e {
            StoreError::Invalid { field, message } => Problem::invalid_field(field, message),
            other => Problem::from_store(other),
        }
    }

    /// A store error on a read: `Invalid` is a query-parameter problem (400).
    pub fn from_read(e: StoreError) -> Self {
        match e {
            StoreError::Invalid { field, message } => Problem::bad_param(field, message),
            other => Problem::from_store(other),
        }
    }

    /// A store error by its code (`StoreError::code`, what GraphQL answers too).
    fn from_store(e: StoreError) -> Self {
        match (e.code(), e) {
            (_, StoreError::Invalid { field, message }) => Problem::invalid_field(field, message),
            (Code::NotFound, _) => Problem::not_found("no such row"),
            (code @ Code::Conflict, e) => Problem::new(StatusCode::CONFLICT, code, e.to_string()),
            (code @ Code::Forbidden, e) => Problem::new(StatusCode::FORBIDDEN, code, e.to_string()),
            (code @ Code::ServiceUnavailable, _) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code,
                "storage is unavailable right now; retry later",
            )
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1")),
            (code @ Code::Timeout, _) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code,
                "the database did not answer in time (statement timeout); retry later",
            )
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("1")),
            // The store logged the cause when it created the error.
            (_, other) => Problem::internal(other),
        }
    }

    /// Adds an extension member to the body.
    pub fn with_extra(mut self, name: &'static str, value: Json) -> Self {
        self.0.extra = Some((name, value));
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.push((name, value));
        self
    }

    /// The body as JSON.
    pub fn body(&self) -> Json {
        let d = &self.0;
        let mut body = json!({
            // RFC 9457 §4.2.1: `about:blank` means "the status code says it
            // all", so the title is the status phrase; `code` tells variants apart.
            "type": "about:blank",
            "title": d.status.canonical_reason().unwrap_or("Error"),
            "status": d.status.as_u16(),
            "detail": d.detail,
            "code": d.code.as_str(),
        });
        if let Json::Object(map) = &mut body {
            if !d.errors.is_empty() {
                map.insert("errors".into(), json!(d.errors));
            }
            if !d.invalid_params.is_empty() {
                map.insert("invalid_params".into(), json!(d.invalid_params));
            }
            if let Some((k, v)) = &d.extra {
                map.insert((*k).into(), v.clone());
            }
        }
        body
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut resp = (
            self.0.status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON))],
            body,
        )
            .into_response();
        for (k, v) in self.0.headers {
            resp.headers_mut().append(k, v);
        }
        resp
    }
}
