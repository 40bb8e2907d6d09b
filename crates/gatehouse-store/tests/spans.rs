//! What tracing sees of the store's statements. A test binary of its own:
//! tracing decides once per call site whether any subscriber wants its
//! events, and a test running beside this one on another thread, with no
//! subscriber, could decide "no" for the call sites this one checks.

use gatehouse_testkit::TestDb;

/// A PostgreSQL statement's future is built outside any tracing span (so
/// sqlx's row stream does not enter the caller's span on every poll), yet
/// sqlx's own events, logged while it runs, still name the caller's span.
#[tokio::test]
async fn statement_events_keep_the_callers_span() {
    use std::sync::{Arc, Mutex};
    use tracing::Instrument;
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    /// Each event's target and the names of the spans around it.
    type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;
    struct Spans(Seen);
    impl<S> tracing_subscriber::Layer<S> for Spans
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
            let spans = ctx
                .event_scope(event)
                .map(|scope| scope.map(|s| s.name().to_string()).collect())
                .unwrap_or_default();
            let target = event.metadata().target().to_string();
            self.0.lock().expect("not poisoned").push((target, spans));
        }
    }

    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let s = db
        .open("type Query { notes: [Note!]! }\ntype Note { id: ID! text: String! }")
        .await;
    let seen = Seen::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(Spans(seen.clone())));
    async {
        let mut c = s.db().read().await.expect("a connection");
        c.conn()
            .fetch(
                gatehouse_db::Built::raw("SELECT 1", vec![]),
                &[gatehouse_db::SqlKind::Int],
            )
            .await
            .expect("statement");
    }
    .instrument(tracing::info_span!("request"))
    .await;
    let seen = seen.lock().expect("not poisoned").clone();
    let statements: Vec<_> = seen.iter().filter(|(t, _)| t == "sqlx::query").collect();
    assert!(!statements.is_empty(), "sqlx logged no statement: {seen:?}");
    assert!(
        statements
            .iter()
            .all(|(_, spans)| spans.iter().any(|n| n == "request")),
        "{statements:?}"
    );
    s.close().await;
}
