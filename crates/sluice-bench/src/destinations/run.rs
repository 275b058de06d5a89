//! One destination kind on a fresh sluice: its consumer, one endpoint delivering to it, the
//! standard burst, the attempt's service time from `/metrics`.

use std::sync::Arc;

use serde_json::json;

use super::consumers;
use super::{Kind, Row};
use crate::BenchArgs;
use crate::harness::{Sluice, Tuning};
use crate::receiver::{self, Mode};
use crate::scale::{BurstPlan, burst};
use crate::timeline::Timeline;

/// The attempt's service time, every kind's (`webhook_service_seconds`).
const SERVICE: &str = "webhook_service_seconds";

/// One kind: a fresh sluice, the consumer (or receiver), the endpoint, the burst.
pub(super) async fn one(
    args: &BenchArgs,
    kind: Kind,
    messages: u64,
    producers: usize,
) -> anyhow::Result<Row> {
    let timeline = Arc::new(Timeline::new(&["deliveries"]));
    let sluice = Sluice::start(args, &Tuning::default()).await?;
    let token = sluice.tenant("destinations").await?;
    // The receiver is started for every kind, so each run carries the same tasks.
    let rx = receiver::start(Mode::Fast, timeline.clone(), 0).await?;
    let consumer = match kind {
        Kind::Http => None,
        Kind::RabbitMq => Some(consumers::rabbitmq(timeline.clone(), 0).await?),
        Kind::Nats => Some(consumers::nats(timeline.clone()).await?),
        Kind::Redis => Some(consumers::redis(timeline.clone()).await?),
        Kind::Sqs | Kind::Sns | Kind::EventBridge => {
            Some(super::cloud::consumer(kind.key(), timeline.clone()).await?)
        }
        Kind::PubSub => Some(super::cloud::pubsub(timeline.clone()).await?),
    };
    let destination = match &consumer {
        None => json!({ "type": "http", "url": rx.url() }),
        Some(c) => c.destination.clone(),
    };
    sluice
        .endpoint_with(
            &token,
            json!({ "destination": destination, "event_types": ["e.0"] }),
        )
        .await?;

    let before = sluice.scrape().await?;
    let measured = burst(
        args,
        &sluice,
        BurstPlan {
            token,
            types: 1,
            fan_out: 1,
            messages,
            producers,
            timeline,
        },
    )
    .await;
    let after = sluice.scrape().await;
    sluice.stop().await;
    drop(rx);
    if let Some(c) = consumer {
        c.finish().await;
    }
    let service = after?
        .histogram(SERVICE)
        .zip(before.histogram(SERVICE))
        .map(|(a, b)| a.delta(&b));
    Ok(Row {
        kind,
        burst: measured?,
        service_p50_s: service.as_ref().and_then(|h| h.quantile(0.5)),
        service_p99_s: service.as_ref().and_then(|h| h.quantile(0.99)),
    })
}
