//! `gatehouse webhooks …`: what the outbox holds for the configured
//! webhooks, and the hand on it (`docs/operations.md`, "Webhooks").

use std::process::ExitCode;

use clap::Subcommand;
use gatehouse_outbox::{Message, MessageState, Outbox};
use serde_json::{Value as Json, json};

use crate::StoreArgs;
use crate::admin::Output;

/// How many messages a listing shows at most, per webhook.
const LIST_LIMIT: usize = 1000;

/// `gatehouse webhooks`.
#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Deliveries waiting for their first or next attempt (oldest first).
    List {
        /// Only this webhook's (its `id`).
        #[arg(long)]
        hook: Option<String>,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Deliveries given up (past `max_age`, or refused with 410 Gone), kept
    /// until retried.
    Failed {
        /// Only this webhook's (its `id`).
        #[arg(long)]
        hook: Option<String>,
        #[command(flatten)]
        out: Output,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Puts a failed delivery back in the queue, due now, with a fresh
    /// `max_age`; it keeps its `webhook-id`.
    Retry {
        /// The delivery's id (its `webhook-id`).
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Sends deliveries again as new ones (new `webhook-id`, same body):
    /// one by id, or every one of the webhooks made since a time (sent
    /// ones are kept 7 days).
    Replay {
        /// The delivery's id (its `webhook-id`).
        #[arg(required_unless_present = "since", conflicts_with = "since")]
        id: Option<String>,
        /// Every delivery made at or after this time (RFC 3339, e.g.
        /// 2025-06-01T12:00:00Z).
        #[arg(long, value_name = "RFC3339")]
        since: Option<String>,
        /// With --since: only this webhook's.
        #[arg(long, requires = "since")]
        hook: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Runs a `webhooks` subcommand.
pub fn webhooks(cmd: WebhooksCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cmd {
            WebhooksCommand::List { hook, out, store } => {
                show(&store, hook.as_deref(), MessageState::Pending, out).await
            }
            WebhooksCommand::Failed { hook, out, store } => {
                show(&store, hook.as_deref(), MessageState::Failed, out).await
            }
            WebhooksCommand::Retry { id, store } => {
                let (outbox, db, _) = open(&store, None).await?;
                let is_webhook = outbox
                    .get(&id)
                    .await?
                    .is_some_and(|m| m.channel.starts_with(gatehouse_webhooks::CHANNEL_PREFIX));
                let done = is_webhook && outbox.retry(&id).await?;
                db.close().await;
                if !done {
                    eprintln!("error: no failed webhook delivery has the id {id}");
                    return Ok(ExitCode::FAILURE);
                }
                println!("{id} is due again; a running server sends it within a second");
                Ok(ExitCode::SUCCESS)
            }
            WebhooksCommand::Replay {
                id: Some(id),
                store,
                ..
            } => {
                let (outbox, db, _) = open(&store, None).await?;
                let original = outbox.get(&id).await?;
                let new = match original {
                    Some(m) if m.channel.starts_with(gatehouse_webhooks::CHANNEL_PREFIX) => {
                        outbox.replay(&id).await?
                    }
                    _ => None,
                };
                db.close().await;
                match new {
                    Some(new) => {
                        println!("{id} queued again as {new}");
                        Ok(ExitCode::SUCCESS)
                    }
                    None => {
                        eprintln!("error: no webhook delivery has the id {id}");
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
            WebhooksCommand::Replay {
                id: None,
                since,
                hook,
                store,
            } => {
                let since = since.unwrap_or_default();
                let Some(micros) = rfc3339_micros(&since) else {
                    eprintln!("error: --since {since:?} is not an RFC 3339 time such as 2025-06-01T12:00:00Z");
                    return Ok(ExitCode::FAILURE);
                };
                let (outbox, db, hooks) = open(&store, hook.as_deref()).await?;
                let mut n = 0;
                for h in &hooks {
                    let channel = gatehouse_webhooks::channel(h);
                    for m in outbox.list_since(&channel, micros, usize::MAX).await? {
                        outbox.replay(&m.id).await?;
                        n += 1;
                    }
                }
                db.close().await;
                println!("{n} deliveries queued again");
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// The outbox of the configured database, and the ids of the configured
/// webhooks (only `hook` when given, which must be one of them).
async fn open(
    store: &StoreArgs,
    hook: Option<&str>,
) -> anyhow::Result<(Outbox, gatehouse_store::Store, Vec<String>)> {
    let loaded = store.load(None)?;
    let config = &loaded.config;
    let ids: Vec<String> = config.webhooks.iter().map(|w| w.id.clone()).collect();
    let ids = match hook {
        None => ids,
        Some(h) if ids.iter().any(|i| i == h) => vec![h.to_string()],
        Some(h) => anyhow::bail!(
            "no webhook has the id `{h}` in the configuration (its webhooks: {})",
            ids.join(", ")
        ),
    };
    let db = crate::admin::open_auth_store(config).await?;
    let outbox = Outbox::open_with_clock(db.db().clone(), db.clock().clone()).await?;
    Ok((outbox, db, ids))
}

async fn show(
    store: &StoreArgs,
    hook: Option<&str>,
    state: MessageState,
    out: Output,
) -> anyhow::Result<ExitCode> {
    let (outbox, db, hooks) = open(store, hook).await?;
    let mut all = Vec::new();
    for h in &hooks {
        let channel = gatehouse_webhooks::channel(h);
        all.extend(outbox.list(Some(state), Some(&channel), LIST_LIMIT).await?);
    }
    db.close().await;
    all.sort_by_key(|m| m.seq);
    if out.json {
        let rows: Vec<Json> = all.iter().map(as_json).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if all.is_empty() {
        println!("none");
    } else {
        for m in &all {
            println!("{}", line(m));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Microseconds since the Unix epoch of an RFC 3339 time.
fn rfc3339_micros(text: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(text).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_micros()).ok()
}

fn hook_of(m: &Message) -> &str {
    m.channel
        .strip_prefix(gatehouse_webhooks::CHANNEL_PREFIX)
        .unwrap_or(&m.channel)
}

fn time(micros: i64) -> String {
    gatehouse_schema::datetime_text(micros)
}

fn as_json(m: &Message) -> Json {
    json!({
        "id": m.id,
        "hook": hook_of(m),
        "state": m.state.as_str(),
        "type": m.payload.get("type"),
        "row": m.payload.pointer("/data/id"),
        "created_at": time(m.created_at),
        "attempts": m.attempts,
        "next_attempt_at": (m.state == MessageState::Pending).then(|| time(m.next_attempt_at)),
        "finished_at": m.finished_at.map(time),
        "last_error": m.last_error,
    })
}

fn line(m: &Message) -> String {
    let ty = m.payload.get("type").and_then(Json::as_str).unwrap_or("");
    let row = m
        .payload
        .pointer("/data/id")
        .and_then(Json::as_str)
        .unwrap_or("");
    let when = match m.state {
        MessageState::Pending => format!("next {}", time(m.next_attempt_at)),
        _ => format!(
            "since {}",
            m.finished_at.map(time).unwrap_or_else(|| "?".into())
        ),
    };
    let mut s = format!(
        "{}\t{}\t{ty} {row}\tattempts={}\t{when}",
        m.id,
        hook_of(m),
        m.attempts
    );
    if let Some(e) = &m.last_error {
        s.push_str(&format!("\t{e}"));
    }
    s
}
