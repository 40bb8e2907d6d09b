//! A parsed-document cache that also enforces the depth limit: repeated
//! query texts skip parsing and the depth walk.
//!
//! The depth limit is checked here rather than with async-graphql's
//! `limit_depth` because that one counts introspection too, and the standard
//! introspection query (what GraphiQL and `schema.json` send) is deeper than
//! any sensible data limit. Introspection subtrees (`__schema`, `__type`) are
//! not counted.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextParseQuery};
use std::collections::HashSet;

use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{ErrorExtensions, ServerError, ServerResult, Variables};
use lru::LruCache;

/// Keeps the most recently used parsed documents, keyed by query text.
#[derive(Clone)]
pub struct ParseCache {
    inner: Arc<Mutex<LruCache<String, ExecutableDocument>>>,
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
            .map_or("unknown", |doc| kind_of(doc, name))
    }

    /// Whether `query` (operation `name`) is a subscription: from the cached
    /// document when there is one, else by parsing it (a document that does
    /// not parse is not a subscription).
    pub fn is_subscription(&self, query: &str, name: Option<&str>) -> bool {
        if let Ok(cache) = self.inner.lock()
            && let Some(doc) = cache.peek(query)
        {
            return kind_of(doc, name) == "subscription";
        }
        async_graphql::parser::parse_query(query)
            .is_ok_and(|doc| kind_of(&doc, name) == "subscription")
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
        Arc::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Extension for ParseCache {
    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        if let Ok(mut cache) = self.inner.lock()
            && let Some(doc) = cache.get(query)
        {
            return Ok(doc.clone());
        }
        let doc = next.run(ctx, query, variables).await?;
        let depth = document_depth(&doc);
        if depth > self.max_depth {
            let e = async_graphql::Error::new(format!(
                "the query is {depth} levels deep; the limit is {}",
                self.max_depth
            ))
            .extend_with(|_, e| e.set("code", crate::error::QUERY_TOO_DEEP));
            return Err(ServerError {
                extensions: e.extensions,
                ..ServerError::new(e.message, None)
            });
        }
        if let Ok(mut cache) = self.inner.lock() {
            cache.put(query.to_string(), doc.clone());
        }
        Ok(doc)
    }
}

/// The kind of operation `name` in `doc` (see [`ParseCache::operation_kind`]).
fn kind_of(doc: &ExecutableDocument, name: Option<&str>) -> &'static str {
    use async_graphql::parser::types::{DocumentOperations, OperationType};
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
