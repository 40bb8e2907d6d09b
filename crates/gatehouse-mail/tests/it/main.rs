//! E-mail through the outbox: over SMTP in clear text to an in-process
//! sink, and into a directory of `.eml` files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_db::{Db, DbOptions};
use gatehouse_mail::{CHANNEL, Email, EmailSender, MailSettings};
use gatehouse_outbox::{
    ChannelOptions, MessageState, Outbox, Outcome, Outgoing, SendError, Sender, Worker,
    WorkerOptions,
};
use gatehouse_testkit::{SmtpSink, TestDb};
use tokio_util::sync::CancellationToken;

fn settings(transport: &str, url: &str) -> MailSettings {
    MailSettings::parse(
        transport,
        url,
        "Gatehouse <no-reply@example.com>",
        Path::new(""),
    )
    .unwrap()
}

fn welcome() -> Email {
    Email {
        to: "ada@example.com".into(),
        subject: "Confirm your address".into(),
        text: "Your code is 12345678.\n.A line starting with a dot.\n".into(),
        html: None,
    }
}

fn outgoing(email: &Email) -> Outgoing {
    Outgoing {
        id: "0190f3d2-0000-7000-8000-000000000001".into(),
        channel: CHANNEL.into(),
        key: None,
        payload: serde_json::from_str(email.message().payload()).unwrap_or_default(),
        attempt: 1,
        created_at: 0,
    }
}

/// A message's header fields (unfolded) and body, as RFC 5322 lays them out.
fn parse(text: &str) -> (Vec<(String, String)>, String) {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .expect("a blank line ends the header");
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            let last = fields.last_mut().expect("a continuation follows a field");
            last.1.push_str(line.trim_start());
        } else {
            let (name, value) = line.split_once(':').expect("a field is `name: value`");
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()),
                "{name:?}"
            );
            fields.push((name.to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    (fields, body.to_string())
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} field in {fields:?}"))
}

#[tokio::test]
async fn an_email_reaches_an_smtp_server_in_clear_text_as_a_well_formed_message() {
    let mut sink = SmtpSink::start().await;
    let sender = EmailSender::new(&settings("smtp", &sink.url())).unwrap();
    sender.send(&outgoing(&welcome())).await.unwrap();
    let mail = sink.next().await;
    assert_eq!(mail.from, "no-reply@example.com");
    assert_eq!(mail.to, ["ada@example.com"]);
    let (fields, body) = parse(&mail.data);
    assert_eq!(field(&fields, "to"), "ada@example.com");
    assert_eq!(field(&fields, "from"), "Gatehouse <no-reply@example.com>");
    assert_eq!(field(&fields, "subject"), "Confirm your address");
    assert_eq!(
        field(&fields, "message-id"),
        "<0190f3d2-0000-7000-8000-000000000001@example.com>"
    );
    assert!(body.contains("Your code is 12345678."), "{body}");
    assert!(body.contains("\r\n.A line starting with a dot."), "{body}");
}

#[tokio::test]
async fn an_address_the_server_refuses_for_good_is_a_permanent_failure_and_a_server_down_a_retry() {
    let sink = SmtpSink::refusing("550 5.1.1 no such mailbox").await;
    let sender = EmailSender::new(&settings("smtp", &sink.url())).unwrap();
    let e = sender.send(&outgoing(&welcome())).await.unwrap_err();
    assert!(matches!(e, SendError::Permanent(_)), "{e:?}");

    // A port nobody listens on: connection refused.
    let addr = sink.addr();
    drop(sink);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("smtp://127.0.0.1:{port}?tls=off");
    let sender = EmailSender::new(&settings("smtp", &url)).unwrap();
    let e = sender.send(&outgoing(&welcome())).await.unwrap_err();
    assert!(matches!(e, SendError::Retry(_)), "{e:?} ({addr})");
}

#[tokio::test]
async fn the_file_transport_writes_one_parseable_eml_file_per_message() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("mail/out");
    let sender = EmailSender::new(&settings("file", target.to_str().unwrap())).unwrap();
    let mut email = welcome();
    email.html = Some("<p>Your code is <b>12345678</b>.</p>".into());
    let message = outgoing(&email);
    sender.send(&message).await.unwrap();
    // A retry of the same message replaces its file.
    sender.send(&message).await.unwrap();
    let files: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, [format!("{}.eml", message.id)]);
    let text = std::fs::read_to_string(target.join(&files[0])).unwrap();
    let (fields, body) = parse(&text);
    assert_eq!(field(&fields, "subject"), "Confirm your address");
    assert_eq!(field(&fields, "mime-version"), "1.0");
    assert!(field(&fields, "content-type").starts_with("multipart/alternative"));
    assert!(body.contains("Your code is 12345678."), "{body}");
    assert!(body.contains("text/html"), "{body}");
}

#[tokio::test]
async fn a_payload_that_is_not_an_email_fails_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let sender = EmailSender::new(&settings("file", dir.path().to_str().unwrap())).unwrap();
    let mut m = outgoing(&welcome());
    m.payload = serde_json::json!({"to": "a@example.com"});
    assert!(matches!(
        sender.send(&m).await,
        Err(SendError::Permanent(_))
    ));
    let mut m = outgoing(&welcome());
    m.payload = serde_json::json!({"to": "not an address", "subject": "", "text": ""});
    assert!(matches!(
        sender.send(&m).await,
        Err(SendError::Permanent(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_email_enqueued_while_the_server_is_down_arrives_once_it_is_up() {
    for db in TestDb::each().await {
        let handle = Db::open(
            db.url(),
            &DbOptions {
                max_connections: None,
                acquire_timeout: Duration::from_secs(10),
                sqlite_sync_every_commit: false,
                statement_timeout: DbOptions::DEFAULT_STATEMENT_TIMEOUT,
            },
        )
        .await
        .unwrap();
        let clock = Arc::new(gatehouse_outbox::ManualClock::at_micros(
            1_735_689_600_000_000,
        ));
        let outbox = Outbox::open_with_clock(handle, clock.clone())
            .await
            .unwrap();
        // The server's port is known before it listens.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("smtp://127.0.0.1:{port}?tls=off");
        let sender = Arc::new(EmailSender::new(&settings("smtp", &url)).unwrap());
        let worker = Worker::new(
            &outbox,
            WorkerOptions {
                poll_interval: Duration::from_secs(3600),
            },
        )
        .channel(CHANNEL, sender, ChannelOptions::default());
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());

        let mut tx = outbox.db().begin().await.unwrap();
        let id = outbox.enqueue(&mut tx, &welcome().message()).await.unwrap();
        outbox.commit(tx).await.unwrap();
        let first = outcomes.recv().await.unwrap();
        assert!(
            matches!(first.outcome, Outcome::Retried { .. }),
            "{}: {first:?}",
            db.backend()
        );

        let mut sink = SmtpSink::start_on(port).await;
        clock.advance(Duration::from_secs(60));
        outbox.wake();
        let second = outcomes.recv().await.unwrap();
        assert_eq!(second.outcome, Outcome::Sent, "{}", db.backend());
        let mail = sink.next().await;
        assert_eq!(mail.to, ["ada@example.com"]);
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!((m.state, m.attempts), (MessageState::Sent, 2));
        shutdown.cancel();
        running.await.unwrap();
        assert!(
            sink.try_next().is_none(),
            "{}: delivered once",
            db.backend()
        );
    }
}
