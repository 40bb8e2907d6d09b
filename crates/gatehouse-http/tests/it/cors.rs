//! The CORS layer in the router (`CorsConfig`): under a base path, with
//! the configured max age, WebSocket upgrades from a listed origin, and an
//! `OPTIONS` that is not a preflight left to the routes.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use gatehouse_graphql::Graphql;
use gatehouse_http::{AppState, CorsConfig, app};
use gatehouse_oauth::AllowedOrigins;
use gatehouse_testkit::{TestDb, TestServer, example_model};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::{open_options, ready};

const ORIGIN: &str = "https://app.example";

async fn start(db: &TestDb) -> TestServer {
    let model = example_model();
    let store = db.open(&model).await;
    let state = AppState {
        graphql: Graphql::new(model, store.clone(), &open_options()).unwrap(),
        ready: ready(&store),
        base_path: "/api".into(),
        max_body_bytes: 1 << 20,
        authn: None,
        subscriptions: Default::default(),
        cors: CorsConfig {
            allowed_origins: AllowedOrigins::parse(&[ORIGIN]).unwrap(),
            max_age: Duration::from_secs(120),
        },
    };
    TestServer::start(app(state, Vec::new())).await
}

#[tokio::test]
async fn preflights_are_answered_under_the_base_path_with_the_configured_max_age() {
    let db = TestDb::sqlite();
    let s = start(&db).await;
    let r = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/api/graphql", s.base))
        .header("origin", ORIGIN)
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], ORIGIN);
    assert_eq!(h["access-control-max-age"], "120");
    // Preflights are logged like any request: they carry a request id.
    assert!(h.contains_key("x-request-id"), "{h:?}");
}

#[tokio::test]
async fn an_options_request_that_is_no_preflight_reaches_the_routes() {
    let db = TestDb::sqlite();
    let s = start(&db).await;
    let r = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/api/graphql", s.base))
        .header("origin", ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert!(r.headers().contains_key("allow"), "{:?}", r.headers());
    assert!(!r.headers().contains_key("access-control-max-age"));
}

/// Opens a graphql-transport-ws socket to `s`'s `/api/graphql`, sending
/// `origin` when given.
async fn connect(
    s: &TestServer,
    origin: Option<&str>,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
> {
    let url = format!("{}/api/graphql", s.base.replacen("http", "ws", 1));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req).await
}

#[tokio::test]
async fn websockets_from_a_listed_origin_go_through_the_cors_layer() {
    let db = TestDb::sqlite();
    let s = start(&db).await;
    let (mut socket, resp) = connect(&s, Some(ORIGIN)).await.unwrap();
    assert_eq!(resp.status(), 101);
    socket
        .send(Message::Text(r#"{"type":"connection_init"}"#.into()))
        .await
        .unwrap();
    let ack = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(ack.to_text().unwrap().contains("connection_ack"), "{ack:?}");
}

/// Cross-site WebSocket hijacking: CORS does not cover WebSockets, so an
/// upgrade from a page of another origin is refused (403), while one with
/// no `Origin` (not a browser), from the server's own origin (a page it
/// serves, such as GraphiQL) or from a listed origin connects.
#[tokio::test]
async fn websockets_from_other_origins_are_refused() {
    let db = TestDb::sqlite();
    let s = start(&db).await;
    let own = s.base.clone();
    for origin in [None, Some(own.as_str()), Some(ORIGIN)] {
        let (_, resp) = connect(&s, origin).await.unwrap();
        assert_eq!(resp.status(), 101, "{origin:?}");
    }
    for origin in [
        "https://evil.example",
        "null",
        "https://app.example.evil.example",
        &own.replacen("http://", "https://evil.", 1),
    ] {
        match connect(&s, Some(origin)).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 403, "{origin}")
            }
            other => panic!("{origin}: {:?}", other.map(|(_, r)| r.status())),
        }
    }
}
