//! One destination kind on a fresh sluice: its consumer (or the cloud sink), one endpoint
//! delivering to it, the standard burst, the attempt's service time from `/metrics`; against an
//! emulator, its CPU over the burst and then its own ceiling.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::ceiling;
use super::cloud::{self, Emulator};
use super::consumers::{self, Consumer};
use super::{EmulatorFigures, Kind, Row, SinkCounts};
use crate::cloud_sink::CloudSink;
use crate::harness::{Sluice, Tuning};
use crate::receiver::{self, Mode};
use crate::scale::{BurstPlan, burst};
use crate::timeline::Timeline;
use crate::{BenchArgs, Cloud};

/// The attempt's service time, every kind's (`webhook_service_seconds`).
const SERVICE: &str = "webhook_service_seconds";

/// One kind: a fresh sluice, the consumer (or receiver, or sink), the endpoint, the burst.
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
    let mut sink: Option<CloudSink> = None;
    let mut emulator: Option<Emulator> = None;
    let consumer: Option<Consumer> = match (kind, kind.service(), args.cloud) {
        (Kind::Http, ..) => None,
        (Kind::RabbitMq, ..) => Some(consumers::rabbitmq(timeline.clone(), 0).await?),
        (Kind::Nats, ..) => Some(consumers::nats(timeline.clone()).await?),
        (Kind::Redis, ..) => Some(consumers::redis(timeline.clone()).await?),
        (_, _, Cloud::Sink) => {
            sink = Some(CloudSink::start(timeline.clone(), 0).await?);
            None
        }
        (Kind::PubSub, _, Cloud::Emulators) => {
            let (c, e) = cloud::pubsub(timeline.clone()).await?;
            emulator = Some(e);
            Some(c)
        }
        (_, _, Cloud::Emulators) => {
            let (c, e) = cloud::consumer(kind.key(), timeline.clone()).await?;
            emulator = Some(e);
            Some(c)
        }
    };
    let destination = match (&consumer, &sink, kind.service()) {
        (Some(c), _, _) => c.destination.clone(),
        (None, Some(s), Some(service)) => s.destination(service),
        _ => json!({ "type": "http", "url": rx.url() }),
    };
    sluice
        .endpoint_with(
            &token,
            json!({ "destination": destination, "event_types": ["e.0"] }),
        )
        .await?;

    let before = sluice.scrape().await?;
    let emulator_cpu0 = emulator.as_ref().and_then(ceiling::cpu_s);
    let started = Instant::now();
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
    let burst_s = started.elapsed().as_secs_f64();
    let burst_cpu_cores = emulator
        .as_ref()
        .and_then(ceiling::cpu_s)
        .zip(emulator_cpu0)
        .map(|(b, a)| (b - a) / burst_s);
    let after = sluice.scrape().await;
    sluice.stop().await;
    drop(rx);
    if let Some(c) = consumer {
        c.finish().await;
    }
    // With its consumer stopped, the emulator takes the same calls from another client.
    let emulator = match emulator {
        Some(e) => Some(EmulatorFigures {
            burst_cpu_cores,
            ceiling: ceiling::measure(&e, messages).await?,
        }),
        None => None,
    };
    let service = after?
        .histogram(SERVICE)
        .zip(before.histogram(SERVICE))
        .map(|(a, b)| a.delta(&b));
    Ok(Row {
        kind,
        burst: measured?,
        service_p50_s: service.as_ref().and_then(|h| h.quantile(0.5)),
        service_p99_s: service.as_ref().and_then(|h| h.quantile(0.99)),
        sink: sink.map(|s| SinkCounts {
            calls: s.calls(),
            unsigned: s.unsigned(),
            unreadable: s.unreadable(),
        }),
        emulator,
    })
}
