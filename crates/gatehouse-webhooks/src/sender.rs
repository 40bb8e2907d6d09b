//! [`WebhookSender`]: one delivery attempt, as Standard Webhooks describes
//! it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_lc_rs::hmac;
use base64::Engine as _;
use gatehouse_outbox::{Outgoing, SendError, Sender};

use crate::{Webhook, WebhookError};

/// How much of a receiver's answer is read (and dropped): enough for the
/// connection to be reused after a short answer, never more, whatever the
/// receiver sends.
pub const RESPONSE_BODY_CAP: usize = 64 * 1024;

/// The longest a connection may take to open, within the attempt's
/// timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers the messages of one webhook's channel: POSTs the stored body
/// with `webhook-id` (the message id, the same on every attempt),
/// `webhook-timestamp` (this attempt's time, in seconds) and
/// `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of
/// `id.timestamp.body` under the webhook's key).
///
/// A 2xx answer is a delivery. 410 Gone fails the message at once (the
/// receiver says the endpoint is gone; it stays failed and visible until
/// retried by hand). Any other answer, a redirect (never followed), a
/// timeout or a connection error is retried by the outbox with backoff.
#[derive(Debug)]
pub struct WebhookSender {
    hook: String,
    url: url::Url,
    key: hmac::Key,
    client: reqwest::Client,
}

impl WebhookSender {
    pub(crate) fn new(hook: &Webhook) -> Result<Self, WebhookError> {
        let client = reqwest::Client::builder()
            .timeout(hook.timeout)
            .connect_timeout(CONNECT_TIMEOUT.min(hook.timeout))
            // A redirect would resend the signed body to another place.
            .redirect(reqwest::redirect::Policy::none())
            // The channel has at most this many sends in flight.
            .pool_max_idle_per_host(hook.channel_options().concurrency)
            .user_agent(concat!("gatehouse-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| WebhookError::Client(e.to_string()))?;
        Ok(Self {
            hook: hook.id.clone(),
            url: hook.url.clone(),
            key: hmac::Key::new(hmac::HMAC_SHA256, &hook.key),
            client,
        })
    }
}

/// The Standard Webhooks signature of `body`, sent as message `id` at
/// `timestamp` (seconds since the Unix epoch): the base64 HMAC-SHA256 of
/// `id.timestamp.body`, without the `v1,` prefix.
pub fn sign(key: &hmac::Key, id: &str, timestamp: u64, body: &str) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(ctx.sign().as_ref())
}

#[async_trait]
impl Sender for WebhookSender {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let body = message.payload.to_string();
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let signature = sign(&self.key, &message.id, timestamp, &body);
        let sent = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &message.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", format!("v1,{signature}"))
            .body(body)
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            // The URL may carry a token of the receiver's: left out of the
            // error, which is stored and logged.
            Err(e) => return Err(SendError::Retry(describe(e.without_url()))),
        };
        let status = response.status();
        // Read (at most the cap) so that the connection can be reused.
        let mut read = 0usize;
        while read < RESPONSE_BODY_CAP {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        if status.is_success() {
            tracing::debug!(webhook = %self.hook, id = %message.id, status = status.as_u16(), "webhook delivered");
            return Ok(());
        }
        let what = format!("the receiver answered HTTP {}", status.as_u16());
        if status == reqwest::StatusCode::GONE {
            return Err(SendError::Permanent(format!("{what} (Gone): not retried")));
        }
        if status.is_redirection() {
            return Err(SendError::Retry(format!(
                "{what}, a redirect, which is not followed: set `url` to where it points"
            )));
        }
        Err(SendError::Retry(what))
    }
}

/// A transport error in a line: what failed, and its innermost cause.
fn describe(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "no answer in time"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    let mut cause: &dyn std::error::Error = &e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    format!("{kind}: {cause}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known answer, the one Standard Webhooks libraries test against.
    #[test]
    fn a_signature_is_the_base64_hmac_sha256_of_id_timestamp_and_body() {
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap_or_default();
        let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }
}
