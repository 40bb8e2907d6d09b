//! `gatehouse serve`: load everything, refuse to start on any problem, then
//! serve until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use gatehouse_http::telemetry::Metrics;

use crate::config::Loaded;

/// Runs the service; returns when it has shut down. With `json_logs` the
/// process writes nothing but log events (one JSON object per line).
pub fn run(loaded: Loaded, json_logs: bool) -> anyhow::Result<ExitCode> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = loaded.config.workers {
        builder.worker_threads(usize::from(n));
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(loaded, json_logs));
    // Tasks still running (a stream past the deadline) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

async fn serve(loaded: Loaded, json_logs: bool) -> anyhow::Result<ExitCode> {
    let config = loaded.config;
    if let Some(file) = &loaded.file {
        tracing::info!(config = %file.display(), "configuration loaded");
    }
    if loaded.file.is_none() && !config.schema.iter().any(|p| p.exists()) {
        let paths: Vec<String> = config
            .schema
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        anyhow::bail!(
            "no schema at {} and no gatehouse.toml here: `gatehouse init` writes a starter \
             service into this directory; or name a schema with --schema DIR, or a config \
             with --config FILE",
            paths.join(", ")
        );
    }
    let model = match gatehouse_schema::load_paths(&config.schema) {
        Ok(model) => Arc::new(model),
        Err(diags) => return Ok(crate::report(&diags)),
    };
    tracing::info!(types = model.entities.len(), "schema loaded");
    let webhooks = bind_webhooks(&config, &model)?;

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
    // Before the first write: webhooks enqueue in every writing transaction.
    let outbox =
        gatehouse_outbox::Outbox::open_with_clock(store.db().clone(), store.clock().clone())
            .await
            .context("creating the outbox table")?;
    if !webhooks.is_empty() {
        store.add_commit_hook(Arc::new(gatehouse_webhooks::WebhookHook::new(
            outbox.clone(),
            model.clone(),
            webhooks.clone(),
        )));
    }
    seed_rows(&store, &config.bootstrap.rows).await?;

    let limits = &config.limits;
    let graphql = graphql(&config, model.clone(), store.clone())?;

    // GraphiQL signs in through the server's own client, back to its page.
    let graphiql_url = format!("{issuer}{}/graphql", config.base_path);
    // The e-mail flows of the authorization server enqueue in the outbox
    // opened above, and the worker started below wakes on it.
    let email_on = config
        .email
        .settings()
        .map_err(anyhow::Error::msg)?
        .is_some();
    let auth = crate::auth::start(
        &config,
        &store,
        &issuer,
        &graphiql_url,
        email_on.then_some(&outbox),
    )
    .await?;
    crate::auth::bootstrap(&auth.admin(), &config).await?;
    crate::auth::bootstrap_consumers(&auth, &config).await?;
    warn_when_nobody_can_sign_in(&auth.admin(), &config).await;
    let authn = authenticator(&config, &auth)?;
    // The one shutdown signal: SIGINT or SIGTERM cancels it, and every task
    // follows it (the HTTP servers, subscriptions and `/readyz`, token
    // maintenance, metrics upkeep, the SIGHUP listener).
    let shutdown = gatehouse_http::CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            shutdown.cancel();
        }
    });
    let deliveries = start_deliveries(&config, &outbox, &webhooks, shutdown.clone())?;
    // Validated with the rest of the configuration at load.
    let allowed_origins = gatehouse_oauth::AllowedOrigins::parse(&config.cors.allowed_origins)
        .map_err(|e| anyhow::anyhow!("`cors.allowed_origins`: {e}"))?;
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
        subscriptions: subscription_options(&config.subscriptions, shutdown.clone()),
        cors: gatehouse_http::CorsConfig {
            allowed_origins: allowed_origins.clone(),
            max_age: Duration::from_secs(config.cors.max_age.0),
        },
    };
    let mut oauth_config =
        gatehouse_oauth::OAuthConfig::new(format!("{issuer}{}", config.base_path));
    oauth_config.rate_per_second = config.limits.token_rate_per_second;
    oauth_config.rate_burst = config.limits.token_rate_burst;
    oauth_config.allowed_origins = allowed_origins;
    oauth_config.providers = crate::auth::providers(&config)?;
    let oauth =
        gatehouse_oauth::router(gatehouse_oauth::OAuthState::new(auth.clone(), oauth_config));
    let maintenance = gatehouse_oauth::spawn_maintenance(
        auth.clone(),
        std::time::Duration::from_secs(60),
        shutdown.clone(),
    );
    tracing::info!(%issuer, "authorization server ready");
    // Bootstrap hashing is done: return its buffers to the OS.
    crate::allocator::release_free_memory();

    let rest = gatehouse_rest::router(gatehouse_rest::RestState {
        store: store.clone(),
        default_page_size: limits.default_page_size,
        max_page_size: limits.max_page_size,
        max_body_bytes: usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX),
        base_path: config.base_path.clone(),
        auth_required: true,
    })
    .layer(axum::middleware::from_fn_with_state(
        gatehouse_http::authn::RestGuard {
            authn: authn.clone(),
        },
        gatehouse_http::authn::rest_layer,
    ));

    let metrics = install_metrics(&store)?;
    let upkeep = metrics.spawn_upkeep(Duration::from_secs(5), shutdown.clone());
    let mut extra = vec![oauth, rest];
    let metrics_server = match &config.metrics.listen {
        None => {
            extra.push(metrics.router());
            None
        }
        Some(listen) => Some(serve_metrics(listen, &metrics, json_logs, &shutdown).await?),
    };
    let header = gatehouse_oauth::ForwardedHeader::parse(&config.forwarded_header)
        .map_err(|e| anyhow::anyhow!("`forwarded_header`: {e}"))?;
    let proxies = gatehouse_oauth::TrustedProxies::parse(&config.trusted_proxies)
        .map_err(|e| anyhow::anyhow!("`trusted_proxies`: {e}"))?
        .with_header(header);
    // Every client behind a trusted proxy arrives from its address: the
    // per-address share does not apply to it.
    let proxies_for_limits = proxies.clone();
    if !proxies.is_empty() {
        tracing::info!(
            trusted_proxies = config.trusted_proxies.join(","),
            forwarded_header = header.as_str(),
            "forwarding headers are read from trusted proxies"
        );
    }
    // Outermost: every limit, log line and signature check below sees the
    // client's address as resolved here.
    let app = gatehouse_http::app(state, extra).layer(axum::middleware::from_fn_with_state(
        Arc::new(proxies),
        gatehouse_oauth::origin::layer,
    ));

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
    let reload = spawn_sighup(
        tls.clone(),
        config.tls.cert.clone(),
        config.tls.key.clone(),
        shutdown.clone(),
    );

    // Printed on stdout so scripts and tests can find a port-0 address; in
    // JSON mode the `listening` event (its `url` field) is the only trace.
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    if !json_logs {
        println!("gatehouse listening on {url}");
    }
    tracing::info!(%addr, scheme, %url, "listening");

    let handle = Handle::new();
    let listener = listener.into_std().context("preparing the listener")?;
    let make_service = app.into_make_service_with_connect_info::<SocketAddr>();
    // Every accepted socket goes through the connection limits (and gets
    // TCP_NODELAY there); under TLS they run before the handshake.
    let caps = connection_caps(limits, open_files_limit());
    tracing::info!(
        max_connections = caps.max,
        max_connections_per_address = caps.per_address,
        open_files = caps
            .open_files
            .map_or_else(|| "unknown".to_string(), |n| n.to_string()),
        "connection limits"
    );
    let conn_limits = conn::Limits::new(
        caps,
        proxies_for_limits,
        Duration::from_secs(limits.header_read_timeout.0),
        Duration::from_secs(limits.body_read_timeout.0),
    );
    let idle = Duration::from_secs(limits.idle_timeout.0);
    let mut serving = match tls {
        Some(tls) => {
            let mut server = axum_server::from_tcp_rustls(listener, tls)
                .context("serving HTTPS")?
                .map(|a| a.acceptor(conn_limits))
                .handle(handle.clone());
            keep_alive_timer(server.http_builder(), idle);
            tokio::spawn(server.serve(make_service))
        }
        None => {
            let mut server = axum_server::from_tcp(listener)
                .context("serving HTTP")?
                .acceptor(conn_limits)
                .handle(handle.clone());
            keep_alive_timer(server.http_builder(), idle);
            tokio::spawn(server.serve(make_service))
        }
    };

    tokio::select! {
        result = &mut serving => {
            // The server only stops by itself on an error.
            result.context("the server task failed")?.context("serving")?;
            return Ok(ExitCode::FAILURE);
        }
        () = shutdown.cancelled() => {}
    }

    // The signal has ended long-lived streams and the background tasks:
    // stop accepting, let in-flight requests finish within the budget, then
    // close the store.
    let budget = Duration::from_secs(config.shutdown_timeout.0);
    let deadline = tokio::time::Instant::now() + budget;
    handle.graceful_shutdown(Some(budget.saturating_sub(STORE_CLOSE_RESERVE)));
    match tokio::time::timeout_at(deadline, serving).await {
        Ok(Ok(Ok(()))) => tracing::info!("in-flight requests finished"),
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the server stopped with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "the server task failed"),
        Err(_) => tracing::warn!("in-flight requests cut off at the shutdown timeout"),
    }
    // Each ends by itself on the signal; a purge still running is given
    // what is left of the budget, not more.
    for task in [maintenance, upkeep, reload]
        .into_iter()
        .chain(metrics_server)
        .chain(deliveries)
    {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            abort.abort();
        }
    }
    let left = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(STORE_CLOSE_RESERVE);
    if tokio::time::timeout(left, store.close()).await.is_err() {
        tracing::warn!("the store did not close in time");
    }
    tracing::info!("shut down");
    Ok(ExitCode::SUCCESS)
}

/// `[[webhooks]]`, bound to the schema: a problem names the entry.
fn bind_webhooks(
    config: &crate::config::Config,
    model: &gatehouse_schema::Model,
) -> anyhow::Result<Vec<gatehouse_webhooks::Webhook>> {
    let mut out = Vec::new();
    for (i, w) in config.webhooks.iter().enumerate() {
        let def = w
            .definition(|var| std::env::var(var).ok())
            .map_err(|e| anyhow::anyhow!("{}: {e}", w.name(i)))?;
        let hook = gatehouse_webhooks::Webhook::bind(&def, model)
            .map_err(|e| anyhow::anyhow!("{}.{}: {e}", w.name(i), e.key()))?;
        out.push(hook);
    }
    Ok(out)
}

/// Starts the worker that delivers the outbox (created at every start, so
/// that `gatehouse copy` and a later `[email]` find it) until `shutdown`:
/// the `email` channel with `[email]`, and one `webhook:<id>` channel per
/// webhook. Messages enqueued by any instance on the database are sent by
/// whichever instance's worker claims them first
/// (`docs/design/outbox.md`).
fn start_deliveries(
    config: &crate::config::Config,
    outbox: &gatehouse_outbox::Outbox,
    webhooks: &[gatehouse_webhooks::Webhook],
    shutdown: gatehouse_http::CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let mut worker =
        gatehouse_outbox::Worker::new(outbox, gatehouse_outbox::WorkerOptions::default());
    let mut channels = 0;
    // Checked with the rest of the configuration at load.
    if let Some(settings) = config.email.settings().map_err(anyhow::Error::msg)? {
        let sender = gatehouse_mail::EmailSender::new(&settings)
            .map_err(|e| anyhow::anyhow!("`email.{}`: {e}", e.key()))?;
        // The transport's Display leaves the SMTP password out.
        tracing::info!(transport = %settings.transport, from = %settings.from, "e-mail delivery ready");
        worker = worker.channel(
            gatehouse_mail::CHANNEL,
            Arc::new(sender),
            gatehouse_outbox::ChannelOptions::default(),
        );
        channels += 1;
    }
    for hook in webhooks {
        let sender = hook
            .sender()
            .map_err(|e| anyhow::anyhow!("webhook `{}`: {e}", hook.id()))?;
        tracing::info!(webhook = hook.id(), to = %hook.origin(), "webhook delivery ready");
        worker = worker.channel(hook.channel(), Arc::new(sender), hook.channel_options());
        channels += 1;
    }
    if channels == 0 {
        return Ok(None);
    }
    Ok(Some(worker.spawn(shutdown)))
}

/// `[[bootstrap.rows]]`: inserts the entries of every type that has no
/// rows yet, types in the order they first appear (so a row can refer to
/// one of an earlier type).
async fn seed_rows(
    store: &gatehouse_store::Store,
    rows: &[crate::config::BootstrapRow],
) -> anyhow::Result<()> {
    let mut types: Vec<&str> = Vec::new();
    for r in rows {
        if !types.contains(&r.type_name.as_str()) {
            types.push(&r.type_name);
        }
    }
    for ty in types {
        let what = || format!("[[bootstrap.rows]] of type `{ty}`");
        let of_type = store.entity(ty).with_context(what)?;
        let existing = of_type
            .count(&gatehouse_store::AccessContext::system(), None)
            .await
            .with_context(what)?;
        if existing > 0 {
            continue;
        }
        let mut inserted = 0;
        for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.type_name == ty) {
            of_type
                .insert(&gatehouse_store::AccessContext::system(), r.values.clone())
                .await
                .with_context(|| format!("[[bootstrap.rows]] entry {} (type `{ty}`)", i + 1))?;
            inserted += 1;
        }
        tracing::info!(
            r#type = ty,
            rows = inserted,
            "starter rows inserted into an empty type"
        );
    }
    Ok(())
}

/// A server with no client or no user hands out no token for a user: say
/// so at start, with the command that fixes it.
async fn warn_when_nobody_can_sign_in(
    admin: &gatehouse_auth::Admin,
    config: &crate::config::Config,
) {
    let config_flag = "[--config FILE]";
    match admin.list_clients().await {
        Ok(clients) if clients.is_empty() => tracing::warn!(
            "no OAuth client is registered, so nobody can get a token; add one with \
             `gatehouse client add NAME --grants password,refresh_token --scopes \"read write\" \
             {config_flag}` or a [[bootstrap.clients]] entry in the config"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %crate::auth::describe(&e), "cannot list the clients"),
    }
    match admin.list_users().await {
        Ok(users) if users.is_empty() && !config.auth.anonymous_read => tracing::warn!(
            "no user is registered, so the password grant has nobody to sign in; add one with \
             `gatehouse user add NAME --scopes \"read write\" {config_flag}` (the password is \
             read from stdin) or a [[bootstrap.users]] entry in the config"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %crate::auth::describe(&e), "cannot list the users"),
    }
}

/// The executable GraphQL schema `serve` runs (and `schema json` introspects).
pub(crate) fn graphql(
    config: &crate::config::Config,
    model: Arc<gatehouse_schema::Model>,
    store: gatehouse_store::Store,
) -> anyhow::Result<gatehouse_graphql::Graphql> {
    let limits = &config.limits;
    gatehouse_graphql::Graphql::new(
        model,
        store,
        &gatehouse_graphql::GraphqlOptions {
            default_page_size: limits.default_page_size,
            max_page_size: limits.max_page_size,
            max_depth: limits.max_depth as usize,
            max_complexity: limits.max_complexity as usize,
            max_selections: limits.max_selections as usize,
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("building the GraphQL schema: {e}"))
}

/// Bounds HTTP/1 keep-alive idleness. hyper's header-read timer starts as
/// soon as a connection waits for a request head (right after the previous
/// response), so it bounds the idle wait and the next head together; the
/// first request's head has the shorter `header_read_timeout`
/// ([`conn::Limited`]). Without a timer hyper applies no timeout at all.
fn keep_alive_timer(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    idle: Duration,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(idle);
}

/// Time kept from the shutdown budget for closing the store.
const STORE_CLOSE_RESERVE: Duration = Duration::from_millis(500);

/// Installs the Prometheus recorder; every scrape samples the store's pools.
fn install_metrics(store: &gatehouse_store::Store) -> anyhow::Result<Metrics> {
    use gatehouse_http::telemetry::{
        FEED_RECEIVERS, STORE_POOL_IDLE, STORE_POOL_MAX, STORE_POOL_SIZE,
    };
    let metrics = Metrics::install().map_err(|e| anyhow::anyhow!("installing metrics: {e}"))?;
    let store = store.clone();
    Ok(metrics.with_collect(Arc::new(move || {
        for p in store.pool_stats() {
            metrics::gauge!(STORE_POOL_SIZE, "pool" => p.pool).set(f64::from(p.size));
            metrics::gauge!(STORE_POOL_IDLE, "pool" => p.pool).set(f64::from(p.idle));
            metrics::gauge!(STORE_POOL_MAX, "pool" => p.pool).set(f64::from(p.max));
        }
        metrics::gauge!(FEED_RECEIVERS).set(store.feed_receivers() as f64);
    })))
}

/// Serves `/metrics` alone on `listen` (plain HTTP).
async fn serve_metrics(
    listen: &str,
    metrics: &Metrics,
    json_logs: bool,
    shutdown: &gatehouse_http::CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen} for metrics"))?;
    listener
        .set_nonblocking(true)
        .context("preparing the metrics listener")?;
    let addr = listener
        .local_addr()
        .context("reading the metrics address")?;
    let url = format!("http://{addr}/metrics");
    if !json_logs {
        println!("gatehouse metrics on {url}");
    }
    tracing::info!(%addr, %url, "serving metrics");
    let handle = Handle::new();
    let server = axum_server::from_tcp(listener)
        .context("serving metrics")?
        .handle(handle.clone());
    let router = metrics.router();
    // Scrapes are not waited for at shutdown.
    let cancelled = shutdown.clone().cancelled_owned();
    tokio::spawn(async move {
        cancelled.await;
        handle.graceful_shutdown(Some(Duration::ZERO));
    });
    let task = tokio::spawn(async move {
        if let Err(e) = server.serve(router.into_make_service()).await {
            tracing::error!(error = %e, "the metrics server stopped");
        }
    });
    Ok(task)
}

/// On SIGHUP, reloads the TLS certificate and key from their files (a
/// failed reload keeps the current ones); without TLS, SIGHUP is ignored
/// rather than ending the process.
fn spawn_sighup(
    tls: Option<RustlsConfig>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    shutdown: gatehouse_http::CancellationToken,
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
            while let Some(Some(())) = shutdown.run_until_cancelled(hup.recv()).await {
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
            let _ = (tls, cert, key, shutdown);
        }
    })
}

/// The `[subscriptions]` section as the HTTP layer takes it.
fn subscription_options(
    c: &crate::config::SubscriptionsConfig,
    shutdown: gatehouse_http::CancellationToken,
) -> gatehouse_http::SubscriptionOptions {
    use std::time::Duration;
    gatehouse_http::SubscriptionOptions {
        init_timeout: Duration::from_secs(c.init_timeout.0),
        keepalive: Duration::from_secs(c.keepalive.0.max(1)),
        max_per_connection: usize::try_from(c.max_per_connection).unwrap_or(usize::MAX),
        queue_capacity: usize::try_from(c.queue_capacity).unwrap_or(usize::MAX),
        recheck_interval: Duration::from_secs(c.recheck_interval.0.max(1)),
        shutdown,
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

/// The connection caps in force: `limits.max_connections` and
/// `limits.max_connections_per_address`, or what they default to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionCaps {
    /// Client connections open at once.
    pub max: u32,
    /// Of those, the most one client address (an IPv6 /64) may hold.
    pub per_address: u32,
    /// The open-files limit they were derived from, when known.
    pub open_files: Option<u64>,
}

/// Highest default for `limits.max_connections`, whatever the open-files
/// limit: an idle connection costs memory too (hyper's buffers, a task),
/// and this bounds what a flood of them can hold.
const MAX_DEFAULT_CONNECTIONS: u64 = 65_536;

/// The caps for `limits` on a process allowed `open_files` descriptors
/// (`None`: unknown). Unset, `max_connections` is the open-files limit less
/// a reserve for the database connections, SQLite's files, logs and
/// outgoing connections (a tenth of it, at least 512 or half of a small
/// limit), at most [`MAX_DEFAULT_CONNECTIONS`]; 512 when the limit is
/// unknown. Unset, `max_connections_per_address` is three quarters of
/// `max_connections` (rounded up): one address never holds the last
/// quarter, so it cannot keep the others out, while a single load balancer
/// or benchmark client still gets most of the cap.
pub(crate) fn connection_caps(
    limits: &crate::config::LimitsConfig,
    open_files: Option<u64>,
) -> ConnectionCaps {
    let max = limits.max_connections.unwrap_or_else(|| {
        open_files.map_or(512, |n| {
            let reserve = (n / 10).max(512.min(n / 2));
            let derived = n.saturating_sub(reserve).clamp(1, MAX_DEFAULT_CONNECTIONS);
            u32::try_from(derived).unwrap_or(u32::MAX)
        })
    });
    let per_address = limits
        .max_connections_per_address
        .unwrap_or(max - max / 4)
        .min(max);
    ConnectionCaps {
        max,
        per_address,
        open_files,
    }
}

/// Raises the soft open-files limit (`RLIMIT_NOFILE`) to the hard one, as
/// a server that holds a socket per client should, and answers the soft
/// limit in force (`u64::MAX` when unlimited); `None` where there is no
/// such limit to read.
fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let now = getrlimit(Resource::Nofile);
        if now.current != now.maximum {
            let raised = Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => {
                    return Some(now.maximum.unwrap_or(u64::MAX));
                }
                // (macOS refuses an unlimited soft limit: the current one stays.)
                Err(e) => tracing::debug!(error = %e, "the open-files limit was not raised"),
            }
        }
        Some(now.current.unwrap_or(u64::MAX))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Connection-level limits against slow and idle clients (slowloris): a cap
/// on open connections and a share of it per client address, a deadline for
/// the first request's head, and one for every request body. HTTP/1
/// keep-alive idleness is hyper's header-read timer (`http_builder` in
/// `serve`).
mod conn {
    use std::collections::HashMap;
    use std::future::Future;
    use std::io;
    use std::net::{IpAddr, Ipv6Addr};
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant};

    use axum::body::Body;
    use axum::http::{Request, Response, StatusCode, header};
    use axum_server::accept::Accept;
    use futures::future::{BoxFuture, Either};
    use http_body::{Frame, SizeHint};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio::net::TcpStream;
    use tokio::sync::{OwnedSemaphorePermit, Semaphore};
    use tokio::time::Sleep;

    /// The acceptor of the main listener (the innermost one under TLS, so
    /// it runs on the raw socket, before the handshake).
    #[derive(Clone, Debug)]
    pub(super) struct Limits {
        permits: Arc<Semaphore>,
        max: u32,
        addresses: Arc<Addresses>,
        first_head: Duration,
        body: Duration,
        refusals: Arc<Refusals>,
        address_refusals: Arc<Refusals>,
    }

    impl Limits {
        pub(super) fn new(
            caps: super::ConnectionCaps,
            proxies: gatehouse_oauth::TrustedProxies,
            first_head: Duration,
            body: Duration,
        ) -> Self {
            Self {
                permits: Arc::new(Semaphore::new(caps.max as usize)),
                max: caps.max,
                addresses: Arc::new(Addresses {
                    share: caps.per_address,
                    proxies,
                    held: Mutex::default(),
                }),
                first_head,
                body,
                refusals: Arc::new(Refusals::new(
                    "connection limit reached: new connections are closed (limits.max_connections)",
                )),
                address_refusals: Arc::new(Refusals::new(
                    "connection limit reached for one address: its new connections are closed \
                     (limits.max_connections_per_address)",
                )),
            }
        }
    }

    /// How many connections each client address holds, each kept within
    /// its share of the cap. Addresses count by network: an IPv4 address
    /// alone, an IPv6 address by its /64 (one host's usual allocation); an
    /// IPv4-mapped IPv6 address as the IPv4 one. A trusted proxy's address
    /// is not limited: every client behind it arrives from it.
    #[derive(Debug)]
    struct Addresses {
        share: u32,
        proxies: gatehouse_oauth::TrustedProxies,
        held: Mutex<HashMap<IpAddr, u32>>,
    }

    /// The network `ip` counts under.
    fn network(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
        }
    }

    impl Addresses {
        /// A place for one more connection from `peer`; `None` when its
        /// network holds its share already. `Some(None)`: not counted.
        fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Option<AddressSlot>> {
            let Some(peer) = peer.filter(|p| !self.proxies.contains(*p)) else {
                return Some(None);
            };
            let key = network(peer);
            let mut held = self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = held.entry(key).or_insert(0);
            if *n >= self.share {
                return None;
            }
            *n += 1;
            Some(Some(AddressSlot {
                addresses: self.clone(),
                key,
            }))
        }
    }

    /// One connection's place in its address's share, given back when the
    /// connection closes.
    #[derive(Debug)]
    struct AddressSlot {
        addresses: Arc<Addresses>,
        key: IpAddr,
    }

    impl Drop for AddressSlot {
        fn drop(&mut self) {
            let mut held = self
                .addresses
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = held.get_mut(&self.key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    held.remove(&self.key);
                }
            }
        }
    }

    impl<S> Accept<TcpStream, S> for Limits {
        type Stream = Limited<TcpStream>;
        type Service = Deadlines<S>;
        type Future = std::future::Ready<io::Result<(Self::Stream, Self::Service)>>;

        fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
            // Over the cap the socket is dropped (closed) at once rather than
            // kept waiting: a waiting socket still holds a descriptor, which
            // is what the cap protects, and axum-server has accepted it
            // already, so it cannot be left in the kernel's backlog.
            let Some(slot) = self.addresses.take(stream.peer_addr().ok().map(|a| a.ip())) else {
                self.address_refusals.note(self.addresses.share);
                return std::future::ready(Err(io::Error::other(
                    "connection limit reached for this address",
                )));
            };
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                self.refusals.note(self.max);
                return std::future::ready(Err(io::Error::other("connection limit reached")));
            };
            // TCP_NODELAY: without it small responses and subscription
            // events wait for Nagle's algorithm (~40 ms).
            if let Err(e) = stream.set_nodelay(true) {
                return std::future::ready(Err(e));
            }
            let served = Arc::new(AtomicBool::new(false));
            std::future::ready(Ok((
                Limited {
                    inner: stream,
                    _permit: permit,
                    _slot: slot,
                    first_head: Some(Box::pin(tokio::time::sleep(self.first_head))),
                    served: served.clone(),
                },
                Deadlines {
                    inner: service,
                    served,
                    body: self.body,
                },
            )))
        }
    }

    /// Counts refused connections; warns at most every 10 s, so a flood
    /// cannot flood the log too.
    #[derive(Debug)]
    struct Refusals {
        /// The warning.
        what: &'static str,
        start: Instant,
        /// Milliseconds after `start` of the last warning; 0: none yet.
        last_warning_ms: AtomicU64,
        count: AtomicU64,
    }

    impl Refusals {
        fn new(what: &'static str) -> Self {
            Self {
                what,
                start: Instant::now(),
                last_warning_ms: AtomicU64::new(0),
                count: AtomicU64::new(0),
            }
        }

        fn note(&self, max: u32) {
            self.count.fetch_add(1, Ordering::Relaxed);
            let now = u64::try_from(self.start.elapsed().as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            let last = self.last_warning_ms.load(Ordering::Relaxed);
            if (last == 0 || now.saturating_sub(last) >= 10_000)
                && self
                    .last_warning_ms
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                let refused = self.count.swap(0, Ordering::Relaxed);
                tracing::warn!(refused, limit = max, "{}", self.what);
            }
        }
    }

    /// An accepted socket: holds its place under the connection cap, and is
    /// failed (so closed) when its first request's head has not arrived by
    /// the deadline. That deadline covers what hyper's own header timer
    /// does not: the TLS handshake, and the wait before the first byte
    /// (hyper-util reads it to tell HTTP/1 from HTTP/2, with no timer).
    #[derive(Debug)]
    pub(super) struct Limited<S> {
        inner: S,
        _permit: OwnedSemaphorePermit,
        /// Its place in its address's share (`None`: not counted).
        _slot: Option<AddressSlot>,
        /// Until the first request's head is in; then dropped, and hyper's
        /// timers and the body deadline take over.
        first_head: Option<Pin<Box<Sleep>>>,
        /// Set by [`Deadlines`] when the connection's first request starts.
        served: Arc<AtomicBool>,
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Limited<S> {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if let Some(deadline) = &mut this.first_head {
                if this.served.load(Ordering::Relaxed) {
                    this.first_head = None;
                } else if deadline.as_mut().poll(cx).is_ready() {
                    tracing::debug!(
                        "connection closed: no request head within header_read_timeout"
                    );
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request head within limits.header_read_timeout",
                    )));
                }
            }
            Pin::new(&mut this.inner).poll_read(cx, buf)
        }
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Limited<S> {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.inner.is_write_vectored()
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
        }
    }

    /// The per-connection service: marks the connection served and gives
    /// every request body a deadline. A body past it ends in an error (the
    /// handler's answer, whatever it is, is then replaced by 408 with
    /// `Connection: close`), not in a request-wide timeout, which would cut
    /// WebSocket and SSE streams.
    #[derive(Clone, Debug)]
    pub(super) struct Deadlines<S> {
        inner: S,
        served: Arc<AtomicBool>,
        body: Duration,
    }

    impl<S, B> tower::Service<Request<B>> for Deadlines<S>
    where
        S: tower::Service<Request<DeadlineBody<B>>, Response = Response<Body>>,
        S::Future: Send + 'static,
        B: http_body::Body + Unpin,
    {
        type Response = Response<Body>;
        type Error = S::Error;
        type Future = Either<S::Future, BoxFuture<'static, Result<Response<Body>, S::Error>>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, req: Request<B>) -> Self::Future {
            if !self.served.load(Ordering::Relaxed) {
                self.served.store(true, Ordering::Relaxed);
            }
            let (parts, body) = req.into_parts();
            if body.is_end_stream() {
                // No body (GET, WebSocket upgrades, SSE): nothing to time,
                // and no timer or allocation on the common path.
                let body = DeadlineBody {
                    inner: body,
                    deadline: None,
                };
                return Either::Left(self.inner.call(Request::from_parts(parts, body)));
            }
            let expired = Arc::new(AtomicBool::new(false));
            let body = DeadlineBody {
                inner: body,
                deadline: Some(Deadline {
                    at: tokio::time::Instant::now() + self.body,
                    sleep: None,
                    expired: expired.clone(),
                }),
            };
            let answer = self.inner.call(Request::from_parts(parts, body));
            let limit = self.body;
            Either::Right(Box::pin(async move {
                let response = answer.await?;
                if expired.load(Ordering::Relaxed) {
                    return Ok(body_timeout(limit));
                }
                Ok(response)
            }))
        }
    }

    /// 408; `Connection: close` because the rest of the body may still be
    /// on its way (hyper closes the connection after this answer).
    fn body_timeout(limit: Duration) -> Response<Body> {
        let mut response = Response::new(Body::from(format!(
            "the request body did not arrive within {} s\n",
            limit.as_secs()
        )));
        *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        response
    }

    /// A request body that fails once its deadline has passed.
    #[derive(Debug)]
    pub(super) struct DeadlineBody<B> {
        inner: B,
        deadline: Option<Deadline>,
    }

    #[derive(Debug)]
    struct Deadline {
        at: tokio::time::Instant,
        /// Made only when the body first waits, so a body already received
        /// costs no timer.
        sleep: Option<Pin<Box<Sleep>>>,
        expired: Arc<AtomicBool>,
    }

    impl<B> http_body::Body for DeadlineBody<B>
    where
        B: http_body::Body + Unpin,
        B::Error: Into<axum::BoxError>,
    {
        type Data = B::Data;
        type Error = axum::BoxError;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            let this = self.get_mut();
            if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
                return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
            }
            let Some(d) = &mut this.deadline else {
                return Poll::Pending;
            };
            let sleep = d
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(d.at)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            d.expired.store(true, Ordering::Relaxed);
            tracing::debug!("request body cut at limits.body_read_timeout");
            Poll::Ready(Some(Err("the request body did not arrive in time".into())))
        }

        fn is_end_stream(&self) -> bool {
            self.inner.is_end_stream()
        }

        fn size_hint(&self) -> SizeHint {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(max: Option<u32>, per_address: Option<u32>, open_files: Option<u64>) -> (u32, u32) {
        let limits = crate::config::LimitsConfig {
            max_connections: max,
            max_connections_per_address: per_address,
            ..Default::default()
        };
        let c = connection_caps(&limits, open_files);
        (c.max, c.per_address)
    }

    #[test]
    fn the_default_caps_follow_the_open_files_limit() {
        // The usual soft limit: half of it kept for the database and files.
        assert_eq!(caps(None, None, Some(1024)), (512, 384));
        // A hard limit of 20,000: 10,000 subscribers from one address fit.
        assert_eq!(caps(None, None, Some(20_000)), (18_000, 13_500));
        assert_eq!(caps(None, None, Some(u64::MAX)), (65_536, 49_152));
        assert_eq!(caps(None, None, None), (512, 384));
        assert_eq!(caps(None, None, Some(10)), (5, 4));
        // What is configured stands; a share above the cap is the cap.
        assert_eq!(caps(Some(100), None, Some(1024)), (100, 75));
        assert_eq!(caps(Some(2), None, None), (2, 2));
        assert_eq!(caps(Some(100), Some(500), None), (100, 100));
        assert_eq!(caps(Some(100), Some(10), None), (100, 10));
    }
}
