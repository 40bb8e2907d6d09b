//! A durable outbox in the instance's database: a message is written in
//! the same transaction as the change it is about (a verification token,
//! a row a webhook watches), so a committed write always has its message
//! and a rolled-back one never; a [`Worker`] then delivers it through the
//! [`Sender`] of its channel, at least once, retrying with backoff.
//!
//! ```text
//!  writer's Tx ─► Outbox::enqueue ─► _gatehouse_outbox ─► Worker (lease) ─► Sender per channel
//!  commit ─► Outbox::wake ───────────────────────────────────┘
//! ```
//!
//! - **Channels** name a destination kind and its sender: `"email"`, and
//!   later `"webhook:<id>"`, one per configured hook. Each channel has its
//!   own loop, concurrency limit and retry policy ([`ChannelOptions`]), so a
//!   slow receiver holds up only its own channel.
//! - **Ordering**: messages with the same channel and key
//!   ([`NewMessage::ordered_by`]) are delivered in the order they were
//!   enqueued: one is not claimed while an earlier one is pending (being
//!   sent or waiting for a retry). Messages without a key are unordered.
//! - **Leases**: a worker claims due messages by writing its name and a
//!   lease expiry on them (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so
//!   instances never claim the same row; SQLite: one writer at a time),
//!   then marks each sent or schedules a retry. A worker that dies leaves
//!   its leases to expire, and any worker takes the messages again.
//! - **Retries**: exponential backoff with jitter up to a maximum age, after
//!   which a message is `failed` and kept, visible through
//!   [`Outbox::list`] and retried by [`Outbox::retry`].
//!
//! SQL is written here as in the other storage crates (`gatehouse-db`
//! runs it). See `docs/design/outbox.md`.

#![warn(missing_docs)]

mod clock;
mod error;
mod outbox;
mod sql;
mod worker;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::OutboxError;
pub use outbox::{Message, MessageState, NewMessage, Outbox};
pub use sql::TABLE;
pub use worker::{
    ChannelMetrics, ChannelOptions, Delivery, Outcome, Outgoing, SendError, Sender, Worker,
    WorkerOptions, backoff_delay,
};
