//! [`WriteTxn`]: one database transaction around several writes (a GraphQL
//! mutation request's root fields), committed or rolled back as a whole,
//! whose change events are published only once it committed.
//!
//! Every write of [`crate::EntityStore`] runs in a unit of work ([`Unit`]):
//! its own transaction, committed when the write succeeds, or the shared
//! transaction of the [`WriteTxn`] the handle was bound to
//! ([`WriteTxn::entity`], [`crate::EntityStore::within`]), left open for
//! the next write. See `docs/design/transactions.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Mutex, OwnedMutexGuard};

use gatehouse_db::{Built, DbRow, Tx};
use gatehouse_schema::{AccessContext, EntityId};

use crate::error::from_db;
use crate::feed::ChangeEvent;
use crate::value::SqlKind;
use crate::{EntityStore, Row, Store, StoreError};

/// A write transaction spanning several writes, made by
/// [`Store::begin_write`]. Cheap to clone: clones share the transaction.
///
/// The database transaction begins with the first statement run through
/// it (a request that writes nothing takes no lock), and holds its
/// connection until [`WriteTxn::commit`] or [`WriteTxn::rollback`]; on
/// SQLite that is the one write connection, so other writers wait. When
/// the last clone is dropped without either, it rolls back.
///
/// Reads through a handle bound to it see its own writes once it has
/// begun (they run on its connection); before, they read as any reader.
/// Once one of its statements failed, it is *failed*: later writes are
/// refused and [`WriteTxn::commit`] rolls back (on PostgreSQL a failed
/// statement aborts the transaction anyway).
#[derive(Debug, Clone)]
pub struct WriteTxn {
    store: Store,
    state: Arc<Mutex<State>>,
    /// A statement failed (or the caller said a step of its own did):
    /// nothing of it may be committed. Outside the lock, so that callers
    /// can ask without waiting.
    failed: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// The transaction once begun, and the changes made in it so far.
    open: Option<Open>,
    /// Committed or rolled back: no statement runs any more.
    ended: bool,
}

#[derive(Debug)]
struct Open {
    tx: Tx,
    events: Vec<ChangeEvent>,
    /// The transaction's time ([`Unit::write`]), read when it began.
    now: i64,
}

impl Store {
    /// A transaction for several writes: bind entity handles to it
    /// ([`WriteTxn::entity`]), write through them, then
    /// [`WriteTxn::commit`]. Nothing is locked until its first statement.
    pub fn begin_write(&self) -> WriteTxn {
        WriteTxn {
            store: self.clone(),
            state: Arc::new(Mutex::new(State::default())),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl WriteTxn {
    /// The handle on the rows of `name`, reading and writing in this
    /// transaction.
    pub fn entity(&self, name: &str) -> Result<EntityStore, StoreError> {
        Ok(self.store.entity(name)?.within(self))
    }

    /// The handle on the rows of the entity `id` names, in this transaction.
    pub fn entity_at(&self, id: EntityId) -> EntityStore {
        self.store.entity_at(id).within(self)
    }

    /// Whether a statement of it failed (it can then only roll back).
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Marks it failed: [`WriteTxn::commit`] will roll back. For callers
    /// whose own step failed after writes succeeded (a GraphQL field of a
    /// mutation's selection).
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Release);
    }

    /// Commits every write made through it, then publishes their change
    /// events in order. A failed transaction is rolled back instead and
    /// answers `Conflict`; a commit the database refuses is an error too
    /// (and publishes nothing).
    pub async fn commit(&self) -> Result<(), StoreError> {
        let mut state = self.state.lock().await;
        state.ended = true;
        let open = state.open.take();
        if self.is_failed() {
            drop(open);
            return Err(StoreError::conflict(
                "a write of this request failed, so none of its writes was applied",
            ));
        }
        match open {
            Some(Open { tx, events, .. }) => self.store.commit_all(tx, events).await,
            None => Ok(()),
        }
    }

    /// Rolls back every write made through it; their events are dropped.
    pub async fn rollback(&self) {
        let mut state = self.state.lock().await;
        state.ended = true;
        // Dropping the transaction rolls it back (both backends).
        state.open = None;
    }

    /// Runs `q`, a statement of another storage crate that must commit or
    /// roll back with these writes (an account's credential with its row),
    /// beginning the transaction if it has not begun. Its failure fails
    /// the transaction.
    pub async fn execute(&self, q: Built) -> Result<u64, StoreError> {
        let mut unit = self.unit().await?;
        let Unit::Shared { state, .. } = &mut unit else {
            return Err(ended());
        };
        let Some(open) = state.open.as_mut() else {
            return Err(ended());
        };
        let result = open.tx.conn().execute(q).await;
        if result.is_err() {
            self.fail();
        }
        result.map_err(from_db)
    }

    /// Runs `q` in the transaction when it has begun (`None` otherwise: the
    /// caller reads as any reader, there being nothing of its own to see).
    pub(crate) async fn fetch_begun(
        &self,
        q: &Built,
        kinds: &[SqlKind],
    ) -> Option<Result<Vec<DbRow>, StoreError>> {
        let mut state = self.state.lock().await;
        if state.ended {
            return Some(Err(ended()));
        }
        let open = state.open.as_mut()?;
        let result = open.tx.conn().fetch(q.clone(), kinds).await;
        if result.is_err() {
            self.fail();
        }
        Some(result.map_err(from_db))
    }

    /// The unit of work of one write in this transaction, begun when it is
    /// the first.
    async fn unit(&self) -> Result<Unit, StoreError> {
        let mut state = self.state.clone().lock_owned().await;
        if state.ended {
            return Err(ended());
        }
        if self.is_failed() {
            return Err(StoreError::conflict(
                "an earlier write of this request failed, so this one was not made",
            ));
        }
        if state.open.is_none() {
            let tx = self.store.inner.db.begin().await?;
            state.open = Some(Open {
                tx,
                events: Vec::new(),
                now: self.store.inner.clock.now_micros(),
            });
        }
        Ok(Unit::Shared {
            store: self.store.clone(),
            state,
            failed: self.failed.clone(),
        })
    }
}

fn ended() -> StoreError {
    StoreError::internal("the write transaction has already ended")
}

/// Where one write runs: its own transaction, or a shared [`WriteTxn`]'s.
pub(crate) enum Unit {
    Own {
        store: Store,
        tx: Tx,
        events: Vec<ChangeEvent>,
        now: i64,
    },
    Shared {
        store: Store,
        state: OwnedMutexGuard<State>,
        failed: Arc<AtomicBool>,
    },
}

/// Why a write failed: an error already made, or a statement the database
/// refused, which is classified ([`Store::write_error`]) only once the
/// transaction is rolled back: naming the field concerned reads other
/// rows, and those reads must not wait for a connection the transaction
/// holds (a small PostgreSQL pool), nor see its writes.
#[derive(Debug)]
pub(crate) enum Failure {
    Store(StoreError),
    Refused {
        entity: EntityId,
        err: gatehouse_db::Error,
        /// The values written, to name a missing reference.
        row: Option<Row>,
        /// The id of a row being deleted and who deletes it, to name what
        /// references it as far as the caller may see.
        deleting: Option<(String, AccessContext)>,
        /// The nested rows it is in, innermost first ([`Failure::nested_in`]).
        at: Vec<String>,
    },
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl Failure {
    /// A statement on a row of `entity` the database refused.
    pub(crate) fn refused(
        entity: EntityId,
        err: gatehouse_db::Error,
        row: Option<&Row>,
        deleting: Option<(&str, &AccessContext)>,
    ) -> Self {
        Failure::Refused {
            entity,
            err,
            row: row.cloned(),
            deleting: deleting.map(|(id, ctx)| (id.to_string(), ctx.clone())),
            at: Vec::new(),
        }
    }

    /// The failure of a nested row at `at` (see [`StoreError::nested_in`]).
    pub(crate) fn nested_in(self, at: &str) -> Self {
        match self {
            Failure::Store(e) => Failure::Store(e.nested_in(at)),
            Failure::Refused {
                entity,
                err,
                row,
                deleting,
                at: mut places,
            } => {
                places.push(at.to_string());
                Failure::Refused {
                    entity,
                    err,
                    row,
                    deleting,
                    at: places,
                }
            }
        }
    }

    /// The error, once the transaction is no longer held.
    async fn classify(self, store: &Store) -> StoreError {
        match self {
            Failure::Store(e) => e,
            Failure::Refused {
                entity,
                err,
                row,
                deleting,
                at,
            } => {
                let e = store.model().entity_at(entity);
                let mut error = store
                    .write_error(
                        e,
                        err,
                        row.as_ref(),
                        deleting.as_ref().map(|(id, ctx)| (id.as_str(), ctx)),
                    )
                    .await;
                for place in &at {
                    error = error.nested_in(place);
                }
                error
            }
        }
    }
}

impl Unit {
    /// The unit of a write through `entity`: its transaction's, or a new
    /// transaction of its own.
    async fn of(entity: &EntityStore) -> Result<Unit, StoreError> {
        match entity.txn() {
            Some(t) => t.unit().await,
            None => {
                let store = entity.store().clone();
                let tx = store.inner.db.begin().await?;
                let now = store.inner.clock.now_micros();
                Ok(Unit::Own {
                    store,
                    tx,
                    events: Vec::new(),
                    now,
                })
            }
        }
    }

    /// Runs one write through `entity`: `write` gets the unit's
    /// transaction, its events and its time, and the unit ends with its
    /// result ([`Unit::finish`]).
    ///
    /// The time (microseconds since the epoch) is read from the store's
    /// clock once per transaction, when it begins: every `@createdAt` and
    /// `@updatedAt` it writes holds it, so a new row's two stamps are
    /// equal and `updatedAt > createdAt` means a later write changed it.
    pub(crate) async fn write<T>(
        entity: &EntityStore,
        write: impl AsyncFnOnce(&mut Tx, &mut Vec<ChangeEvent>, i64) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut unit = Unit::of(entity).await?;
        let result = match unit.parts() {
            Ok((tx, events, now)) => write(tx, events, now).await,
            Err(e) => Err(e.into()),
        };
        unit.finish(result).await
    }

    /// The transaction, the events of the writes so far and its time.
    fn parts(&mut self) -> Result<(&mut Tx, &mut Vec<ChangeEvent>, i64), StoreError> {
        match self {
            Unit::Own {
                tx, events, now, ..
            } => Ok((tx, events, *now)),
            Unit::Shared { state, .. } => match state.open.as_mut() {
                Some(Open { tx, events, now }) => Ok((tx, events, *now)),
                None => Err(ended()),
            },
        }
    }

    /// Ends the write that had `result`: its own transaction commits (and
    /// publishes) on success; a shared one stays open for the next write.
    /// A failure rolls back either at once (a shared one is failed from
    /// then on: [`WriteTxn::commit`] refuses), then says why.
    pub(crate) async fn finish<T>(self, result: Result<T, Failure>) -> Result<T, StoreError> {
        match self {
            Unit::Own {
                store, tx, events, ..
            } => match result {
                Ok(v) => {
                    store.commit_all(tx, events).await?;
                    Ok(v)
                }
                Err(f) => {
                    drop(tx);
                    Err(f.classify(&store).await)
                }
            },
            Unit::Shared {
                store,
                mut state,
                failed,
            } => match result {
                Ok(v) => Ok(v),
                Err(f) => {
                    failed.store(true, Ordering::Release);
                    // Dropping the transaction rolls it back.
                    state.open = None;
                    drop(state);
                    Err(f.classify(&store).await)
                }
            },
        }
    }
}
