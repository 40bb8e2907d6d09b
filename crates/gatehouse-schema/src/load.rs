//! Reading schema files, parsing them, and the rules that need the per-file
//! AST (root types whole in one file, unsupported kinds of definitions).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use apollo_compiler::Schema;
use apollo_compiler::ast::{Definition, Document};
use apollo_compiler::parser::{Parser, SourceMap, SourceSpan};
use apollo_compiler::validation::DiagnosticList;

use crate::diag::{Diagnostic, Diagnostics, Severity};
use crate::model::Scalar;

/// One schema source: a path for diagnostics and its text.
#[derive(Debug, Clone)]
pub struct Source {
    /// Path shown in diagnostics.
    pub path: String,
    /// SDL text.
    pub text: String,
}

/// Name under which the built-in declarations appear in diagnostics.
pub const PRELUDE_PATH: &str = "<gatehouse built-ins>";

/// Name of the source holding the root types generated for a schema that
/// declares none (a diagnostic there is a bug of the generator).
pub const GENERATED_ROOTS_PATH: &str = "<generated root types>";

/// Whether any source defines or extends `Query`, `Mutation` or
/// `Subscription`: a schema that does not is types only, and gets them
/// generated. A source that does not parse counts as it parses so far.
pub(crate) fn declares_root(sources: &[Source]) -> bool {
    sources.iter().any(|source| {
        let doc = match Parser::new().parse_ast(source.text.as_str(), &source.path) {
            Ok(doc) => doc,
            Err(with_errors) => with_errors.partial,
        };
        doc.definitions.iter().any(|def| match def {
            Definition::ObjectTypeDefinition(t) => ROOTS.contains(&t.name.as_str()),
            Definition::ObjectTypeExtension(t) => ROOTS.contains(&t.name.as_str()),
            Definition::SchemaDefinition(_) | Definition::SchemaExtension(_) => true,
            _ => false,
        })
    })
}

/// Declarations every schema gets without writing them.
const PRELUDE_DIRECTIVES: &[(&str, &str)] = &[
    (
        "unique",
        "\"On a field: its values are unique across the collection. On a type, with `fields`: the combination of those fields' values is unique (repeatable, one key each).\"\ndirective @unique(fields: [String!]) repeatable on FIELD_DEFINITION | OBJECT",
    ),
    (
        "index",
        "\"Ask for an index on this field.\"\ndirective @index on FIELD_DEFINITION",
    ),
    (
        "relation",
        "\"On a to-many field, `field` names the to-one field of the listed type it is the inverse of, and `through` names the join type of a many-to-many relation (then `field` names the join type's to-one field that points back here); on a to-one field, `onDelete` says what deleting the referenced row does.\"\ndirective @relation(field: String, onDelete: OnDelete, through: String) on FIELD_DEFINITION\n\"What deleting a referenced row does to the rows that reference it.\"\nenum OnDelete { RESTRICT CASCADE SET_NULL }",
    ),
    (
        "rest",
        "\"Overrides the REST collection path segment of this type.\"\ndirective @rest(path: String!) on OBJECT",
    ),
    (
        "createdAt",
        "\"The server sets this `DateTime` when the row is created; it is read-only.\"\ndirective @createdAt on FIELD_DEFINITION",
    ),
    (
        "updatedAt",
        "\"The server sets this `DateTime` whenever the row is written; it is read-only.\"\ndirective @updatedAt on FIELD_DEFINITION",
    ),
    (
        "constraint",
        "\"What a value written to this field must also be: numbers within `min`..`max`, text of `minLength`..`maxLength` characters matching `pattern` (the whole value) and of a `format` (`email`, `uri`). Checked on every create and update.\"\ndirective @constraint(min: Float, max: Float, minLength: Int, maxLength: Int, pattern: String, format: String) on FIELD_DEFINITION",
    ),
    (
        "default",
        "\"What a create that leaves this field out stores: a literal of its type, or `\\\"now\\\"` on a `DateTime`.\"\ndirective @default(value: _DefaultValue!) on FIELD_DEFINITION",
    ),
    (
        "account",
        "\"The rows of this type are the accounts that sign in: `sub` is the row's `id`; fields named `username`, `email`, `emailVerified`, `disabled` and `displayName` have their meaning for signing in.\"\ndirective @account on OBJECT",
    ),
    (
        "claim",
        "\"On a field of the `@account` type: access and ID tokens carry its value as the claim `name` (the field's name by default).\"\ndirective @claim(name: String) on FIELD_DEFINITION",
    ),
    (
        "renamed",
        "\"This field or type was called `from` before: the migration renames its column or table, keeping the data, instead of dropping it and adding another.\"\ndirective @renamed(from: String!) on OBJECT | FIELD_DEFINITION",
    ),
    (
        "auth",
        "\"Scopes required: read/write on a type, scope on a root field.\"\ndirective @auth(read: String, write: String, scope: String) on OBJECT | FIELD_DEFINITION",
    ),
    (
        "policy",
        "\"Which rows each action may touch: filters in the language of `where` inputs, with `$claim` operands.\"\ndirective @policy(read: _PolicyRule, create: _PolicyRule, update: _PolicyRule, delete: _PolicyRule, write: _PolicyRule, all: _PolicyRule, bypass: String) on OBJECT",
    ),
];

/// The declarations of gatehouse's built-in directives (`@unique`, `@index`,
/// `@relation`, `@rest`, `@auth`), as SDL, for the served schema document.
/// `@renamed` is left out: it tells the migration what a column or table was
/// called before, which is no part of the API.
/// `@policy` is left out: its rules say which rows a caller gets, which is
/// not part of the API's types, and its argument type (`_PolicyRule`) is no
/// type of the API either (introspection does not list it).
pub fn directive_declarations() -> String {
    let mut out = String::new();
    for (name, decl) in PRELUDE_DIRECTIVES {
        if *name == "policy" || *name == "renamed" || *name == "default" {
            continue;
        }
        out.push_str(decl);
        out.push_str("\n\n");
    }
    out
}

/// The type of `@policy`'s rules: an object literal in the language of
/// `where` inputs, checked by the binder, not by GraphQL validation.
const PRELUDE_POLICY_RULE: &str = "\"A row filter of `@policy`.\"\nscalar _PolicyRule";

/// The type of `@default`'s value: a literal of the field's type, checked
/// by the binder.
const PRELUDE_DEFAULT_VALUE: &str =
    "\"The literal of `@default`: a value of the field's type.\"\nscalar _DefaultValue";

/// The built-in declaration of a scalar gatehouse declares itself.
fn custom_scalar_sdl(s: Scalar) -> Option<String> {
    let (description, url) = s.custom_declaration()?;
    Some(format!(
        "\"{description}\"\nscalar {} @specifiedBy(url: \"{url}\")",
        s.graphql_name()
    ))
}

/// Collects the `.graphql` / `.graphqls` files under `paths` (files are taken
/// as named, directories are walked recursively in name order).
pub fn read_sources(paths: &[PathBuf]) -> (Vec<Source>, Diagnostics) {
    let mut sources = Vec::new();
    let mut diags = Diagnostics::default();
    for path in paths {
        if path.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found, &mut diags);
            if found.is_empty() {
                diags.0.push(file_error(
                    path,
                    "no .graphql or .graphqls files in this directory",
                ));
            }
            found.sort();
            for file in found {
                read_one(&file, &mut sources, &mut diags);
            }
        } else {
            read_one(path, &mut sources, &mut diags);
        }
    }
    (sources, diags)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>, diags: &mut Diagnostics) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            diags
                .0
                .push(file_error(dir, &format!("cannot read directory: {e}")));
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, found, diags);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("graphql" | "graphqls")
        ) {
            found.push(path);
        }
    }
}

fn read_one(path: &Path, sources: &mut Vec<Source>, diags: &mut Diagnostics) {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => sources.push(Source {
                path: path.display().to_string(),
                text,
            }),
            Err(_) => diags.0.push(file_error(path, "file is not valid UTF-8")),
        },
        Err(e) => diags
            .0
            .push(file_error(path, &format!("cannot read file: {e}"))),
    }
}

fn file_error(path: &Path, message: &str) -> Diagnostic {
    Diagnostic {
        file: path.display().to_string(),
        line: 0,
        column: 0,
        severity: Severity::Error,
        message: message.to_string(),
        hint: None,
    }
}

/// Options that relax the loader for tooling.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Whether a schema without `type Query` is an error (off for `schema scaffold`).
    pub require_query: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            require_query: true,
        }
    }
}

/// Parses every source, checks the per-file rules, and builds one apollo
/// schema (possibly partial when there were errors).
/// `sources` with every argument of every object type's fields left out,
/// printed again; `None` when one does not parse. What the roots of a
/// types-only schema are generated from when its fields name generated
/// inputs.
pub(crate) fn without_field_arguments(sources: &[Source]) -> Option<Vec<Source>> {
    sources
        .iter()
        .map(|source| {
            let mut doc = Parser::new()
                .parse_ast(source.text.as_str(), &source.path)
                .ok()?;
            for def in &mut doc.definitions {
                let fields = match def {
                    Definition::ObjectTypeDefinition(t) => &mut t.make_mut().fields,
                    Definition::ObjectTypeExtension(t) => &mut t.make_mut().fields,
                    _ => continue,
                };
                for field in fields {
                    field.make_mut().arguments.clear();
                }
            }
            Some(Source {
                path: source.path.clone(),
                text: doc.to_string(),
            })
        })
        .collect()
}

/// In a schema whose roots are generated (types only), a to-many field
/// declared without arguments takes those of the generated root list of
/// its type: `first`, `offset`, `where` and `orderBy`
/// (`Project.tasks(first: Int, offset: Int, where: TaskWhere, orderBy:
/// [TaskOrderBy!])`), so a nested list pages, filters and sorts as the
/// root list does. A field declared with arguments keeps its own.
pub(crate) fn add_nested_list_arguments(schema: &mut Schema) {
    use apollo_compiler::ast::{InputValueDefinition, Type};
    use apollo_compiler::schema::ExtendedType;
    use apollo_compiler::{Name, Node};

    let is = |name: &str, want: fn(&ExtendedType) -> bool| schema.types.get(name).is_some_and(want);
    let mut wanted: Vec<(Name, Name, String)> = Vec::new();
    for (type_name, t) in &schema.types {
        let ExtendedType::Object(obj) = t else {
            continue;
        };
        // Stored types only (they have an id): not roots, connections,
        // edges or bulk results.
        if t.is_built_in()
            || ["Query", "Mutation", "Subscription"].contains(&type_name.as_str())
            || !obj.fields.contains_key("id")
        {
            continue;
        }
        for (field_name, field) in &obj.fields {
            let target = field.ty.inner_named_type();
            if !field.arguments.is_empty()
                || !field.ty.is_list()
                || !is(target, |t| matches!(t, ExtendedType::Object(_)))
                || !is(&format!("{target}Where"), ExtendedType::is_input_object)
                || !is(&format!("{target}OrderBy"), ExtendedType::is_enum)
            {
                continue;
            }
            wanted.push((type_name.clone(), field_name.clone(), target.to_string()));
        }
    }
    let arg = |name: &str, ty: Type| -> Option<Node<InputValueDefinition>> {
        Some(Node::new(InputValueDefinition {
            description: None,
            name: Name::new(name).ok()?,
            ty: Node::new(ty),
            default_value: None,
            directives: Default::default(),
        }))
    };
    let named = |n: &str| Name::new(n).ok().map(Type::Named);
    for (type_name, field_name, target) in wanted {
        let (Some(int), Some(filter), Some(order)) = (
            named("Int"),
            named(&format!("{target}Where")),
            named(&format!("{target}OrderBy")),
        ) else {
            continue;
        };
        let args: Vec<_> = [
            arg("first", int.clone()),
            arg("offset", int),
            arg("where", filter),
            arg("orderBy", Type::List(Box::new(order.non_null()))),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(ExtendedType::Object(obj)) = schema.types.get_mut(&type_name)
            && let Some(field) = obj.make_mut().fields.get_mut(&field_name)
        {
            field.make_mut().arguments = args;
        }
    }
}

pub(crate) fn parse_and_build(
    sources: &[Source],
    opts: LoadOptions,
    diags: &mut Diagnostics,
) -> Schema {
    let mut docs = Vec::new();
    for source in sources {
        let doc = match Parser::new().parse_ast(source.text.as_str(), &source.path) {
            Ok(doc) => doc,
            Err(with_errors) => {
                push_apollo(&with_errors.errors, diags);
                with_errors.partial
            }
        };
        docs.push(doc);
    }

    let declared = file_rules(&docs, opts, diags);

    let mut prelude = String::new();
    for sdl in Scalar::ALL
        .into_iter()
        .filter(|s| !declared.scalars.contains(s))
        .filter_map(custom_scalar_sdl)
    {
        prelude.push_str(&sdl);
        prelude.push('\n');
    }
    if !declared.policy_rule {
        prelude.push_str(PRELUDE_POLICY_RULE);
        prelude.push('\n');
    }
    if !declared.default_value {
        prelude.push_str(PRELUDE_DEFAULT_VALUE);
        prelude.push('\n');
    }
    if declared.page_info_used && !declared.page_info {
        prelude.push_str(&page_info_sdl());
        prelude.push('\n');
    }
    for (name, decl) in PRELUDE_DIRECTIVES {
        if !declared.directives.iter().any(|d| d == name) {
            prelude.push_str(decl);
            prelude.push('\n');
        }
    }
    let mut builder = Schema::builder();
    if !prelude.is_empty() {
        match Parser::new().parse_ast(prelude, PRELUDE_PATH) {
            Ok(doc) => builder = builder.add_ast(&doc),
            Err(with_errors) => push_apollo(&with_errors.errors, diags),
        }
    }
    for doc in &docs {
        builder = builder.add_ast(doc);
    }
    let schema = match builder.build() {
        Ok(schema) => schema,
        Err(with_errors) => {
            push_apollo(&with_errors.errors, diags);
            with_errors.partial
        }
    };
    // Validation reports undefined types and bad directive uses; it runs on a
    // partial schema too, so every problem is reported in one run.
    match schema.clone().validate() {
        Ok(_) => {}
        Err(with_errors) => push_apollo(&with_errors.errors, diags),
    }
    schema
}

/// What the user declared of the built-ins.
struct Declared {
    /// Scalars gatehouse declares that the schema declares too (a printed
    /// schema holds them).
    scalars: Vec<Scalar>,
    /// `scalar _PolicyRule` (a printed schema holds it).
    policy_rule: bool,
    /// `scalar _DefaultValue` (likewise).
    default_value: bool,
    /// `type PageInfo` is declared.
    page_info: bool,
    /// Some object type's field returns `PageInfo`: a connection wants it,
    /// and it is supplied when undeclared.
    page_info_used: bool,
    directives: Vec<String>,
}

/// The Relay `PageInfo` type, supplied when a connection uses it and the
/// schema does not declare it.
fn page_info_sdl() -> String {
    let mut sdl = String::from(
        "\"Where a page of a connection lies in the whole list (Relay cursor connections).\"\ntype PageInfo {\n",
    );
    for (name, ty) in crate::model::PAGE_INFO_FIELDS {
        sdl.push_str(&format!("  {name}: {ty}\n"));
    }
    sdl.push('}');
    sdl
}

const ROOTS: [&str; 3] = ["Query", "Mutation", "Subscription"];

fn file_rules(docs: &[Document], opts: LoadOptions, diags: &mut Diagnostics) -> Declared {
    let mut declared = Declared {
        scalars: Vec::new(),
        policy_rule: false,
        default_value: false,
        page_info: false,
        page_info_used: false,
        directives: Vec::new(),
    };
    // Where each root type is defined: (file, location).
    let mut root_defs: HashMap<&str, Vec<(String, Option<SourceSpan>)>> = HashMap::new();
    let mut root_exts: Vec<(&str, String, Option<SourceSpan>)> = Vec::new();

    for doc in docs {
        let file = doc
            .sources
            .values()
            .next()
            .map(|s| s.path().display().to_string());
        let file = file.unwrap_or_default();
        let here =
            |d: &mut Diagnostics, loc: Option<SourceSpan>, msg: String, hint: Option<&str>| {
                d.0.push(at(&doc.sources, loc, msg, hint.map(str::to_string)));
            };
        for def in &doc.definitions {
            let fields = match def {
                Definition::ObjectTypeDefinition(t) => {
                    declared.page_info |= t.name == crate::model::PAGE_INFO;
                    t.fields.as_slice()
                }
                Definition::ObjectTypeExtension(t) => t.fields.as_slice(),
                _ => &[],
            };
            declared.page_info_used |= fields
                .iter()
                .any(|f| f.ty.inner_named_type() == crate::model::PAGE_INFO);
            match def {
                Definition::ObjectTypeDefinition(t) if ROOTS.contains(&t.name.as_str()) => {
                    let name = ROOTS.iter().copied().find(|r| *r == t.name.as_str());
                    if let Some(name) = name {
                        root_defs
                            .entry(name)
                            .or_default()
                            .push((file.clone(), t.location()));
                    }
                }
                Definition::ObjectTypeExtension(t) if ROOTS.contains(&t.name.as_str()) => {
                    if let Some(name) = ROOTS.iter().copied().find(|r| *r == t.name.as_str()) {
                        root_exts.push((name, file.clone(), t.location()));
                    }
                }
                Definition::ScalarTypeDefinition(s) => {
                    if let Some(custom) = Scalar::from_graphql(&s.name).filter(|c| c.is_custom()) {
                        declared.scalars.push(custom);
                        // A printed schema declares it with `@specifiedBy`;
                        // a schema written for another tool usually does not.
                        if custom != Scalar::Date && s.directives.get("specifiedBy").is_none() {
                            let mut d = at(
                                &doc.sources,
                                s.location(),
                                format!("`scalar {}` is built in", s.name),
                                Some(format!(
                                    "the declaration can go: {}",
                                    custom.info().declaration.map_or("", |(d, _)| d)
                                )),
                            );
                            d.severity = Severity::Warning;
                            diags.0.push(d);
                        }
                    } else if s.name == "_PolicyRule" {
                        declared.policy_rule = true;
                    } else if s.name == "_DefaultValue" {
                        declared.default_value = true;
                    } else {
                        here(
                            diags,
                            s.location(),
                            format!("custom scalar `{}` is not supported", s.name),
                            Some(&foreign_hint(&format!("`{}`", s.name)).map_or_else(
                                || {
                                    format!(
                                        "use one of {}, or an enum",
                                        Scalar::ALL.map(Scalar::graphql_name).join(", ")
                                    )
                                },
                                str::to_string,
                            )),
                        );
                    }
                }
                Definition::ScalarTypeExtension(s) => here(
                    diags,
                    s.location(),
                    format!("extending scalar `{}` is not supported", s.name),
                    None,
                ),
                Definition::InterfaceTypeDefinition(i) => here(
                    diags,
                    i.location(),
                    format!("interface `{}` is not supported", i.name),
                    Some("declare the shared fields on each object type"),
                ),
                Definition::InterfaceTypeExtension(i) => here(
                    diags,
                    i.location(),
                    format!("interface `{}` is not supported", i.name),
                    None,
                ),
                Definition::UnionTypeDefinition(u) => here(
                    diags,
                    u.location(),
                    format!("union `{}` is not supported", u.name),
                    Some("use separate fields, one per member type"),
                ),
                Definition::UnionTypeExtension(u) => here(
                    diags,
                    u.location(),
                    format!("union `{}` is not supported", u.name),
                    None,
                ),
                Definition::SchemaDefinition(s) => here(
                    diags,
                    s.location(),
                    "a `schema { ... }` definition is not supported".to_string(),
                    Some("name the root types Query, Mutation and Subscription"),
                ),
                Definition::SchemaExtension(s) => here(
                    diags,
                    s.location(),
                    "`extend schema` is not supported".to_string(),
                    Some("name the root types Query, Mutation and Subscription"),
                ),
                Definition::DirectiveDefinition(d) => {
                    declared.directives.push(d.name.to_string());
                }
                Definition::ObjectTypeDefinition(t) if !t.implements_interfaces.is_empty() => {
                    here(
                        diags,
                        t.location(),
                        format!(
                            "`{}` implements an interface; interfaces are not supported",
                            t.name
                        ),
                        None,
                    );
                }
                _ => {}
            }
        }
    }

    let any_root = !root_defs.is_empty() || !root_exts.is_empty();
    for root in ROOTS {
        let defs = root_defs.get(root).map(Vec::as_slice).unwrap_or(&[]);
        if defs.is_empty() && root == "Query" && opts.require_query {
            diags.0.push(Diagnostic {
                file: docs
                    .first()
                    .and_then(|d| d.sources.values().next())
                    .map(|s| s.path().display().to_string())
                    .unwrap_or_else(|| "<schema>".to_string()),
                line: 0,
                column: 0,
                severity: Severity::Error,
                message: if any_root {
                    "the schema declares other root types but no `type Query`".to_string()
                } else {
                    "the schema has no `type Query`, and no stored types to generate one for".to_string()
                },
                hint: Some(if any_root {
                    "declare exactly one `type Query` (`gatehouse schema scaffold` prints one for your types), or declare no root type at all and all three are generated"
                        .to_string()
                } else {
                    "declare object types with `id: ID!`: a schema of types only gets its Query, Mutation and Subscription generated".to_string()
                }),
            });
        }
        if let Some((first_file, _)) = defs.first() {
            for (file, loc) in defs.iter().skip(1) {
                diags.0.push(located(
                    file,
                    loc,
                    docs,
                    format!("`type {root}` is defined more than once; the first definition is in {first_file}"),
                    Some(format!("a schema has exactly one `type {root}`")),
                ));
            }
            for (name, file, loc) in &root_exts {
                if *name == root && file != first_file {
                    diags.0.push(located(
                        file,
                        loc,
                        docs,
                        format!(
                            "`extend type {root}` in {file}: the root type `{root}` is defined in {first_file} and must be defined whole in that one file"
                        ),
                        Some(format!("move these fields into `type {root}` in {first_file}")),
                    ));
                }
            }
        }
    }
    declared
}

fn located(
    file: &str,
    loc: &Option<SourceSpan>,
    docs: &[Document],
    message: String,
    hint: Option<String>,
) -> Diagnostic {
    let sources = docs
        .iter()
        .find(|d| {
            d.sources
                .values()
                .any(|s| s.path().display().to_string() == file)
        })
        .map(|d| &d.sources);
    match sources {
        Some(sources) => at(sources, *loc, message, hint),
        None => Diagnostic {
            file: file.to_string(),
            line: 0,
            column: 0,
            severity: Severity::Error,
            message,
            hint,
        },
    }
}

/// An error at a source span.
pub(crate) fn at(
    sources: &SourceMap,
    loc: Option<SourceSpan>,
    message: String,
    hint: Option<String>,
) -> Diagnostic {
    let (file, line, column) = position(sources, loc);
    Diagnostic {
        file,
        line,
        column,
        severity: Severity::Error,
        message,
        hint,
    }
}

pub(crate) fn position(sources: &SourceMap, loc: Option<SourceSpan>) -> (String, usize, usize) {
    let Some(loc) = loc else {
        return ("<schema>".to_string(), 0, 0);
    };
    let file = sources
        .get(&loc.file_id())
        .map(|s| s.path().display().to_string())
        .unwrap_or_else(|| "<schema>".to_string());
    match loc.line_column(sources) {
        Some(lc) => (file, lc.line, lc.column),
        None => (file, 0, 0),
    }
}

/// apollo's own wording of a rule gatehouse reports itself, with a hint.
const REPORTED_OURSELVES: &[&str] = &[
    "missing query root operation type",
    "the type `Query` is defined multiple times",
    "the type `Mutation` is defined multiple times",
    "the type `Subscription` is defined multiple times",
];

pub(crate) fn push_apollo(list: &DiagnosticList, diags: &mut Diagnostics) {
    for d in list.iter() {
        let message = d.error.to_string();
        if REPORTED_OURSELVES.iter().any(|m| message.contains(m)) {
            continue;
        }
        let (line, column) = d
            .line_column_range()
            .map(|r| (r.start.line, r.start.column))
            .unwrap_or((0, 0));
        let file = apollo_compiler::diagnostic::ToCliReport::location(d.error)
            .and_then(|loc| d.sources.get(&loc.file_id()))
            .map(|s| s.path().display().to_string())
            .unwrap_or_else(|| "<schema>".to_string());
        diags.0.push(Diagnostic {
            file,
            line,
            column,
            severity: Severity::Error,
            hint: foreign_hint(&message).map(str::to_string),
            message,
        });
    }
}

/// What other tools write and gatehouse says otherwise (Amplify's `@model`
/// and `AWS*` scalars, Dgraph's `@id`, `@search`, `@hasInverse`, the
/// common `@default`): the gatehouse equivalent, for the diagnostic that
/// refuses the foreign idiom. `text` is a message naming it in backticks.
pub(crate) fn foreign_hint(text: &str) -> Option<&'static str> {
    const HINTS: &[(&str, &str)] = &[
        (
            "`@model`",
            "gatehouse stores every object type other than Query, Mutation and Subscription: remove `@model`; a schema without root types gets them generated (what `gatehouse schema scaffold` prints)",
        ),
        (
            "argument `rules` is not supported by `@auth`",
            "gatehouse's `@auth` takes scopes (`@auth(read: \"blog\", write: \"blog\")`) and rows are chosen by `@policy`: for Amplify's `{ allow: owner }` add a field `owner: String` and write `@policy(write: {owner: \"$sub\"})` instead of `@auth(rules: ...)` (add `read:` when only owners may read; `{ allow: public }` reads without a token need `[auth] anonymous_read = true` in the server's configuration)",
        ),
        (
            "`AuthRule`",
            "Amplify's global auth rule has no place here: remove the `AMPLIFY` input; scopes go in `@auth(read:, write:)` and row rules in `@policy`",
        ),
        (
            "`@hasMany`",
            "remove `@hasMany`: a list of a stored type (`posts: [Post]`) already lists the rows whose to-one field points back (`blog: Blog`); `@relation(field:)` names that field where several could match",
        ),
        (
            "`@hasOne`",
            "remove `@hasOne`: a field of a stored type (`profile: Profile`) is a to-one reference stored on this row",
        ),
        (
            "`@belongsTo`",
            "remove `@belongsTo`: a field of a stored type (`blog: Blog`) is already a to-one reference; `@relation(onDelete:)` says what deleting the referenced row does",
        ),
        (
            "`@manyToMany`",
            "declare the join type (`type PostTag { id: ID! post: Post! tag: Tag! }`) and list through it: `tags: [Tag!]! @relation(through: \"PostTag\")`",
        ),
        (
            "`@id`",
            "every type is keyed by `id: ID!`: replace `@id` with `@unique` for another unique field",
        ),
        (
            "`@search`",
            "remove `@search`: filters bind by argument name (`title_contains: String`, `where: BookWhere`), and a schema without root types gets them all; ask for an index with `@index`",
        ),
        (
            "`@hasInverse`",
            "remove `@hasInverse`: a to-many field (`posts: [Post]`) is the inverse of the listed type's one to-one field of this type (`author: Author`); `@relation(field: \"author\")` names it where several could match",
        ),
        (
            "`AWSDateTime`",
            "use `DateTime` (RFC 3339), with `@createdAt` / `@updatedAt` for times the server sets",
        ),
        (
            "`AWSTimestamp`",
            "use `DateTime` (RFC 3339), or `Int` for seconds since the epoch",
        ),
        ("`AWSJSON`", "use `JSON`"),
        (
            "`AWSEmail`",
            "use `String` (gatehouse does not check e-mail addresses)",
        ),
    ];
    HINTS
        .iter()
        .find(|(idiom, _)| text.contains(idiom))
        .map(|(_, hint)| *hint)
}
