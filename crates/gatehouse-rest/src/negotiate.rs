//! `Accept` negotiation (RFC 9110 §12.5.1): the API speaks JSON, under its
//! plain media type or the versioned vendor one.

use axum::http::{HeaderMap, StatusCode, header};
use gatehouse_store::Code;

use crate::problem::Problem;

/// `application/json`.
pub(crate) const JSON: &str = "application/json";
/// The versioned vendor media type, echoed when a client asks for it.
pub(crate) const VND: &str = "application/vnd.gatehouse.v1+json";

/// The media type to answer with, or 406. No `Accept` means anything goes.
pub(crate) fn negotiate(headers: &HeaderMap) -> Result<&'static str, Problem> {
    let mut stated = false;
    let mut best: Option<(f32, &'static str)> = None;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(text) = value.to_str() else {
            stated = true;
            continue;
        };
        for range in text.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            stated = true;
            let mut q = 1.0f32;
            for p in parts {
                if let Some((k, v)) = p.split_once('=')
                    && k.trim().eq_ignore_ascii_case("q")
                {
                    q = v.trim().parse().unwrap_or(0.0);
                }
            }
            // `q=0` means "not acceptable" (RFC 9110 §12.4.2); NaN fails too.
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            let ty = match media.as_str() {
                "*/*" | "application/*" | JSON => JSON,
                VND => VND,
                _ => continue,
            };
            if best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, ty));
            }
        }
    }
    match best {
        Some((_, ty)) => Ok(ty),
        None if !stated => Ok(JSON),
        None => Err(Problem::new(
            StatusCode::NOT_ACCEPTABLE,
            Code::NotAcceptable,
            format!("this API answers with {JSON} or {VND}; the Accept header allows neither"),
        )),
    }
}
