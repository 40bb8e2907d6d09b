//! Shared execution of identical subscriptions.
//!
//! Subscriptions with the same [`Graphql::sharing_key`] (query text,
//! operation, variables, and the caller's scheme and scopes) give the same
//! results, so they form one *group*: one execution stream per group turns
//! each committed event into one GraphQL response, serialized once, and
//! hands that JSON to every member. A member only wraps it in its own frame
//! (its protocol's message with its own id, or an SSE event).
//!
//! What stays per subscriber: validation of the `subscribe` message, its
//! refusal (the group's refusal reaches every member that joined before it,
//! and a later joiner starts a new group, so each one still gets its own
//! `error`), the credential's expiry and revocation watch (it closes the
//! member's connection, never the group), and the bounded outbound queue: a
//! member whose queue is full is dropped from the group and its connection
//! closed, without slowing the others. The group ends when its stream does
//! (every member then gets the final message) or when its last member leaves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use gatehouse_graphql::Graphql;
use serde_json::Value as Json;
use tokio::task::AbortHandle;

/// What a group hands to each member.
#[derive(Debug, Clone)]
pub(crate) enum Delivery {
    /// One result: the GraphQL response as JSON (`{"data":…}`).
    Next(Arc<str>),
    /// The request was refused before execution (parse, validation,
    /// limits); the operation ends with these GraphQL errors.
    Refused {
        /// The errors, for the WebSocket protocols' `error` message.
        errors: Arc<[Json]>,
        /// The whole response as JSON, for SSE's final `next` event.
        response: Arc<str>,
    },
    /// The stream ended.
    Complete,
}

impl Delivery {
    /// One answer as a delivery: serialized once, here (a planned answer
    /// is already JSON text, taken as it is).
    pub(crate) fn of(item: &gatehouse_graphql::Answer) -> Self {
        let response: Arc<str> = item.to_json().into();
        let gatehouse_graphql::Answer::Executed(executed) = item else {
            return Self::Next(response);
        };
        if executed.executed {
            return Self::Next(response);
        }
        let errors = serde_json::to_value(&executed.response.errors)
            .ok()
            .and_then(|v| match v {
                Json::Array(a) => Some(a),
                _ => None,
            })
            .unwrap_or_default();
        Self::Refused {
            errors: errors.into(),
            response,
        }
    }
}

/// A member of a group: where its deliveries go.
pub(crate) trait Sink: Send + 'static {
    /// Hands `delivery` over without waiting. `false` when the member cannot
    /// take it (its queue is full, and the sink then arranges for its
    /// connection to close; or it is gone): it leaves the group.
    fn deliver(&self, delivery: &Delivery) -> bool;
}

type Members = HashMap<u64, Box<dyn Sink>>;

struct Group {
    members: Mutex<Members>,
}

struct Entry {
    group: Arc<Group>,
    task: AbortHandle,
}

/// The groups of one server. Clones share them.
#[derive(Clone, Default)]
pub struct Fanout {
    groups: Arc<Mutex<HashMap<Arc<str>, Entry>>>,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("groups", &lock(&self.groups).len())
            .finish()
    }
}

/// Serial numbers of members (and, in [`crate::ws`], of operations).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, Ordering::Relaxed)
}

/// A poisoned lock only means another thread panicked while holding it; the
/// maps stay consistent (every update is a single insert or remove).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A member's place in its group; dropping it leaves the group.
pub(crate) struct Membership {
    fanout: Fanout,
    key: Arc<str>,
    group: Arc<Group>,
    serial: u64,
}

impl Drop for Membership {
    fn drop(&mut self) {
        // Lock order everywhere: the group map, then a group's members.
        let mut groups = lock(&self.fanout.groups);
        let mut members = lock(&self.group.members);
        members.remove(&self.serial);
        if members.is_empty()
            && let Some(entry) = groups.get(&self.key)
            && Arc::ptr_eq(&entry.group, &self.group)
        {
            entry.task.abort();
            groups.remove(&self.key);
        }
    }
}

impl Fanout {
    /// Adds `sink` to the group of `request` (by `key`, see
    /// [`Graphql::sharing_key`]), starting the group's execution if it has
    /// none yet.
    pub(crate) fn join(
        &self,
        graphql: &Graphql,
        key: String,
        request: gatehouse_graphql::async_graphql::Request,
        sink: Box<dyn Sink>,
    ) -> Membership {
        let serial = next_serial();
        let mut groups = lock(&self.groups);
        if let Some((key, entry)) = groups.get_key_value(key.as_str()) {
            lock(&entry.group.members).insert(serial, sink);
            return Membership {
                fanout: self.clone(),
                key: key.clone(),
                group: entry.group.clone(),
                serial,
            };
        }
        let key: Arc<str> = Arc::from(key);
        let group = Arc::new(Group {
            members: Mutex::new(HashMap::from([(serial, sink)])),
        });
        let stream = graphql.answer_stream(request);
        let task = tokio::spawn(drive(self.clone(), key.clone(), group.clone(), stream));
        groups.insert(
            key.clone(),
            Entry {
                group: group.clone(),
                task: task.abort_handle(),
            },
        );
        Membership {
            fanout: self.clone(),
            key,
            group,
            serial,
        }
    }

    /// Subscription groups running (each executes once per event for all
    /// its members).
    pub fn groups(&self) -> usize {
        lock(&self.groups).len()
    }

    /// Subscribers in all running groups.
    pub fn subscribers(&self) -> usize {
        lock(&self.groups)
            .values()
            .map(|e| lock(&e.group.members).len())
            .sum()
    }

    /// Takes the group out of the map (so no one joins it any more) and
    /// hands the members their last `deliveries`.
    fn finish(&self, key: &str, group: &Arc<Group>, deliveries: &[Delivery]) {
        let members = {
            let mut groups = lock(&self.groups);
            if groups
                .get(key)
                .is_some_and(|e| Arc::ptr_eq(&e.group, group))
            {
                groups.remove(key);
            }
            std::mem::take(&mut *lock(&group.members))
        };
        for sink in members.values() {
            for delivery in deliveries {
                if !sink.deliver(delivery) {
                    break;
                }
            }
        }
    }

    /// Ends a group whose members all left because they could not keep up.
    fn end_if_empty(&self, key: &str, group: &Arc<Group>) -> bool {
        let mut groups = lock(&self.groups);
        if !lock(&group.members).is_empty() {
            return false;
        }
        if groups
            .get(key)
            .is_some_and(|e| Arc::ptr_eq(&e.group, group))
        {
            groups.remove(key);
        }
        true
    }
}

/// Runs a group's execution: every result is serialized once and delivered
/// to each member.
async fn drive(
    fanout: Fanout,
    key: Arc<str>,
    group: Arc<Group>,
    stream: impl futures::Stream<Item = gatehouse_graphql::Answer> + Send,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let delivery = Delivery::of(&item);
        if matches!(delivery, Delivery::Refused { .. }) {
            fanout.finish(&key, &group, &[delivery]);
            return;
        }
        if item.has_errors() {
            // async-graphql ends a subscription after a result with errors:
            // end the group before delivering it, so that no one joins
            // between this result and the end and sees only `complete`.
            fanout.finish(&key, &group, &[delivery, Delivery::Complete]);
            return;
        }
        let emptied = {
            let mut members = lock(&group.members);
            members.retain(|_, sink| sink.deliver(&delivery));
            members.is_empty()
        };
        if emptied && fanout.end_if_empty(&key, &group) {
            return;
        }
    }
    fanout.finish(&key, &group, &[Delivery::Complete]);
}
