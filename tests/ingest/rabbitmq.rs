//! A RabbitMQ queue with a dead-letter exchange, as a producer would declare it: its events
//! are delivered, a poison message is rejected to the dead-letter queue, and a message
//! published again under the same `message-id` is stored once.

use lapin::options::{
    BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use super::{Ingesting, WAIT, event, eventually, poison, receiver, support, unique};

/// The broker's URL as sluice is given it (without the queue).
pub(super) const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A channel to the test broker, or None (a loud skip) when it is not running and services
/// are not required.
pub(super) async fn broker() -> Option<(Connection, Channel)> {
    match Connection::connect(BROKER, ConnectionProperties::default()).await {
        Ok(conn) => {
            let channel = conn.create_channel().await.unwrap();
            Some((conn, channel))
        }
        Err(e) => {
            assert!(
                !support::services::services_required(),
                "RabbitMQ is not running at 127.0.0.1:5672: {e}"
            );
            eprintln!("SKIPPED: RabbitMQ is not running: {e}");
            None
        }
    }
}

/// A durable queue whose rejected messages go, through a dead-letter exchange of its own, to
/// a second queue: (the queue, the dead-letter queue).
pub(super) async fn queue_with_dead_letters(channel: &Channel) -> (String, String) {
    let queue = unique("sluice-ingest-");
    let (exchange, dead) = (format!("{queue}.dlx"), format!("{queue}.dead"));
    channel
        .exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for (name, args) in [
        (&dead, FieldTable::default()),
        (&queue, {
            let mut args = FieldTable::default();
            args.insert(
                "x-dead-letter-exchange".into(),
                AMQPValue::LongString(exchange.as_str().into()),
            );
            args
        }),
    ] {
        channel
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                args,
            )
            .await
            .unwrap();
    }
    channel
        .queue_bind(
            dead.as_str().into(),
            exchange.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    (queue, dead)
}

/// Publish `body` to `queue` (persistent, publisher-confirmed), with a `message-id`.
pub(super) async fn publish(channel: &Channel, queue: &str, body: &[u8], message_id: &str) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_message_id(message_id.into()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

/// How many messages `queue` holds ready.
async fn depth(channel: &Channel, queue: &str) -> u32 {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_goes_to_the_dead_letter_queue_and_the_good_ones_are_delivered_once() {
    const GOOD: usize = 30;
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let (queue, dead) = queue_with_dead_letters(&channel).await;
    let s = Ingesting::start(&[format!("{BROKER}?queue={queue}&prefetch=8")]).await;
    let poison = poison(&s.tenant);
    for i in 0..GOOD {
        publish(&channel, &queue, &event(&s.tenant, i), &format!("m{i}")).await;
        if let Some(bad) = poison.get(i / 10).filter(|_| i % 10 == 5) {
            publish(&channel, &queue, bad, &format!("bad{i}")).await;
        }
    }
    assert!(
        s.delivered(GOOD).await,
        "the good events were not all delivered"
    );
    assert_eq!(s.verified(), (0..GOOD as u64).collect());
    assert!(
        eventually(WAIT, || async { depth(&channel, &dead).await == 3 }).await,
        "the three poison messages are not in the dead-letter queue: {}",
        depth(&channel, &dead).await
    );
    let source = format!("rabbitmq:{queue}");
    assert_eq!(s.counted(&source, "refused").await, 3);
    assert_eq!(s.counted(&source, "stored").await, GOOD as u64);

    // A producer's retry (or a redelivery) of a message: the same message-id, stored once.
    publish(&channel, &queue, &event(&s.tenant, 0), "m0").await;
    assert!(
        eventually(WAIT, || async {
            s.counted(&source, "duplicate").await == 1
        })
        .await,
        "the repeat was not taken as a duplicate"
    );
    assert_eq!(s.stored().await, GOOD);
    assert_eq!(depth(&channel, &queue).await, 0, "everything acknowledged");
    s.sluice.stop().await;
}

/// Records the `traceparent` of every request a receiver answers.
#[derive(Default)]
struct TraceParents(std::sync::Mutex<Vec<Option<String>>>);

impl receiver::Observer for TraceParents {
    fn request(&self, headers: &axum::http::HeaderMap, _body: &[u8]) {
        let parent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.0.lock().unwrap().push(parent);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_traceparent_header_puts_its_deliveries_in_the_producers_trace() {
    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let Some((_conn, channel)) = broker().await else {
        return;
    };
    let (queue, _) = queue_with_dead_letters(&channel).await;
    let s = support::Sluice::start(sluice::config::RawSettings {
        ingest_from: vec![format!("{BROKER}?queue={queue}")],
        ..support::test_settings()
    })
    .await;
    let (tenant, token) = s.tenant("shop").await;
    let seen = std::sync::Arc::new(TraceParents::default());
    let rx = receiver::start_observed(receiver::Behavior::Fast, seen.clone())
        .await
        .unwrap();
    s.endpoint(
        &token,
        &rx.url(),
        serde_json::json!({ "trace_context": true }),
    )
    .await;
    let mut headers = FieldTable::default();
    headers.insert(
        "traceparent".into(),
        AMQPValue::LongString(format!("00-{TRACE_ID}-00f067aa0ba902b7-01").as_str().into()),
    );
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            &event(&tenant, 1),
            BasicProperties::default().with_headers(headers),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        eventually(WAIT, || async { rx.record.requests() >= 1 }).await,
        "not delivered"
    );
    let parents = seen.0.lock().unwrap().clone();
    let parent = parents[0].clone().expect("a traceparent sent on");
    assert!(
        parent.starts_with(&format!("00-{TRACE_ID}-")),
        "the producer's trace: {parent}"
    );
    s.stop().await;
}
