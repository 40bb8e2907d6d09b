//! What the integration tests of every gatehouse crate start from: the
//! example schema, a fresh database per test on SQLite or PostgreSQL, a
//! router served on a random port, the `gatehouse` binary run as a child
//! process, the GraphQL and OAuth requests most tests begin with, and an
//! SMTP server that collects what it is sent.
//!
//! Only integration tests (`tests/`) can use the kit: it links the
//! gatehouse library crates, so a crate's unit tests inside `src/` would
//! see two copies of that crate's types.
//!
//! PostgreSQL runs when `GATEHOUSE_TEST_POSTGRES_URL` names a server whose
//! user may create databases; without it each such test says on stderr that
//! it skips its PostgreSQL case, and `GATEHOUSE_REQUIRE_POSTGRES` (CI) makes
//! the absence fail them instead ([`postgres_url`], the one place asked).
// A test kit reports a broken fixture by failing the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod browser;
mod db;
mod fixtures;
mod http;
#[cfg(feature = "oauth1")]
mod oauth1;
mod process;
mod proxy;
mod server;
mod smtp;
mod wait;

pub use browser::{
    Browser, Page, authorize_url, pkce_challenge, pkce_verifier, sign_in_for_code, unescape,
};
pub use db::{
    IntoModel, POSTGRES_URL_VAR, PostgresRun, REQUIRE_POSTGRES_VAR, TestDb, open_store, pg_client,
    pg_execute, postgres_url,
};
pub use fixtures::{EXAMPLE_SCHEMA, example_model, example_sources, model, repo_root};
pub use http::{graphql, header, jwt_payload, password_token};
#[cfg(feature = "oauth1")]
pub use oauth1::{OAuth1Sig, nonce};
pub use process::{ServerProcess, command};
pub use proxy::Proxy;
pub use server::{Port, TestServer};
pub use smtp::{SmtpSink, SunkMail};
pub use wait::{eventually, listening};
