//! What the outbox's calls fail with.

use gatehouse_db::DbError;

/// An outbox operation that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The database refused or did not answer; the message (or claim) was
    /// not written. Inside a caller's transaction, that transaction must
    /// roll back: committing it would lose the message.
    #[error("the outbox is not available")]
    Database(#[from] DbError),
    /// A stored row that does not read as a message (a column of the
    /// wrong type, a payload that is not JSON): a bug or a hand edit.
    #[error("an outbox row does not read: {0}")]
    Corrupt(String),
}

impl From<gatehouse_db::Error> for OutboxError {
    fn from(e: gatehouse_db::Error) -> Self {
        OutboxError::Database(e.into())
    }
}
