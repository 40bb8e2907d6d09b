//! The REST route table: every path the API serves, spelled once. The
//! parse of a request path (`handlers::route`), the route labels of logs
//! and metrics, the URLs of `Location` and `Link` headers and the paths
//! of the OpenAPI document all take their spelling from here, so that no
//! two of them can disagree on a version, a collection or a nested
//! segment.
//!
//! | route | template |
//! |---|---|
//! | a collection | `/v1/<rest_path>` |
//! | one row | `/v1/<rest_path>/{id}` |
//! | a row's children | `/v1/<rest_path>/{<parent>}/<rest_segment>` |
//! | the OpenAPI document | `/v1/openapi.json` |
//!
//! `rest_path` and `rest_segment` are decided by the Model
//! (`gatehouse-schema`: the type name in plural kebab-case, the to-many
//! field's name in kebab-case).

use gatehouse_schema::Entity;

/// The version segment served, the first of every path.
pub(crate) const VERSION: &str = "v1";

/// The last segment of the OpenAPI document's path.
pub(crate) const DOCUMENT: &str = "openapi.json";

/// The path parameter of one row's id in labels and the OpenAPI
/// document.
pub(crate) const ID: &str = "{id}";

/// `/v1/<parts>...`.
pub(crate) fn path(parts: &[&str]) -> String {
    let mut out = String::with_capacity(32);
    for part in std::iter::once(&VERSION).chain(parts) {
        out.push('/');
        out.push_str(part);
    }
    out
}

/// `/v1/books`: `entity`'s collection.
pub(crate) fn collection(entity: &Entity) -> String {
    path(&[&entity.rest_path])
}

/// `/v1/books/{param}`: one row of `entity`'s collection.
pub(crate) fn item(entity: &Entity, param: &str) -> String {
    path(&[&entity.rest_path, param])
}

/// `/v1/authors/{param}/books`: the children of one `parent` row through
/// the to-many field whose segment is `segment`.
pub(crate) fn nested(parent: &Entity, param: &str, segment: &str) -> String {
    path(&[&parent.rest_path, param, segment])
}

/// `/v1/openapi.json`.
pub(crate) fn document() -> String {
    path(&[DOCUMENT])
}
