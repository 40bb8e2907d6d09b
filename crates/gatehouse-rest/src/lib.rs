//! gatehouse-rest: the versioned REST API (`/v1`) over the store, and its
//! OpenAPI 3.1 document, both derived from the [`gatehouse_schema::Model`]
//! once at start-up.
//!
//! For every entity, `/v1/<rest_path>` (list, create), `/v1/<rest_path>/{id}`
//! (read, replace, merge-patch, delete) and, for each to-many relation,
//! `/v1/<rest_path>/{id}/<rest_segment>` (list and create children). Bodies
//! use the schema's field names; a to-one relation is the referenced id.
//! Authorization is decided after routing, on the resolved collection and
//! relation (`access.rs`), from the request's `gatehouse_auth::Principal`.
//! Every error is an RFC 9457 `application/problem+json` body; client
//! mistakes are 4xx, never 5xx. Writes go through the [`Store`], which emits
//! the same change events as GraphQL writes.
//!
//! [`router`] answers paths relative to the base path: the caller nests it
//! under `base_path` (or merges it at the root when the base path is empty).

mod access;
mod body;
mod handlers;
mod negotiate;
mod openapi;
mod params;
mod problem;
mod routes;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::routing::any;
use gatehouse_schema::{FieldKind, Model};
use gatehouse_store::{EntityStore, PreparedList, Store};
use gatehouse_telemetry::RouteLabel;

use crate::params::{FilterParam, Paging};

/// The version segments this crate serves.
pub const SUPPORTED_VERSIONS: &[&str] = &[routes::VERSION];

/// What the REST API needs from the rest of the service.
#[derive(Debug, Clone)]
pub struct RestState {
    /// Where rows live; its Model (collections, fields, relations) is the API's.
    pub store: Store,
    /// Rows per page when a list request gives no `per_page`.
    pub default_page_size: u32,
    /// Largest `per_page` accepted; more is a 400.
    pub max_page_size: u32,
    /// Largest request body accepted; more is a 413.
    pub max_body_bytes: usize,
    /// The configured base path (`""` or e.g. `/api`), used to build the
    /// path-absolute URLs of `Location` and `Link` headers and the OpenAPI
    /// `servers` entry. The router itself does not add it.
    pub base_path: String,
    /// Whether every request must carry a `gatehouse_auth::Principal` (the
    /// authentication layer adds one). Off only for trusted in-process
    /// callers that mount the router without that layer.
    pub auth_required: bool,
}

/// Everything resolved at start-up, shared by every request.
#[derive(Debug)]
struct Api {
    model: Arc<Model>,
    paging: Paging,
    max_body_bytes: usize,
    /// Base path without a trailing `/`.
    base_path: String,
    /// [`RestState::auth_required`].
    auth_required: bool,
    /// REST collection segment to entity index.
    collections: HashMap<String, usize>,
    /// Per entity, in Model order.
    entities: Vec<EntityApi>,
    /// The OpenAPI document, serialized once.
    openapi: Bytes,
    /// The route label of the OpenAPI document.
    openapi_label: RouteLabel,
}

/// List statements kept per collection ([`EntityApi::lists`]).
const LIST_STATEMENTS: usize = 64;

/// The REST view of one entity.
#[derive(Debug)]
struct EntityApi {
    /// The entity's rows.
    rows: EntityStore,
    /// Filter parameters by name.
    filters: HashMap<String, FilterParam>,
    /// To-many relations by nested segment.
    nested: HashMap<String, Nested>,
    /// The route labels of the collection and of one item.
    labels: Labels,
    /// List statements by query string, for the collection itself (a
    /// nested collection's statement holds its parent's id): a page asked
    /// for again skips building its SQL, a large share of a small list request.
    /// The SQL is a function of the query string alone; what it reads is
    /// read when it runs.
    lists: quick_cache::sync::Cache<Box<str>, Arc<PreparedList>>,
    /// List requests parsed, by query string (as many as
    /// [`LIST_STATEMENTS`]): a page asked for again is not parsed again.
    parsed: quick_cache::sync::Cache<Box<str>, Arc<params::ParsedList>>,
    /// The collection's path-absolute URL ([`collection_url`]).
    url: String,
    /// Each field's name as a JSON object key (quoted, escaped, then
    /// `:`), in the schema's order: how list pages write their keys.
    keys: Vec<Box<[u8]>>,
}

/// Path-absolute URL of `entity`'s collection under `base_path`.
fn collection_url(base_path: &str, entity: &gatehouse_schema::Entity) -> String {
    format!("{base_path}{}", routes::collection(entity))
}

/// A nested collection: the children of one parent row.
#[derive(Debug, Clone)]
struct Nested {
    /// Index of the child entity.
    child: usize,
    /// The child's to-one field pointing at the parent.
    via: String,
    /// The path segment (`books` in `/v1/authors/{id}/books`).
    segment: String,
    /// Its route label, `/v1/authors/{id}/books`.
    label: RouteLabel,
}

/// The route labels of one collection, made once from schema names: a
/// request is logged and counted under these, never under its raw path
/// (which has as many spellings as percent-encoding allows).
#[derive(Debug, Clone)]
struct Labels {
    /// `/v1/books`.
    collection: RouteLabel,
    /// `/v1/books/{id}`.
    item: RouteLabel,
}

impl Api {
    fn new(state: RestState) -> Api {
        let model = state.store.model().clone();
        let max = u64::from(state.max_page_size.max(1));
        let paging = Paging {
            default: u64::from(state.default_page_size).clamp(1, max),
            max,
        };
        let base_path = state.base_path.trim_end_matches('/').to_string();
        let mut collections = HashMap::new();
        let mut entities = Vec::new();
        for ((i, e), rows) in model
            .entities
            .iter()
            .enumerate()
            .zip(state.store.entities())
        {
            collections.insert(e.rest_path.clone(), i);
            let mut nested = HashMap::new();
            for f in e.to_many_fields() {
                if let FieldKind::ToMany { rest_segment, .. } = &f.kind
                    && let Some(target) = model.relation_of(f).map(|r| r.target)
                    && let Some(via) = model.inverse_of(f).map(|v| &v.name)
                {
                    let child = target.index();
                    nested.insert(
                        rest_segment.clone(),
                        Nested {
                            child,
                            via: via.clone(),
                            segment: rest_segment.clone(),
                            label: RouteLabel(routes::nested(e, routes::ID, rest_segment).into()),
                        },
                    );
                }
            }
            entities.push(EntityApi {
                rows,
                filters: params::filter_params(e).into_iter().collect(),
                nested,
                labels: Labels {
                    collection: RouteLabel(routes::collection(e).into()),
                    item: RouteLabel(routes::item(e, routes::ID).into()),
                },
                lists: quick_cache::sync::Cache::new(LIST_STATEMENTS),
                parsed: quick_cache::sync::Cache::new(LIST_STATEMENTS),
                url: collection_url(&base_path, e),
                keys: e
                    .fields
                    .iter()
                    .map(|f| handlers::object_key(&f.name).into_boxed_slice())
                    .collect(),
            });
        }
        let doc = openapi::document(&model, &base_path, paging);
        let openapi = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        Api {
            model,
            paging,
            max_body_bytes: state.max_body_bytes,
            base_path,
            auth_required: state.auth_required,
            collections,
            entities,
            openapi,
            openapi_label: RouteLabel(routes::document().into()),
        }
    }
}

/// The REST API: `/v1/...` for every collection, `/v1/openapi.json`, and a
/// 404 problem naming the supported versions for any other `/<segment>/...`.
///
/// Paths are relative to the base path: nest the router under
/// [`RestState::base_path`] when it is not empty. Note that the version
/// routes are path parameters (`/{version}/...`), so merged at the root they
/// also answer otherwise unrouted two-segment paths with a 404 problem.
pub fn router(state: RestState) -> Router {
    let api = Arc::new(Api::new(state));
    Router::new()
        .route("/{version}", any(handlers::dispatch))
        .route("/{version}/", any(handlers::dispatch))
        .route("/{version}/{*rest}", any(handlers::dispatch))
        .with_state(api)
}

/// The OpenAPI 3.1 document that [`router`] serves at `/v1/openapi.json`.
pub fn openapi_document(state: &RestState) -> serde_json::Value {
    let max = u64::from(state.max_page_size.max(1));
    let paging = Paging {
        default: u64::from(state.default_page_size).clamp(1, max),
        max,
    };
    openapi::document(
        state.store.model(),
        state.base_path.trim_end_matches('/'),
        paging,
    )
}
