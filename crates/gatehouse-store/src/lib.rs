//! Storage for gatehouse: one [`Store`] over embedded SQLite (the default)
//! and PostgreSQL, with tables derived from the [`gatehouse_schema::Model`].
//!
//! - Rows are [`Row`]s: JSON maps keyed by GraphQL field names. `id` is a
//!   string (UUIDv7 unless given), a `Date` is `"YYYY-MM-DD"`, a to-one
//!   relation is the referenced id, a list is a JSON array, an enum is its
//!   value name. Every value is validated against the Model before any SQL runs.
//! - Rows are reached through an [`EntityStore`], a handle on one entity
//!   resolved once by [`Store::entity`]; every read and write takes the
//!   caller's [`AccessContext`], whose scopes and row policies become part
//!   of the statement.
//! - Reads: [`EntityStore::get`], [`EntityStore::get_many`] (to-one batch),
//!   [`EntityStore::list`] with a [`Filter`] tree and to-one joins,
//!   [`EntityStore::count`], pages by keyset cursor ([`EntityStore::page`],
//!   [`Cursor`]), and [`EntityStore::children`] (to-many batch:
//!   one statement for all parents). A list statement built once runs many
//!   times: [`EntityStore::prepare`], and [`EntityStore::prepare_template`]
//!   for queries that differ only in texts (a lookup by id).
//! - Writes: [`EntityStore::insert`], [`EntityStore::update`] (partial),
//!   [`EntityStore::replace`], [`EntityStore::delete`]; each commits durably
//!   (SQLite WAL with `synchronous=NORMAL`: safe against a killed process;
//!   `FULL` on request for power-loss safety) and yields a [`ChangeEvent`] on
//!   [`Store::subscribe`]; with PostgreSQL the events reach every instance.
//!   An insert may carry new rows of its one-to-many relations (nested create).
//!   [`EntityStore::upsert`] inserts or updates by a unique key;
//!   [`EntityStore::update_where`] and [`EntityStore::delete_where`] change
//!   every row a filter matches that the caller may change, row by row
//!   through the same paths, up to [`StoreOptions::max_bulk_rows`].
//! - Several writes in one transaction: [`Store::begin_write`] gives a
//!   [`WriteTxn`]; handles bound to it write into it and read its writes,
//!   and its events are published once it commits (a GraphQL mutation
//!   request is one).
//! - Migrations: [`Store::plan`] / [`Store::migrate`]; additive steps run on
//!   connect, destructive ones need `allow_destructive`.
//!
//! Only this crate writes SQL about the Model's entities. Statements are
//! built with sea-query with every value bound as a parameter; identifiers
//! come from the Model. Connections and dialects are `gatehouse-db`'s; the
//! OAuth tables, in the same database, are `gatehouse-auth-store`'s.

#![warn(missing_docs)]

mod bulk;
mod cascade;
mod clock;
mod code;
mod copy;
mod cursor;
mod entity;
mod error;
mod feed;
mod migrate;
mod policy;
mod query;
mod related;
mod store;
mod txn;
mod value;

pub use clock::{Clock, ManualClock, SystemClock};
pub use code::Code;
pub use copy::{CopiedTable, copy_store};
pub use cursor::{Cursor, CursorPage, PageRequest, PreparedPage};
pub use entity::{Children, EntityStore, Page, PreparedList};
pub use error::StoreError;
pub use feed::ChangeEvent;
pub use migrate::{ColumnLayout, Layout, MigrationStep, TableLayout};
pub use policy::rule_test;
pub use query::{Filter, JoinOne, ListQuery, OrderBy};
pub use store::{CommitHook, DEFAULT_MAX_BULK_ROWS, Store, StoreOptions};
pub use txn::WriteTxn;
pub use value::{ColType, Row, RowSet};

pub use gatehouse_schema::{AccessContext, ChangeKind, FilterOp, Quantifier};
