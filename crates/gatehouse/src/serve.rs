//! `gatehouse serve`: load everything, refuse to start on any problem, then
//! serve until SIGTERM/SIGINT.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::config::Loaded;

/// Runs the service; returns when it has shut down.
pub fn run(loaded: Loaded) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(loaded))
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
    let issuer = config
        .issuer
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));

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
    let authn = gatehouse_http::authn::Authenticator::new(auth.clone(), config.auth.anonymous_read);
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

    let app = gatehouse_http::app(state, vec![oauth, rest]);

    // Printed on stdout so scripts and tests can find a port-0 address.
    println!("gatehouse listening on http://{addr}");
    tracing::info!(%addr, "listening");

    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        // Without TCP_NODELAY small responses and subscription events wait
        // for Nagle's algorithm (~40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown_signal().await;
        stream_shutdown.trigger();
    })
    .await
    .context("serving HTTP")?;
    maintenance.abort();
    store.close().await;
    tracing::info!("shut down");
    Ok(ExitCode::SUCCESS)
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
