//! The database layer of gatehouse: SQLite (embedded, the default) and
//! PostgreSQL behind one small surface. [`Db`] opens the pools and hands
//! out connections ([`Db::read`], [`Db::write`], [`Db::begin`]); a
//! [`Conn`] runs a [`Built`] statement and decodes its rows by the
//! [`SqlKind`]s the caller expects. Everything above this crate is
//! backend-agnostic apart from the [`Dialect`] it builds SQL for.
//!
//! Users: the entity store (`gatehouse-store`) and the OAuth repository
//! (`gatehouse-auth-store`), which share one [`Db`] per instance.

#![warn(missing_docs)]

mod db;
mod dialect;
mod error;
mod pg;
mod sqlite;
mod wal_index;

pub use db::{Built, Conn, Db, DbOptions, DbRow, PoolStats, Pooled, Tx};
pub use dialect::{
    DATE_FORMAT, Dialect, FOLD_FUNCTION, SCHEMA_LOCK, SqlKind, fold_case, format_date, q,
};
pub use error::{DbError, Error, Violation, ViolationKind, with_sources};
pub use pg::Listener;
