//! Enqueueing in the writer's transaction, delivery, retries, leases,
//! several workers, order per key.

use std::collections::HashSet;
use std::time::Duration;

use gatehouse_outbox::{
    ChannelOptions, MessageState, NewMessage, Outcome, SendError, Worker, WorkerOptions,
    backoff_delay,
};
use gatehouse_testkit::TestDb;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{Hanging, Recorder, START, manual_outbox, next_call, next_outcome, outbox};

/// Polls only when a test wakes the worker: every attempt is one the test
/// asked for.
fn woken_only() -> WorkerOptions {
    WorkerOptions {
        poll_interval: Duration::from_secs(3600),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_enqueued_in_a_rolled_back_transaction_is_never_sent() {
    for db in TestDb::each().await {
        let outbox = outbox(db.url()).await;
        let mut tx = outbox.db().begin().await.unwrap();
        outbox
            .enqueue(
                &mut tx,
                &NewMessage::new("email", json!({"n": "rolled back"})),
            )
            .await
            .unwrap();
        drop(tx);
        let mut tx = outbox.db().begin().await.unwrap();
        let committed = outbox
            .enqueue(
                &mut tx,
                &NewMessage::new("email", json!({"n": "committed"})),
            )
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();

        let (sender, mut calls) = Recorder::accepting();
        let worker =
            Worker::new(&outbox, woken_only()).channel("email", sender, ChannelOptions::default());
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());
        let sent = next_call(&mut calls).await;
        assert_eq!(sent.id, committed, "{}", db.backend());
        assert_eq!(sent.payload, json!({"n": "committed"}));
        let all = outbox.list(None, None, 100).await.unwrap();
        assert_eq!(
            all.len(),
            1,
            "{}: only the committed message exists",
            db.backend()
        );
        shutdown.cancel();
        running.await.unwrap();
        assert!(
            calls.try_recv().is_err(),
            "{}: nothing else was sent",
            db.backend()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_message_is_sent_once_and_marked_sent() {
    for db in TestDb::each().await {
        let (outbox, _clock) = manual_outbox(db.url()).await;
        let (sender, mut calls) = Recorder::accepting();
        let worker =
            Worker::new(&outbox, woken_only()).channel("email", sender, ChannelOptions::default());
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());

        let mut ids = Vec::new();
        for n in 0..2 {
            let mut tx = outbox.db().begin().await.unwrap();
            ids.push(
                outbox
                    .enqueue(&mut tx, &NewMessage::new("email", json!({ "n": n })))
                    .await
                    .unwrap(),
            );
            outbox.commit(tx).await.unwrap();
        }
        let mut sent = HashSet::new();
        while sent.len() < 2 {
            let d = next_outcome(&mut outcomes).await;
            assert_eq!(d.outcome, Outcome::Sent, "{}", db.backend());
            assert!(sent.insert(d.id), "{}: reported twice", db.backend());
        }
        for id in &ids {
            let m = outbox.get(id).await.unwrap().unwrap();
            assert_eq!(m.state, MessageState::Sent, "{}", db.backend());
            assert_eq!(m.attempts, 1);
            assert_eq!(m.lease_owner, None);
            assert_eq!(m.finished_at, Some(START));
        }
        shutdown.cancel();
        running.await.unwrap();
        let mut called = Vec::new();
        while let Ok(m) = calls.try_recv() {
            called.push(m.id);
        }
        called.sort();
        ids.sort();
        assert_eq!(called, ids, "{}: each message was sent once", db.backend());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_message_is_retried_with_backoff_and_kept_as_failed_after_its_maximum_age() {
    for db in TestDb::each().await {
        let (outbox, clock) = manual_outbox(db.url()).await;
        let opts = ChannelOptions {
            first_retry: Duration::from_secs(5),
            max_retry: Duration::from_secs(40),
            max_age: Duration::from_secs(120),
            ..ChannelOptions::default()
        };
        let (sender, _calls) =
            Recorder::scripted(|_| Err(SendError::Retry("receiver down".into())));
        let worker = Worker::new(&outbox, woken_only()).channel("email", sender, opts.clone());
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());

        let mut tx = outbox.db().begin().await.unwrap();
        let id = outbox
            .enqueue(&mut tx, &NewMessage::new("email", json!({})))
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();

        let mut attempt = 0;
        loop {
            let d = next_outcome(&mut outcomes).await;
            attempt += 1;
            assert_eq!(d.id, id);
            assert_eq!(d.attempt, attempt, "{}", db.backend());
            assert_eq!(d.error.as_deref(), Some("receiver down"));
            let Outcome::Retried { next_attempt_at } = d.outcome else {
                assert_eq!(d.outcome, Outcome::Failed);
                break;
            };
            // The delay doubles from 5 s up to 40 s, each with up to half
            // of it dropped at random.
            let full = backoff_delay(attempt, opts.first_retry, opts.max_retry, 1.0);
            let delay = Duration::from_micros((next_attempt_at - outbox.now()) as u64);
            assert!(
                delay >= full / 2 && delay <= full,
                "{}: attempt {attempt} waits {delay:?}, not within [{:?}, {full:?}]",
                db.backend(),
                full / 2
            );
            let m = outbox.get(&id).await.unwrap().unwrap();
            assert_eq!(m.state, MessageState::Pending);
            assert_eq!(m.next_attempt_at, next_attempt_at);
            clock.set_micros(next_attempt_at);
            outbox.wake();
        }
        // 5 + 10 + 20 + 40 + 40 s at most (and at least half of it) fits
        // in 120 s: between 6 and 9 attempts before giving up.
        assert!(
            (6..=9).contains(&attempt),
            "{}: {attempt} attempts",
            db.backend()
        );
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!(m.state, MessageState::Failed, "{}", db.backend());
        assert_eq!(m.attempts, attempt);
        assert_eq!(m.last_error.as_deref(), Some("receiver down"));
        assert_eq!(m.finished_at, Some(outbox.now()));
        let failed = outbox
            .list(Some(MessageState::Failed), Some("email"), 10)
            .await
            .unwrap();
        assert_eq!(
            failed.len(),
            1,
            "{}: the failed message stays visible",
            db.backend()
        );

        // Retried by hand, it is due again at once with a fresh maximum age.
        assert!(outbox.retry(&id).await.unwrap());
        let d = next_outcome(&mut outcomes).await;
        assert_eq!(d.attempt, attempt + 1);
        assert!(
            matches!(d.outcome, Outcome::Retried { .. }),
            "{}",
            db.backend()
        );
        shutdown.cancel();
        running.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_refusal_fails_the_message_at_once() {
    for db in TestDb::each().await {
        let (outbox, _clock) = manual_outbox(db.url()).await;
        let (sender, _calls) =
            Recorder::scripted(|_| Err(SendError::Permanent("no such mailbox".into())));
        let worker =
            Worker::new(&outbox, woken_only()).channel("email", sender, ChannelOptions::default());
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());
        let mut tx = outbox.db().begin().await.unwrap();
        let id = outbox
            .enqueue(&mut tx, &NewMessage::new("email", json!({})))
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();
        let d = next_outcome(&mut outcomes).await;
        assert_eq!(d.outcome, Outcome::Failed, "{}", db.backend());
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!(m.state, MessageState::Failed);
        assert_eq!(m.attempts, 1);
        assert_eq!(m.last_error.as_deref(), Some("no such mailbox"));
        shutdown.cancel();
        running.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_worker_died_mid_send_is_delivered_by_another_once_the_lease_expires() {
    for db in TestDb::each().await {
        let (outbox, clock) = manual_outbox(db.url()).await;
        let opts = ChannelOptions {
            send_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            ..ChannelOptions::default()
        };
        let (hanging, called) = Hanging::new();
        let dying = Worker::new(&outbox, woken_only()).channel("email", hanging, opts.clone());
        let dying_owner = dying.owner().to_string();
        let dying = dying.spawn(CancellationToken::new());

        let mut tx = outbox.db().begin().await.unwrap();
        let id = outbox
            .enqueue(
                &mut tx,
                &NewMessage::new("email", json!({"to": "a@example.com"})),
            )
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();
        let first = called.await.unwrap();
        assert_eq!(first.attempt, 1);
        // Killed in the middle of the send: nothing is recorded.
        dying.abort();
        let _ = dying.await;
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!(m.state, MessageState::Pending, "{}", db.backend());
        assert_eq!(m.lease_owner.as_deref(), Some(dying_owner.as_str()));

        let (sender, mut calls) = Recorder::accepting();
        let worker = Worker::new(&outbox, woken_only()).channel("email", sender, opts);
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());
        // Once the lease has run out, the other worker takes the message.
        clock.advance(Duration::from_secs(61));
        outbox.wake();
        let d = next_outcome(&mut outcomes).await;
        assert_eq!((d.id.as_str(), d.outcome), (id.as_str(), Outcome::Sent));
        assert_eq!(d.attempt, 2, "{}: the lost attempt counts", db.backend());
        assert_eq!(next_call(&mut calls).await.payload, first.payload);
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!(m.state, MessageState::Sent, "{}", db.backend());
        shutdown.cancel();
        running.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_has_not_expired_keeps_the_message_from_other_workers() {
    for db in TestDb::each().await {
        let (outbox, clock) = manual_outbox(db.url()).await;
        let opts = ChannelOptions {
            send_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            ..ChannelOptions::default()
        };
        // One send at a time: the hanging one keeps it from taking more.
        let (hanging, called) = Hanging::new();
        let holder = Worker::new(&outbox, woken_only())
            .channel(
                "email",
                hanging,
                ChannelOptions {
                    concurrency: 1,
                    ..opts.clone()
                },
            )
            .spawn(CancellationToken::new());
        let mut tx = outbox.db().begin().await.unwrap();
        let id = outbox
            .enqueue(&mut tx, &NewMessage::new("email", json!({})))
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();
        called.await.unwrap();

        // Another worker runs through a claim before the lease ends; the
        // marker message it does send proves its claim ran.
        let (sender, mut calls) = Recorder::accepting();
        let other = Worker::new(&outbox, woken_only()).channel("email", sender, opts);
        let shutdown = CancellationToken::new();
        let running = other.spawn(shutdown.clone());
        clock.advance(Duration::from_secs(59));
        let mut tx = outbox.db().begin().await.unwrap();
        let marker = outbox
            .enqueue(&mut tx, &NewMessage::new("email", json!({"marker": true})))
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();
        assert_eq!(next_call(&mut calls).await.id, marker, "{}", db.backend());
        let m = outbox.get(&id).await.unwrap().unwrap();
        assert_eq!(
            (m.state, m.attempts),
            (MessageState::Pending, 1),
            "{}",
            db.backend()
        );
        holder.abort();
        shutdown.cancel();
        running.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_database_deliver_each_message_once() {
    for db in TestDb::each().await {
        // Two instances: each its own pools, outbox and worker.
        let a = outbox(db.url()).await;
        let b = outbox(db.url()).await;
        let opts = WorkerOptions {
            poll_interval: Duration::from_millis(20),
        };
        let (sender_a, mut calls_a) = Recorder::accepting();
        let (sender_b, mut calls_b) = Recorder::accepting();
        let channel = ChannelOptions {
            concurrency: 3,
            ..ChannelOptions::default()
        };
        let wa = Worker::new(&a, opts.clone()).channel("email", sender_a, channel.clone());
        let wb = Worker::new(&b, opts).channel("email", sender_b, channel);
        let (mut oa, mut ob) = (wa.outcomes(), wb.outcomes());
        let shutdown = CancellationToken::new();
        let (ra, rb) = (wa.spawn(shutdown.clone()), wb.spawn(shutdown.clone()));

        let mut ids = HashSet::new();
        for batch in 0..10 {
            let mut tx = a.db().begin().await.unwrap();
            for n in 0..6 {
                let message = NewMessage::new("email", json!({ "n": batch * 6 + n }));
                ids.insert(a.enqueue(&mut tx, &message).await.unwrap());
            }
            a.commit(tx).await.unwrap();
        }
        let mut sent = HashSet::new();
        while sent.len() < ids.len() {
            let d = tokio::select! {
                d = next_outcome(&mut oa) => d,
                d = next_outcome(&mut ob) => d,
            };
            assert_eq!(d.outcome, Outcome::Sent);
            assert!(
                sent.insert(d.id),
                "{}: a message was sent twice",
                db.backend()
            );
        }
        shutdown.cancel();
        ra.await.unwrap();
        rb.await.unwrap();
        let mut called = Vec::new();
        for calls in [&mut calls_a, &mut calls_b] {
            while let Ok(m) = calls.try_recv() {
                called.push(m.id);
            }
        }
        assert_eq!(
            called.len(),
            ids.len(),
            "{}: one send per message",
            db.backend()
        );
        assert_eq!(called.into_iter().collect::<HashSet<_>>(), ids);
        let pending = b
            .list(Some(MessageState::Pending), None, 100)
            .await
            .unwrap();
        assert!(pending.is_empty(), "{}", db.backend());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_with_the_same_key_are_delivered_in_order_even_when_the_first_is_retried() {
    for db in TestDb::each().await {
        let (outbox, clock) = manual_outbox(db.url()).await;
        // The first attempt at `a` fails; everything else goes through.
        let (sender, mut calls) = Recorder::scripted(|m| {
            if m.payload == json!("a") && m.attempt == 1 {
                Err(SendError::Retry("busy".into()))
            } else {
                Ok(())
            }
        });
        let worker = Worker::new(&outbox, woken_only()).channel(
            "webhook:tasks",
            sender,
            ChannelOptions {
                concurrency: 8,
                ..ChannelOptions::default()
            },
        );
        let mut outcomes = worker.outcomes();
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());

        let mut tx = outbox.db().begin().await.unwrap();
        let mut ids = std::collections::HashMap::new();
        for (key, payload) in [("1", "a"), ("2", "x"), ("1", "b"), ("2", "y"), ("1", "c")] {
            let m = NewMessage::new("webhook:tasks", json!(payload)).ordered_by(key);
            ids.insert(payload, outbox.enqueue(&mut tx, &m).await.unwrap());
        }
        outbox.commit(tx).await.unwrap();

        // Row 2's changes go through while row 1's first waits for its retry.
        let mut seen = HashSet::new();
        while !(seen.contains("x") && seen.contains("y") && seen.contains("a")) {
            let d = next_outcome(&mut outcomes).await;
            let payload = ids.iter().find(|(_, id)| **id == d.id).unwrap().0;
            seen.insert(*payload);
        }
        for later in ["b", "c"] {
            let m = outbox.get(&ids[later]).await.unwrap().unwrap();
            assert_eq!(
                (m.state, m.attempts),
                (MessageState::Pending, 0),
                "{}: {later} waits behind a",
                db.backend()
            );
        }
        clock.advance(Duration::from_secs(3600));
        outbox.wake();
        for _ in 0..3 {
            assert_eq!(next_outcome(&mut outcomes).await.outcome, Outcome::Sent);
        }
        shutdown.cancel();
        running.await.unwrap();
        let mut order: Vec<(String, u32)> = Vec::new();
        while let Ok(m) = calls.try_recv() {
            if m.key.as_deref() == Some("1") {
                order.push((m.payload.as_str().unwrap().to_string(), m.attempt));
            }
        }
        let expected = [("a", 1), ("a", 2), ("b", 1), ("c", 1)].map(|(p, n)| (p.to_string(), n));
        assert_eq!(order, expected, "{}", db.backend());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_channel_does_not_hold_up_another() {
    for db in TestDb::each().await {
        let (outbox, _clock) = manual_outbox(db.url()).await;
        let (hanging, called) = Hanging::new();
        let (sender, mut calls) = Recorder::accepting();
        let worker = Worker::new(&outbox, woken_only())
            .channel(
                "webhook:slow",
                hanging,
                ChannelOptions {
                    concurrency: 1,
                    ..ChannelOptions::default()
                },
            )
            .channel("email", sender, ChannelOptions::default());
        let shutdown = CancellationToken::new();
        let running = worker.spawn(shutdown.clone());
        let mut tx = outbox.db().begin().await.unwrap();
        for n in 0..3 {
            let m = NewMessage::new("webhook:slow", json!(n));
            outbox.enqueue(&mut tx, &m).await.unwrap();
        }
        let mail = outbox
            .enqueue(&mut tx, &NewMessage::new("email", json!("hello")))
            .await
            .unwrap();
        outbox.commit(tx).await.unwrap();
        called.await.unwrap();
        assert_eq!(next_call(&mut calls).await.id, mail, "{}", db.backend());
        // The hanging send keeps its channel's loop waiting: abort it.
        running.abort();
    }
}
