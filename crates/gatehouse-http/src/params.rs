//! The parameters of a GraphQL request (`query`, `variables`,
//! `operationName`, `extensions`), as every transport receives them: a POST
//! body, a GET's query string, a WebSocket `subscribe`/`start` payload.
//! Each transport reads them here and hands them to the GraphQL service.

use gatehouse_auth::Principal;
use gatehouse_graphql::async_graphql::{self, Variables};
use serde_json::Value as Json;

/// The GraphQL request parameters, parsed and type-checked.
pub(crate) struct Params {
    pub(crate) query: String,
    pub(crate) operation_name: Option<String>,
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
pub(crate) fn from_json(body: &Json) -> Result<Params, String> {
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
