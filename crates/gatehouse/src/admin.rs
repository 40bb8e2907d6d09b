//! `gatehouse client …`, `gatehouse user …` and `gatehouse consumer …`:
//! registrations in the store.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use gatehouse_auth::{Admin, NewClient};

use crate::StoreArgs;

/// `gatehouse client`.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Register an OAuth client; prints its id and secret once.
    Add {
        /// The client id.
        name: String,
        /// Grant types, comma-separated: authorization_code, password, client_credentials,
        /// refresh_token, token-exchange. Default with --redirect-uri: authorization_code,refresh_token.
        #[arg(long, value_delimiter = ',', required_unless_present = "redirect_uris")]
        grants: Vec<String>,
        /// A redirect URI of the authorization code flow (repeatable): https, http on a loopback
        /// host (any port for 127.0.0.1 and [::1]), or a reverse-domain scheme of a native app.
        #[arg(long = "redirect-uri")]
        redirect_uris: Vec<String>,
        /// A public client (single-page or native app): no secret, must use PKCE.
        #[arg(long)]
        public: bool,
        /// A first-party client: the sign-in flow shows no consent page.
        #[arg(long)]
        first_party: bool,
        /// OpenID Connect `id_token_signed_response_alg`: how the client's ID tokens are
        /// signed (RS256, EdDSA or ES256). Default: RS256.
        #[arg(long = "id-token-alg", value_parser = parse_signing_alg)]
        id_token_alg: Option<gatehouse_auth::SigningAlg>,
        /// Scopes the client may obtain, space-separated (e.g. "read write").
        #[arg(long, default_value = "")]
        scopes: String,
        /// A target the client may ask for in a token exchange (repeatable).
        #[arg(long = "audience")]
        audiences: Vec<String>,
        /// Allow RFC 8693 token exchange (adds the grant).
        #[arg(long)]
        may_exchange: bool,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List clients (never their secrets).
    List {
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a client and revoke every token issued to it.
    Remove {
        /// The client id.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Replace a client's secret; prints the new one once.
    RotateSecret {
        /// The client id.
        name: String,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `gatehouse user`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Register a resource owner; the password is read from stdin or a prompt.
    Add {
        /// The user name: 1 to 256 ASCII letters, digits, '.', '_', '-', '~' and '@',
        /// unique among users, clients and consumers without regard to case.
        name: String,
        /// Scopes the user may grant, space-separated.
        #[arg(long, default_value = "read")]
        scopes: String,
        /// A custom claim carried by the user's access tokens, as NAME=VALUE
        /// (repeatable; the value is a string).
        #[arg(long = "claim", value_name = "NAME=VALUE")]
        claims: Vec<String>,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Replace a user's custom claims with the given NAME=VALUE pairs (none:
    /// remove them all). Tokens already issued keep their claims; the next
    /// login or refresh carries the new ones.
    SetClaims {
        /// The user name.
        name: String,
        /// The new claims, NAME=VALUE each (the value is a string).
        #[arg(value_name = "NAME=VALUE")]
        claims: Vec<String>,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show one user: scopes and custom claims (never the password).
    Show {
        /// The user name.
        name: String,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Change a user's password (read from stdin or a prompt).
    Passwd {
        /// The user name.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a user and revoke every token issued for them. The name stays
    /// reserved: no later user, client or consumer gets it.
    Remove {
        /// The user name.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List users.
    List {
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Output format of admin commands.
#[derive(Debug, Clone, Copy, Args)]
pub struct Output {
    /// Machine-readable JSON output.
    #[arg(long)]
    pub json: bool,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

async fn open(store: &StoreArgs) -> anyhow::Result<Option<(Admin, gatehouse_store::Store)>> {
    let loaded = store.load(None)?;
    let config = &loaded.config;
    let store = match users_of(config) {
        Users::Broken => return Ok(None),
        // Users are rows: the store is the one `serve` opens, its tables
        // brought to the schema as `serve` would.
        Users::Rows(model) => match crate::open_store(config, model, false).await? {
            Some(store) => store,
            None => return Ok(None),
        },
        Users::Records => open_auth_store(config).await?,
    };
    Ok(Some((crate::auth::admin(&store, config).await?, store)))
}

/// Where the CLI finds users.
enum Users {
    /// Rows of the schema's account type.
    Rows(std::sync::Arc<gatehouse_schema::Model>),
    /// The authorization server's records (no schema, or no account type).
    Records,
    /// The schema does not load (its problems were printed): which it is
    /// cannot be known.
    Broken,
}

fn users_of(config: &crate::config::Config) -> Users {
    if !config.schema.iter().any(|p| p.exists()) {
        return Users::Records;
    }
    match gatehouse_schema::load_paths(&config.schema) {
        Ok(model) if model.account.is_some() => Users::Rows(std::sync::Arc::new(model)),
        Ok(_) => Users::Records,
        Err(diags) => {
            crate::report(&diags);
            Users::Broken
        }
    }
}

pub(crate) async fn open_auth_store(
    config: &crate::config::Config,
) -> anyhow::Result<gatehouse_store::Store> {
    let model = gatehouse_schema::load_sources_with(
        &[],
        gatehouse_schema::LoadOptions {
            require_query: false,
        },
    )
    .map_err(|d| anyhow::anyhow!("an empty schema does not load: {d}"))?;
    let opts = gatehouse_store::StoreOptions {
        migrate: false,
        max_connections: config.store.max_connections,
        acquire_timeout: std::time::Duration::from_secs(config.store.acquire_timeout.0),
        sqlite_sync_every_commit: config.store.sqlite_sync_every_commit,
        statement_timeout: std::time::Duration::from_secs(config.database.statement_timeout.0),
        ..Default::default()
    };
    gatehouse_store::Store::connect(&config.database.url, std::sync::Arc::new(model), opts)
        .await
        .map_err(|e| crate::open_failed("the store", &config.database.url, e))
}

fn scopes(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn failed(e: &gatehouse_auth::Error) -> anyhow::Error {
    anyhow::anyhow!("{}", crate::auth::describe(e))
}

/// A JWS algorithm named on the command line.
fn parse_signing_alg(s: &str) -> Result<gatehouse_auth::SigningAlg, String> {
    gatehouse_auth::SigningAlg::parse(s)
        .ok_or_else(|| format!("{s:?} is not a signing algorithm: RS256, EdDSA or ES256"))
}

/// Runs a `client` subcommand.
pub fn client(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        match cmd {
            ClientCommand::Add { name, mut grants, redirect_uris, public, first_party, id_token_alg, scopes: sc, audiences, may_exchange, out, store } => {
                let Some((admin, store)) = open(&store).await? else { return Ok(ExitCode::FAILURE) };
                if grants.is_empty() {
                    grants = vec![gatehouse_auth::GRANT_AUTHORIZATION_CODE.into(), gatehouse_auth::GRANT_REFRESH_TOKEN.into()];
                }
                if may_exchange && !grants.iter().any(|g| g == "token-exchange" || g == gatehouse_auth::GRANT_TOKEN_EXCHANGE) {
                    grants.push("token-exchange".into());
                }
                let new = NewClient { client_id: name, grants, scopes: scopes(&sc), audiences, redirect_uris, public, first_party, id_token_signed_response_alg: id_token_alg };
                let (info, secret) = admin.add_client(&new).await.map_err(|e| failed(&e))?;
                store.close().await;
                match (out.json, secret) {
                    (true, Some(secret)) => println!("{}", serde_json::json!({"client_id": info.client_id, "client_secret": secret.0})),
                    (true, None) => println!("{}", serde_json::json!({"client_id": info.client_id})),
                    (false, Some(secret)) => println!("client_id:     {}\nclient_secret: {}\n\nThe secret is shown only this once; it is stored hashed.", info.client_id, secret.0),
                    (false, None) => println!("client_id:     {}\n\nA public client has no secret: it sends client_id and a PKCE code_verifier.", info.client_id),
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::List { out, store } => {
                let Some((admin, store)) = open(&store).await? else { return Ok(ExitCode::FAILURE) };
                let clients = admin.list_clients().await.map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string_pretty(&clients)?);
                } else {
                    for c in clients {
                        let kind = match (c.public, c.first_party) {
                            (true, true) => "public,first-party",
                            (true, false) => "public",
                            (false, true) => "confidential,first-party",
                            (false, false) => "confidential",
                        };
                        println!("{}\t{kind}\tgrants={}\tscopes={}\taudiences={}\tredirect_uris={}\tid_token_alg={}", c.client_id, c.grants.join(","), c.scopes.join(" "), c.audiences.join(","), c.redirect_uris.join(" "), c.id_token_signed_response_alg);
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::Remove { name, store } => {
                let Some((admin, store)) = open(&store).await? else { return Ok(ExitCode::FAILURE) };
                admin.remove_client(&name).await.map_err(|e| failed(&e))?;
                store.close().await;
                println!("removed client {name} and revoked its tokens; the id stays reserved");
                Ok(ExitCode::SUCCESS)
            }
            ClientCommand::RotateSecret { name, out, store } => {
                let Some((admin, store)) = open(&store).await? else { return Ok(ExitCode::FAILURE) };
                let secret = admin.rotate_client_secret(&name).await.map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::json!({"client_id": name, "client_secret": secret.0}));
                } else {
                    println!("client_id:     {name}\nclient_secret: {}", secret.0);
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// Reads a password: a no-echo prompt on a terminal, else one line of stdin.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    let pw = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(prompt)?;
        let again = rpassword::prompt_password("Again: ")?;
        if first != again {
            anyhow::bail!("the passwords differ");
        }
        first
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\n', '\r']).to_string()
    };
    if pw.is_empty() {
        anyhow::bail!("the password is empty");
    }
    Ok(pw)
}

/// A user's claims as one JSON object after `prefix`; nothing when there are none.
fn claims_text(claims: &gatehouse_auth::Claims, prefix: &str) -> String {
    if claims.is_empty() {
        String::new()
    } else {
        format!("{prefix}{}", serde_json::Value::Object(claims.clone()))
    }
}

/// One line of `user list` / `user show`.
fn user_line(u: &gatehouse_auth::UserInfo) -> String {
    let sub = if u.sub == u.username {
        String::new()
    } else {
        format!("\tsub={}", u.sub)
    };
    format!(
        "{}{sub}\tscopes={}{}",
        u.username,
        u.scopes.join(" "),
        claims_text(&u.claims, "\tclaims=")
    )
}

/// Runs a `user` subcommand.
pub fn user(cmd: UserCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        match cmd {
            UserCommand::Add {
                name,
                scopes: sc,
                claims,
                out,
                store,
            } => {
                // Checked before the password prompt: a typo costs nothing.
                let claims = gatehouse_auth::claims_from_pairs(&claims).map_err(|e| failed(&e))?;
                let password = read_password(&format!("Password for {name}: "))?;
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let info = admin
                    .add_user_with_claims(&name, &password, &scopes(&sc), &claims)
                    .await
                    .map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string(&info)?);
                } else {
                    println!(
                        "added user {} with scopes: {}{}",
                        info.username,
                        info.scopes.join(" "),
                        claims_text(&info.claims, " and claims: ")
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            UserCommand::SetClaims {
                name,
                claims,
                out,
                store,
            } => {
                let claims = gatehouse_auth::claims_from_pairs(&claims).map_err(|e| failed(&e))?;
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let info = admin
                    .set_user_claims(&name, &claims)
                    .await
                    .map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string(&info)?);
                } else if info.claims.is_empty() {
                    println!("removed the claims of {name}");
                } else {
                    println!(
                        "set the claims of {name}: {}",
                        claims_text(&info.claims, "")
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            UserCommand::Show { name, out, store } => {
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let info = admin.get_user(&name).await.map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string_pretty(&info)?);
                } else {
                    println!("{}", user_line(&info));
                }
                Ok(ExitCode::SUCCESS)
            }
            UserCommand::Passwd { name, store } => {
                let password = read_password(&format!("New password for {name}: "))?;
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                admin
                    .set_password(&name, &password)
                    .await
                    .map_err(|e| failed(&e))?;
                store.close().await;
                println!("changed the password of {name}");
                Ok(ExitCode::SUCCESS)
            }
            UserCommand::Remove { name, store } => {
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                admin.remove_user(&name).await.map_err(|e| failed(&e))?;
                store.close().await;
                if admin.uses_accounts() {
                    // A later account of this name is another row: another `sub`.
                    println!("removed the account {name} and revoked its tokens");
                } else {
                    println!(
                        "removed user {name} and revoked their tokens; the name stays reserved"
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            UserCommand::List { out, store } => {
                let Some((admin, store)) = open(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let users = admin.list_users().await.map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string_pretty(&users)?);
                } else {
                    for u in users {
                        println!("{}", user_line(&u));
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// `gatehouse consumer` (OAuth 1.0).
#[derive(Debug, Subcommand)]
pub enum ConsumerCommand {
    /// Register an OAuth 1.0 consumer; prints its key and secret once.
    Add {
        /// The consumer key.
        name: String,
        /// Scopes the consumer may obtain, space-separated.
        #[arg(long, default_value = "read")]
        scopes: String,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List consumers (never their secrets).
    List {
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Remove a consumer and every OAuth 1.0 token issued to it.
    Remove {
        /// The consumer key.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

async fn open_consumers(
    store: &StoreArgs,
) -> anyhow::Result<Option<(gatehouse_auth::oauth1::Consumers, gatehouse_store::Store)>> {
    let loaded = store.load(None)?;
    let db = open_auth_store(&loaded.config).await?;
    let consumers = crate::auth::consumers(&loaded.config, &db)?;
    Ok(Some((consumers, db)))
}

/// Runs a `consumer` subcommand.
pub fn consumer(cmd: ConsumerCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        match cmd {
            ConsumerCommand::Add {
                name,
                scopes: sc,
                out,
                store,
            } => {
                let Some((consumers, store)) = open_consumers(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let (info, secret) = consumers
                    .add(&name, &scopes(&sc))
                    .await
                    .map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!(
                        "{}",
                        serde_json::json!({"consumer_key": info.consumer_key, "consumer_secret": secret.0})
                    );
                } else {
                    println!(
                        "consumer_key:    {}\nconsumer_secret: {}\n\nThe secret is shown only this once; it is stored encrypted.",
                        info.consumer_key, secret.0
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            ConsumerCommand::List { out, store } => {
                let Some((consumers, store)) = open_consumers(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                let all = consumers.list().await.map_err(|e| failed(&e))?;
                store.close().await;
                if out.json {
                    println!("{}", serde_json::to_string_pretty(&all)?);
                } else {
                    for c in all {
                        println!("{}\tscopes={}", c.consumer_key, c.scopes.join(" "));
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            ConsumerCommand::Remove { name, store } => {
                let Some((consumers, store)) = open_consumers(&store).await? else {
                    return Ok(ExitCode::FAILURE);
                };
                consumers.remove(&name).await.map_err(|e| failed(&e))?;
                store.close().await;
                println!("removed consumer {name} and its tokens; the key stays reserved");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
