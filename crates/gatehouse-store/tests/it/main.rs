//! The store conformance suite: every case runs on SQLite (a temp file) and,
//! when `GATEHOUSE_TEST_POSTGRES_URL` is set, on PostgreSQL (a fresh database
//! per test, dropped afterwards).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod access;
mod common;
mod crud;
mod durability;
mod feed;
mod filters;
mod migration;
mod pool;
mod relations;
mod snapshots;

/// Fails when CI requires the PostgreSQL run (`GATEHOUSE_REQUIRE_POSTGRES=1`)
/// but did not configure it, so a skipped PostgreSQL run cannot pass silently.
#[test]
fn postgres_configured() {
    let required = std::env::var("GATEHOUSE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    match common::pg_url() {
        Some(url) => eprintln!("PostgreSQL conformance run enabled: {url}"),
        None if required => {
            panic!("GATEHOUSE_REQUIRE_POSTGRES=1 but GATEHOUSE_TEST_POSTGRES_URL is not set")
        }
        None => eprintln!("GATEHOUSE_TEST_POSTGRES_URL not set: PostgreSQL cases skipped"),
    }
}
