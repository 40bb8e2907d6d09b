//! Waiting on a condition instead of sleeping: a test that sleeps "long
//! enough" fails on a slow machine and wastes time on a fast one.

use std::time::{Duration, Instant};

use gatehouse_store::Store;

/// The longest a condition may take before the test fails.
const LIMIT: Duration = Duration::from_secs(20);

/// Returns once `ready()` holds; panics naming `what` after 20 s. Checks
/// every few milliseconds: meant for cheap, in-process conditions.
pub async fn eventually(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "still waiting, after {LIMIT:?}, for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Returns once `store`'s change feed has exactly `n` receivers, that is
/// once that many subscription executions listen (identical subscriptions
/// share one: [`Store::feed_receivers`]): a change made from then on
/// reaches them, and one made by then no longer reaches those that ended.
pub async fn listening(store: &Store, n: usize) {
    eventually(
        &format!("{n} subscription(s) listening to the change feed"),
        || store.feed_receivers() == n,
    )
    .await;
}
