//! Requests malformed below the routes: a request naming its host twice
//! (RFC 9112 §3.2) is refused on every route before one of them reads
//! either value.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Server;

/// Sends `request` as written on a new connection and returns the answer.
async fn raw(base: &str, request: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).to_string()
}

#[tokio::test]
async fn two_host_headers_are_refused_on_every_route() {
    let server = Server::start("");
    let addr = server.base.trim_start_matches("http://").to_string();
    for (method, path) in [
        ("GET", "/healthz"),
        ("GET", "/graphql"),
        ("GET", "/v1/"),
        ("GET", "/oauth/authorize"),
        ("POST", "/oauth/requestToken"),
        ("GET", "/.well-known/openid-configuration"),
    ] {
        for hosts in [
            format!("Host: {addr}\r\nHost: evil.example\r\n"),
            format!("Host: {addr}\r\nHost: {addr}\r\n"),
        ] {
            let answer = raw(
                &server.base,
                &format!(
                    "{method} {path} HTTP/1.1\r\n{hosts}Content-Length: 0\r\nConnection: close\r\n\r\n"
                ),
            )
            .await;
            assert!(
                answer.starts_with("HTTP/1.1 400 ") && answer.contains("send one Host header"),
                "{method} {path} {hosts:?}: {answer}"
            );
        }
        // One Host header is served as ever.
        let answer = raw(
            &server.base,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 "), "{method} {path}: {answer}");
        assert!(
            !answer.contains("send one Host header"),
            "{method} {path}: {answer}"
        );
    }
}
