//! Outgoing e-mail: the payload of the outbox's `email` channel
//! ([`Email`]), where it goes ([`Transport`]: an SMTP server, or a
//! directory that receives one RFC 5322 `.eml` file per message), and the
//! [`EmailSender`] that delivers it for the outbox's worker.
//!
//! A flow that sends mail enqueues [`Email::message`] in the transaction
//! that writes what the mail carries (a verification token), so a mail
//! exists exactly when its token does; the worker sends it, retrying while
//! the server is down (`gatehouse-outbox`).

#![warn(missing_docs)]

mod transport;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use gatehouse_outbox::{NewMessage, Outgoing, SendError, Sender};
use lettre::message::{Mailbox, MultiPart, header::ContentType};
use serde::{Deserialize, Serialize};

pub use transport::{SmtpSecurity, SmtpUrl, Transport};

/// The outbox channel e-mail travels on.
pub const CHANNEL: &str = "email";

/// Why e-mail cannot be set up; a configuration error, worded for the
/// operator (it never contains the SMTP password). [`MailError::key`] names
/// the `[email]` key it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MailError {
    /// `transport` is neither `smtp` nor `file`.
    #[error("must be \"smtp\" or \"file\", not {0:?}")]
    Transport(String),
    /// The SMTP URL does not read.
    #[error("{0}")]
    Url(String),
    /// `from` is not an address.
    #[error("{0:?} is not an e-mail address (e.g. \"App <no-reply@example.com>\")")]
    From(String),
    /// The directory of the file transport cannot be created.
    #[error("cannot create the directory {path}: {cause}")]
    Directory {
        /// The directory.
        path: String,
        /// What the file system said.
        cause: String,
    },
}

impl MailError {
    /// The `[email]` key the error is about: `transport`, `url` or `from`.
    pub fn key(&self) -> &'static str {
        match self {
            MailError::Transport(_) => "transport",
            MailError::Url(_) | MailError::Directory { .. } => "url",
            MailError::From(_) => "from",
        }
    }
}

/// One e-mail, as the outbox carries it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Email {
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// An HTML alternative of the body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

impl Email {
    /// The outbox message that sends it, to enqueue in the writer's
    /// transaction (`Outbox::enqueue`).
    pub fn message(&self) -> NewMessage {
        // An `Email` is plain strings: it always serializes.
        let payload = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        NewMessage::new(CHANNEL, payload)
    }
}

/// The `[email]` settings, checked: where mail goes and who sends it.
#[derive(Debug, Clone)]
pub struct MailSettings {
    /// Where mail goes.
    pub transport: Transport,
    /// The `From` of every message.
    pub from: Mailbox,
}

impl MailSettings {
    /// Checks `transport` (`smtp` or `file`), `url` and `from`; a relative
    /// directory of the file transport is taken relative to `base` (the
    /// config file's directory).
    pub fn parse(
        transport: &str,
        url: &str,
        from: &str,
        base: &std::path::Path,
    ) -> Result<MailSettings, MailError> {
        let transport = Transport::parse(transport, url, base)?;
        let from = from
            .parse::<Mailbox>()
            .map_err(|_| MailError::From(from.to_string()))?;
        Ok(MailSettings { transport, from })
    }
}

/// Delivers the `email` channel through the configured transport.
#[derive(Clone)]
pub struct EmailSender {
    from: Mailbox,
    transport: Arc<transport::Ready>,
    /// Shown in logs instead of the URL.
    describe: String,
}

impl fmt::Debug for EmailSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailSender")
            .field("from", &self.from.to_string())
            .field("transport", &self.describe)
            .finish()
    }
}

impl EmailSender {
    /// The sender for `settings`: builds the SMTP client (no connection is
    /// made before the first message) or creates the directory.
    pub fn new(settings: &MailSettings) -> Result<EmailSender, MailError> {
        Ok(EmailSender {
            from: settings.from.clone(),
            transport: Arc::new(transport::Ready::new(&settings.transport)?),
            describe: settings.transport.to_string(),
        })
    }

    /// The message `email` becomes, as RFC 5322 text: what the SMTP server
    /// or the `.eml` file receives. `id` is the outbox message's, which
    /// makes the `Message-ID` the same on every attempt.
    pub fn render(&self, id: &str, email: &Email) -> Result<lettre::Message, SendError> {
        let to = email.to.parse::<Mailbox>().map_err(|_| {
            SendError::Permanent(format!("{:?} is not an e-mail address", email.to))
        })?;
        let domain = self.from.email.domain().to_string();
        let builder = lettre::Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(email.subject.clone())
            .message_id(Some(format!("<{id}@{domain}>")));
        let built = match &email.html {
            None => builder
                .header(ContentType::TEXT_PLAIN)
                .body(email.text.clone()),
            Some(html) => builder.multipart(MultiPart::alternative_plain_html(
                email.text.clone(),
                html.clone(),
            )),
        };
        built.map_err(|e| SendError::Permanent(format!("the message does not build: {e}")))
    }
}

#[async_trait]
impl Sender for EmailSender {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let email: Email = serde_json::from_value(message.payload.clone())
            .map_err(|e| SendError::Permanent(format!("not an e-mail payload: {e}")))?;
        let rendered = self.render(&message.id, &email)?;
        self.transport.send(&message.id, rendered).await
    }
}
