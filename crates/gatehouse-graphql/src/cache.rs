//! A parsed-document cache that also enforces the depth limit: repeated
//! query texts skip parsing and the depth walk, and a repeated (query,
//! operation name, variables) skips validation too. Validation is a pure
//! function of the fixed schema and those three, so a cached success is
//! exactly what validating again would give; failures are never cached.
//!
//! The depth limit is checked here rather than with async-graphql's
//! `limit_depth` because that one counts introspection too, and the standard
//! introspection query (what GraphiQL and `schema.json` send) is deeper than
//! any sensible data limit. Introspection subtrees (`__schema`, `__type`) are
//! not counted.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextPrepareRequest,
    NextValidation,
};
use std::collections::HashSet;

use async_graphql::parser::types::{
    DocumentOperations, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql::{
    ErrorExtensions, Request, ServerError, ServerResult, ValidationResult, Variables,
};
use lru::LruCache;

use crate::plan::Plan;

/// How many validated (operation name, variables) variants one document keeps.
const VARIANTS_PER_DOCUMENT: usize = 8;

/// Variables larger than this (as JSON) are validated every time rather
/// than kept as part of a cache key.
const MAX_VARIANT_KEY: usize = 1024;

/// A cached document and the request variants that passed validation with it.
struct Entry {
    /// Shared, so the response-order pass can read it without parsing again.
    doc: Arc<ExecutableDocument>,
    /// `operation name \0 variables as JSON` -> the validation result.
    validated: Vec<(String, ValidationResult)>,
    /// Operation name -> its plan (`None`: not one the planned executor runs).
    plans: Vec<(Option<String>, Option<Arc<Plan>>)>,
}

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

/// Keeps the most recently used parsed documents, keyed by query text.
#[derive(Clone)]
pub struct ParseCache {
    inner: Arc<Mutex<LruCache<String, Entry>>>,
    max_depth: usize,
}

impl std::fmt::Debug for ParseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseCache").finish_non_exhaustive()
    }
}

impl ParseCache {
    /// A cache of at most `capacity` documents, refusing documents deeper than `max_depth`.
    pub fn new(capacity: usize, max_depth: usize) -> Self {
        let cap = NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Arc::new(Mutex::new(LruCache::new(cap))),
            max_depth,
        }
    }

    /// The kind of operation `query` runs (`"query"`, `"mutation"`,
    /// `"subscription"`), when the document is cached (it is once it parsed
    /// and passed the depth limit); `"unknown"` otherwise. For metrics: it
    /// never parses.
    pub fn operation_kind(&self, query: &str, name: Option<&str>) -> &'static str {
        let Ok(cache) = self.inner.lock() else {
            return "unknown";
        };
        cache
            .peek(query)
            .map_or("unknown", |entry| kind_of(&entry.doc, name))
    }

    /// Whether `query` (operation `name`) is a subscription: from the cached
    /// document when there is one, else by parsing it (a document that does
    /// not parse is not a subscription).
    pub fn is_subscription(&self, query: &str, name: Option<&str>) -> bool {
        if let Ok(cache) = self.inner.lock()
            && let Some(entry) = cache.peek(query)
        {
            return kind_of(&entry.doc, name) == "subscription";
        }
        async_graphql::parser::parse_query(query)
            .is_ok_and(|doc| kind_of(&doc, name) == "subscription")
    }

    /// The plan of operation `operation_name` of `query`, compiled on first
    /// use, when that operation is one the planned executor runs and has
    /// passed validation with these variables (`variant`, from
    /// [`variant_key`]), or with other variables and the plan `accepts`
    /// these (see [`Plan::accepts`]): a query whose variables change on
    /// every request (an id, a page) is validated by async-graphql once.
    pub(crate) fn plan(
        &self,
        query: &str,
        operation_name: Option<&str>,
        variant: &str,
        compile: impl FnOnce(&ExecutableDocument) -> Option<Plan>,
        accepts: impl FnOnce(&Plan) -> bool,
    ) -> Option<Arc<Plan>> {
        let mut cache = self.inner.lock().ok()?;
        let entry = cache.get_mut(query)?;
        // A variant is `operation name \0 variables`.
        fn operation(variant: &str) -> &str {
            variant.split('\0').next().unwrap_or_default()
        }
        let validated = entry.validated.iter().any(|(v, _)| v == variant);
        if !validated
            && !entry
                .validated
                .iter()
                .any(|(v, _)| operation(v) == operation(variant))
        {
            return None;
        }
        let plan = match entry
            .plans
            .iter()
            .find(|(n, _)| n.as_deref() == operation_name)
        {
            Some((_, plan)) => plan.clone(),
            None => {
                let plan = compile(&entry.doc).map(Arc::new);
                if entry.plans.len() >= VARIANTS_PER_DOCUMENT {
                    entry.plans.remove(0);
                }
                entry
                    .plans
                    .push((operation_name.map(str::to_string), plan.clone()));
                plan
            }
        }?;
        (validated || accepts(&plan)).then_some(plan)
    }

    /// The parsed document of `query`: the cached one when there is one
    /// (it is for every request async-graphql has parsed), else parsed now.
    pub(crate) fn document(&self, query: &str) -> Option<Arc<ExecutableDocument>> {
        if let Ok(cache) = self.inner.lock()
            && let Some(entry) = cache.peek(query)
        {
            return Some(entry.doc.clone());
        }
        async_graphql::parser::parse_query(query).ok().map(Arc::new)
    }

    /// Whether `query` is cached (for tests and metrics).
    pub fn contains(&self, query: &str) -> bool {
        self.inner
            .lock()
            .map(|c| c.contains(query))
            .unwrap_or(false)
    }
}

impl ExtensionFactory for ParseCache {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(RequestCache {
            shared: self.clone(),
            key: Mutex::new(None),
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
}

#[async_trait::async_trait]
impl Extension for RequestCache {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        if let Some(variant) = variant_key(&request)
            && let Ok(mut key) = self.key.lock()
        {
            *key = Some((request.query.clone(), variant));
        }
        next.run(ctx, request).await
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        if let Ok(mut cache) = self.shared.inner.lock()
            && let Some(entry) = cache.get(query)
        {
            return Ok((*entry.doc).clone());
        }
        let doc = next.run(ctx, query, variables).await?;
        let depth = document_depth(&doc);
        if depth > self.shared.max_depth {
            let e = async_graphql::Error::new(format!(
                "the query is {depth} levels deep; the limit is {}",
                self.shared.max_depth
            ))
            .extend_with(|_, e| e.set("code", crate::error::QUERY_TOO_DEEP));
            return Err(ServerError {
                extensions: e.extensions,
                ..ServerError::new(e.message, None)
            });
        }
        if let Ok(mut cache) = self.shared.inner.lock() {
            cache.put(
                query.to_string(),
                Entry {
                    doc: Arc::new(doc.clone()),
                    validated: Vec::new(),
                    plans: Vec::new(),
                },
            );
        }
        Ok(doc)
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let key = self.key.lock().ok().and_then(|mut k| k.take());
        if let Some((query, variant)) = &key
            && let Ok(mut cache) = self.shared.inner.lock()
            && let Some(entry) = cache.get(query.as_str())
            && let Some((_, result)) = entry.validated.iter().find(|(v, _)| v == variant)
        {
            return Ok(*result);
        }
        let result = next.run(ctx).await?;
        if let Some((query, variant)) = key
            && let Ok(mut cache) = self.shared.inner.lock()
            && let Some(entry) = cache.get_mut(query.as_str())
        {
            if entry.validated.len() >= VARIANTS_PER_DOCUMENT {
                entry.validated.remove(0);
            }
            entry.validated.push((variant, result));
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
    doc.operations
        .iter()
        .map(|(_, op)| set_depth(doc, &op.node.selection_set.node, &mut HashSet::new()))
        .max()
        .unwrap_or(0)
}

fn set_depth<'d>(
    doc: &'d ExecutableDocument,
    set: &'d SelectionSet,
    seen: &mut HashSet<&'d str>,
) -> usize {
    let mut max = 0;
    for sel in &set.items {
        let d = match &sel.node {
            Selection::Field(f) => {
                if f.node.name.node.starts_with("__") {
                    // __typename counts as a field; __schema/__type subtrees do not.
                    usize::from(f.node.name.node == "__typename")
                } else {
                    1 + set_depth(doc, &f.node.selection_set.node, seen)
                }
            }
            Selection::InlineFragment(i) => set_depth(doc, &i.node.selection_set.node, seen),
            Selection::FragmentSpread(s) => {
                let name = s.node.fragment_name.node.as_str();
                // A fragment cycle is a validation error; do not loop on it here.
                match doc.fragments.get(name) {
                    Some(frag) if seen.insert(name) => {
                        let d = set_depth(doc, &frag.node.selection_set.node, seen);
                        seen.remove(name);
                        d
                    }
                    _ => 0,
                }
            }
        };
        max = max.max(d);
    }
    max
}
