//! Subscriptions over WebSocket (`graphql-transport-ws` and the legacy
//! `graphql-ws`) and SSE, against the real router with the authentication
//! layer, the OAuth endpoints and REST: each close code, filters, writes
//! from GraphQL and REST, token expiry and revocation, back-pressure limits,
//! shutdown, and (with PostgreSQL) delivery across two instances.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use gatehouse_auth::{ManualClock, NewClient};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_http::authn::{Authenticator, RestGuard};
use gatehouse_http::{AppState, CancellationToken, Fanout, SubscriptionOptions, app};
use gatehouse_schema::Model;
use gatehouse_store::Store;
use gatehouse_testkit::{Port, TestDb, example_model, graphql, password_token};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{auth_server, oauth_router};

const WAIT: Duration = Duration::from_secs(5);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Env {
    base: String,
    client: reqwest::Client,
    clock: Arc<ManualClock>,
    shutdown: CancellationToken,
    /// The server's subscription groups.
    fanout: Fanout,
    /// The store the server writes to (its change feed).
    store: Store,
    _db: Option<TestDb>,
}

fn options() -> SubscriptionOptions {
    SubscriptionOptions {
        init_timeout: Duration::from_millis(300),
        keepalive: Duration::from_millis(200),
        max_per_connection: 3,
        recheck_interval: Duration::from_millis(100),
        ..SubscriptionOptions::default()
    }
}

async fn start() -> Env {
    let db = TestDb::sqlite();
    let model = example_model();
    let store = db.open(&model).await;
    let mut env = start_on(store, model, options(), false).await;
    env._db = Some(db);
    env
}

async fn start_on(
    store: Store,
    model: Arc<Model>,
    subscriptions: SubscriptionOptions,
    anonymous_read: bool,
) -> Env {
    let port = Port::bind().await;
    let issuer = port.base();
    let (auth, clock) = auth_server(&issuer).await;
    let admin = auth.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "app".into(),
                grants: vec!["password".into()],
                scopes: vec!["read".into(), "write".into(), "review".into()],
                audiences: vec![],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user(
            "alice",
            "alice-password",
            &["read".into(), "write".into(), "review".into()],
        )
        .await
        .unwrap();
    admin
        .bootstrap_user("writer", "writer-password", &["write".into()])
        .await
        .unwrap();
    let authn = Authenticator::new(auth.clone(), anonymous_read);
    let shutdown = subscriptions.shutdown.clone();
    let fanout = subscriptions.fanout.clone();
    let state = AppState {
        graphql: Graphql::new(model.clone(), store.clone(), &GraphqlOptions::default()).unwrap(),
        ready: Arc::new(|| Box::pin(async { Ok(()) })),
        base_path: String::new(),
        max_body_bytes: 1 << 20,
        authn: Some(authn.clone()),
        subscriptions,
        cors: Default::default(),
    };
    let oauth = oauth_router(&auth, &issuer);
    let rest = gatehouse_rest::router(gatehouse_rest::RestState {
        store: store.clone(),
        default_page_size: 50,
        max_page_size: 500,
        max_body_bytes: 1 << 20,
        base_path: String::new(),
        auth_required: true,
    })
    .layer(axum::middleware::from_fn_with_state(
        RestGuard { authn },
        gatehouse_http::authn::rest_layer,
    ));
    let router = app(state, vec![oauth, rest]);
    let served = port.serve(router);
    Env {
        base: issuer,
        client: served.client,
        clock,
        shutdown,
        fanout,
        store,
        _db: None,
    }
}

impl Env {
    /// Waits until `members` subscriptions are in groups and every group
    /// listens to the store's change feed (one receiver each): a change
    /// made from then on reaches each of them, and none that has left.
    async fn settle(&self, members: usize) {
        let (fanout, store) = (&self.fanout, &self.store);
        gatehouse_testkit::eventually(
            &format!("{members} subscriber(s), every group listening"),
            || fanout.subscribers() == members && store.feed_receivers() == fanout.groups(),
        )
        .await;
    }

    async fn token(&self, user: &str, password: &str) -> String {
        let app = ("app", "app-secret");
        let r = password_token(&self.client, &self.base, app, (user, password), None).await;
        r["access_token"].as_str().unwrap().to_string()
    }

    async fn alice(&self) -> String {
        self.token("alice", "alice-password").await
    }

    async fn gql(&self, token: &str, query: &str, variables: Value) -> Value {
        let url = format!("{}/graphql", self.base);
        graphql(&self.client, &url, Some(token), query, variables).await
    }

    async fn author(&self, token: &str, name: &str) -> String {
        let r = self
            .gql(
                token,
                "mutation($n: String!) { createAuthor(name: $n) { id } }",
                json!({"n": name}),
            )
            .await;
        r["data"]["createAuthor"]["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn book(&self, token: &str, title: &str, author: &str) -> Value {
        self.gql(
            token,
            "mutation($i: BookInput!) { createBook(input: $i) { id } }",
            json!({"i": {"title": title, "status": "AVAILABLE", "author": author}}),
        )
        .await
    }

    async fn ws(&self, protocol: &str) -> Socket {
        let url = format!("{}/graphql", self.base.replace("http://", "ws://"));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", protocol.parse().unwrap());
        let (socket, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(
            resp.headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap()),
            Some(protocol)
        );
        socket
    }

    /// A `graphql-transport-ws` socket, acknowledged, for `token`.
    async fn ready(&self, token: &str) -> Socket {
        let mut s = self.ws("graphql-transport-ws").await;
        send(
            &mut s,
            json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
        )
        .await;
        assert_eq!(recv(&mut s).await, json!({"type": "connection_ack"}));
        s
    }
}

async fn send(s: &mut Socket, v: Value) {
    s.send(Message::text(v.to_string())).await.unwrap();
}

/// The next JSON message; panics on close or silence.
async fn recv(s: &mut Socket) -> Value {
    loop {
        let msg = tokio::time::timeout(WAIT, s.next())
            .await
            .expect("a message in time")
            .expect("socket open")
            .expect("no socket error");
        match msg {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// The close code and reason the server ends with (skipping other messages).
async fn closed(s: &mut Socket) -> (u16, String) {
    loop {
        let msg = tokio::time::timeout(WAIT, s.next())
            .await
            .expect("a close in time");
        match msg {
            Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
            Some(Ok(Message::Close(None))) | None => return (1005, String::new()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("socket error before close: {e}"),
        }
    }
}

/// Nothing arrives for a while.
async fn silent(s: &mut Socket) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(300), s.next()).await {
        panic!("unexpected message: {m:?}");
    }
}

#[tokio::test]
async fn transport_ws_delivers_filtered_events_from_graphql_and_rest() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let other = env.author(&token, "Other").await;
    let mut s = env.ready(&token).await;

    send(&mut s, json!({"type": "ping", "payload": {"n": 1}})).await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "pong", "payload": {"n": 1}})
    );

    send(
        &mut s,
        json!({"type": "subscribe", "id": "1", "payload": {
            "query": "subscription($a: ID) { bookCreated(author: $a) { title author { name } } }",
            "variables": {"a": lem},
        }}),
    )
    .await;
    env.settle(1).await;
    env.book(&token, "Not this one", &other).await;
    env.book(&token, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "1", "payload": {"data": {"bookCreated": {"title": "Solaris", "author": {"name": "Lem"}}}}})
    );

    // A REST write reaches the same subscriber.
    let r = env
        .client
        .post(format!("{}/v1/books", env.base))
        .bearer_auth(&token)
        .json(&json!({"title": "Fiasco", "status": "AVAILABLE", "author": lem}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        recv(&mut s).await["payload"]["data"]["bookCreated"]["title"],
        json!("Fiasco")
    );

    // `complete` from the client ends it without an answer.
    send(&mut s, json!({"type": "complete", "id": "1"})).await;
    env.settle(0).await;
    env.book(&token, "Eden", &lem).await;
    silent(&mut s).await;

    // The id is free again.
    send(
        &mut s,
        json!({"type": "subscribe", "id": "1", "payload": {"query": "subscription { bookDeleted { title } }"}}),
    )
    .await;
    env.settle(1).await;
    let id = env.book(&token, "Short-lived", &lem).await["data"]["createBook"]["id"].clone();
    env.gql(
        &token,
        "mutation($id: ID!) { deleteBook(id: $id) { id } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        recv(&mut s).await["payload"]["data"]["bookDeleted"]["title"],
        json!("Short-lived")
    );
}

#[tokio::test]
async fn transport_ws_invalid_subscribe_is_an_error_message() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    send(
        &mut s,
        json!({"type": "subscribe", "id": "v", "payload": {"query": "subscription { bookCreated { nope } }"}}),
    )
    .await;
    let m = recv(&mut s).await;
    assert_eq!(
        (m["type"].as_str(), m["id"].as_str()),
        (Some("error"), Some("v"))
    );
    assert!(m["payload"].is_array(), "{m}");
    assert_eq!(
        m["payload"][0]["extensions"]["code"],
        json!("GRAPHQL_VALIDATION_FAILED")
    );

    send(
        &mut s,
        json!({"type": "subscribe", "id": "p", "payload": {"query": "subscription {"}}),
    )
    .await;
    let m = recv(&mut s).await;
    assert_eq!(m["type"], json!("error"));
    assert_eq!(
        m["payload"][0]["extensions"]["code"],
        json!("GRAPHQL_PARSE_FAILED")
    );
    // The socket stays usable, and the id of a refused operation is free.
    send(
        &mut s,
        json!({"type": "subscribe", "id": "v", "payload": {"query": "{ authors { name } }"}}),
    )
    .await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "v", "payload": {"data": {"authors": []}}})
    );
    assert_eq!(recv(&mut s).await, json!({"type": "complete", "id": "v"}));
}

#[tokio::test]
async fn transport_ws_close_codes() {
    let env = start().await;
    let token = env.alice().await;

    // 4400: not a protocol message
    let mut s = env.ws("graphql-transport-ws").await;
    s.send(Message::text("{not json")).await.unwrap();
    assert_eq!(closed(&mut s).await.0, 4400);
    let mut s = env.ready(&token).await;
    send(&mut s, json!({"type": "next", "id": "1", "payload": {}})).await;
    assert_eq!(closed(&mut s).await.0, 4400);

    // 4401: subscribe before connection_ack
    let mut s = env.ws("graphql-transport-ws").await;
    send(
        &mut s,
        json!({"type": "subscribe", "id": "1", "payload": {"query": "subscription { bookDeleted { id } }"}}),
    )
    .await;
    assert_eq!(closed(&mut s).await, (4401, "Unauthorized".into()));

    // 4403: missing, bad, or wrong-scheme credentials in connection_init
    for payload in [
        json!({}),
        json!({"Authorization": "Bearer not-a-token"}),
        json!({"authorization": "Basic YWxpY2U6d3Jvbmc="}),
    ] {
        let mut s = env.ws("graphql-transport-ws").await;
        send(
            &mut s,
            json!({"type": "connection_init", "payload": payload}),
        )
        .await;
        let (code, reason) = closed(&mut s).await;
        assert_eq!(code, 4403, "{payload}: {reason}");
        assert!(reason.starts_with("Forbidden"), "{reason}");
    }
    // lowercase key and Basic credentials are accepted
    let mut s = env.ws("graphql-transport-ws").await;
    send(
        &mut s,
        json!({"type": "connection_init", "payload": {"authorization": format!("Bearer {token}")}}),
    )
    .await;
    assert_eq!(recv(&mut s).await["type"], json!("connection_ack"));

    // 4408: no connection_init in time
    let mut s = env.ws("graphql-transport-ws").await;
    assert_eq!(
        closed(&mut s).await,
        (4408, "Connection initialisation timeout".into())
    );

    // 4409: a duplicate id
    let mut s = env.ready(&token).await;
    let sub = json!({"type": "subscribe", "id": "dup", "payload": {"query": "subscription { bookDeleted { id } }"}});
    send(&mut s, sub.clone()).await;
    send(&mut s, sub).await;
    assert_eq!(
        closed(&mut s).await,
        (4409, "Subscriber for dup already exists".into())
    );

    // 4429: a second connection_init
    let mut s = env.ready(&token).await;
    send(&mut s, json!({"type": "connection_init"})).await;
    assert_eq!(
        closed(&mut s).await,
        (4429, "Too many initialisation requests".into())
    );

    // 4406: no subprotocol we speak
    let url = format!("{}/graphql", env.base.replace("http://", "ws://"));
    let (mut s, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    assert_eq!(closed(&mut s).await.0, 4406);
}

#[tokio::test]
async fn upgrade_header_credentials_and_scopes() {
    let env = start().await;
    let token = env.alice().await;
    // The upgrade request's Authorization is used when connection_init has none.
    let url = format!("{}/graphql", env.base.replace("http://", "ws://"));
    let mut req = url.into_client_request().unwrap();
    let h = req.headers_mut();
    h.insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    h.insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut s, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    send(&mut s, json!({"type": "connection_init"})).await;
    assert_eq!(recv(&mut s).await["type"], json!("connection_ack"));

    // A token without `read` may connect, but each subscription is refused
    // by its field's scope check (an execution error: next, then complete).
    let writer = env.token("writer", "writer-password").await;
    let mut s = env.ready(&writer).await;
    send(
        &mut s,
        json!({"type": "subscribe", "id": "1", "payload": {"query": "subscription { bookCreated { id } }"}}),
    )
    .await;
    let m = recv(&mut s).await;
    assert_eq!(m["type"], json!("next"), "{m}");
    assert_eq!(
        m["payload"]["errors"][0]["extensions"]["code"],
        json!("FORBIDDEN")
    );
    assert_eq!(recv(&mut s).await, json!({"type": "complete", "id": "1"}));
}

/// The upgrade itself is not authenticated (the protocol authenticates in
/// `connection_init`): a bad `Authorization` on the upgrade request gets
/// the socket, and `connection_init` is refused with 4403.
#[tokio::test]
async fn a_bad_authorization_on_the_upgrade_is_refused_at_connection_init() {
    let env = start().await;
    let url = format!("{}/graphql", env.base.replace("http://", "ws://"));
    for bad in ["Bearer not-a-jwt", "Basic !!", "Digest x"] {
        let mut req = url.clone().into_client_request().unwrap();
        let h = req.headers_mut();
        h.insert(
            "sec-websocket-protocol",
            "graphql-transport-ws".parse().unwrap(),
        );
        h.insert("authorization", bad.parse().unwrap());
        let (mut s, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        assert_eq!(resp.status(), 101);
        send(&mut s, json!({"type": "connection_init"})).await;
        let (code, reason) = closed(&mut s).await;
        assert_eq!(code, 4403, "{bad}: {reason}");
    }
}

#[tokio::test]
async fn too_many_subscriptions_on_one_socket_are_refused() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    for id in ["a", "b", "c", "d"] {
        send(
            &mut s,
            json!({"type": "subscribe", "id": id, "payload": {"query": "subscription { bookDeleted { id } }"}}),
        )
        .await;
    }
    let m = recv(&mut s).await;
    assert_eq!(
        (m["type"].as_str(), m["id"].as_str()),
        (Some("error"), Some("d"))
    );
    assert!(
        m["payload"][0]["message"]
            .as_str()
            .unwrap()
            .contains("3 operations"),
        "{m}"
    );
}

#[tokio::test]
async fn an_expired_token_closes_the_socket_with_4403() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    send(
        &mut s,
        json!({"type": "subscribe", "id": "1", "payload": {"query": "subscription { bookDeleted { id } }"}}),
    )
    .await;
    silent(&mut s).await;
    // The access token lives an hour on the authorization server's clock.
    env.clock.advance_secs(3600);
    let (code, reason) = closed(&mut s).await;
    assert_eq!(code, 4403);
    assert!(reason.contains("expired"), "{reason}");
}

#[tokio::test]
async fn a_revoked_token_closes_the_socket_with_4403() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    let r = env
        .client
        .post(format!("{}/oauth/revoke", env.base))
        .basic_auth("app", Some("app-secret"))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (code, reason) = closed(&mut s).await;
    assert_eq!(code, 4403);
    assert!(reason.contains("revoked"), "{reason}");
}

#[tokio::test]
async fn legacy_graphql_ws_protocol() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let mut s = env.ws("graphql-ws").await;
    send(
        &mut s,
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
    )
    .await;
    assert_eq!(recv(&mut s).await, json!({"type": "connection_ack"}));
    assert_eq!(recv(&mut s).await, json!({"type": "ka"}));
    // keep-alives keep coming
    assert_eq!(recv(&mut s).await, json!({"type": "ka"}));

    send(
        &mut s,
        json!({"type": "start", "id": "7", "payload": {"query": "subscription { bookCreated { title } }"}}),
    )
    .await;
    env.settle(1).await;
    env.book(&token, "Solaris", &lem).await;
    let m = loop {
        let m = recv(&mut s).await;
        if m["type"] != json!("ka") {
            break m;
        }
    };
    assert_eq!(
        m,
        json!({"type": "data", "id": "7", "payload": {"data": {"bookCreated": {"title": "Solaris"}}}})
    );
    send(&mut s, json!({"type": "stop", "id": "7"})).await;
    let m = loop {
        let m = recv(&mut s).await;
        if m["type"] != json!("ka") {
            break m;
        }
    };
    assert_eq!(m, json!({"type": "complete", "id": "7"}));

    // an invalid operation is an `error` message
    send(
        &mut s,
        json!({"type": "start", "id": "8", "payload": {"query": "subscription { nope }"}}),
    )
    .await;
    let m = loop {
        let m = recv(&mut s).await;
        if m["type"] != json!("ka") {
            break m;
        }
    };
    assert_eq!(
        (m["type"].as_str(), m["id"].as_str()),
        (Some("error"), Some("8"))
    );

    send(&mut s, json!({"type": "connection_terminate"})).await;
    assert_eq!(closed(&mut s).await.0, 1000);

    // bad credentials: connection_error, then 4403
    let mut s = env.ws("graphql-ws").await;
    send(
        &mut s,
        json!({"type": "connection_init", "payload": {"Authorization": "Bearer nope"}}),
    )
    .await;
    assert_eq!(recv(&mut s).await["type"], json!("connection_error"));
    assert_eq!(closed(&mut s).await.0, 4403);

    // no connection_init: 4408
    let mut s = env.ws("graphql-ws").await;
    assert_eq!(closed(&mut s).await.0, 4408);
}

#[tokio::test]
async fn shutdown_closes_sockets_with_1001_and_completes_sse() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    let mut sse = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": "subscription { bookDeleted { id } }"}))
        .send()
        .await
        .unwrap();
    env.settle(1).await;
    env.shutdown.cancel();
    assert_eq!(closed(&mut s).await.0, 1001);
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(WAIT, sse.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(text.ends_with("event: complete\ndata: \n\n"), "{text:?}");
}

/// Reads SSE events (name, data) until the stream ends.
async fn sse_events(resp: &mut reqwest::Response, until: usize) -> Vec<(String, String)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    while out.len() < until {
        let Some(chunk) = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .unwrap()
            .unwrap()
        else {
            break;
        };
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v.trim_start().to_string();
                }
            }
            if !name.is_empty() {
                out.push((name, data));
            }
        }
    }
    out
}

#[tokio::test]
async fn sse_streams_events_and_ends_at_token_expiry() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let resp = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": "subscription { bookCreated { title } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    env.settle(1).await;
    env.book(&token, "Solaris", &lem).await;
    let mut resp = resp;
    // The event is out before the token expires.
    let mut events = sse_events(&mut resp, 1).await;
    env.clock.advance_secs(3600);
    events.extend(sse_events(&mut resp, 2).await);
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0].0, "next");
    let first: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(
        first,
        json!({"data": {"bookCreated": {"title": "Solaris"}}})
    );
    assert_eq!(events[1].0, "next");
    let last: Value = serde_json::from_str(&events[1].1).unwrap();
    assert_eq!(
        last["errors"][0]["extensions"]["code"],
        json!("UNAUTHENTICATED")
    );
    assert!(
        last["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    assert_eq!(events[2].0, "complete");
}

#[tokio::test]
async fn sse_errors_and_queries_and_credentials() {
    let env = start().await;
    let token = env.alice().await;
    // A validation error is a `next` event, then `complete` (the protocol's rule).
    let mut resp = env
        .client
        .get(format!("{}/graphql", env.base))
        .query(&[("query", "subscription { bookCreated { nope } }")])
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = sse_events(&mut resp, 2).await;
    assert_eq!(events[0].0, "next");
    assert!(
        events[0].1.contains("GRAPHQL_VALIDATION_FAILED"),
        "{events:?}"
    );
    assert_eq!(events[1].0, "complete");

    // A query is one result.
    let mut resp = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": "{ authors { id } }"}))
        .send()
        .await
        .unwrap();
    let events = sse_events(&mut resp, 2).await;
    assert_eq!(
        events,
        vec![
            (
                "next".to_string(),
                json!({"data": {"authors": []}}).to_string()
            ),
            ("complete".to_string(), String::new())
        ]
    );

    // No or bad credentials: 401 before any stream.
    let resp = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth("bad")
        .header("accept", "text/event-stream")
        .json(&json!({"query": "subscription { bookCreated { title } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

#[tokio::test]
async fn anonymous_reads_may_subscribe_when_configured() {
    let db = TestDb::sqlite();
    let model = example_model();
    let store = db.open(&model).await;
    let env = start_on(store, model, options(), true).await;
    let mut s = env.ws("graphql-transport-ws").await;
    send(&mut s, json!({"type": "connection_init"})).await;
    assert_eq!(recv(&mut s).await["type"], json!("connection_ack"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_event_reaches_a_subscriber_on_another_instance() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let model = example_model();
    let one_store = db.open(&model).await;
    let two_store = db.open(&model).await;
    let one = start_on(one_store.clone(), model.clone(), options(), false).await;
    let two = start_on(two_store.clone(), model, options(), false).await;

    let token_two = two.alice().await;
    let mut s = two.ready(&token_two).await;
    send(
        &mut s,
        json!({"type": "subscribe", "id": "x", "payload": {"query": "subscription { bookCreated { title author { name } } }"}}),
    )
    .await;
    two.settle(1).await;
    let token_one = one.alice().await;
    let lem = one.author(&token_one, "Lem").await;
    one.book(&token_one, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "x", "payload": {"data": {"bookCreated": {"title": "Solaris", "author": {"name": "Lem"}}}}})
    );
    drop(s);
    one_store.close().await;
    two_store.close().await;
}

#[tokio::test]
async fn a_client_that_falls_behind_is_closed_with_1013() {
    let db = TestDb::sqlite();
    let model = example_model();
    let store = db.open(&model).await;
    // One queued message per socket: a burst of events outruns the writer.
    let opts = SubscriptionOptions {
        queue_capacity: 1,
        ..options()
    };
    let env = start_on(store, model, opts, false).await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let mut s = env.ready(&token).await;
    for id in ["a", "b", "c"] {
        send(
            &mut s,
            json!({"type": "subscribe", "id": id, "payload": {"query": "subscription { bookCreated { id title } }"}}),
        )
        .await;
    }
    env.settle(3).await;
    let burst = (0..20)
        .map(|i| {
            format!(
                "b{i}: createBook(input: {{title: \"t{i}\", status: AVAILABLE, author: \"{lem}\"}}) {{ id }}"
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    env.gql(&token, &format!("mutation {{ {burst} }}"), json!({}))
        .await;
    let (code, reason) = closed(&mut s).await;
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("too slow"), "{reason}");
}

#[tokio::test]
async fn legacy_protocol_rules_and_expiry() {
    let env = start().await;
    let token = env.alice().await;
    let init =
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}});
    let start_msg = |id: &str| json!({"type": "start", "id": id, "payload": {"query": "subscription { bookDeleted { id } }"}});

    // `start` before the ack: 4401
    let mut s = env.ws("graphql-ws").await;
    send(&mut s, start_msg("1")).await;
    assert_eq!(closed(&mut s).await.0, 4401);

    // a duplicate id: 4409
    let mut s = env.ws("graphql-ws").await;
    send(&mut s, init.clone()).await;
    send(&mut s, start_msg("1")).await;
    send(&mut s, start_msg("1")).await;
    assert_eq!(closed(&mut s).await.0, 4409);

    // a second connection_init: 4429
    let mut s = env.ws("graphql-ws").await;
    send(&mut s, init.clone()).await;
    send(&mut s, init.clone()).await;
    assert_eq!(closed(&mut s).await.0, 4429);

    // expiry: 4403
    let mut s = env.ws("graphql-ws").await;
    send(&mut s, init).await;
    send(&mut s, start_msg("1")).await;
    assert_eq!(recv(&mut s).await["type"], json!("connection_ack"));
    env.clock.advance_secs(3600);
    let (code, reason) = closed(&mut s).await;
    assert_eq!(code, 4403);
    assert!(reason.contains("expired"), "{reason}");
}

#[tokio::test]
async fn messages_larger_than_the_read_buffer_arrive_whole() {
    let env = start().await;
    let token = env.alice().await;
    let mut s = env.ready(&token).await;
    let query = format!("{{ authors {{ name }} }}{}", " ".repeat(50_000));
    send(
        &mut s,
        json!({"type": "subscribe", "id": "big", "payload": {"query": query}}),
    )
    .await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "big", "payload": {"data": {"authors": []}}})
    );
}

/// A `subscribe` message for `query` with `variables`.
fn subscribe(id: &str, query: &str, variables: Value) -> Value {
    json!({"type": "subscribe", "id": id, "payload": {"query": query, "variables": variables}})
}

impl Env {
    /// A token for alice with only the `scope` given.
    async fn alice_with(&self, scope: &str) -> String {
        let r: Value = self
            .client
            .post(format!("{}/oauth/token", self.base))
            .basic_auth("app", Some("app-secret"))
            .form(&[
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-password"),
                ("scope", scope),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["access_token"].as_str().unwrap().to_string()
    }
}

#[tokio::test]
async fn identical_subscriptions_share_one_execution_each_with_its_own_frames() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let query = "subscription { bookCreated { title author { name } } }";
    let mut a = env.ready(&token).await;
    let mut b = env.ready(&token).await;
    let mut legacy = env.ws("graphql-ws").await;
    send(
        &mut legacy,
        json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}),
    )
    .await;
    assert_eq!(recv(&mut legacy).await["type"], json!("connection_ack"));
    assert_eq!(recv(&mut legacy).await["type"], json!("ka"));
    send(&mut a, subscribe("a1", query, json!({}))).await;
    send(&mut a, subscribe("a2", query, json!({}))).await;
    send(&mut b, subscribe("b\"1", query, json!({}))).await;
    send(
        &mut legacy,
        json!({"type": "start", "id": "l", "payload": {"query": query}}),
    )
    .await;
    env.settle(4).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 4));

    env.book(&token, "Solaris", &lem).await;
    let payload = json!({"data": {"bookCreated": {"title": "Solaris", "author": {"name": "Lem"}}}});
    let mut on_a = vec![recv(&mut a).await, recv(&mut a).await];
    on_a.sort_by_key(|m| m["id"].as_str().map(str::to_string));
    assert_eq!(
        on_a,
        vec![
            json!({"type": "next", "id": "a1", "payload": payload}),
            json!({"type": "next", "id": "a2", "payload": payload}),
        ]
    );
    assert_eq!(
        recv(&mut b).await,
        json!({"type": "next", "id": "b\"1", "payload": payload})
    );
    let m = loop {
        let m = recv(&mut legacy).await;
        if m["type"] != json!("ka") {
            break m;
        }
    };
    assert_eq!(m, json!({"type": "data", "id": "l", "payload": payload}));
    silent(&mut b).await;
}

#[tokio::test]
async fn different_variables_and_scopes_are_not_mixed_up() {
    let env = start().await;
    let token = env.alice().await;
    let read_only = env.alice_with("read").await;
    let writer = env.token("writer", "writer-password").await;
    let lem = env.author(&token, "Lem").await;
    let other = env.author(&token, "Other").await;
    let query = "subscription($a: ID) { bookCreated(author: $a) { title } }";

    let mut lem_sub = env.ready(&token).await;
    send(&mut lem_sub, subscribe("1", query, json!({"a": lem}))).await;
    let mut other_sub = env.ready(&token).await;
    send(&mut other_sub, subscribe("1", query, json!({"a": other}))).await;
    // Same query and variables as `lem_sub`, other scopes: its own group.
    let mut lem_read_only = env.ready(&read_only).await;
    send(&mut lem_read_only, subscribe("1", query, json!({"a": lem}))).await;
    // Lacking `read`: refused by the field's scope check, alone.
    let mut refused = env.ready(&writer).await;
    send(&mut refused, subscribe("1", query, json!({}))).await;
    let m = recv(&mut refused).await;
    assert_eq!(
        m["payload"]["errors"][0]["extensions"]["code"],
        json!("FORBIDDEN"),
        "{m}"
    );
    assert_eq!(
        recv(&mut refused).await,
        json!({"type": "complete", "id": "1"})
    );
    env.settle(3).await;
    assert_eq!(env.fanout.groups(), 3);

    env.book(&token, "Solaris", &lem).await;
    env.book(&token, "Elsewhere", &other).await;
    let title = |m: Value| m["payload"]["data"]["bookCreated"]["title"].clone();
    assert_eq!(title(recv(&mut lem_sub).await), json!("Solaris"));
    assert_eq!(title(recv(&mut other_sub).await), json!("Elsewhere"));
    assert_eq!(title(recv(&mut lem_read_only).await), json!("Solaris"));
    silent(&mut lem_sub).await;
    silent(&mut other_sub).await;
    silent(&mut lem_read_only).await;
}

#[tokio::test]
async fn one_subscriber_leaving_does_not_end_the_others() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let query = "subscription { bookCreated { title } }";
    let mut a = env.ready(&token).await;
    let mut b = env.ready(&token).await;
    let mut c = env.ready(&token).await;
    for s in [&mut a, &mut b, &mut c] {
        send(s, subscribe("1", query, json!({}))).await;
    }
    env.settle(3).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 3));

    // One completes its subscription, another closes its socket.
    send(&mut a, json!({"type": "complete", "id": "1"})).await;
    c.close(None).await.unwrap();
    drop(c);
    env.settle(1).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 1));
    env.book(&token, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut b).await["payload"]["data"]["bookCreated"]["title"],
        json!("Solaris")
    );
    silent(&mut a).await;

    // A subscriber joining later gets only what happens after it joined;
    // the group ends with its last subscriber.
    send(&mut a, subscribe("2", query, json!({}))).await;
    env.settle(2).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 2));
    env.book(&token, "Eden", &lem).await;
    assert_eq!(recv(&mut a).await["id"], json!("2"));
    assert_eq!(recv(&mut b).await["id"], json!("1"));
    drop(a);
    send(&mut b, json!({"type": "complete", "id": "1"})).await;
    env.settle(0).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (0, 0));
}

#[tokio::test]
async fn token_expiry_ends_only_the_affected_subscriber() {
    let env = start().await;
    let early = env.alice().await;
    let lem = env.author(&early, "Lem").await;
    env.clock.advance_secs(1800);
    let late = env.alice().await;
    let query = "subscription { bookCreated { title } }";
    let mut a = env.ready(&early).await;
    let mut b = env.ready(&late).await;
    send(&mut a, subscribe("1", query, json!({}))).await;
    send(&mut b, subscribe("1", query, json!({}))).await;
    env.settle(2).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 2));

    // `early` expires; `late` has half an hour left.
    env.clock.advance_secs(1800);
    let (code, reason) = closed(&mut a).await;
    assert_eq!(code, 4403);
    assert!(reason.contains("expired"), "{reason}");
    env.book(&late, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut b).await["payload"]["data"]["bookCreated"]["title"],
        json!("Solaris")
    );
    assert_eq!(env.fanout.subscribers(), 1);
}

#[tokio::test]
async fn sse_and_websocket_subscribers_share_a_group() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let query = "subscription { bookCreated { title } }";
    let mut ws = env.ready(&token).await;
    send(&mut ws, subscribe("1", query, json!({}))).await;
    let mut resp = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": query}))
        .send()
        .await
        .unwrap();
    env.settle(2).await;
    assert_eq!((env.fanout.groups(), env.fanout.subscribers()), (1, 2));
    env.book(&token, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut ws).await["payload"]["data"]["bookCreated"]["title"],
        json!("Solaris")
    );
    let events = sse_events(&mut resp, 1).await;
    assert_eq!(events[0].0, "next");
    let body: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(body["data"]["bookCreated"]["title"], json!("Solaris"));
}

/// A variable the `subscribe` message does not send leaves its argument
/// absent (GraphQL spec §6.4.1): a subscription's filter does not apply,
/// and a mutation over the socket leaves the field as it is.
#[tokio::test]
async fn an_unsent_variable_is_absent_over_websocket() {
    let env = start().await;
    let token = env.alice().await;
    let lem = env.author(&token, "Lem").await;
    let earthsea = env.book(&token, "Earthsea", &lem).await["data"]["createBook"]["id"].clone();
    env.gql(
        &token,
        "mutation($id: ID!) { updateBook(id: $id, patch: {year: 1968}) { id } }",
        json!({"id": earthsea}),
    )
    .await;
    let mut s = env.ready(&token).await;
    send(
        &mut s,
        subscribe(
            "s",
            "subscription($a: ID) { bookCreated(author: $a) { title } }",
            json!({}),
        ),
    )
    .await;
    env.settle(1).await;
    env.book(&token, "Solaris", &lem).await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "s", "payload": {"data": {"bookCreated": {"title": "Solaris"}}}})
    );
    send(
        &mut s,
        subscribe(
            "m",
            "mutation($id: ID!, $t: String, $y: Int) { updateBook(id: $id, patch: {title: $t, year: $y}) { title year } }",
            json!({"id": earthsea, "t": "A Wizard of Earthsea"}),
        ),
    )
    .await;
    assert_eq!(
        recv(&mut s).await,
        json!({"type": "next", "id": "m", "payload": {"data": {"updateBook": {"title": "A Wizard of Earthsea", "year": 1968}}}})
    );
    assert_eq!(recv(&mut s).await, json!({"type": "complete", "id": "m"}));
}

/// When the PostgreSQL listener loses its connection, other instances'
/// events of the gap are lost: every open subscription ends with the
/// promised message and its own code, `FEED_INTERRUPTED` (never an internal
/// error), then `complete`, over WebSocket and SSE alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_feed_ends_subscriptions_with_feed_interrupted() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let model = example_model();
    let store = db.open(&model).await;
    let env = start_on(store.clone(), model, options(), false).await;
    let token = env.alice().await;
    let mut ws = env.ready(&token).await;
    send(
        &mut ws,
        subscribe("w", "subscription { bookCreated { title } }", json!({})),
    )
    .await;
    let mut sse = env
        .client
        .post(format!("{}/graphql", env.base))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .json(&json!({"query": "subscription { bookCreated { id } }"}))
        .send()
        .await
        .unwrap();
    env.settle(2).await;
    let admin = gatehouse_testkit::pg_client(db.url()).await.unwrap();
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(!cut.is_empty(), "no listener connection found");
    let interrupted = |payload: &Value| {
        assert_eq!(
            payload["errors"][0]["extensions"]["code"],
            json!("FEED_INTERRUPTED"),
            "{payload}"
        );
        assert_eq!(
            payload["errors"][0]["message"],
            json!(
                "the change feed was interrupted and events may have been missed; subscribe again"
            ),
            "{payload}"
        );
    };
    // The feed ends once the listener listens again.
    let next = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    return serde_json::from_str::<Value>(t.as_str()).unwrap();
                }
                Some(Ok(_)) => continue,
                other => panic!("socket ended: {other:?}"),
            }
        }
    })
    .await
    .expect("the subscription ends in time");
    assert_eq!(
        (&next["type"], &next["id"]),
        (&json!("next"), &json!("w")),
        "{next}"
    );
    interrupted(&next["payload"]);
    assert_eq!(recv(&mut ws).await, json!({"type": "complete", "id": "w"}));
    let events = sse_events(&mut sse, 2).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "next", "{events:?}");
    interrupted(&serde_json::from_str(&events[0].1).unwrap());
    assert_eq!(events[1].0, "complete", "{events:?}");
    drop(ws);
    store.close().await;
}
