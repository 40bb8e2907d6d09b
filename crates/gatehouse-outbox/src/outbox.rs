//! [`Outbox`]: writing messages in a caller's transaction, and reading them
//! back.

use std::sync::{Arc, Mutex, Weak};

use gatehouse_db::{Built, Db, DbRow, Dialect, SCHEMA_LOCK, Tx};
use sea_query::SelectStatement;
use serde_json::Value as Json;
use tokio::sync::Notify;

use crate::clock::{Clock, SystemClock};
use crate::error::OutboxError;
use crate::sql;

/// The outbox of one database. Cheap to clone (shared inside).
#[derive(Debug, Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Db,
    clock: Arc<dyn Clock>,
    /// One per running channel loop ([`crate::Worker`]): woken after a
    /// commit that enqueued, so delivery starts without waiting for a poll.
    wakers: Mutex<Vec<Weak<Notify>>>,
}

/// A message to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Which sender delivers it: `"email"`, `"webhook:<id>"`.
    pub channel: String,
    /// Messages with the same channel and key are delivered in the order
    /// they were enqueued; `None` for no order.
    pub key: Option<String>,
    /// What the channel's sender reads, as JSON text.
    payload: String,
}

impl NewMessage {
    /// A message for `channel`, in no particular order.
    pub fn new(channel: impl Into<String>, payload: Json) -> Self {
        Self::from_json_text(channel, payload.to_string())
    }

    /// [`NewMessage::new`] for a payload its caller wrote as JSON text
    /// (straight from its own values, with no JSON tree in between).
    pub fn from_json_text(channel: impl Into<String>, payload: String) -> Self {
        Self {
            channel: channel.into(),
            key: None,
            payload,
        }
    }

    /// The payload, as JSON text.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// Delivered after every message of its channel with the same `key`
    /// enqueued before it (a webhook's row id).
    pub fn ordered_by(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    /// Waiting for its first or next attempt, or being sent.
    Pending,
    /// Delivered.
    Sent,
    /// Given up after its channel's maximum age, or refused for good by
    /// the receiver; kept until retried by hand ([`Outbox::retry`]).
    Failed,
}

impl MessageState {
    /// `pending`, `sent` or `failed`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Pending => sql::PENDING,
            MessageState::Sent => sql::SENT,
            MessageState::Failed => sql::FAILED,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            sql::PENDING => Some(MessageState::Pending),
            sql::SENT => Some(MessageState::Sent),
            sql::FAILED => Some(MessageState::Failed),
            _ => None,
        }
    }
}

/// A stored message, as [`Outbox::get`] and [`Outbox::list`] read it. Times
/// are microseconds since the Unix epoch on the outbox's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its id (a UUIDv7), stable across retries: a receiver can use it to
    /// drop duplicates.
    pub id: String,
    /// Its place in the order of enqueueing.
    pub seq: i64,
    /// Its channel.
    pub channel: String,
    /// Its ordering key.
    pub key: Option<String>,
    /// What it carries.
    pub payload: Json,
    /// Where it stands.
    pub state: MessageState,
    /// When it was enqueued.
    pub created_at: i64,
    /// Attempts started so far (a claim counts, even if its worker died).
    pub attempts: u32,
    /// When it is due next (pending messages).
    pub next_attempt_at: i64,
    /// The worker holding its lease, while one does.
    pub lease_owner: Option<String>,
    /// When that lease ends.
    pub lease_until: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was sent or given up.
    pub finished_at: Option<i64>,
}

impl Outbox {
    /// The outbox in `db`, on the system clock; creates its table when
    /// missing (as every internal table, under the schema lock).
    pub async fn open(db: Db) -> Result<Outbox, OutboxError> {
        Self::open_with_clock(db, Arc::new(SystemClock)).await
    }

    /// [`Outbox::open`] with another clock (tests).
    pub async fn open_with_clock(db: Db, clock: Arc<dyn Clock>) -> Result<Outbox, OutboxError> {
        let d = db.dialect();
        let mut tx = db.begin().await?;
        let mut c = tx.conn();
        if d == Dialect::Postgres {
            c.ddl(SCHEMA_LOCK).await?;
        }
        sql::create(&mut c, d).await?;
        tx.commit().await?;
        Ok(Outbox {
            inner: Arc::new(Inner {
                db,
                clock,
                wakers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The database it is in.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The time on its clock, in microseconds since the Unix epoch.
    pub fn now(&self) -> i64 {
        self.inner.clock.now_micros()
    }

    /// Writes `message` in `tx`, the caller's transaction: it exists once
    /// `tx` commits, and never if it rolls back. Returns its id. After the
    /// commit, call [`Outbox::wake`] (or commit with [`Outbox::commit`]) so
    /// this instance's worker sends it at once rather than at its next poll.
    ///
    /// An error leaves `tx` unusable on PostgreSQL (an aborted
    /// transaction): roll it back.
    pub async fn enqueue(&self, tx: &mut Tx, message: &NewMessage) -> Result<String, OutboxError> {
        let (id, q) = self.enqueue_statement(message)?;
        tx.conn().execute(q).await?;
        Ok(id)
    }

    /// The statement [`Outbox::enqueue`] runs, with the id it gives the
    /// message: for a caller that runs it in a transaction it does not hold
    /// as a [`Tx`] (a store's commit hook, which hands statements to the
    /// writer's transaction). The same rules hold: it exists once that
    /// transaction commits, never if it rolls back; wake the workers after
    /// the commit.
    pub fn enqueue_statement(&self, message: &NewMessage) -> Result<(String, Built), OutboxError> {
        self.insert(message, None)
    }

    /// [`Outbox::enqueue_statement`] for a message that exists only if
    /// `condition` (a `SELECT`) finds a row when the statement runs: a
    /// webhook's delivery of a row that matches its filter, decided by the
    /// database over the row in the same statement.
    pub fn enqueue_statement_if(
        &self,
        message: &NewMessage,
        condition: SelectStatement,
    ) -> Result<(String, Built), OutboxError> {
        self.insert(message, Some(condition))
    }

    fn insert(
        &self,
        message: &NewMessage,
        condition: Option<SelectStatement>,
    ) -> Result<(String, Built), OutboxError> {
        let id = uuid::Uuid::now_v7().to_string();
        let q = sql::insert(
            self.inner.db.dialect(),
            &sql::Insert {
                id: &id,
                channel: &message.channel,
                key: message.key.as_deref(),
                payload: &message.payload,
                now: self.now(),
            },
            condition,
        )?;
        Ok((id, q))
    }

    /// Commits `tx` and wakes the workers: for a caller that enqueued in a
    /// transaction of its own.
    pub async fn commit(&self, tx: Tx) -> Result<(), OutboxError> {
        tx.commit().await?;
        self.wake();
        Ok(())
    }

    /// Tells this process's workers that messages may be due (after a
    /// commit that enqueued, or after moving a [`crate::ManualClock`]).
    /// Other instances find them at their next poll.
    pub fn wake(&self) {
        let mut wakers = self
            .inner
            .wakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        wakers.retain(|w| match w.upgrade() {
            Some(n) => {
                // A permit is kept for a loop not waiting right now.
                n.notify_one();
                true
            }
            None => false,
        });
    }

    /// A waker for one channel loop, woken by [`Outbox::wake`].
    pub(crate) fn waker(&self) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        self.inner
            .wakers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::downgrade(&n));
        n
    }

    /// The message `id`, if stored.
    pub async fn get(&self, id: &str) -> Result<Option<Message>, OutboxError> {
        let d = self.inner.db.dialect();
        let mut conn = self.inner.db.read().await?;
        let rows = conn
            .conn()
            .fetch(sql::get(d, id), &sql::MESSAGE_KINDS)
            .await?;
        rows.into_iter().next().map(message).transpose()
    }

    /// Up to `limit` messages, oldest first, in `state` and of `channel`
    /// when given.
    pub async fn list(
        &self,
        state: Option<MessageState>,
        channel: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Message>, OutboxError> {
        let d = self.inner.db.dialect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut conn = self.inner.db.read().await?;
        let rows = conn
            .conn()
            .fetch(
                sql::list(d, state.map(MessageState::as_str), channel, limit),
                &sql::MESSAGE_KINDS,
            )
            .await?;
        rows.into_iter().map(message).collect()
    }

    /// Up to `limit` messages of `channel` enqueued at or after `since`
    /// (microseconds since the Unix epoch), oldest first, in any state.
    pub async fn list_since(
        &self,
        channel: &str,
        since: i64,
        limit: usize,
    ) -> Result<Vec<Message>, OutboxError> {
        let d = self.inner.db.dialect();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut conn = self.inner.db.read().await?;
        let rows = conn
            .conn()
            .fetch(sql::since(d, channel, since, limit), &sql::MESSAGE_KINDS)
            .await?;
        rows.into_iter().map(message).collect()
    }

    /// Enqueues a copy of message `id` (its channel, key and payload) as a
    /// new message, in its own transaction: sent again, whatever became of
    /// the original (kept until purged). Returns the new id; `None` when no
    /// message has that id.
    pub async fn replay(&self, id: &str) -> Result<Option<String>, OutboxError> {
        let Some(m) = self.get(id).await? else {
            return Ok(None);
        };
        let mut copy = NewMessage::new(m.channel, m.payload);
        copy.key = m.key;
        let mut tx = self.inner.db.begin().await?;
        let new_id = self.enqueue(&mut tx, &copy).await?;
        self.commit(tx).await?;
        Ok(Some(new_id))
    }

    /// Puts the failed message `id` back in the queue, due now, with a
    /// fresh maximum age; `false` when no failed message has that id.
    pub async fn retry(&self, id: &str) -> Result<bool, OutboxError> {
        let d = self.inner.db.dialect();
        let mut conn = self.inner.db.write().await?;
        let n = conn.conn().execute(sql::retry(d, id, self.now())).await?;
        if n > 0 {
            self.wake();
        }
        Ok(n > 0)
    }
}

/// Reads a row of [`sql::MESSAGE_COLUMNS`].
fn message(row: DbRow) -> Result<Message, OutboxError> {
    let mut cols = Columns(row.into_iter());
    Ok(Message {
        id: cols.text()?,
        seq: cols.int()?,
        channel: cols.text()?,
        key: cols.opt_text()?,
        payload: cols.json()?,
        state: {
            let s = cols.text()?;
            MessageState::parse(&s).ok_or_else(|| OutboxError::Corrupt(format!("state {s:?}")))?
        },
        created_at: cols.int()?,
        attempts: u32::try_from(cols.int()?).unwrap_or(u32::MAX),
        next_attempt_at: cols.int()?,
        lease_owner: cols.opt_text()?,
        lease_until: cols.opt_int()?,
        last_error: cols.opt_text()?,
        finished_at: cols.opt_int()?,
    })
}

/// The columns of a row, read in order.
pub(crate) struct Columns(pub(crate) std::vec::IntoIter<Json>);

impl Columns {
    fn next(&mut self) -> Result<Json, OutboxError> {
        self.0
            .next()
            .ok_or_else(|| OutboxError::Corrupt("a column is missing".into()))
    }

    pub(crate) fn text(&mut self) -> Result<String, OutboxError> {
        self.opt_text()?
            .ok_or_else(|| OutboxError::Corrupt("a text column is null".into()))
    }

    pub(crate) fn opt_text(&mut self) -> Result<Option<String>, OutboxError> {
        match self.next()? {
            Json::Null => Ok(None),
            Json::String(s) => Ok(Some(s)),
            other => Err(OutboxError::Corrupt(format!("{other} is not text"))),
        }
    }

    pub(crate) fn int(&mut self) -> Result<i64, OutboxError> {
        self.opt_int()?
            .ok_or_else(|| OutboxError::Corrupt("an integer column is null".into()))
    }

    pub(crate) fn opt_int(&mut self) -> Result<Option<i64>, OutboxError> {
        match self.next()? {
            Json::Null => Ok(None),
            Json::Number(n) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| OutboxError::Corrupt(format!("{n} is not an integer"))),
            other => Err(OutboxError::Corrupt(format!("{other} is not an integer"))),
        }
    }

    pub(crate) fn json(&mut self) -> Result<Json, OutboxError> {
        let text = self.text()?;
        serde_json::from_str(&text).map_err(|e| OutboxError::Corrupt(format!("payload: {e}")))
    }
}
