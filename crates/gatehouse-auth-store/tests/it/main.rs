//! `SqlAuthRepo` on every backend: SQLite (a temp file) and, when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set, PostgreSQL (a fresh database per
//! test, dropped afterwards).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod auth;
/// The store suite's databases and schema: the repository lives in the
/// database the store opens.
#[path = "../../../gatehouse-store/tests/it/common.rs"]
#[allow(dead_code)]
mod common;
