//! A TCP proxy in front of a database server, for faults the tests inject
//! themselves without touching the shared server: every connection
//! dropped and new ones refused (a restart), or new connections held
//! unanswered (a server too busy to accept).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// What the proxy does with a new connection.
const UP: u8 = 0;
const REFUSE: u8 = 1;
const HOLD: u8 = 2;

/// A TCP proxy to one target address (see the module).
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect instead of the target.
    pub addr: std::net::SocketAddr,
    mode: Arc<AtomicU8>,
    /// Bumped on every cut; connections of an older generation close.
    generation: tokio::sync::watch::Sender<u64>,
    /// Bumped when held connections may go on.
    released: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`), forwarding.
    pub async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(UP));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let (released, _) = tokio::sync::watch::channel(0u64);
        let (flag, gen_tx, rel_tx) = (mode.clone(), generation.clone(), released.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let held = match flag.load(Ordering::SeqCst) {
                    REFUSE => {
                        drop(inbound);
                        continue;
                    }
                    HOLD => Some(rel_tx.subscribe()),
                    _ => None,
                };
                let target = target.clone();
                let mut gen_rx = gen_tx.subscribe();
                tokio::spawn(async move {
                    if let Some(mut released) = held
                        && released.changed().await.is_err()
                    {
                        return;
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = gen_rx.changed() => {}
                    }
                });
            }
        });
        Proxy {
            addr,
            mode,
            generation,
            released,
        }
    }

    /// A proxy in front of the database of the PostgreSQL `url`, and the
    /// same URL through the proxy.
    pub async fn postgres(url: &str) -> (Proxy, String) {
        // postgres://user@host:port/db?query -> the host:port and the rest.
        let (scheme, after_scheme) = url.split_once("://").unwrap();
        let (authority, path) = after_scheme.split_once('/').unwrap();
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h.to_string()),
            None => (String::new(), authority.to_string()),
        };
        let proxy = Proxy::start(hostport).await;
        let through = format!("{scheme}://{userinfo}{}/{path}", proxy.addr);
        (proxy, through)
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.mode.store(REFUSE, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Keeps the connections it has, and holds new ones (accepted, never
    /// answered) until [`Proxy::restore`].
    pub fn hold(&self) {
        self.mode.store(HOLD, Ordering::SeqCst);
    }

    /// Forwards again, held connections included.
    pub fn restore(&self) {
        self.mode.store(UP, Ordering::SeqCst);
        self.released.send_modify(|g| *g += 1);
    }
}
