//! `SqlAuthRepo` on every backend: SQLite (a temp file) and, when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set, PostgreSQL (a fresh database per
//! test, dropped afterwards).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auth;
mod timeouts;

/// The schema of the entity store the repository shares a database with:
/// any schema does, the OAuth tables are the repository's own.
const SDL: &str = "type Query { notes: [Note!]! } type Note { id: ID! text: String }";
