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
    /// timeout, I/O error, SQLite busy); retrying later may succeed. The
    /// driver's error is the source: logged and shown by the CLI
    /// ([`DbError::with_cause`]), never in the message.
    #[error("storage unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database the URL names cannot be opened: it does not exist,
    /// refuses the credentials, cannot be reached or created. Only opening
    /// fails this way, before any request is served, so the text is for the
    /// operator who gave the URL: the driver's cause (never the URL or its
    /// password), then what to do.
    #[error("{cause}; {remedy}")]
    Open {
        /// What the driver or the file system said.
        cause: String,
        /// What to do about it.
        remedy: String,
    },
    /// A value or setting the database refuses, in words fit for the user
    /// who gave it (a bad database URL; a value PostgreSQL cannot store).
    #[error("{field}: {message}")]
    Invalid {
        /// What the problem is about.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A statement did not end within its deadline: gatehouse's own
    /// (`statement_timeout`, [`crate::DbOptions::statement_timeout`]), or
    /// the database's (PostgreSQL SQLSTATE 57014 `query_canceled`, 55P03
    /// `lock_not_available`; SQLite interrupted). The statement was
    /// cancelled and changed nothing; retrying later may succeed. The
    /// cause is logged and is the source, never in the message.
    #[error("the database did not answer in time")]
    Timeout(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database refused a write because of other data, at a point where
    /// the caller could not name the field concerned: a deferred
    /// constraint checked at `COMMIT` (class 23), or a transaction that
    /// clashed with a concurrent one (class 40: serialization failure,
    /// deadlock). Nothing was written.
    #[error("{0}")]
    Conflict(String),
    /// A bug or an unexpected database state. The cause is logged when the
    /// error is created and never shown to users.
    #[error("internal storage error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A statement's failure as the driver reported it, before it is
/// classified: what [`crate::Conn`], [`crate::Tx`] and [`crate::Db::listen`]
/// return. [`DbError::from`] classifies it; a write that broke a rule of the
/// data is read with [`Error::violation`]. Callers never see the driver's
/// own types: this crate owns the one database error type.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(#[from] pub(crate) sqlx::Error);

/// Which rule of the data a refused statement broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// A unique key (a primary key included).
    Unique,
    /// A foreign key: a reference to a missing row, or a delete of a row
    /// still referenced.
    ForeignKey,
    /// A `NOT NULL` column.
    NotNull,
    /// A `CHECK` constraint.
    Check,
    /// Another error the database reported (a syntax error, a timeout...).
    Other,
}

/// What the database said about a statement it refused.
#[derive(Debug, Clone, Copy)]
pub struct Violation<'a> {
    /// The rule broken.
    pub kind: ViolationKind,
    /// The constraint's name, when the database gives it (PostgreSQL).
    pub constraint: Option<&'a str>,
    /// The database's message (never holding bound values on PostgreSQL;
    /// on SQLite the names of the columns concerned).
    pub message: &'a str,
}

impl Error {
    /// What the database itself reported, when the failure is the
    /// database's answer rather than the connection's.
    pub fn violation(&self) -> Option<Violation<'_>> {
        let sqlx::Error::Database(db) = &self.0 else {
            return None;
        };
        let kind = match db.kind() {
            sqlx::error::ErrorKind::UniqueViolation => ViolationKind::Unique,
            sqlx::error::ErrorKind::ForeignKeyViolation => ViolationKind::ForeignKey,
            sqlx::error::ErrorKind::NotNullViolation => ViolationKind::NotNull,
            sqlx::error::ErrorKind::CheckViolation => ViolationKind::Check,
            // SQLite reports `ON DELETE RESTRICT` as
            // `SQLITE_CONSTRAINT_TRIGGER` (1811); gatehouse creates no
            // triggers, so that code is always a restricted delete.
            _ if db.code().as_deref() == Some("1811") => ViolationKind::ForeignKey,
            _ => ViolationKind::Other,
        };
        Some(Violation {
            kind,
            constraint: db.constraint(),
            message: db.message(),
        })
    }
}

impl From<Error> for DbError {
    fn from(e: Error) -> Self {
        DbError::from(e.0)
    }
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

    /// The message with the cause it hides ([`DbError::Unavailable`],
    /// [`DbError::Internal`]): for operators (logs, the CLI), never for
    /// API users.
    pub fn with_cause(&self) -> String {
        with_sources(self)
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
                DbError::Unavailable(Box::new(e))
            }
            sqlx::Error::Database(ref db) if is_timeout_code(db.code().as_deref()) => {
                tracing::warn!(error = %e, "statement timed out");
                DbError::Timeout(Box::new(e))
            }
            sqlx::Error::Database(ref db) if is_unavailable_code(db.code().as_deref()) => {
                tracing::warn!(error = %e, "storage unavailable");
                DbError::Unavailable(Box::new(e))
            }
            // Integrity (class 23) left for this classification: callers
            // name the field of the constraints they know (unique, foreign
            // key); what reaches here was refused where no field can be
            // named, a deferred constraint at `COMMIT` above all. Class
            // 40 (serialization failure, deadlock): a clash with a
            // concurrent transaction. Both are about the data, not faults.
            sqlx::Error::Database(ref db) if is_conflict_code(db.code().as_deref()) => {
                tracing::info!(error = %db, "write refused by a constraint");
                DbError::Conflict("the write conflicts with data stored meanwhile".into())
            }
            sqlx::Error::Database(ref db)
                if db
                    .code()
                    .is_some_and(|c| c.starts_with("40") && c.len() == 5) =>
            {
                tracing::info!(error = %db, "transaction clashed with a concurrent one");
                DbError::Conflict(
                    "the write clashed with a concurrent one and was not applied; retry it".into(),
                )
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

/// `e`'s message followed by those of its sources: `a: b: c`.
pub fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        // A source whose text the message already quotes adds nothing.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

/// Classifies a failure to open the database at `url`: what the driver
/// said, and what to do about it (the URL itself is never quoted: it may
/// hold a password).
pub(crate) fn open_failure(url_kind: Backend, e: sqlx::Error) -> DbError {
    let cause = match &e {
        sqlx::Error::Database(db) => db.message().to_string(),
        other => with_sources(other),
    };
    let code = match &e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    };
    let remedy = match (url_kind, code.as_deref(), &e) {
        // invalid_catalog_name
        (Backend::Postgres, Some("3D000"), _) => {
            "create the database first (`createdb NAME`, or `CREATE DATABASE` in psql), \
             or correct its name in the URL"
        }
        // invalid_authorization_specification, invalid_password
        (Backend::Postgres, Some("28000" | "28P01"), _) => {
            "check the user and password in the URL, and that the server's \
             pg_hba.conf lets this user connect from this host"
        }
        (Backend::Postgres, Some(c), _) if c.starts_with("53") || c.starts_with("57P") => {
            "the server is refusing connections (too many, or shutting down): retry later"
        }
        (Backend::Postgres, Some("42501"), _) => {
            "grant this user the privileges it needs (CONNECT on the database, CREATE on its schema)"
        }
        (Backend::Postgres, _, sqlx::Error::Tls(_)) => {
            "check the TLS settings of the URL (`sslmode`, `sslrootcert`) against the server's"
        }
        (Backend::Postgres, ..) => {
            "check that PostgreSQL is running and reachable at the URL's host and port \
             (`pg_isready -h HOST -p PORT`)"
        }
        (Backend::Sqlite, ..) => {
            "check that the path is right, that its directory exists or can be created, \
             and that this user may read and write it"
        }
    };
    tracing::debug!(error = %cause, "the database does not open");
    DbError::Open {
        cause,
        remedy: remedy.to_string(),
    }
}

/// The backend a URL names, for [`open_failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// PostgreSQL `query_canceled` (57014: a statement timeout or a cancel
/// request) and `lock_not_available` (55P03: `lock_timeout`, `NOWAIT`);
/// SQLite `SQLITE_INTERRUPT` (9: the deadline's progress handler).
fn is_timeout_code(code: Option<&str>) -> bool {
    match code {
        Some("57014" | "55P03") => true,
        Some(c) => c.parse::<i32>().is_ok_and(|n| n & 0xff == 9),
        None => false,
    }
}

/// Constraints about other rows: unique, foreign key, exclusion and check
/// (PostgreSQL 23505, 23503, 23P01, 23514; SQLite's extended codes for
/// unique, primary key, foreign key and check). A `NOT NULL` refused by
/// the database is a bug (values are checked before), not a conflict.
fn is_conflict_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("23505" | "23503" | "23P01" | "23514" | "2067" | "1555" | "787" | "275")
    )
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

#[cfg(test)]
mod tests {
    use super::DbError;

    #[test]
    fn a_deadline_is_a_timeout_and_an_integrity_error_a_conflict() {
        let deadline = crate::pg::timed_out(std::time::Duration::from_millis(5));
        assert!(matches!(DbError::from(deadline), DbError::Timeout(_)));
        for code in ["57014", "55P03", "9"] {
            assert!(super::is_timeout_code(Some(code)), "{code}");
        }
        for code in ["23505", "23503", "2067", "787"] {
            assert!(super::is_conflict_code(Some(code)), "{code}");
        }
        for code in ["23502", "1299", "42P01", "5"] {
            assert!(!super::is_conflict_code(Some(code)), "{code}");
            assert!(!super::is_timeout_code(Some(code)), "{code}");
        }
    }
}
