//! Schemas the tests load.

use std::path::PathBuf;
use std::sync::Arc;

use gatehouse_schema::{Model, Source, load_sources};

/// The example service's schema files (`examples/library/schema`), as
/// (file name, text), compiled in so a test needs no working directory.
pub const EXAMPLE_SCHEMA: &[(&str, &str)] = &[
    (
        "types.graphql",
        include_str!("../../../examples/library/schema/types.graphql"),
    ),
    (
        "connections.graphql",
        include_str!("../../../examples/library/schema/connections.graphql"),
    ),
    (
        "reviews.graphql",
        include_str!("../../../examples/library/schema/reviews.graphql"),
    ),
    (
        "inputs.graphql",
        include_str!("../../../examples/library/schema/inputs.graphql"),
    ),
    (
        "private.graphql",
        include_str!("../../../examples/library/schema/private.graphql"),
    ),
    (
        "groups.graphql",
        include_str!("../../../examples/library/schema/groups.graphql"),
    ),
    (
        "accounts.graphql",
        include_str!("../../../examples/library/schema/accounts.graphql"),
    ),
    (
        "root.graphql",
        include_str!("../../../examples/library/schema/root.graphql"),
    ),
];

/// [`EXAMPLE_SCHEMA`] as loader sources.
pub fn example_sources() -> Vec<Source> {
    EXAMPLE_SCHEMA
        .iter()
        .map(|(path, text)| Source {
            path: path.to_string(),
            text: text.to_string(),
        })
        .collect()
}

/// The Model of the example schema.
pub fn example_model() -> Arc<Model> {
    Arc::new(load_sources(&example_sources()).unwrap())
}

/// The Model of one SDL text; panics with the diagnostics when it does not
/// load.
pub fn model(sdl: &str) -> Arc<Model> {
    let sources = [Source {
        path: "test.graphql".into(),
        text: sdl.into(),
    }];
    match load_sources(&sources) {
        Ok(m) => Arc::new(m),
        Err(d) => panic!("test schema does not load: {d:?}"),
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}
