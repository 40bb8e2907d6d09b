//! A parsed-document cache that also enforces the size, depth and
//! complexity limits: repeated query texts skip parsing and the limit walks,
//! and a repeated (query, operation name, variables) skips validation too.
//! Validation is a pure function of the fixed schema and those three, so a
//! cached success is exactly what validating again would give; failures are
//! never cached, and a document is cached only once it has passed the
//! limits and validation. The cache is bounded by entries and by an
//! estimate of the bytes its documents hold ([`MAX_CACHE_BYTES`]).
//!
//! The limits are checked here, once per document (the complexity once per
//! set of variables when page sizes come from variables), before
//! async-graphql validates, and the planned executor, which skips
//! validation for new variables, asks [`ParseCache::plan`], which checks the
//! same [`complexity`] for them: both executors see one limit.
//!
//! The depth limit is checked here rather than with async-graphql's
//! `limit_depth` because that one counts introspection too, and the standard
//! introspection query (what GraphiQL and `schema.json` send) is deeper than
//! any sensible data limit. Introspection subtrees (`__schema`, `__type`) are
//! not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextPrepareRequest,
    NextValidation,
};
use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql::{Request, ServerError, ServerResult, ValidationResult, Variables};
use async_graphql_value::Value as InputValue;
use gatehouse_schema::{Binding, Entity, FieldKind, ListBinding, Model, WhereInput};
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use gatehouse_store::Store;

use crate::Fallback;
use crate::args::PageLimits;
use crate::error::Code;
use crate::plan::{Plan, Unsupported};

/// Estimated bytes all cached documents may hold together; the cache drops
/// the least used beyond it.
pub const MAX_CACHE_BYTES: usize = 64 << 20;

/// Estimated bytes one parsed field selection takes (its node, name, alias,
/// arguments and position), for [`MAX_CACHE_BYTES`].
const BYTES_PER_FIELD: usize = 256;

/// Largest refused document parsed a second time to label its metric.
const MAX_REPARSE_BYTES: usize = 16 * 1024;

/// How many validated (operation name, variables) variants one document keeps.
const VARIANTS_PER_DOCUMENT: usize = 8;

/// Variables larger than this (as JSON) are validated every time rather
/// than kept as part of a cache key.
const MAX_VARIANT_KEY: usize = 1024;

/// A cached document and the request variants that passed validation with it.
struct Entry {
    /// Shared, so the response-order pass can read it without parsing again.
    doc: Arc<ExecutableDocument>,
    /// Its share of [`MAX_CACHE_BYTES`].
    weight: usize,
    /// Whether its complexity depends on variables (a page size given by a
    /// variable): then each new set of variables is checked again.
    cost_uses_variables: bool,
    /// Whether its complexity depends on the tables' sizes (it filters):
    /// then every request is checked again.
    cost_uses_rows: bool,
    /// What later requests learn about the document.
    seen: Mutex<Seen>,
}

/// The variants and plans of one cached document.
#[derive(Default)]
struct Seen {
    /// `operation name \0 variables as JSON` -> the validation result.
    validated: Vec<(String, ValidationResult)>,
    /// Operation name -> its plan, or why the planned executor does not
    /// run it.
    plans: Vec<(Option<String>, Compiled)>,
}

/// A compiled plan, or why an operation has none.
type Compiled = Result<Arc<Plan>, Unsupported>;

/// The validation-cache key of a request's operation name and variables;
/// `None` when the variables are too large to be part of a key.
pub(crate) fn variant_key(request: &Request) -> Option<String> {
    let variables = serde_json::to_string(&request.variables).ok()?;
    (variables.len() <= MAX_VARIANT_KEY).then(|| {
        format!(
            "{}\0{variables}",
            request.operation_name.as_deref().unwrap_or("")
        )
    })
}

/// The operation name part of a [`variant_key`] (`""` for none).
fn variant_operation(variant: &str) -> &str {
    variant.split('\0').next().unwrap_or_default()
}

/// The limits a document must pass before it is validated and cached.
#[derive(Clone)]
pub(crate) struct Limits {
    pub model: Arc<Model>,
    /// The tables' sizes filters are weighed by ([`Store::row_estimate`]).
    pub store: Store,
    pub pages: PageLimits,
    /// Deepest selection accepted (`QUERY_TOO_DEEP`).
    pub max_depth: usize,
    /// Highest [`complexity`] accepted (`QUERY_TOO_COMPLEX`).
    pub max_complexity: usize,
    /// Most field selections a document may contain, counted as written
    /// (`QUERY_TOO_COMPLEX`).
    pub max_selections: usize,
}

/// Weighs an entry by its estimated bytes, but at least a `capacity`th of
/// [`MAX_CACHE_BYTES`]: one weight bound then bounds both the bytes and the
/// number of entries.
#[derive(Clone)]
struct Weight {
    floor: u64,
}

impl Weighter<String, Arc<Entry>> for Weight {
    fn weight(&self, _: &String, entry: &Arc<Entry>) -> u64 {
        u64::try_from(entry.weight)
            .unwrap_or(u64::MAX)
            .max(self.floor)
    }
}

/// Keeps the most used parsed documents, keyed by query text.
#[derive(Clone)]
pub struct ParseCache {
    /// Query text -> its document: parsing, the limit walks and validation
    /// are a large part of a small request.
    entries: Arc<Cache<String, Arc<Entry>, Weight>>,
    limits: Arc<Limits>,
}

impl std::fmt::Debug for ParseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseCache").finish_non_exhaustive()
    }
}

impl ParseCache {
    /// A cache of at most `capacity` documents, refusing documents beyond `limits`.
    pub(crate) fn new(capacity: usize, limits: Limits) -> Self {
        let capacity = capacity.max(1);
        let floor = u64::try_from(MAX_CACHE_BYTES / capacity)
            .unwrap_or(1)
            .max(1);
        Self {
            entries: Arc::new(Cache::with_weighter(
                capacity,
                MAX_CACHE_BYTES as u64,
                Weight { floor },
            )),
            limits: Arc::new(limits),
        }
    }

    /// How many documents are cached and their estimated bytes (for tests
    /// and metrics).
    pub fn usage(&self) -> (usize, usize) {
        let bytes = self.entries.iter().map(|(_, e)| e.weight).sum();
        (self.entries.len(), bytes)
    }

    /// The limit error for `doc` with `variables`, if it exceeds one; and
    /// what its complexity depends on.
    fn check(
        &self,
        doc: &ExecutableDocument,
        variables: &Variables,
    ) -> (Option<ServerError>, Cost) {
        let limits = &self.limits;
        let depth = document_depth(doc);
        if depth > limits.max_depth {
            let message = format!(
                "the query is {depth} levels deep; the limit is {}",
                limits.max_depth
            );
            return (
                Some(limit_error(Code::QueryTooDeep, message)),
                Cost::default(),
            );
        }
        let rows = |entity: &str| limits.store.row_estimate(entity);
        let bulk = u64::from(limits.store.max_bulk_rows());
        let cost = complexity(&limits.model, limits.pages, bulk, &rows, doc, variables);
        let error = (cost.value > limits.max_complexity as u64).then(|| {
            limit_error(
                Code::QueryTooComplex,
                format!(
                    "the query is too complex: its complexity is {}, the limit is {} \
                     (each field costs 1, a list field 1 plus its page size times \
                     the cost of its selection, and a filter its terms times the rows \
                     of the table it reads, per {} (case-insensitive terms weigh 10, \
                     _contains, _starts_with and _ends_with 2))",
                    cost.value,
                    limits.max_complexity,
                    gatehouse_schema::TERM_ROWS_PER_POINT,
                ),
            )
        });
        (error, cost)
    }

    /// The kind of operation `query` runs (`"query"`, `"mutation"`,
    /// `"subscription"`), when the document is cached (it is once it parsed
    /// and passed the depth limit); `"unknown"` otherwise. For metrics: it
    /// never parses.
    pub fn operation_kind(&self, query: &str, name: Option<&str>) -> &'static str {
        if let Some(entry) = self.entries.peek(query) {
            return kind_of(&entry.doc, name);
        }
        // Refused documents are not cached: parse again, unless the text
        // is so large that parsing it twice would be the attacker's gain.
        if query.len() > MAX_REPARSE_BYTES {
            return "unknown";
        }
        crate::input::parse(query).map_or("unknown", |doc| kind_of(&doc, name))
    }

    /// Whether `query` (operation `name`) is a subscription: from the cached
    /// document when there is one, else by parsing it (a document that does
    /// not parse is not a subscription).
    pub fn is_subscription(&self, query: &str, name: Option<&str>) -> bool {
        if let Some(entry) = self.entries.peek(query) {
            return kind_of(&entry.doc, name) == "subscription";
        }
        crate::input::parse(query).is_some_and(|doc| kind_of(&doc, name) == "subscription")
    }

    /// The plan of operation `operation_name` of `query`, compiled on first
    /// use, when that operation is one the planned executor runs and has
    /// passed validation with these variables (`variant`, from
    /// [`variant_key`]), or with other variables and the plan `accepts`
    /// these (see [`Plan::accepts`]): a query whose variables change on
    /// every request (an id, a page) is validated by async-graphql once.
    /// Otherwise why not: [`Fallback::Validation`] when async-graphql must
    /// validate the request first (a new document, or variables the plan
    /// cannot vouch for), else why the operation has no plan.
    pub(crate) fn plan(
        &self,
        query: &str,
        operation_name: Option<&str>,
        variant: &str,
        variables: &Variables,
        compile: impl FnOnce(&ExecutableDocument) -> Result<Plan, Unsupported>,
        accepts: impl FnOnce(&Plan) -> bool,
    ) -> Result<Arc<Plan>, Fallback> {
        let entry = self.entries.get(query).ok_or(Fallback::Validation)?;
        let mut seen = entry.seen.lock().map_err(|_| Fallback::Validation)?;
        let validated = seen.validated.iter().any(|(v, _)| v == variant);
        if !validated
            && !seen
                .validated
                .iter()
                .any(|(v, _)| variant_operation(v) == variant_operation(variant))
        {
            return Err(Fallback::Validation);
        }
        let plan = match seen
            .plans
            .iter()
            .find(|(n, _)| n.as_deref() == operation_name)
        {
            Some((_, plan)) => plan.clone(),
            None => {
                let plan = compile(&entry.doc).map(Arc::new);
                if seen.plans.len() >= VARIANTS_PER_DOCUMENT {
                    drop(seen.plans.remove(0));
                }
                seen.plans
                    .push((operation_name.map(str::to_string), plan.clone()));
                plan
            }
        }
        .map_err(Fallback::Unsupported)?;
        // A filtering document's cost follows the tables' sizes: checked
        // on every request. Variables async-graphql has not seen: their
        // values must fit the plan, and the page sizes they give must keep
        // the complexity within the limit (else async-graphql runs the
        // request, and refuses it).
        let recheck = entry.cost_uses_rows || (!validated && entry.cost_uses_variables);
        let within_limits = !recheck || self.check(&entry.doc, variables).0.is_none();
        if within_limits && (validated || accepts(&plan)) {
            Ok(plan)
        } else {
            Err(Fallback::Validation)
        }
    }

    /// The parsed document of `query`: the cached one when there is one
    /// (it is for every request async-graphql has parsed), else parsed now.
    pub(crate) fn document(&self, query: &str) -> Option<Arc<ExecutableDocument>> {
        // Only for executed requests, whose documents have passed the limits.
        if let Some(entry) = self.entries.peek(query) {
            return Some(entry.doc.clone());
        }
        crate::input::parse(query).map(Arc::new)
    }

    /// Whether `query` is cached (for tests and metrics).
    pub fn contains(&self, query: &str) -> bool {
        self.entries.contains_key(query)
    }
}

impl ExtensionFactory for ParseCache {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RequestCache {
            shared: self.clone(),
            key: Mutex::new(None),
            variables: Mutex::new(None),
            pending: Mutex::new(None),
            marked: Mutex::new(None),
        })
    }
}

/// The cache as one request sees it: it remembers the request's query and
/// variant (from `prepare_request`) for the validation step, which is not
/// told them.
struct RequestCache {
    shared: ParseCache,
    /// (query, `operation name \0 variables`) when the variant is cacheable.
    key: Mutex<Option<(String, String)>>,
    /// The request's variables as sent, with `key`: what a mutation's kept
    /// verdict is checked against (see `validation`).
    variables: Mutex<Option<Variables>>,
    /// A document parsed by this request, cached once it passes validation.
    pending: Mutex<Option<(String, Entry)>>,
    /// The document this request runs when it differs from the cached one:
    /// objects its `@skip`/`@include` leave empty are marked (`crate::empty`).
    marked: Mutex<Option<ExecutableDocument>>,
}

impl RequestCache {
    /// Gives the variables the request leaves out their declared defaults
    /// (GraphQL spec §6.1.2, CoerceVariableValues). async-graphql reads a
    /// default where a variable is used in an argument, but decides
    /// `@skip(if: $x)` and `@include(if: $x)` from the variables as sent,
    /// so without this `query($x: Boolean = false) { a @include(if: $x) }`
    /// would select `a`. A document not yet cached is parsed here, once:
    /// async-graphql then takes it as parsed.
    ///
    /// Then, for a document with directives, marks the objects the
    /// variables leave without fields (`crate::empty::mark`), for
    /// `parse_query` to hand async-graphql instead of the cached document.
    ///
    /// A non-null variable sent as null, or left out without a default,
    /// refuses the request before anything runs (the same section).
    /// async-graphql checks a variable's value only against the argument
    /// it stands for, so `$n: Int!` sent as null for `first: Int` was run
    /// as if no page size were given; and a variable left out failed each
    /// field using it on its own, an internal error beside a field that
    /// answered (`__typename`).
    fn prepare_document(&self, request: &mut Request) -> ServerResult<()> {
        fn fill(doc: &ExecutableDocument, request: &mut Request) -> ServerResult<()> {
            let Some(op) = operation(doc, request.operation_name.as_deref()) else {
                return Ok(());
            };
            for def in &op.variable_definitions {
                let name = &def.node.name.node;
                let ty = &def.node.var_type.node;
                // Uncoded: `Graphql` codes a refusal before execution as a
                // validation failure.
                let refused = |what: &str| {
                    Err(ServerError::new(
                        format!("variable `${name}` of non-null type `{ty}` {what}"),
                        Some(def.pos),
                    ))
                };
                match request.variables.get(name) {
                    Some(async_graphql::Value::Null) if !ty.nullable => {
                        return refused("cannot be null");
                    }
                    Some(_) => continue,
                    None => {}
                }
                // A declared default only: a nullable variable without one
                // stays unsent, so what it stands for is absent rather than
                // null (`args::coerce_args`).
                match &def.node.default_value {
                    Some(default) => {
                        request.variables.insert(name.clone(), default.node.clone());
                    }
                    None if !ty.nullable => return refused("has no default and was not sent"),
                    None => {}
                }
            }
            Ok(())
        }
        let mark = |doc: &ExecutableDocument, request: &Request| {
            if !request.query.contains('@') {
                return;
            }
            let marked =
                crate::empty::mark(doc, request.operation_name.as_deref(), &request.variables);
            if let Ok(mut m) = self.marked.lock() {
                *m = marked;
            }
        };
        if let Some(entry) = self.shared.entries.peek(request.query.as_str()) {
            fill(&entry.doc, request)?;
            mark(&entry.doc, request);
            return Ok(());
        }
        // Not one async-graphql has parsed yet: if it does not parse,
        // async-graphql parses it again and reports why.
        if let Some(doc) = crate::input::parse(&request.query) {
            fill(&doc, request)?;
            mark(&doc, request);
            request.set_parsed_query(doc);
        }
        Ok(())
    }

    /// Whether this request's variant has passed validation with `entry`.
    fn validated(&self, entry: &Entry) -> bool {
        let Ok(seen) = entry.seen.lock() else {
            return false;
        };
        self.key.lock().is_ok_and(|k| {
            k.as_ref()
                .is_some_and(|(_, variant)| seen.validated.iter().any(|(v, _)| v == variant))
        })
    }
}

/// A refusal before execution (no path), with `extensions.code`.
fn limit_error(code: Code, message: String) -> ServerError {
    let e = crate::error::coded(code, message);
    ServerError {
        extensions: e.extensions,
        ..ServerError::new(e.message, None)
    }
}

#[async_trait::async_trait]
impl Extension for RequestCache {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        mut request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        // (`Graphql` checks before it gets here; the schema may be run directly.)
        crate::input::check(&request.query, &request.variables)?;
        // The key is the variables as sent, as the planned executor looks
        // them up; the defaults added below follow from the document.
        if let Some(variant) = variant_key(&request)
            && let Ok(mut key) = self.key.lock()
        {
            *key = Some((request.query.clone(), variant));
            if let Ok(mut v) = self.variables.lock() {
                *v = Some(request.variables.clone());
            }
        }
        self.prepare_document(&mut request)?;
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let marked = self.marked.lock().ok().and_then(|mut m| m.take());
        if let Some(entry) = self.shared.entries.get(query) {
            if entry.cost_uses_rows || (entry.cost_uses_variables && !self.validated(&entry)) {
                let doc = entry.doc.clone();
                if let (Some(e), _) = self.shared.check(&doc, variables) {
                    return Err(e);
                }
            }
            return Ok(marked.unwrap_or_else(|| (*entry.doc).clone()));
        }
        // (`prepare_request` has checked the text's nesting.)
        let doc = next.run(ctx, query, variables).await?;
        // Before any walk that expands fragments: a document cannot select
        // more fields than the selection limit allows.
        let fields = written_fields(&doc);
        let max = self.shared.limits.max_selections;
        if fields > max {
            return Err(limit_error(
                Code::QueryTooComplex,
                format!(
                    "the query is too complex: it has {fields} field selections, the limit is {max}"
                ),
            ));
        }
        let (error, cost) = self.shared.check(&doc, variables);
        if let Some(e) = error {
            return Err(e);
        }
        if let Ok(mut pending) = self.pending.lock() {
            *pending = Some((
                query.to_string(),
                Entry {
                    doc: Arc::new(doc.clone()),
                    weight: query
                        .len()
                        .saturating_add(fields.saturating_mul(BYTES_PER_FIELD)),
                    cost_uses_variables: cost.uses_variables,
                    cost_uses_rows: cost.uses_rows,
                    seen: Mutex::default(),
                },
            ));
        }
        Ok(marked.unwrap_or(doc))
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let key = self.key.lock().ok().and_then(|mut k| k.take());
        let variables = self.variables.lock().ok().and_then(|mut v| v.take());
        if let Some((query, variant)) = &key
            && let Some(entry) = self.shared.entries.get(query.as_str())
            && let Ok(seen) = entry.seen.lock()
        {
            if let Some((_, result)) = seen.validated.iter().find(|(v, _)| v == variant) {
                return Ok(*result);
            }
            // A mutation whose variables change on every request (the row
            // it writes) keeps the verdict of another variant of the same
            // operation when these variables certainly pass (as a query's
            // plan accepts them): the limits were checked with them when
            // the document was read (`parse_query`).
            let operation = variant_operation(variant);
            if let Some((_, result)) = seen
                .validated
                .iter()
                .find(|(v, _)| variant_operation(v) == operation)
                && let Some(variables) = &variables
                && crate::plan::mutation_accepts(
                    &self.shared.limits.model,
                    &entry.doc,
                    (!operation.is_empty()).then_some(operation),
                    variables,
                )
            {
                return Ok(*result);
            }
        }
        let result = next.run(ctx).await?;
        // Validated: the document this request parsed may be cached now.
        let pending = self.pending.lock().ok().and_then(|mut p| p.take());
        if let Some((query, entry)) = pending
            && !self.shared.entries.contains_key(query.as_str())
        {
            self.shared.entries.insert(query, Arc::new(entry));
        }
        if let Some((query, variant)) = key
            && let Some(entry) = self.shared.entries.get(query.as_str())
            && let Ok(mut seen) = entry.seen.lock()
        {
            if seen.validated.len() >= VARIANTS_PER_DOCUMENT {
                seen.validated.remove(0);
            }
            seen.validated.push((variant, result));
        }
        Ok(result)
    }
}

/// The operation a request for `name` runs in `doc`, as async-graphql
/// chooses it; `None` in the cases it refuses (a name that is not there,
/// no name among several operations, a name for an anonymous operation).
pub(crate) fn operation<'d>(
    doc: &'d ExecutableDocument,
    name: Option<&str>,
) -> Option<&'d OperationDefinition> {
    let op = match (&doc.operations, name) {
        (DocumentOperations::Single(op), None) => op,
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name)?,
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values().next()?,
        _ => return None,
    };
    Some(&op.node)
}

/// The kind of operation `name` in `doc` (see [`ParseCache::operation_kind`]).
fn kind_of(doc: &ExecutableDocument, name: Option<&str>) -> &'static str {
    use async_graphql::parser::types::OperationType;
    let ty = match (&doc.operations, name) {
        (DocumentOperations::Single(op), _) => Some(op.node.ty),
        (DocumentOperations::Multiple(ops), Some(n)) => ops.get(n).map(|op| op.node.ty),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => {
            ops.values().next().map(|op| op.node.ty)
        }
        (DocumentOperations::Multiple(_), None) => None,
    };
    match ty {
        Some(OperationType::Query) => "query",
        Some(OperationType::Mutation) => "mutation",
        Some(OperationType::Subscription) => "subscription",
        None => "unknown",
    }
}

/// The deepest field path of any operation, fragments expanded, introspection skipped.
pub(crate) fn document_depth(doc: &ExecutableDocument) -> usize {
    let mut memo = HashMap::new();
    doc.operations
        .iter()
        .map(|(_, op)| set_depth(doc, &op.node.selection_set.node, &mut memo))
        .max()
        .unwrap_or(0)
}

/// The depth of `set`; each fragment's depth is worked out once (`memo`),
/// so a fragment spread many times costs one walk, not one per spread.
fn set_depth<'d>(
    doc: &'d ExecutableDocument,
    set: &'d SelectionSet,
    memo: &mut HashMap<&'d str, usize>,
) -> usize {
    let mut max = 0;
    for sel in &set.items {
        let d = match &sel.node {
            Selection::Field(f) => {
                if f.node.name.node.starts_with("__") {
                    // __typename counts as a field; __schema/__type subtrees do not.
                    usize::from(f.node.name.node == "__typename")
                } else {
                    1 + set_depth(doc, &f.node.selection_set.node, memo)
                }
            }
            Selection::InlineFragment(i) => set_depth(doc, &i.node.selection_set.node, memo),
            Selection::FragmentSpread(s) => {
                let name = s.node.fragment_name.node.as_str();
                match (memo.get(name), doc.fragments.get(name)) {
                    (Some(d), _) => *d,
                    (None, Some(frag)) => {
                        // A fragment cycle is a validation error: while a
                        // fragment is being walked it counts 0.
                        memo.insert(name, 0);
                        let d = set_depth(doc, &frag.node.selection_set.node, memo);
                        memo.insert(name, d);
                        d
                    }
                    (None, None) => 0,
                }
            }
        };
        max = max.max(d);
    }
    max
}

/// The field selections of `doc` as written (fragments counted once, where
/// they are defined), every operation included.
pub(crate) fn written_fields(doc: &ExecutableDocument) -> usize {
    fn count(set: &SelectionSet) -> usize {
        set.items
            .iter()
            .map(|sel| match &sel.node {
                Selection::Field(f) => 1 + count(&f.node.selection_set.node),
                Selection::InlineFragment(i) => count(&i.node.selection_set.node),
                Selection::FragmentSpread(_) => 0,
            })
            .sum()
    }
    let ops: usize = doc
        .operations
        .iter()
        .map(|(_, op)| count(&op.node.selection_set.node))
        .sum();
    let frags: usize = doc
        .fragments
        .values()
        .map(|f| count(&f.node.selection_set.node))
        .sum();
    ops + frags
}

/// A document's complexity, and what it depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cost {
    pub value: u64,
    /// A page size or a filter comes from a variable.
    pub uses_variables: bool,
    /// It filters: its cost follows the tables' sizes.
    pub uses_rows: bool,
}

/// The complexity of `doc` (its most complex operation) with `variables`:
/// what `limits.max_complexity` bounds, the same for both executors.
///
/// Every selected field costs 1, `__typename` and aliases included (each
/// alias is a field of its own), plus the cost of its selection; a list
/// field (a list root field or a to-many relation) costs 1 plus its page
/// size times the cost of its selection. The page size is the count
/// argument (`first`, ...) as given, from a literal, a variable or the
/// argument's default, capped at the maximum page size (a larger count is
/// refused with `PAGE_SIZE_EXCEEDED` anyway), and the default page size when
/// there is none. So `{ books(first: 50) { id title } }` costs
/// 1 + 50 × 2 = 101, `{ books(first: 500) { id title author { name } } }`
/// 1 + 500 × (1 + 1 + 2) = 2,001, and the cost bounds the number of values
/// a response can hold. Introspection (`__schema`, `__type`) costs 1 per
/// field, with no page sizes. Fragments are expanded where they are spread
/// (each fragment's cost is worked out once); the arithmetic saturates.
///
/// A list, count or connection field that filters (filter arguments,
/// `where`) adds [`gatehouse_schema::filter_cost`] of its terms and the
/// rows of the table it reads (`rows`, by entity name), once whatever its
/// parents' page sizes: a batched relation is one statement.
pub(crate) fn complexity(
    model: &Model,
    pages: PageLimits,
    bulk_rows: u64,
    rows: &dyn Fn(&str) -> u64,
    doc: &ExecutableDocument,
    variables: &Variables,
) -> Cost {
    let mut max = 0;
    let mut uses_variables = false;
    let mut uses_rows = false;
    for (_, op) in doc.operations.iter() {
        let mut walk = CostWalk {
            model,
            pages,
            bulk_rows,
            rows,
            doc,
            variables,
            definitions: &op.node.variable_definitions,
            uses_variables: false,
            uses_rows: false,
            memo: HashMap::new(),
        };
        let root = match op.node.ty {
            async_graphql::parser::types::OperationType::Query => Parent::Query,
            async_graphql::parser::types::OperationType::Mutation => Parent::Mutation,
            async_graphql::parser::types::OperationType::Subscription => Parent::Subscription,
        };
        max = max.max(walk.set(root, &op.node.selection_set.node));
        uses_variables |= walk.uses_variables;
        uses_rows |= walk.uses_rows;
    }
    Cost {
        value: max,
        uses_variables,
        uses_rows,
    }
}

/// A list field's binding and its declared arguments.
type ListArgs<'m> = (&'m ListBinding, &'m [gatehouse_schema::InputValue]);

/// The type whose fields a selection set selects.
#[derive(Clone, Copy)]
enum Parent<'m> {
    Query,
    Mutation,
    Subscription,
    Entity(&'m Entity),
    /// A connection of the entity whose `edges` hold a page of this size.
    Connection(&'m Entity, u64),
    /// An edge of a connection of the entity.
    Edge(&'m Entity),
    /// The result of a bulk write of the entity: `rows` is a list of at
    /// most the bulk limit.
    Bulk(&'m Entity),
    /// Introspection types: every field costs 1.
    Introspection,
    /// Not in the schema (validation refuses it): every field costs 1.
    Unknown,
}

struct CostWalk<'a, 'd> {
    model: &'a Model,
    pages: PageLimits,
    /// Most rows a bulk write changes, so returns (`max_bulk_rows`).
    bulk_rows: u64,
    rows: &'a dyn Fn(&str) -> u64,
    doc: &'d ExecutableDocument,
    variables: &'a Variables,
    definitions:
        &'d [async_graphql::Positioned<async_graphql::parser::types::VariableDefinition>],
    uses_variables: bool,
    uses_rows: bool,
    /// Fragment name -> its cost (0 while it is being walked: a cycle is a
    /// validation error).
    memo: HashMap<&'d str, u64>,
}

impl<'a, 'd> CostWalk<'a, 'd> {
    fn parent_named(&self, name: &str) -> Parent<'a> {
        match name {
            "Query" => Parent::Query,
            "Mutation" => Parent::Mutation,
            "Subscription" => Parent::Subscription,
            n if n.starts_with("__") => Parent::Introspection,
            n => {
                let model = self.model;
                if let Some(e) = model.entity(n) {
                    Parent::Entity(e)
                } else if let Some(e) = model.connection(n).and_then(|c| model.entity(&c.entity)) {
                    // A fragment on a connection type is costed once, for
                    // any page: the largest.
                    Parent::Connection(e, u64::from(self.pages.max))
                } else if let Some(e) = model
                    .connections
                    .iter()
                    .find(|c| c.edge == n)
                    .and_then(|c| model.entity(&c.entity))
                {
                    Parent::Edge(e)
                } else if let Some(e) = model.bulk_result(n).and_then(|b| model.entity(&b.entity)) {
                    Parent::Bulk(e)
                } else {
                    Parent::Unknown
                }
            }
        }
    }

    fn set(&mut self, parent: Parent<'a>, set: &'d SelectionSet) -> u64 {
        let mut total: u64 = 0;
        for sel in &set.items {
            let cost = match &sel.node {
                Selection::Field(f) => self.field(parent, &f.node),
                Selection::InlineFragment(i) => {
                    let parent = match &i.node.type_condition {
                        Some(t) => self.parent_named(t.node.on.node.as_str()),
                        None => parent,
                    };
                    self.set(parent, &i.node.selection_set.node)
                }
                Selection::FragmentSpread(s) => {
                    let name = s.node.fragment_name.node.as_str();
                    match (self.memo.get(name), self.doc.fragments.get(name)) {
                        (Some(c), _) => *c,
                        (None, Some(frag)) => {
                            self.memo.insert(name, 0);
                            let parent =
                                self.parent_named(frag.node.type_condition.node.on.node.as_str());
                            let c = self.set(parent, &frag.node.selection_set.node);
                            self.memo.insert(name, c);
                            c
                        }
                        (None, None) => 0,
                    }
                }
            };
            total = total.saturating_add(cost);
        }
        total
    }

    fn field(&mut self, parent: Parent<'a>, f: &'d async_graphql::parser::types::Field) -> u64 {
        let name = f.name.node.as_str();
        let sub = &f.selection_set.node;
        if name == "__typename" {
            return 1;
        }
        if name.starts_with("__") || matches!(parent, Parent::Introspection) {
            return 1u64.saturating_add(self.set(Parent::Introspection, sub));
        }
        let model = self.model;
        match parent {
            // `edges` is a list of the page's size.
            Parent::Connection(e, page) if name == "edges" => {
                let each = self.set(Parent::Edge(e), sub);
                return 1u64.saturating_add(page.saturating_mul(each));
            }
            Parent::Edge(e) if name == "node" => {
                return 1u64.saturating_add(self.set(Parent::Entity(e), sub));
            }
            // `rows` of a bulk result: as many as a bulk write may change.
            Parent::Bulk(e) if name == "rows" => {
                let each = self.set(Parent::Entity(e), sub);
                return 1u64.saturating_add(self.bulk_rows.saturating_mul(each));
            }
            Parent::Connection(..) | Parent::Edge(_) | Parent::Bulk(_) => {
                return 1u64.saturating_add(self.set(Parent::Unknown, sub));
            }
            _ => {}
        }
        // A bulk write: its `where` as a list's filters, then its result.
        if matches!(parent, Parent::Mutation)
            && let Some(r) = model.mutations.iter().find(|r| r.name == name)
            && let Binding::UpdateMany { where_arg, .. } | Binding::DeleteMany { where_arg } =
                &r.binding
            && let Some(e) = model.entity(&r.entity)
        {
            let list = ListBinding {
                where_arg: Some(where_arg.clone()),
                ..ListBinding::default()
            };
            let filters = self.filters(&list, &e.name, f);
            let each = self.set(Parent::Bulk(e), sub);
            return 1u64.saturating_add(each).saturating_add(filters);
        }
        if let Some(fields) = matches!(parent, Parent::Query).then_some(&model.queries)
            && let Some(r) = fields.iter().find(|r| r.name == name)
            && let Binding::Connection(c) = &r.binding
            && let Some(e) = model.entity(&r.entity)
        {
            let first = self.page(&c.list, &r.args, f);
            let last = c.last.as_ref().map_or(0, |last| {
                let list = ListBinding {
                    count: Some(last.clone()),
                    ..ListBinding::default()
                };
                self.page(&list, &r.args, f)
            });
            let each = self.set(Parent::Connection(e, first.max(last)), sub);
            let filters = self.filters(&c.list, &e.name, f);
            return 1u64.saturating_add(each).saturating_add(filters);
        }
        let root = match parent {
            Parent::Query => Some(&model.queries),
            Parent::Mutation => Some(&model.mutations),
            Parent::Subscription => Some(&model.subscriptions),
            _ => None,
        };
        // (the entity its values are, a list binding and its declared
        // arguments, the filters of a count)
        let (target, list, counted): (Option<&str>, Option<ListArgs<'_>>, Option<&ListBinding>) =
            match (parent, root) {
                (_, Some(fields)) => match fields.iter().find(|r| r.name == name) {
                    Some(r) => (
                        Some(r.entity.as_str()),
                        match &r.binding {
                            Binding::List(l) => Some((l, r.args.as_slice())),
                            _ => None,
                        },
                        match &r.binding {
                            Binding::Count(l) => Some(l),
                            _ => None,
                        },
                    ),
                    None => (None, None, None),
                },
                (Parent::Entity(e), None) => match e.field(name) {
                    Some(mf) => {
                        let target = self.model.target_of(mf).map(|t| t.name.as_str());
                        match &mf.kind {
                            FieldKind::ToOne { .. } => (target, None, None),
                            FieldKind::ToMany { list, args, .. } => {
                                (target, Some((list, args.as_slice())), None)
                            }
                            FieldKind::Count { list, .. } => (target, None, Some(list)),
                            _ => (None, None, None),
                        }
                    }
                    None => (None, None, None),
                },
                _ => (None, None, None),
            };
        let filters = match (target, list.map(|(l, _)| l).or(counted)) {
            (Some(t), Some(l)) => self.filters(l, t, f),
            _ => 0,
        };
        let child = match counted {
            // A count selects nothing.
            Some(_) => Parent::Unknown,
            None => target.map_or(Parent::Unknown, |t| self.parent_named(t)),
        };
        let each = self.set(child, sub);
        let own = match list {
            Some((list, declared)) => {
                let page = self.page(list, declared, f);
                1u64.saturating_add(page.saturating_mul(each))
            }
            None => 1u64.saturating_add(each),
        };
        own.saturating_add(filters)
    }

    /// What the filters `f` gives a field bound by `list` over `entity`
    /// cost ([`gatehouse_schema::filter_cost`]): each filter argument is a
    /// term, and so is each comparison in its `where` value, at any depth
    /// (`AND`, `OR`, `NOT`, relations), weighed by its operator.
    fn filters(
        &mut self,
        list: &ListBinding,
        entity: &str,
        f: &'d async_graphql::parser::types::Field,
    ) -> u64 {
        let mut weight: u64 = 0;
        for (name, value) in &f.arguments {
            let name = name.node.as_str();
            if let Some(filter) = list.filters.iter().find(|x| x.arg == name) {
                weight = weight.saturating_add(filter.op.weight());
            } else if let Some(input) = list
                .where_arg
                .as_ref()
                .filter(|w| w.arg == name)
                .and_then(|w| self.model.where_input(&w.type_name))
            {
                let mut used = false;
                let value = value.node.clone().into_const_with(|var| {
                    used = true;
                    Ok::<_, std::convert::Infallible>(
                        self.variables.get(&var).cloned().unwrap_or_default(),
                    )
                });
                self.uses_variables |= used;
                let Ok(v) = value;
                weight = weight.saturating_add(where_weight(self.model, input, &v));
            }
        }
        if weight == 0 {
            return 0;
        }
        self.uses_rows = true;
        gatehouse_schema::filter_cost(weight, (self.rows)(entity))
    }

    /// The page size a list field with `list` reads (see [`complexity`]).
    fn page(
        &mut self,
        list: &ListBinding,
        declared: &[gatehouse_schema::InputValue],
        f: &'d async_graphql::parser::types::Field,
    ) -> u64 {
        let default = u64::from(self.pages.default);
        let max = u64::from(self.pages.max);
        let Some(count) = &list.count else {
            return default;
        };
        let written = f
            .arguments
            .iter()
            .find(|(n, _)| n.node.as_str() == count.as_str())
            .map(|(_, v)| &v.node);
        let value = match written {
            Some(InputValue::Variable(var)) => {
                self.uses_variables = true;
                match self.variables.get(var) {
                    Some(v) => Some(v.clone()),
                    None => self
                        .definitions
                        .iter()
                        .find(|d| d.node.name.node == *var)
                        .and_then(|d| d.node.default_value().cloned()),
                }
            }
            Some(v) => v.clone().into_const(),
            None => declared
                .iter()
                .find(|d| d.name == *count)
                .and_then(|d| d.default.as_ref())
                .map(crate::build::const_value),
        };
        match value {
            None | Some(async_graphql::Value::Null) => default,
            Some(async_graphql::Value::Number(n)) => match n.as_i64() {
                Some(n) => u64::try_from(n).unwrap_or(0).min(max),
                None => max,
            },
            // Not a count (validation refuses it).
            Some(_) => max,
        }
    }
}

/// The summed [`gatehouse_schema::FilterOp::weight`] of the comparisons in
/// a value of the `where` input `input`, read by its binding: each filter
/// field is one comparison, `AND`, `OR` and `NOT` hold more, and a
/// relation filter holds those of its target's input (at least 1: it is a
/// statement of its own, `EXISTS`). Unknown fields weigh nothing
/// (validation refuses them).
fn where_weight(model: &Model, input: &WhereInput, v: &async_graphql::Value) -> u64 {
    use async_graphql::Value;
    let Value::Object(map) = v else {
        return 0;
    };
    let is = |name: &Option<String>, key: &str| name.as_deref() == Some(key);
    map.iter().fold(0u64, |sum, (key, v)| {
        let key = key.as_str();
        let w = if let Some(f) = input.filters.iter().find(|f| f.arg == key) {
            f.op.weight()
        } else if is(&input.and, key) || is(&input.or, key) || is(&input.not, key) {
            match v {
                // A single object stands for a list of one (input coercion).
                Value::List(items) => items
                    .iter()
                    .fold(0u64, |s, i| s.saturating_add(where_weight(model, input, i))),
                other => where_weight(model, input, other),
            }
        } else if let Some(r) = input.relations.iter().find(|r| r.arg == key) {
            model
                .where_input(&r.input)
                .map_or(1, |target| where_weight(model, target, v).max(1))
        } else {
            0
        };
        sum.saturating_add(w)
    })
}
