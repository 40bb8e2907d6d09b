//! Wiring of the authorization server: the key-encryption secret, the
//! repository, idempotent bootstrap of clients and users.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use gatehouse_auth::{Admin, AuthConfig, AuthRepo, AuthServer, NewClient, SystemRandom};

use crate::config::Config;

/// Environment variable holding the secret that encrypts signing keys at rest.
pub const SECRET_ENV: &str = "GATEHOUSE_SECRET";

/// Where the key-encryption secret came from, for messages that must say
/// which secret failed to open the stored keys.
pub enum SecretSource {
    /// `GATEHOUSE_SECRET`.
    Env,
    /// The key file, read, or created by this start (`created`).
    File { path: PathBuf, created: bool },
}

impl SecretSource {
    /// What to check when the stored keys cannot be opened with this secret.
    fn hint(&self) -> String {
        match self {
            Self::Env => format!(
                "the key-encryption secret came from {SECRET_ENV}; set it to the value the keys were sealed with"
            ),
            Self::File {
                path,
                created: true,
            } => format!(
                "the key-encryption secret was generated into the new key file {}; \
                 point `auth.key_file` at the one the keys were sealed with or set {SECRET_ENV}",
                path.display()
            ),
            Self::File {
                path,
                created: false,
            } => format!(
                "the key-encryption secret came from the key file {}; point `auth.key_file` at the one \
                 the keys were sealed with or set {SECRET_ENV}",
                path.display()
            ),
        }
    }
}

/// The secret that encrypts signing keys at rest: `GATEHOUSE_SECRET`, or the
/// content of the key file (`auth.key_file`), created on first use with 0600
/// permissions. Every instance on one database must use the same secret.
pub fn load_secret(config: &Config) -> anyhow::Result<(String, SecretSource)> {
    if let Ok(s) = std::env::var(SECRET_ENV) {
        if s.trim().len() < 16 {
            anyhow::bail!("{SECRET_ENV} is set but shorter than 16 characters");
        }
        return Ok((s, SecretSource::Env));
    }
    let path = key_file_path(config);
    if path.exists() {
        let s = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the key file {}", path.display()))?;
        return Ok((
            s.trim().to_string(),
            SecretSource::File {
                path,
                created: false,
            },
        ));
    }
    if config.database.url.starts_with("postgres") {
        tracing::warn!(
            key_file = %path.display(),
            "no {SECRET_ENV} set: generating a key file; every instance on this database must share it (or set {SECRET_ENV})"
        );
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let secret = gatehouse_auth::generate_server_secret(&SystemRandom);
    write_private(&path, &secret)?;
    tracing::info!(key_file = %path.display(), "created the key-encryption key file");
    Ok((
        secret,
        SecretSource::File {
            path,
            created: true,
        },
    ))
}

/// The secret for a server about to open the signing keys in `repo`: as
/// [`load_secret`], except that no key file is generated for a database
/// that already holds sealed keys. Such a file could never open them, and
/// left behind it would stand in for the real one at every later start.
async fn secret_for(
    config: &Config,
    repo: &dyn AuthRepo,
) -> anyhow::Result<(String, SecretSource)> {
    let path = key_file_path(config);
    if std::env::var_os(SECRET_ENV).is_none() && !path.exists() {
        let keys = repo
            .load_keys()
            .await
            .map_err(|e| anyhow::anyhow!("reading the signing keys: {e}"))?;
        if !keys.is_empty() {
            anyhow::bail!(
                "the database holds signing keys sealed with a secret this server does not have: \
                 {SECRET_ENV} is unset and there is no key file at {}; point `auth.key_file` \
                 (or GATEHOUSE_AUTH_KEY_FILE) at the key file the keys were created with, \
                 or set {SECRET_ENV} to its content",
                path.display()
            );
        }
    }
    load_secret(config)
}

/// The key file: `auth.key_file`, which loading the configuration always
/// sets (its default is decided there, beside the config file).
fn key_file_path(config: &Config) -> PathBuf {
    config
        .auth
        .key_file
        .clone()
        .unwrap_or_else(|| PathBuf::from("data/gatehouse.key"))
}

/// Creates `path` (it must not exist) holding `content`, readable and
/// writable by the owner only: the file is created with mode 0600, so it is
/// never readable by others, not even between its creation and a chmod.
/// Every file the binary writes that holds a secret is written here.
#[cfg(unix)]
pub(crate) fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

#[cfg(not(unix))]
pub(crate) fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    std::fs::write(path, content).with_context(|| format!("creating {}", path.display()))
}

/// The authorization server's settings from the configuration.
pub fn auth_config(config: &Config, issuer: &str) -> AuthConfig {
    let t = &config.tokens;
    let mut c = AuthConfig::new(issuer);
    c.access_ttl = t.access_ttl.0;
    c.offline_access_ttl = t.offline_access_ttl.0;
    c.refresh_ttl = t.refresh_ttl.0;
    c.refresh_reuse_grace = t.refresh_reuse_grace.0;
    c.client_cache_ttl = t.client_cache_ttl.0;
    c.token_status_cache_ttl = t.status_cache_ttl.0;
    c.oauth1_timestamp_window = config.limits.oauth1_timestamp_window.0;
    c.sign_up = config.auth.sign_up;
    c.sign_up_scopes = config.auth.sign_up_scopes.clone();
    c.signing_alg = t.signing_alg.into();
    c
}

/// The repository of clients, users, keys and tokens, in the store.
pub fn repo(store: &gatehouse_store::Store) -> Arc<dyn AuthRepo> {
    sql_repo(store)
}

fn sql_repo(store: &gatehouse_store::Store) -> Arc<gatehouse_auth_store::SqlAuthRepo> {
    Arc::new(gatehouse_auth_store::SqlAuthRepo::new(store.db().clone()))
}

/// With an account type, its rows become the accounts that sign in
/// (registering the hook that keeps tokens in step with them on `store`,
/// so call it once per store), and users from before it become rows.
async fn accounts(
    store: &gatehouse_store::Store,
    repo: &Arc<gatehouse_auth_store::SqlAuthRepo>,
) -> anyhow::Result<Option<gatehouse_accounts::StoreAccounts>> {
    let Some(accounts) = gatehouse_accounts::StoreAccounts::new(store, repo.clone()) else {
        return Ok(None);
    };
    let made = accounts
        .adopt_users(repo.as_ref())
        .await
        .map_err(|e| anyhow::anyhow!("making users account rows: {}", describe(&e)))?;
    if made > 0 {
        tracing::info!(
            made,
            "users from before the account type became account rows"
        );
    }
    Ok(Some(accounts))
}

/// Starts the authorization server (loads or creates signing keys), with
/// GraphiQL's built-in client for the page at `graphiql_url`.
/// `outbox` is where the e-mail flows enqueue their messages, when
/// `[email]` is set (their worker wakes on it).
pub async fn start(
    config: &Config,
    store: &gatehouse_store::Store,
    issuer: &str,
    graphiql_url: &str,
    outbox: Option<&gatehouse_outbox::Outbox>,
) -> anyhow::Result<Arc<AuthServer>> {
    let sql = sql_repo(store);
    let accounts = accounts(store, &sql).await?;
    if config.auth.sign_up {
        let blockers = gatehouse_accounts::sign_up_blockers(store.model());
        if !blockers.is_empty() {
            anyhow::bail!(
                "`[auth] sign_up = true`, but sign-up cannot fill the account type's required \
                 field(s) {}: give them a `@default(value:)` or make them nullable",
                blockers
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if config.auth.email.verification == crate::config::VerificationMode::Required {
        let missing = gatehouse_accounts::required_verification_blockers(store.model());
        if !missing.is_empty() {
            anyhow::bail!(
                "`[auth.email] verification = \"required\"` needs an `@account` type with the \
                 field(s) {}: declare `email: String @unique` and `emailVerified: Boolean!` \
                 in it, or choose \"optional\" or \"off\"",
                missing
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let providers = providers(config)?;
    if !providers.is_empty() && accounts.is_none() {
        anyhow::bail!(
            "`[[auth.providers]]` needs an account type: signing in through another provider \
             links its identities to account rows (mark one type `@account`)"
        );
    }
    let repo: Arc<dyn AuthRepo> = sql;
    let (secret, source) = secret_for(config, repo.as_ref()).await?;
    let mut auth = auth_config(config, issuer);
    let scopes = store
        .model()
        .scope_names()
        .into_iter()
        .chain([
            gatehouse_auth::oidc::SCOPE_OPENID,
            gatehouse_auth::oidc::SCOPE_PROFILE,
        ])
        .map(str::to_string)
        .collect();
    auth.builtin_clients = vec![gatehouse_auth::ClientRecord::graphiql(graphiql_url, scopes)];
    let server = AuthServer::start(
        auth,
        repo,
        store.clock().clone(),
        Arc::new(SystemRandom),
        &secret,
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "starting the authorization server: {} ({})",
            describe(&e),
            source.hint()
        )
    })?;
    if let Some(accounts) = accounts {
        let flows = outbox.and_then(|o| gatehouse_accounts::StoreFlows::new(&accounts, o.clone()));
        if !providers.is_empty() {
            server.use_federation(
                Arc::new(accounts.clone()),
                providers
                    .iter()
                    .map(gatehouse_oauth::ProviderConfig::policy)
                    .collect(),
            );
            tracing::info!(
                providers = providers.len(),
                "signing in through other providers on"
            );
        }
        server.use_accounts(Arc::new(accounts));
        if let Some(flows) = flows {
            let e = &config.auth.email;
            let mut c =
                gatehouse_auth::EmailFlowConfig::new(format!("{issuer}{}", config.base_path));
            c.verification = e.verification.into();
            c.verify_ttl = e.verify_ttl.0;
            c.reset_ttl = e.reset_ttl.0;
            c.code_ttl = e.code_ttl.0;
            server.use_mail_flows(Arc::new(flows), c);
            tracing::info!("e-mail flows on (verification, password reset)");
        }
    }
    Ok(server)
}

/// `[[auth.providers]]`, their secrets read from the environment.
pub fn providers(config: &Config) -> anyhow::Result<Vec<gatehouse_oauth::ProviderConfig>> {
    config
        .auth
        .providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.provider(|var| std::env::var(var).ok())
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.name_at(i)))
        })
        .collect()
}

/// Admin operations without signing keys (for the CLI).
pub async fn admin(store: &gatehouse_store::Store, config: &Config) -> anyhow::Result<Admin> {
    let sql = sql_repo(store);
    let accounts = accounts(store, &sql).await?;
    let accounts = accounts.map(|a| Arc::new(a) as Arc<dyn gatehouse_auth::Accounts>);
    Ok(
        Admin::new(sql, store.clock().clone(), Arc::new(SystemRandom))
            .with_accounts(accounts, &config.auth.sign_up_scopes),
    )
}

/// A safe description of an auth error, with its internal cause for logs.
pub fn describe(e: &gatehouse_auth::Error) -> String {
    match e.internal_cause() {
        Some(cause) => format!("{}: {cause}", e.description()),
        None => e.description().to_string(),
    }
}

/// Consumer administration for the CLI: consumer secrets are sealed with
/// the key-encryption secret, so it is loaded (or created) like at start.
pub fn consumers(
    config: &Config,
    store: &gatehouse_store::Store,
) -> anyhow::Result<gatehouse_auth::oauth1::Consumers> {
    let (secret, _) = load_secret(config)?;
    let cipher = gatehouse_auth::KeyCipher::from_secret(&secret)
        .map_err(|e| anyhow::anyhow!("the key-encryption secret: {}", describe(&e)))?;
    Ok(gatehouse_auth::oauth1::Consumers::new(
        repo(store),
        store.clock().clone(),
        Arc::new(SystemRandom),
        Arc::new(cipher),
    ))
}

/// Applies `[[bootstrap.consumers]]` (OAuth 1.0): created or updated,
/// never duplicated.
pub async fn bootstrap_consumers(auth: &AuthServer, config: &Config) -> anyhow::Result<()> {
    let consumers = auth.consumers();
    for k in &config.bootstrap.consumers {
        let outcome = consumers
            .bootstrap(&k.key, &k.secret, &k.scopes)
            .await
            .map_err(|e| anyhow::anyhow!("bootstrap consumer {:?}: {}", k.key, describe(&e)))?;
        tracing::info!(consumer = %k.key, ?outcome, "bootstrap consumer");
    }
    Ok(())
}

/// Applies `[[bootstrap.clients]]` and `[[bootstrap.users]]`: created or
/// updated, never duplicated.
pub async fn bootstrap(admin: &Admin, config: &Config) -> anyhow::Result<()> {
    for c in &config.bootstrap.clients {
        let new = NewClient {
            client_id: c.client_id.clone(),
            grants: c.grants.clone(),
            scopes: c.scopes.clone(),
            audiences: c.audiences.clone(),
            redirect_uris: c.redirect_uris.clone(),
            public: c.public,
            first_party: c.first_party,
            id_token_signed_response_alg: c.id_token_signed_response_alg.map(Into::into),
        };
        let outcome = match (&c.client_secret, c.public) {
            (Some(secret), false) => admin.bootstrap_client(&new, secret).await,
            (None, true) => admin.bootstrap_public_client(&new).await,
            (Some(_), true) => Err(gatehouse_auth::Error::InvalidInput(
                "a public client has no client_secret".into(),
            )),
            (None, false) => Err(gatehouse_auth::Error::InvalidInput(
                "client_secret is required unless public = true".into(),
            )),
        }
        .map_err(|e| anyhow::anyhow!("bootstrap client {:?}: {}", c.client_id, describe(&e)))?;
        tracing::info!(client_id = %c.client_id, ?outcome, "bootstrap client");
    }
    // Users at once: each costs an argon2id hash or check (tens of
    // milliseconds of one core), which is most of the start-up time.
    let users = config.bootstrap.users.iter().map(|u| async move {
        let outcome = admin
            .bootstrap_user_with_claims(&u.username, &u.password, &u.scopes, &u.claims)
            .await
            .map_err(|e| anyhow::anyhow!("bootstrap user {:?}: {}", u.username, describe(&e)))?;
        tracing::info!(username = %u.username, ?outcome, "bootstrap user");
        anyhow::Ok(())
    });
    futures::future::try_join_all(users).await?;
    Ok(())
}
