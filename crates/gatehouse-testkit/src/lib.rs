//! What the integration tests of every gatehouse crate start from: the
//! example schema, a fresh database per test on SQLite or PostgreSQL, a
//! router served on a random port, the `gatehouse` binary run as a child
//! process, and the GraphQL and OAuth requests most tests begin with.
//!
//! Only integration tests (`tests/`) can use the kit: it links the
//! gatehouse library crates, so a crate's unit tests inside `src/` would
//! see two copies of that crate's types.
//!
//! PostgreSQL runs when `GATEHOUSE_TEST_POSTGRES_URL` names a server whose
//! user may create databases; `GATEHOUSE_REQUIRE_POSTGRES=1` (CI) makes its
//! absence fail the tests that want it instead of skipping them.
// A test kit reports a broken fixture by failing the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod db;
mod fixtures;
mod http;
#[cfg(feature = "oauth1")]
mod oauth1;
mod process;
mod server;

pub use db::{IntoModel, TestDb, open_store, postgres_url};
pub use fixtures::{EXAMPLE_SCHEMA, example_model, example_sources, model, repo_root};
pub use http::{graphql, header, password_token};
#[cfg(feature = "oauth1")]
pub use oauth1::{OAuth1Sig, nonce};
pub use process::{ServerProcess, command};
pub use server::{Port, TestServer};
