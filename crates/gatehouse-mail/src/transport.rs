//! Where mail goes: the `[email]` `transport` and `url`, checked once, and
//! the clients they become.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_outbox::SendError;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::MailError;

/// How long one SMTP command may take (lettre's default is a minute;
/// the outbox bounds the whole send besides).
const SMTP_TIMEOUT: Duration = Duration::from_secs(20);

/// The transport of `[email]`.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// An SMTP server.
    Smtp(SmtpUrl),
    /// A directory receiving one `.eml` file per message (development,
    /// tests, or a pickup directory another program sends from).
    File(PathBuf),
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Without the password: safe to log.
impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Smtp(url) => write!(f, "{url}"),
            Transport::File(dir) => write!(f, "file {}", dir.display()),
        }
    }
}

impl Transport {
    /// Reads `transport` and `url`; a relative directory is relative to
    /// `base`.
    pub fn parse(transport: &str, url: &str, base: &Path) -> Result<Transport, MailError> {
        match transport {
            "smtp" => Ok(Transport::Smtp(SmtpUrl::parse(url)?)),
            "file" => {
                if url.is_empty() {
                    return Err(MailError::Url(
                        "the file transport needs a directory (e.g. \"data/mail\")".into(),
                    ));
                }
                let dir = url.strip_prefix("file://").unwrap_or(url);
                let dir = Path::new(dir);
                Ok(Transport::File(if dir.is_relative() {
                    base.join(dir)
                } else {
                    dir.to_path_buf()
                }))
            }
            other => Err(MailError::Transport(other.to_string())),
        }
    }
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// `smtp://`: plain connection upgraded with STARTTLS, which the server
    /// must offer (no fallback to clear text).
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Implicit,
    /// `smtp://...?tls=off`: clear text, for a relay on the same host or a
    /// test sink.
    Off,
}

/// A checked SMTP URL: `smtp://[user:pass@]host[:port][?tls=off]` or
/// `smtps://[user:pass@]host[:port]`. Its `Debug` and `Display` leave the
/// password out.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpUrl {
    /// The server's host name or address.
    pub host: String,
    /// Its port (default 587 with STARTTLS, 465 with implicit TLS, 25 in
    /// clear text).
    pub port: u16,
    /// How the connection is protected.
    pub security: SmtpSecurity,
    /// User name and password, percent-decoded.
    credentials: Option<(String, String)>,
}

impl fmt::Debug for SmtpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for SmtpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.security {
            SmtpSecurity::Implicit => "smtps",
            _ => "smtp",
        };
        write!(f, "{scheme}://")?;
        if let Some((user, _)) = &self.credentials {
            write!(f, "{user}:<redacted>@")?;
        }
        write!(f, "{}:{}", self.host, self.port)?;
        if self.security == SmtpSecurity::Off {
            f.write_str("?tls=off")?;
        }
        Ok(())
    }
}

impl SmtpUrl {
    /// Reads an SMTP URL.
    pub fn parse(text: &str) -> Result<SmtpUrl, MailError> {
        // The URL is never repeated in an error: it may hold the password.
        let url = url::Url::parse(text).map_err(|e| {
            MailError::Url(format!(
                "not a URL ({e}): expected smtp://user:pass@host:587, smtps://host:465 or smtp://host:25?tls=off"
            ))
        })?;
        let mut security = match url.scheme() {
            "smtp" => SmtpSecurity::StartTls,
            "smtps" => SmtpSecurity::Implicit,
            other => {
                return Err(MailError::Url(format!(
                    "the scheme must be smtp or smtps, not {other:?}"
                )));
            }
        };
        for (key, value) in url.query_pairs() {
            match (key.as_ref(), value.as_ref()) {
                ("tls", "off") if security == SmtpSecurity::StartTls => {
                    security = SmtpSecurity::Off;
                }
                ("tls", "off") => {
                    return Err(MailError::Url(
                        "smtps:// is always TLS: use smtp://...?tls=off for clear text".into(),
                    ));
                }
                ("tls", other) => {
                    return Err(MailError::Url(format!(
                        "tls={other:?}: the only value is \"off\" (STARTTLS is required by default)"
                    )));
                }
                (other, _) => {
                    return Err(MailError::Url(format!(
                        "unknown parameter {other:?} (the only one is tls=off)"
                    )));
                }
            }
        }
        let host = match url.host_str() {
            Some(h) if !h.is_empty() => h.trim_start_matches('[').trim_end_matches(']'),
            _ => return Err(MailError::Url("the URL names no host".into())),
        };
        let port = url.port().unwrap_or(match security {
            SmtpSecurity::StartTls => 587,
            SmtpSecurity::Implicit => 465,
            SmtpSecurity::Off => 25,
        });
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| MailError::Url("the user name or password is not UTF-8".into()))
        };
        let credentials = match (url.username(), url.password()) {
            ("", None) => None,
            (user, Some(pass)) => Some((decode(user)?, decode(pass)?)),
            (_, None) => {
                return Err(MailError::Url(
                    "a user name needs a password (smtp://user:pass@host)".into(),
                ));
            }
        };
        Ok(SmtpUrl {
            host: host.to_string(),
            port,
            security,
            credentials,
        })
    }

    /// The user name, if the URL has credentials.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(u, _)| u.as_str())
    }
}

/// A transport ready to send.
pub(crate) enum Ready {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    File(PathBuf),
}

impl Ready {
    pub(crate) fn new(transport: &Transport) -> Result<Ready, MailError> {
        match transport {
            Transport::Smtp(url) => {
                type Smtp = AsyncSmtpTransport<Tokio1Executor>;
                let builder = match url.security {
                    SmtpSecurity::Implicit => Smtp::relay(&url.host),
                    SmtpSecurity::StartTls => Smtp::starttls_relay(&url.host),
                    SmtpSecurity::Off => Ok(Smtp::builder_dangerous(&url.host)),
                }
                .map_err(|e| MailError::Url(format!("TLS for {}: {e}", url.host)))?;
                let mut builder = builder.port(url.port).timeout(Some(SMTP_TIMEOUT));
                if let Some((user, pass)) = &url.credentials {
                    builder = builder.credentials(Credentials::new(user.clone(), pass.clone()));
                }
                Ok(Ready::Smtp(builder.build()))
            }
            Transport::File(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| MailError::Directory {
                    path: dir.display().to_string(),
                    cause: e.to_string(),
                })?;
                Ok(Ready::File(dir.clone()))
            }
        }
    }

    pub(crate) async fn send(&self, id: &str, message: lettre::Message) -> Result<(), SendError> {
        match self {
            Ready::Smtp(smtp) => match smtp.send(message).await {
                Ok(_) => Ok(()),
                // A 5xx answer (no such mailbox, message refused) will not
                // change; anything else (connection, 4xx, TLS) may.
                Err(e) if e.is_permanent() => Err(SendError::Permanent(e.to_string())),
                Err(e) => Err(SendError::Retry(e.to_string())),
            },
            Ready::File(dir) => {
                let bytes = message.formatted();
                let dir = dir.clone();
                let id = id.to_string();
                tokio::task::spawn_blocking(move || write_eml(&dir, &id, &bytes))
                    .await
                    .map_err(|e| SendError::Retry(format!("the file write did not run: {e}")))?
                    .map_err(|e| SendError::Retry(format!("cannot write the message: {e}")))
            }
        }
    }
}

/// Writes `<dir>/<id>.eml` whole or not at all (a temporary file renamed
/// into place), so a reader of the directory never sees half a message
/// and a retry replaces rather than duplicates it.
fn write_eml(dir: &Path, id: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!(".{id}.eml.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(format!("{id}.eml")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls_read_with_their_security_and_default_ports() {
        let u = SmtpUrl::parse("smtp://mailer:s%3Acret@mail.example.com").unwrap();
        assert_eq!(u.security, SmtpSecurity::StartTls);
        assert_eq!((u.host.as_str(), u.port), ("mail.example.com", 587));
        assert_eq!(
            u.credentials,
            Some(("mailer".to_string(), "s:cret".to_string()))
        );
        let u = SmtpUrl::parse("smtps://mail.example.com").unwrap();
        assert_eq!((u.security, u.port), (SmtpSecurity::Implicit, 465));
        let u = SmtpUrl::parse("smtp://127.0.0.1:2525?tls=off").unwrap();
        assert_eq!((u.security, u.port), (SmtpSecurity::Off, 2525));
        assert_eq!(u.user(), None);
    }

    #[test]
    fn a_bad_smtp_url_is_a_clear_error_that_never_repeats_the_password() {
        for (url, says) in [
            ("http://host", "scheme"),
            ("smtp://host?tls=opportunistic", "tls="),
            ("smtps://host?tls=off", "always TLS"),
            ("smtp://host?port=1", "unknown parameter"),
            ("smtp://user@host", "needs a password"),
            ("not a url", "not a URL"),
        ] {
            let e = SmtpUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
        }
        let e = SmtpUrl::parse("smtp://u:hunter2@host?tls=maybe")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn the_password_never_shows_in_debug_or_display() {
        let t = Transport::parse(
            "smtp",
            "smtp://mailer:hunter2@mail.example.com:587",
            Path::new(""),
        )
        .unwrap();
        for shown in [format!("{t}"), format!("{t:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(
                shown.contains("mailer:<redacted>@mail.example.com:587"),
                "{shown}"
            );
        }
    }

    #[test]
    fn a_relative_directory_is_relative_to_the_config_file() {
        let t = Transport::parse("file", "mail", Path::new("/etc/app")).unwrap();
        assert_eq!(t, Transport::File(PathBuf::from("/etc/app/mail")));
        let t = Transport::parse("file", "/var/mail", Path::new("/etc/app")).unwrap();
        assert_eq!(t, Transport::File(PathBuf::from("/var/mail")));
        assert!(Transport::parse("sendmail", "", Path::new("")).is_err());
        assert!(Transport::parse("file", "", Path::new("")).is_err());
    }
}
