//! Every transport asks the GraphQL service for an answer, and the service
//! chooses the executor: a query over WebSocket (both protocols) or SSE is
//! planned as one over HTTP is, and answered with the same bytes; the reads
//! async-graphql's resolvers answer instead are counted by why the plan
//! declined them.

use futures::{SinkExt, StreamExt};
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_graphql::{Fallback, Graphql, Unsupported};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::{Server, open_options, start_in};

const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A root list with a to-one relation: one statement when planned (the
/// relation joined), two through the resolvers (the data loader's).
const QUERY: &str = "{ books(orderBy: title_ASC) { title author { name } } }";

async fn seeded(db: TestDb) -> Server {
    let s = start_in(db, open_options(), 1 << 20).await;
    let lem = s.author("Stanisław Lem", None).await;
    for title in ["Solaris", "Fiasco \u{2014} \"late\""] {
        s.book(json!({"title": title, "status": "AVAILABLE", "author": lem}))
            .await;
    }
    s
}

/// POSTs `body` and returns the response text (which must be a 200).
async fn post(s: &Server, body: &Value) -> String {
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

/// Runs `query` as operation `1` over a WebSocket speaking `protocol`:
/// the text of every message after the acknowledgement, up to and
/// including the one that ends the operation (keep-alives left out).
async fn over_websocket(s: &Server, protocol: &str, query: &str) -> Vec<String> {
    let url = format!("{}/graphql", s.base.replace("http://", "ws://"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let send = |v: Value| Message::text(v.to_string());
    socket
        .send(send(json!({"type": "connection_init"})))
        .await
        .unwrap();
    let start = if protocol == "graphql-ws" {
        "start"
    } else {
        "subscribe"
    };
    let mut acked = false;
    let mut out = Vec::new();
    loop {
        let msg = tokio::time::timeout(WAIT, socket.next())
            .await
            .expect("a message in time")
            .expect("socket open")
            .expect("no socket error");
        let Message::Text(text) = msg else {
            continue;
        };
        let kind = serde_json::from_str::<Value>(text.as_str()).unwrap()["type"].clone();
        match kind.as_str() {
            Some("ka") => {}
            Some("connection_ack") if !acked => {
                acked = true;
                socket
                    .send(send(
                        json!({"type": start, "id": "1", "payload": {"query": query}}),
                    ))
                    .await
                    .unwrap();
            }
            Some(kind) => {
                out.push(text.to_string());
                if kind == "complete" || kind == "error" {
                    return out;
                }
            }
            None => panic!("a message without a type: {text}"),
        }
    }
}

/// POSTs `body` asking for an event stream: the whole stream, keep-alive
/// comments left out.
async fn over_sse(s: &Server, body: &Value) -> String {
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(WAIT, r.text()).await.unwrap().unwrap();
    text.replace(":\n\n", "")
}

/// The fallback count of every reason, in [`Fallback::ALL`] order.
fn fallbacks(g: &Graphql) -> Vec<u64> {
    Fallback::ALL.iter().map(|r| g.fallbacks(*r)).collect()
}

/// `counts` with one more read counted for `reason`.
fn plus_one(counts: &[u64], reason: Fallback) -> Vec<u64> {
    Fallback::ALL
        .iter()
        .zip(counts)
        .map(|(r, n)| n + u64::from(*r == reason))
        .collect()
}

#[tokio::test]
async fn queries_over_websocket_and_sse_are_planned_with_the_bytes_of_http() {
    for db in TestDb::each().await {
        let s = seeded(db).await;
        let b = s.store.backend();
        let body = json!({"query": QUERY});
        // The first run: async-graphql validates the document and answers.
        let before = s.store.statements();
        let first = post(&s, &body).await;
        let resolvers = s.store.statements() - before;
        assert_eq!(
            fallbacks(&s.graphql),
            plus_one(&[0; 9], Fallback::Validation),
            "{b}"
        );
        // Then the plan, with the same bytes and fewer statements.
        let before = s.store.statements();
        let http = post(&s, &body).await;
        let planned = s.store.statements() - before;
        assert_eq!(http, first, "{b}");
        assert!(planned < resolvers, "{b}: {planned} vs {resolvers}");
        assert!(
            http.contains(r#"{"title":"Fiasco — \"late\"","author":{"name":"Stanisław Lem"}}"#),
            "{b}: {http}"
        );

        for (protocol, next) in [("graphql-transport-ws", "next"), ("graphql-ws", "data")] {
            let before = s.store.statements();
            let frames = over_websocket(&s, protocol, QUERY).await;
            assert_eq!(s.store.statements() - before, planned, "{b} {protocol}");
            assert_eq!(
                frames,
                [
                    format!(r#"{{"type":"{next}","id":"1","payload":{http}}}"#),
                    r#"{"type":"complete","id":"1"}"#.to_string()
                ],
                "{b} {protocol}"
            );
        }

        let before = s.store.statements();
        let sse = over_sse(&s, &body).await;
        assert_eq!(s.store.statements() - before, planned, "{b} sse");
        assert_eq!(
            sse,
            format!("event: next\ndata: {http}\n\nevent: complete\ndata: \n\n"),
            "{b}"
        );
        // Over GET as well.
        let r = s
            .client
            .get(format!("{}/graphql", s.base))
            .query(&[("query", QUERY)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.text().await.unwrap(), http, "{b} GET");

        // No read after the first went to the resolvers.
        assert_eq!(
            fallbacks(&s.graphql),
            plus_one(&[0; 9], Fallback::Validation),
            "{b}"
        );
    }
}

#[tokio::test]
async fn reads_the_plan_declines_are_counted_by_reason() {
    use Unsupported::{Count, Directive, Introspection, Selection};
    for db in TestDb::each().await {
        let s = seeded(db).await;
        let b = s.store.backend();
        let g = &s.graphql;
        let cases = [
            (
                "{ books { title @include(if: true) } }",
                json!({}),
                Directive,
            ),
            (
                "query($i: Boolean!) { books { title @skip(if: $i) } }",
                json!({"i": false}),
                Directive,
            ),
            ("{ booksCount }", json!({}), Count),
            ("{ authors { name booksCount } }", json!({}), Count),
            (
                "{ __schema { queryType { name } } }",
                json!({}),
                Introspection,
            ),
            // The same key twice: async-graphql merges the fields.
            ("{ books { title title } }", json!({}), Selection),
        ];
        for (query, variables, unsupported) in cases {
            let body = json!({"query": query, "variables": variables});
            // The first run of a document: validation, whatever it holds.
            let before = fallbacks(g);
            let first = post(&s, &body).await;
            assert_eq!(
                fallbacks(g),
                plus_one(&before, Fallback::Validation),
                "{b}: {query}"
            );
            // Then what the plan does not run, the same answer.
            let again = post(&s, &body).await;
            let declined = Fallback::Unsupported(unsupported);
            assert_eq!(
                fallbacks(g),
                plus_one(&plus_one(&before, Fallback::Validation), declined),
                "{b}: {query}"
            );
            assert_eq!(again, first, "{b}: {query}");
        }

        // A declined query over WebSocket is counted the same way.
        let before = fallbacks(g);
        over_websocket(&s, "graphql-transport-ws", "{ booksCount }").await;
        assert_eq!(
            fallbacks(g),
            plus_one(&before, Fallback::Unsupported(Count)),
            "{b}"
        );

        // A request with extensions is never planned.
        let before = fallbacks(g);
        post(&s, &json!({"query": QUERY, "extensions": {"x": 1}})).await;
        assert_eq!(
            fallbacks(g),
            plus_one(&before, Fallback::Unsupported(Unsupported::Extensions)),
            "{b}"
        );

        // A plan that gives up (the caller lacks the scope) is `refused`;
        // async-graphql reports the error.
        let scopeless = || {
            Request::new("{ books { title } }")
                .variables(Variables::default())
                .data(crate::user("u", &[]))
        };
        let before = fallbacks(g);
        let answer = g.answer(scopeless()).await;
        assert!(answer.has_errors(), "{b}");
        assert_eq!(fallbacks(g), plus_one(&before, Fallback::Validation), "{b}");
        let before = fallbacks(g);
        let answer = g.answer(scopeless()).await;
        assert!(answer.has_errors(), "{b}");
        assert_eq!(fallbacks(g), plus_one(&before, Fallback::Refused), "{b}");

        // Writes and refused documents of no read are no reads' fallbacks.
        let before = fallbacks(g);
        for _ in 0..2 {
            post(
                &s,
                &json!({"query": "mutation { createAuthor(name: \"x\") { id } }"}),
            )
            .await;
        }
        post(&s, &json!({"query": "{ books { "})).await;
        assert_eq!(fallbacks(g), before, "{b}");
    }
}
