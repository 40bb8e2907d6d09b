//! [`Worker`]: claims due messages under a lease and hands them to the
//! [`Sender`] of their channel; records what came of each.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gatehouse_db::SqlKind;
use serde_json::Value as Json;
use tokio::sync::{Notify, broadcast};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::clock::micros;
use crate::error::OutboxError;
use crate::outbox::{Columns, Outbox};
use crate::sql;

/// Messages handed to senders, by channel and outcome
/// (`sent`, `retried`, `failed`).
const MESSAGES_TOTAL: &str = "gatehouse_outbox_messages_total";
/// Age of the oldest pending message, by channel (0 when none).
const OLDEST_PENDING: &str = "gatehouse_outbox_oldest_pending_seconds";
/// How often a channel loop refreshes its gauge.
const GAUGE_EVERY: Duration = Duration::from_secs(5);
/// How often a channel loop deletes sent messages past their keeping time.
const PURGE_EVERY: Duration = Duration::from_secs(600);
/// How long a channel loop, once woken, lets wakes and finished sends
/// gather before it records outcomes and claims again: a burst of commits
/// or of deliveries then costs one claim and one outcome transaction, not
/// one of each per message (the claim is a write transaction, which
/// SQLite serialises with the writers).
const GATHER: Duration = Duration::from_millis(5);

/// A message handed to a [`Sender`].
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The message's id, the same on every attempt (a receiver's
    /// idempotency key: delivery is at least once).
    pub id: String,
    /// Its channel.
    pub channel: String,
    /// Its ordering key.
    pub key: Option<String>,
    /// What it carries.
    pub payload: Json,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When it was enqueued (microseconds since the Unix epoch).
    pub created_at: i64,
}

/// Why a send did not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// It may work later (a receiver down, a timeout, a 4xx/5xx that may
    /// pass): retried with backoff until the channel's maximum age.
    #[error("{0}")]
    Retry(String),
    /// It will never work (a payload the sender cannot read, a recipient
    /// the mail server refuses for good): failed at once.
    #[error("{0}")]
    Permanent(String),
}

/// Delivers the messages of one channel. Called by the worker with at
/// most [`ChannelOptions::concurrency`] sends in flight, each bounded by
/// [`ChannelOptions::send_timeout`]. The text of an error is stored as the
/// message's `last_error` and logged: it must not hold secrets.
#[async_trait]
pub trait Sender: Send + Sync + fmt::Debug {
    /// Delivers `message`; `Ok` once the receiver has accepted it.
    async fn send(&self, message: &Outgoing) -> Result<(), SendError>;
}

/// How one channel is delivered.
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// Sends in flight at most.
    pub concurrency: usize,
    /// How long one send may take before it counts as failed (and is
    /// retried).
    pub send_timeout: Duration,
    /// How long a claim holds a message before another worker may take it
    /// (a worker that died): at least twice `send_timeout`, which it is
    /// raised to otherwise.
    pub lease: Duration,
    /// The delay before the first retry; each next one doubles it, with
    /// jitter ([`backoff_delay`]).
    pub first_retry: Duration,
    /// The longest delay between two attempts.
    pub max_retry: Duration,
    /// How long after it was enqueued a message is retried; a retry that
    /// would come later fails it instead.
    pub max_age: Duration,
    /// How long sent messages are kept before they are deleted (failed
    /// ones stay until retried or removed by hand).
    pub keep_sent: Duration,
    /// The channel's own metric names, counted besides the outbox's
    /// (webhooks: `gatehouse_webhook_deliveries_total{hook, outcome}`).
    pub metrics: Option<ChannelMetrics>,
}

/// Metric names a channel is also counted under, with one label naming it.
#[derive(Debug, Clone)]
pub struct ChannelMetrics {
    /// The counter of outcomes, labelled `outcome`.
    pub total: &'static str,
    /// The gauge of the oldest pending message's age, in seconds.
    pub oldest_pending: &'static str,
    /// The label that names the channel, and its value.
    pub label: (&'static str, String),
    /// The `outcome` of a message sent (`sent`, or `delivered`); retried
    /// and failed keep their names.
    pub sent: &'static str,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            send_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(120),
            first_retry: Duration::from_secs(5),
            max_retry: Duration::from_secs(600),
            max_age: Duration::from_secs(24 * 3600),
            keep_sent: Duration::from_secs(7 * 24 * 3600),
            metrics: None,
        }
    }
}

/// How a [`Worker`] runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How often each channel looks for due messages when nothing woke it
    /// (retries coming due, messages of other instances that died).
    pub poll_interval: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// What came of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered.
    Sent,
    /// Not delivered; tried again at `next_attempt_at`.
    Retried {
        /// When (microseconds since the Unix epoch, on the outbox's clock).
        next_attempt_at: i64,
    },
    /// Not delivered, and given up.
    Failed,
}

/// One attempt's outcome, as a worker reports it ([`Worker::outcomes`])
/// once it is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message.
    pub id: String,
    /// Its channel.
    pub channel: String,
    /// Which attempt, from 1.
    pub attempt: u32,
    /// What came of it.
    pub outcome: Outcome,
    /// Why it was not delivered.
    pub error: Option<String>,
}

/// Delivers the outbox's messages, one loop per channel. Several workers
/// (in one process or many, on one database) share the work: each message
/// is claimed by one at a time.
#[derive(Debug)]
pub struct Worker {
    outbox: Outbox,
    owner: Arc<str>,
    opts: WorkerOptions,
    channels: Vec<(String, Arc<dyn Sender>, ChannelOptions)>,
    outcomes: broadcast::Sender<Delivery>,
}

impl Worker {
    /// A worker on `outbox`, with no channel yet.
    pub fn new(outbox: &Outbox, opts: WorkerOptions) -> Self {
        Self {
            outbox: outbox.clone(),
            owner: uuid::Uuid::now_v7().to_string().into(),
            opts,
            channels: Vec::new(),
            outcomes: broadcast::channel(1024).0,
        }
    }

    /// Delivers the messages of `channel` through `sender`.
    pub fn channel(
        mut self,
        channel: impl Into<String>,
        sender: Arc<dyn Sender>,
        opts: ChannelOptions,
    ) -> Self {
        self.channels.push((channel.into(), sender, opts));
        self
    }

    /// The name its leases carry.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Every attempt's outcome from now on, once recorded in the database
    /// (a slow reader misses the oldest when over 1024 behind).
    pub fn outcomes(&self) -> broadcast::Receiver<Delivery> {
        self.outcomes.subscribe()
    }

    /// Runs every channel until `shutdown`, then lets the sends in flight
    /// finish (each is bounded by its send timeout). Aborting the handle
    /// drops them: their messages are taken again once the lease expires.
    pub fn spawn(self, shutdown: CancellationToken) -> JoinHandle<()> {
        let mut loops = JoinSet::new();
        for (channel, sender, mut opts) in self.channels {
            opts.concurrency = opts.concurrency.max(1);
            opts.lease = opts.lease.max(opts.send_timeout.saturating_mul(2));
            let ctx = Arc::new(ChannelCtx {
                outbox: self.outbox.clone(),
                owner: self.owner.clone(),
                channel,
                sender,
                opts,
                outcomes: self.outcomes.clone(),
            });
            // Registered before the task runs, so a wake right after
            // `spawn` is not missed.
            let waker = self.outbox.waker();
            loops.spawn(run_channel(
                ctx,
                waker,
                self.opts.poll_interval,
                shutdown.clone(),
            ));
        }
        tokio::spawn(async move { while loops.join_next().await.is_some() {} })
    }
}

/// The exponential backoff of attempt `attempt` (from 1): `first` doubled
/// per attempt, at most `max`, of which a random part is dropped so that
/// messages failing together do not retry together: the delay lies in
/// `[d/2, d]` for `jitter` in `[0, 1]`.
pub fn backoff_delay(attempt: u32, first: Duration, max: Duration, jitter: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    let full = first.saturating_mul(1u32 << doublings).min(max);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// A message this worker leased, and when its age began (its enqueueing,
/// or the manual retry since).
#[derive(Debug)]
struct Claimed {
    message: Outgoing,
    retry_since: i64,
}

/// What one channel loop needs.
#[derive(Debug)]
struct ChannelCtx {
    outbox: Outbox,
    owner: Arc<str>,
    channel: String,
    sender: Arc<dyn Sender>,
    opts: ChannelOptions,
    outcomes: broadcast::Sender<Delivery>,
}

async fn run_channel(
    ctx: Arc<ChannelCtx>,
    waker: Arc<Notify>,
    poll: Duration,
    shutdown: CancellationToken,
) {
    let mut sends = JoinSet::new();
    let mut finished = Vec::new();
    let mut gauge_at: Option<Instant> = None;
    let mut purged_at = Instant::now();
    loop {
        // A send that panicked leaves its message leased: taken again when
        // the lease expires.
        while let Some(done) = sends.try_join_next() {
            finished.extend(done.ok());
        }
        if !finished.is_empty() {
            ctx.record_attempts(std::mem::take(&mut finished)).await;
        }
        let free = ctx.opts.concurrency.saturating_sub(sends.len());
        if free > 0 {
            match ctx.claim(free).await {
                Ok(batch) => {
                    for m in batch {
                        let ctx = ctx.clone();
                        sends.spawn(async move { ctx.attempt(m).await });
                    }
                }
                Err(e) => tracing::warn!(
                    channel = %ctx.channel,
                    error = %e,
                    cause = %gatehouse_db::with_sources(&e),
                    "the outbox cannot claim messages; trying again at the next poll"
                ),
            }
        }
        if gauge_at.is_none_or(|t| t.elapsed() >= GAUGE_EVERY) {
            gauge_at = Some(Instant::now());
            ctx.record_oldest_pending().await;
        }
        if purged_at.elapsed() >= PURGE_EVERY {
            purged_at = Instant::now();
            ctx.purge_sent().await;
        }
        // A finished send frees room and may unblock the next message of
        // its key; a wake says something was enqueued; the poll finds
        // retries come due and what other instances left.
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = waker.notified() => {}
            () = tokio::time::sleep(poll) => {}
            Some(done) = sends.join_next(), if !sends.is_empty() => finished.extend(done.ok()),
        }
        // What else comes meanwhile (the commits of a burst of writes, the
        // other sends of a batch) is taken up by the same claim and the
        // same outcome transaction.
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(GATHER) => {}
        }
    }
    while let Some(done) = sends.join_next().await {
        finished.extend(done.ok());
    }
    ctx.record_attempts(finished).await;
}

/// One send's result, recorded by the channel loop with the others that
/// finished about when it did.
struct Attempt {
    claimed: Claimed,
    result: Result<(), SendError>,
}

impl ChannelCtx {
    /// Leases up to `limit` due messages to this worker.
    async fn claim(&self, limit: usize) -> Result<Vec<Claimed>, OutboxError> {
        let db = self.outbox.db();
        let now = self.outbox.now();
        let q = sql::claim(
            db.dialect(),
            &self.owner,
            &self.channel,
            now,
            now.saturating_add(micros(self.opts.lease)),
            i64::try_from(limit).unwrap_or(i64::MAX),
        );
        let mut tx = db.begin().await?;
        let rows = tx.conn().fetch(q, &sql::CLAIM_KINDS).await?;
        tx.commit().await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut c = Columns(row.into_iter());
            let id = c.text()?;
            let seq = c.int()?;
            let key = c.opt_text()?;
            let payload = c.json()?;
            let attempt = u32::try_from(c.int()?).unwrap_or(u32::MAX);
            let created_at = c.int()?;
            let retry_since = c.int()?;
            out.push((
                seq,
                retry_since,
                Outgoing {
                    id,
                    channel: self.channel.clone(),
                    key,
                    payload,
                    attempt,
                    created_at,
                },
            ));
        }
        // RETURNING promises no order: send in the order enqueued.
        out.sort_by_key(|(seq, ..)| *seq);
        Ok(out
            .into_iter()
            .map(|(_, retry_since, message)| Claimed {
                message,
                retry_since,
            })
            .collect())
    }

    /// Sends one claimed message, within the send timeout.
    async fn attempt(&self, claimed: Claimed) -> Attempt {
        let result =
            match tokio::time::timeout(self.opts.send_timeout, self.sender.send(&claimed.message))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(SendError::Retry(format!(
                    "no answer within {} s",
                    self.opts.send_timeout.as_secs_f64()
                ))),
            };
        Attempt { claimed, result }
    }

    /// What comes of an attempt: the statement that records it (none for
    /// a delivery: [`sql::mark_all_sent`] records them together), the
    /// outcome and the error.
    fn outcome(
        &self,
        a: &Attempt,
        now: i64,
    ) -> (Option<gatehouse_db::Built>, Outcome, Option<String>) {
        let m = &a.claimed.message;
        let d = self.outbox.db().dialect();
        match &a.result {
            Ok(()) => (None, Outcome::Sent, None),
            Err(SendError::Permanent(e)) => (
                Some(sql::mark_failed(d, &m.id, &self.owner, now, e)),
                Outcome::Failed,
                Some(e.clone()),
            ),
            Err(SendError::Retry(e)) => {
                let delay = backoff_delay(
                    m.attempt,
                    self.opts.first_retry,
                    self.opts.max_retry,
                    rand::random::<f64>(),
                );
                let next = now.saturating_add(micros(delay));
                if next
                    > a.claimed
                        .retry_since
                        .saturating_add(micros(self.opts.max_age))
                {
                    (
                        Some(sql::mark_failed(d, &m.id, &self.owner, now, e)),
                        Outcome::Failed,
                        Some(e.clone()),
                    )
                } else {
                    (
                        Some(sql::mark_retry(d, &m.id, &self.owner, next, e)),
                        Outcome::Retried {
                            next_attempt_at: next,
                        },
                        Some(e.clone()),
                    )
                }
            }
        }
    }

    /// Records the outcomes of finished attempts in one transaction, then
    /// counts, logs and announces each.
    async fn record_attempts(&self, attempts: Vec<Attempt>) {
        if attempts.is_empty() {
            return;
        }
        let now = self.outbox.now();
        let outcomes: Vec<_> = attempts.iter().map(|a| self.outcome(a, now)).collect();
        // The deliveries (most outcomes) are one statement; retries and
        // failures one each.
        let sent: Vec<&str> = attempts
            .iter()
            .zip(&outcomes)
            .filter(|(_, (q, ..))| q.is_none())
            .map(|(a, _)| a.claimed.message.id.as_str())
            .collect();
        let recorded = async {
            let mut tx = self.outbox.db().begin().await?;
            let mut marked = std::collections::HashSet::new();
            if !sent.is_empty() {
                let q = sql::mark_all_sent(self.outbox.db().dialect(), &sent, &self.owner, now);
                for row in tx.conn().fetch(q, &[SqlKind::Text]).await? {
                    if let Some(Json::String(id)) = row.into_iter().next() {
                        marked.insert(id);
                    }
                }
            }
            let mut changed = Vec::with_capacity(outcomes.len());
            for (a, (q, ..)) in attempts.iter().zip(&outcomes) {
                changed.push(match q {
                    None => u64::from(marked.contains(&a.claimed.message.id)),
                    Some(q) => tx.conn().execute(q.clone()).await?,
                });
            }
            tx.commit().await?;
            Ok::<_, OutboxError>(changed)
        }
        .await;
        let changed = match recorded {
            Ok(changed) => changed,
            Err(e) => {
                // Left leased: taken again when the lease expires.
                tracing::warn!(
                    channel = %self.channel,
                    messages = attempts.len(),
                    error = %e,
                    cause = %gatehouse_db::with_sources(&e),
                    "the outcomes of outbox messages were not recorded; they are tried again after their lease"
                );
                return;
            }
        };
        for ((a, (_, outcome, error)), changed) in attempts.into_iter().zip(outcomes).zip(changed) {
            self.announce(a.claimed.message, outcome, error, changed);
        }
    }

    /// Counts, logs and broadcasts one recorded outcome (`changed`: the
    /// rows its statement changed; none when the lease had run out).
    fn announce(&self, m: Outgoing, outcome: Outcome, error: Option<String>, changed: u64) {
        if changed == 0 {
            // Our lease expired and another worker took the message:
            // it may be delivered twice (at least once, never lost).
            tracing::warn!(
                channel = %self.channel,
                id = %m.id,
                "an outbox message's lease ran out before its attempt ended"
            );
            return;
        }
        let label = match outcome {
            Outcome::Sent => "sent",
            Outcome::Retried { .. } => "retried",
            Outcome::Failed => "failed",
        };
        metrics::counter!(MESSAGES_TOTAL, "channel" => self.channel.clone(), "outcome" => label)
            .increment(1);
        if let Some(own) = &self.opts.metrics {
            let label = if label == "sent" { own.sent } else { label };
            metrics::counter!(own.total, own.label.0 => own.label.1.clone(), "outcome" => label)
                .increment(1);
        }
        match (&outcome, &error) {
            (Outcome::Sent, _) => {
                tracing::debug!(channel = %self.channel, id = %m.id, attempt = m.attempt, "outbox message sent");
            }
            (Outcome::Retried { .. }, Some(e)) => {
                tracing::info!(channel = %self.channel, id = %m.id, attempt = m.attempt, error = %e, "outbox message not delivered; retrying later");
            }
            (_, e) => {
                tracing::warn!(channel = %self.channel, id = %m.id, attempt = m.attempt, error = e.as_deref().unwrap_or(""), "outbox message failed; kept as failed");
            }
        }
        let _ = self.outcomes.send(Delivery {
            id: m.id,
            channel: self.channel.clone(),
            attempt: m.attempt,
            outcome,
            error,
        });
    }

    async fn record(&self, q: gatehouse_db::Built) -> Result<u64, OutboxError> {
        let mut conn = self.outbox.db().write().await?;
        Ok(conn.conn().execute(q).await?)
    }

    async fn record_oldest_pending(&self) {
        let db = self.outbox.db();
        let q = sql::oldest_pending(db.dialect(), &self.channel);
        let oldest = async {
            let mut conn = db.read().await?;
            let rows = conn.conn().fetch(q, &[SqlKind::Count]).await?;
            Ok::<_, OutboxError>(
                rows.into_iter()
                    .next()
                    .and_then(|r| r.into_iter().next())
                    .and_then(|v| v.as_i64()),
            )
        }
        .await;
        match oldest {
            Ok(oldest) => {
                let age = oldest.map_or(0.0, |t| {
                    (self.outbox.now().saturating_sub(t)).max(0) as f64 / 1e6
                });
                metrics::gauge!(OLDEST_PENDING, "channel" => self.channel.clone()).set(age);
                if let Some(own) = &self.opts.metrics {
                    metrics::gauge!(own.oldest_pending, own.label.0 => own.label.1.clone())
                        .set(age);
                }
            }
            Err(e) => {
                tracing::debug!(channel = %self.channel, error = %e, "outbox gauge not refreshed")
            }
        }
    }

    async fn purge_sent(&self) {
        let db = self.outbox.db();
        let before = self
            .outbox
            .now()
            .saturating_sub(micros(self.opts.keep_sent));
        let q = sql::purge_sent(db.dialect(), &self.channel, before);
        if let Err(e) = self.record(q).await {
            tracing::debug!(channel = %self.channel, error = %e, "sent outbox messages not purged");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_the_first_delay_up_to_the_maximum_with_up_to_half_dropped() {
        let (first, max) = (Duration::from_secs(5), Duration::from_secs(600));
        let full: Vec<u64> = (1..=10)
            .map(|n| backoff_delay(n, first, max, 1.0).as_secs())
            .collect();
        assert_eq!(full, [5, 10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(
            backoff_delay(1, first, max, 0.0),
            Duration::from_millis(2500)
        );
        assert_eq!(backoff_delay(u32::MAX, first, max, 1.0), max);
    }
}
