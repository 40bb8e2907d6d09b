//! Configuration: defaults, then a TOML file, then `GATEHOUSE_<SECTION>_<KEY>`
//! environment variables, then CLI flags. Unknown keys are errors. Relative
//! paths in the file are relative to the file.

use std::fmt;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Profile, Provider};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The whole configuration. Every key is optional.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// The database: `database = "sqlite://PATH"` (or `postgres://...`),
    /// or a `[database]` section with `url` and `statement_timeout`.
    pub database: DatabaseConfig,
    /// Schema files or directories.
    pub schema: Vec<PathBuf>,
    /// Issuer of tokens and the API's own audience. Default: `http://<listen>`.
    pub issuer: Option<String>,
    /// Path prefix for every route (e.g. `/api`); empty serves at the root.
    pub base_path: String,
    /// Proxies (CIDRs or addresses) whose `Forwarded` / `X-Forwarded-*`
    /// headers are believed for the client's address, scheme and host.
    /// Empty (the default): the headers are ignored.
    pub trusted_proxies: Vec<String>,
    /// The forwarding header family those proxies write and that is read:
    /// `X-Forwarded-For` (with `-Proto` and `-Host`; the default) or
    /// `Forwarded` (RFC 7239). The other family is ignored, as the proxy
    /// passes it through from the client.
    pub forwarded_header: String,
    /// Token lifetimes and signing.
    pub tokens: TokensConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Resource protection.
    pub auth: AuthConfig,
    /// Limits of WebSocket and SSE subscriptions.
    pub subscriptions: SubscriptionsConfig,
    /// Declarative registrations applied at every start.
    pub bootstrap: BootstrapConfig,
    /// On SIGTERM/SIGINT, the longest time until the process exits:
    /// in-flight requests get this long (less a moment to close the store).
    pub shutdown_timeout: Seconds,
    /// HTTPS.
    pub tls: TlsConfig,
    /// Prometheus metrics.
    pub metrics: MetricsConfig,
    /// Database connection pool.
    pub store: StoreConfig,
    /// Browser apps on other origins.
    pub cors: CorsConfig,
    /// Outgoing e-mail (verification, password reset, notices): off
    /// without `email.transport`.
    pub email: EmailConfig,
    /// Threads that run requests (the async runtime's workers). Default:
    /// one per CPU core (`docs/deployment.md`, "Worker threads").
    pub workers: Option<u16>,
    /// `[[webhooks]]`: receivers of committed changes
    /// (`docs/design/webhooks.md`).
    pub webhooks: Vec<WebhookConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            database: DatabaseConfig::default(),
            schema: vec![PathBuf::from("schema")],
            issuer: None,
            base_path: String::new(),
            trusted_proxies: Vec::new(),
            forwarded_header: gatehouse_oauth::ForwardedHeader::default()
                .as_str()
                .to_string(),
            tokens: TokensConfig::default(),
            limits: LimitsConfig::default(),
            auth: AuthConfig::default(),
            subscriptions: SubscriptionsConfig::default(),
            bootstrap: BootstrapConfig::default(),
            shutdown_timeout: Seconds(10),
            tls: TlsConfig::default(),
            metrics: MetricsConfig::default(),
            store: StoreConfig::default(),
            cors: CorsConfig::default(),
            email: EmailConfig::default(),
            workers: None,
            webhooks: Vec::new(),
        }
    }
}

/// `[database]`: which database, and how long a statement may take. The
/// file may also give the URL alone, `database = "URL"` (as
/// `GATEHOUSE_DATABASE` and `--database` do): it is `database.url`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://PATH` or `postgres://...`.
    pub url: String,
    /// How long one statement may take (a lock wait included) before it
    /// is cancelled and the request fails with 503 (`TIMEOUT`): every
    /// request's wait on the database is bounded by it
    /// (`docs/design/database.md`, "Deadlines and cancellation").
    pub statement_timeout: Seconds,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://data/gatehouse.db".into(),
            statement_timeout: Seconds(30),
        }
    }
}

/// `[cors]`: which browser origins may call the service
/// (`docs/design/browser-apps.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins (`scheme://host[:port]`, exactly as browsers send them)
    /// whose pages get CORS answers and may call the token and revocation
    /// endpoints; `["*"]` for any origin (no cookies are involved: tokens
    /// travel in `Authorization`). Empty (the default): no CORS.
    pub allowed_origins: Vec<String>,
    /// How long browsers may cache a preflight answer (`Access-Control-Max-Age`).
    pub max_age: Seconds,
}

impl Default for CorsConfig {
    fn default() -> Self {
        Self {
            allowed_origins: Vec::new(),
            max_age: Seconds(600),
        }
    }
}

/// `[email]`: where outgoing mail goes. Messages are
/// written to the outbox in the transaction that needs them and sent by a
/// background worker (`docs/design/outbox.md`).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EmailConfig {
    /// `"smtp"` or `"file"`; unset, e-mail is off.
    pub transport: Option<String>,
    /// smtp: `smtp://user:pass@host:587` (STARTTLS required),
    /// `smtps://user:pass@host:465` (implicit TLS) or
    /// `smtp://host:port?tls=off` (clear text); file: a directory,
    /// relative to the config file, receiving one `.eml` file per message.
    pub url: Option<String>,
    /// The `From` of every message (`"App <no-reply@example.com>"`).
    pub from: Option<String>,
}

impl EmailConfig {
    /// The checked settings, `None` when e-mail is off.
    pub fn settings(&self) -> Result<Option<gatehouse_mail::MailSettings>, String> {
        let Some(transport) = self.transport.as_deref() else {
            if self.url.is_some() || self.from.is_some() {
                return Err("`email.transport`: set it to \"smtp\" or \"file\" to send e-mail (or remove `email.url` and `email.from`)".into());
            }
            return Ok(None);
        };
        let url = self.url.as_deref().unwrap_or("");
        let Some(from) = self.from.as_deref() else {
            return Err(
                "`email.from`: e-mail needs a sender address (e.g. \"App <no-reply@example.com>\")"
                    .into(),
            );
        };
        gatehouse_mail::MailSettings::parse(transport, url, from, Path::new(""))
            .map(Some)
            .map_err(|e| format!("`email.{}`: {e}", e.key()))
    }
}

/// The SMTP password stays out of logs and error messages.
impl fmt::Debug for EmailConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = match (self.transport.as_deref(), self.url.as_deref()) {
            (Some("smtp"), Some(u)) => gatehouse_mail::SmtpUrl::parse(u)
                .map(|u| u.to_string())
                .unwrap_or_else(|_| "<redacted>".into()),
            (_, u) => u.unwrap_or("").to_string(),
        };
        f.debug_struct("EmailConfig")
            .field("transport", &self.transport)
            .field("url", &url)
            .field("from", &self.from)
            .finish()
    }
}

/// One `[[webhooks]]` entry: a receiver of the committed changes of some
/// types (`docs/design/webhooks.md`). Its `where` is checked
/// against the schema when the server starts.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Its name (letters, digits, `_`, `-`): the CLI and the metrics name
    /// it, its outbox channel is `webhook:<id>`.
    pub id: String,
    /// Where deliveries are POSTed: an http:// or https:// URL.
    pub url: String,
    /// The changes it receives: `Type.created`, `Type.updated`,
    /// `Type.deleted`, or `Type.*` for the three.
    pub events: Vec<String>,
    /// Only rows matching this filter, a GraphQL object literal in the
    /// filter language (`'{status: DONE}'`): an update matches on its new
    /// row, a delete on its old one.
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// The signing secret, `whsec_` and base64 (Standard Webhooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The environment variable holding the secret instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// How long one delivery attempt may take.
    #[serde(default = "default_webhook_timeout")]
    pub timeout: Seconds,
    /// How long after the change a delivery is retried before it is kept
    /// as failed.
    #[serde(default = "default_webhook_max_age")]
    pub max_age: Seconds,
    /// Deliveries in flight at most, per instance.
    #[serde(default = "default_webhook_concurrency")]
    pub concurrency: usize,
}

fn default_webhook_concurrency() -> usize {
    gatehouse_webhooks::DEFAULT_CONCURRENCY
}

fn default_webhook_timeout() -> Seconds {
    Seconds(10)
}

fn default_webhook_max_age() -> Seconds {
    Seconds(24 * 3600)
}

impl WebhookConfig {
    /// The definition to bind, its secret read from `env` when given by
    /// `secret_env`.
    pub fn definition(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<gatehouse_webhooks::Definition, String> {
        let secret = match (&self.secret, &self.secret_env) {
            (Some(s), None) => s.clone(),
            (None, Some(var)) => env(var).ok_or_else(|| {
                format!("`secret_env`: the environment variable {var} is not set")
            })?,
            (Some(_), Some(_)) => return Err("set `secret` or `secret_env`, not both".into()),
            (None, None) => {
                return Err(
                    "`secret`: a webhook signs its deliveries: set `secret` (`whsec_` and base64) or `secret_env`"
                        .into(),
                );
            }
        };
        Ok(gatehouse_webhooks::Definition {
            id: self.id.clone(),
            url: self.url.clone(),
            events: self.events.clone(),
            filter: self.filter.clone(),
            secret,
            timeout: std::time::Duration::from_secs(self.timeout.0),
            max_age: std::time::Duration::from_secs(self.max_age.0),
            concurrency: self.concurrency,
        })
    }

    /// How errors about it begin: `` `webhooks[0]` (id `done`) ``.
    pub fn name(&self, index: usize) -> String {
        format!("`webhooks[{index}]` (id `{}`)", self.id)
    }
}

/// The secret stays out of logs.
impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("events", &self.events)
            .field("where", &self.filter)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_env", &self.secret_env)
            .field("timeout", &self.timeout)
            .field("max_age", &self.max_age)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// `[tls]`: serve HTTPS (HTTP/1.1 and HTTP/2) when both are set. SIGHUP
/// reloads both files without dropping connections.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

/// `[metrics]`: where `GET /metrics` is served.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// A separate address (e.g. `127.0.0.1:9090`, plain HTTP) serving only
    /// `/metrics`; when set, the main address does not serve it.
    pub listen: Option<String>,
}

/// `[store]`: the database connection pool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Most connections (default: 10 on PostgreSQL, at least 3; 4 SQLite
    /// readers).
    pub max_connections: Option<u32>,
    /// How long a request waits for a database connection before failing
    /// with 503; short, so that a database outage fails fast.
    pub acquire_timeout: Seconds,
    /// SQLite: fsync every commit (`synchronous=FULL`) so acknowledged
    /// writes survive a power loss, at a large cost in write throughput.
    /// Off, commits survive a killed process (`synchronous=NORMAL`, WAL).
    pub sqlite_sync_every_commit: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            max_connections: None,
            acquire_timeout: Seconds(3),
            sqlite_sync_every_commit: false,
        }
    }
}

/// `[tokens]`: lifetimes and signing algorithm.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TokensConfig {
    /// Lifetime of an access token.
    pub access_ttl: Seconds,
    /// Lifetime of an access token whose scope includes `offline_access`.
    pub offline_access_ttl: Seconds,
    /// Lifetime of a refresh token.
    pub refresh_ttl: Seconds,
    /// How long the immediate predecessor of a rotated refresh token stays usable.
    pub refresh_reuse_grace: Seconds,
    /// JWS algorithm of access tokens.
    pub signing_alg: SigningAlg,
    /// How long a client read for authentication is reused; a secret
    /// rotated or a client removed by another process or instance is
    /// noticed within this time. `0` reads the client on every request.
    pub client_cache_ttl: Seconds,
    /// How long an access token found live is trusted without reading its
    /// record again; a revocation by another process or instance takes
    /// effect within this time. `0` reads the record on every validation.
    pub status_cache_ttl: Seconds,
}

impl Default for TokensConfig {
    fn default() -> Self {
        Self {
            access_ttl: Seconds(3600),
            offline_access_ttl: Seconds(30 * 86400),
            refresh_ttl: Seconds(30 * 86400),
            refresh_reuse_grace: Seconds(0),
            signing_alg: SigningAlg::EdDsa,
            client_cache_ttl: Seconds(5),
            status_cache_ttl: Seconds(2),
        }
    }
}

/// Signing algorithms for access tokens.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum SigningAlg {
    /// Ed25519.
    #[serde(rename = "EdDSA")]
    EdDsa,
    /// ECDSA P-256 with SHA-256.
    #[serde(rename = "ES256")]
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    #[serde(rename = "RS256")]
    Rs256,
}

impl From<SigningAlg> for gatehouse_auth::SigningAlg {
    fn from(alg: SigningAlg) -> Self {
        match alg {
            SigningAlg::EdDsa => gatehouse_auth::SigningAlg::EdDsa,
            SigningAlg::Es256 => gatehouse_auth::SigningAlg::Es256,
            SigningAlg::Rs256 => gatehouse_auth::SigningAlg::Rs256,
        }
    }
}

/// `[limits]`: request limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Page size when a list request gives none.
    pub default_page_size: u32,
    /// Largest page a list request may ask for; more is an error, not a silent cut.
    pub max_page_size: u32,
    /// Deepest GraphQL selection accepted.
    pub max_depth: u32,
    /// Highest GraphQL complexity accepted (a list field multiplies its
    /// selection's cost by its page size).
    pub max_complexity: u32,
    /// Most field selections one GraphQL document may contain, as written.
    pub max_selections: u32,
    /// Largest request body, in bytes.
    pub max_body_bytes: u64,
    /// Token endpoint requests per second per client (and per address).
    pub token_rate_per_second: u32,
    /// Token endpoint burst per client (and per address).
    pub token_rate_burst: u32,
    /// OAuth 1.0: how far `oauth_timestamp` may be from the server's clock.
    pub oauth1_timestamp_window: Seconds,
    /// How long a new connection may take, TLS handshake included, to
    /// deliver its first request's head (request line and headers); then it
    /// is closed. Bounds idle and slowly-talking sockets (slowloris).
    pub header_read_timeout: Seconds,
    /// How long a request body may take to arrive completely, counted from
    /// its head; then the answer is 408 and the connection is closed.
    pub body_read_timeout: Seconds,
    /// HTTP/1.1 keep-alive: how long a connection may wait, after a
    /// response, for the next request's head to be complete; then it is
    /// closed. WebSocket and SSE streams are requests in flight, not idle.
    pub idle_timeout: Seconds,
    /// Client connections (HTTP, HTTPS, WebSocket) open at once; beyond it
    /// a new connection is closed as soon as it is accepted. Unset: derived
    /// from the open-files limit (`serve::connection_caps`).
    pub max_connections: Option<u32>,
    /// Of those, the most one client address (an IPv6 /64) may hold open;
    /// a trusted proxy's address is not limited. Unset: three quarters of
    /// `max_connections`.
    pub max_connections_per_address: Option<u32>,
    /// Most rows one bulk update or delete (`update<Types>`,
    /// `delete<Types>`) may change; a request that matches more rows the
    /// caller may change is refused before anything is written.
    pub max_bulk_rows: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        // The query limits' defaults are GraphQL's own: one place decides them.
        let graphql = gatehouse_graphql::GraphqlOptions::default();
        Self {
            default_page_size: graphql.default_page_size,
            max_page_size: graphql.max_page_size,
            max_depth: u32::try_from(graphql.max_depth).unwrap_or(u32::MAX),
            max_complexity: u32::try_from(graphql.max_complexity).unwrap_or(u32::MAX),
            max_selections: u32::try_from(graphql.max_selections).unwrap_or(u32::MAX),
            max_body_bytes: 1024 * 1024,
            token_rate_per_second: 20,
            token_rate_burst: 40,
            oauth1_timestamp_window: Seconds(300),
            // A client sends its headers in one go; 10 s leaves room for a
            // TLS handshake over a slow link (hyper's default is 30 s,
            // nginx's 60 s: generous to attackers, never needed by clients).
            header_read_timeout: Seconds(10),
            // The largest body (1 MiB) at 35 KB/s; nginx allows 60 s per
            // read, with no total bound.
            body_read_timeout: Seconds(30),
            // nginx's keepalive_timeout: longer than the idle timeouts of
            // common load balancers (AWS ALB and nginx upstreams: 60 s), so
            // the balancer, not gatehouse, closes a pooled connection and
            // never sends a request on one being closed.
            idle_timeout: Seconds(75),
            // Derived at start from the open-files limit, which the server
            // raises to its hard limit (`serve::connection_caps`).
            max_connections: None,
            max_connections_per_address: None,
            max_bulk_rows: gatehouse_store::DEFAULT_MAX_BULK_ROWS,
        }
    }
}

/// `[subscriptions]`: limits and timers of WebSocket and SSE subscriptions
/// (`docs/design/subscriptions.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SubscriptionsConfig {
    /// How long a WebSocket may stay open without `connection_init` (then close 4408).
    pub init_timeout: Seconds,
    /// Interval of the legacy protocol's `ka` messages and of SSE keep-alive comments.
    pub keepalive: Seconds,
    /// Operations one WebSocket may run at once; one more gets an `error` message.
    pub max_per_connection: u32,
    /// Messages waiting for a client to read them; a WebSocket whose queue
    /// is full is closed with 1013.
    pub queue_capacity: u32,
    /// How often a stream's credential is validated again, to notice revocation.
    pub recheck_interval: Seconds,
}

impl Default for SubscriptionsConfig {
    fn default() -> Self {
        Self {
            init_timeout: Seconds(10),
            keepalive: Seconds(15),
            max_per_connection: 100,
            queue_capacity: 256,
            recheck_interval: Seconds(60),
        }
    }
}

/// `[auth]`: how resources are protected.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Serve queries without credentials.
    pub anonymous_read: bool,
    /// Resource-server-only mode: validate bearer tokens through this RFC 7662
    /// introspection endpoint of another authorization server instead of
    /// this instance's own signing keys.
    pub introspection_url: Option<String>,
    /// This service's client id at that authorization server.
    pub introspection_client_id: Option<String>,
    /// Its client secret (prefer `GATEHOUSE_AUTH_INTROSPECTION_CLIENT_SECRET`).
    pub introspection_client_secret: Option<String>,
    /// How long an active introspection answer is trusted; revocations take
    /// effect within this time. `0` calls the endpoint on every request.
    pub introspection_cache_ttl: Seconds,
    /// The `aud` a token must carry in introspection mode; by default the
    /// authorization server's own issuer (what its tokens for the API carry).
    pub introspection_audience: Option<String>,
    /// Whether the sign-in page of the authorization code flow offers
    /// self-service sign-up (passwords of at least 12 characters, throttled
    /// like failed logins).
    pub sign_up: bool,
    /// Scopes a user who signed up gets.
    pub sign_up_scopes: Vec<String>,
    /// The file holding the secret that encrypts signing keys at rest, read
    /// (or created, mode 0600) when `GATEHOUSE_SECRET` is unset. Relative
    /// paths are relative to the config file's directory. Default:
    /// `gatehouse.key` beside a SQLite database file, otherwise
    /// `data/gatehouse.key` beside the config file (in the working
    /// directory without one).
    pub key_file: Option<PathBuf>,
    /// `[auth.email]`: the e-mail flows (verification, password reset),
    /// on when `[email]` is set and the account type has an `email` field.
    pub email: AuthEmailConfig,
    /// `[[auth.providers]]`: other identity providers the sign-in page
    /// offers; they need an account type.
    pub providers: Vec<ProviderEntry>,
}

/// One `[[auth.providers]]` entry: an OpenID Connect provider or GitHub
/// (`docs/design/federation.md`).
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// Letters, digits, `_`, `-`: in the callback URL
    /// (`{issuer}/auth/providers/{id}/callback`) and the `idp` claim.
    pub id: String,
    /// Shown on the button ("Continue with <name>") and its pages.
    pub name: String,
    /// `"oidc"` or `"github"`.
    pub kind: ProviderKindEntry,
    /// OpenID Connect: the issuer (discovery at
    /// `{issuer}/.well-known/openid-configuration`); `https`, or `http`
    /// on a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// This server's client id at the provider.
    pub client_id: String,
    /// Its client secret there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The environment variable holding the secret instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// Scopes asked for: by default `["openid", "email", "profile"]`
    /// (OpenID Connect) or `["read:user", "user:email"]` (GitHub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// Whether the provider's "verified" is taken for an address.
    #[serde(default)]
    pub trust_email: bool,
    /// What a new identity whose address matches an account does.
    #[serde(default)]
    pub link: LinkModeEntry,
    /// GitHub's web address (tests and GitHub Enterprise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_url: Option<String>,
    /// GitHub's API address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_api_url: Option<String>,
}

/// `[[auth.providers]] kind`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKindEntry {
    /// Any OpenID Connect provider.
    Oidc,
    /// GitHub (OAuth 2.0 and its REST API).
    Github,
}

/// `[[auth.providers]] link`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LinkModeEntry {
    /// Linked at once when trusted, verified on both sides.
    VerifiedEmail,
    /// Linked after the account's password.
    #[default]
    Confirm,
    /// Never linked by address.
    Never,
}

impl ProviderEntry {
    /// How errors about it begin: `` `auth.providers[0]` (id `corp`) ``.
    pub fn name_at(&self, index: usize) -> String {
        format!("`auth.providers[{index}]` (id `{}`)", self.id)
    }

    /// The endpoints' settings, its secret read from `env` when given by
    /// `client_secret_env`; every problem of the entry as one message.
    pub fn provider(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<gatehouse_oauth::ProviderConfig, String> {
        if self.id.is_empty()
            || self.id.len() > 64
            || !self
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err("`id`: 1 to 64 letters, digits, `_` or `-`".into());
        }
        if self.name.trim().is_empty() {
            return Err("`name`: the button needs a name".into());
        }
        if self.client_id.is_empty() {
            return Err("`client_id` must not be empty".into());
        }
        let client_secret = match (&self.client_secret, &self.client_secret_env) {
            (Some(s), None) if !s.is_empty() => s.clone(),
            (None, Some(var)) => env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                format!("`client_secret_env`: the environment variable {var} is not set")
            })?,
            (Some(_), Some(_)) => {
                return Err("set `client_secret` or `client_secret_env`, not both".into());
            }
            _ => return Err("`client_secret`: set it or `client_secret_env`".into()),
        };
        let kind = match self.kind {
            ProviderKindEntry::Oidc => {
                if self.github_url.is_some() || self.github_api_url.is_some() {
                    return Err(
                        "`github_url` and `github_api_url` are for `kind = \"github\"`".into(),
                    );
                }
                let Some(issuer) = &self.issuer else {
                    return Err("`issuer`: an OpenID Connect provider needs its issuer".into());
                };
                check_provider_url("issuer", issuer)?;
                // Kept as written: the discovery document must name the
                // very same issuer (some end in `/`).
                gatehouse_oauth::ProviderKind::Oidc {
                    issuer: issuer.clone(),
                }
            }
            ProviderKindEntry::Github => {
                if self.issuer.is_some() {
                    return Err("`issuer` is for `kind = \"oidc\"`".into());
                }
                let web_url = self
                    .github_url
                    .clone()
                    .unwrap_or_else(|| "https://github.com".into());
                let api_url = self
                    .github_api_url
                    .clone()
                    .unwrap_or_else(|| "https://api.github.com".into());
                check_provider_url("github_url", &web_url)?;
                check_provider_url("github_api_url", &api_url)?;
                gatehouse_oauth::ProviderKind::Github {
                    web_url: web_url.trim_end_matches('/').to_string(),
                    api_url: api_url.trim_end_matches('/').to_string(),
                }
            }
        };
        let scopes = match (&self.scopes, self.kind) {
            (Some(s), _) => s.clone(),
            (None, ProviderKindEntry::Oidc) => vec!["email".into(), "profile".into()],
            (None, ProviderKindEntry::Github) => vec!["read:user".into(), "user:email".into()],
        };
        Ok(gatehouse_oauth::ProviderConfig {
            id: self.id.clone(),
            name: self.name.clone(),
            kind,
            client_id: self.client_id.clone(),
            client_secret,
            // `openid` is always asked of an OpenID Connect provider.
            scopes: scopes.into_iter().filter(|s| s != "openid").collect(),
            trust_email: self.trust_email,
            link: match self.link {
                LinkModeEntry::VerifiedEmail => gatehouse_auth::LinkMode::VerifiedEmail,
                LinkModeEntry::Confirm => gatehouse_auth::LinkMode::Confirm,
                LinkModeEntry::Never => gatehouse_auth::LinkMode::Never,
            },
        })
    }
}

/// A provider's URL: `https`, or `http` on a loopback address only (a
/// token, a code and a client secret travel there).
fn check_provider_url(key: &str, value: &str) -> Result<(), String> {
    let url = url::Url::parse(value).map_err(|e| format!("`{key}`: {value:?}: {e}"))?;
    let loopback = match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(format!(
            "`{key}`: {value:?} is plain http on a host that is not loopback: use https"
        )),
        _ => Err(format!("`{key}`: {value:?} must be an https URL")),
    }
}

/// The secret stays out of logs.
impl fmt::Debug for ProviderEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderEntry")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_secret_env", &self.client_secret_env)
            .field("scopes", &self.scopes)
            .field("trust_email", &self.trust_email)
            .field("link", &self.link)
            .field("github_url", &self.github_url)
            .field("github_api_url", &self.github_api_url)
            .finish()
    }
}

/// `[auth.email]`: how the e-mail flows behave.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthEmailConfig {
    /// `"off"`, `"optional"` (sign-up creates the account at once,
    /// unverified) or `"required"` (no account before its address is
    /// confirmed).
    pub verification: VerificationMode,
    /// How long a verification link works.
    pub verify_ttl: Seconds,
    /// How long a password reset link works.
    pub reset_ttl: Seconds,
    /// How long a code (of any flow) works.
    pub code_ttl: Seconds,
}

impl Default for AuthEmailConfig {
    fn default() -> Self {
        Self {
            verification: VerificationMode::Optional,
            verify_ttl: Seconds(24 * 3600),
            reset_ttl: Seconds(30 * 60),
            code_ttl: Seconds(15 * 60),
        }
    }
}

/// `[auth.email] verification`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerificationMode {
    /// No verification message.
    Off,
    /// The account exists at once; a verification message is sent.
    #[default]
    Optional,
    /// No account before the address is confirmed.
    Required,
}

impl From<VerificationMode> for gatehouse_auth::Verification {
    fn from(v: VerificationMode) -> Self {
        match v {
            VerificationMode::Off => gatehouse_auth::Verification::Off,
            VerificationMode::Optional => gatehouse_auth::Verification::Optional,
            VerificationMode::Required => gatehouse_auth::Verification::Required,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            anonymous_read: false,
            introspection_url: None,
            introspection_client_id: None,
            introspection_client_secret: None,
            introspection_cache_ttl: Seconds(30),
            introspection_audience: None,
            sign_up: false,
            sign_up_scopes: Vec::new(),
            key_file: None,
            email: AuthEmailConfig::default(),
            providers: Vec::new(),
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("anonymous_read", &self.anonymous_read)
            .field("introspection_url", &self.introspection_url)
            .field("introspection_client_id", &self.introspection_client_id)
            .field("introspection_cache_ttl", &self.introspection_cache_ttl)
            .field("introspection_audience", &self.introspection_audience)
            .field("sign_up", &self.sign_up)
            .field("sign_up_scopes", &self.sign_up_scopes)
            .field("key_file", &self.key_file)
            .field("email", &self.email)
            .field("providers", &self.providers)
            .finish_non_exhaustive()
    }
}

/// `[[bootstrap.*]]`: registrations created or updated at every start.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BootstrapConfig {
    /// OAuth 2.0 clients.
    pub clients: Vec<BootstrapClient>,
    /// Resource owners.
    pub users: Vec<BootstrapUser>,
    /// OAuth 1.0 consumers.
    pub consumers: Vec<BootstrapConsumer>,
    /// Starter data: rows inserted at start into types that have none.
    pub rows: Vec<BootstrapRow>,
}

/// One `[[bootstrap.rows]]` entry: a row of starter data. At every start,
/// the entries of a type are inserted when that type has no rows at all,
/// and skipped otherwise (so rows changed or deleted later stay so as long
/// as one row is left).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BootstrapRow {
    /// The type (e.g. `Author`).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Values by field name; a to-one relation takes the referenced row's
    /// id. Give `id` to let other rows refer to this one.
    pub values: serde_json::Map<String, serde_json::Value>,
}

/// One `[[bootstrap.clients]]` entry.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BootstrapClient {
    /// Client id.
    pub client_id: String,
    /// Client secret (stored hashed). Required unless `public`; a public
    /// client has none.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Grant types the client may use (`authorization_code`, `password`,
    /// `client_credentials`, `refresh_token`, token exchange).
    #[serde(default)]
    pub grants: Vec<String>,
    /// Scopes the client may obtain.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Audiences (targets) the client may ask for in a token exchange.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Redirect URIs of the authorization code flow, matched exactly
    /// (loopback `http://127.0.0.1` / `[::1]`: any port).
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// A public client (single-page or native app): no secret, PKCE.
    #[serde(default)]
    pub public: bool,
    /// A first-party client: the sign-in flow shows no consent page.
    #[serde(default)]
    pub first_party: bool,
    /// OpenID Connect `id_token_signed_response_alg`: the algorithm of the
    /// client's ID tokens (`RS256`, `EdDSA` or `ES256`). Unset: RS256.
    #[serde(default)]
    pub id_token_signed_response_alg: Option<SigningAlg>,
}

impl fmt::Debug for BootstrapClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapClient")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("grants", &self.grants)
            .field("scopes", &self.scopes)
            .field("audiences", &self.audiences)
            .field("redirect_uris", &self.redirect_uris)
            .field("public", &self.public)
            .field("first_party", &self.first_party)
            .field(
                "id_token_signed_response_alg",
                &self.id_token_signed_response_alg,
            )
            .finish()
    }
}

/// One `[[bootstrap.users]]` entry.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BootstrapUser {
    /// User name.
    pub username: String,
    /// Password (stored as an argon2id hash).
    pub password: String,
    /// Scopes the user may grant.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Custom claims carried by the user's access tokens (`{ org = "acme" }`:
    /// strings, numbers or booleans). They replace the stored ones at every
    /// start; none configured means none kept.
    #[serde(default)]
    pub claims: serde_json::Map<String, serde_json::Value>,
}

impl fmt::Debug for BootstrapUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapUser")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("claims", &self.claims)
            .finish()
    }
}

/// One `[[bootstrap.consumers]]` entry.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BootstrapConsumer {
    /// Consumer key.
    pub key: String,
    /// Consumer secret.
    pub secret: String,
    /// Scopes the consumer may obtain (default: `read`).
    #[serde(default = "default_consumer_scopes")]
    pub scopes: Vec<String>,
}

fn default_consumer_scopes() -> Vec<String> {
    vec!["read".to_string()]
}

impl fmt::Debug for BootstrapConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapConsumer")
            .field("key", &self.key)
            .field("secret", &"<redacted>")
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// A duration written as `"30s"`, `"15m"`, `"1h"`, `"30d"` (any form
/// [`parse_duration`] reads) or integer seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub u64);

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Seconds(n)),
            Raw::Text(t) => parse_duration(&t)
                .map(Seconds)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Parses a whole number of seconds: `humantime`'s forms (`"30s"`, `"15m"`,
/// `"1h 30m"`, `"30d"`, `"2w"`) or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse()
            .map_err(|_| format!("duration {text:?} is too large"));
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!(
            "invalid duration {text:?} ({e}): expected e.g. \"30s\", \"15m\", \"1h\", \"30d\" or seconds"
        )
    })?;
    if d.subsec_nanos() != 0 {
        return Err(format!("invalid duration {text:?}: use whole seconds"));
    }
    Ok(d.as_secs())
}

/// Values given on the command line; they win over everything else.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--database`.
    pub database: Option<String>,
    /// `--schema` (repeatable).
    pub schema: Vec<PathBuf>,
}

/// Where the configuration came from, for messages.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The merged configuration, paths resolved.
    pub config: Config,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

const ENV_PREFIX: &str = "GATEHOUSE_";
/// Keys whose default is "unset" (absent from the serialized defaults):
/// top-level (`issuer`) or in a section (`tls.cert`).
const OPTIONAL_KEYS: [&str; 12] = [
    "issuer",
    "email.transport",
    "email.url",
    "email.from",
    "auth.key_file",
    "workers",
    "tls.cert",
    "tls.key",
    "metrics.listen",
    "store.max_connections",
    "limits.max_connections",
    "limits.max_connections_per_address",
];
const SECTIONS: [&str; 10] = [
    "database",
    "email",
    "tokens",
    "limits",
    "auth",
    "tls",
    "metrics",
    "store",
    "subscriptions",
    "cors",
];
/// Keys whose environment variable may be a comma-separated list
/// (`GATEHOUSE_SCHEMA=a,b`), by section (`""` for top-level keys).
const LIST_KEYS: [(&str, &str); 3] = [
    ("", "schema"),
    ("", "trusted_proxies"),
    ("cors", "allowed_origins"),
];

/// Loads the configuration: `file` if given (it must exist), else
/// `./gatehouse.toml` when present; then the environment; then `cli`.
pub fn load(file: Option<&Path>, cli: &CliOverrides) -> Result<Loaded, String> {
    load_with_env(file, cli, std::env::vars())
}

/// [`load`] with an explicit environment (tests).
pub fn load_with_env(
    file: Option<&Path>,
    cli: &CliOverrides,
    env: impl Iterator<Item = (String, String)>,
) -> Result<Loaded, String> {
    let file = match file {
        Some(f) => {
            if !f.is_file() {
                return Err(format!("{}: config file not found", f.display()));
            }
            Some(f.to_path_buf())
        }
        None => {
            let default = PathBuf::from("gatehouse.toml");
            default.is_file().then_some(default)
        }
    };

    let mut figment = Figment::from(Serialized::defaults(Config::default()));
    if let Some(f) = &file {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let data = Toml::string(&text)
            .data()
            .map_err(|e| format!("{}: {e}", f.display()))?;
        let mut file_dict = data.get(&Profile::Default).cloned().unwrap_or_default();
        // `database = "URL"` is the `[database]` section's `url`.
        if let Some(url) = file_dict.get("database").and_then(|v| v.as_str()) {
            let section = Dict::from([("url".to_string(), Value::from(url.to_string()))]);
            file_dict.insert("database".into(), Value::from(section));
        }
        let base = f.parent().unwrap_or(Path::new(""));
        resolve_relative(&mut file_dict, base);
        figment = figment.merge(Serialized::defaults(file_dict));
    }

    figment = figment.merge(EnvProvider::new(env));

    if let Some(l) = &cli.listen {
        figment = figment.merge(Serialized::default("listen", l));
    }
    if let Some(d) = &cli.database {
        figment = figment.merge(Serialized::default("database.url", d));
    }
    if !cli.schema.is_empty() {
        figment = figment.merge(Serialized::default("schema", &cli.schema));
    }

    let config: Config = figment.extract().map_err(|e| {
        let prefix = file
            .as_ref()
            .map(|f| format!("{}: ", f.display()))
            .unwrap_or_default();
        let all: Vec<String> = e.into_iter().map(|e| describe(&e)).collect();
        format!("{prefix}{}", all.join("; "))
    })?;
    let mut config = config;
    if config.auth.key_file.is_none() {
        let base = file
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(""));
        config.auth.key_file = Some(default_key_file(&config.database.url, base));
    }
    validate(&config)?;
    Ok(Loaded { config, file })
}

/// Where the key-encryption secret lives unless `auth.key_file` says:
/// `gatehouse.key` beside a SQLite database file, otherwise
/// `data/gatehouse.key` beside the config file (`base`), so a server started
/// from another working directory finds the same file instead of creating
/// a stray one.
fn default_key_file(database: &str, base: &Path) -> PathBuf {
    match database.strip_prefix("sqlite://") {
        Some(db) if !db.is_empty() && db != ":memory:" => Path::new(db)
            .parent()
            .map(|p| p.join("gatehouse.key"))
            .unwrap_or_else(|| PathBuf::from("gatehouse.key")),
        _ => base.join("data").join("gatehouse.key"),
    }
}

fn describe(e: &figment::Error) -> String {
    let mut s = String::new();
    let path = match &e.kind {
        // The path ends with the unknown key, which the message names.
        figment::error::Kind::UnknownField(..) => &e.path[..e.path.len().saturating_sub(1)],
        _ => &e.path[..],
    };
    if !path.is_empty() {
        s.push_str(&format!("`{}`: ", path.join(".")));
    }
    match &e.kind {
        // figment's own text quotes the list of keys inside quotes
        // (``expected `one of `a`, `b``"): one key to try reads better.
        figment::error::Kind::UnknownField(found, expected) => {
            s.push_str(&format!("unknown key `{found}`"));
            if let Some(c) = closest(found, expected.iter().copied()) {
                s.push_str(&format!("; did you mean `{c}`?"));
            }
        }
        kind => s.push_str(&kind.to_string()),
    }
    if let Some(md) = &e.metadata
        && md.name.contains("environment")
    {
        s.push_str(" (from the environment)");
    }
    s
}

/// Rewrites `schema` entries and a relative `sqlite://` path so they are
/// relative to the config file's directory.
fn resolve_relative(dict: &mut Dict, base: &Path) {
    if base.as_os_str().is_empty() {
        return;
    }
    if let Some(Value::Array(tag, items)) = dict.get("schema").cloned() {
        let items = items
            .into_iter()
            .map(|v| match v.as_str() {
                Some(p) if Path::new(p).is_relative() => {
                    Value::from(base.join(p).display().to_string())
                }
                _ => v,
            })
            .collect();
        dict.insert("schema".into(), Value::Array(tag, items));
    } else if let Some(p) = dict
        .get("schema")
        .and_then(|v| v.as_str())
        .map(str::to_string)
    {
        // A single string is accepted as a one-element list.
        let p = if Path::new(&p).is_relative() {
            base.join(&p).display().to_string()
        } else {
            p
        };
        dict.insert("schema".into(), Value::from(vec![p]));
    }
    for (section, keys) in [("tls", &["cert", "key"][..]), ("auth", &["key_file"][..])] {
        let Some(Value::Dict(_, table)) = dict.get_mut(section) else {
            continue;
        };
        for key in keys {
            if let Some(p) = table.get(*key).and_then(|v| v.as_str()).map(str::to_string)
                && Path::new(&p).is_relative()
            {
                table.insert(
                    (*key).into(),
                    Value::from(base.join(p).display().to_string()),
                );
            }
        }
    }
    // The file transport's directory.
    if let Some(Value::Dict(_, email)) = dict.get_mut("email")
        && email.get("transport").and_then(|v| v.as_str()) == Some("file")
        && let Some(p) = email
            .get("url")
            .and_then(|v| v.as_str())
            .map(str::to_string)
        && !p.is_empty()
        && Path::new(&p).is_relative()
    {
        email.insert(
            "url".into(),
            Value::from(base.join(p).display().to_string()),
        );
    }
    if let Some(Value::Dict(_, database)) = dict.get_mut("database") {
        let db = database
            .get("url")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        if let Some(path) = db.as_deref().and_then(|d| d.strip_prefix("sqlite://"))
            && !path.is_empty()
            && Path::new(path).is_relative()
            && path != ":memory:"
        {
            database.insert(
                "url".into(),
                Value::from(format!("sqlite://{}", base.join(path).display())),
            );
        }
    }
}

/// `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT`. Host names are resolved when
/// the server binds (the first address that binds is used), not here:
/// loading the configuration does no network I/O.
fn is_host_port(text: &str) -> bool {
    if text.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok()
        && !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn validate(c: &Config) -> Result<(), String> {
    let mut problems = Vec::new();
    if c.workers == Some(0) {
        problems.push("`workers` must be at least 1 (unset: one per CPU core)".into());
    }
    if !is_host_port(&c.listen) {
        problems.push(format!(
            "`listen`: {:?} is not an address like 127.0.0.1:8080 or localhost:8080",
            c.listen
        ));
    }
    if !(c.database.url.starts_with("sqlite:")
        || c.database.url.starts_with("postgres://")
        || c.database.url.starts_with("postgresql://"))
    {
        problems.push(format!(
            "`database`: {:?} must start with sqlite:// or postgres://",
            c.database.url
        ));
    }
    if c.database.statement_timeout.0 == 0 {
        problems.push("`database.statement_timeout` must be at least 1 second".into());
    }
    if c.schema.is_empty() {
        problems.push("`schema`: name at least one file or directory".into());
    }
    if !c.base_path.is_empty() && (!c.base_path.starts_with('/') || c.base_path.ends_with('/')) {
        problems.push(format!(
            "`base_path`: {:?} must start with `/` and not end with one (e.g. \"/api\")",
            c.base_path
        ));
    }
    if let Err(e) = gatehouse_oauth::TrustedProxies::parse(&c.trusted_proxies) {
        problems.push(format!("`trusted_proxies`: {e}"));
    }
    if let Err(e) = gatehouse_oauth::ForwardedHeader::parse(&c.forwarded_header) {
        problems.push(format!("`forwarded_header`: {e}"));
    }
    let l = &c.limits;
    if l.default_page_size == 0 || l.max_page_size == 0 {
        problems.push("`limits`: page sizes must be at least 1".into());
    }
    if l.max_bulk_rows == 0 {
        problems.push("`limits.max_bulk_rows` must be at least 1".into());
    }
    if l.default_page_size > l.max_page_size {
        problems.push(format!(
            "`limits.default_page_size` ({}) is above `limits.max_page_size` ({})",
            l.default_page_size, l.max_page_size
        ));
    }
    for (key, value) in [
        ("header_read_timeout", l.header_read_timeout.0),
        ("body_read_timeout", l.body_read_timeout.0),
        ("idle_timeout", l.idle_timeout.0),
    ] {
        if value == 0 {
            problems.push(format!("`limits.{key}` must be at least 1 second"));
        }
    }
    for (key, value) in [
        ("max_connections", l.max_connections),
        ("max_connections_per_address", l.max_connections_per_address),
    ] {
        if value == Some(0) {
            problems.push(format!("`limits.{key}` must be at least 1"));
        }
    }
    if c.tls.cert.is_some() != c.tls.key.is_some() {
        problems.push("`tls`: set both `cert` and `key`, or neither".into());
    }
    if let Some(m) = &c.metrics.listen
        && !is_host_port(m)
    {
        problems.push(format!(
            "`metrics.listen`: {m:?} is not an address like 127.0.0.1:9090 or localhost:9090"
        ));
    }
    if let Err(e) = gatehouse_oauth::AllowedOrigins::parse(&c.cors.allowed_origins) {
        problems.push(format!("`cors.allowed_origins`: {e}"));
    }
    if c.cors.max_age.0 > 86_400 {
        problems.push(format!(
            "`cors.max_age` ({} s) is above a day, longer than any browser caches a preflight",
            c.cors.max_age.0
        ));
    }
    if let Err(e) = c.email.settings() {
        problems.push(e);
    }
    let mut ids = std::collections::HashSet::new();
    for (i, w) in c.webhooks.iter().enumerate() {
        if !ids.insert(w.id.as_str()) {
            problems.push(format!("{}: another webhook has this id", w.name(i)));
        }
        // The secret of `secret_env` is read when the server starts; here
        // the rest is checked with a stand-in.
        let def = w.definition(|_| Some(format!("whsec_{}", "A".repeat(32))));
        match def {
            Err(e) => problems.push(format!("{}: {e}", w.name(i))),
            Ok(def) => {
                if let Err(e) = gatehouse_webhooks::check(&def) {
                    problems.push(format!("{}.{}: {e}", w.name(i), e.key()));
                }
            }
        }
    }
    if c.store.acquire_timeout.0 == 0 {
        problems.push("`store.acquire_timeout` must be at least 1 second".into());
    }
    if c.tokens.access_ttl.0 == 0 || c.tokens.refresh_ttl.0 == 0 {
        problems.push("`tokens`: lifetimes must be at least 1 second".into());
    }
    let a = &c.auth;
    if let Some(url) = &a.introspection_url {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            problems.push(format!(
                "`auth.introspection_url`: {url:?} must be an http:// or https:// URL"
            ));
        }
        if a.introspection_client_id
            .as_deref()
            .unwrap_or("")
            .is_empty()
            || a.introspection_client_secret
                .as_deref()
                .unwrap_or("")
                .is_empty()
        {
            problems.push(
                "`auth.introspection_url` needs `auth.introspection_client_id` and `auth.introspection_client_secret`"
                    .into(),
            );
        }
    }
    let mut provider_ids = std::collections::HashSet::new();
    for (i, p) in c.auth.providers.iter().enumerate() {
        if !provider_ids.insert(p.id.as_str()) {
            problems.push(format!("{}: another provider has this id", p.name_at(i)));
        }
        // The secret of `client_secret_env` is read when the server
        // starts; here the rest is checked with a stand-in.
        if let Err(e) = p.provider(|_| Some("stand-in".into())) {
            problems.push(format!("{}: {e}", p.name_at(i)));
        }
    }
    for scope in &c.auth.sign_up_scopes {
        if !gatehouse_auth::valid_scope_token(scope) {
            problems.push(format!("`auth.sign_up_scopes`: {scope:?} is not a scope"));
        }
    }
    for (i, cl) in c.bootstrap.clients.iter().enumerate() {
        if cl.client_id.is_empty() {
            problems.push(format!(
                "`bootstrap.clients[{i}]`: client_id must not be empty"
            ));
        }
        match (cl.public, cl.client_secret.as_deref()) {
            (true, Some(_)) => problems.push(format!(
                "`bootstrap.clients[{i}]`: a public client has no client_secret"
            )),
            (false, None | Some("")) => problems.push(format!(
                "`bootstrap.clients[{i}]`: client_secret must not be empty (or set public = true)"
            )),
            _ => {}
        }
        for uri in &cl.redirect_uris {
            if let Err(e) = gatehouse_auth::check_redirect_uri(uri) {
                problems.push(format!(
                    "`bootstrap.clients[{i}].redirect_uris`: {}",
                    e.description()
                ));
            }
        }
    }
    for (i, u) in c.bootstrap.users.iter().enumerate() {
        if u.username.is_empty() || u.password.is_empty() {
            problems.push(format!(
                "`bootstrap.users[{i}]`: username and password must not be empty"
            ));
        }
        if let Err(e) = gatehouse_auth::check_claims(&u.claims) {
            problems.push(format!(
                "`bootstrap.users[{i}].claims`: {}",
                e.description()
            ));
        }
    }
    for (i, k) in c.bootstrap.consumers.iter().enumerate() {
        if k.key.is_empty() || k.secret.is_empty() {
            problems.push(format!(
                "`bootstrap.consumers[{i}]`: key and secret must not be empty"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// `GATEHOUSE_*` variables that are not configuration keys: read by the
/// binary itself (`GATEHOUSE_SECRET`, `GATEHOUSE_LOG`,
/// `GATEHOUSE_LOG_FORMAT`) or by the test suites and benchmark scripts,
/// which export them into environments where the binary runs. Every other
/// `GATEHOUSE_*` variable must name a key (`docs/configuration.md` lists
/// both; a test holds the list to it).
pub const NOT_CONFIG_VARS: [&str; 10] = [
    "GATEHOUSE_SECRET",
    "GATEHOUSE_LOG",
    "GATEHOUSE_LOG_FORMAT",
    "GATEHOUSE_TEST_POSTGRES_URL",
    "GATEHOUSE_REQUIRE_POSTGRES",
    "GATEHOUSE_DURABILITY_DB",
    "GATEHOUSE_EXTERNAL_DATABASE",
    "GATEHOUSE_BIN",
    "GATEHOUSE_SRC",
    "GATEHOUSE_DESC",
];

/// `GATEHOUSE_<SECTION>_<KEY>` and `GATEHOUSE_<KEY>` variables. A
/// `GATEHOUSE_*` variable that names no key and is not one of
/// [`NOT_CONFIG_VARS`] is an error naming the closest key, as an unknown
/// key in the file is: a misspelled variable is never silently ignored.
struct EnvProvider {
    vars: Vec<(String, String)>,
}

impl EnvProvider {
    fn new(env: impl Iterator<Item = (String, String)>) -> Self {
        Self {
            vars: env
                .filter(|(k, _)| {
                    k.starts_with(ENV_PREFIX) && !NOT_CONFIG_VARS.contains(&k.as_str())
                })
                .collect(),
        }
    }
}

/// The variable names of every key the environment can set, by the
/// dictionary path they set (`("limits", "max_page_size")`, or `("", "listen")`).
fn env_keys(defaults: &Dict) -> Vec<(String, &'static str, String)> {
    let mut out = Vec::new();
    for (key, value) in defaults {
        match SECTIONS.iter().find(|s| **s == key.as_str()) {
            Some(section) => {
                let mut keys: Vec<String> = value
                    .as_dict()
                    .map(|d| d.keys().cloned().collect())
                    .unwrap_or_default();
                for optional in OPTIONAL_KEYS {
                    if let Some(k) = optional.strip_prefix(&format!("{section}.")) {
                        keys.push(k.to_string());
                    }
                }
                keys.sort();
                keys.dedup();
                for k in keys {
                    let var = format!("{ENV_PREFIX}{section}_{k}").to_ascii_uppercase();
                    out.push((var, *section, k));
                }
            }
            // Lists of tables (`[[bootstrap.*]]`, `[[webhooks]]`) exist
            // only in the file.
            None if value.as_dict().is_some() || key == "webhooks" => {}
            None => out.push((
                format!("{ENV_PREFIX}{key}").to_ascii_uppercase(),
                "",
                key.clone(),
            )),
        }
    }
    // `GATEHOUSE_DATABASE`, as `database = "URL"` in the file.
    out.push((format!("{ENV_PREFIX}DATABASE"), "database", "url".into()));
    for key in OPTIONAL_KEYS.iter().filter(|k| !k.contains('.')) {
        if !defaults.contains_key(*key) {
            let var = format!("{ENV_PREFIX}{key}").to_ascii_uppercase();
            out.push((var, "", key.to_string()));
        }
    }
    out
}

/// The candidate closest to `wanted` in spelling (Damerau-Levenshtein
/// distance, ties to the first), for "did you mean" hints.
pub fn closest<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = wanted.to_ascii_lowercase();
    candidates
        .into_iter()
        .min_by_key(|c| strsim::damerau_levenshtein(&wanted, &c.to_ascii_lowercase()))
}

impl Provider for EnvProvider {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("environment variable(s)")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let defaults = Serialized::defaults(Config::default())
            .data()?
            .remove(&Profile::Default)
            .unwrap_or_default();
        let known = env_keys(&defaults);
        let mut dict = Dict::new();
        let mut unknown = Vec::new();
        for (var, value) in &self.vars {
            // Matched like the variables figment reads: case aside.
            let upper = var.to_ascii_uppercase();
            let Some((_, section, key)) = known.iter().find(|(v, ..)| *v == upper) else {
                let candidates = known.iter().map(|(v, ..)| v.as_str());
                let hint = closest(var, candidates.chain(NOT_CONFIG_VARS))
                    .map(|c| format!("; did you mean {c}?"))
                    .unwrap_or_default();
                unknown.push(format!("{var} is not a configuration variable{hint}"));
                continue;
            };
            // Typed like figment's own `Env` provider: "true", "50", "[a, b]".
            let value = value
                .parse::<Value>()
                .unwrap_or_else(|_| Value::from(value.clone()));
            let value = if LIST_KEYS.contains(&(*section, key.as_str())) {
                // A comma-separated list.
                match value.as_str() {
                    Some(s) => Value::from(
                        s.split(',')
                            .map(|p| p.trim().to_string())
                            .collect::<Vec<_>>(),
                    ),
                    None => value,
                }
            } else {
                value
            };
            if section.is_empty() {
                dict.insert(key.clone(), value);
            } else {
                let entry = dict
                    .entry(section.to_string())
                    .or_insert_with(|| Value::from(Dict::new()));
                if let Value::Dict(_, d) = entry {
                    d.insert(key.clone(), value);
                }
            }
        }
        if !unknown.is_empty() {
            unknown.sort();
            return Err(figment::Error::from(unknown.join("; ")));
        }
        Ok(Profile::Default.collect(dict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("gatehouse.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_need_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let cwd_file = dir.path().join("none.toml");
        let l = load_with_env(None, &CliOverrides::default(), env(&[])).unwrap();
        // The key file's place is decided at load (beside the database or
        // the config file); everything else is the default.
        let mut config = l.config.clone();
        assert_eq!(
            config.auth.key_file.take(),
            Some(PathBuf::from("data/gatehouse.key"))
        );
        assert_eq!(config, Config::default());
        assert_eq!(l.config.database.url, "sqlite://data/gatehouse.db");
        assert_eq!(l.config.listen, "127.0.0.1:8080");
        assert!(!cwd_file.exists());
    }

    #[test]
    fn example_config_loads_with_paths_relative_to_it() {
        let file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/library/gatehouse.toml");
        let l = load_with_env(Some(&file), &CliOverrides::default(), env(&[])).unwrap();
        let base = file.parent().unwrap();
        assert_eq!(l.config.schema, vec![base.join("schema")]);
        assert_eq!(
            l.config.database.url,
            format!("sqlite://{}", base.join("data/library.db").display())
        );
        assert_eq!(l.config.bootstrap.clients[0].client_id, "demo-app");
        assert_eq!(l.config.tokens.offline_access_ttl, Seconds(30 * 86400));
    }

    #[test]
    fn bootstrap_users_take_claims_of_every_kind() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "[[bootstrap.users]]\nusername = \"alice\"\npassword = \"pw\"\n\
             claims = { org = \"acme\", level = 2, ratio = 0.5, staff = true }\n\
             [[bootstrap.users]]\nusername = \"bob\"\npassword = \"pw\"\n",
        );
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        let users = &l.config.bootstrap.users;
        assert_eq!(
            serde_json::Value::Object(users[0].claims.clone()),
            serde_json::json!({"org": "acme", "level": 2, "ratio": 0.5, "staff": true})
        );
        assert!(users[1].claims.is_empty());
        for (claims, needle) in [
            ("{ sub = \"x\" }", "reserved"),
            ("{ \"bad name\" = \"x\" }", "invalid claim name"),
            ("{ org = [\"a\"] }", "a string, a number or a boolean"),
        ] {
            let f = write(
                dir.path(),
                &format!(
                    "[[bootstrap.users]]\nusername = \"a\"\npassword = \"pw\"\nclaims = {claims}\n"
                ),
            );
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(
                e.contains("bootstrap.users[0].claims") && e.contains(needle),
                "{claims}: {e}"
            );
        }
    }

    #[test]
    fn introspection_mode_is_configured_from_file_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "[auth]\nintrospection_url = \"https://as.example/oauth/introspect\"\nintrospection_client_id = \"api\"\n",
        );
        // The secret is missing: a clear error names the key.
        let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(e.contains("introspection_client_secret"), "{e}");
        let vars = env(&[
            ("GATEHOUSE_AUTH_INTROSPECTION_CLIENT_SECRET", "s3cret"),
            ("GATEHOUSE_AUTH_INTROSPECTION_CACHE_TTL", "5s"),
        ]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        let a = &l.config.auth;
        assert_eq!(a.introspection_client_secret.as_deref(), Some("s3cret"));
        assert_eq!(a.introspection_cache_ttl, Seconds(5));
        assert!(
            !format!("{a:?}").contains("s3cret"),
            "the secret stays out of Debug"
        );
        assert_eq!(Config::default().auth.introspection_cache_ttl, Seconds(30));
    }

    #[test]
    fn forwarded_header_defaults_to_x_forwarded_for_and_is_checked() {
        assert_eq!(Config::default().forwarded_header, "X-Forwarded-For");
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "forwarded_header = \"Forwarded\"\n");
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(l.config.forwarded_header, "Forwarded");
        let vars = env(&[("GATEHOUSE_FORWARDED_HEADER", "x-forwarded-for")]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.forwarded_header, "x-forwarded-for");
        let f = write(dir.path(), "forwarded_header = \"X-Real-IP\"\n");
        let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(
            e.contains("forwarded_header") && e.contains("X-Real-IP"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "listen = \"127.0.0.1:1\"\n[limits]\nmax_pagesize = 3\n",
        );
        let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(
            e.ends_with("`limits`: unknown key `max_pagesize`; did you mean `max_page_size`?"),
            "{e}"
        );
        let f = write(dir.path(), "lisen = \"x\"\n");
        let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(
            e.ends_with("unknown key `lisen`; did you mean `listen`?"),
            "{e}"
        );
        // One level of quotes: no key list quoted inside a quote.
        assert!(!e.contains("``") && !e.contains("one of"), "{e}");
    }

    #[test]
    fn unknown_environment_variables_are_errors_naming_the_closest_key() {
        for (var, closest) in [
            (
                "GATEHOUSE_LIMITS_MAX_PAGE_SISE",
                "GATEHOUSE_LIMITS_MAX_PAGE_SIZE",
            ),
            ("GATEHOUSE_LISTN", "GATEHOUSE_LISTEN"),
            ("GATEHOUSE_TOKEN_ACCESS_TTL", "GATEHOUSE_TOKENS_ACCESS_TTL"),
            ("GATEHOUSE_TLS_CERTS", "GATEHOUSE_TLS_CERT"),
            ("GATEHOUSE_SECRETS", "GATEHOUSE_SECRET"),
        ] {
            let e =
                load_with_env(None, &CliOverrides::default(), env(&[(var, "1")])).expect_err(var);
            assert!(
                e.contains(&format!(
                    "{var} is not a configuration variable; did you mean {closest}?"
                )),
                "{var}: {e}"
            );
        }
        // Every misspelling is named at once.
        let e = load_with_env(
            None,
            &CliOverrides::default(),
            env(&[("GATEHOUSE_A", "1"), ("GATEHOUSE_B", "2")]),
        )
        .unwrap_err();
        assert!(
            e.contains("GATEHOUSE_A ") && e.contains("GATEHOUSE_B "),
            "{e}"
        );
        // Variables of the binary and of the test and benchmark tooling,
        // and every key, are accepted.
        let mut vars: Vec<(&str, &str)> = NOT_CONFIG_VARS.iter().map(|v| (*v, "x")).collect();
        vars.push(("GATEHOUSE_ISSUER", "https://issuer.example"));
        vars.push(("GATEHOUSE_TLS_CERT", "c.pem"));
        vars.push(("GATEHOUSE_TLS_KEY", "k.pem"));
        vars.push(("GATEHOUSE_STORE_MAX_CONNECTIONS", "3"));
        vars.push(("GATEHOUSE_AUTH_INTROSPECTION_AUDIENCE", "api"));
        vars.push(("GATEHOUSE_WORKERS", "1"));
        let l = load_with_env(None, &CliOverrides::default(), env(&vars)).unwrap();
        assert_eq!(l.config.issuer.as_deref(), Some("https://issuer.example"));
        assert_eq!(l.config.workers, Some(1));
        assert_eq!(l.config.auth.introspection_audience.as_deref(), Some("api"));
        let defaults = Serialized::defaults(Config::default())
            .data()
            .unwrap()
            .remove(&Profile::Default)
            .unwrap();
        let keys = env_keys(&defaults);
        assert!(keys.len() > 30, "{keys:?}");
        assert!(
            !keys
                .iter()
                .any(|(v, ..)| v.starts_with("GATEHOUSE_BOOTSTRAP"))
        );
    }

    #[test]
    fn workers_default_to_the_cores_and_zero_is_refused() {
        let l = load_with_env(None, &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(l.config.workers, None);
        let e = load_with_env(
            None,
            &CliOverrides::default(),
            env(&[("GATEHOUSE_WORKERS", "0")]),
        )
        .unwrap_err();
        assert!(e.contains("`workers` must be at least 1"), "{e}");
    }

    #[test]
    fn every_variable_that_is_not_a_key_is_documented() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
        )
        .unwrap();
        let documented: std::collections::BTreeSet<&str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `GATEHOUSE_")?.split('`').next())
            .collect();
        let allowed: std::collections::BTreeSet<&str> = NOT_CONFIG_VARS
            .iter()
            .map(|v| v.trim_start_matches("GATEHOUSE_"))
            .collect();
        assert_eq!(documented, allowed, "docs/configuration.md is out of date");
    }

    #[test]
    fn listen_takes_host_names() {
        for ok in [
            "localhost:8080",
            "127.0.0.1:0",
            "[::1]:8080",
            "api.internal:80",
        ] {
            let cli = CliOverrides {
                listen: Some(ok.into()),
                ..CliOverrides::default()
            };
            let l = load_with_env(None, &cli, env(&[])).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(l.config.listen, ok);
        }
        for bad in [
            "localhost",
            "localhost:",
            "localhost:99999",
            ":8080",
            "a b:80",
            "::1:80",
        ] {
            let cli = CliOverrides {
                listen: Some(bad.into()),
                ..CliOverrides::default()
            };
            let e = load_with_env(None, &cli, env(&[])).unwrap_err();
            assert!(e.contains("`listen`"), "{bad}: {e}");
        }
        let vars = env(&[("GATEHOUSE_METRICS_LISTEN", "localhost:9090")]);
        let l = load_with_env(None, &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.metrics.listen.as_deref(), Some("localhost:9090"));
    }

    #[test]
    fn environment_overrides_file_and_cli_overrides_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "listen = \"127.0.0.1:1000\"\n[limits]\nmax_page_size = 100\n[tokens]\naccess_ttl = \"15m\"\n",
        );
        let vars = env(&[
            ("GATEHOUSE_LISTEN", "127.0.0.1:2000"),
            ("GATEHOUSE_LIMITS_MAX_PAGE_SIZE", "200"),
            ("GATEHOUSE_TOKENS_ACCESS_TTL", "2h"),
            ("GATEHOUSE_AUTH_ANONYMOUS_READ", "true"),
            ("GATEHOUSE_BASE_PATH", "/api"),
            ("GATEHOUSE_SECRET", "not-a-config-key"),
            ("GATEHOUSE_SUBSCRIPTIONS_MAX_PER_CONNECTION", "20"),
            ("GATEHOUSE_SUBSCRIPTIONS_RECHECK_INTERVAL", "5m"),
        ]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.subscriptions.max_per_connection, 20);
        assert_eq!(l.config.subscriptions.recheck_interval, Seconds(300));
        assert_eq!(l.config.subscriptions.init_timeout, Seconds(10));
        assert_eq!(l.config.listen, "127.0.0.1:2000");
        assert_eq!(l.config.limits.max_page_size, 200);
        assert_eq!(l.config.tokens.access_ttl, Seconds(7200));
        assert!(l.config.auth.anonymous_read);
        assert_eq!(l.config.base_path, "/api");

        let cli = CliOverrides {
            listen: Some("127.0.0.1:3000".into()),
            database: Some("postgres://db/x".into()),
            schema: vec!["s1".into(), "s2".into()],
        };
        let vars = env(&[("GATEHOUSE_LISTEN", "127.0.0.1:2000")]);
        let l = load_with_env(Some(&f), &cli, vars).unwrap();
        assert_eq!(l.config.listen, "127.0.0.1:3000");
        assert_eq!(l.config.database.url, "postgres://db/x");
        assert_eq!(
            l.config.schema,
            vec![PathBuf::from("s1"), PathBuf::from("s2")]
        );
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        for (text, needle) in [
            (
                "[tokens]\naccess_ttl = \"10 fortnights\"\n",
                "invalid duration",
            ),
            ("[tokens]\nsigning_alg = \"HS256\"\n", "HS256"),
            ("listen = \"localhost\"\n", "`listen`"),
            ("database = \"mysql://x\"\n", "`database`"),
            ("base_path = \"api/\"\n", "`base_path`"),
            ("[limits]\ndefault_page_size = 900\n", "default_page_size"),
            ("[limits]\nmax_page_size = -1\n", "max_page_size"),
            (
                "[[bootstrap.clients]]\nclient_id = \"a\"\n",
                "client_secret",
            ),
        ] {
            let f = write(dir.path(), text);
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(e.contains(needle), "{text:?} -> {e}");
        }
        let e = load_with_env(
            None,
            &CliOverrides::default(),
            env(&[("GATEHOUSE_LIMITS_MAX_DEPTH", "deep")]),
        )
        .unwrap_err();
        assert!(e.contains("max_depth") && e.contains("environment"), "{e}");
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let e = load_with_env(
            Some(Path::new("/nonexistent/g.toml")),
            &CliOverrides::default(),
            env(&[]),
        )
        .unwrap_err();
        assert!(e.contains("config file not found"), "{e}");
    }

    /// Dotted paths of every leaf key under `value` (array entries share the
    /// array's path: `bootstrap.clients.client_id`).
    fn key_paths(prefix: &str, value: &Value, out: &mut std::collections::BTreeSet<String>) {
        match value {
            // A map of free-form names (`claims`) is one key.
            Value::Dict(_, d) if d.is_empty() => {
                out.insert(prefix.to_string());
            }
            Value::Dict(_, d) => {
                for (k, v) in d {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    key_paths(&path, v, out);
                }
            }
            Value::Array(_, items) if items.iter().any(|i| i.as_dict().is_some()) => {
                for i in items {
                    key_paths(prefix, i, out);
                }
            }
            _ => {
                out.insert(prefix.to_string());
            }
        }
    }

    #[test]
    fn every_key_is_documented() {
        // Every optional key set, and one entry of every list of tables.
        let mut c = Config {
            issuer: Some("https://x".into()),
            ..Config::default()
        };
        c.tls.cert = Some("c.pem".into());
        c.tls.key = Some("k.pem".into());
        c.metrics.listen = Some("127.0.0.1:9090".into());
        c.store.max_connections = Some(5);
        c.email = EmailConfig {
            transport: Some("file".into()),
            url: Some("mail".into()),
            from: Some("a@example.com".into()),
        };
        c.bootstrap.clients.push(BootstrapClient {
            client_id: "a".into(),
            client_secret: Some("b".into()),
            grants: vec![],
            scopes: vec![],
            audiences: vec![],
            redirect_uris: vec!["https://app.example/cb".into()],
            public: false,
            first_party: false,
            id_token_signed_response_alg: None,
        });
        c.bootstrap.users.push(BootstrapUser {
            username: "u".into(),
            password: "p".into(),
            scopes: vec![],
            claims: Default::default(),
        });
        c.bootstrap.consumers.push(BootstrapConsumer {
            key: "k".into(),
            secret: "s".into(),
            scopes: vec![],
        });
        c.webhooks.push(WebhookConfig {
            id: "done".into(),
            url: "https://hooks.example/in".into(),
            events: vec!["Task.*".into()],
            filter: Some("{status: DONE}".into()),
            secret: Some("whsec_x".into()),
            secret_env: Some("HOOK_SECRET".into()),
            timeout: Seconds(10),
            max_age: Seconds(60),
            concurrency: 4,
        });
        c.auth.providers.push(ProviderEntry {
            id: "corp".into(),
            name: "Corp".into(),
            kind: ProviderKindEntry::Oidc,
            issuer: Some("https://idp.example".into()),
            client_id: "c".into(),
            client_secret: Some("s".into()),
            client_secret_env: Some("CORP_SECRET".into()),
            scopes: Some(vec!["email".into()]),
            trust_email: false,
            link: LinkModeEntry::Confirm,
            github_url: Some("https://github.example".into()),
            github_api_url: Some("https://api.github.example".into()),
        });
        c.bootstrap.rows.push(BootstrapRow {
            type_name: "Author".into(),
            values: serde_json::json!({"name": "n"})
                .as_object()
                .cloned()
                .unwrap(),
        });
        let dict = Serialized::defaults(c)
            .data()
            .unwrap()
            .remove(&Profile::Default)
            .unwrap();
        let mut keys = std::collections::BTreeSet::new();
        key_paths("", &Value::from(dict), &mut keys);
        // A row's values are the schema's fields, not config keys.
        let keys: std::collections::BTreeSet<String> = keys
            .into_iter()
            .map(|k| match k.strip_prefix("bootstrap.rows.values.") {
                Some(_) => "bootstrap.rows.values".to_string(),
                None => k,
            })
            .collect();
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
        )
        .unwrap();
        let documented: std::collections::BTreeSet<String> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .filter(|k| !k.starts_with("GATEHOUSE_"))
            .map(str::to_string)
            .collect();
        let missing: Vec<_> = keys.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&keys).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "docs/configuration.md is out of date: missing {missing:?}, no longer keys {stale:?}"
        );
        assert!(keys.len() > 30, "{keys:?}");
    }

    #[test]
    fn the_database_section_and_its_url_shorthand() {
        let dir = tempfile::tempdir().unwrap();
        // The section: url and statement timeout.
        let f = write(
            dir.path(),
            "[database]\nurl = \"postgres://db/x\"\nstatement_timeout = \"5s\"\n",
        );
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(l.config.database.url, "postgres://db/x");
        assert_eq!(l.config.database.statement_timeout, Seconds(5));
        // `--database` and `GATEHOUSE_DATABASE` replace the URL, not the section.
        let cli = CliOverrides {
            database: Some("postgres://db/y".into()),
            ..CliOverrides::default()
        };
        let l = load_with_env(Some(&f), &cli, env(&[])).unwrap();
        assert_eq!(l.config.database.url, "postgres://db/y");
        assert_eq!(l.config.database.statement_timeout, Seconds(5));
        let vars = env(&[
            ("GATEHOUSE_DATABASE", "postgres://db/z"),
            ("GATEHOUSE_DATABASE_STATEMENT_TIMEOUT", "1m"),
        ]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.database.url, "postgres://db/z");
        assert_eq!(l.config.database.statement_timeout, Seconds(60));
        // The shorthand, with the default timeout.
        let f = write(dir.path(), "database = \"postgres://db/w\"\n");
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(l.config.database.url, "postgres://db/w");
        assert_eq!(l.config.database.statement_timeout, Seconds(30));
        let f = write(dir.path(), "[database]\nstatement_timeout = 0\n");
        let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(e.contains("`database.statement_timeout`"), "{e}");
    }

    #[test]
    fn operations_keys_from_file_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "shutdown_timeout = \"5s\"\n[tls]\ncert = \"certs/c.pem\"\nkey = \"/abs/k.pem\"\n[store]\nacquire_timeout = 2\n",
        );
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(l.config.shutdown_timeout, Seconds(5));
        assert_eq!(l.config.tls.cert, Some(dir.path().join("certs/c.pem")));
        assert_eq!(l.config.tls.key, Some(PathBuf::from("/abs/k.pem")));
        assert_eq!(l.config.store.acquire_timeout, Seconds(2));
        let vars = env(&[
            ("GATEHOUSE_METRICS_LISTEN", "127.0.0.1:9091"),
            ("GATEHOUSE_STORE_MAX_CONNECTIONS", "7"),
            ("GATEHOUSE_SHUTDOWN_TIMEOUT", "3s"),
            ("GATEHOUSE_TLS_KEY", "/env/k.pem"),
        ]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.metrics.listen.as_deref(), Some("127.0.0.1:9091"));
        assert_eq!(l.config.store.max_connections, Some(7));
        assert_eq!(l.config.shutdown_timeout, Seconds(3));
        assert_eq!(l.config.tls.key, Some(PathBuf::from("/env/k.pem")));
        for (text, needle) in [
            ("[tls]\ncert = \"c.pem\"\n", "`tls`"),
            ("[metrics]\nlisten = \"nope\"\n", "`metrics.listen`"),
            ("[store]\nacquire_timeout = 0\n", "`store.acquire_timeout`"),
        ] {
            let f = write(dir.path(), text);
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(e.contains(needle), "{text:?} -> {e}");
        }
    }

    #[test]
    fn cors_keys_from_file_and_environment_with_origins_checked() {
        let dir = tempfile::tempdir().unwrap();
        let l = load_with_env(None, &CliOverrides::default(), env(&[])).unwrap();
        assert!(l.config.cors.allowed_origins.is_empty());
        assert_eq!(l.config.cors.max_age, Seconds(600));
        let f = write(
            dir.path(),
            "[cors]\nallowed_origins = [\"https://app.example\", \"http://localhost:5173\"]\nmax_age = \"1h\"\n",
        );
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(
            l.config.cors.allowed_origins,
            ["https://app.example", "http://localhost:5173"]
        );
        assert_eq!(l.config.cors.max_age, Seconds(3600));
        let vars = env(&[
            (
                "GATEHOUSE_CORS_ALLOWED_ORIGINS",
                "https://a.example, https://b.example:8443",
            ),
            ("GATEHOUSE_CORS_MAX_AGE", "90"),
        ]);
        let l = load_with_env(Some(&f), &CliOverrides::default(), vars).unwrap();
        assert_eq!(
            l.config.cors.allowed_origins,
            ["https://a.example", "https://b.example:8443"]
        );
        assert_eq!(l.config.cors.max_age, Seconds(90));
        let vars = env(&[("GATEHOUSE_CORS_ALLOWED_ORIGINS", "*")]);
        let l = load_with_env(None, &CliOverrides::default(), vars).unwrap();
        assert_eq!(l.config.cors.allowed_origins, ["*"]);
        // Each bad value is named, with the spelling to write instead.
        for (text, needle) in [
            (
                "allowed_origins = [\"https://app.example/\"]",
                "`cors.allowed_origins`: \"https://app.example/\" is not an origin as browsers send it: write \"https://app.example\"",
            ),
            (
                "allowed_origins = [\"https://app.example/spa\"]",
                "\"https://app.example/spa\"",
            ),
            (
                "allowed_origins = [\"https://app.example:443\"]",
                "write \"https://app.example\"",
            ),
            (
                "allowed_origins = [\"app.example\"]",
                "\"app.example\" is not an origin",
            ),
            ("allowed_origins = [\"null\"]", "\"null\" is not an origin"),
            (
                "allowed_origins = [\"*\", \"https://app.example\"]",
                "must be the only entry",
            ),
            ("max_age = \"2d\"", "`cors.max_age`"),
            ("allow_origins = []", "did you mean `allowed_origins`?"),
        ] {
            let f = write(dir.path(), &format!("[cors]\n{text}\n"));
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(e.contains(needle), "{text:?} -> {e}");
        }
        let vars = env(&[("GATEHOUSE_CORS_ALLOWED_ORIGIN", "https://a.example")]);
        let e = load_with_env(None, &CliOverrides::default(), vars).unwrap_err();
        assert!(
            e.contains("did you mean GATEHOUSE_CORS_ALLOWED_ORIGINS?"),
            "{e}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(30));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("1h"), Ok(3600));
        assert_eq!(parse_duration("30d"), Ok(2_592_000));
        assert_eq!(parse_duration("45"), Ok(45));
        assert_eq!(parse_duration("1h 30m"), Ok(5400));
        assert_eq!(parse_duration("2w"), Ok(1_209_600));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1 fortnight").is_err());
        assert!(parse_duration("1500ms").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("99999999999999999999").is_err());
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let c = BootstrapClient {
            client_id: "a".into(),
            client_secret: Some("s3cr3t".into()),
            grants: vec![],
            scopes: vec![],
            audiences: vec![],
            redirect_uris: vec![],
            public: false,
            first_party: false,
            id_token_signed_response_alg: Some(SigningAlg::Es256),
        };
        let u = BootstrapUser {
            username: "u".into(),
            password: "pw-123".into(),
            scopes: vec![],
            claims: Default::default(),
        };
        let k = BootstrapConsumer {
            key: "k".into(),
            secret: "cs-456".into(),
            scopes: vec!["read".into()],
        };
        let all = format!("{c:?}{u:?}{k:?}");
        assert!(!all.contains("s3cr3t") && !all.contains("pw-123") && !all.contains("cs-456"));
        let e = EmailConfig {
            transport: Some("smtp".into()),
            url: Some("smtp://mailer:hunter2@mail.example.com".into()),
            from: Some("a@example.com".into()),
        };
        let shown = format!("{e:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("mail.example.com:587"), "{shown}");
    }

    #[test]
    fn providers_are_checked_at_load_and_their_secret_read_from_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |extra: &str| {
            format!(
                "[[auth.providers]]\nid = \"corp\"\nname = \"Corp\"\nclient_id = \"c\"\n{extra}\n"
            )
        };
        let ok = write(
            dir.path(),
            &entry(
                "kind = \"oidc\"\nissuer = \"http://127.0.0.1:9000/\"\nclient_secret_env = \"CORP_SECRET\"",
            ),
        );
        let l = load_with_env(Some(&ok), &CliOverrides::default(), env(&[])).unwrap();
        let p = &l.config.auth.providers[0];
        assert_eq!(p.link, LinkModeEntry::Confirm);
        assert!(!p.trust_email);
        let resolved = p
            .provider(|v| (v == "CORP_SECRET").then(|| "s3cret".to_string()))
            .unwrap();
        assert_eq!(resolved.client_secret, "s3cret");
        assert_eq!(resolved.scopes, ["email", "profile"]);
        assert_eq!(
            resolved.kind,
            gatehouse_oauth::ProviderKind::Oidc {
                issuer: "http://127.0.0.1:9000/".into()
            }
        );
        assert!(!format!("{resolved:?}").contains("s3cret"));
        assert_eq!(
            p.provider(|_| None).unwrap_err(),
            "`client_secret_env`: the environment variable CORP_SECRET is not set"
        );
        let github = write(
            dir.path(),
            &entry("kind = \"github\"\nclient_secret = \"s\"\nlink = \"verified_email\""),
        );
        let l = load_with_env(Some(&github), &CliOverrides::default(), env(&[])).unwrap();
        let resolved = l.config.auth.providers[0].provider(|_| None).unwrap();
        assert_eq!(
            resolved.kind,
            gatehouse_oauth::ProviderKind::Github {
                web_url: "https://github.com".into(),
                api_url: "https://api.github.com".into()
            }
        );
        assert_eq!(resolved.link, gatehouse_auth::LinkMode::VerifiedEmail);
        for (extra, problem) in [
            (
                "kind = \"oidc\"\nissuer = \"http://idp.example\"\nclient_secret = \"s\"",
                "plain http on a host that is not loopback",
            ),
            (
                "kind = \"oidc\"\nissuer = \"ftp://idp.example\"\nclient_secret = \"s\"",
                "must be an https URL",
            ),
            ("kind = \"oidc\"\nclient_secret = \"s\"", "needs its issuer"),
            (
                "kind = \"oidc\"\nissuer = \"https://idp.example\"\nclient_secret = \"s\"\nclient_secret_env = \"X\"",
                "not both",
            ),
            (
                "kind = \"oidc\"\nissuer = \"https://idp.example\"",
                "`client_secret`: set it",
            ),
            (
                "kind = \"github\"\nissuer = \"https://idp.example\"\nclient_secret = \"s\"",
                "`issuer` is for",
            ),
            (
                "kind = \"oidc\"\nissuer = \"https://idp.example\"\nclient_secret = \"s\"\nlink = \"sometimes\"",
                "link",
            ),
        ] {
            let f = write(dir.path(), &entry(extra));
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(e.contains(problem), "{extra}: {e}");
        }
        let twice = write(
            dir.path(),
            &format!(
                "{}{}",
                entry("kind = \"github\"\nclient_secret = \"s\""),
                entry("kind = \"github\"\nclient_secret = \"s\"")
            ),
        );
        let e = load_with_env(Some(&twice), &CliOverrides::default(), env(&[])).unwrap_err();
        assert!(e.contains("another provider has this id"), "{e}");
    }

    #[test]
    fn the_email_section_is_off_by_default_and_checked_when_set() {
        let dir = tempfile::tempdir().unwrap();
        let none = load_with_env(None, &CliOverrides::default(), env(&[])).unwrap();
        assert_eq!(none.config.email.settings().unwrap().map(|_| ()), None);

        // The file transport's directory is relative to the config file.
        let f = write(
            dir.path(),
            "[email]\ntransport = \"file\"\nurl = \"mail\"\nfrom = \"App <no-reply@example.com>\"\n",
        );
        let l = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap();
        let settings = l.config.email.settings().unwrap().unwrap();
        assert_eq!(
            settings.transport,
            gatehouse_mail::Transport::File(dir.path().join("mail"))
        );

        // The environment sets it too (the SMTP password need not be in the file).
        let l = load_with_env(
            Some(&f),
            &CliOverrides::default(),
            env(&[
                ("GATEHOUSE_EMAIL_TRANSPORT", "smtp"),
                ("GATEHOUSE_EMAIL_URL", "smtps://u:p@mail.example.com"),
            ]),
        )
        .unwrap();
        let settings = l.config.email.settings().unwrap().unwrap();
        assert!(matches!(
            settings.transport,
            gatehouse_mail::Transport::Smtp(_)
        ));

        for (text, says) in [
            (
                "[email]\ntransport = \"pigeon\"\nfrom = \"a@example.com\"\n",
                "`email.transport`",
            ),
            (
                "[email]\ntransport = \"smtp\"\nurl = \"smtp://u:hunter2@h?tls=no\"\nfrom = \"a@example.com\"\n",
                "`email.url`",
            ),
            (
                "[email]\ntransport = \"smtp\"\nurl = \"smtp://h\"\nfrom = \"nobody\"\n",
                "`email.from`",
            ),
            (
                "[email]\ntransport = \"smtp\"\nurl = \"smtp://h\"\n",
                "`email.from`",
            ),
            ("[email]\nurl = \"smtp://h\"\n", "`email.transport`"),
        ] {
            let f = write(dir.path(), text);
            let e = load_with_env(Some(&f), &CliOverrides::default(), env(&[])).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
