//! gatehouse-graphql: the executable GraphQL schema, built at start from the
//! [`gatehouse_schema::Model`] and bound to the [`gatehouse_store::Store`].
//!
//! Relations are loaded through per-request data loaders, so a query costs a
//! number of store statements that grows with its depth, not with its rows.
//! Only selected stored fields are read. Limits (depth, complexity, page size)
//! answer with `extensions.code`.

mod args;
mod build;
mod cache;
pub mod error;
mod introspection;
mod loader;
mod order;
mod plan;

use std::sync::Arc;

use async_graphql::dataloader::DataLoader;
use async_graphql::dynamic::Schema;
use async_graphql::{Request, Response, ServerError};
use futures::Stream;
use gatehouse_schema::Model;
use gatehouse_store::Store;

pub use async_graphql;
pub use cache::ParseCache;
pub use introspection::INTROSPECTION_QUERY;

/// Limits and sizes, from the `[limits]` config section.
#[derive(Debug, Clone)]
pub struct GraphqlOptions {
    /// Page size when a list field gets no count argument.
    pub default_page_size: u32,
    /// Largest count a list field accepts; more is `PAGE_SIZE_EXCEEDED`.
    pub max_page_size: u32,
    /// Deepest selection accepted (`QUERY_TOO_DEEP`).
    pub max_depth: usize,
    /// Highest complexity accepted (`QUERY_TOO_COMPLEX`).
    pub max_complexity: usize,
    /// Parsed documents kept for reuse.
    pub parse_cache_capacity: usize,
    /// Every request must carry a `gatehouse_auth::Principal` in its data
    /// (the HTTP layer adds it). Off only for trusted in-process callers.
    pub auth_required: bool,
}

impl Default for GraphqlOptions {
    fn default() -> Self {
        Self {
            default_page_size: 50,
            max_page_size: 500,
            max_depth: 12,
            max_complexity: 5000,
            parse_cache_capacity: 1024,
            auth_required: true,
        }
    }
}

/// The executable schema and what executing it needs.
#[derive(Clone)]
pub struct Graphql {
    schema: Schema,
    store: Store,
    cache: ParseCache,
    shared: Arc<build::Shared>,
}

impl std::fmt::Debug for Graphql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graphql").finish_non_exhaustive()
    }
}

/// The result of one execution.
#[derive(Debug)]
pub struct Executed {
    /// The GraphQL response (errors carry `extensions.code`).
    pub response: Response,
    /// `false` when the request was refused before execution (it did not
    /// parse, did not validate, or exceeded a depth/complexity limit).
    pub executed: bool,
}

impl Graphql {
    /// Builds the executable schema for `model` over `store`.
    pub fn new(model: Arc<Model>, store: Store, opts: &GraphqlOptions) -> Result<Self, String> {
        let shared = Arc::new(build::Shared {
            model,
            store: store.clone(),
            limits: args::PageLimits {
                default: opts.default_page_size,
                max: opts.max_page_size,
            },
            auth_required: opts.auth_required,
        });
        let cache = ParseCache::new(opts.parse_cache_capacity, opts.max_depth);
        let schema = build::schema_builder(shared.clone())
            .limit_complexity(opts.max_complexity)
            .extension(cache.clone())
            .finish()
            .map_err(|e| e.0)?;
        Ok(Self {
            schema,
            store,
            cache,
            shared,
        })
    }

    /// The parsed-document cache (for tests and metrics).
    pub fn parse_cache(&self) -> &ParseCache {
        &self.cache
    }

    /// The schema as standalone SDL, with gatehouse's directive declarations.
    pub fn sdl(&self) -> String {
        let mut sdl = self
            .schema
            .sdl_with_options(async_graphql::SDLExportOptions::new().include_specified_by());
        sdl.push_str("\n# gatehouse's built-in schema directives (used in the source SDL)\n\n");
        sdl.push_str(&gatehouse_schema::directive_declarations());
        sdl
    }

    /// The underlying async-graphql schema (for transports such as WebSocket).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Adds the per-request data every execution needs.
    pub fn prepare(&self, request: Request) -> Request {
        let loaders = DataLoader::new(
            loader::StoreLoader {
                store: self.store.clone(),
            },
            tokio::spawn,
        );
        request.data(loaders)
    }

    /// Executes a query or mutation.
    pub async fn execute(&self, request: Request) -> Executed {
        let query = request.query.clone();
        let operation_name = request.operation_name.clone();
        let mut response = self.schema.execute(self.prepare(request)).await;
        let executed = !refused_before_execution(&response);
        // A failed non-null field is reported by its resolver (with a code);
        // async-graphql then adds a generic note for the same path: drop it.
        let reported: Vec<_> = response
            .errors
            .iter()
            .filter(|e| {
                e.extensions
                    .as_ref()
                    .is_some_and(|x| x.get("code").is_some())
            })
            .map(|e| e.path.clone())
            .collect();
        response.errors.retain(|e| {
            !(e.message == "internal: non-null types require a return value"
                && reported.contains(&e.path))
        });
        let parse_failed = !executed && async_graphql::parser::parse_query(&query).is_err();
        for e in &mut response.errors {
            add_code(e, executed, parse_failed);
        }
        if executed && let Some(doc) = self.cache.document(&query) {
            order::in_selection_order(&mut response.data, &doc, operation_name.as_deref());
        }
        let outcome = if !executed {
            "rejected"
        } else if response.errors.is_empty() {
            "ok"
        } else {
            "error"
        };
        count_operation(
            self.cache.operation_kind(&query, operation_name.as_deref()),
            outcome,
        );
        Executed { response, executed }
    }

    /// Executes a query through its plan (see `plan.rs`), answering the
    /// serialized response (`{"data":…}`, always a success). `None` when the
    /// request is not one the planned executor runs: it has not yet passed
    /// validation with these variables, it is not a plain query of stored
    /// fields and relations, or it would not succeed. The caller then uses
    /// [`Graphql::execute`], which gives the same data or the errors.
    pub async fn execute_planned(&self, request: &Request) -> Option<Vec<u8>> {
        if !request.extensions.is_empty() {
            return None;
        }
        let principal = request
            .data
            .get(&std::any::TypeId::of::<gatehouse_auth::Principal>())
            .and_then(|p| p.downcast_ref::<gatehouse_auth::Principal>());
        let variant = cache::variant_key(request)?;
        let name = request.operation_name.as_deref();
        let plan = self.cache.plan(
            &request.query,
            name,
            &variant,
            |doc| plan::compile(&self.shared.model, doc, name),
            |plan| plan.accepts(&self.shared.model, &request.variables),
        )?;
        let body = plan::run(&plan, &self.shared, principal, &request.variables).await?;
        count_operation("query", "ok");
        Some(body)
    }

    /// Executes a subscription (or any operation) as a stream of responses.
    ///
    /// Only the first item can have `executed == false`: the request was
    /// refused before any resolver ran (parse, validation, limits), which
    /// the WebSocket protocols report with an `error` message instead of
    /// `next`. Every error carries `extensions.code`.
    pub fn execute_stream(&self, request: Request) -> impl Stream<Item = Executed> + Send + use<> {
        use futures::StreamExt;
        let query = request.query.clone();
        self.schema
            .execute_stream(self.prepare(request))
            .map(move |mut response| {
                let executed = !refused_before_execution(&response);
                let parse_failed = !executed && async_graphql::parser::parse_query(&query).is_err();
                for e in &mut response.errors {
                    add_code(e, executed, parse_failed);
                }
                Executed { response, executed }
            })
    }

    /// Whether `query` (operation `operation_name`) is a subscription; a
    /// document that does not parse is not.
    pub fn is_subscription(&self, query: &str, operation_name: Option<&str>) -> bool {
        self.cache.is_subscription(query, operation_name)
    }

    /// A key that is equal for two requests exactly when executing them
    /// gives the same results: same query text, operation, variables, and
    /// the same authorization (the principal's scheme and scopes). `None` when the
    /// request carries extensions (not worth comparing; never shared).
    pub fn sharing_key(&self, request: &Request) -> Option<String> {
        if !request.extensions.is_empty() {
            return None;
        }
        let variables = serde_json::to_string(&request.variables).ok()?;
        let principal = request
            .data
            .get(&std::any::TypeId::of::<gatehouse_auth::Principal>());
        let principal = principal.and_then(|p| p.downcast_ref::<gatehouse_auth::Principal>());
        Some(format!(
            "{}\u{0}{}\u{0}{variables}\u{0}{}",
            request.query,
            request.operation_name.as_deref().unwrap_or(""),
            build::sharing_key(principal),
        ))
    }

    /// The standard introspection result (`{"data": {"__schema": …}}`).
    pub async fn introspection(&self) -> serde_json::Value {
        let response = self.schema.execute(Request::new(INTROSPECTION_QUERY)).await;
        serde_json::to_value(&response).unwrap_or(serde_json::Value::Null)
    }
}

thread_local! {
    /// `gatehouse_graphql_operations_total` by operation kind and outcome.
    static OPERATIONS: std::cell::RefCell<gatehouse_store::metric_handles::Handles<metrics::Counter>> =
        const { std::cell::RefCell::new(gatehouse_store::metric_handles::Handles::new()) };
}

/// Counts one operation in `gatehouse_graphql_operations_total`.
fn count_operation(operation: &'static str, outcome: &'static str) {
    OPERATIONS.with_borrow_mut(|handles| {
        let counter = handles.get(operation, outcome, || {
            metrics::counter!(
                "gatehouse_graphql_operations_total",
                "operation" => operation,
                "outcome" => outcome
            )
        });
        counter.increment(1);
    });
}

/// Resolver errors always carry a code and a path; errors without either
/// come from parsing, validation or the depth/complexity limits, which
/// refuse the request before anything runs.
fn refused_before_execution(response: &Response) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| {
            e.path.is_empty()
                && e.extensions
                    .as_ref()
                    .is_none_or(|x| x.get("code").is_none())
        })
}

/// Fills in `extensions.code` for errors async-graphql raises itself.
fn add_code(e: &mut ServerError, executed: bool, parse_failed: bool) {
    let has_code = e
        .extensions
        .as_ref()
        .is_some_and(|x| x.get("code").is_some());
    if has_code {
        return;
    }
    if e.message.ends_with("expected type \"Date\"") {
        e.message.push_str(
            ": a Date is a string `YYYY-MM-DD` naming a real calendar day, e.g. \"2024-02-29\"",
        );
    }
    let code = if e.message.contains("nested too deep") {
        error::QUERY_TOO_DEEP
    } else if e.message.contains("too complex") {
        error::QUERY_TOO_COMPLEX
    } else if !executed && parse_failed {
        // The parser's message is a multi-line drawing; keep what it expected.
        if let Some(expected) = e
            .message
            .lines()
            .last()
            .and_then(|l| l.trim().strip_prefix("= "))
        {
            e.message = format!("syntax error: {expected}");
        }
        error::GRAPHQL_PARSE_FAILED
    } else if !executed {
        error::GRAPHQL_VALIDATION_FAILED
    } else if e.message.contains("Invalid value for argument")
        || e.message.contains("Failed to parse")
    {
        error::BAD_USER_INPUT
    } else {
        return;
    };
    e.extensions
        .get_or_insert_with(Default::default)
        .set("code", code);
}
