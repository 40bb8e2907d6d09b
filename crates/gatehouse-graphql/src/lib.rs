//! gatehouse-graphql: the executable GraphQL schema, built at start from the
//! [`gatehouse_schema::Model`] and bound to the [`gatehouse_store::Store`].
//!
//! Relations are loaded through per-request data loaders, so a query costs a
//! number of store statements that grows with its depth, not with its rows.
//! Only selected stored fields are read. Limits (depth, complexity, page size)
//! answer with `extensions.code`.
//!
//! - `build.rs`: the async-graphql `dynamic` schema and its resolvers; types
//!   and operators come from the Model, never re-derived here.
//! - `plan.rs`: the planned executor, a fast path that runs validated plain
//!   queries as store calls and writes the JSON directly, handing anything
//!   else to async-graphql (`docs/design/planned-executor.md`); both give
//!   the same answers (a differential test holds them to it). Which of the
//!   two answers is decided here, in [`Graphql::answer`], for every
//!   transport; each read async-graphql answers instead is counted with
//!   its [`Fallback`] reason.
//! - `cache.rs`: parsed and validated documents, which also enforces the
//!   depth limit; `order.rs` puts async-graphql's response keys back in
//!   selection order.
//! - `error.rs`: the codes; each error is given its code where it is made.

mod args;
mod build;
mod cache;
mod empty;
pub mod error;
mod input;
mod introspection;
mod loader;
mod order;
mod plan;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_graphql::dataloader::DataLoader;
use async_graphql::dynamic::Schema;
use async_graphql::{Request, Response, ServerError};
use futures::Stream;
use gatehouse_schema::Model;
use gatehouse_store::{Store, WriteTxn};

pub use async_graphql;
pub use cache::ParseCache;
pub use input::{MAX_INPUT_DEPTH, MAX_SELECTION_NESTING, parse};
pub use introspection::INTROSPECTION_QUERY;
pub use plan::Unsupported;

/// Limits and sizes, from the `[limits]` config section.
#[derive(Debug, Clone)]
pub struct GraphqlOptions {
    /// Page size when a list field gets no count argument.
    pub default_page_size: u32,
    /// Largest count a list field accepts; more is `PAGE_SIZE_EXCEEDED`.
    pub max_page_size: u32,
    /// Deepest selection accepted (`QUERY_TOO_DEEP`).
    pub max_depth: usize,
    /// Highest complexity accepted (`QUERY_TOO_COMPLEX`): every selected
    /// field costs 1, a list field 1 plus its page size times the cost of its
    /// selection (see `cache::complexity`).
    pub max_complexity: usize,
    /// Most field selections one document may contain, counted as written
    /// (before fragments expand): bounds the work of every walk of the
    /// document, whatever its estimated cost.
    pub max_selections: usize,
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
            // Three levels of lists at the default page size (50 * 50 * 50
            // rows, each a field or two) fit; 1,000 aliases of a 500-row list
            // (501,000) do not.
            max_complexity: 250_000,
            max_selections: 5000,
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
    /// Reads async-graphql answered instead of a plan, by [`Fallback::index`].
    fallbacks: Arc<[AtomicU64; Fallback::ALL.len()]>,
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

/// One result of a request, from whichever executor answered it
/// ([`Graphql::answer`]).
#[derive(Debug)]
pub enum Answer {
    /// The planned executor's response, already serialized: UTF-8 JSON
    /// text `{"data":…}`, always an executed success without errors.
    /// Transports send these bytes as they are.
    Planned(Vec<u8>),
    /// async-graphql's response (boxed: it is large, and the planned
    /// answers are the common ones).
    Executed(Box<Executed>),
}

impl Answer {
    /// `false` when the request was refused before execution (see
    /// [`Executed::executed`]).
    pub fn executed(&self) -> bool {
        match self {
            Self::Planned(_) => true,
            Self::Executed(e) => e.executed,
        }
    }

    /// Whether the response holds errors.
    pub fn has_errors(&self) -> bool {
        match self {
            Self::Planned(_) => false,
            Self::Executed(e) => !e.response.errors.is_empty(),
        }
    }

    /// The whole response as JSON text: the planned bytes as they are,
    /// async-graphql's response serialized once.
    pub fn to_json(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::Planned(body) => String::from_utf8_lossy(body),
            Self::Executed(e) => serde_json::to_string(&e.response)
                .unwrap_or_else(|_| "{}".into())
                .into(),
        }
    }
}

/// Why a read (a query operation) was answered by async-graphql's
/// resolvers rather than by its plan: the `reason` label of
/// `gatehouse_graphql_fallback_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// async-graphql must validate the request first: the first run of a
    /// document with these variables (or variables the plan cannot vouch
    /// for, see `docs/design/planned-executor.md`), and every request it
    /// refuses.
    Validation,
    /// The planned executor does not run this operation.
    Unsupported(Unsupported),
    /// A plan ran and gave up: the answer would hold an error or a null
    /// where the schema promises a value (a missing scope, a refused
    /// argument, a store error), which async-graphql reports.
    Refused,
}

impl Fallback {
    /// Every reason, in [`Fallback::index`] order.
    pub const ALL: [Fallback; 9] = [
        Self::Validation,
        Self::Unsupported(Unsupported::Operation),
        Self::Unsupported(Unsupported::Extensions),
        Self::Unsupported(Unsupported::Introspection),
        Self::Unsupported(Unsupported::Directive),
        Self::Unsupported(Unsupported::Fragment),
        Self::Unsupported(Unsupported::Count),
        Self::Unsupported(Unsupported::Selection),
        Self::Refused,
    ];

    /// The metric label: `validation`, `refused`, or what the plan does
    /// not run (`directive`, `count`, …, see [`Unsupported::as_str`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validation => "validation",
            Self::Unsupported(u) => u.as_str(),
            Self::Refused => "refused",
        }
    }

    /// The position of this reason in [`Fallback::ALL`].
    fn index(self) -> usize {
        match self {
            Self::Validation => 0,
            Self::Unsupported(u) => match u {
                Unsupported::Operation => 1,
                Unsupported::Extensions => 2,
                Unsupported::Introspection => 3,
                Unsupported::Directive => 4,
                Unsupported::Fragment => 5,
                Unsupported::Count => 6,
                Unsupported::Selection => 7,
            },
            Self::Refused => 8,
        }
    }
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
        // The depth and complexity limits are the cache's (see `cache.rs`),
        // checked once per document for both executors; async-graphql's own
        // complexity limit would not count page sizes.
        let cache = ParseCache::new(
            opts.parse_cache_capacity,
            cache::Limits {
                model: shared.model.clone(),
                store: store.clone(),
                pages: shared.limits,
                max_depth: opts.max_depth,
                max_complexity: opts.max_complexity,
                max_selections: opts.max_selections,
            },
        );
        let schema = build::schema_builder(shared.clone())
            .extension(cache.clone())
            .finish()
            .map_err(|e| e.0)?;
        Ok(Self {
            schema,
            store,
            cache,
            shared,
            fallbacks: Arc::default(),
        })
    }

    /// How many reads this schema's async-graphql resolvers answered
    /// instead of a plan for `reason` (what it added to
    /// `gatehouse_graphql_fallback_total`; for tests).
    pub fn fallbacks(&self, reason: Fallback) -> u64 {
        self.fallbacks[reason.index()].load(Ordering::Relaxed)
    }

    /// Counts one read async-graphql answered instead of a plan.
    fn count_fallback(&self, reason: Fallback) {
        self.fallbacks[reason.index()].fetch_add(1, Ordering::Relaxed);
        FALLBACKS.with_borrow_mut(|handles| {
            let label = reason.as_str();
            let counter = handles.get(
                label,
                "",
                || metrics::counter!("gatehouse_graphql_fallback_total", "reason" => label),
            );
            counter.increment(1);
        });
    }

    /// Answers a query or mutation (a subscription over a transport
    /// without streams is refused by async-graphql): through its plan
    /// when it has one that runs, else through async-graphql. Every
    /// transport asks this (or [`Graphql::answer_stream`]); a read that
    /// async-graphql answers is counted with the reason the plan declined.
    pub async fn answer(&self, request: Request) -> Answer {
        let fallback = match self.planned(&request).await {
            Ok(body) => return Answer::Planned(body),
            Err(reason) => reason,
        };
        // Boxed: async-graphql's future is large, and most reads never start it.
        let (executed, kind) = Box::pin(self.execute_counted(request)).await;
        if kind == "query" {
            self.count_fallback(fallback);
        }
        Answer::Executed(Box::new(executed))
    }

    /// [`Graphql::answer`] for a transport of streams (WebSocket, SSE): a
    /// subscription's results as they come ([`Graphql::execute_stream`]),
    /// anything else one answer.
    pub fn answer_stream(&self, request: Request) -> impl Stream<Item = Answer> + Send + use<> {
        use futures::StreamExt;
        if self.is_subscription(&request.query, request.operation_name.as_deref()) {
            return self
                .execute_stream(request)
                .map(|e| Answer::Executed(Box::new(e)))
                .left_stream();
        }
        let this = self.clone();
        futures::stream::once(async move { this.answer(request).await }).right_stream()
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
        self.prepare_in(request, None)
    }

    /// [`Graphql::prepare`] for a request whose reads and writes run in
    /// `txn` (a mutation's), when given.
    fn prepare_in(&self, request: Request, txn: Option<&WriteTxn>) -> Request {
        // Introspection needs what a read needs, over POST as
        // for `/graphql/schema.json`.
        let principal = request
            .data
            .get(&std::any::TypeId::of::<gatehouse_auth::Principal>())
            .and_then(|p| p.downcast_ref::<gatehouse_auth::Principal>());
        let access = build::access_of(principal, self.shared.auth_required);
        let request = if self.may_introspect(principal) {
            request
        } else {
            request.disable_introspection()
        };
        let loaders = DataLoader::new(
            loader::StoreLoader {
                store: self.store.clone(),
                access: access.clone(),
                txn: txn.cloned(),
            },
            tokio::spawn,
        );
        let request = request.data(loaders).data(access);
        match txn {
            Some(t) => request.data(t.clone()),
            None => request,
        }
    }

    /// Whether `principal` may read the schema (introspection, the schema
    /// documents): what a read needs. Without a principal,
    /// only when requests need none (trusted in-process callers).
    pub fn may_introspect(&self, principal: Option<&gatehouse_auth::Principal>) -> bool {
        build::access_of(principal, self.shared.auth_required)
            .allows(self.schema_read_scope(), true)
    }

    /// The scope reading the schema needs (introspection, the schema
    /// documents), as the Model decides it.
    pub fn schema_read_scope(&self) -> &str {
        self.shared.model.schema_read_scope()
    }

    /// A `FORBIDDEN` answer to a request that asks for `__schema` or
    /// `__type` from a caller who may not read the schema. (`prepare` also
    /// turns introspection off for such callers; this says why.)
    fn refuse_introspection(&self, request: &Request) -> Option<Executed> {
        let principal = request
            .data
            .get(&std::any::TypeId::of::<gatehouse_auth::Principal>())
            .and_then(|p| p.downcast_ref::<gatehouse_auth::Principal>());
        if self.may_introspect(principal) {
            return None;
        }
        let doc = input::parse(&request.query)?;
        if !introspection::asks_for_schema(&doc) {
            return None;
        }
        let error = error::coded(
            error::Code::Forbidden,
            format!(
                "introspection needs the scope `{}`",
                self.shared.model.schema_read_scope()
            ),
        );
        Some(Executed {
            response: async_graphql::Response::from_errors(vec![request_error(error)]),
            executed: true,
        })
    }

    /// Executes a query or mutation through async-graphql (transports
    /// ask [`Graphql::answer`], which runs the plan when it can).
    pub async fn execute(&self, request: Request) -> Executed {
        self.execute_counted(request).await.0
    }

    /// [`Graphql::execute`], and the kind of operation it counted
    /// (`gatehouse_graphql_operations_total`'s `operation`; `"unknown"`
    /// when it counted none).
    async fn execute_counted(&self, request: Request) -> (Executed, &'static str) {
        if let Err(e) = input::check(&request.query, &request.variables) {
            count_operation("unknown", "rejected");
            return (refused(e), "unknown");
        }
        if let Some(refused) = self.refuse_introspection(&request) {
            return (refused, "unknown");
        }
        let query = request.query.clone();
        let operation_name = request.operation_name.clone();
        // A mutation's root fields run in one transaction (an operation not
        // yet known to be something else might be one: it begins only with
        // its first write, so a query never takes it).
        let txn = match self.cache.operation_kind(&query, operation_name.as_deref()) {
            "query" | "subscription" => None,
            _ => Some(self.store.begin_write()),
        };
        let mut response = self
            .schema
            .execute(self.prepare_in(request, txn.as_ref()))
            .await;
        if let Some(txn) = txn {
            settle_transaction(&txn, &mut response).await;
        }
        if query.contains('@') {
            empty::strip(&mut response.data);
        }
        let executed = !refused_before_execution(&response);
        if executed && !response.errors.is_empty() {
            self.settle_errors(&mut response, &query, operation_name.as_deref());
        }
        let parse_failed = !executed && input::parse(&query).is_none();
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
        let kind = self.cache.operation_kind(&query, operation_name.as_deref());
        count_operation(kind, outcome);
        (Executed { response, executed }, kind)
    }

    /// Executes a query through its plan (see `plan.rs`), answering the
    /// serialized response (`{"data":…}`, always a success). `None` when the
    /// request is not one the planned executor runs: it has not yet passed
    /// validation with these variables, it is not a plain query of stored
    /// fields and relations, or it would not succeed. The caller then uses
    /// [`Graphql::execute`], which gives the same data or the errors.
    /// (Transports ask [`Graphql::answer`], which does both.)
    pub async fn execute_planned(&self, request: &Request) -> Option<Vec<u8>> {
        self.planned(request).await.ok()
    }

    /// [`Graphql::execute_planned`], saying why it declined.
    async fn planned(&self, request: &Request) -> Result<Vec<u8>, Fallback> {
        if !request.extensions.is_empty() {
            return Err(Fallback::Unsupported(Unsupported::Extensions));
        }
        // The text of a cached document has passed `input::check_text`;
        // its variables are this request's own.
        if input::check_variables(&request.variables).is_err() {
            return Err(Fallback::Validation);
        }
        let principal = request
            .data
            .get(&std::any::TypeId::of::<gatehouse_auth::Principal>())
            .and_then(|p| p.downcast_ref::<gatehouse_auth::Principal>());
        // Variables too large to be a cache key are validated every time.
        let variant = cache::variant_key(request).ok_or(Fallback::Validation)?;
        let name = request.operation_name.as_deref();
        let plan = self.cache.plan(
            &request.query,
            name,
            &variant,
            &request.variables,
            |doc| plan::compile(&self.shared.store, doc, name),
            |plan| plan.accepts(&self.shared.model, &request.variables),
        )?;
        let access = build::access_of(principal, self.shared.auth_required);
        let body = plan::run(&plan, &self.shared, &access, &request.variables)
            .await
            .ok_or(Fallback::Refused)?;
        count_operation("query", "ok");
        Ok(body)
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
        let operation_name = request.operation_name.clone();
        if let Err(e) = input::check(&query, &request.variables) {
            return futures::stream::once(std::future::ready(refused(e)))
                .boxed()
                .left_stream();
        }
        // A mutation over a stream transport is one response, and one
        // transaction as over HTTP.
        if self.cache.operation_kind(&query, operation_name.as_deref()) == "mutation" {
            let this = self.clone();
            return futures::stream::once(async move { this.execute(request).await })
                .boxed()
                .left_stream();
        }
        // async-graphql drops the errors resolvers report in a
        // subscription's events: they are collected here instead.
        if let Some(refused) = several_subscription_roots(&query, operation_name.as_deref()) {
            return futures::stream::once(std::future::ready(refused))
                .boxed()
                .left_stream();
        }
        let sink = Arc::new(error::FieldErrors::default());
        let this = self.clone();
        self.schema
            .execute_stream(self.prepare(request).data(sink.clone()))
            .map(move |mut response| {
                if query.contains('@') {
                    empty::strip(&mut response.data);
                }
                response.errors.extend(sink.take());
                let executed = !refused_before_execution(&response);
                if executed && !response.errors.is_empty() {
                    this.settle_errors(&mut response, &query, operation_name.as_deref());
                }
                let parse_failed = !executed && input::parse(&query).is_none();
                for e in &mut response.errors {
                    add_code(e, executed, parse_failed);
                }
                Executed { response, executed }
            })
            .right_stream()
    }

    /// Settles the field errors of an executed response. Every error a
    /// resolver reports carries a code; one without is async-graphql's own,
    /// such as the note it adds when a failed non-null field has no value.
    /// Such an error is dropped where a resolver reported the failure of
    /// the same path, and otherwise becomes a plain internal error (its
    /// text logged, not sent). Then the nulls go where GraphQL spec §6.4.4
    /// puts them (see [`order::null_failed_fields`]).
    fn settle_errors(&self, response: &mut Response, query: &str, operation_name: Option<&str>) {
        let path_key = |e: &ServerError| serde_json::to_string(&e.path).unwrap_or_default();
        let reported: std::collections::HashSet<String> = response
            .errors
            .iter()
            .filter(|e| has_code(e))
            .map(path_key)
            .collect();
        response
            .errors
            .retain(|e| has_code(e) || !reported.contains(&path_key(e)));
        for e in &mut response.errors {
            if !has_code(e) {
                tracing::warn!(path = %path_key(e), message = %e.message, "a field failed without a reported error");
                e.message = "internal error".to_string();
                e.extensions
                    .get_or_insert_with(Default::default)
                    .set("code", error::Code::InternalServerError.as_str());
            }
        }
        if let Some(doc) = self.cache.document(query) {
            order::null_failed_fields(
                &mut response.data,
                &response.errors,
                &doc,
                operation_name,
                &self.shared.model,
            );
        }
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
            build::sharing_key(principal, self.shared.auth_required),
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
    static OPERATIONS: std::cell::RefCell<gatehouse_telemetry::handles::Handles<metrics::Counter>> =
        const { std::cell::RefCell::new(gatehouse_telemetry::handles::Handles::new()) };
}

thread_local! {
    /// `gatehouse_graphql_fallback_total` by reason (the second label unused).
    static FALLBACKS: std::cell::RefCell<gatehouse_telemetry::handles::Handles<metrics::Counter>> =
        const { std::cell::RefCell::new(gatehouse_telemetry::handles::Handles::new()) };
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

/// GraphQL spec §5.2.3.1 (single root field): a subscription operation
/// selects exactly one root field, fragments included. The refusal of one
/// that selects several, as a validation error (nothing runs); `None` for
/// anything else, left to the usual validation.
fn several_subscription_roots(query: &str, operation_name: Option<&str>) -> Option<Executed> {
    use async_graphql::parser::types::{DocumentOperations, OperationType};
    let doc = input::parse(query)?;
    let op = match (&doc.operations, operation_name) {
        (DocumentOperations::Single(op), _) => op,
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name)?,
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values().next()?,
        _ => return None,
    };
    if op.node.ty != OperationType::Subscription {
        return None;
    }
    let mut keys = Vec::new();
    root_keys(&doc, &op.node.selection_set.node, &mut keys, 0);
    if keys.len() <= 1 {
        return None;
    }
    let name = operation_name.map_or_else(String::new, |n| format!(" `{n}`"));
    let error = error::coded(
        error::Code::GraphqlValidationFailed,
        format!(
            "the subscription{name} selects {} root fields ({}); a subscription selects exactly one",
            keys.len(),
            keys.join(", ")
        ),
    )
    .into_server_error(op.pos);
    Some(Executed {
        response: Response::from_errors(vec![error]),
        executed: false,
    })
}

/// Ends a mutation request's transaction: commits it when every field
/// succeeded, else rolls it back and answers `data: null`, keeping the
/// errors that say why (the failing fields' own, which carry a code). A
/// commit that fails is an error of the whole request. Nothing is
/// answered before this: the caller sees the outcome of the commit.
async fn settle_transaction(txn: &WriteTxn, response: &mut Response) {
    if response.errors.is_empty() && !txn.is_failed() {
        if let Err(e) = txn.commit().await {
            response.data = async_graphql::Value::Null;
            response.errors.push(request_error(error::from_store(&e)));
        }
        return;
    }
    txn.rollback().await;
    response.data = async_graphql::Value::Null;
    // The root fields after a failed one are not run; async-graphql notes
    // their missing values without a code. Those notes are not the cause.
    if response.errors.iter().any(has_code) {
        response.errors.retain(has_code);
    }
    if response.errors.is_empty() {
        response.errors.push(request_error(error::coded(
            error::Code::InternalServerError,
            "the request failed, so none of its writes was applied",
        )));
    }
}

/// `e` as an error of the whole request rather than of a place in its
/// document: without `locations` (GraphQL spec §7.1.2 gives a location a
/// line and column from 1; async-graphql would write `0:0`).
fn request_error(e: async_graphql::Error) -> ServerError {
    let mut error = ServerError::new(e.message, None);
    error.extensions = e.extensions;
    error
}

/// A request refused before anything ran.
fn refused(e: ServerError) -> Executed {
    Executed {
        response: Response::from_errors(vec![e]),
        executed: false,
    }
}

/// The distinct response keys of a selection set, through fragments (at
/// most a few levels: cycles are a validation error of their own).
fn root_keys(
    doc: &async_graphql::parser::types::ExecutableDocument,
    set: &async_graphql::parser::types::SelectionSet,
    keys: &mut Vec<String>,
    depth: usize,
) {
    use async_graphql::parser::types::Selection;
    if depth > 16 {
        return;
    }
    for item in &set.items {
        match &item.node {
            Selection::Field(f) => {
                let key = f.node.response_key().node.to_string();
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            Selection::FragmentSpread(s) => {
                if let Some(fragment) = doc.fragments.get(&s.node.fragment_name.node) {
                    root_keys(doc, &fragment.node.selection_set.node, keys, depth + 1);
                }
            }
            Selection::InlineFragment(f) => {
                root_keys(doc, &f.node.selection_set.node, keys, depth + 1);
            }
        }
    }
}

/// Resolver errors always carry a code and a path; errors without a path
/// and without a code (or with a limit's) come from parsing, validation or
/// the depth/complexity limits, which refuse the request before anything runs.
fn refused_before_execution(response: &Response) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| {
            e.path.is_empty()
                && match error::code_of(e) {
                    Some(code) => code.is_size_limit(),
                    None => !has_code(e),
                }
        })
}

/// Fills in `extensions.code` for the errors async-graphql raises itself;
/// every error gatehouse raises carries its code from where it is made
/// (see [`error`]). async-graphql's own errors are plain messages without a
/// type, so they are told apart by the phase that failed: a request
/// refused before execution failed to parse when the parser refuses its
/// text (`parse_failed`), otherwise it failed validation or named no
/// runnable operation. An executed request's uncoded errors (a failed
/// non-null field) are settled by `Graphql::settle_errors`.
fn add_code(e: &mut ServerError, executed: bool, parse_failed: bool) {
    if has_code(e) || executed {
        return;
    }
    let code = if parse_failed {
        // The parser's message is a drawing of the text with the expected
        // tokens on its last line (`= expected …`), a string only: keep
        // what it expected.
        if let Some(expected) = e
            .message
            .lines()
            .last()
            .and_then(|l| l.trim().strip_prefix("= "))
        {
            e.message = format!("syntax error: {expected}");
        }
        error::Code::GraphqlParseFailed
    } else {
        // The `Date` scalar's check answers yes or no, so async-graphql's
        // refusal cannot say what a Date is: the hint is added to it here.
        if e.message.ends_with("expected type \"Date\"") {
            e.message.push_str(
                ": a Date is a string `YYYY-MM-DD` naming a real calendar day, e.g. \"2024-02-29\"",
            );
        }
        error::Code::GraphqlValidationFailed
    };
    e.extensions
        .get_or_insert_with(Default::default)
        .set("code", code.as_str());
}

/// Whether `e` carries `extensions.code`.
fn has_code(e: &ServerError) -> bool {
    e.extensions
        .as_ref()
        .is_some_and(|x| x.get("code").is_some())
}
