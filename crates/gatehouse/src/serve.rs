//! `gatehouse serve`: load everything, refuse to start on any problem, then
//! serve until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum_server::Handle;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::RustlsConfig;
use gatehouse_http::telemetry::Metrics;

use crate::config::Loaded;

/// Runs the service; returns when it has shut down.
pub fn run(loaded: Loaded) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(loaded));
    // Tasks still running (a stream past the deadline) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn serve(loaded: Loaded) -> anyhow::Result<ExitCode> {
    let config = loaded.config;
    if let Some(file) = &loaded.file {
        tracing::info!(config = %file.display(), "configuration loaded");
    }
    let model = match gatehouse_schema::load_paths(&config.schema) {
        Ok(model) => Arc::new(model),
        Err(diags) => return Ok(crate::report(&diags)),
    };
    tracing::info!(types = model.entities.len(), "schema loaded");

    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    // The issuer defaults to the address actually bound (port 0 included).
    let scheme = if config.tls.cert.is_some() {
        "https"
    } else {
        "http"
    };
    let issuer = config
        .issuer
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{addr}"));

    let store = match crate::open_store(&config, model.clone(), false).await? {
        Some(store) => store,
        None => return Ok(ExitCode::FAILURE),
    };
    tracing::info!(backend = store.backend(), "store ready");

    let limits = &config.limits;
    let graphql = gatehouse_graphql::Graphql::new(
        model.clone(),
        store.clone(),
        &gatehouse_graphql::GraphqlOptions {
            default_page_size: limits.default_page_size,
            max_page_size: limits.max_page_size,
            max_depth: limits.max_depth as usize,
            max_complexity: limits.max_complexity as usize,
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("building the GraphQL schema: {e}"))?;

    let auth = crate::auth::start(&config, &store, &issuer).await?;
    crate::auth::bootstrap(&auth.admin(), &config).await?;
    crate::auth::bootstrap_consumers(&auth, &config).await?;
    let authn = authenticator(&config, &auth)?;
    let shutdown = gatehouse_http::CancellationToken::new();
    let ready_store = store.clone();
    let state = gatehouse_http::AppState {
        graphql,
        ready: Arc::new(move || {
            let store = ready_store.clone();
            Box::pin(async move { store.ping().await.map_err(|e| e.to_string()) })
        }),
        base_path: config.base_path.clone(),
        max_body_bytes: usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX),
        authn: Some(authn.clone()),
        shutdown: Some(shutdown.clone()),
        subscriptions: subscription_options(&config.subscriptions),
    };
    // Open WebSocket and SSE streams end when the shutdown signal arrives.
    let stream_shutdown = state.subscriptions.shutdown.clone();
    let mut oauth_config =
        gatehouse_oauth::OAuthConfig::new(format!("{issuer}{}", config.base_path));
    oauth_config.rate_per_second = config.limits.token_rate_per_second;
    oauth_config.rate_burst = config.limits.token_rate_burst;
    let oauth =
        gatehouse_oauth::router(gatehouse_oauth::OAuthState::new(auth.clone(), oauth_config));
    let maintenance =
        gatehouse_oauth::spawn_maintenance(auth.clone(), std::time::Duration::from_secs(60));
    tracing::info!(%issuer, "authorization server ready");

    let rest = gatehouse_rest::router(gatehouse_rest::RestState {
        model: model.clone(),
        store: store.clone(),
        default_page_size: limits.default_page_size,
        max_page_size: limits.max_page_size,
        max_body_bytes: usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX),
        base_path: config.base_path.clone(),
    })
    .layer(axum::middleware::from_fn_with_state(
        gatehouse_http::authn::RestGuard {
            authn: authn.clone(),
            model: model.clone(),
        },
        gatehouse_http::authn::rest_layer,
    ));

    let metrics = install_metrics(&store)?;
    let upkeep = metrics.spawn_upkeep(Duration::from_secs(5));
    let mut extra = vec![oauth, rest];
    let metrics_server = match &config.metrics.listen {
        None => {
            extra.push(metrics.router());
            None
        }
        Some(listen) => Some(serve_metrics(listen, &metrics).await?),
    };
    let app = gatehouse_http::app(state, extra);

    let tls = match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => Some(
            RustlsConfig::from_pem_file(cert, key)
                .await
                .with_context(|| {
                    format!(
                        "loading the TLS certificate {} and key {}",
                        cert.display(),
                        key.display()
                    )
                })?,
        ),
        _ => None,
    };
    let reload = spawn_sighup(tls.clone(), config.tls.cert.clone(), config.tls.key.clone());

    // Printed on stdout so scripts and tests can find a port-0 address.
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("gatehouse listening on {scheme}://{addr}");
    tracing::info!(%addr, scheme, "listening");

    let handle = Handle::new();
    let listener = listener.into_std().context("preparing the listener")?;
    let make_service = app.into_make_service_with_connect_info::<SocketAddr>();
    // TCP_NODELAY on every accepted socket: without it small responses and
    // subscription events wait for Nagle's algorithm (~40 ms).
    let mut serving = match tls {
        Some(tls) => tokio::spawn(
            axum_server::from_tcp_rustls(listener, tls)
                .context("serving HTTPS")?
                .map(|a| a.acceptor(NoDelayAcceptor))
                .handle(handle.clone())
                .serve(make_service),
        ),
        None => tokio::spawn(
            axum_server::from_tcp(listener)
                .context("serving HTTP")?
                .acceptor(NoDelayAcceptor)
                .handle(handle.clone())
                .serve(make_service),
        ),
    };

    tokio::select! {
        result = &mut serving => {
            // The server only stops by itself on an error.
            result.context("the server task failed")?.context("serving")?;
            return Ok(ExitCode::FAILURE);
        }
        () = shutdown_signal() => {}
    }

    // Stop accepting, end long-lived streams, let in-flight requests finish
    // within the budget, then close the store.
    let budget = Duration::from_secs(config.shutdown_timeout.0);
    let deadline = tokio::time::Instant::now() + budget;
    shutdown.cancel();
    stream_shutdown.trigger();
    handle.graceful_shutdown(Some(budget.saturating_sub(STORE_CLOSE_RESERVE)));
    if let Some((h, task)) = metrics_server {
        h.graceful_shutdown(Some(Duration::ZERO));
        task.abort();
    }
    match tokio::time::timeout_at(deadline, serving).await {
        Ok(Ok(Ok(()))) => tracing::info!("in-flight requests finished"),
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the server stopped with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "the server task failed"),
        Err(_) => tracing::warn!("in-flight requests cut off at the shutdown timeout"),
    }
    maintenance.abort();
    upkeep.abort();
    reload.abort();
    let left = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(STORE_CLOSE_RESERVE);
    if tokio::time::timeout(left, store.close()).await.is_err() {
        tracing::warn!("the store did not close in time");
    }
    tracing::info!("shut down");
    Ok(ExitCode::SUCCESS)
}

/// Time kept from the shutdown budget for closing the store.
const STORE_CLOSE_RESERVE: Duration = Duration::from_millis(500);

/// Installs the Prometheus recorder; every scrape samples the store's pools.
fn install_metrics(store: &gatehouse_store::Store) -> anyhow::Result<Metrics> {
    use gatehouse_http::telemetry::{STORE_POOL_IDLE, STORE_POOL_MAX, STORE_POOL_SIZE};
    let metrics = Metrics::install().map_err(|e| anyhow::anyhow!("installing metrics: {e}"))?;
    let store = store.clone();
    Ok(metrics.with_collect(Arc::new(move || {
        for p in store.pool_stats() {
            metrics::gauge!(STORE_POOL_SIZE, "pool" => p.pool).set(f64::from(p.size));
            metrics::gauge!(STORE_POOL_IDLE, "pool" => p.pool).set(f64::from(p.idle));
            metrics::gauge!(STORE_POOL_MAX, "pool" => p.pool).set(f64::from(p.max));
        }
    })))
}

/// Serves `/metrics` alone on `listen` (plain HTTP).
async fn serve_metrics(
    listen: &str,
    metrics: &Metrics,
) -> anyhow::Result<(Handle<SocketAddr>, tokio::task::JoinHandle<()>)> {
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen} for metrics"))?;
    listener
        .set_nonblocking(true)
        .context("preparing the metrics listener")?;
    let addr = listener
        .local_addr()
        .context("reading the metrics address")?;
    println!("gatehouse metrics on http://{addr}/metrics");
    tracing::info!(%addr, "serving metrics");
    let handle = Handle::new();
    let server = axum_server::from_tcp(listener)
        .context("serving metrics")?
        .handle(handle.clone());
    let router = metrics.router();
    let task = tokio::spawn(async move {
        if let Err(e) = server.serve(router.into_make_service()).await {
            tracing::error!(error = %e, "the metrics server stopped");
        }
    });
    Ok((handle, task))
}

/// On SIGHUP, reloads the TLS certificate and key from their files (a
/// failed reload keeps the current ones); without TLS, SIGHUP is ignored
/// rather than ending the process.
fn spawn_sighup(
    tls: Option<RustlsConfig>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut hup = match signal(SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGHUP");
                    return;
                }
            };
            while hup.recv().await.is_some() {
                match (&tls, &cert, &key) {
                    (Some(tls), Some(cert), Some(key)) => {
                        match tls.reload_from_pem_file(cert, key).await {
                            Ok(()) => tracing::info!("TLS certificate reloaded"),
                            Err(e) => tracing::error!(
                                error = %e,
                                "TLS certificate reload failed; keeping the current one"
                            ),
                        }
                    }
                    _ => tracing::info!("SIGHUP ignored: no TLS certificate to reload"),
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (tls, cert, key);
        }
    })
}

/// The `[subscriptions]` section as the HTTP layer takes it.
fn subscription_options(
    c: &crate::config::SubscriptionsConfig,
) -> gatehouse_http::SubscriptionOptions {
    use std::time::Duration;
    gatehouse_http::SubscriptionOptions {
        init_timeout: Duration::from_secs(c.init_timeout.0),
        keepalive: Duration::from_secs(c.keepalive.0.max(1)),
        max_per_connection: usize::try_from(c.max_per_connection).unwrap_or(usize::MAX),
        queue_capacity: usize::try_from(c.queue_capacity).unwrap_or(usize::MAX),
        recheck_interval: Duration::from_secs(c.recheck_interval.0.max(1)),
        ..Default::default()
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}

/// The authentication layer: this instance's own tokens, or another
/// authorization server's through introspection when configured.
fn authenticator(
    config: &crate::config::Config,
    auth: &Arc<gatehouse_auth::AuthServer>,
) -> anyhow::Result<gatehouse_http::authn::Authenticator> {
    use gatehouse_http::authn::Authenticator;
    let a = &config.auth;
    let Some(url) = &a.introspection_url else {
        return Ok(Authenticator::new(auth.clone(), a.anonymous_read));
    };
    tracing::info!(%url, "bearer tokens are validated by introspection");
    Authenticator::with_introspection(
        auth.clone(),
        a.anonymous_read,
        gatehouse_http::IntrospectionConfig {
            url: url.clone(),
            client_id: a.introspection_client_id.clone().unwrap_or_default(),
            client_secret: a.introspection_client_secret.clone().unwrap_or_default(),
            cache_ttl: std::time::Duration::from_secs(a.introspection_cache_ttl.0),
            audience: a.introspection_audience.clone(),
        },
    )
    .map_err(|e| anyhow::anyhow!(e))
}
