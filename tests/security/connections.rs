//! Connection exhaustion from one address: idle keep-alive sockets from a
//! single client once took every place under `limits.max_connections` and
//! kept every other client out for as long as they stayed open. One
//! address (an IPv6 /64) now holds at most its share
//! (`limits.max_connections_per_address`, three quarters of the cap by
//! default); the rest stays open to other addresses.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::Server;

/// A connection to `addr` from the local address `from`.
async fn connect_from(from: &str, addr: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// Whether the server closes `conn` (without an answer) within `wait`.
async fn closed_within(conn: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(wait, conn.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(n)) => panic!("an answer: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(_) => false,
    }
}

/// The status line of `GET /healthz` sent on `conn`.
async fn healthz(conn: &mut TcpStream, addr: &str) -> String {
    conn.write_all(
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_holding_its_share_cannot_keep_another_out() {
    // A cap of 8: one address may hold 6 (the default share).
    let s = Server::start("[limits]\nmax_connections = 8\nheader_read_timeout = 60\n");
    let addr = s.base.trim_start_matches("http://").to_string();
    // The attacker opens as many idle sockets as the cap, from 127.0.0.1.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect_from("127.0.0.1", &addr).await);
    }
    // Those past its share are closed at once; six stay open. Which two
    // is the server's order of taking them, not necessarily the order
    // they were opened in, so all are watched together.
    let closed = futures::future::join_all(
        held.iter_mut()
            .map(|conn| closed_within(conn, Duration::from_secs(3))),
    )
    .await;
    assert_eq!(
        closed.iter().filter(|c| **c).count(),
        2,
        "two sockets past the share are closed, six stay open: {closed:?}"
    );
    // Another address is still served.
    let mut other = connect_from("127.0.0.2", &addr).await;
    assert_eq!(healthz(&mut other, &addr).await, "HTTP/1.1 200 OK");
    let logs = s.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("connection limit reached for one address")),
        "{logs:#?}"
    );
}
