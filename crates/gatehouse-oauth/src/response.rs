//! What every OAuth response shares.

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// RFC 6749 §5.1: token responses (and their errors) must not be cached.
pub(crate) fn no_store(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    resp
}
