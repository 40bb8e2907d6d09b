//! Error codes in `extensions.code` ([`Code`]), and how store errors become GraphQL errors.

use async_graphql::{Error, ErrorExtensions};
use gatehouse_store::StoreError;

/// The `extensions.code` of a GraphQL error: the API's one vocabulary,
/// shared with REST's problem bodies.
pub use gatehouse_store::Code;

/// The code `e` carries; `None` when it carries none (async-graphql's own
/// errors, until [`Graphql`](crate::Graphql) codes them).
pub fn code_of(e: &async_graphql::ServerError) -> Option<Code> {
    match e.extensions.as_ref()?.get("code")? {
        async_graphql::Value::String(s) => Code::parse(s),
        _ => None,
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

/// A store error as a GraphQL error, with the store's code; internal
/// causes stay in the log.
pub fn from_store(e: &StoreError) -> Error {
    let code = e.code();
    match code {
        Code::NotFound => coded(code, "no row with this id"),
        Code::ServiceUnavailable => coded(code, "storage is unavailable; retry later"),
        Code::Timeout => coded(
            code,
            "the database did not answer in time (statement timeout); retry later",
        ),
        Code::InternalServerError => {
            tracing::error!(error = ?e, "store error during GraphQL execution");
            coded(code, "internal error")
        }
        _ => coded(code, e.to_string()),
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
            assert_eq!(code_of(&e), Some(code));
        }
        let plain = Error::new("m").into_server_error(Default::default());
        assert_eq!(code_of(&plain), None);
        let foreign = Error::new("m")
            .extend_with(|_, e| e.set("code", "SOMETHING_ELSE"))
            .into_server_error(Default::default());
        assert_eq!(code_of(&foreign), None);
    }
}
