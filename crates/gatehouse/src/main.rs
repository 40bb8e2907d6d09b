//! The `gatehouse` binary: CLI, configuration and wiring.

mod admin;
mod auth;
mod config;
mod logbuf;
mod logfmt;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::CliOverrides;

/// GraphQL SDL in; a protected GraphQL + REST + OAuth data service out.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service.
    Serve(ServeArgs),
    /// Bring the store's tables to the schema.
    Migrate(MigrateArgs),
    /// Manage OAuth clients.
    Client {
        #[command(subcommand)]
        command: admin::ClientCommand,
    },
    /// Manage resource owners (users).
    User {
        #[command(subcommand)]
        command: admin::UserCommand,
    },
    /// Manage OAuth 1.0 consumers.
    Consumer {
        #[command(subcommand)]
        command: admin::ConsumerCommand,
    },
    /// Validate the schema; print every problem as `file:line:col: error: message`.
    Check {
        #[command(flatten)]
        schema: SchemaArgs,
        /// Also print each type's scopes and effective row policy.
        #[arg(long)]
        explain: bool,
    },
    /// Print the effective schema, or what the conventions would bind.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
}

/// Each type's scopes, field scopes and effective policy, for `check --explain`.
fn explain_access(model: &gatehouse_schema::Model) -> String {
    let mut out = String::new();
    for e in &model.entities {
        out.push_str(&format!(
            "\n{}: read scope `{}`, write scope `{}`\n",
            e.name,
            e.read_scope(),
            e.write_scope()
        ));
        for f in &e.fields {
            if let Some(r) = model.field_read_scope(f)
                && f.auth.read.is_some()
            {
                let w = model.field_write_scope(f).unwrap_or(r);
                out.push_str(&format!(
                    "  field {}: read scope `{r}`, write scope `{w}`\n",
                    f.name
                ));
            }
        }
        out.push_str(&e.policy.explain());
    }
    out
}

#[derive(Debug, Subcommand)]
enum SchemaCommand {
    /// The effective SDL, built-in declarations included.
    Print(SchemaArgs),
    /// Root fields and input types the conventions would bind for every type, to copy.
    Scaffold(SchemaArgs),
}

/// Options shared by every command that touches the store.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Config file (default: ./gatehouse.toml when present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Schema file or directory (repeatable; overrides the config).
    #[arg(long, value_name = "PATH")]
    schema: Vec<PathBuf>,
    /// `sqlite://PATH` or `postgres://...` (overrides the config).
    #[arg(long, value_name = "URL")]
    database: Option<String>,
}

impl StoreArgs {
    pub(crate) fn load(&self, listen: Option<String>) -> anyhow::Result<config::Loaded> {
        let cli = CliOverrides {
            listen,
            database: self.database.clone(),
            schema: self.schema.clone(),
        };
        config::load(self.config.as_deref(), &cli).map_err(anyhow::Error::msg)
    }
}

/// `gatehouse serve`.
#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Address to listen on (overrides the config), e.g. 0.0.0.0:8080; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Log format (to stderr; one line per request and per event).
    #[arg(long, value_enum, env = "GATEHOUSE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// `gatehouse migrate`.
#[derive(Debug, Args)]
struct MigrateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print the steps without applying them.
    #[arg(long)]
    plan: bool,
    /// Apply destructive steps too (dropped fields or types, changed types).
    #[arg(long)]
    allow_destructive: bool,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where the schema comes from.
#[derive(Debug, Args)]
struct SchemaArgs {
    /// Schema file or directory (repeatable). Default: the config's `schema`, else `./schema`.
    #[arg(long, value_name = "PATH")]
    schema: Vec<PathBuf>,
    /// Config file (default: ./gatehouse.toml when present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

// mimalloc: glibc's allocator spent ~15% of a GraphQL request's CPU in
// malloc/free across the runtime's threads (bench/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => {
            // Kept to the end: dropping it flushes the log lines still queued.
            let _flush_logs = init_logging(args.log_format);
            let loaded = args.store.load(args.listen.clone())?;
            serve::run(loaded)
        }
        Command::Migrate(args) => {
            let loaded = args.store.load(None)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(migrate(loaded.config, args.plan, args.allow_destructive))
        }
        Command::Client { command } => admin::client(command),
        Command::User { command } => admin::user(command),
        Command::Consumer { command } => admin::consumer(command),
        Command::Check {
            schema: args,
            explain,
        } => {
            let paths = schema_paths(&args)?;
            match gatehouse_schema::load_paths(&paths) {
                Ok(model) => {
                    println!(
                        "ok: {} types, {} queries, {} mutations, {} subscriptions",
                        model.entities.len(),
                        model.queries.len(),
                        model.mutations.len(),
                        model.subscriptions.len()
                    );
                    if explain {
                        print_out(&explain_access(&model))?;
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(diags) => Ok(report(&diags)),
            }
        }
        Command::Schema { command } => match command {
            SchemaCommand::Print(args) => {
                let paths = schema_paths(&args)?;
                match gatehouse_schema::load_paths(&paths) {
                    Ok(model) => {
                        print_out(&model.sdl)?;
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(diags) => Ok(report(&diags)),
                }
            }
            SchemaCommand::Scaffold(args) => {
                let paths = schema_paths(&args)?;
                let opts = gatehouse_schema::LoadOptions {
                    require_query: false,
                };
                match gatehouse_schema::load_paths_with(&paths, opts) {
                    Ok(model) => {
                        print_out(&gatehouse_schema::scaffold(&model))?;
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(diags) => Ok(report(&diags)),
                }
            }
        },
    }
}

/// Opens the store for `config`, migrating additive steps (and destructive
/// ones when allowed). Prints the problem and returns `None` when the schema
/// does not load or the migration is refused.
pub(crate) async fn open_store(
    config: &config::Config,
    model: std::sync::Arc<gatehouse_schema::Model>,
    allow_destructive: bool,
) -> anyhow::Result<Option<gatehouse_store::Store>> {
    let opts = gatehouse_store::StoreOptions {
        allow_destructive,
        max_connections: config.store.max_connections,
        acquire_timeout: std::time::Duration::from_secs(config.store.acquire_timeout.0),
        sqlite_sync_every_commit: config.store.sqlite_sync_every_commit,
        ..Default::default()
    };
    match gatehouse_store::Store::connect(&config.database, model, opts).await {
        Ok(store) => Ok(Some(store)),
        Err(e @ gatehouse_store::StoreError::DestructiveMigration { .. }) => {
            eprintln!("error: {e}");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!(
            "opening the store {}: {e}",
            redact_url(&config.database)
        )),
    }
}

/// The database URL without its password, for messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

async fn migrate(
    config: config::Config,
    plan_only: bool,
    allow_destructive: bool,
) -> anyhow::Result<ExitCode> {
    let model = match gatehouse_schema::load_paths(&config.schema) {
        Ok(m) => std::sync::Arc::new(m),
        Err(diags) => return Ok(report(&diags)),
    };
    let opts = gatehouse_store::StoreOptions {
        migrate: false,
        ..Default::default()
    };
    let store = gatehouse_store::Store::connect(&config.database, model.clone(), opts)
        .await
        .map_err(|e| anyhow::anyhow!("opening the store {}: {e}", redact_url(&config.database)))?;
    let steps = store.plan().await?;
    if steps.is_empty() {
        println!("the store matches the schema; nothing to do");
        return Ok(ExitCode::SUCCESS);
    }
    for step in &steps {
        println!("{step}");
    }
    if plan_only {
        return Ok(ExitCode::SUCCESS);
    }
    match store.migrate(allow_destructive).await {
        Ok(applied) => {
            println!("applied {} step(s)", applied.len());
            store.close().await;
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ gatehouse_store::StoreError::DestructiveMigration { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

/// Schema paths: `--schema` flags win; else the config's (file, then environment).
fn schema_paths(args: &SchemaArgs) -> anyhow::Result<Vec<PathBuf>> {
    let cli = CliOverrides {
        schema: args.schema.clone(),
        ..CliOverrides::default()
    };
    let loaded = config::load(args.config.as_deref(), &cli).map_err(anyhow::Error::msg)?;
    Ok(loaded.config.schema)
}

/// Logs go to stderr in batches written by a background thread (`logbuf`),
/// so a request never waits for a write. Nothing is dropped. Colours only
/// on a terminal.
fn init_logging(format: LogFormat) -> logbuf::FlushGuard {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GATEHOUSE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let (writer, guard) = logbuf::stderr();
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        // Colours only on a terminal, where speed does not matter.
        LogFormat::Text if ansi => builder.init(),
        LogFormat::Text => builder
            .fmt_fields(logfmt::Fields)
            .event_format(logfmt::Text { time: true })
            .init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    guard
}

pub(crate) fn report(diags: &gatehouse_schema::Diagnostics) -> ExitCode {
    eprint!("{diags}");
    let n = diags.error_count();
    eprintln!(
        "error: the schema has {n} problem{}",
        if n == 1 { "" } else { "s" }
    );
    ExitCode::FAILURE
}

fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    Ok(())
}
