//! An SMTP server in the test's process: enough of RFC 5321 (EHLO/HELO,
//! MAIL, RCPT, DATA, RSET, NOOP, QUIT, no TLS) for a client in clear text
//! (`smtp://127.0.0.1:PORT?tls=off`), collecting what it receives.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One message the sink accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SunkMail {
    /// `MAIL FROM`'s address.
    pub from: String,
    /// Every `RCPT TO` address.
    pub to: Vec<String>,
    /// The message as sent after `DATA`, dot-unstuffed, lines ending in CRLF.
    pub data: String,
}

/// A running sink; it stops when dropped.
#[derive(Debug)]
pub struct SmtpSink {
    addr: SocketAddr,
    received: mpsc::UnboundedReceiver<SunkMail>,
    task: tokio::task::JoinHandle<()>,
}

impl SmtpSink {
    /// A sink on a free loopback port accepting every message.
    pub async fn start() -> SmtpSink {
        Self::start_answering_rcpt(None).await
    }

    /// A sink that answers every `RCPT TO` with `reply` (e.g.
    /// `"550 5.1.1 no such mailbox"`), so no message is accepted.
    pub async fn refusing(reply: &str) -> SmtpSink {
        Self::start_answering_rcpt(Some(reply.to_string())).await
    }

    /// A sink accepting every message on loopback port `port` (one a test
    /// gave a client before the server was up).
    pub async fn start_on(port: u16) -> SmtpSink {
        Self::listen(port, None).await
    }

    async fn start_answering_rcpt(rcpt_reply: Option<String>) -> SmtpSink {
        Self::listen(0, rcpt_reply).await
    }

    async fn listen(port: u16, rcpt_reply: Option<String>) -> SmtpSink {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, received) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(session(stream, tx.clone(), rcpt_reply.clone()));
            }
        });
        SmtpSink {
            addr,
            received,
            task,
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of the `[email]` section that sends here.
    pub fn url(&self) -> String {
        format!("smtp://{}?tls=off", self.addr)
    }

    /// The next message received; fails the test after 20 s.
    pub async fn next(&mut self) -> SunkMail {
        tokio::time::timeout(std::time::Duration::from_secs(20), self.received.recv())
            .await
            .expect("the SMTP sink receives a message within 20 s")
            .expect("the SMTP sink is running")
    }

    /// A message already received, if any (without waiting).
    pub fn try_next(&mut self) -> Option<SunkMail> {
        self.received.try_recv().ok()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The address inside `<...>` of a `MAIL FROM:` / `RCPT TO:` argument.
fn address(arg: &str) -> String {
    let arg = arg.trim();
    match (arg.find('<'), arg.find('>')) {
        (Some(a), Some(b)) if a < b => arg[a + 1..b].to_string(),
        _ => arg.to_string(),
    }
}

/// Writes one reply line; `false` once the client is gone.
async fn reply(w: &mut tokio::net::tcp::OwnedWriteHalf, text: &str) -> bool {
    w.write_all(format!("{text}\r\n").as_bytes()).await.is_ok()
}

async fn session(
    stream: TcpStream,
    received: mpsc::UnboundedSender<SunkMail>,
    rcpt_reply: Option<String>,
) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    if !reply(&mut write, "220 sink ESMTP ready").await {
        return;
    }
    let (mut from, mut to) = (String::new(), Vec::new());
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let command = line.trim_end().to_string();
        let upper = command.to_ascii_uppercase();
        let answer = if upper.starts_with("EHLO") {
            "250-sink greets you\r\n250-8BITMIME\r\n250 SMTPUTF8".to_string()
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            "250 OK".to_string()
        } else if upper.starts_with("RSET") {
            from.clear();
            to.clear();
            "250 OK".to_string()
        } else if upper.starts_with("MAIL FROM:") {
            let arg = &command["MAIL FROM:".len()..];
            from = address(arg.split_whitespace().next().unwrap_or(arg));
            "250 OK".to_string()
        } else if upper.starts_with("RCPT TO:") {
            match &rcpt_reply {
                Some(r) => r.clone(),
                None => {
                    to.push(address(&command["RCPT TO:".len()..]));
                    "250 OK".to_string()
                }
            }
        } else if upper == "DATA" {
            if !reply(&mut write, "354 end with <CRLF>.<CRLF>").await {
                return;
            }
            let mut data = String::new();
            loop {
                line.clear();
                match lines.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                // RFC 5321 §4.5.2: a leading dot was doubled by the client.
                data.push_str(line.strip_prefix('.').unwrap_or(&line));
            }
            let _ = received.send(SunkMail {
                from: std::mem::take(&mut from),
                to: std::mem::take(&mut to),
                data,
            });
            "250 OK queued".to_string()
        } else if upper.starts_with("QUIT") {
            let _ = reply(&mut write, "221 bye").await;
            return;
        } else {
            "502 command not implemented".to_string()
        };
        if !reply(&mut write, &answer).await {
            return;
        }
    }
}
