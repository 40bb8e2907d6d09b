//! Request telemetry: a request id on every request, one log line per
//! request, and the Prometheus metrics behind `GET /metrics`.
//!
//! Metric names are public constants so that every crate records under the
//! same names; `docs/operations.md` lists them all. Nothing here logs a
//! header value other than `x-request-id`, nor a query string: routes are
//! logged as their path template (`/v1/books/{id}`), never as the raw path.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gatehouse_auth::Principal;
use gatehouse_telemetry::RouteLabel;
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use quick_cache::sync::Cache;
use tracing::Instrument;

/// The request id header, honoured when sane and always echoed.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// Longest incoming request id kept; longer ones are replaced.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Counter: HTTP requests by `method`, `route` (path template) and `status`.
pub const HTTP_REQUESTS_TOTAL: &str = "gatehouse_http_requests_total";
/// Histogram: seconds from request to response headers, by `method` and `route`.
pub const HTTP_REQUEST_DURATION: &str = "gatehouse_http_request_duration_seconds";
/// Counter: GraphQL operations by `operation` (query, mutation, subscription,
/// unknown) and `outcome` (ok, error, rejected). Recorded by `gatehouse-graphql`.
pub const GRAPHQL_OPERATIONS_TOTAL: &str = "gatehouse_graphql_operations_total";
/// Counter: reads (query operations) answered by async-graphql's resolvers
/// instead of the planned executor, by `reason`
/// ([`gatehouse_graphql::Fallback::as_str`]). Recorded by `gatehouse-graphql`.
pub const GRAPHQL_FALLBACK_TOTAL: &str = "gatehouse_graphql_fallback_total";
/// Counter: tokens issued by `grant_type`. Recorded by `gatehouse-oauth`.
pub const OAUTH_TOKENS_ISSUED_TOTAL: &str = "gatehouse_oauth_tokens_issued_total";
/// Counter: token endpoint refusals by `error` (the RFC 6749 error code, or
/// `too_many_requests`). Recorded by `gatehouse-oauth`.
pub const OAUTH_TOKEN_REFUSALS_TOTAL: &str = "gatehouse_oauth_token_refusals_total";
/// Gauge: open subscriptions by `transport` (`websocket`, `sse`); see
/// [`subscription_started`].
pub const SUBSCRIPTIONS_ACTIVE: &str = "gatehouse_subscriptions_active";
/// Histogram: seconds per store statement, by `backend` and `kind` (fetch,
/// execute). Recorded by `gatehouse-store`.
pub const STORE_QUERY_DURATION: &str = "gatehouse_store_query_duration_seconds";
/// Gauge: open connections of a store pool, by `pool`.
pub const STORE_POOL_SIZE: &str = "gatehouse_store_pool_connections";
/// Gauge: idle connections of a store pool, by `pool`.
pub const STORE_POOL_IDLE: &str = "gatehouse_store_pool_idle_connections";
/// Gauge: largest size of a store pool, by `pool`.
pub const STORE_POOL_MAX: &str = "gatehouse_store_pool_max_connections";
/// Gauge: receivers of the change feed (one per subscription or group
/// of subscriptions sharing one query): a subscription gets every change
/// committed once it holds one.
pub const FEED_RECEIVERS: &str = "gatehouse_change_feed_receivers";

/// Latency buckets (seconds) for every `*_seconds` histogram.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The incoming `x-request-id` when it is 1 to 128 characters of
/// `[A-Za-z0-9._:-]`; anything else is replaced, so a log line cannot be
/// forged or blown up through it.
fn incoming_request_id(headers: &axum::http::HeaderMap) -> Option<String> {
    let v = headers.get(&REQUEST_ID_HEADER)?.to_str().ok()?;
    let ok = !v.is_empty()
        && v.len() <= MAX_REQUEST_ID_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    ok.then(|| v.to_string())
}

/// The method as a bounded label (unknown methods share one value).
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The label of a request: the route template it matched, refined by the
/// [`RouteLabel`] the router that resolved it put in the response (the REST
/// API is one catch-all route that parses its own paths), under the same
/// mount point. Paths that matched no route share one label: raw paths
/// would make metrics unbounded and put callers' text in the logs.
fn route_label<'a>(matched: Option<&'a MatchedPath>, refined: Option<&RouteLabel>) -> Cow<'a, str> {
    let Some(matched) = matched else {
        return Cow::Borrowed("unmatched");
    };
    let template = matched.as_str();
    match refined {
        Some(RouteLabel(label)) => {
            // The label is relative to the router that set it: keep the
            // prefix it is mounted under (the base path).
            let prefix = template.find("/{").map_or("", |at| &template[..at]);
            Cow::Owned(format!("{prefix}{label}"))
        }
        None => Cow::Borrowed(template),
    }
}

/// Who a request acted for, as its log line names them. The authentication
/// layers put it in the extensions of the response they return.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    client_id: Option<String>,
    subject: String,
}

impl Caller {
    /// Only what is logged: a whole principal (scopes, token id) is a
    /// handful of allocations more on every request.
    pub(crate) fn of(principal: &Principal) -> Self {
        Self {
            client_id: principal.client_id.clone(),
            subject: principal.subject.clone(),
        }
    }
}

/// Middleware on every route: assigns the request id (echoed in the
/// response), runs the request inside a span carrying it, then writes the
/// request's log line and metrics.
pub async fn request_layer(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let id = incoming_request_id(req.headers()).unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let method = method_label(req.method());
    let matched = req.extensions().get::<MatchedPath>().cloned();
    // The client's address as resolved for trusted proxies (`client_addr`).
    let client = gatehouse_oauth::client_addr(req.extensions());
    let client = client.map(tracing::field::display);
    let span = tracing::info_span!("request", request_id = %id);
    let mut resp = next.run(req).instrument(span).await;
    let elapsed = start.elapsed();
    let status = resp.status();
    let refined = resp.extensions().get::<RouteLabel>().cloned();
    let route = route_label(matched.as_ref(), refined.as_ref());
    let route = route.as_ref();
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    let caller = resp.extensions().get::<Caller>();
    let client_id = caller.and_then(|c| c.client_id.as_deref());
    let subject = caller.map(|c| c.subject.as_str());
    let latency_ms = (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0;
    if status.is_server_error() {
        tracing::warn!(
            request_id = %id, method, route = %route, status = status.as_u16(), latency_ms,
            client, client_id, subject, "request"
        );
    } else {
        tracing::info!(
            request_id = %id, method, route = %route, status = status.as_u16(), latency_ms,
            client, client_id, subject, "request"
        );
    }
    record_request(method, route, status, elapsed.as_secs_f64());
    resp
}

/// Metric handles of (route, method, status) combinations kept at most.
const MAX_CACHED_ROUTES: usize = 1024;

/// Which request metrics a handle pair records into. The recorder is part
/// of the key: tests install their own, and a handle belongs to one.
#[derive(Hash, PartialEq, Eq)]
struct RouteKey {
    recorder: usize,
    route: Box<str>,
    method: &'static str,
    status: u16,
}

/// A [`RouteKey`] borrowing its route, for lookups without allocating;
/// hashes like it (same field types in the same order).
#[derive(Hash)]
struct RouteRef<'a> {
    recorder: usize,
    route: &'a str,
    method: &'static str,
    status: u16,
}

impl quick_cache::Equivalent<RouteKey> for RouteRef<'_> {
    fn equivalent(&self, key: &RouteKey) -> bool {
        self.recorder == key.recorder
            && self.status == key.status
            && self.method == key.method
            && self.route == &*key.route
    }
}

/// Registering labels with the recorder on every request (building the key,
/// allocating its strings, hashing it, a lock in the registry) cost several
/// percent of a small request; a cached handle is an atomic.
static ROUTE_HANDLES: std::sync::LazyLock<Cache<RouteKey, Arc<(Counter, Histogram)>>> =
    std::sync::LazyLock::new(|| Cache::new(MAX_CACHED_ROUTES));

fn request_counter(method: &'static str, route: &str, status: StatusCode) -> Counter {
    metrics::counter!(
        HTTP_REQUESTS_TOTAL,
        "method" => method,
        "route" => route.to_string(),
        "status" => status.as_str().to_string()
    )
}

fn request_histogram(method: &'static str, route: &str) -> Histogram {
    metrics::histogram!(HTTP_REQUEST_DURATION, "method" => method, "route" => route.to_string())
}

/// Counts a request in [`HTTP_REQUESTS_TOTAL`] and [`HTTP_REQUEST_DURATION`].
fn record_request(method: &'static str, route: &str, status: StatusCode, seconds: f64) {
    let recorder = gatehouse_telemetry::handles::recorder_id();
    let key = RouteRef {
        recorder,
        route,
        method,
        status: status.as_u16(),
    };
    let handles = match ROUTE_HANDLES.get(&key) {
        Some(h) => h,
        None => {
            let h = Arc::new((
                request_counter(method, route, status),
                request_histogram(method, route),
            ));
            ROUTE_HANDLES.insert(
                RouteKey {
                    recorder,
                    route: route.into(),
                    method,
                    status: key.status,
                },
                h.clone(),
            );
            h
        }
    };
    handles.0.increment(1);
    handles.1.record(seconds);
}

/// Keeps [`SUBSCRIPTIONS_ACTIVE`] up to date for one subscription: the
/// gauge goes up when it is made and down when it is dropped, however the
/// stream ends.
#[derive(Debug)]
#[must_use = "the subscription counts as active only while the guard lives"]
pub struct SubscriptionGuard {
    transport: &'static str,
}

/// Counts one open subscription on `transport` (`"websocket"` or `"sse"`)
/// until the returned guard is dropped.
pub fn subscription_started(transport: &'static str) -> SubscriptionGuard {
    metrics::gauge!(SUBSCRIPTIONS_ACTIVE, "transport" => transport).increment(1.0);
    SubscriptionGuard { transport }
}

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        metrics::gauge!(SUBSCRIPTIONS_ACTIVE, "transport" => self.transport).decrement(1.0);
    }
}

/// Called before each scrape, to sample gauges such as pool sizes.
pub type Collect = Arc<dyn Fn() + Send + Sync>;

/// The process-wide Prometheus recorder's handle.
#[derive(Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
    collect: Option<Collect>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Installs the Prometheus recorder as the process's metrics recorder
    /// (once per process; a second call fails). No HTTP listener is started:
    /// the text is served by [`Metrics::router`].
    pub fn install() -> Result<Metrics, String> {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)
            .map_err(|e| e.to_string())?
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
        // The names exist from the start, so a dashboard shows zero, not "no data".
        metrics::gauge!(SUBSCRIPTIONS_ACTIVE, "transport" => "websocket").set(0.0);
        metrics::gauge!(SUBSCRIPTIONS_ACTIVE, "transport" => "sse").set(0.0);
        for reason in gatehouse_graphql::Fallback::ALL {
            // A mutation or subscription is never a read's fallback.
            if reason
                != gatehouse_graphql::Fallback::Unsupported(
                    gatehouse_graphql::Unsupported::Operation,
                )
            {
                metrics::counter!(GRAPHQL_FALLBACK_TOTAL, "reason" => reason.as_str()).absolute(0);
            }
        }
        Ok(Metrics {
            handle,
            collect: None,
        })
    }

    /// Runs `collect` before every scrape.
    pub fn with_collect(mut self, collect: Collect) -> Self {
        self.collect = Some(collect);
        self
    }

    /// The exposition text (Prometheus text format 0.0.4).
    pub fn render(&self) -> String {
        if let Some(c) = &self.collect {
            c();
        }
        self.handle.render()
    }

    /// Drains histogram buffers every `every` until `shutdown` is
    /// cancelled, so memory stays bounded between scrapes.
    pub fn spawn_upkeep(
        &self,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
                handle.run_upkeep();
            }
        })
    }

    /// `GET /metrics`. It is unauthenticated, like `/healthz`: restrict it
    /// by serving it on a separate address (`metrics.listen`).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/metrics", get(render))
            .with_state(self.clone())
    }
}

async fn render(State(metrics): State<Metrics>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID_HEADER, HeaderValue::from_str(v).unwrap());
        h
    }

    /// What `recorder` would show for `series` (`name{labels}`).
    fn value(
        recorder: &metrics_exporter_prometheus::PrometheusRecorder,
        series: &str,
    ) -> Option<f64> {
        let text = recorder.handle().render();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn request_metrics_count_through_cached_handles_of_the_current_recorder() {
        let first = PrometheusBuilder::new().build_recorder();
        let second = PrometheusBuilder::new().build_recorder();
        let ok = StatusCode::OK;
        let graphql =
            r#"gatehouse_http_requests_total{method="POST",route="/graphql",status="200"}"#;
        metrics::with_local_recorder(&first, || {
            for _ in 0..3 {
                record_request("POST", "/graphql", ok, 0.001);
            }
            record_request("POST", "/graphql", StatusCode::BAD_REQUEST, 0.001);
            record_request("GET", "/graphql", ok, 0.001);
            record_request("GET", "/v1/books", ok, 0.001);
        });
        // Handles of the first recorder are not reused for the second.
        metrics::with_local_recorder(&second, || record_request("POST", "/graphql", ok, 0.002));
        metrics::with_local_recorder(&first, || record_request("POST", "/graphql", ok, 0.001));
        assert_eq!(value(&first, graphql), Some(4.0));
        assert_eq!(value(&second, graphql), Some(1.0));
        for (series, n) in [
            (
                r#"gatehouse_http_requests_total{method="POST",route="/graphql",status="400"}"#,
                1.0,
            ),
            (
                r#"gatehouse_http_requests_total{method="GET",route="/graphql",status="200"}"#,
                1.0,
            ),
            (
                r#"gatehouse_http_requests_total{method="GET",route="/v1/books",status="200"}"#,
                1.0,
            ),
            (
                r#"gatehouse_http_request_duration_seconds_count{method="POST",route="/graphql"}"#,
                5.0,
            ),
        ] {
            assert_eq!(value(&first, series), Some(n), "{series}");
        }
    }

    #[test]
    fn sane_request_ids_are_kept_others_replaced() {
        assert_eq!(
            incoming_request_id(&with("abc-123_x.y:z")).as_deref(),
            Some("abc-123_x.y:z")
        );
        assert_eq!(incoming_request_id(&with("")), None);
        assert_eq!(incoming_request_id(&with("a b")), None);
        assert_eq!(incoming_request_id(&with("a\"b")), None);
        assert_eq!(incoming_request_id(&with(&"x".repeat(129))), None);
        assert!(incoming_request_id(&with(&"x".repeat(128))).is_some());
        assert_eq!(incoming_request_id(&HeaderMap::new()), None);
    }
}
