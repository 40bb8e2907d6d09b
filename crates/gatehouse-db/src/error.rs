//! How driver errors are classified, for every user of the database.

use std::fmt;

/// What opening the database or taking a connection can fail with, and
/// what a driver error means once classified ([`DbError::from`]).
///
/// The texts are those of the entity store's errors of the same names,
/// which it converts these into.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database cannot be reached right now (connection refused, pool
    /// timeout, I/O error, SQLite busy); retrying later may succeed.
    #[error("storage unavailable")]
    Unavailable,
    /// A value or setting the database refuses, in words fit for the user
    /// who gave it (a bad database URL; a value PostgreSQL cannot store).
    #[error("{field}: {message}")]
    Invalid {
        /// What the problem is about.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A bug or an unexpected database state. The cause is logged when the
    /// error is created and never shown to users.
    #[error("internal storage error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Longest cause text [`DbError::internal`] logs and keeps.
const MAX_LOGGED_CAUSE: usize = 1024;

impl DbError {
    /// A [`DbError::Invalid`] about `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        DbError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A [`DbError::Internal`] from any displayable cause; the cause is logged here.
    pub fn internal(cause: impl fmt::Display) -> Self {
        let mut text = cause.to_string();
        // A driver's message can quote a whole statement (one of 50,000
        // placeholders is 100 KB): keep log lines short. Statements never
        // hold values (they are bound), and values are never logged.
        if text.len() > MAX_LOGGED_CAUSE {
            let mut end = MAX_LOGGED_CAUSE;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let total = text.len();
            text.truncate(end);
            text.push_str(&format!("… ({total} bytes in all)"));
        }
        tracing::error!(error = %text, "internal storage error");
        DbError::Internal(text.into())
    }
}

/// Classifies driver errors that are not about the data (constraint
/// violations are classified by the caller, which knows the table and the
/// operation).
impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_) => {
                tracing::warn!(error = %e, "storage unavailable");
                DbError::Unavailable
            }
            sqlx::Error::Database(ref db) if is_unavailable_code(db.code().as_deref()) => {
                tracing::warn!(error = %e, "storage unavailable");
                DbError::Unavailable
            }
            // PostgreSQL class 22 (data exception): a value the database
            // refuses, such as NUL in a lookup key, is the client's
            // mistake, not a fault.
            sqlx::Error::Database(ref db) if db.code().is_some_and(|c| c.starts_with("22")) => {
                tracing::info!(error = %db, "value refused by the database");
                DbError::invalid("value", db.message().to_string())
            }
            other => DbError::internal(other),
        }
    }
}

/// SQLite BUSY/LOCKED (5, 6 and their extended codes) and PostgreSQL
/// connection / shutdown classes (08xxx, 57Pxx, 53xxx) mean "try again later".
fn is_unavailable_code(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    if let Ok(n) = code.parse::<i32>() {
        return matches!(n & 0xff, 5 | 6);
    }
    code.starts_with("08") || code.starts_with("57P") || code.starts_with("53")
}
