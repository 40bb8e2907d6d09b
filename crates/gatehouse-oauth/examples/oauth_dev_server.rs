//! A throwaway OAuth server for trying clients against the router: the
//! in-memory store, the demo client and user of `examples/library`.
//! Local use only.
//!
//! `cargo run -p gatehouse-oauth --example oauth_dev_server -- 127.0.0.1:8089`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;

use gatehouse_auth::{AuthConfig, AuthServer, MemoryRepo, NewClient, SystemClock, SystemRandom};
use gatehouse_oauth::{OAuthConfig, OAuthState, router};

#[tokio::main]
async fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8089".into())
        .parse()
        .expect("an address like 127.0.0.1:8089");
    let issuer = format!("http://{addr}");
    let auth = AuthServer::start(
        AuthConfig::new(&issuer),
        Arc::new(MemoryRepo::new()),
        Arc::new(SystemClock),
        Arc::new(SystemRandom),
        "dev-server-secret",
    )
    .await
    .unwrap();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let admin = auth.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "demo-app".into(),
                grants: s(&[
                    "password",
                    "client_credentials",
                    "refresh_token",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ]),
                scopes: s(&["read", "write", "offline_access"]),
                audiences: s(&["https://reports.example"]),
                ..Default::default()
            },
            "demo-secret-change-me",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user(
            "alice",
            "alice-password",
            &s(&["read", "write", "offline_access"]),
        )
        .await
        .unwrap();
    let app = router(OAuthState::new(auth, OAuthConfig::new(&issuer)));
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    println!("listening on {issuer}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .unwrap();
}
