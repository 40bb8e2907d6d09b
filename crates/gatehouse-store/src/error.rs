//! The one error type of the store.

use std::fmt;

use gatehouse_db::DbError;

use crate::Code;

/// Everything a store operation can fail with.
///
/// The `Display` text of every variant is safe to show to API users:
/// `Internal` hides its cause (it is logged where it is created, and is the
/// error's `source()`) so that SQL and driver details never leak. Operators
/// get the cause too ([`StoreError::with_cause`], or the `source()` chain
/// the CLI prints).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row addressed by id does not exist (update, replace, delete of a missing id).
    #[error("not found")]
    NotFound,
    /// The write clashes with stored data: a duplicate id, a `@unique` value
    /// already taken, or deleting a row that other rows still reference.
    #[error("{message}")]
    Conflict {
        /// What clashed, in words fit for an API user.
        message: String,
    },
    /// A value, field or filter does not fit the Model (unknown field, wrong
    /// type, Int out of 32-bit range, bad Date, unknown enum value, a required
    /// field set to null, a reference to a missing row).
    #[error("{field}: {message}")]
    Invalid {
        /// The GraphQL field name the problem is about.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The caller may see the row (or there is none to hide) but not do
    /// this: a field it may not read or write, or a write the entity's
    /// policy refuses (the new row, or the row after an update, would not
    /// match it).
    #[error("{message}")]
    Forbidden {
        /// What is refused, in words fit for an API user.
        message: String,
    },
    /// The database cannot be reached right now (connection refused, pool
    /// timeout, I/O error); retrying later may succeed.
    #[error("storage unavailable")]
    Unavailable,
    /// A statement did not end within the statement timeout (gatehouse's
    /// or the database's own, a lock wait included); it was cancelled and
    /// changed nothing. Retrying later may succeed.
    #[error("the database did not answer in time")]
    Timeout,
    /// The database the URL names cannot be opened (it does not exist,
    /// refuses the credentials, cannot be reached or created): the driver's
    /// cause and what to do. Only opening a store fails this way, before any
    /// request is served; the text is for the operator who gave the URL.
    #[error("{cause}; {remedy}")]
    Open {
        /// What the driver or the file system said.
        cause: String,
        /// What to do about it.
        remedy: String,
    },
    /// The stored tables differ from the Model in ways that lose data; the
    /// plan is refused until `allow_destructive` is set.
    #[error("{}", render_refused(steps))]
    DestructiveMigration {
        /// Every step of the plan, destructive ones included, as printed lines.
        steps: Vec<String>,
    },
    /// A failure that is a bug or an unexpected database state. The cause is
    /// logged when the error is created and never shown to users.
    #[error("internal storage error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

fn render_refused(steps: &[String]) -> String {
    let mut s = String::from(
        "the schema change needs destructive migration steps; review the plan and run \
         `gatehouse migrate --allow-destructive` to apply it:",
    );
    for step in steps {
        s.push_str("\n  ");
        s.push_str(step);
    }
    s
}

impl StoreError {
    /// An [`StoreError::Invalid`] about `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        StoreError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A [`StoreError::Conflict`] with `message`.
    pub fn conflict(message: impl Into<String>) -> Self {
        StoreError::Conflict {
            message: message.into(),
        }
    }

    /// A [`StoreError::Forbidden`] with `message`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        StoreError::Forbidden {
            message: message.into(),
        }
    }

    /// The error of a nested row at `at` (`books[0]`): an `Invalid` one
    /// names the field by its path from the row written (`books[0].title`);
    /// the others say nothing of a field and stay as they are.
    pub(crate) fn nested_in(self, at: &str) -> Self {
        match self {
            StoreError::Invalid { field, message } => StoreError::Invalid {
                field: format!("{at}.{field}"),
                message,
            },
            other => other,
        }
    }

    /// An [`StoreError::Internal`] from any displayable cause; the cause is
    /// logged here (shortened, as the database layer logs its own).
    pub fn internal(cause: impl fmt::Display) -> Self {
        StoreError::from(DbError::internal(cause))
    }

    /// The message with the cause it hides ([`StoreError::Internal`]): for
    /// operators (logs, the CLI), never for API users.
    pub fn with_cause(&self) -> String {
        gatehouse_db::with_sources(self)
    }

    /// The API's code for the variant: what GraphQL and REST answer.
    pub fn code(&self) -> Code {
        match self {
            StoreError::NotFound => Code::NotFound,
            StoreError::Conflict { .. } => Code::Conflict,
            StoreError::Invalid { .. } => Code::BadUserInput,
            StoreError::Forbidden { .. } => Code::Forbidden,
            StoreError::Unavailable | StoreError::Open { .. } => Code::ServiceUnavailable,
            StoreError::Timeout => Code::Timeout,
            // Refused at start-up or by `migrate`, never during a request.
            StoreError::DestructiveMigration { .. } | StoreError::Internal(_) => {
                Code::InternalServerError
            }
        }
    }
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        match e {
            // The cause was logged when the error was classified.
            DbError::Unavailable(_) => StoreError::Unavailable,
            DbError::Timeout(_) => StoreError::Timeout,
            DbError::Conflict(message) => StoreError::Conflict { message },
            DbError::Open { cause, remedy } => StoreError::Open { cause, remedy },
            DbError::Invalid { field, message } => StoreError::Invalid { field, message },
            DbError::Internal(cause) => StoreError::Internal(cause),
        }
    }
}

/// Maps driver errors that are not about the data (constraint violations are
/// classified by the caller, which knows the entity and the operation); the
/// classification is the database layer's ([`DbError`]'s `From<gatehouse_db::Error>`).
pub(crate) fn from_db(e: gatehouse_db::Error) -> StoreError {
    StoreError::from(DbError::from(e))
}
