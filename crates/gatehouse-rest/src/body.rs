//! Request bodies: media type, size, JSON syntax, and validation of the
//! fields against the entity, collecting every problem for one 422.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use gatehouse_schema::{CONNECT, Entity, Field, FieldKind, Model, ValueError, json_kind};
use gatehouse_store::Code;
use gatehouse_store::Row;
use serde_json::Value as Json;

use crate::problem::{FieldError, Problem};

/// How a body is applied to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// POST: required fields must be present; `id` may be given.
    Create,
    /// PUT: whole replacement; required fields must be present; omitted
    /// nullable fields become null; `id`, if given, must be the path's.
    Replace,
    /// PATCH (RFC 7396 merge patch): only the members given change, `null`
    /// clears; `id`, if given, must be the path's.
    Patch,
}

/// Whether the request's media type is JSON: `application/json` or any
/// `application/*+json` (RFC 6839 structured syntax suffix), which covers
/// `application/merge-patch+json` and `application/vnd.gatehouse.v1+json`.
fn is_json_media_type(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads a JSON object body: 415 unless JSON, 413 above `limit` bytes, 400
/// when it does not parse, 422 when it is not an object.
pub(crate) async fn read_object(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    accepted: &'static str,
) -> Result<Row, Problem> {
    if !is_json_media_type(headers) {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::UnsupportedMediaType,
            format!("the request body must be JSON ({accepted})"),
        )
        .with_header(
            header::ACCEPT,
            axum::http::HeaderValue::from_static(accepted),
        ));
    }
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::PayloadTooLarge,
            format!("the request body is larger than {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let bytes = collect(body, limit).await.map_err(|e| match e {
        ReadError::TooLarge => too_large(),
        ReadError::Broken => Problem::new(
            StatusCode::BAD_REQUEST,
            Code::BadRequest,
            "the request body could not be read",
        ),
    })?;
    let value: Json = serde_json::from_slice(&bytes).map_err(|e| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            Code::MalformedJson,
            format!("the request body is not valid JSON: {e}"),
        )
    })?;
    match value {
        Json::Object(map) => Ok(map),
        other => Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::ValidationFailed,
            format!(
                "the request body must be a JSON object of fields, not {}",
                json_kind(&other)
            ),
        )),
    }
}

enum ReadError {
    TooLarge,
    Broken,
}

/// The body's bytes, stopping as soon as they pass `limit`.
async fn collect(mut body: Body, limit: usize) -> Result<Vec<u8>, ReadError> {
    use axum::body::HttpBody;
    let mut out = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(out),
            Some(Err(_)) => return Err(ReadError::Broken),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if out.len() + data.len() > limit {
                        return Err(ReadError::TooLarge);
                    }
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

/// Validates `body` for `entity` and returns the row to hand to the store.
/// `fixed` are fields set by the path (`id` for PUT/PATCH, the parent
/// reference of a nested POST): given in the body they must match.
///
/// A POST may carry new rows of a one-to-many relation (`"books": [{...}]`
/// on an author): each is validated as a POST of its own entity, without
/// the field that points back (the store sets it to the new row), and
/// problems with them are named by their path (`books[0].title`).
pub(crate) fn validate(
    model: &Model,
    entity: &Entity,
    body: Row,
    mode: Mode,
    fixed: &[(&str, &str)],
) -> Result<Row, Problem> {
    let mut errors: Vec<FieldError> = Vec::new();
    let out = validate_fields(model, entity, body, mode, fixed, None, "", &mut errors);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Problem::invalid_body(errors))
    }
}

/// [`validate`] of one row, its problems added to `errors` with their
/// fields prefixed by `at` (`books[0].` for a nested row). `nested_via`:
/// the to-one field the row's parent sets (a nested row may not give it).
#[allow(clippy::too_many_arguments)]
fn validate_fields(
    model: &Model,
    entity: &Entity,
    mut body: Row,
    mode: Mode,
    fixed: &[(&str, &str)],
    nested_via: Option<&str>,
    at: &str,
    errors: &mut Vec<FieldError>,
) -> Row {
    let err = |errors: &mut Vec<FieldError>, field: &str, message: String| {
        errors.push(FieldError {
            field: format!("{at}{field}"),
            message,
        })
    };
    let mut out = Row::new();
    for (key, value) in std::mem::take(&mut body) {
        let Some(field) = entity.field(&key) else {
            err(
                errors,
                &key,
                format!("{} has no field `{key}`", entity.name),
            );
            continue;
        };
        if let (FieldKind::ToMany { .. }, Mode::Create, Some(child), Some(via)) = (
            &field.kind,
            mode,
            model.target_of(field),
            model.inverse_of(field),
        ) {
            // `null` is refused like any other non-list: the OpenAPI
            // document declares the member a list, not a nullable one.
            match value {
                Json::Array(items) => {
                    let mut rows = Vec::with_capacity(items.len());
                    for (i, item) in items.into_iter().enumerate() {
                        let here = format!("{key}[{i}]");
                        match item {
                            Json::Object(mut row) => {
                                if row.remove(&via.name).is_some() {
                                    err(
                                        errors,
                                        &format!("{here}.{}", via.name),
                                        format!(
                                            "is set to the new {} by the nesting: leave it out",
                                            entity.name
                                        ),
                                    );
                                }
                                rows.push(Json::Object(validate_fields(
                                    model,
                                    child,
                                    row,
                                    Mode::Create,
                                    &[],
                                    Some(&via.name),
                                    &format!("{at}{here}."),
                                    errors,
                                )));
                            }
                            other => err(
                                errors,
                                &here,
                                format!(
                                    "must be a new {} (an object), not {}",
                                    child.name,
                                    json_kind(&other)
                                ),
                            ),
                        }
                    }
                    out.insert(key, Json::Array(rows));
                }
                other => err(
                    errors,
                    &key,
                    format!(
                        "must be a list of new {} rows, not {}",
                        child.name,
                        json_kind(&other)
                    ),
                ),
            }
            continue;
        }
        if let (FieldKind::ToMany { .. }, Mode::Create, Some(target), Some(_)) = (
            &field.kind,
            mode,
            model.target_of(field),
            model.connect_of(field),
        ) {
            // Links to existing rows (`{"connect": [ids]}`): the shape is
            // checked here, each id by the store (it must exist and be
            // readable by the caller, and be listed once).
            match value {
                Json::Object(o)
                    if o.len() == 1
                        && o.get(CONNECT).and_then(Json::as_array).is_some_and(|ids| {
                            ids.iter()
                                .all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
                        }) =>
                {
                    out.insert(key, Json::Object(o));
                }
                _ => err(
                    errors,
                    &key,
                    format!(
                        "must be {{\"{CONNECT}\": [ids of existing {} rows]}} (non-empty strings)",
                        target.name
                    ),
                ),
            }
            continue;
        }
        if let FieldKind::ToMany { .. } | FieldKind::Count { .. } = &field.kind {
            let why = ValueError::to_many(model, field);
            err(errors, &key, why.to_string());
            continue;
        }
        if field.is_server_set() {
            err(
                errors,
                &key,
                "is set by the server and cannot be written".into(),
            );
            continue;
        }
        if let Some((_, want)) = fixed.iter().find(|(f, _)| *f == key) {
            if value.as_str() != Some(*want) {
                let why = if matches!(field.kind, FieldKind::Id) {
                    "the id of a row cannot be changed; it is the one in the path".to_string()
                } else {
                    format!("is set by the path to `{want}`")
                };
                err(errors, &key, why);
            }
            continue;
        }
        if matches!(field.kind, FieldKind::Id) && mode != Mode::Create {
            // Replace/patch without a fixed id cannot happen; keep it total.
            err(errors, &key, "the id of a row cannot be changed".into());
            continue;
        }
        if value.is_null() && matches!(field.kind, FieldKind::Id) {
            err(
                errors,
                &key,
                "must be a non-empty string when given; omit it to have one generated".into(),
            );
            continue;
        }
        match check(model, field, &value) {
            Ok(()) => {
                out.insert(key, value);
            }
            Err(message) => err(errors, &key, message),
        }
    }
    if mode != Mode::Patch {
        for f in entity.stored_fields() {
            let fixed_here =
                fixed.iter().any(|(n, _)| *n == f.name) || nested_via == Some(f.name.as_str());
            let required = if mode == Mode::Create {
                entity.required_on_create(f)
            } else {
                f.required && !matches!(f.kind, FieldKind::Id) && !f.is_server_set()
            };
            let name = format!("{at}{}", f.name);
            if required
                && !fixed_here
                && !out.contains_key(&f.name)
                && !errors.iter().any(|e| e.field == name)
            {
                err(errors, &f.name, "is required".into());
            }
        }
    }
    for (name, value) in fixed {
        if *name != "id" || mode == Mode::Create {
            out.insert((*name).to_string(), Json::String((*value).to_string()));
        }
    }
    out
}

/// Checks one value (null included) for a stored field: the Model's rule
/// ([`Model::check_field_value`]), with its message.
fn check(model: &Model, field: &Field, v: &Json) -> Result<(), String> {
    model
        .check_field_value(field, v)
        .map(drop)
        .map_err(|e| e.to_string())
}
