//! Schema compiler tests: diagnostics for invalid schemas, bound Models for
//! valid ones, printing and scaffolding round trips, and fuzzing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod accounts;
mod invalid;
mod join;
mod robustness;
mod rules;
mod valid;

use gatehouse_schema::{Model, Source, load_sources};

/// Loads `files` (path, text) and returns the model or panics with the diagnostics.
pub fn load_ok(files: &[(&str, &str)]) -> Model {
    match load_sources(&sources(files)) {
        Ok(m) => m,
        Err(d) => panic!("expected a valid schema, got:\n{d}"),
    }
}

/// Loads `files` and returns the rendered diagnostics (panics if it loads).
pub fn load_err(files: &[(&str, &str)]) -> String {
    match load_sources(&sources(files)) {
        Ok(_) => panic!("expected diagnostics, the schema loaded"),
        Err(d) => d.to_string(),
    }
}

pub fn sources(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(p, t)| Source {
            path: (*p).to_string(),
            text: (*t).to_string(),
        })
        .collect()
}

/// A small valid base schema to which single mistakes are added.
pub const BASE_TYPES: &str = r#"type Author {
  id: ID!
  name: String!
  books: [Book!]!
}

enum Status { DRAFT PUBLISHED }

type Book {
  id: ID!
  title: String!
  year: Int
  available: Boolean
  status: Status
  tags: [String!]
  author: Author
}
"#;
