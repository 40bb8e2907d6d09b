//! An axum router served on a random local port.

use std::net::SocketAddr;

/// A listener on `127.0.0.1:0`, bound before the router exists: for
/// routers that must know their own address (an OAuth issuer).
#[derive(Debug)]
pub struct Port {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

impl Port {
    /// Binds a free port.
    pub async fn bind() -> Port {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        Port { listener, addr }
    }

    /// Binds `addr` (`127.0.0.1:PORT`): a port a test freed and wants back
    /// (a receiver coming up where a server was already told to send).
    pub async fn bind_to(addr: &str) -> std::io::Result<Port> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Port { listener, addr })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `router` on this port until the test's runtime ends. Handlers
    /// may extract the peer (`ConnectInfo<SocketAddr>`), and responses are
    /// sent without Nagle's delay, as the binary sends them.
    pub fn serve(self, router: axum::Router) -> TestServer {
        let base = self.base();
        let listener = axum::serve::ListenerExt::tap_io(self.listener, |t| {
            let _ = t.set_nodelay(true);
        });
        tokio::spawn(async move {
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        });
        TestServer {
            base,
            addr: self.addr,
            client: reqwest::Client::new(),
        }
    }
}

/// A router being served, with a client for it.
#[derive(Debug, Clone)]
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The address served.
    pub addr: SocketAddr,
    /// A client with reqwest's defaults.
    pub client: reqwest::Client,
}

impl TestServer {
    /// Serves `router` on a free port.
    pub async fn start(router: axum::Router) -> TestServer {
        Port::bind().await.serve(router)
    }

    /// The absolute URL of `path` (`/graphql`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}
