//! Request dispatch and the handlers. The path is matched here rather than
//! with one axum route per collection so that every miss (unknown version,
//! collection or relation, wrong method) gets a problem body and `Allow`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_json as json;
use gatehouse_schema::{AccessContext, Entity};
use gatehouse_store::{EntityStore, Filter, ListQuery, PageRequest, Row, RowSet, StoreError};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Serialize;
use serde_json::json;

use crate::access::Caller;
use crate::body::{self, Mode};
use crate::negotiate::negotiate;
use crate::params;
use crate::problem::Problem;
use crate::{Api, Nested, SUPPORTED_VERSIONS, routes};
use gatehouse_telemetry::RouteLabel;

const ALLOW_COLLECTION: &str = "GET, HEAD, POST, OPTIONS";
const ALLOW_ITEM: &str = "GET, HEAD, PUT, PATCH, DELETE, OPTIONS";
const ALLOW_DOC: &str = "GET, HEAD, OPTIONS";
const WRITE_TYPES: &str = "application/json";
const PATCH_TYPES: &str = "application/merge-patch+json, application/json";

/// Offsets beyond this are not sent to the store: no row can be there.
const MAX_OFFSET: u64 = i64::MAX as u64 / 2;

/// RFC 3986 unreserved characters stay as they are in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Every request under `/{version}/...`.
pub(crate) async fn dispatch(State(api): State<Arc<Api>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let method = parts.method;
    let headers = parts.headers;
    let query = parts.uri.query().map(str::to_string);
    let principal = parts.extensions.get::<gatehouse_auth::Principal>();
    let caller = Caller::new(principal, api.auth_required);
    let mut label = None;
    let result = route(
        &api,
        &caller,
        &method,
        &headers,
        parts.uri.path(),
        query.as_deref(),
        body,
        &mut label,
    )
    .await;
    let mut resp = match result {
        Ok(resp) => resp,
        Err(p) => p.into_response(),
    };
    // The request log and metrics name the route this parse resolved, not
    // the raw path; a path that resolved to nothing keeps the router's
    // catch-all template.
    if let Some(label) = label {
        resp.extensions_mut().insert(label);
    }
    resp
}

/// The decoded path segments; `None` when one is not valid percent-encoded UTF-8.
fn segments(path: &str) -> Option<Vec<Cow<'_, str>>> {
    let path = path.strip_prefix('/').unwrap_or(path);
    // One trailing slash is tolerated (`/v1/books/`).
    let path = path.strip_suffix('/').unwrap_or(path);
    path.split('/')
        .map(|s| match s.contains('%') {
            // A `&str` is UTF-8 already, and without `%` decodes to itself.
            false => Some(Cow::Borrowed(s)),
            true => percent_decode_str(s).decode_utf8().ok(),
        })
        .collect()
}

fn is_version(s: &str) -> bool {
    s.len() > 1 && s.starts_with('v') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

/// Resolves the route (and its `label`), authorizes it (before any store
/// access or body read), then runs its handler. Each handler's future is
/// boxed: a list's is about 8 KB, and each layer between hyper and here
/// moved the future it wraps (five copies per request, now one); boxed,
/// this one stays small. Too small a saving to show in req/s
/// (`bench/RESULTS.md`).
#[allow(clippy::too_many_arguments)]
async fn route(
    api: &Api,
    caller: &Caller,
    method: &Method,
    headers: &HeaderMap,
    path: &str,
    query: Option<&str>,
    body: Body,
    label: &mut Option<RouteLabel>,
) -> Result<Response, Problem> {
    let not_found = || Problem::not_found(format!("there is no resource at `{path}`"));
    let segs = segments(path).ok_or_else(not_found)?;
    // No stored id holds NUL (bodies refuse it), and PostgreSQL could not compare it.
    if segs.iter().any(|s| s.is_empty() || s.contains('\0')) {
        return Err(not_found());
    }
    let version = segs.first().map(|s| s.as_ref()).unwrap_or("");
    if !SUPPORTED_VERSIONS.contains(&version) {
        if is_version(version) {
            return Err(Problem::not_found(format!(
                "API version `{version}` is not served; supported versions: {}",
                SUPPORTED_VERSIONS.join(", ")
            ))
            .with_extra("supported_versions", json!(SUPPORTED_VERSIONS)));
        }
        return Err(not_found());
    }
    let Some(collection) = segs.get(1) else {
        return Err(unknown_collection(api, None));
    };
    if segs.len() == 2 && collection == routes::DOCUMENT {
        *label = Some(api.openapi_label.clone());
        caller.require(api.model.schema_read_scope(), true)?;
        return match *method {
            Method::GET | Method::HEAD => {
                negotiate(headers)?;
                Ok(bytes_response(
                    StatusCode::OK,
                    "application/json",
                    api.openapi.clone(),
                ))
            }
            Method::OPTIONS => Ok(options(ALLOW_DOC)),
            _ => Err(Problem::method_not_allowed(ALLOW_DOC)),
        };
    }
    let Some(&ei) = api.collections.get(collection.as_ref()) else {
        return Err(unknown_collection(api, Some(collection)));
    };
    let rows = &api.entities[ei].rows;
    let entity = rows.def();
    let labels = &api.entities[ei].labels;
    match segs.len() {
        2 => *label = Some(labels.collection.clone()),
        3 => *label = Some(labels.item.clone()),
        _ => {}
    }
    // Every path below names `entity` first: reading anything under it
    // (its rows, a nested collection, whether an id exists) needs its read
    // scope; writes need the write scope of the entity written.
    match segs.len() {
        2 => match *method {
            Method::GET | Method::HEAD => {
                caller.read(entity)?;
                Box::pin(list(api, caller, ei, headers, query, None)).await
            }
            Method::POST => {
                caller.write(entity)?;
                Box::pin(create(api, caller, ei, headers, body, None)).await
            }
            Method::OPTIONS => {
                caller.read(entity)?;
                Ok(options(ALLOW_COLLECTION))
            }
            _ => Err(Problem::method_not_allowed(ALLOW_COLLECTION)),
        },
        3 => {
            let id = segs[2].as_ref();
            match *method {
                Method::GET | Method::HEAD => {
                    caller.read(entity)?;
                    Box::pin(get_one(api, caller, rows, id, headers, query)).await
                }
                Method::PUT | Method::PATCH => {
                    caller.write(entity)?;
                    let mode = if *method == Method::PUT {
                        Mode::Replace
                    } else {
                        Mode::Patch
                    };
                    Box::pin(write_existing(api, caller, rows, id, headers, body, mode)).await
                }
                Method::DELETE => {
                    caller.write(entity)?;
                    Box::pin(delete(caller, rows, id, headers)).await
                }
                Method::OPTIONS => {
                    caller.read(entity)?;
                    Ok(options(ALLOW_ITEM))
                }
                _ => Err(Problem::method_not_allowed(ALLOW_ITEM)),
            }
        }
        4 => {
            // A nested path reads its parent (it answers 404 for a parent
            // that does not exist), whatever it does with the children.
            caller.read(entity)?;
            let Some(nested) = api.entities[ei].nested.get(segs[3].as_ref()) else {
                let known: Vec<&str> = api.entities[ei].nested.keys().map(String::as_str).collect();
                return Err(Problem::not_found(format!(
                    "{} has no nested collection `{}`{}",
                    entity.name,
                    segs[3],
                    if known.is_empty() {
                        String::new()
                    } else {
                        format!(" (it has: {})", sorted(known).join(", "))
                    }
                )));
            };
            *label = Some(nested.label.clone());
            let parent = Parent {
                rows,
                id: segs[2].as_ref(),
                nested,
            };
            let child = &api.model.entities[nested.child];
            match *method {
                Method::GET | Method::HEAD => {
                    caller.read(child)?;
                    Box::pin(list(
                        api,
                        caller,
                        nested.child,
                        headers,
                        query,
                        Some(parent),
                    ))
                    .await
                }
                Method::POST => {
                    caller.write(child)?;
                    Box::pin(create(
                        api,
                        caller,
                        nested.child,
                        headers,
                        body,
                        Some(parent),
                    ))
                    .await
                }
                Method::OPTIONS => {
                    caller.read(child)?;
                    Ok(options(ALLOW_COLLECTION))
                }
                _ => Err(Problem::method_not_allowed(ALLOW_COLLECTION)),
            }
        }
        _ => Err(not_found()),
    }
}

fn sorted(mut v: Vec<&str>) -> Vec<&str> {
    v.sort_unstable();
    v
}

fn unknown_collection(api: &Api, name: Option<&Cow<'_, str>>) -> Problem {
    let known = sorted(api.collections.keys().map(String::as_str).collect());
    let what = match name {
        Some(n) => format!("there is no collection `{n}`"),
        None => format!("name a collection: {}", routes::path(&["<collection>"])),
    };
    Problem::not_found(format!("{what}; collections: {}", known.join(", ")))
}

/// The parent row of a nested request.
struct Parent<'a> {
    rows: &'a EntityStore,
    id: &'a str,
    nested: &'a Nested,
}

fn options(allow: &'static str) -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::ALLOW, HeaderValue::from_static(allow))],
    )
        .into_response()
}

fn bytes_response(status: StatusCode, media: &'static str, bytes: impl Into<Body>) -> Response {
    let mut resp = (status, bytes.into()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    h.insert(header::VARY, HeaderValue::from_static("accept"));
    resp
}

fn json_response(
    status: StatusCode,
    media: &'static str,
    value: &impl Serialize,
) -> Result<Response, Problem> {
    let bytes = serde_json::to_vec(value).map_err(Problem::internal)?;
    Ok(bytes_response(status, media, bytes))
}

/// Where `field` is declared in `entity` (unknown names last).
fn rank(entity: &Entity, field: &str) -> usize {
    entity
        .fields
        .iter()
        .position(|f| f.name == field)
        .unwrap_or(usize::MAX)
}

/// Rows in the store's column form, written as a JSON array of objects
/// straight from the columns, with no map per row. Keys follow the order
/// the schema declares the fields in, as for a single row ([`Ordered`]);
/// each is escaped once, not once per row.
struct Objects<'a> {
    set: &'a RowSet,
    /// Column indices in the order they are written, each with its key as
    /// JSON text followed by `:`.
    order: Vec<(usize, Cow<'a, [u8]>)>,
}

impl<'a> Objects<'a> {
    /// `keys` are the entity's fields' keys in the schema's order
    /// ([`crate::EntityApi::keys`]); `hidden` columns (fields the caller
    /// may not read) are left out.
    fn new(entity: &Entity, keys: &'a [Box<[u8]>], set: &'a RowSet, hidden: &[&str]) -> Self {
        let mut order: Vec<(usize, usize, Cow<'a, [u8]>)> = set
            .columns
            .iter()
            .enumerate()
            .filter(|(_, name)| !hidden.contains(&name.as_str()))
            .map(|(i, name)| {
                let rank = rank(entity, name);
                let key = match keys.get(rank) {
                    Some(key) => Cow::Borrowed(&key[..]),
                    None => Cow::Owned(object_key(name)),
                };
                (rank, i, key)
            })
            .collect();
        order.sort_unstable_by_key(|&(rank, i, _)| (rank, i));
        let order = order.into_iter().map(|(_, i, key)| (i, key)).collect();
        Objects { set, order }
    }

    /// The JSON text: what `serde_json` would write for the same objects.
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 * self.set.rows.len() + 2);
        out.push(b'[');
        for (r, row) in self.set.rows.iter().enumerate() {
            if r > 0 {
                out.push(b',');
            }
            out.push(b'{');
            let mut first = true;
            for (i, key) in &self.order {
                if let Some(value) = row.get(*i) {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend_from_slice(key);
                    json::write_value(&mut out, value);
                }
            }
            out.push(b'}');
        }
        out.push(b']');
        out
    }
}

/// `name` as a JSON object key: quoted, escaped, then `:`.
pub(crate) fn object_key(name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 3);
    json::write_str(&mut key, name);
    key.push(b':');
    key
}

/// One row serialized with its keys in the order the schema declares the
/// fields in (`Row` itself iterates alphabetically), without the fields the
/// caller may not read.
struct Ordered<'a> {
    entity: &'a Entity,
    row: &'a Row,
    hidden: &'a [&'a str],
    /// Only the `id` (for a caller that may write but not read the entity).
    id_only: bool,
}

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut keys: Vec<&String> = self
            .row
            .keys()
            .filter(|k| {
                if self.id_only {
                    k.as_str() == "id"
                } else {
                    !self.hidden.contains(&k.as_str())
                }
            })
            .collect();
        keys.sort_by_key(|k| rank(self.entity, k));
        let mut map = s.serialize_map(Some(keys.len()))?;
        for k in keys {
            map.serialize_entry(k, &self.row[k.as_str()])?;
        }
        map.end()
    }
}

fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

impl Api {
    /// The rows of list query `q` over entity `ei`. With `key` (the request's
    /// query string, which `q` was parsed from) the statement is built once
    /// and kept ([`crate::EntityApi::lists`]).
    async fn list(
        &self,
        access: &AccessContext,
        ei: usize,
        key: Option<&str>,
        q: &ListQuery,
    ) -> Result<RowSet, StoreError> {
        let rows = &self.entities[ei].rows;
        let Some(key) = key else {
            return Ok(rows.list(access, q).await?.rows);
        };
        // A statement with a caller's policy in it serves only that caller.
        let caller = rows.statement_caller(access, &q.joins);
        let key = if caller.is_empty() {
            key.to_string()
        } else {
            format!("{key}\u{0}{caller}")
        };
        let lists = &self.entities[ei].lists;
        let cached = lists.get(key.as_str());
        let prepared = match cached {
            Some(p) => p,
            None => {
                let p = Arc::new(rows.prepare(access, q)?);
                lists.insert(key.into(), p.clone());
                p
            }
        };
        Ok(prepared.run(access, &[]).await?.rows)
    }

    /// Path-absolute URL of a collection.
    fn collection_url(&self, entity: &Entity) -> String {
        crate::collection_url(&self.base_path, entity)
    }

    /// The list request `query` on entity `ei`, parsed, or as parsed for an
    /// earlier request with the same query string.
    fn parsed_list(
        &self,
        ei: usize,
        query: Option<&str>,
    ) -> Result<Arc<params::ParsedList>, Problem> {
        let kept = &self.entities[ei].parsed;
        let key = query.unwrap_or("");
        if let Some(p) = kept.get(key) {
            return Ok(p);
        }
        let p = Arc::new(params::list_params(
            &self.model,
            &self.model.entities[ei],
            &self.entities[ei].filters,
            self.paging,
            query,
        )?);
        kept.insert(key.into(), p.clone());
        Ok(p)
    }

    /// Checks that the parent of a nested request exists (for this caller).
    async fn require_parent(
        &self,
        access: &AccessContext,
        parent: &Parent<'_>,
    ) -> Result<(), Problem> {
        match parent.rows.get(access, parent.id).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(Problem::not_found(format!(
                "there is no {} with id `{}`",
                parent.rows.def().name,
                parent.id
            ))),
            Err(e) => Err(Problem::from_read(e)),
        }
    }
}

async fn list(
    api: &Api,
    caller: &Caller,
    ei: usize,
    headers: &HeaderMap,
    query: Option<&str>,
    parent: Option<Parent<'_>>,
) -> Result<Response, Problem> {
    let entity = &api.model.entities[ei];
    let p = api.parsed_list(ei, query)?;
    let hidden = caller.hidden(&api.model, entity);
    if !hidden.is_empty() {
        for name in p.fields_used() {
            caller.use_field(&api.model, entity, &hidden, name)?;
        }
    }
    let media = negotiate(headers)?;
    // A nested collection's rows are its parent's children: the parent's
    // id joins the filters, so its query is this request's own.
    let nested_query;
    let (q, base_url) = match &parent {
        Some(parent) => {
            api.require_parent(&caller.access, parent).await?;
            let of_parent = Filter::eq(parent.nested.via.clone(), parent.id);
            let mut q = p.query.clone();
            q.filter = Filter::all_of(std::iter::once(of_parent).chain(q.filter.take()).collect());
            nested_query = q;
            let url = format!(
                "{}/{}/{}",
                api.collection_url(parent.rows.def()),
                encode(parent.id),
                parent.nested.segment
            );
            (&nested_query, Cow::Owned(url))
        }
        None => (&p.query, Cow::Borrowed(api.entities[ei].url.as_str())),
    };
    if let Some(after) = &p.after {
        return cursor_list(
            api,
            caller,
            ei,
            media,
            &hidden,
            &base_url,
            &p.passthrough,
            p.per_page,
            after,
            q.clone(),
        )
        .await;
    }
    let (rows, total) = if q.offset > MAX_OFFSET {
        let total = api.entities[ei]
            .rows
            .count(&caller.access, q.filter.as_ref())
            .await;
        (Ok(RowSet::default()), total)
    } else {
        // A nested collection's statement holds its parent's id: not kept.
        let key = parent.is_none().then(|| query.unwrap_or(""));
        tokio::join!(
            api.list(&caller.access, ei, key, q),
            api.entities[ei]
                .rows
                .count(&caller.access, q.filter.as_ref())
        )
    };
    let rows = rows.map_err(Problem::from_read)?;
    let total = total.map_err(Problem::from_read)?;
    let link = link_header(&base_url, &p.link_query, p.page, p.per_page, total);
    page_response(api, caller, ei, media, &hidden, rows, &link, total).await
}

/// The answer of a list page, by number or by cursor: the rows with their
/// references the caller may not read hidden, the `Link` and
/// `X-Total-Count` headers.
#[allow(clippy::too_many_arguments)]
async fn page_response(
    api: &Api,
    caller: &Caller,
    ei: usize,
    media: &'static str,
    hidden: &[&str],
    mut rows: RowSet,
    link: &str,
    total: u64,
) -> Result<Response, Problem> {
    api.entities[ei]
        .rows
        .hide_unseen_references(&caller.access, &mut rows)
        .await
        .map_err(Problem::from_read)?;
    let entity = &api.model.entities[ei];
    let mut resp = bytes_response(
        StatusCode::OK,
        media,
        Objects::new(entity, &api.entities[ei].keys, &rows, hidden).to_vec(),
    );
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(link) {
        h.insert(header::LINK, v);
    }
    h.insert("x-total-count", HeaderValue::from(total));
    Ok(resp)
}

/// A list page read by cursor (`?after=`): the rows after the cursor (the
/// first page for an empty one) in the list's `sort` order, with a `Link`
/// to the first page and, when more rows follow, to the next one by the
/// last row's cursor. The cursor's bounds run in the list's statement, so
/// rows inserted before it move nothing.
#[allow(clippy::too_many_arguments)]
async fn cursor_list(
    api: &Api,
    caller: &Caller,
    ei: usize,
    media: &'static str,
    hidden: &[&str],
    base_url: &str,
    passthrough: &[(String, String)],
    per_page: u64,
    after: &str,
    mut q: ListQuery,
) -> Result<Response, Problem> {
    let store = &api.entities[ei].rows;
    q.limit = None;
    let page = PageRequest {
        first: Some(per_page),
        after: (!after.is_empty()).then(|| after.to_string()),
        ..PageRequest::default()
    };
    let (found, total) = tokio::join!(
        store.page(&caller.access, &q, &page),
        store.count(&caller.access, q.filter.as_ref())
    );
    let found = found.map_err(Problem::from_read)?;
    let total = total.map_err(Problem::from_read)?;
    let next = found.has_next_page.then(|| found.last_cursor()).flatten();
    let link = cursor_link_header(base_url, passthrough, per_page, next.as_deref());
    page_response(api, caller, ei, media, hidden, found.rows, &link, total).await
}

/// RFC 8288 `Link` of a page read by cursor: `first` (an empty `after`)
/// and, when more rows follow, `next` (the last row's cursor).
fn cursor_link_header(
    base: &str,
    passthrough: &[(String, String)],
    per_page: u64,
    next: Option<&str>,
) -> String {
    let url = |after: &str| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in passthrough {
            query.append_pair(k, v);
        }
        query.append_pair("per_page", &per_page.to_string());
        query.append_pair("after", after);
        format!("<{base}?{}>", query.finish())
    };
    let mut links = format!("{}; rel=\"first\"", url(""));
    if let Some(next) = next {
        links.push_str(&format!(", {}; rel=\"next\"", url(next)));
    }
    links
}

/// RFC 8288 `Link` with first/prev/next/last; `prev` is omitted on the first
/// page and `next` on the last. An empty collection has one (empty) page.
/// `query` is the other parameters, encoded, each followed by `&`
/// ([`params::ParsedList::link_query`]); `page` and `per_page` are numbers,
/// which encode as themselves.
fn link_header(base: &str, query: &str, page: u64, per_page: u64, total: u64) -> String {
    let last = total.div_ceil(per_page).max(1);
    let mut numbers = itoa::Buffer::new();
    let per_page = numbers.format(per_page).to_string();
    let mut links = String::with_capacity(4 * (base.len() + query.len() + 40));
    let mut link = |n: u64, rel: &str| {
        if !links.is_empty() {
            links.push_str(", ");
        }
        for part in [
            "<",
            base,
            "?",
            query,
            "page=",
            numbers.format(n),
            "&per_page=",
            &per_page,
            ">; rel=\"",
            rel,
            "\"",
        ] {
            links.push_str(part);
        }
    };
    link(1, "first");
    if page > 1 {
        link((page - 1).min(last), "prev");
    }
    if page < last {
        link(page + 1, "next");
    }
    link(last, "last");
    links
}

async fn get_one(
    api: &Api,
    caller: &Caller,
    rows: &EntityStore,
    id: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response, Problem> {
    let entity = rows.def();
    let mut select = None;
    let mut bad = Vec::new();
    for (name, value) in params::pairs(query)? {
        if name == "fields" {
            match params::fields(entity, &value) {
                Ok(f) => select = Some(f),
                Err(reason) => bad.push(crate::problem::InvalidParam { name, reason }),
            }
        } else if !(name.starts_with("oauth_") || name == "access_token") {
            bad.push(crate::problem::InvalidParam {
                name,
                reason: "is not a parameter of single-row reads (only `fields`)".into(),
            });
        }
    }
    if !bad.is_empty() {
        return Err(Problem::bad_params(bad));
    }
    let hidden = caller.hidden(&api.model, entity);
    for name in select.iter().flatten() {
        caller.use_field(&api.model, entity, &hidden, name)?;
    }
    let media = negotiate(headers)?;
    let row = rows
        .get(&caller.access, id)
        .await
        .map_err(Problem::from_read)?
        .ok_or_else(|| Problem::not_found(format!("there is no {} with id `{id}`", entity.name)))?;
    let mut row: Row = match select {
        Some(fields) => row
            .into_iter()
            .filter(|(k, _)| k == "id" || fields.iter().any(|f| f == k))
            .collect(),
        None => row,
    };
    rows.hide_unseen_references_in(&caller.access, &mut row)
        .await
        .map_err(Problem::from_read)?;
    json_response(
        StatusCode::OK,
        media,
        &Ordered {
            entity,
            row: &row,
            hidden: &hidden,
            id_only: false,
        },
    )
}

async fn create(
    api: &Api,
    caller: &Caller,
    ei: usize,
    headers: &HeaderMap,
    body: Body,
    parent: Option<Parent<'_>>,
) -> Result<Response, Problem> {
    let entity = &api.model.entities[ei];
    let media = negotiate(headers)?;
    let object = body::read_object(headers, body, api.max_body_bytes, WRITE_TYPES).await?;
    let hidden = caller.hidden(&api.model, entity);
    for name in object.keys() {
        caller.use_field(&api.model, entity, &hidden, name)?;
    }
    let mut fixed = Vec::new();
    if let Some(parent) = &parent {
        api.require_parent(&caller.access, parent).await?;
        fixed.push((parent.nested.via.as_str(), parent.id));
    }
    let row = body::validate(&api.model, entity, object, Mode::Create, &fixed)?;
    let rows = &api.entities[ei].rows;
    let mut stored = rows
        .insert(&caller.access, row)
        .await
        .map_err(Problem::from_write)?;
    // The answer is the new row; nested children it created are read at
    // their own paths (`docs/design/transactions.md`).
    stored.retain(|k, _| entity.field(k).is_some_and(|f| f.is_stored()));
    rows.hide_unseen_references_in(&caller.access, &mut stored)
        .await
        .map_err(Problem::from_read)?;
    let id = stored
        .get("id")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let location = format!("{}/{}", api.collection_url(entity), encode(id));
    let mut resp = json_response(
        StatusCode::CREATED,
        media,
        &written(caller, entity, &stored, &hidden),
    )?;
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

async fn write_existing(
    api: &Api,
    caller: &Caller,
    rows: &EntityStore,
    id: &str,
    headers: &HeaderMap,
    body: Body,
    mode: Mode,
) -> Result<Response, Problem> {
    let entity = rows.def();
    let media = negotiate(headers)?;
    let accepted = if mode == Mode::Patch {
        PATCH_TYPES
    } else {
        WRITE_TYPES
    };
    let object = body::read_object(headers, body, api.max_body_bytes, accepted).await?;
    let hidden = caller.hidden(&api.model, entity);
    for name in object.keys() {
        caller.use_field(&api.model, entity, &hidden, name)?;
    }
    let row = body::validate(&api.model, entity, object, mode, &[("id", id)])?;
    let result = if mode == Mode::Patch {
        rows.update(&caller.access, id, row).await
    } else {
        rows.replace(&caller.access, id, row).await
    };
    let mut stored = result.map_err(|e| match e {
        gatehouse_store::StoreError::NotFound => {
            Problem::not_found(format!("there is no {} with id `{id}`", entity.name))
        }
        other => Problem::from_write(other),
    })?;
    rows.hide_unseen_references_in(&caller.access, &mut stored)
        .await
        .map_err(Problem::from_read)?;
    json_response(
        StatusCode::OK,
        media,
        &written(caller, entity, &stored, &hidden),
    )
}

/// The body answering a write: the stored row as the caller may read it,
/// or only its id when the caller may write the entity but not read it.
fn written<'a>(
    caller: &Caller,
    entity: &'a Entity,
    stored: &'a Row,
    hidden: &'a [&'a str],
) -> Ordered<'a> {
    Ordered {
        entity,
        row: stored,
        hidden,
        id_only: !caller.may(entity.read_scope(), true),
    }
}

async fn delete(
    caller: &Caller,
    rows: &EntityStore,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, Problem> {
    let entity = rows.def();
    negotiate(headers)?;
    match rows.delete(&caller.access, id).await {
        Ok(Some(_)) => Ok(StatusCode::NO_CONTENT.into_response()),
        Ok(None) => Err(Problem::not_found(format!(
            "there is no {} with id `{id}`",
            entity.name
        ))),
        Err(e) => Err(Problem::from_write(e)),
    }
}
