//! The OpenAPI 3.1 document, built from the Model with `serde_json` (no
//! derive macros: every path and schema here is data-driven).

use std::collections::BTreeSet;

use gatehouse_schema::{CONNECT, Entity, Field, FieldKind, FilterOp, Model, ValueType};
use heck::{ToLowerCamelCase, ToUpperCamelCase};
use serde_json::{Map, Value as Json, json};

use crate::negotiate::{JSON, VND};
use crate::params::{self, MAX_PAGE, Paging};
use crate::problem::PROBLEM_JSON;
use crate::routes;

fn schema_ref(name: &str) -> Json {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn param_ref(name: &str) -> Json {
    json!({ "$ref": format!("#/components/parameters/{name}") })
}

fn response_ref(name: &str) -> Json {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

use gatehouse_schema::NO_NUL;

/// Schema of one non-null value of `ty`: for a scalar, its row of the
/// scalar table ([`gatehouse_schema::ScalarInfo::openapi`]).
fn scalar_schema(ty: &ValueType) -> Json {
    match ty {
        ValueType::Enum(name) => schema_ref(name),
        ValueType::Scalar(s) => (s.info().openapi)(),
    }
}

/// `schema` or null.
fn nullable(schema: Json) -> Json {
    match schema {
        Json::Object(mut m) if m.get("type").is_some_and(Json::is_string) => {
            let t = m.remove("type").unwrap_or(Json::Null);
            m.insert("type".into(), json!([t, "null"]));
            Json::Object(m)
        }
        other => json!({ "anyOf": [other, {"type": "null"}] }),
    }
}

/// Schema of a stored field's value (null included when the field is nullable).
fn field_schema(model: &Model, field: &Field) -> Json {
    let mut s = match &field.kind {
        FieldKind::Id => json!({"type": "string", "minLength": 1, "pattern": NO_NUL}),
        FieldKind::ToOne { .. } => json!({
            "type": "string", "minLength": 1, "pattern": NO_NUL,
            "description": format!("Id of the referenced {}.", model.target_of(field).map_or("", |t| t.name.as_str())),
        }),
        FieldKind::Value { ty, list: None } => scalar_schema(ty),
        FieldKind::Value {
            ty,
            list: Some(items),
        } => {
            let item = scalar_schema(ty);
            json!({
                "type": "array",
                "items": if items.items_required { item } else { nullable(item) },
            })
        }
        FieldKind::ToMany { .. } | FieldKind::Count { .. } => json!({}),
    };
    if let (Some(d), Json::Object(m)) = (&field.description, &mut s)
        && !m.contains_key("$ref")
    {
        m.insert("description".into(), json!(d));
    }
    if field.required || matches!(field.kind, FieldKind::Id) {
        s
    } else {
        nullable(s)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// A row as returned with every field.
    Full,
    /// A row as returned with `fields`: only `id` is sure to be there.
    Selection,
    /// POST body: `id` optional, required fields required.
    Create,
    /// PUT body: required fields required, no `id` (it is the path's).
    Replace,
    /// PATCH body: any subset; null clears a nullable field.
    Patch,
}

fn entity_schema(model: &Model, entity: &Entity, kind: BodyKind, omit: Option<&str>) -> Json {
    let mut props = Map::new();
    let mut required = Vec::new();
    for f in entity.stored_fields() {
        if Some(f.name.as_str()) == omit {
            continue;
        }
        let is_id = matches!(f.kind, FieldKind::Id);
        if is_id && matches!(kind, BodyKind::Replace | BodyKind::Patch) {
            continue;
        }
        let request = matches!(kind, BodyKind::Create | BodyKind::Replace | BodyKind::Patch);
        if f.is_server_set() && request {
            continue;
        }
        let mut schema = field_schema(model, f);
        if f.is_server_set()
            && let Json::Object(m) = &mut schema
        {
            m.insert("readOnly".into(), json!(true));
        }
        // `@constraint`: the same rules as JSON Schema keywords (a pattern
        // anchored, since it matches the whole value).
        if let (Some(c), Json::Object(m)) = (&f.constraint, &mut schema) {
            let number = |n: f64| json!(n);
            if let Some(n) = c.min {
                m.insert("minimum".into(), number(n));
            }
            if let Some(n) = c.max {
                m.insert("maximum".into(), number(n));
            }
            if let Some(n) = c.min_length {
                m.insert("minLength".into(), json!(n));
            }
            if let Some(n) = c.max_length {
                m.insert("maxLength".into(), json!(n));
            }
            if let Some(p) = &c.pattern {
                m.insert("pattern".into(), json!(format!("^(?:{})$", p.source)));
            }
            if let Some(f) = c.format {
                m.insert("format".into(), json!(f.name()));
            }
        }
        // A stored default: what a create that leaves the field out gets.
        if let (Some(d), Json::Object(m)) = (&f.default, &mut schema) {
            match d {
                gatehouse_schema::FieldDefault::Value(v) => {
                    m.insert("default".into(), v.clone());
                }
                gatehouse_schema::FieldDefault::Now => {
                    let text = "Defaults to the time of the create.";
                    let d = m
                        .get("description")
                        .and_then(Json::as_str)
                        .map_or_else(|| text.to_string(), |d| format!("{d} {text}"));
                    m.insert("description".into(), json!(d));
                }
            }
        }
        props.insert(f.name.clone(), schema);
        let req = match kind {
            BodyKind::Full => true,
            BodyKind::Selection => is_id,
            BodyKind::Create => entity.required_on_create(f),
            BodyKind::Replace => f.required && !is_id && !f.is_server_set(),
            BodyKind::Patch => false,
        };
        if req {
            required.push(f.name.clone());
        }
    }
    if matches!(kind, BodyKind::Create) {
        // Nested create: new rows of each one-to-many relation, without the
        // field that points back (set to the new row).
        for f in entity.to_many_fields() {
            if let Some(name) = nested_create_schema(model, f) {
                let target = model.target_of(f).map_or("", |t| t.name.as_str());
                props.insert(
                    f.name.clone(),
                    json!({
                        "type": "array",
                        "description": format!("New {target} rows created with this {} in the same transaction.", entity.name),
                        "items": schema_ref(&name),
                    }),
                );
            }
            // Nested create's links to existing rows of a many-to-many field.
            if let Some(name) = connect_schema(model, entity, f) {
                props.insert(f.name.clone(), schema_ref(&name));
            }
        }
    }
    let what = match kind {
        BodyKind::Full => format!("A {} with every stored field.", entity.name),
        BodyKind::Selection => format!(
            "A {}: every stored field, or `id` and those named by `fields`.",
            entity.name
        ),
        BodyKind::Create => format!(
            "A new {}. `id` is optional (generated when absent); a to-one relation is the referenced id.",
            entity.name
        ),
        BodyKind::Replace => format!(
            "A whole {}: omitted nullable fields become null. `id` may be repeated but must equal the path's.",
            entity.name
        ),
        BodyKind::Patch => format!(
            "A JSON merge patch (RFC 7396) of a {}: members given are set, `null` clears, omitted members are untouched.",
            entity.name
        ),
    };
    let mut s = json!({
        "type": "object",
        "description": what,
        "properties": props,
        "additionalProperties": false,
    });
    if !required.is_empty()
        && let Json::Object(m) = &mut s
    {
        m.insert("required".into(), json!(required));
    }
    s
}

/// The name of the request schema of a new row of the one-to-many field
/// `f`'s target, without the field that points back
/// (`BookCreateViaAuthor`): a POST to the nested collection, and each
/// element of `f` in its parent's POST. `None` for other fields.
fn nested_create_schema(model: &Model, f: &Field) -> Option<String> {
    let (child, via) = (model.target_of(f)?, model.inverse_of(f)?);
    Some(format!(
        "{}CreateVia{}",
        child.name,
        via.name.to_upper_camel_case()
    ))
}

/// The name of the request schema of the existing rows a new row of
/// `entity` links through its many-to-many field `f` (`BookTagsConnect`,
/// `{"connect": [ids]}`), where `Model::connect_of` allows it.
fn connect_schema(model: &Model, entity: &Entity, f: &Field) -> Option<String> {
    model.connect_of(f)?;
    Some(format!(
        "{}{}Connect",
        entity.name,
        f.name.to_upper_camel_case()
    ))
}

/// The schema [`connect_schema`] names.
fn connect_body(model: &Model, entity: &Entity, f: &Field) -> Option<Json> {
    let (join, _, _) = model.connect_of(f)?;
    let target = &model.target_of(f)?.name;
    Some(json!({
        "type": "object",
        "description": format!(
            "Existing {target} rows linked to the new {} through new {} rows, in the same transaction. Each must exist and be readable by the caller (an unreadable one is refused as missing), and may be listed once.",
            entity.name, join.name
        ),
        "properties": {
            CONNECT: {
                "type": "array",
                "uniqueItems": true,
                "items": {"type": "string", "minLength": 1},
            },
        },
        "required": [CONNECT],
        "additionalProperties": false,
    }))
}

/// Schema of a filter parameter's value.
fn filter_schema(op: FilterOp, ty: &ValueType) -> Json {
    match op {
        FilterOp::IsNull => json!({"type": "boolean"}),
        FilterOp::In | FilterOp::NotIn => {
            json!({"type": "array", "minItems": 1, "items": scalar_schema(ty)})
        }
        _ => scalar_schema(ty),
    }
}

fn op_words(op: FilterOp) -> &'static str {
    match op {
        FilterOp::Eq => "equals",
        FilterOp::Not => "differs from (rows where it is null do not match)",
        FilterOp::In => "is one of (comma-separated)",
        FilterOp::NotIn => "is none of (comma-separated)",
        FilterOp::Lt => "is less than",
        FilterOp::Lte => "is at most",
        FilterOp::Gt => "is greater than",
        FilterOp::Gte => "is at least",
        FilterOp::Contains => "contains",
        FilterOp::StartsWith => "starts with",
        FilterOp::EndsWith => "ends with",
        FilterOp::IEq => "equals, ignoring case",
        FilterOp::IContains => "contains, ignoring case",
        FilterOp::IStartsWith => "starts with, ignoring case",
        FilterOp::IEndsWith => "ends with, ignoring case",
        FilterOp::IsNull => "is null (true) or not null (false)",
    }
}

fn problem(description: &str) -> Json {
    json!({
        "description": description,
        "content": { PROBLEM_JSON: { "schema": schema_ref("Problem") } },
    })
}

fn json_content(schema: Json) -> Json {
    json!({ JSON: { "schema": schema.clone() }, VND: { "schema": schema } })
}

/// The whole document.
pub(crate) fn document(model: &Model, base_path: &str, paging: Paging) -> Json {
    let mut schemas = Map::new();
    let mut parameters = Map::new();
    let mut paths = Map::new();

    // Enums used by stored fields.
    let mut enums = BTreeSet::new();
    for e in &model.entities {
        for f in e.stored_fields() {
            if let FieldKind::Value {
                ty: ValueType::Enum(n),
                ..
            } = &f.kind
            {
                enums.insert(n.clone());
            }
        }
    }
    for name in &enums {
        if let Some(def) = model.enum_def(name) {
            let mut s = json!({"type": "string", "enum": def.values});
            if let (Some(d), Json::Object(m)) = (&def.description, &mut s) {
                m.insert("description".into(), json!(d));
            }
            schemas.insert(name.clone(), s);
        }
    }

    parameters.insert(
        "page".into(),
        json!({
            "name": "page", "in": "query",
            "description": "1-based page number.",
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1},
        }),
    );
    parameters.insert(
        "after".into(),
        json!({
            "name": "after", "in": "query",
            "description": "Read the list by cursor instead of by page number: the rows after this cursor, in the list's `sort` order (empty: the first page). Cursors are opaque; take them from the `next` link. Not with `page`; a cursor of another `sort` is a 400.",
            "schema": {"type": "string"},
        }),
    );
    parameters.insert(
        "per_page".into(),
        json!({
            "name": "per_page", "in": "query",
            "description": format!("Rows per page (at most {}; more is a 400).", paging.max),
            "schema": {"type": "integer", "minimum": 1, "maximum": paging.max, "default": paging.default},
        }),
    );

    for e in &model.entities {
        let n = &e.name;
        schemas.insert(n.clone(), entity_schema(model, e, BodyKind::Full, None));
        schemas.insert(
            format!("{n}Selection"),
            entity_schema(model, e, BodyKind::Selection, None),
        );
        schemas.insert(
            format!("{n}Create"),
            entity_schema(model, e, BodyKind::Create, None),
        );
        for f in e.to_many_fields() {
            if let (Some(name), Some(body)) =
                (connect_schema(model, e, f), connect_body(model, e, f))
            {
                schemas.insert(name, body);
            }
            if let (Some(name), Some(child), Some(via)) = (
                nested_create_schema(model, f),
                model.target_of(f),
                model.inverse_of(f),
            ) {
                schemas.insert(
                    name,
                    entity_schema(model, child, BodyKind::Create, Some(&via.name)),
                );
            }
        }
        schemas.insert(
            format!("{n}Replace"),
            entity_schema(model, e, BodyKind::Replace, None),
        );
        schemas.insert(
            format!("{n}Patch"),
            entity_schema(model, e, BodyKind::Patch, None),
        );

        let stored: Vec<&str> = e.stored_fields().map(|f| f.name.as_str()).collect();
        let sortable: Vec<String> = e
            .fields
            .iter()
            .filter(|f| f.is_orderable())
            .flat_map(|f| [f.name.clone(), format!("-{}", f.name)])
            .collect();
        parameters.insert(
            format!("{n}.fields"),
            json!({
                "name": "fields", "in": "query",
                "description": "Only these fields (comma-separated); `id` is always returned.",
                "style": "form", "explode": false,
                "schema": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": stored}},
            }),
        );
        parameters.insert(
            format!("{n}.sort"),
            json!({
                "name": "sort", "in": "query",
                "description": "Sort keys (comma-separated), `-` for descending; `id` breaks ties.",
                "style": "form", "explode": false,
                "schema": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": sortable}},
            }),
        );
        for (pname, fp) in params::filter_params(e) {
            let mut p = json!({
                "name": pname, "in": "query",
                "description": format!("Rows whose `{}` {}.", fp.field, op_words(fp.op)),
                "schema": filter_schema(fp.op, &fp.ty),
            });
            if fp.op.takes_list()
                && let Json::Object(m) = &mut p
            {
                m.insert("style".into(), json!("form"));
                m.insert("explode".into(), json!(false));
            }
            parameters.insert(format!("{n}.{pname}"), p);
        }
    }

    for e in &model.entities {
        let plural = e.rest_path.to_upper_camel_case();
        let n = &e.name;
        let id_param = json!({
            "name": "id", "in": "path", "required": true,
            "schema": {"type": "string", "minLength": 1},
        });
        paths.insert(
            routes::collection(e),
            json!({
                "get": list_op(e, &format!("list{plural}"), format!("List {} rows.", n), None),
                "post": create_op(model, e, &format!("create{n}"), format!("Create a {n}."), None, None),
            }),
        );
        let mut patch_content = Map::new();
        for media in ["application/merge-patch+json", JSON] {
            patch_content.insert(
                media.into(),
                json!({"schema": schema_ref(&format!("{n}Patch"))}),
            );
        }
        paths.insert(
            routes::item(e, routes::ID),
            json!({
                "parameters": [id_param],
                "get": {
                    "operationId": format!("get{n}"),
                    "tags": [n],
                    "summary": format!("Read one {n}."),
                    "parameters": [param_ref(&format!("{n}.fields"))],
                    "responses": with_common(json!({
                        "200": {"description": format!("The {n}."), "content": json_content(schema_ref(&format!("{n}Selection")))},
                        "400": response_ref("BadRequest"),
                        "404": response_ref("NotFound"),
                    })),
                },
                "put": {
                    "operationId": format!("replace{n}"),
                    "tags": [n],
                    "summary": format!("Replace a whole {n}."),
                    "requestBody": {"required": true, "content": {JSON: {"schema": schema_ref(&format!("{n}Replace"))}}},
                    "responses": with_common(write_responses(n, "200", format!("The {n} as stored."))),
                },
                "patch": {
                    "operationId": format!("patch{n}"),
                    "tags": [n],
                    "summary": format!("Change some fields of a {n} (JSON merge patch)."),
                    "requestBody": {"required": true, "content": patch_content},
                    "responses": with_common(write_responses(n, "200", format!("The {n} as stored."))),
                },
                "delete": {
                    "operationId": format!("delete{n}"),
                    "tags": [n],
                    "summary": format!("Delete a {n}."),
                    "responses": with_common(json!({
                        "204": {"description": "Deleted."},
                        "404": response_ref("NotFound"),
                        "409": response_ref("Conflict"),
                    })),
                },
            }),
        );
        for f in e.to_many_fields() {
            let FieldKind::ToMany { rest_segment, .. } = &f.kind else {
                continue;
            };
            let (Some(child), Some(via)) = (model.target_of(f), model.inverse_of(f)) else {
                continue;
            };
            let (target, via) = (&child.name, &via.name);
            let parent_param = format!("{}Id", n.to_lower_camel_case());
            let fname = f.name.to_upper_camel_case();
            let body_name = nested_create_schema(model, f).unwrap_or_default();
            schemas.insert(
                body_name.clone(),
                entity_schema(model, child, BodyKind::Create, Some(via)),
            );
            paths.insert(
                routes::nested(e, &format!("{{{parent_param}}}"), rest_segment),
                json!({
                    "parameters": [{
                        "name": parent_param, "in": "path", "required": true,
                        "description": format!("Id of the parent {n}."),
                        "schema": {"type": "string", "minLength": 1},
                    }],
                    "get": list_op(child, &format!("list{n}{fname}"),
                        format!("List the {target} rows of one {n} (`{target}.{via}`)."), Some(n)),
                    "post": create_op(model, child, &format!("create{n}{fname}"),
                        format!("Create a {target} whose `{via}` is this {n}."), Some(n), Some(&body_name)),
                }),
            );
        }
    }

    paths.insert(
        routes::document(),
        json!({
            "get": {
                "operationId": "getOpenApi",
                "summary": "This document.",
                "responses": {
                    "200": {"description": "The OpenAPI 3.1 document.", "content": {JSON: {"schema": {"type": "object"}}}},
                    "401": response_ref("Unauthorized"),
                    "403": response_ref("Forbidden"),
                    "406": response_ref("NotAcceptable"),
                },
            },
        }),
    );

    schemas.insert(
        "Problem".into(),
        json!({
            "type": "object",
            "description": "RFC 9457 problem details.",
            "required": ["title", "status"],
            "properties": {
                "type": {"type": "string"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
                "instance": {"type": "string"},
                "code": {"type": "string", "description": "Stable machine-readable code (`NOT_FOUND`, `CONFLICT`, `VALIDATION_FAILED`, ...)."},
                "errors": {
                    "type": "array",
                    "description": "422: every body field that failed validation.",
                    "items": {
                        "type": "object", "required": ["field", "message"],
                        "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                    },
                },
                "invalid_params": {
                    "type": "array",
                    "description": "400: every query parameter that could not be used.",
                    "items": {
                        "type": "object", "required": ["name", "reason"],
                        "properties": {"name": {"type": "string"}, "reason": {"type": "string"}},
                    },
                },
                "supported_versions": {"type": "array", "items": {"type": "string"}},
            },
        }),
    );

    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "gatehouse REST API",
            "version": routes::VERSION,
            "description": "Collections generated from the GraphQL schema. Bodies use the schema's field names; a to-one relation is read and written as the referenced id. Lists take `page`, `per_page` (or a cursor, `after`), `sort`, `fields` and filters named like the GraphQL arguments (`year_gt`, `status_in`, ...); they answer with `Link` and `X-Total-Count`. Errors are RFC 9457 problem details.",
        },
        "security": [{"bearerAuth": []}, {"basicAuth": []}],
        "tags": model.entities.iter().map(|e| {
            let mut t = json!({"name": e.name});
            if let (Some(d), Json::Object(m)) = (&e.description, &mut t) {
                m.insert("description".into(), json!(d));
            }
            t
        }).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": parameters,
            "responses": {
                "BadRequest": problem("A query parameter or the body's JSON syntax is wrong (`invalid_params` names the parameters)."),
                "Unauthorized": {
                    "description": "No valid credentials.",
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
                    "content": { PROBLEM_JSON: { "schema": schema_ref("Problem") } },
                },
                "Forbidden": problem("The credentials lack the scope this needs."),
                "NotFound": problem("No such row (or parent row)."),
                "NotAcceptable": problem("The Accept header allows neither application/json nor application/vnd.gatehouse.v1+json."),
                "Conflict": problem("A unique value or id is taken, or other rows still reference this one."),
                "PayloadTooLarge": problem("The body is larger than the configured limit."),
                "UnsupportedMediaType": problem("The body is not JSON."),
                "UnprocessableContent": problem("The body does not fit the entity (`errors` names the fields)."),
                "TooManyRequests": {
                    "description": "Rate limited.",
                    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    "content": { PROBLEM_JSON: { "schema": schema_ref("Problem") } },
                },
                "ServiceUnavailable": problem("Storage is unavailable right now, or did not answer within the statement timeout (code `TIMEOUT`); retry later."),
            },
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "basicAuth": {"type": "http", "scheme": "basic"},
            },
        },
    });
    if !base_path.is_empty()
        && let Json::Object(m) = &mut doc
    {
        m.insert("servers".into(), json!([{"url": base_path}]));
    }
    doc
}

/// Adds the responses every operation can give.
fn with_common(mut responses: Json) -> Json {
    if let Json::Object(m) = &mut responses {
        for (code, name) in [
            ("401", "Unauthorized"),
            ("403", "Forbidden"),
            ("406", "NotAcceptable"),
            ("429", "TooManyRequests"),
            ("503", "ServiceUnavailable"),
        ] {
            m.entry(code).or_insert_with(|| response_ref(name));
        }
    }
    responses
}

fn write_responses(n: &str, ok: &str, what: String) -> Json {
    json!({
        ok: {"description": what, "content": json_content(schema_ref(n))},
        "400": response_ref("BadRequest"),
        "404": response_ref("NotFound"),
        "409": response_ref("Conflict"),
        "413": response_ref("PayloadTooLarge"),
        "415": response_ref("UnsupportedMediaType"),
        "422": response_ref("UnprocessableContent"),
    })
}

fn list_op(entity: &Entity, op_id: &str, summary: String, nested_in: Option<&str>) -> Json {
    let n = &entity.name;
    let mut ps = vec![
        param_ref("page"),
        param_ref("per_page"),
        param_ref("after"),
        param_ref(&format!("{n}.sort")),
        param_ref(&format!("{n}.fields")),
    ];
    for (pname, _) in params::filter_params(entity) {
        ps.push(param_ref(&format!("{n}.{pname}")));
    }
    let mut responses = json!({
        "200": {
            "description": format!("One page of {n} rows."),
            "headers": {
                "Link": {
                    "description": "RFC 8288 links: first, prev (not on the first page), next (not on the last), last. Read by cursor (`after`): first, and next (by the page's last row's cursor) when more rows follow.",
                    "schema": {"type": "string"},
                },
                "X-Total-Count": {
                    "description": "Rows matching the filters, over all pages.",
                    "schema": {"type": "integer", "minimum": 0},
                },
            },
            "content": json_content(json!({"type": "array", "items": schema_ref(&format!("{n}Selection"))})),
        },
        "400": response_ref("BadRequest"),
    });
    if nested_in.is_some()
        && let Json::Object(m) = &mut responses
    {
        m.insert("404".into(), response_ref("NotFound"));
    }
    json!({
        "operationId": op_id,
        "tags": [nested_in.unwrap_or(n)],
        "summary": summary,
        "parameters": ps,
        "responses": with_common(responses),
    })
}

fn create_op(
    model: &Model,
    entity: &Entity,
    op_id: &str,
    summary: String,
    nested_in: Option<&str>,
    body_schema: Option<&str>,
) -> Json {
    let n = &entity.name;
    let body = body_schema.map_or_else(|| format!("{n}Create"), str::to_string);
    let mut links = Map::new();
    for (verb, what) in [
        ("get", "Read"),
        ("replace", "Replace"),
        ("patch", "Patch"),
        ("delete", "Delete"),
    ] {
        links.insert(
            format!("{what}{n}"),
            json!({"operationId": format!("{verb}{n}"), "parameters": {"id": "$response.body#/id"}}),
        );
    }
    for f in entity.to_many_fields() {
        if model.inverse_of(f).is_some() {
            let fname = f.name.to_upper_camel_case();
            links.insert(
                format!("List{n}{fname}"),
                json!({
                    "operationId": format!("list{n}{fname}"),
                    "parameters": {format!("{}Id", n.to_lower_camel_case()): "$response.body#/id"},
                }),
            );
        }
    }
    let mut responses = write_responses(n, "201", format!("The {n} as stored."));
    if let Json::Object(m) = &mut responses {
        if nested_in.is_none() {
            m.remove("404");
        }
        if let Some(Json::Object(created)) = m.get_mut("201") {
            created.insert(
                "headers".into(),
                json!({"Location": {"description": "URL of the new row.", "schema": {"type": "string"}}}),
            );
            created.insert("links".into(), Json::Object(links));
        }
    }
    json!({
        "operationId": op_id,
        "tags": [nested_in.unwrap_or(n)],
        "summary": summary,
        "requestBody": {"required": true, "content": {JSON: {"schema": schema_ref(&body)}}},
        "responses": with_common(responses),
    })
}
