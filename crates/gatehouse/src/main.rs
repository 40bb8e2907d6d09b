//! The `gatehouse` binary: CLI, configuration and wiring.
//!
//! - `config.rs`: defaults, then `gatehouse.toml`, then `GATEHOUSE_*`, then
//!   flags; `docs/configuration.md` is checked against it by a test.
//! - `serve.rs`: axum-server (plain or rustls, SIGHUP reload) with the
//!   connection limits, the metrics recorder and the shutdown sequence:
//!   SIGINT/SIGTERM cancel one token, every task drains within
//!   `shutdown_timeout`, the store closes, the process exits 0.
//! - `init.rs`: `gatehouse init`, a starter service; `admin.rs`: the user,
//!   client and consumer commands; `webhooks.rs`: `gatehouse webhooks`; `logfmt.rs`: the text log format (kept by
//!   hand for speed; ARCHITECTURE.md says why).
//! - The only crate using `anyhow`.

mod admin;
mod allocator;
mod auth;
mod config;
mod init;
mod logbuf;
mod logfmt;
mod serve;
mod webhooks;

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
    /// Write a starter service (schema, config with a local client and user) into DIR.
    Init {
        /// Where to write (created when missing; default: the current directory).
        dir: Option<PathBuf>,
    },
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
    /// Show, retry and replay webhook deliveries.
    Webhooks {
        #[command(subcommand)]
        command: webhooks::WebhooksCommand,
    },
    /// Copy every row (data and the authorization server's state) from one store to another.
    Copy(CopyArgs),
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

/// Each type's scopes, field scopes, server-set fields and effective
/// policy, for `check --explain`.
fn explain_access(model: &gatehouse_schema::Model) -> String {
    let mut out = String::new();
    for e in &model.entities {
        out.push_str(&format!(
            "\n{}: read scope `{}`, write scope `{}`\n",
            e.name,
            e.read_scope(),
            e.write_scope()
        ));
        for k in &e.unique_keys {
            out.push_str(&format!("  unique together: ({})\n", k.fields.join(", ")));
        }
        for f in &e.fields {
            if let Some((join, near, far)) = model.through_of(f) {
                out.push_str(&format!(
                    "  field {}: many-to-many through {} ({}.{} -> {}.{}); reads need {}'s read policy too\n",
                    f.name, join.name, join.name, near.name, join.name, far.name, join.name
                ));
            }
            if let Some(g) = f.generated.filter(|_| f.is_server_set()) {
                let directive = match g {
                    gatehouse_schema::Generated::UpdatedAt => "@updatedAt",
                    gatehouse_schema::Generated::EmailVerified => "e-mail flows",
                    _ => "@createdAt",
                };
                out.push_str(&format!(
                    "  field {}: set by the server ({directive}), read-only\n",
                    f.name
                ));
            }
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
    out.push_str(&cascade_warnings(model));
    for c in &model.connections {
        out.push_str(&format!(
            "\n{}: a Relay connection of {} (edges `{}`{}), not stored; its pages are read by cursor under {}'s read scope and policy\n",
            c.name,
            c.entity,
            c.edge,
            if c.total_count.is_some() { ", totalCount" } else { "" },
            c.entity
        ));
    }
    out
}

/// Where deleting a row of one type deletes or changes rows of another
/// that its own rules would not let the caller touch: `CASCADE` and
/// `SET_NULL` act on every referencing row (schema integrity, not a
/// caller's right), so a type reached by them under a delete (or update)
/// rule of its own, or a write scope other than its parent's, is named.
fn cascade_warnings(model: &gatehouse_schema::Model) -> String {
    use gatehouse_schema::{OnDelete, RelationKind};
    let mut out = String::new();
    for r in &model.relations {
        let RelationKind::ManyToOne { on_delete } = r.kind else {
            continue;
        };
        let (child, field) = (model.entity_at(r.field.entity), model.field_at(r.field));
        let parent = model.entity_at(r.target);
        let (does, rule, what) = match on_delete {
            OnDelete::Restrict => continue,
            OnDelete::Cascade => ("deletes", &child.policy.delete, "delete"),
            OnDelete::SetNull => ("clears `{field}` on", &child.policy.update, "update"),
        };
        let does = does.replace("{field}", &field.name);
        let mut why = Vec::new();
        if rule.is_some() {
            why.push(format!("{}'s {what} rule", child.name));
        }
        if child.write_scope() != parent.write_scope() {
            why.push(format!("its write scope `{}`", child.write_scope()));
        }
        if !why.is_empty() {
            out.push_str(&format!(
                "\nwarning: deleting a {} {does} the {} rows that reference it ({}.{}, onDelete: {}) whatever {} would allow the caller\n",
                parent.name,
                child.name,
                child.name,
                field.name,
                on_delete.sdl(),
                why.join(" or "),
            ));
        }
    }
    out
}

#[derive(Debug, Subcommand)]
enum SchemaCommand {
    /// The effective SDL, built-in declarations included.
    Print(SchemaArgs),
    /// The introspection result (`{"data":{"__schema":…}}`), as `/graphql/schema.json` serves it.
    Json(SchemaArgs),
    /// Root fields and input types the conventions would bind for every type, to copy.
    Scaffold(ScaffoldArgs),
}

/// `gatehouse schema scaffold`.
#[derive(Debug, Args)]
struct ScaffoldArgs {
    #[command(flatten)]
    schema: SchemaArgs,
    /// Write to FILE instead of stdout (replacing it; when FILE is inside
    /// the schema, its old content is not read as part of the schema). A
    /// FILE edited since scaffold wrote it is kept unless --force.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace the --out FILE even when it was edited by hand.
    #[arg(long, requires = "out")]
    force: bool,
}

/// Options shared by every command that touches the store.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Config file (default: ./gatehouse.toml when present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Schema file or directory (repeatable; overrides the config). Only
    /// `serve` and `migrate` read it; registrations do not need it.
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

/// `gatehouse copy`.
#[derive(Debug, Args)]
struct CopyArgs {
    /// The store to read: `sqlite://PATH` or `postgres://...`.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The store to write (migrated to the schema first): `sqlite://PATH` or `postgres://...`.
    #[arg(long, value_name = "URL")]
    to: String,
    /// Replace the rows a non-empty target already has.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    schema: SchemaArgs,
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

/// Set by `serve --log-format json`: problems found while starting are then
/// log events (one JSON object each) rather than plain text on stderr.
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn json_logs() -> bool {
    JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed)
}

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
        Command::Init { dir } => init::run(dir),
        Command::Serve(args) => {
            // Kept to the end: dropping it flushes the log lines still queued.
            let _flush_logs = init_logging(args.log_format);
            let json = matches!(args.log_format, LogFormat::Json);
            JSON_LOGS.store(json, std::sync::atomic::Ordering::Relaxed);
            let result = args
                .store
                .load(args.listen.clone())
                .and_then(|loaded| serve::run(loaded, json));
            match result {
                // In JSON mode every line is a JSON object, the last one too.
                Err(e) if json => {
                    tracing::error!(error = format!("{e:#}"), "the server could not start");
                    Ok(ExitCode::FAILURE)
                }
                other => other,
            }
        }
        Command::Migrate(args) => {
            let loaded = args.store.load(None)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(migrate(loaded.config, args.plan, args.allow_destructive))
        }
        Command::Copy(args) => copy(&args),
        Command::Client { command } => admin::client(command),
        Command::User { command } => admin::user(command),
        Command::Consumer { command } => admin::consumer(command),
        Command::Webhooks { command } => webhooks::webhooks(command),
        Command::Check {
            schema: args,
            explain,
        } => {
            let paths = schema_paths(&args)?;
            match gatehouse_schema::load_paths(&paths) {
                Ok(model) => {
                    for w in &model.warnings {
                        eprint!("{w}");
                    }
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
            SchemaCommand::Json(args) => schema_json(&args),
            SchemaCommand::Scaffold(args) => scaffold(&args),
        },
    }
}

/// `gatehouse copy`: opens the source as it is (nothing migrated), the
/// target migrated to the schema, and copies every table.
fn copy(args: &CopyArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let cli = CliOverrides {
        schema: args.schema.schema.clone(),
        ..CliOverrides::default()
    };
    let config = config::load(args.schema.config.as_deref(), &cli)
        .map_err(anyhow::Error::msg)?
        .config;
    let model = match gatehouse_schema::load_paths(&config.schema) {
        Ok(m) => std::sync::Arc::new(m),
        Err(diags) => return Ok(report(&diags)),
    };
    if std::env::var_os("GATEHOUSE_SECRET").is_none() {
        eprintln!(
            "warning: GATEHOUSE_SECRET is not set: the signing keys are copied sealed, so the \
             target's servers need the secret (or key file) the source's used"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let source = gatehouse_store::Store::connect(
            &args.from,
            model.clone(),
            gatehouse_store::StoreOptions {
                migrate: false,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| open_failed("the source", &args.from, e))?;
        let target = gatehouse_store::Store::connect(
            &args.to,
            model,
            gatehouse_store::StoreOptions::default(),
        )
        .await
        .map_err(|e| open_failed("the target", &args.to, e))?;
        // The OAuth tables and the outbox are not the store's: make sure
        // both sides have them, so that they are copied with the other
        // internal tables.
        for (store, url) in [(&source, &args.from), (&target, &args.to)] {
            ensure_internal_tables(store, url).await?;
        }
        let terminal = std::io::stderr().is_terminal();
        let mut progress = |table: &str, done: u64, total: u64| {
            if terminal {
                eprint!("\r\x1b[K{table}: {done}/{total}");
                if done == total {
                    eprintln!();
                }
            } else if done == total {
                eprintln!("{table}: {done}/{total}");
            }
        };
        let result = gatehouse_store::copy_store(&source, &target, args.force, &mut progress).await;
        source.close().await;
        target.close().await;
        match result {
            Ok(tables) => {
                let rows: u64 = tables.iter().map(|t| t.rows).sum();
                println!(
                    "copied {rows} rows in {} tables from {} to {}; row counts verified\n\
                     next: set `database` (or GATEHOUSE_DATABASE) to the target and restart the servers",
                    tables.len(),
                    redact_url(&args.from),
                    redact_url(&args.to)
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {}", e.with_cause());
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// `schema scaffold`. Empty files are skipped (the one a shell redirect
/// creates before the command runs, `> schema/root.graphql`), and so is
/// the `--out` file, which is about to be replaced: unless a person edited
/// it since scaffold wrote it (kept, unless `--force`), or the other
/// files name what it declares (refused: it cannot be regenerated from
/// them; the message says how to split it).
fn scaffold(args: &ScaffoldArgs) -> anyhow::Result<ExitCode> {
    let paths = schema_paths(&args.schema)?;
    if let Some(out) = &args.out
        && !args.force
        && let Ok(old) = std::fs::read_to_string(out)
        && !old.trim().is_empty()
        && !gatehouse_schema::is_unedited_scaffold(&old)
    {
        eprintln!(
            "error: {} was edited since `gatehouse schema scaffold` wrote it (or it did not \
             write it), so it is kept. Move what you wrote into a file of its own (scaffold \
             keeps and reuses the inputs and enums the schema declares), or write the new \
             root fields elsewhere and merge them by hand (`--out /tmp/root.graphql`), or \
             replace it with `--force`.",
            out.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    let files = schema_files(&paths, args.out.as_deref());
    let opts = gatehouse_schema::LoadOptions {
        require_query: false,
    };
    let model = match gatehouse_schema::load_paths_with(&files, opts) {
        Ok(model) => model,
        Err(diags) => {
            let code = report(&diags);
            // Loading with the file to be replaced succeeds: the other files
            // name what it declares.
            if let Some(out) = &args.out
                && gatehouse_schema::load_paths_with(&schema_files(&paths, None), opts).is_ok()
            {
                eprintln!(
                    "error: the schema names types that {} declares (above), and that file is \
                     about to be replaced. Move those declarations (the where inputs, order \
                     enums or inputs your types name) into a file of their own, which scaffold \
                     keeps and reuses, then run it again.",
                    out.display()
                );
            }
            return Ok(code);
        }
    };
    let text = gatehouse_schema::scaffold_file(&model);
    match &args.out {
        Some(out) => {
            std::fs::write(out, &text)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => print_out(&text)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The schema files under `paths` (directories expanded to their
/// `.graphql` / `.graphqls` files), without `exclude` and without empty
/// files. A path that is neither is kept, so loading reports it.
fn schema_files(paths: &[PathBuf], exclude: Option<&std::path::Path>) -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push(dir.to_path_buf());
            return;
        };
        let mut found: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        found.sort();
        for path in found {
            if path.is_dir() {
                walk(&path, out);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("graphql" | "graphqls")
            ) {
                out.push(path);
            }
        }
    }
    let excluded = exclude.and_then(|p| std::fs::canonicalize(p).ok());
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let before = files.len();
            walk(path, &mut files);
            if files.len() == before {
                // Nothing in it: let loading say so.
                files.push(path.clone());
            }
        } else {
            files.push(path.clone());
        }
    }
    files
        .into_iter()
        .filter(|f| {
            let is_excluded = excluded.is_some() && std::fs::canonicalize(f).ok() == excluded;
            let is_empty = f.is_file()
                && std::fs::read(f).is_ok_and(|b| b.iter().all(u8::is_ascii_whitespace));
            !is_excluded && !is_empty
        })
        .collect()
}

/// `schema json`: builds the executable schema exactly as `serve` does and
/// runs the introspection query `/graphql/schema.json` runs. The store is a
/// throwaway SQLite file: introspection never reads it, but the executable
/// schema is built over a store.
fn schema_json(args: &SchemaArgs) -> anyhow::Result<ExitCode> {
    let cli = CliOverrides {
        schema: args.schema.clone(),
        ..CliOverrides::default()
    };
    let config = config::load(args.config.as_deref(), &cli)
        .map_err(anyhow::Error::msg)?
        .config;
    let model = match gatehouse_schema::load_paths(&config.schema) {
        Ok(m) => std::sync::Arc::new(m),
        Err(diags) => return Ok(report(&diags)),
    };
    let scratch = tempfile::tempdir()?;
    let database = format!("sqlite://{}", scratch.path().join("schema.db").display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let json = runtime.block_on(async {
        let store = gatehouse_store::Store::connect(
            &database,
            model.clone(),
            gatehouse_store::StoreOptions::default(),
        )
        .await?;
        let graphql = serve::graphql(&config, model, store.clone())?;
        let json = graphql.introspection().await;
        store.close().await;
        anyhow::Ok(json)
    })?;
    print_out(&serde_json::to_string_pretty(&json)?)?;
    Ok(ExitCode::SUCCESS)
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
        statement_timeout: std::time::Duration::from_secs(config.database.statement_timeout.0),
        max_bulk_rows: config.limits.max_bulk_rows,
        ..Default::default()
    };
    match gatehouse_store::Store::connect(&config.database.url, model, opts).await {
        Ok(store) => Ok(Some(store)),
        Err(e @ gatehouse_store::StoreError::DestructiveMigration { .. }) => {
            if json_logs() {
                tracing::error!(error = %e, "the schema needs a destructive migration");
            } else {
                eprintln!("error: {e}");
            }
            Ok(None)
        }
        Err(e) => Err(open_failed("the store", &config.database.url, e)),
    }
}

/// A store that does not open, for the CLI: what was opened (the URL
/// without its password), the error, and the cause it hides from API users
/// (printed by `{:#}`); an error of opening itself names what to do.
pub(crate) fn open_failed(what: &str, url: &str, e: gatehouse_store::StoreError) -> anyhow::Error {
    anyhow::Error::new(e).context(format!("opening {what} {}", redact_url(url)))
}

/// The database URL without its password, for messages.
pub(crate) fn redact_url(url: &str) -> String {
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
    let store = gatehouse_store::Store::connect(&config.database.url, model.clone(), opts)
        .await
        .map_err(|e| open_failed("the store", &config.database.url, e))?;
    let steps = store.plan().await?;
    if !plan_only {
        // The OAuth tables live in the same database: a migration run
        // before the servers start (with a role that may create tables)
        // creates them too.
        ensure_internal_tables(&store, &config.database.url).await?;
    }
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

/// Creates the OAuth tables in `store`'s database when missing.
/// Creates the internal tables that are not the store's when missing: the
/// OAuth tables and the outbox (which `gatehouse copy` carries, pending
/// messages included: `docs/design/outbox.md`).
async fn ensure_internal_tables(store: &gatehouse_store::Store, url: &str) -> anyhow::Result<()> {
    let context = || format!("opening {}", redact_url(url));
    gatehouse_auth_store::SqlAuthRepo::new(store.db().clone())
        .ensure_tables()
        .await
        .map_err(|e| anyhow::Error::new(e).context(context()))?;
    gatehouse_outbox::Outbox::open_with_clock(store.db().clone(), store.clock().clone())
        .await
        .map_err(|e| anyhow::Error::new(e).context(context()))?;
    Ok(())
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

/// The log filter: `GATEHOUSE_LOG` when set and valid, else `info`. The
/// PostgreSQL driver logs every statement's bound values at `debug`
/// (passwords' hashes and tokens among them), and the server's notices
/// at `info`: it is held at `warn` whatever the setting.
fn log_filter(setting: Option<&str>) -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::EnvFilter;
    let filter = setting
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    match "tokio_postgres=warn".parse() {
        Ok(cap) => filter.add_directive(cap),
        Err(_) => filter,
    }
}

/// Logs go to stderr in batches written by a background thread (`logbuf`),
/// so a request never waits for a write. Nothing is dropped. Colours only
/// on a terminal.
fn init_logging(format: LogFormat) -> logbuf::FlushGuard {
    use std::io::IsTerminal;
    let filter = log_filter(std::env::var("GATEHOUSE_LOG").ok().as_deref());
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
    let n = diags.error_count();
    if json_logs() {
        tracing::error!(problems = %diags, count = n, "the schema has problems");
        return ExitCode::FAILURE;
    }
    eprint!("{diags}");
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// The targets of the events a subscriber let through.
    struct Targets(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Targets {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if let Ok(mut seen) = self.0.lock() {
                seen.push(event.metadata().target().to_string());
            }
        }
    }

    /// The driver's statement lines (with their bound values) are never
    /// logged, whatever `GATEHOUSE_LOG` asks for; its warnings are.
    #[test]
    fn the_postgres_drivers_bound_values_never_reach_the_logs() {
        for setting in [
            None,
            Some("debug"),
            Some("trace"),
            Some("info,tokio_postgres=trace"),
        ] {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let subscriber = tracing_subscriber::registry()
                .with(super::log_filter(setting))
                .with(Targets(seen.clone()));
            tracing::subscriber::with_default(subscriber, || {
                tracing::debug!(target: "tokio_postgres::query", "executing statement s0 with parameters: [\"secret\"]");
                tracing::info!(target: "tokio_postgres::connection", "NOTICE: relation already exists");
                tracing::warn!(target: "tokio_postgres::connection", "a warning");
                tracing::warn!(target: "gatehouse", "ours");
            });
            let seen = seen.lock().expect("not poisoned").clone();
            assert_eq!(
                seen,
                ["tokio_postgres::connection", "gatehouse"],
                "{setting:?}"
            );
        }
    }
}
