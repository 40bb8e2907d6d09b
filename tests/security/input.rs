//! Input that nests or widens past what the server can walk, and filters
//! that would tell a field the caller may not read.
//!
//! - A `where` literal or variable nested far deeper than any real filter
//!   (1,500 `NOT`s or `AND`s, 9 KB) once overflowed a worker's stack and
//!   aborted the process: it is refused with `BAD_USER_INPUT` before it is
//!   parsed, and the server keeps answering.
//! - An `OR` of 4,999 comparisons (within the 5,000 values a filter may
//!   compare with) was a 500 on SQLite ("Expression tree is too large"):
//!   it is answered on both backends.
//! - A subscription argument on a field the caller may not read
//!   (`memoCreated(draft:)` without `memo:draft`) told that field's values
//!   by which events arrived: it is `FORBIDDEN`, as in lists, over both
//!   WebSocket protocols and SSE.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::Server;

/// `{KEY: ... {title: "x"} ...}`, `levels` deep; `list` wraps each level in
/// a list (`AND: [...]`).
fn nested(key: &str, levels: usize, list: bool) -> String {
    let (open, close) = if list {
        (format!("{{{key}: ["), "]}")
    } else {
        (format!("{{{key}: "), "}")
    };
    format!(
        "{}{{title: \"x\"}}{}",
        open.repeat(levels),
        close.repeat(levels)
    )
}

/// The same value as JSON, for a variable.
fn nested_json(key: &str, levels: usize) -> Value {
    let mut v = json!({"title": "x"});
    for _ in 0..levels {
        v = json!({ key: v });
    }
    v
}

/// (status, body) of a GraphQL POST asking for
/// `application/graphql-response+json` (a refusal before execution is a 400).
async fn post(s: &Server, token: &str, body: &Value) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .bearer_auth(token)
        .header("accept", "application/graphql-response+json")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

async fn alive(s: &Server) {
    let r = s
        .client
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", s.backend());
}

#[tokio::test]
async fn deeply_nested_input_is_refused_before_it_is_parsed() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let literal = |w: String| json!({"query": format!("{{ memos(where: {w}) {{ id }} }}")});
        let variable = |w: Value| json!({"query": "query($w: MemoWhere) { memos(where: $w) { id } }", "variables": {"w": w}});
        for (what, body) in [
            ("NOT literal", literal(nested("NOT", 1500, false))),
            ("AND literal", literal(nested("AND", 1500, true))),
            ("OR literal", literal(nested("OR", 1500, true))),
            // Within serde_json's own limit (128), past the input limit.
            ("NOT variable", variable(nested_json("NOT", 100))),
        ] {
            let started = Instant::now();
            let (status, r) = post(&s, &alice, &body).await;
            assert_eq!(status, 400, "{b}: {what}: {r}");
            assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {what}: {r}");
            assert!(
                r["errors"][0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("nested more than 32 levels"),
                "{b}: {what}: {r}"
            );
            assert!(r.get("data").is_none(), "{b}: {what}: {r}");
            assert!(started.elapsed() < Duration::from_secs(2), "{b}: {what}");
            alive(&s).await;
        }
        // Past serde_json's limit: the body is not read as JSON at all.
        let (status, r) = post(&s, &alice, &variable(nested_json("NOT", 1500))).await;
        assert_eq!(status, 400, "{b}: {r}");
        assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {r}");
        // Selection sets nested past what the parser reads.
        let deep = format!("{}{}", "{ memos ".repeat(20_000), "}".repeat(20_000));
        let (status, r) = post(&s, &alice, &json!({"query": deep})).await;
        assert_eq!(status, 400, "{b}: {r}");
        assert_eq!(code(&r), "QUERY_TOO_DEEP", "{b}: {r}");
        // GET, subscriptions (SSE) and WebSocket take the same path.
        let q = format!(
            "subscription {{ memoCreated(draft: {}) {{ id }} }}",
            nested("NOT", 1500, false)
        );
        let r = s
            .client
            .get(format!("{}/graphql", s.base))
            .bearer_auth(&alice)
            .query(&[("query", q.as_str())])
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        let text = tokio::time::timeout(Duration::from_secs(5), r.text())
            .await
            .unwrap()
            .unwrap();
        assert!(text.contains("BAD_USER_INPUT"), "{b}: {text}");
        let mut ws = ws(&s, "graphql-transport-ws", &alice).await;
        send(
            &mut ws,
            json!({"id": "1", "type": "subscribe", "payload": {"query": q}}),
        )
        .await;
        let m = recv(&mut ws).await;
        assert_eq!(m["type"], "error", "{b}: {m}");
        assert_eq!(
            m["payload"][0]["extensions"]["code"], "BAD_USER_INPUT",
            "{b}: {m}"
        );
        alive(&s).await;
        // Within the limit, a nested filter is answered, quickly.
        let started = Instant::now();
        let (status, r) = post(&s, &alice, &literal(nested("NOT", 31, false))).await;
        assert_eq!(status, 200, "{b}: {r}");
        assert!(r.get("errors").is_none(), "{b}: {r}");
        assert!(started.elapsed() < Duration::from_secs(2), "{b}");
    }
}

#[tokio::test]
async fn a_wide_or_within_the_limits_is_answered() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let created = s
            .data(
                &alice,
                "mutation { createMemo(title: \"needle\", published: true) { id } }",
                json!({}),
            )
            .await;
        let id = &created["createMemo"]["id"];
        // 4,998 misses and the one title stored: 4,999 values, one short of
        // the 5,000 a filter may compare with.
        let mut terms: Vec<String> = (0..4998).map(|i| format!("{{title: \"t{i}\"}}")).collect();
        terms.push("{title: \"needle\"}".to_string());
        let body = json!({"query": format!("{{ memos(where: {{OR: [{}]}}) {{ id }} }}", terms.join(", "))});
        let started = Instant::now();
        let (status, r) = post(&s, &alice, &body).await;
        assert_eq!(status, 200, "{b}: {r}");
        assert_eq!(r["data"]["memos"], json!([{"id": id}]), "{b}: {r}");
        assert!(started.elapsed() < Duration::from_secs(5), "{b}");
        let body = json!({"query": format!("{{ memos(where: {{NOT: {{OR: [{}]}}}}) {{ id }} }}", terms.join(", "))});
        let (status, r) = post(&s, &alice, &body).await;
        assert_eq!(status, 200, "{b}: {r}");
        assert_eq!(r["data"]["memos"], json!([]), "{b}: {r}");
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket on `/graphql` with `protocol`, acknowledged for `token`.
async fn ws(s: &Server, protocol: &str, token: &str) -> Socket {
    let url = format!("{}/graphql", s.base.replace("http://", "ws://"));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", protocol.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    send(
        &mut socket,
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
    )
    .await;
    assert_eq!(recv(&mut socket).await["type"], "connection_ack");
    socket
}

async fn send(s: &mut Socket, v: Value) {
    s.send(Message::text(v.to_string())).await.unwrap();
}

/// The next JSON message other than a keep-alive.
async fn recv(s: &mut Socket) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("a message in time")
            .expect("socket open")
            .expect("no socket error");
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["type"] != "ka" {
                return v;
            }
        }
    }
}

/// The messages of operation `id` until it completes (or `wait` passes).
async fn until_complete(s: &mut Socket, wait: Duration) -> Vec<Value> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, async {
        loop {
            let m = recv(s).await;
            let done = m["type"] == "complete" || m["type"] == "error";
            out.push(m);
            if done {
                break;
            }
        }
    })
    .await;
    out
}

/// The SSE stream of `query` for `token`, read for `wait`.
async fn sse(
    s: &Server,
    token: &str,
    query: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<String> {
    let r = s
        .client
        .post(format!("{}/graphql", s.base))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": query}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::spawn(async move {
        let mut r = r;
        let mut text = String::new();
        let _ = tokio::time::timeout(wait, async {
            while let Ok(Some(chunk)) = r.chunk().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
                if text.contains("event: complete") {
                    break;
                }
            }
        })
        .await;
        text
    })
}

#[tokio::test]
async fn subscription_filters_on_a_field_the_caller_may_not_read_are_forbidden() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        // The same filter in a list is refused (the rule subscriptions follow).
        let r = s
            .gql(
                Some(&bob),
                "{ memos(where: {draft: \"HIT-7731\"}) { id } }",
                json!({}),
            )
            .await;
        assert_eq!(
            r["errors"][0]["extensions"]["code"], "FORBIDDEN",
            "{b}: {r}"
        );
        let wait = Duration::from_secs(3);
        let hit = "subscription { memoCreated(draft: \"HIT-7731\") { id } }";
        let miss = "subscription { memoCreated(draft: \"MISS-0000\") { id } }";
        let null = "subscription { memoCreated(draft: null) { id } }";
        let mut sockets = Vec::new();
        for (n, protocol) in ["graphql-transport-ws", "graphql-ws"].iter().enumerate() {
            for (k, q) in [hit, miss, null].iter().enumerate() {
                let mut socket = ws(&s, protocol, &bob).await;
                let kind = if *protocol == "graphql-ws" {
                    "start"
                } else {
                    "subscribe"
                };
                let id = format!("{n}-{k}");
                send(
                    &mut socket,
                    json!({"id": id, "type": kind, "payload": {"query": q}}),
                )
                .await;
                sockets.push((protocol.to_string(), q.to_string(), socket));
            }
        }
        let mut streams = Vec::new();
        for q in [hit, miss, null] {
            streams.push((q, sse(&s, &bob, q, wait).await));
        }
        // alice may read drafts: her filtered subscription gets the event.
        let mut control = ws(&s, "graphql-transport-ws", &alice).await;
        send(
            &mut control,
            json!({"id": "c", "type": "subscribe", "payload": {"query": hit}}),
        )
        .await;
        // bob's subscriptions are refused: alice's is the one listening.
        s.wait_for_feed_receivers(1).await;
        s.data(
            &alice,
            "mutation { createMemo(title: \"open\", published: true, draft: \"HIT-7731\") { id } }",
            json!({}),
        )
        .await;
        let m = recv(&mut control).await;
        assert_eq!(m["type"], "next", "{b}: {m}");
        assert!(
            m["payload"]["data"]["memoCreated"]["id"].is_string(),
            "{b}: {m}"
        );
        for (protocol, q, mut socket) in sockets {
            let got = until_complete(&mut socket, wait).await;
            let text = serde_json::to_string(&got).unwrap();
            assert!(
                text.contains("FORBIDDEN") && text.contains("memo:draft"),
                "{b}: {protocol}: {q}: {text}"
            );
            assert!(
                got.iter()
                    .all(|m| m["payload"]["data"]["memoCreated"].is_null()),
                "{b}: {protocol}: {q}: {text}"
            );
        }
        for (q, stream) in streams {
            let text = stream.await.unwrap();
            assert!(text.contains("FORBIDDEN"), "{b}: SSE: {q}: {text}");
            assert!(!text.contains("\"memoCreated\":{"), "{b}: SSE: {q}: {text}");
        }
    }
}

/// `@skip`/`@include` as the GraphQL spec reads them: a variable left out
/// takes its declared default, and an object whose every field is skipped
/// is `{}` (never a null, which in a non-null list would break it without
/// an error; in a lookup would say the row is missing).
#[tokio::test]
async fn skip_and_include_follow_variable_defaults_and_keep_empty_objects() {
    let s = Server::start("");
    let alice = s.token("alice").await;
    let created = s
        .data(
            &alice,
            "mutation { createMemo(title: \"m\", published: true) { id } }",
            json!({}),
        )
        .await;
    let id = created["createMemo"]["id"].as_str().unwrap().to_string();
    let cases = [
        (
            "query($x: Boolean = false) { memos { id title @include(if: $x) } }",
            json!({}),
            json!({"memos": [{"id": id}]}),
        ),
        (
            "query($x: Boolean = false) { memos { id title @include(if: $x) } }",
            json!({"x": true}),
            json!({"memos": [{"id": id, "title": "m"}]}),
        ),
        (
            "query($x: Boolean = true) { memos { id title @skip(if: $x) } }",
            json!({}),
            json!({"memos": [{"id": id}]}),
        ),
        (
            "{ memos { title @skip(if: true) } }",
            json!({}),
            json!({"memos": [{}]}),
        ),
        (
            "query($x: Boolean = true) { memos { ... on Memo { title @skip(if: $x) } } }",
            json!({}),
            json!({"memos": [{}]}),
        ),
        (
            "query($id: ID!) { memo(id: $id) { title @include(if: false) } }",
            json!({"id": id}),
            json!({"memo": {}}),
        ),
        (
            "query($x: Boolean = true) { memos @skip(if: $x) { id } }",
            json!({}),
            json!({}),
        ),
    ];
    // Twice: the second run takes the cached document.
    for _ in 0..2 {
        for (query, variables, data) in &cases {
            let r = s.gql(Some(&alice), query, variables.clone()).await;
            assert!(r.get("errors").is_none(), "{query}: {r}");
            assert_eq!(&r["data"], data, "{query}: {r}");
        }
    }
}
