//! What the subscription transports (WebSocket in [`crate::ws`], SSE in
//! [`crate::sse`]) share: their limits, the shutdown signal, and the watch
//! that ends a stream when its credential stops granting access.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use gatehouse_auth::Principal;
use tokio_util::sync::CancellationToken;

use crate::authn::{AuthFailure, Authenticator};

/// Limits and timers of long-lived GraphQL streams (subscriptions).
#[derive(Debug, Clone)]
pub struct SubscriptionOptions {
    /// How long a WebSocket may stay open without `connection_init`
    /// (then it is closed with 4408).
    pub init_timeout: Duration,
    /// Interval of the legacy `graphql-ws` protocol's `ka` messages, and of
    /// SSE comment lines that keep proxies from closing an idle stream.
    pub keepalive: Duration,
    /// Subscriptions one WebSocket may run at once; one more is refused with
    /// an `error` message.
    pub max_per_connection: usize,
    /// Messages queued for one connection (or SSE stream) that its client
    /// has not read yet. A WebSocket whose queue is full is closed with 1013.
    pub queue_capacity: usize,
    /// How often a stream's credential is validated again, to notice
    /// revocation (expiry also ends the stream at its exact time).
    pub recheck_interval: Duration,
    /// The server's one shutdown signal: when cancelled, sockets close with
    /// 1001, SSE streams complete and `/readyz` answers 503.
    pub shutdown: CancellationToken,
    /// The running subscription groups: identical subscriptions execute once
    /// for all their subscribers (see [`crate::fanout`]).
    pub fanout: crate::fanout::Fanout,
}

impl Default for SubscriptionOptions {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            max_per_connection: 100,
            queue_capacity: 256,
            recheck_interval: Duration::from_secs(60),
            shutdown: CancellationToken::new(),
            fanout: crate::fanout::Fanout::default(),
        }
    }
}

/// The credential a stream was opened with, kept to validate it again.
#[derive(Debug, Clone)]
pub(crate) struct Credential {
    /// The `Authorization` value it came with (none for anonymous reads).
    pub authorization: Option<HeaderValue>,
    /// Who it authenticated as.
    pub principal: Principal,
}

impl Credential {
    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = &self.authorization {
            h.insert(header::AUTHORIZATION, v.clone());
        }
        h
    }
}

/// Resolves, with a message safe to show, once `credential` no longer grants
/// access: at the token's expiry (measured on the authorization server's
/// clock) or at the first periodic re-validation that finds it revoked.
/// Never resolves for anonymous callers or without an authenticator.
pub(crate) async fn stale(
    authn: Option<Authenticator>,
    credential: Option<Credential>,
    recheck: Duration,
) -> String {
    let (Some(authn), Some(credential)) = (authn, credential) else {
        return std::future::pending().await;
    };
    if credential.principal.is_anonymous() {
        return std::future::pending().await;
    }
    let headers = credential.headers();
    loop {
        let wait = match credential.principal.expires_at {
            Some(exp) => {
                let left = u64::try_from(exp.saturating_sub(authn.now())).unwrap_or(0);
                recheck.min(Duration::from_secs(left))
            }
            None => recheck,
        };
        tokio::time::sleep(wait).await;
        match authn.authenticate(&headers).await {
            Ok(_) => {}
            // An unreachable credential store is not a verdict on the token:
            // keep streaming and look again later.
            Err(AuthFailure::Unavailable) => {}
            Err(f) => return f.message(),
        }
    }
}

/// A WebSocket close reason is at most 123 bytes (RFC 6455 §5.5: control
/// frames carry at most 125 bytes, 2 of them the code).
pub(crate) fn close_reason(text: &str) -> String {
    let mut end = text.len().min(123);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
