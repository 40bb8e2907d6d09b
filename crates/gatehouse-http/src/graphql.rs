//! GraphQL over HTTP (the GraphQL-over-HTTP spec, as the `graphql-http`
//! audit checks it): POST with JSON, GET for queries, content negotiation
//! between `application/graphql-response+json` and `application/json`.
//! It reads a request into [`HttpRequest`] and answers it as JSON; which
//! transport answers (this one or an event stream) the dispatch in
//! `endpoint.rs` decides, and this module does not know the others.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_auth::Principal;
use gatehouse_graphql::Answer;
use gatehouse_graphql::async_graphql;
use gatehouse_graphql::async_graphql::parser::types::OperationType;
use gatehouse_graphql::error::Code;
use serde_json::{Value as Json, json};

use crate::AppState;
use crate::params::{self, Params};

pub(crate) const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";
pub(crate) const JSON: &str = "application/json";

/// Which media type the response uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Media {
    /// `application/graphql-response+json`: status codes tell parse/validation failures apart.
    GraphqlResponse,
    /// `application/json`: 200 for every well-formed GraphQL response.
    Json,
}

impl Media {
    fn content_type(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Media::GraphqlResponse => "application/graphql-response+json; charset=utf-8",
            Media::Json => "application/json; charset=utf-8",
        })
    }
}

/// Picks the response media type from `Accept` (GraphQL over HTTP §"Accept").
fn negotiate(headers: &HeaderMap) -> Option<Media> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Some(Media::Json);
    };
    let mut best: Option<(Media, f32)> = None;
    for part in accept.split(',') {
        let mut pieces = part.split(';');
        let ty = pieces.next().unwrap_or("").trim();
        let mut q = 1.0f32;
        for p in pieces {
            if let Some(v) = p.trim().strip_prefix("q=") {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        if q <= 0.0 {
            continue;
        }
        let media = if ty.eq_ignore_ascii_case(GRAPHQL_RESPONSE) {
            Media::GraphqlResponse
        } else if [JSON, "application/*", "*/*"]
            .iter()
            .any(|m| ty.eq_ignore_ascii_case(m))
        {
            Media::Json
        } else {
            continue;
        };
        let better = match best {
            None => true,
            Some((m, bq)) => q > bq || (q == bq && media == Media::GraphqlResponse && m != media),
        };
        if better {
            best = Some((media, q));
        }
    }
    best.map(|(m, _)| m)
}

fn error_body(message: &str, code: Code) -> Json {
    json!({"errors": [code.error_json(message)]})
}

fn respond(status: StatusCode, media: Media, body: &Json) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, media.content_type());
    resp
}

/// A request refused before GraphQL sees it (bad HTTP, bad JSON, bad parameters).
fn bad_request(media: Media, status: StatusCode, message: &str) -> Response {
    tracing::debug!(%status, message, "GraphQL request refused");
    respond(status, media, &error_body(message, Code::BadUserInput))
}

/// The media type of a GET's or POST's JSON answers (for a request an
/// event stream answers, of its refusals before the stream starts).
/// `event_stream`: the client accepts an event stream; without it, an
/// Accept header that allows no GraphQL JSON type is refused with 406.
fn response_media(headers: &HeaderMap, event_stream: bool) -> Result<Media, Box<Response>> {
    match negotiate(headers) {
        Some(media) => Ok(media),
        None if event_stream => Ok(Media::Json),
        None => Err(Box::new(bad_request(
            Media::Json,
            StatusCode::NOT_ACCEPTABLE,
            "the Accept header allows neither application/graphql-response+json nor application/json",
        ))),
    }
}

/// A GraphQL request read from HTTP, ready for a transport to answer.
pub(crate) struct HttpRequest {
    /// What to run.
    pub(crate) params: Params,
    /// Who for (put in the extensions by authentication).
    pub(crate) principal: Option<Principal>,
    /// The request's headers (an event stream re-checks its credential).
    pub(crate) headers: HeaderMap,
    /// The media type of a JSON answer.
    media: Media,
}

/// The operation a request would run, if the document parses (and nests
/// within the input limits, checked before the parser recurses).
fn operation_type(query: &str, name: Option<&str>) -> Option<OperationType> {
    let doc = gatehouse_graphql::parse(query)?;
    let mut ops = doc.operations.iter();
    match name {
        Some(n) => ops
            .find(|(op_name, _)| op_name.map(|o| o.as_str()) == Some(n))
            .map(|(_, op)| op.node.ty),
        None => {
            let first = ops.next()?;
            // Several anonymous/unnamed choices without a name: validation reports it.
            Some(first.1.node.ty)
        }
    }
}

/// Answers a request as JSON (a status per GraphQL over HTTP).
pub(crate) async fn answer(state: &AppState, req: HttpRequest) -> Response {
    let HttpRequest {
        params,
        principal,
        media,
        ..
    } = req;
    let request = params.into_request(principal);
    let executed = match state.graphql.answer(request).await {
        Answer::Planned(body) => {
            let mut resp = (StatusCode::OK, body).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, media.content_type());
            return resp;
        }
        Answer::Executed(executed) => *executed,
    };
    let response = &executed.response;
    // GraphQL over HTTP: with application/graphql-response+json a request
    // that fails before execution is a 4xx; with application/json it is 200.
    let status = if !executed.executed && media == Media::GraphqlResponse {
        StatusCode::BAD_REQUEST
    } else if store_unavailable(response) {
        // Nothing could be served because the store is down: a 503 lets load
        // balancers and clients retry, as REST does.
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    // Serialized straight from the response, without an intermediate JSON tree.
    let body = if executed.executed {
        serde_json::to_vec(response)
    } else {
        // GraphQL spec §7.1.2: a request that fails before execution has no `data` entry.
        serde_json::to_vec(&json!({ "errors": response.errors }))
    }
    .unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, media.content_type());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// Whether a response has no data at all and only "store unavailable" or
/// "timed out" errors.
fn store_unavailable(response: &async_graphql::Response) -> bool {
    use async_graphql::Value;
    let no_data = match &response.data {
        Value::Null => true,
        Value::Object(fields) => fields.values().all(|v| *v == Value::Null),
        _ => false,
    };
    no_data
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| {
            matches!(
                gatehouse_graphql::error::code_of(e),
                Some(Code::ServiceUnavailable | Code::Timeout)
            )
        })
}

/// Reads a `POST {base}/graphql`; `event_stream` as for [`response_media`].
/// A refusal is the answer to send.
pub(crate) async fn read_post(
    state: &AppState,
    req: Request,
    event_stream: bool,
) -> Result<HttpRequest, Box<Response>> {
    // Taken apart rather than extracted: the `HeaderMap` and `Extension`
    // extractors clone what they hand over.
    let (mut parts, body) = req.into_parts();
    let principal = parts.extensions.remove::<Principal>();
    let headers = parts.headers;
    let media = response_media(&headers, event_stream)?;
    let refuse = |status, message: &str| Box::new(bad_request(media, status, message));
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case(JSON) {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request as application/json",
        ));
    }
    for p in parts {
        if let Some(cs) = p.trim().to_ascii_lowercase().strip_prefix("charset=")
            && cs.trim_matches('"') != "utf-8"
        {
            return Err(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "only the utf-8 charset is supported",
            ));
        }
    }
    let bytes: Bytes = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the request body is larger than {} bytes",
                    state.max_body_bytes
                ),
            ));
        }
    };
    let json: Json = match serde_json::from_slice(&bytes) {
        Ok(j) => j,
        Err(e) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                &format!("the body is not valid JSON: {e}"),
            ));
        }
    };
    match params::from_json(&json) {
        Ok(params) => Ok(HttpRequest {
            params,
            principal,
            headers,
            media,
        }),
        Err(msg) => Err(refuse(StatusCode::BAD_REQUEST, &msg)),
    }
}

/// Reads a `GET {base}/graphql` (queries only; with `event_stream`, as for
/// [`response_media`], subscriptions too). A refusal is the answer to send.
pub(crate) fn read_get(req: Request, event_stream: bool) -> Result<HttpRequest, Box<Response>> {
    let (mut parts, _body) = req.into_parts();
    let Query(raw) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .map_err(|rejection| Box::new(rejection.into_response()))?;
    let principal = parts.extensions.remove::<Principal>();
    let headers = parts.headers;
    let media = response_media(&headers, event_stream)?;
    let refuse = |status, message: &str| Box::new(bad_request(media, status, message));
    let Some(query) = raw
        .iter()
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v.clone())
    else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the `query` parameter is required",
        ));
    };
    let mut obj = serde_json::Map::new();
    obj.insert("query".into(), Json::String(query));
    for (k, v) in &raw {
        match k.as_str() {
            "operationName" => {
                obj.insert(k.clone(), Json::String(v.clone()));
            }
            "variables" | "extensions" => match serde_json::from_str::<Json>(v) {
                Ok(j) => {
                    obj.insert(k.clone(), j);
                }
                Err(_) => {
                    return Err(refuse(
                        StatusCode::BAD_REQUEST,
                        &format!("`{k}` must be JSON"),
                    ));
                }
            },
            _ => {}
        }
    }
    let params = params::from_json(&Json::Object(obj))
        .map_err(|msg| refuse(StatusCode::BAD_REQUEST, &msg))?;
    // GraphQL over HTTP: GET must not run mutations (they are not safe);
    // subscriptions need a stream (SSE, which EventSource opens with GET).
    let refused = match operation_type(&params.query, params.operation_name.as_deref()) {
        Some(OperationType::Mutation) => true,
        Some(OperationType::Subscription) => !event_stream,
        _ => false,
    };
    if refused {
        let mut resp = bad_request(
            media,
            StatusCode::METHOD_NOT_ALLOWED,
            "only queries may be sent with GET; send mutations with POST",
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Err(Box::new(resp));
    }
    Ok(HttpRequest {
        params,
        principal,
        headers,
        media,
    })
}

/// Any other method on `{base}/graphql`.
pub(crate) async fn other_method(method: Method) -> Response {
    let mut resp = respond(
        StatusCode::METHOD_NOT_ALLOWED,
        Media::Json,
        &error_body(
            &format!("{method} is not allowed here; use GET or POST"),
            Code::BadUserInput,
        ),
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    resp
}

/// The schema documents need what a read needs.
fn may_read_schema(principal: Option<&Principal>, state: &AppState) -> Result<(), Box<Response>> {
    match principal {
        None if state.authn.is_none() => Ok(()),
        p if p.is_some() && state.graphql.may_introspect(p) => Ok(()),
        _ => {
            // The scope is the Model's (`@auth` may change what reads need).
            let scope = state.graphql.schema_read_scope();
            let mut resp = respond(
                StatusCode::FORBIDDEN,
                Media::Json,
                &error_body(
                    &format!("reading the schema needs the scope `{scope}`"),
                    Code::Forbidden,
                ),
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&gatehouse_auth::challenge::insufficient_scope(scope))
                    .unwrap_or_else(|_| {
                        HeaderValue::from_static(gatehouse_auth::challenge::MISSING)
                    }),
            );
            Err(Box::new(resp))
        }
    }
}

/// `GET {base}/graphql/schema.json`: the standard introspection result.
pub(crate) async fn schema_json(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
) -> Response {
    if let Err(resp) = may_read_schema(principal.as_deref(), &state) {
        return *resp;
    }
    let body = state.graphql.introspection().await;
    respond(StatusCode::OK, Media::Json, &body)
}

/// `GET {base}/graphql/schema.graphql`: the SDL.
pub(crate) async fn schema_sdl(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
) -> Response {
    if let Err(resp) = may_read_schema(principal.as_deref(), &state) {
        return *resp;
    }
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        state.graphql.sdl(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(body: &Json) -> bool {
        let response: async_graphql::Response =
            serde_json::from_value(body.clone()).expect("a GraphQL response");
        store_unavailable(&response)
    }

    #[test]
    fn only_a_response_with_nothing_served_is_unavailable() {
        let down = json!({"message": "storage is unavailable; retry later",
                          "extensions": {"code": "SERVICE_UNAVAILABLE"}});
        let other = json!({"message": "x", "extensions": {"code": "NOT_FOUND"}});
        assert!(unavailable(
            &json!({"data": null, "errors": [down.clone()]})
        ));
        assert!(unavailable(
            &json!({"data": {"a": null, "b": null}, "errors": [down.clone(), down.clone()]})
        ));
        // Some data was served: the usual status, errors on the fields.
        assert!(!unavailable(
            &json!({"data": {"a": 1, "b": null}, "errors": [down.clone()]})
        ));
        // Another failure among them: not (only) an outage.
        assert!(!unavailable(
            &json!({"data": null, "errors": [down, other]})
        ));
        assert!(!unavailable(&json!({"data": {"a": null}})));
    }
}
