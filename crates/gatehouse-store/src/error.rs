//! The one error type of the store.

use std::fmt;

/// Everything a store operation can fail with.
///
/// The `Display` text of every variant except [`StoreError::Internal`] is safe
/// to show to API users; `Internal` hides its cause (it is logged where it is
/// created) so that SQL and driver details never leak.
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

/// Longest cause text [`StoreError::internal`] logs and keeps.
const MAX_LOGGED_CAUSE: usize = 1024;

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

    /// An [`StoreError::Internal`] from any displayable cause; the cause is logged here.
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
        StoreError::Internal(text.into())
    }

    /// A stable machine-readable code for the variant.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound => "NOT_FOUND",
            StoreError::Conflict { .. } => "CONFLICT",
            StoreError::Invalid { .. } => "BAD_USER_INPUT",
            StoreError::Forbidden { .. } => "FORBIDDEN",
            StoreError::Unavailable => "UNAVAILABLE",
            StoreError::DestructiveMigration { .. } => "DESTRUCTIVE_MIGRATION",
            StoreError::Internal(_) => "INTERNAL",
        }
    }
}

/// Maps driver errors that are not about the data (constraint violations are
/// classified by the caller, which knows the entity and the operation).
pub(crate) fn from_sqlx(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_) => {
            tracing::warn!(error = %e, "storage unavailable");
            StoreError::Unavailable
        }
        sqlx::Error::Database(ref db) if is_unavailable_code(db.code().as_deref()) => {
            tracing::warn!(error = %e, "storage unavailable");
            StoreError::Unavailable
        }
        // PostgreSQL class 22 (data exception): a value the database refuses,
        // such as NUL in a lookup key, is the client's mistake, not a fault.
        sqlx::Error::Database(ref db) if db.code().is_some_and(|c| c.starts_with("22")) => {
            tracing::info!(error = %db, "value refused by the database");
            StoreError::invalid("value", db.message().to_string())
        }
        other => StoreError::internal(other),
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
