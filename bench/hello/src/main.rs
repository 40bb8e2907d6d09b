//! Baseline server for the GraphQL benchmark: the cheapest possible axum
//! handler, answering every POST (and GET) on any path with the same
//! 100-byte JSON body. Usage: `bench-hello 127.0.0.1:PORT`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;

/// Exactly 100 bytes, shaped like a small GraphQL response.
const BODY: &str = r#"{"data":{"books":[{"title":"Benchmark baseline","year":2024},{"title":"Hello, world!!!","year":1}]}}"#;
const _: () = assert!(BODY.len() == 100);

async fn hello() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], BODY)
}

#[tokio::main]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8099".into());
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    // Same socket option as gatehouse (see crates/gatehouse/src/serve.rs).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    println!("hello listening on http://{addr}");
    let app = Router::new().fallback(hello);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .expect("serve");
}
