//! The change feed: every committed write becomes a [`ChangeEvent`].
//!
//! SQLite: events are published in-process right after the commit.
//!
//! PostgreSQL: the writing transaction also runs `pg_notify` (so the
//! notification is delivered only if, and when, the write commits), and
//! every instance runs a listener (`LISTEN`) that re-publishes notifications from
//! *other* instances to its local subscribers. An instance publishes its own
//! events locally right after commit (lowest latency; works while its listener
//! is reconnecting) and skips them when they come back through LISTEN: every
//! payload carries the writing instance's id. Payloads above PostgreSQL's
//! 8000-byte NOTIFY limit are stored in `_gatehouse_events` and the
//! notification carries the row's id instead. Notifications sent while a
//! listener is disconnected are not replayed to it: instead, once it listens
//! again, the local channel is replaced ([`Local::interrupt`]), so every
//! subscriber that was waiting sees its feed end (and its subscription ends
//! with an error telling the client to subscribe again) rather than silently
//! missing the events of the gap. A stored payload that cannot be read back
//! (after a few tries) ends the feeds the same way: an event is delivered,
//! or the subscriptions that could have missed it end; it is never skipped.
//! The listener's connection is kept while the instance is idle (no
//! `idle_session_timeout`; pinged, so a silently lost one is noticed), so
//! feeds end only when an event may really have been missed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use gatehouse_db::{Built, Db, Listener, SqlKind};
use gatehouse_schema::ChangeKind;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::Row;
use crate::migrate::{EVENTS_TABLE, q};

/// The NOTIFY channel all instances listen on.
pub(crate) const CHANNEL: &str = "gatehouse_changes";
/// Payloads longer than this go through `_gatehouse_events` (PostgreSQL's limit is 8000 bytes).
pub(crate) const MAX_NOTIFY_BYTES: usize = 7900;

/// One committed write.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    /// Entity (GraphQL type) name.
    pub entity: String,
    /// Created, updated (update or replace) or deleted.
    pub kind: ChangeKind,
    /// Id of the row.
    pub id: String,
    /// The row after the write (`None` for deletes).
    pub new: Option<Row>,
    /// The row before the write (`None` for inserts).
    pub old: Option<Row>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Wire {
    /// Origin: the writing instance.
    pub o: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Row>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Row>,
    /// Reference to a `_gatehouse_events` row holding the full payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<i64>,
    /// More events of the same commit follow this one: a listening
    /// instance publishes a commit's events together, once it has them all
    /// ([`Local::publish_commit`]). Absent from the last one (and from
    /// instances before it was added: each event is then its own commit).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub m: bool,
}

fn kind_str(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Created => "created",
        ChangeKind::Updated => "updated",
        ChangeKind::Deleted => "deleted",
    }
}

fn kind_from(s: &str) -> Option<ChangeKind> {
    Some(match s {
        "created" => ChangeKind::Created,
        "updated" => ChangeKind::Updated,
        "deleted" => ChangeKind::Deleted,
        _ => return None,
    })
}

impl Wire {
    pub fn from_event(origin: &str, ev: &ChangeEvent) -> Wire {
        Wire {
            o: origin.to_string(),
            e: Some(ev.entity.clone()),
            k: Some(kind_str(ev.kind).to_string()),
            id: Some(ev.id.clone()),
            new: ev.new.clone(),
            old: ev.old.clone(),
            r: None,
            m: false,
        }
    }

    fn into_event(self) -> Option<ChangeEvent> {
        Some(ChangeEvent {
            entity: self.e?,
            kind: kind_from(self.k.as_deref()?)?,
            id: self.id?,
            new: self.new,
            old: self.old,
        })
    }
}

/// The in-process side of the feed: the broadcast channel every
/// subscriber receives from, replaced when events may have been missed.
#[derive(Debug)]
pub(crate) struct Local {
    tx: RwLock<broadcast::Sender<ChangeEvent>>,
    capacity: usize,
    /// `(entity, id)` -> the row as it was, of rows deleted together with
    /// others (a cascade, or one transaction's deletes), by this instance
    /// or another one, kept for [`GONE_TTL`]: a subscriber judges the
    /// event of a row whose read policy goes through its deleted parent
    /// with the parent as it was ([`crate::EntityStore::visible`]).
    gone: quick_cache::sync::Cache<(String, String), (Instant, Row)>,
}

/// How long a deleted row stays in [`Local::gone_row`]: enough for
/// subscribers to judge the events of its commit (they do on receipt).
const GONE_TTL: Duration = Duration::from_secs(60);
/// Deleted rows kept at most.
const GONE_MAX: usize = 4096;

impl Local {
    pub(crate) fn new(capacity: usize) -> Local {
        let capacity = capacity.max(1);
        Local {
            tx: RwLock::new(broadcast::channel(capacity).0),
            capacity,
            gone: quick_cache::sync::Cache::new(GONE_MAX),
        }
    }

    /// Publishes the events of one commit, in order. When it deleted
    /// several rows, each is kept as it was first ([`Local::gone_row`]),
    /// so that no subscriber judges a child's delete event before its
    /// deleted parent is known. The one way a commit's events are
    /// published, for this instance's commits and other instances' alike.
    pub(crate) fn publish_commit(&self, evs: Vec<ChangeEvent>) {
        let deleted = evs.iter().filter(|ev| ev.kind == ChangeKind::Deleted);
        if deleted.clone().nth(1).is_some() {
            let now = Instant::now();
            for ev in deleted {
                if let Some(old) = &ev.old {
                    self.gone
                        .insert((ev.entity.clone(), ev.id.clone()), (now, old.clone()));
                }
            }
        }
        for ev in evs {
            self.send(ev);
        }
    }

    /// The rows of `entity` deleted together with others in the last
    /// [`GONE_TTL`] whose `field` referenced `id`, as they were.
    pub(crate) fn gone_referencing(&self, entity: &str, field: &str, id: &str) -> Vec<Row> {
        self.gone
            .iter()
            .filter(|((name, _), (at, row))| {
                name == entity
                    && at.elapsed() < GONE_TTL
                    && row.get(field).and_then(serde_json::Value::as_str) == Some(id)
            })
            .map(|(_, (_, row))| row)
            .collect()
    }

    /// The row `id` of `entity` as it was, when it was deleted together
    /// with others in the last [`GONE_TTL`].
    pub(crate) fn gone_row(&self, entity: &str, id: &str) -> Option<Row> {
        self.gone
            .get(&(entity.to_string(), id.to_string()))
            .filter(|(at, _)| at.elapsed() < GONE_TTL)
            .map(|(_, row)| row)
    }

    fn sender(&self) -> std::sync::RwLockReadGuard<'_, broadcast::Sender<ChangeEvent>> {
        self.tx
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes `ev` to the current subscribers.
    pub(crate) fn send(&self, ev: ChangeEvent) {
        let _ = self.sender().send(ev);
    }

    /// A receiver of every event published from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.sender().subscribe()
    }

    /// How many receivers the current channel has.
    pub(crate) fn receivers(&self) -> usize {
        self.sender().receiver_count()
    }

    /// Ends every current receiver's feed (they get `RecvError::Closed`
    /// once the events already queued for them are read); later
    /// subscribers get a new channel.
    pub(crate) fn interrupt(&self) {
        let fresh = broadcast::channel(self.capacity).0;
        *self
            .tx
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }
}

/// Connects a listener and starts LISTEN; returns once notifications flow
/// (`None` on SQLite).
pub(crate) async fn listen(db: &Db) -> Result<Option<Listener>, gatehouse_db::Error> {
    db.listen(CHANNEL).await
}

/// Re-publishes other instances' notifications until the store is dropped
/// (the task is aborted then). Reconnects by itself.
pub(crate) async fn run_listener(
    mut listener: Listener,
    db: Db,
    origin: String,
    local: Arc<Local>,
    writes: Arc<AtomicU64>,
) {
    // The events of the commit being received (a commit's notifications
    // arrive together and in order).
    let mut commit = Vec::new();
    loop {
        match listener.recv().await {
            Some(payload) => {
                // Any notification may mean rows changed (cached counts go stale).
                writes.fetch_add(1, Ordering::SeqCst);
                match decode(&db, &origin, &payload).await {
                    Ok(Some((ev, more))) => {
                        commit.push(ev);
                        if !more {
                            local.publish_commit(std::mem::take(&mut commit));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        // The event is lost to this instance: the feeds
                        // that were waiting for it end instead of going on
                        // without it.
                        tracing::warn!(error = %e, "a change event cannot be read; open subscriptions are ended");
                        commit.clear();
                        local.interrupt();
                    }
                }
            }
            None => {
                tracing::warn!("change listener lost its connection; reconnecting");
                commit.clear();
                writes.fetch_add(1, Ordering::SeqCst);
                listener = relisten(&db).await;
                // Every notification from here on arrives; those sent while
                // the listener was down are lost. End the feeds that were
                // waiting for them rather than let them skip events.
                local.interrupt();
                writes.fetch_add(1, Ordering::SeqCst);
                tracing::info!("change listener listening again; open subscriptions were ended");
            }
        }
    }
}

/// A new listener, once LISTEN runs again; retried every 500 ms so a
/// database that is down does not make the loop spin.
async fn relisten(db: &Db) -> Listener {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        match listen(db).await {
            Ok(Some(l)) => return l,
            Ok(None) => std::future::pending().await,
            Err(e) => tracing::warn!(error = %e, "change listener cannot reconnect yet"),
        }
    }
}

/// How many times a stored event is read before it is given up for lost.
const EVENT_READS: u32 = 3;

/// The event a notification announces, and whether more events of its
/// commit follow: `Ok(None)` for one this instance sent (published
/// locally already) or one that is not a change event (a malformed
/// payload: no gatehouse instance sends one); `Err` when a change event
/// was announced and cannot be had (its stored payload cannot be read, is
/// gone, or does not decode).
pub(crate) async fn decode(
    db: &Db,
    origin: &str,
    payload: &str,
) -> Result<Option<(ChangeEvent, bool)>, String> {
    let wire: Wire = match serde_json::from_str(payload) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring a malformed change notification");
            return Ok(None);
        }
    };
    if wire.o == origin {
        return Ok(None);
    }
    let more = wire.m;
    let wire = match wire.r {
        None => wire,
        Some(id) => {
            let text = read_stored(db, id).await?;
            serde_json::from_str(&text)
                .map_err(|e| format!("stored change event {id} does not decode: {e}"))?
        }
    };
    wire.into_event()
        .map(|ev| Some((ev, more)))
        .ok_or_else(|| "a change notification without entity, kind or id".to_string())
}

/// The stored payload of event `id`, read up to [`EVENT_READS`] times.
async fn read_stored(db: &Db, id: i64) -> Result<String, String> {
    let sql = format!("SELECT payload FROM {} WHERE id = $1", q(EVENTS_TABLE));
    let mut last = String::new();
    for attempt in 0..EVENT_READS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        let read = async {
            let mut c = db.read().await.map_err(|e| e.with_cause())?;
            c.conn()
                .fetch(Built::raw(sql.clone(), vec![id.into()]), &[SqlKind::Text])
                .await
                .map_err(|e| gatehouse_db::with_sources(&e))
        };
        match read.await {
            Ok(rows) => {
                return match rows.first().and_then(|r| r.first()) {
                    Some(serde_json::Value::String(text)) => Ok(text.clone()),
                    _ => Err(format!("stored change event {id} is gone")),
                };
            }
            Err(e) => last = e,
        }
    }
    Err(format!("cannot read stored change event {id}: {last}"))
}

/// The JSON text of an event for NOTIFY or the events table; `more`:
/// more events of its commit follow.
pub(crate) fn payload(origin: &str, ev: &ChangeEvent, more: bool) -> String {
    let mut wire = Wire::from_event(origin, ev);
    wire.m = more;
    serde_json::to_string(&wire).unwrap_or_default()
}

/// The small notification that points at a stored payload; `more` as
/// for [`payload`].
pub(crate) fn reference(origin: &str, id: i64, more: bool) -> String {
    let w = Wire {
        o: origin.to_string(),
        e: None,
        k: None,
        id: None,
        new: None,
        old: None,
        r: Some(id),
        m: more,
    };
    serde_json::to_string(&w).unwrap_or_default()
}
