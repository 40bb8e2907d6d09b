//! The outbox on every backend: SQLite (a temp file) and, when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set, PostgreSQL (a fresh database per
//! test). Workers are observed through their outcome stream and their
//! senders' calls, never by sleeping.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod delivery;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gatehouse_db::{Db, DbOptions};
use gatehouse_outbox::{
    Clock, Delivery, ManualClock, Outbox, Outgoing, SendError, Sender, SystemClock,
};
use tokio::sync::{broadcast, mpsc};

/// The time a manual clock starts at: 2025-01-01T00:00:00Z.
pub const START: i64 = 1_735_689_600_000_000;

/// Opens `url`'s database as one instance does.
pub async fn db(url: &str) -> Db {
    Db::open(
        url,
        &DbOptions {
            max_connections: None,
            acquire_timeout: Duration::from_secs(10),
            sqlite_sync_every_commit: false,
            statement_timeout: DbOptions::DEFAULT_STATEMENT_TIMEOUT,
        },
    )
    .await
    .unwrap()
}

/// An outbox on `url` whose time only moves when the test says.
pub async fn manual_outbox(url: &str) -> (Outbox, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_micros(START));
    let outbox = Outbox::open_with_clock(db(url).await, clock.clone() as Arc<dyn Clock>)
        .await
        .unwrap();
    (outbox, clock)
}

/// An outbox on `url` on the system clock.
pub async fn outbox(url: &str) -> Outbox {
    Outbox::open_with_clock(db(url).await, Arc::new(SystemClock))
        .await
        .unwrap()
}

type Script = dyn Fn(&Outgoing) -> Result<(), SendError> + Send + Sync;

/// A sender that answers as its script says and reports every call.
pub struct Recorder {
    calls: mpsc::UnboundedSender<Outgoing>,
    script: Box<Script>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

impl Recorder {
    /// A sender that delivers everything.
    pub fn accepting() -> (Arc<Recorder>, mpsc::UnboundedReceiver<Outgoing>) {
        Self::scripted(|_| Ok(()))
    }

    /// A sender that answers `script(message)`.
    pub fn scripted(
        script: impl Fn(&Outgoing) -> Result<(), SendError> + Send + Sync + 'static,
    ) -> (Arc<Recorder>, mpsc::UnboundedReceiver<Outgoing>) {
        let (calls, rx) = mpsc::unbounded_channel();
        (
            Arc::new(Recorder {
                calls,
                script: Box::new(script),
            }),
            rx,
        )
    }
}

#[async_trait]
impl Sender for Recorder {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let _ = self.calls.send(message.clone());
        (self.script)(message)
    }
}

/// A sender that reports its call and then never answers: a worker killed
/// in the middle of a send.
#[derive(Debug)]
pub struct Hanging {
    calls: Mutex<Option<tokio::sync::oneshot::Sender<Outgoing>>>,
}

impl Hanging {
    pub fn new() -> (Arc<Hanging>, tokio::sync::oneshot::Receiver<Outgoing>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Arc::new(Hanging {
                calls: Mutex::new(Some(tx)),
            }),
            rx,
        )
    }
}

#[async_trait]
impl Sender for Hanging {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        if let Some(tx) = self.calls.lock().unwrap().take() {
            let _ = tx.send(message.clone());
        }
        std::future::pending().await
    }
}

/// The next outcome a worker reports, failing the test after 20 s.
pub async fn next_outcome(rx: &mut broadcast::Receiver<Delivery>) -> Delivery {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a worker reports an outcome within 20 s")
        .expect("the outcome stream is open")
}

/// The next call a sender reports, failing the test after 20 s.
pub async fn next_call(rx: &mut mpsc::UnboundedReceiver<Outgoing>) -> Outgoing {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the sender is called within 20 s")
        .expect("the sender is alive")
}
