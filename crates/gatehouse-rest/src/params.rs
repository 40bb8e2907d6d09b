//! Query parameters of list requests: paging, sorting, sparse fields and
//! filters named like the GraphQL conventions (`year_gt`, `status_in`, ...).

use std::collections::HashMap;

use gatehouse_schema::{Entity, FilterOp, Model, ValueType, Wire};
use gatehouse_store::{Filter, ListQuery, OrderBy};
use serde_json::Value as Json;

use crate::problem::{InvalidParam, Problem};

/// Query parameters with a fixed meaning; a field of the same name can only
/// be filtered through its suffixed forms.
pub(crate) const RESERVED: [&str; 5] = ["page", "per_page", "sort", "fields", "after"];

/// Largest page number accepted (2^53 - 1, what JSON clients count exactly).
pub(crate) const MAX_PAGE: u64 = 9_007_199_254_740_991;

/// A filter parameter, resolved at start-up.
#[derive(Debug, Clone)]
pub(crate) struct FilterParam {
    /// Entity field compared.
    pub field: String,
    /// Operator.
    pub op: FilterOp,
    /// Type of one operand (the element type for list fields and `_in`).
    pub ty: ValueType,
}

/// Every filter parameter of `entity`, by name, in a stable order. A field's
/// own name wins over a suffixed reading of another field's name.
pub(crate) fn filter_params(entity: &Entity) -> Vec<(String, FilterParam)> {
    let mut out: Vec<(String, FilterParam)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for pass_exact in [true, false] {
        for f in entity.stored_fields() {
            let Some(ty) = f.filter_type() else { continue };
            for &op in f.filter_ops() {
                if (op == FilterOp::Eq) != pass_exact {
                    continue;
                }
                let name = format!("{}{}", f.name, op.suffix());
                if RESERVED.contains(&name.as_str()) || !seen.insert(name.clone()) {
                    continue;
                }
                out.push((
                    name,
                    FilterParam {
                        field: f.name.clone(),
                        op,
                        ty: ty.clone(),
                    },
                ));
            }
        }
    }
    out
}

/// A list request's query string, parsed and checked once: what the page's
/// statement, its count and its `Link` header are made from. Kept by query
/// string ([`crate::EntityApi::parsed`]): nothing in it depends on the
/// caller, whose hidden fields are checked on every request.
#[derive(Debug)]
pub(crate) struct ParsedList {
    /// 1-based page number.
    pub page: u64,
    /// Rows per page.
    pub per_page: u64,
    /// `after`: the page after this cursor (empty: the first page).
    pub after: Option<String>,
    /// The parameters as given, minus `page`, `per_page` and `after`.
    pub passthrough: Vec<(String, String)>,
    /// `passthrough` form-encoded and followed by `&` (empty when there
    /// are none): how every page-number `Link` URL's query starts.
    pub link_query: String,
    /// The page: the filter parameters' conjunction, `sort`, `fields`, and
    /// the page's bounds.
    pub query: ListQuery,
}

impl ParsedList {
    /// Every field the request names (filters, `sort`, `fields`), for the
    /// caller's hidden-field check.
    pub fn fields_used(&self) -> Vec<&str> {
        let q = &self.query;
        let mut used: Vec<&str> = Vec::new();
        if let Some(f) = &q.filter {
            f.for_each_field(&mut |name| used.push(name));
        }
        used.extend(q.order.iter().map(|o| o.field.as_str()));
        used.extend(q.select.iter().flatten().map(String::as_str));
        used
    }
}

/// Page limits from the configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paging {
    pub default: u64,
    pub max: u64,
}

/// Parameters ignored here because other layers own them: OAuth 1.0
/// protocol parameters (RFC 5849 §3.5.3) and RFC 6750 §2.3 `access_token`.
fn is_auth_param(name: &str) -> bool {
    name.starts_with("oauth_") || name == "access_token"
}

/// Splits a query string into decoded pairs; a parameter given twice is refused.
pub(crate) fn pairs(query: Option<&str>) -> Result<Vec<(String, String)>, Problem> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut bad = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if k.is_empty() && v.is_empty() {
            continue;
        }
        if out.iter().any(|(n, _)| *n == k) {
            if !bad.iter().any(|p: &InvalidParam| p.name == k) {
                bad.push(InvalidParam {
                    name: k.to_string(),
                    reason: "is given more than once".into(),
                });
            }
            continue;
        }
        out.push((k.into_owned(), v.into_owned()));
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(Problem::bad_params(bad))
    }
}

/// Parses the query of a list request on `entity`.
pub(crate) fn list_params(
    model: &Model,
    entity: &Entity,
    filters: &HashMap<String, FilterParam>,
    paging: Paging,
    query: Option<&str>,
) -> Result<ParsedList, Problem> {
    let pairs = pairs(query)?;
    let mut out = ParsedList {
        page: 1,
        per_page: paging.default,
        after: None,
        passthrough: Vec::new(),
        link_query: String::new(),
        query: ListQuery::default(),
    };
    let mut conditions = Vec::new();
    let mut bad = Vec::new();
    let mut reject = |name: &str, reason: String| {
        bad.push(InvalidParam {
            name: name.to_string(),
            reason,
        })
    };
    for (name, value) in &pairs {
        match name.as_str() {
            "page" => match value.parse::<u64>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => out.page = n,
                _ => reject(name, format!("`{value}` is not a page number (1, 2, ...)")),
            },
            "per_page" => match value.parse::<u64>() {
                Ok(n) if n > paging.max => reject(
                    name,
                    format!("{n} is above the maximum page size of {}", paging.max),
                ),
                Ok(n) if n >= 1 => out.per_page = n,
                _ => reject(
                    name,
                    format!(
                        "`{value}` is not a page size (1 to {}, default {})",
                        paging.max, paging.default
                    ),
                ),
            },
            "sort" => match sort(entity, value) {
                Ok(order) => out.query.order = order,
                Err(reason) => reject(name, reason),
            },
            "after" => out.after = Some(value.clone()),
            "fields" => match fields(entity, value) {
                Ok(select) => out.query.select = Some(select),
                Err(reason) => reject(name, reason),
            },
            _ => {
                if let Some(fp) = filters.get(name) {
                    match operand(model, fp, value) {
                        Ok(v) => conditions.push(Filter::cmp(fp.field.clone(), fp.op, v)),
                        Err(reason) => reject(name, reason),
                    }
                } else if !is_auth_param(name) {
                    reject(
                        name,
                        format!(
                            "is not a parameter of {} lists (page, per_page, after, sort, fields, or a filter like `<field>` / `<field>_gt`)",
                            entity.name
                        ),
                    );
                    continue;
                }
            }
        }
        if name != "page" && name != "per_page" && name != "after" {
            out.passthrough.push((name.clone(), value.clone()));
        }
    }
    if out.after.is_some() && pairs.iter().any(|(n, _)| n == "page") {
        reject(
            "page",
            "cannot be combined with `after`: a list is paged by number or by cursor".into(),
        );
    }
    if !bad.is_empty() {
        return Err(Problem::bad_params(bad));
    }
    out.query.filter = Filter::all_of(conditions);
    out.query.limit = Some(out.per_page);
    out.query.offset = (out.page - 1).saturating_mul(out.per_page);
    let mut link_query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &out.passthrough {
        link_query.append_pair(k, v);
    }
    out.link_query = link_query.finish();
    if !out.link_query.is_empty() {
        out.link_query.push('&');
    }
    Ok(out)
}

/// Parses `fields=a,b` for `entity` (also used by single-row reads).
pub(crate) fn fields(entity: &Entity, value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim) {
        match entity.field(name) {
            Some(f) if f.is_stored() => {
                if !out.iter().any(|n| n == name) {
                    out.push(name.to_string());
                }
            }
            Some(_) => {
                return Err(format!(
                    "`{name}` is a relation list; read it at its nested path"
                ));
            }
            None if name.is_empty() => return Err("names an empty field".into()),
            None => return Err(format!("{} has no field `{name}`", entity.name)),
        }
    }
    Ok(out)
}

fn sort(entity: &Entity, value: &str) -> Result<Vec<OrderBy>, String> {
    let mut out = Vec::new();
    for key in value.split(',').map(str::trim) {
        let (name, desc) = match key.strip_prefix('-') {
            Some(rest) => (rest, true),
            None => (key, false),
        };
        match entity.field(name) {
            Some(f) if f.is_orderable() => out.push(OrderBy {
                field: name.to_string(),
                desc,
            }),
            Some(f) if f.is_list() => {
                return Err(format!("`{name}` is a list and cannot be sorted on"));
            }
            Some(f) if f.is_stored() => {
                return Err(format!(
                    "`{name}` is `{}`, which cannot be sorted on",
                    f.ty.base_name()
                ));
            }
            Some(_) => {
                return Err(format!(
                    "`{name}` is a relation list and cannot be sorted on"
                ));
            }
            None if name.is_empty() => return Err("names an empty field".into()),
            None => return Err(format!("{} has no field `{name}`", entity.name)),
        }
    }
    Ok(out)
}

/// The operand of a filter parameter, typed by the field.
fn operand(model: &Model, fp: &FilterParam, value: &str) -> Result<Json, String> {
    match fp.op {
        FilterOp::IsNull => boolean(value),
        op if op.takes_list() => {
            // Form-style lists cannot say "empty": `x_in=` is the list
            // `[""]`, as the OpenAPI document's `minItems: 1` implies.
            value
                .split(',')
                .map(|v| scalar(model, &fp.ty, v))
                .collect::<Result<Vec<_>, _>>()
                .map(Json::Array)
        }
        _ => scalar(model, &fp.ty, value),
    }
}

fn boolean(value: &str) -> Result<Json, String> {
    match value {
        "true" => Ok(Json::Bool(true)),
        "false" => Ok(Json::Bool(false)),
        _ => Err(format!("`{value}` is not a Boolean (true or false)")),
    }
}

/// One value of type `ty` from its text form: the text is read as the
/// JSON value it stands for, which the Model then checks
/// ([`Model::check_value`]).
fn scalar(model: &Model, ty: &ValueType, value: &str) -> Result<Json, String> {
    let wire = match ty {
        ValueType::Scalar(s) => s.info().wire,
        ValueType::Enum(_) => Wire::Text,
    };
    let json = match wire {
        Wire::Boolean => boolean(value)?,
        Wire::Integer => value
            .parse::<i64>()
            .map(Json::from)
            .map_err(|_| format!("`{value}` is not a 32-bit integer"))?,
        Wire::Number => value
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Json::Number)
            .ok_or_else(|| format!("`{value}` is not a finite number"))?,
        Wire::Text | Wire::Any => Json::String(value.to_string()),
    };
    match model.check_value(ty, &json) {
        Ok(checked) => Ok(checked.into_owned()),
        Err(e) => Err(e.to_string()),
    }
}
