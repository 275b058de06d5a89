//! A JetStream stream read through durable consumers: its events are delivered, a poison
//! message is terminated (the server's `MSG_TERMINATED` advisory names it, and it is never
//! redelivered), and a second consumer reading the same stream again stores nothing twice.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;

use super::{Ingesting, WAIT, event, eventually, poison, support};

/// The server's URL as sluice is given it (without the stream).
pub(super) const NATS: &str = "nats://127.0.0.1:4222";

/// JetStream with a fresh stream capturing `<subject>`: (context, stream, subject), or None
/// (a loud skip).
pub(super) async fn stream() -> Option<(jetstream::Context, String, String)> {
    let client = match async_nats::connect(NATS).await {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !support::services::services_required(),
                "NATS is not running at 127.0.0.1:4222: {e}"
            );
            eprintln!("SKIPPED: NATS is not running: {e}");
            return None;
        }
    };
    let js = jetstream::new(client);
    let id = sluice::ids::new_id("s").replace('_', "");
    let name = format!("SLUICE_INGEST_{id}");
    let subject = format!("sluice.ingest.{id}");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .expect("create the test stream (JetStream enabled: nats-server -js)");
    Some((js, name, subject))
}

/// A durable consumer made as an operator would, with a short `ack_wait` so a test sees a
/// redelivery soon.
pub(super) async fn durable(js: &jetstream::Context, stream: &str, name: &str, ack_wait: Duration) {
    js.get_stream(stream)
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Publish `body` to `subject`, acknowledged by the stream.
pub(super) async fn publish(js: &jetstream::Context, subject: &str, body: Vec<u8>) {
    js.publish(subject.to_owned(), body.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_is_terminated_the_good_ones_delivered_and_a_second_reading_stores_nothing() {
    const GOOD: usize = 30;
    let Some((js, stream, subject)) = stream().await else {
        return;
    };
    let terminated = js
        .client()
        .subscribe(format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.a"
        ))
        .await
        .unwrap();
    // Two consumers of the one stream: each message is taken twice, with one identity.
    let s = Ingesting::start(&[
        format!("{NATS}?stream={stream}&consumer=a&prefetch=8"),
        format!("{NATS}?stream={stream}&consumer=b"),
    ])
    .await;
    let poison = poison(&s.tenant);
    for i in 0..GOOD {
        publish(&js, &subject, event(&s.tenant, i)).await;
        if let Some(bad) = poison.get(i / 10).filter(|_| i % 10 == 5) {
            publish(&js, &subject, bad.clone()).await;
        }
    }
    assert!(
        s.delivered(GOOD).await,
        "the good events were not all delivered"
    );
    assert_eq!(s.verified(), (0..GOOD as u64).collect());
    let advisories: Vec<_> = terminated
        .take(3)
        .take_until(tokio::time::sleep(WAIT))
        .collect()
        .await;
    assert_eq!(
        advisories.len(),
        3,
        "three messages terminated by consumer a"
    );
    for source in ["nats:{stream}/a", "nats:{stream}/b"] {
        let source = source.replace("{stream}", &stream);
        assert!(
            eventually(WAIT, || async {
                s.counted(&source, "refused").await == 3
                    && s.counted(&source, "stored").await + s.counted(&source, "duplicate").await
                        == GOOD as u64
            })
            .await,
            "{source}: every message taken once:\n{}",
            super::ingest_metrics(&s.sluice).await
        );
    }
    assert_eq!(s.stored().await, GOOD, "the second reading stored nothing");
    for name in ["a", "b"] {
        let mut c: consumer::PullConsumer = js
            .get_stream(&stream)
            .await
            .unwrap()
            .get_consumer(name)
            .await
            .unwrap();
        let info = c.info().await.unwrap();
        assert_eq!(info.num_ack_pending, 0, "{name}: everything answered");
        assert_eq!(info.num_pending, 0, "{name}: everything read");
    }
    s.sluice.stop().await;
}
