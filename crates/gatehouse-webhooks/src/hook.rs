//! [`WebhookHook`]: a change's deliveries, queued in the transaction that
//! makes it.

use std::sync::Arc;

use gatehouse_db::{Built, Dialect};
use gatehouse_outbox::{NewMessage, Outbox};
use gatehouse_schema::{ChangeKind, Model};
use gatehouse_store::{ChangeEvent, CommitHook};
use serde_json::{Map, Value as Json};

use crate::{Webhook, event_type};

/// Queues one delivery per webhook that watches a change, in the writing
/// transaction, whichever path wrote (GraphQL, REST, cascades, bulk
/// writes): added to the store with `Store::add_commit_hook`.
#[derive(Debug)]
pub struct WebhookHook {
    outbox: Outbox,
    model: Arc<Model>,
    dialect: Dialect,
    hooks: Vec<Webhook>,
}

impl WebhookHook {
    /// The hook for `hooks` (bound to `model`), enqueueing into `outbox`,
    /// whose database is the store's.
    pub fn new(outbox: Outbox, model: Arc<Model>, hooks: Vec<Webhook>) -> Self {
        let dialect = outbox.db().dialect();
        Self {
            outbox,
            model,
            dialect,
            hooks,
        }
    }

    /// What a receiver gets for `change`: `{type, timestamp, data: {id,
    /// new, old}}`, the whole row before and after (`old` absent on a
    /// create, `new` on a delete), as JSON text, written straight from the
    /// change's rows. No policy filters it: the receiver is the operator's
    /// own code.
    fn payload(&self, change: &ChangeEvent) -> Option<String> {
        let body = Body {
            ty: event_type(&change.entity, change.kind),
            timestamp: gatehouse_schema::datetime_text(self.outbox.now()),
            data: Data {
                id: &change.id,
                new: change.new.as_ref(),
                old: change.old.as_ref(),
            },
        };
        match serde_json::to_string(&body) {
            Ok(text) => Some(text),
            Err(e) => {
                tracing::error!(error = %e, "a webhook body cannot be written; the change is not delivered");
                None
            }
        }
    }

    /// The enqueue statement of `hook` for `change`, with its `where`
    /// decided by the database over the row the change is judged on.
    fn statement(&self, hook: &Webhook, change: &ChangeEvent, payload: &str) -> Option<Built> {
        let message = NewMessage::from_json_text(hook.channel(), payload.to_string())
            .ordered_by(format!("{}:{}", change.entity, change.id));
        let built = match hook.filter() {
            None => self.outbox.enqueue_statement(&message),
            Some(rule) => {
                // An update matches on its new row, a delete on its old one.
                let row = match change.kind {
                    ChangeKind::Deleted => change.old.as_ref(),
                    ChangeKind::Created | ChangeKind::Updated => change.new.as_ref(),
                }?;
                let entity = self.model.entity(&change.entity)?;
                match gatehouse_store::rule_test(&self.model, entity, self.dialect, rule, row) {
                    Ok(condition) => self.outbox.enqueue_statement_if(&message, condition),
                    Err(e) => {
                        // Bound at start against this Model: a bug.
                        tracing::error!(webhook = hook.id(), error = %e, "a webhook's `where` cannot be built; the change is not delivered");
                        return None;
                    }
                }
            }
        };
        match built {
            Ok((_, q)) => Some(q),
            Err(e) => {
                tracing::error!(webhook = hook.id(), error = %e, "a webhook delivery cannot be queued");
                None
            }
        }
    }
}

/// A delivery's body, in the order receivers read it.
#[derive(serde::Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    ty: String,
    timestamp: String,
    data: Data<'a>,
}

#[derive(serde::Serialize)]
struct Data<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    new: Option<&'a Map<String, Json>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    old: Option<&'a Map<String, Json>>,
}

impl CommitHook for WebhookHook {
    fn statements(&self, change: &ChangeEvent) -> Vec<Built> {
        let mut out = Vec::new();
        let mut payload = None;
        for hook in &self.hooks {
            if !hook.watches(&change.entity, change.kind) {
                continue;
            }
            let Some(payload) = payload.get_or_insert_with(|| self.payload(change)) else {
                continue;
            };
            out.extend(self.statement(hook, change, payload));
        }
        out
    }

    /// This process's worker sends at once; other instances find the
    /// messages at their next poll.
    fn committed(&self) {
        self.outbox.wake();
    }
}
