//! GraphQL over HTTP (the GraphQL-over-HTTP spec, as the `graphql-http`
//! audit checks it): POST with JSON, GET for queries, content negotiation
//! between `application/graphql-response+json` and `application/json`.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_auth::Principal;
use gatehouse_graphql::Answer;
use gatehouse_graphql::async_graphql::parser::types::OperationType;
use gatehouse_graphql::async_graphql::{self, Variables};
use gatehouse_graphql::error::Code;
use serde_json::{Value as Json, json};

use crate::AppState;

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";
const JSON: &str = "application/json";

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

/// How a GET or POST is answered: the negotiated media type, and whether
/// the client asked for an SSE stream. A request whose Accept header allows
/// no GraphQL response type is refused with 406; an SSE request's errors
/// before its stream starts are answered as JSON.
fn response_media(headers: &HeaderMap) -> Result<(Media, bool), Box<Response>> {
    let sse = crate::sse::wanted(headers);
    match negotiate(headers) {
        Some(media) => Ok((media, sse)),
        None if sse => Ok((Media::Json, true)),
        None => Err(Box::new(bad_request(
            Media::Json,
            StatusCode::NOT_ACCEPTABLE,
            "the Accept header allows neither application/graphql-response+json nor application/json",
        ))),
    }
}

/// The GraphQL request parameters, parsed and type-checked.
pub(crate) struct Params {
    query: String,
    operation_name: Option<String>,
    variables: Variables,
    extensions: Option<Json>,
}

impl Params {
    /// The async-graphql request, acting for `principal`.
    pub(crate) fn into_request(self, principal: Option<Principal>) -> async_graphql::Request {
        let mut request = async_graphql::Request::new(self.query).variables(self.variables);
        if let Some(p) = principal {
            request = request.data(p);
        }
        if let Some(name) = self.operation_name {
            request = request.operation_name(name);
        }
        if let Some(Json::Object(ext)) = self.extensions {
            for (k, v) in ext {
                if let Ok(v) = async_graphql::Value::from_json(v) {
                    request.extensions.insert(k, v);
                }
            }
        }
        request
    }
}

/// Reads `{query, variables, operationName, extensions}` (the body of a POST,
/// or a WebSocket `subscribe`/`start` payload).
pub(crate) fn params_from_json(body: &Json) -> Result<Params, String> {
    let Json::Object(map) = body else {
        return Err("the request body must be a JSON object".into());
    };
    let query = match map.get("query") {
        Some(Json::String(q)) => q.clone(),
        Some(Json::Null) | None => return Err("`query` is required".into()),
        Some(_) => return Err("`query` must be a string".into()),
    };
    let operation_name = match map.get("operationName") {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Null) | None => None,
        Some(_) => return Err("`operationName` must be a string or null".into()),
    };
    let variables = match map.get("variables") {
        Some(Json::Object(v)) => Variables::from_json(Json::Object(v.clone())),
        Some(Json::Null) | None => Variables::default(),
        Some(_) => return Err("`variables` must be an object or null".into()),
    };
    let extensions = match map.get("extensions") {
        Some(v @ Json::Object(_)) => Some(v.clone()),
        Some(Json::Null) | None => None,
        Some(_) => return Err("`extensions` must be an object or null".into()),
    };
    Ok(Params {
        query,
        operation_name,
        variables,
        extensions,
    })
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

async fn run(
    state: &AppState,
    media: Media,
    params: Params,
    principal: Option<Principal>,
) -> Response {
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

/// `POST {base}/graphql`.
pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    req: axum::extract::Request,
) -> Response {
    // Taken apart rather than extracted: the `HeaderMap` and `Extension`
    // extractors clone what they hand over.
    let (mut parts, body) = req.into_parts();
    let principal = parts.extensions.remove::<Principal>();
    let headers = parts.headers;
    let (media, sse) = match response_media(&headers) {
        Ok(m) => m,
        Err(refused) => return *refused,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case(JSON) {
        return bad_request(
            media,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request as application/json",
        );
    }
    for p in parts {
        if let Some(cs) = p.trim().to_ascii_lowercase().strip_prefix("charset=")
            && cs.trim_matches('"') != "utf-8"
        {
            return bad_request(
                media,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "only the utf-8 charset is supported",
            );
        }
    }
    let bytes: Bytes = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return bad_request(
                media,
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the request body is larger than {} bytes",
                    state.max_body_bytes
                ),
            );
        }
    };
    let json: Json = match serde_json::from_slice(&bytes) {
        Ok(j) => j,
        Err(e) => {
            return bad_request(
                media,
                StatusCode::BAD_REQUEST,
                &format!("the body is not valid JSON: {e}"),
            );
        }
    };
    match params_from_json(&json) {
        Ok(params) if sse => crate::sse::stream(&state, params, principal, &headers),
        Ok(params) => run(&state, media, params, principal).await,
        Err(msg) => bad_request(media, StatusCode::BAD_REQUEST, &msg),
    }
}

/// A browser navigating to the endpoint (Accept: text/html, no JSON type):
/// it gets GraphiQL, prefilled from `?query=`; API clients get results.
pub(crate) fn is_browser_navigation(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.contains("text/html") && !accept.contains(JSON) && !accept.contains(GRAPHQL_RESPONSE)
}

/// `GET {base}/graphql`: queries only; a browser gets GraphiQL.
pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
    Query(raw): Query<Vec<(String, String)>>,
) -> Response {
    let query = raw
        .iter()
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v.clone());
    if is_browser_navigation(&headers) {
        return crate::graphiql::page(&state.base_path);
    }
    let (media, sse) = match response_media(&headers) {
        Ok(m) => m,
        Err(refused) => return *refused,
    };
    let Some(query) = query else {
        return bad_request(
            media,
            StatusCode::BAD_REQUEST,
            "the `query` parameter is required",
        );
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
                    return bad_request(
                        media,
                        StatusCode::BAD_REQUEST,
                        &format!("`{k}` must be JSON"),
                    );
                }
            },
            _ => {}
        }
    }
    let params = match params_from_json(&Json::Object(obj)) {
        Ok(p) => p,
        Err(msg) => return bad_request(media, StatusCode::BAD_REQUEST, &msg),
    };
    // GraphQL over HTTP: GET must not run mutations (they are not safe);
    // subscriptions need a stream (SSE, which EventSource opens with GET).
    let op = operation_type(&params.query, params.operation_name.as_deref());
    if sse && op != Some(OperationType::Mutation) {
        return crate::sse::stream(&state, params, principal.map(|p| p.0), &headers);
    }
    if matches!(
        op,
        Some(OperationType::Mutation | OperationType::Subscription)
    ) {
        let mut resp = bad_request(
            media,
            StatusCode::METHOD_NOT_ALLOWED,
            "only queries may be sent with GET; send mutations with POST",
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    run(&state, media, params, principal.map(|p| p.0)).await
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
