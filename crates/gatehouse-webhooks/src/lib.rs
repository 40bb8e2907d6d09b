//! Webhooks: every committed change of a watched type is POSTed to a
//! receiver, signed as Standard Webhooks, retried until it is accepted or
//! too old, in order per row.
//!
//! ```text
//!  any write (GraphQL, REST, cascade, bulk) ─► Store::commit_all
//!    └─ WebhookHook (CommitHook): one outbox INSERT per matching webhook,
//!       in the writer's transaction ─► _gatehouse_outbox ─► Worker
//!         └─ channel `webhook:<id>` ─► WebhookSender ─► POST url
//! ```
//!
//! - A [`Webhook`] is bound once, at start, against the Model
//!   ([`Webhook::bind`]): its events name types and kinds of the schema and
//!   its `where` is a filter in the language of `where` inputs, bound as a
//!   `@policy` rule is.
//! - [`WebhookHook`] adds, for each change a webhook watches, the outbox's
//!   INSERT to the writing transaction (`gatehouse_store::CommitHook`): a
//!   committed change always has its delivery, a rolled-back one never. A
//!   `where` is decided by the database in that same statement, over the
//!   row (the new one of a create or update, the old one of a delete).
//! - [`WebhookSender`] delivers one message: the body stored at enqueue
//!   time, the message id as `webhook-id` (the same on every attempt), and
//!   an HMAC-SHA256 signature over `id.timestamp.body`.
//!
//! The writer pays one INSERT per matching webhook and never waits for a
//! receiver. See `docs/design/webhooks.md`.

#![warn(missing_docs)]

mod hook;
mod sender;

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use gatehouse_schema::{ChangeKind, Model, Rule};

pub use hook::WebhookHook;
pub use sender::{RESPONSE_BODY_CAP, WebhookSender, sign};

/// The outbox channel of webhook `id`.
pub fn channel(id: &str) -> String {
    format!("{CHANNEL_PREFIX}{id}")
}

/// What every webhook channel's name starts with.
pub const CHANNEL_PREFIX: &str = "webhook:";

/// A webhook as configured (`[[webhooks]]`), before it is checked.
#[derive(Clone, PartialEq)]
pub struct Definition {
    /// Its name: the channel is `webhook:<id>`, and the CLI and metrics
    /// name it so.
    pub id: String,
    /// Where deliveries are POSTed (http or https).
    pub url: String,
    /// `Type.created`, `Type.updated`, `Type.deleted` or `Type.*`.
    pub events: Vec<String>,
    /// An optional filter on the row, a GraphQL object literal in the
    /// language of `where` inputs (`{status: DONE}`).
    pub filter: Option<String>,
    /// The signing secret, `whsec_` and the base64 of the key.
    pub secret: String,
    /// How long one delivery attempt may take.
    pub timeout: Duration,
    /// How long after a change its delivery is retried.
    pub max_age: Duration,
    /// Deliveries in flight at most, per instance (1 to
    /// [`MAX_CONCURRENCY`]). Order per row holds whatever the number.
    pub concurrency: usize,
}

/// The secret stays out of logs.
impl fmt::Debug for Definition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Definition")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("events", &self.events)
            .field("filter", &self.filter)
            .field("secret", &"<redacted>")
            .field("timeout", &self.timeout)
            .field("max_age", &self.max_age)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// Why a webhook cannot be set up: a configuration error, worded for the
/// operator. [`WebhookError::key`] names the `[[webhooks]]` key it is
/// about. It never contains the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The id is empty or has characters other than letters, digits, `_`
    /// and `-`.
    #[error("{0:?} is not a webhook id: 1 to 64 ASCII letters, digits, `_` or `-`")]
    Id(String),
    /// The URL does not read, or is not http or https.
    #[error("{0}")]
    Url(String),
    /// An event does not name a type and a kind of the schema.
    #[error("{0}")]
    Events(String),
    /// The `where` does not parse or bind.
    #[error("{0}")]
    Where(String),
    /// The secret is not `whsec_` and base64 of a key of 24 to 64 bytes.
    #[error("{0}")]
    Secret(String),
    /// `timeout` or `max_age` is zero.
    #[error("must be at least 1 second")]
    Duration(&'static str),
    /// `concurrency` is 0 or above [`MAX_CONCURRENCY`].
    #[error("{0} is not a number of deliveries in flight: 1 to {MAX_CONCURRENCY}")]
    Concurrency(usize),
    /// The HTTP client cannot be built (no TLS roots).
    #[error("the HTTP client cannot be built: {0}")]
    Client(String),
}

/// The most deliveries one webhook may have in flight per instance.
pub const MAX_CONCURRENCY: usize = 64;

/// Deliveries in flight per webhook and instance when not configured.
pub const DEFAULT_CONCURRENCY: usize = 4;

impl WebhookError {
    /// The `[[webhooks]]` key the error is about.
    pub fn key(&self) -> &'static str {
        match self {
            WebhookError::Id(_) => "id",
            WebhookError::Url(_) | WebhookError::Client(_) => "url",
            WebhookError::Events(_) => "events",
            WebhookError::Where(_) => "where",
            WebhookError::Secret(_) => "secret",
            WebhookError::Duration(key) => key,
            WebhookError::Concurrency(_) => "concurrency",
        }
    }
}

/// A webhook bound to the Model: what it watches, where it sends, how it
/// signs.
#[derive(Clone)]
pub struct Webhook {
    id: String,
    url: url::Url,
    /// (type, kind) pairs it watches.
    events: BTreeSet<(String, Kind)>,
    /// The type its `where` is over, and the rule.
    filter: Option<(String, Rule)>,
    key: Vec<u8>,
    timeout: Duration,
    max_age: Duration,
    concurrency: usize,
}

/// The key stays out of logs.
impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("url", &self.url.as_str())
            .field("events", &self.events)
            .field("filter", &self.filter.as_ref().map(|(_, r)| r.to_string()))
            .field("timeout", &self.timeout)
            .field("max_age", &self.max_age)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// A change kind, ordered (for the set of watched events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Created,
    Updated,
    Deleted,
}

impl Kind {
    fn of(k: ChangeKind) -> Kind {
        match k {
            ChangeKind::Created => Kind::Created,
            ChangeKind::Updated => Kind::Updated,
            ChangeKind::Deleted => Kind::Deleted,
        }
    }

    const ALL: [Kind; 3] = [Kind::Created, Kind::Updated, Kind::Deleted];

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "created" => Kind::Created,
            "updated" => Kind::Updated,
            "deleted" => Kind::Deleted,
            _ => return None,
        })
    }
}

/// The event type a change is delivered as: `Task.updated`.
pub fn event_type(entity: &str, kind: ChangeKind) -> String {
    let kind = match kind {
        ChangeKind::Created => "created",
        ChangeKind::Updated => "updated",
        ChangeKind::Deleted => "deleted",
    };
    format!("{entity}.{kind}")
}

/// Checks what can be checked without the schema: the id, the URL, the
/// form of each event, the secret, the durations. Returns the decoded key.
pub fn check(def: &Definition) -> Result<Vec<u8>, WebhookError> {
    let id_ok = !def.id.is_empty()
        && def.id.len() <= 64
        && def
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !id_ok {
        return Err(WebhookError::Id(def.id.clone()));
    }
    parse_url(&def.url)?;
    if def.events.is_empty() {
        return Err(WebhookError::Events(
            "name at least one event, e.g. [\"Task.created\"] or [\"Task.*\"]".into(),
        ));
    }
    for e in &def.events {
        parse_event(e)?;
    }
    if def.timeout.is_zero() {
        return Err(WebhookError::Duration("timeout"));
    }
    if def.max_age.is_zero() {
        return Err(WebhookError::Duration("max_age"));
    }
    if !(1..=MAX_CONCURRENCY).contains(&def.concurrency) {
        return Err(WebhookError::Concurrency(def.concurrency));
    }
    parse_secret(&def.secret)
}

fn parse_url(text: &str) -> Result<url::Url, WebhookError> {
    let url = url::Url::parse(text)
        .map_err(|e| WebhookError::Url(format!("{text:?} is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(WebhookError::Url(format!(
            "{text:?} must be an http:// or https:// URL with a host"
        )));
    }
    Ok(url)
}

/// `Type.kind` or `Type.*`, split; the kinds it stands for.
fn parse_event(text: &str) -> Result<(&str, Vec<Kind>), WebhookError> {
    let bad = || {
        WebhookError::Events(format!(
            "{text:?} is not an event: write `Type.created`, `Type.updated`, `Type.deleted` or `Type.*`"
        ))
    };
    let (ty, kind) = text.rsplit_once('.').ok_or_else(bad)?;
    if ty.is_empty() {
        return Err(bad());
    }
    let kinds = match kind {
        "*" => Kind::ALL.to_vec(),
        k => vec![Kind::parse(k).ok_or_else(bad)?],
    };
    Ok((ty, kinds))
}

/// `whsec_` + base64 (Standard Webhooks): the key is the decoded bytes.
fn parse_secret(text: &str) -> Result<Vec<u8>, WebhookError> {
    let Some(b64) = text.strip_prefix("whsec_") else {
        return Err(WebhookError::Secret(
            "must be `whsec_` followed by the base64 of a random key of 24 to 64 bytes \
             (e.g. `whsec_$(openssl rand -base64 32)`)"
                .into(),
        ));
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| WebhookError::Secret("the part after `whsec_` is not base64".into()))?;
    if !(24..=64).contains(&key.len()) {
        return Err(WebhookError::Secret(format!(
            "the key is {} bytes; Standard Webhooks keys are 24 to 64 bytes",
            key.len()
        )));
    }
    Ok(key)
}

impl Webhook {
    /// Checks `def` ([`check`]) and binds it to `model`: each event's type
    /// must be a type of the schema, and `where` a filter over the one
    /// type the events name.
    pub fn bind(def: &Definition, model: &Model) -> Result<Webhook, WebhookError> {
        let key = check(def)?;
        let url = parse_url(&def.url)?;
        let mut events = BTreeSet::new();
        for text in &def.events {
            let (ty, kinds) = parse_event(text)?;
            if model.entity(ty).is_none() {
                let known: Vec<&str> = model.entities.iter().map(|e| e.name.as_str()).collect();
                return Err(WebhookError::Events(format!(
                    "{text:?}: the schema has no type `{ty}` (its types: {})",
                    known.join(", ")
                )));
            }
            for k in kinds {
                events.insert((ty.to_string(), k));
            }
        }
        let filter = match &def.filter {
            None => None,
            Some(text) => {
                let types: BTreeSet<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
                let [ty] = types.into_iter().collect::<Vec<_>>()[..] else {
                    return Err(WebhookError::Where(
                        "a `where` is over the rows of one type: give the events of one type \
                         (or one webhook per type)"
                            .into(),
                    ));
                };
                let rule = gatehouse_schema::bind_filter(model, ty, text, "where")
                    .map_err(|d| WebhookError::Where(d.to_string().trim_end().to_string()))?;
                Some((ty.to_string(), rule))
            }
        };
        Ok(Webhook {
            id: def.id.clone(),
            url,
            events,
            filter,
            key,
            timeout: def.timeout,
            max_age: def.max_age,
            concurrency: def.concurrency,
        })
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its outbox channel, `webhook:<id>`.
    pub fn channel(&self) -> String {
        channel(&self.id)
    }

    /// Where it POSTs.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The scheme, host and port it POSTs to, for logs (a URL's path or
    /// query may carry a token of the receiver's).
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    /// How its channel is delivered: the outbox's defaults (backoff from
    /// 5 s doubling up to 10 min) with its `timeout`, `max_age` and
    /// `concurrency`, counted as `gatehouse_webhook_deliveries_total{hook,
    /// outcome="delivered|retried|failed"}` and
    /// `gatehouse_webhook_oldest_pending_seconds{hook}` too.
    pub fn channel_options(&self) -> gatehouse_outbox::ChannelOptions {
        gatehouse_outbox::ChannelOptions {
            send_timeout: self.timeout,
            max_age: self.max_age,
            concurrency: self.concurrency,
            metrics: Some(gatehouse_outbox::ChannelMetrics {
                total: "gatehouse_webhook_deliveries_total",
                oldest_pending: "gatehouse_webhook_oldest_pending_seconds",
                label: ("hook", self.id.clone()),
                sent: "delivered",
            }),
            ..gatehouse_outbox::ChannelOptions::default()
        }
    }

    /// Whether it watches changes of `kind` to rows of `entity`.
    pub fn watches(&self, entity: &str, kind: ChangeKind) -> bool {
        self.events.contains(&(entity.to_string(), Kind::of(kind)))
    }

    /// Its `where`, when it has one.
    pub fn filter(&self) -> Option<&Rule> {
        self.filter.as_ref().map(|(_, r)| r)
    }

    /// The sender that delivers its channel.
    pub fn sender(&self) -> Result<WebhookSender, WebhookError> {
        WebhookSender::new(self)
    }
}
