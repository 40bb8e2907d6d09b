//! gatehouse-schema: GraphQL SDL files in, the typed [`Model`] out.
//!
//! The loader parses with apollo-compiler, enforces the schema rules,
//! and binds every root field by convention. Every problem is reported in one
//! run as a [`Diagnostic`] (`path:line:col: error: message`). Nothing here does
//! IO other than reading the schema files.
//!
//! - `load.rs`: files, parsing, the rules that need the per-file AST, the
//!   built-in declarations.
//! - `bind/`: entities, relations, policies and `@auth`, the root-field
//!   conventions and their arguments, one file each.
//! - `model.rs`: the Model and the rules derived from it (operators per
//!   field, orderable fields, input types, scopes), `value.rs`: the one value
//!   checker, `policy.rs`: bound `@policy` rules and the `AccessContext`
//!   every store call takes, `scaffold.rs`: what the conventions would bind.

mod bind;
mod diag;
mod load;
pub mod model;
pub mod policy;
mod scaffold;
mod scalar;
mod value;

use std::path::PathBuf;

pub use bind::{RESERVED_TABLE_PREFIX, bind_filter, default_rest_path, valid_scope};
pub use diag::{Diagnostic, Diagnostics, Severity};
pub use load::{GENERATED_ROOTS_PATH, LoadOptions, PRELUDE_PATH, Source, directive_declarations};
pub use model::*;
pub use policy::{AccessContext, Action, Operand, Policy, Rule};
pub use scaffold::{is_unedited_scaffold, scaffold, scaffold_file};
pub use value::{ValueError, json_kind};

/// Reads and loads the schema files and directories at `paths`.
pub fn load_paths(paths: &[PathBuf]) -> Result<Model, Diagnostics> {
    load_paths_with(paths, LoadOptions::default())
}

/// [`load_paths`] with options.
pub fn load_paths_with(paths: &[PathBuf], opts: LoadOptions) -> Result<Model, Diagnostics> {
    let (sources, mut diags) = load::read_sources(paths);
    if diags.has_errors() && sources.is_empty() {
        diags.sort();
        return Err(diags);
    }
    match load_sources_with(&sources, opts) {
        Ok(model) if !diags.has_errors() => Ok(model),
        Ok(_) => {
            diags.sort();
            Err(diags)
        }
        Err(more) => {
            diags.0.extend(more.0);
            diags.sort();
            Err(diags)
        }
    }
}

/// Loads schema sources already in memory.
pub fn load_sources(sources: &[Source]) -> Result<Model, Diagnostics> {
    load_sources_with(sources, LoadOptions::default())
}

/// [`load_sources`] with options.
///
/// A schema that declares no root type at all (types only) gets the root
/// types [`scaffold`] prints for its types, generated from them on every
/// load (so they follow the types) and shown by `schema print` like
/// written ones; they are one more source, [`GENERATED_ROOTS_PATH`].
pub fn load_sources_with(sources: &[Source], opts: LoadOptions) -> Result<Model, Diagnostics> {
    if opts.require_query && !sources.is_empty() && !load::declares_root(sources) {
        let types_only = LoadOptions {
            require_query: false,
        };
        // The types may name inputs the roots generate (`tasks(where:
        // TaskWhere)`): then the types are read without field arguments to
        // generate them, and the whole schema is checked with them below.
        let types = match load_sources_with(sources, types_only) {
            Ok(types) => types,
            Err(diags) => match load::without_field_arguments(sources)
                .and_then(|bare| load_sources_with(&bare, types_only).ok())
            {
                Some(types) => types,
                None => return Err(diags),
            },
        };
        if !types.entities.is_empty() {
            let mut all = sources.to_vec();
            all.push(Source {
                path: GENERATED_ROOTS_PATH.to_string(),
                text: scaffold(&types),
            });
            return load_one(&all, opts);
        }
    }
    load_one(sources, opts)
}

/// Loads `sources` as they are (with the nested list arguments of
/// generated roots, [`load::add_nested_list_arguments`]).
fn load_one(sources: &[Source], opts: LoadOptions) -> Result<Model, Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut schema = load::parse_and_build(sources, opts, &mut diags);
    if sources.iter().any(|s| s.path == GENERATED_ROOTS_PATH) {
        load::add_nested_list_arguments(&mut schema);
    }
    let mut model = bind::Binder::new(&schema, &mut diags).bind();
    diags.sort();
    if diags.has_errors() {
        Err(diags)
    } else {
        model.warnings = diags.0;
        Ok(model)
    }
}
