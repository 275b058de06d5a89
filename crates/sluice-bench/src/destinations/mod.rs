//! `destinations`: the standard burst (20,000 messages from 32 producers) to one endpoint of
//! each destination kind, from a fresh sluice and store each: a loopback HTTP receiver (the
//! yardstick), RabbitMQ (a durable queue behind the default exchange), NATS JetStream (a stream
//! of its own) and Redis Streams (a stream of its own), every one at 127.0.0.1 as `.ci/run`
//! starts them; and Amazon SQS, SNS and EventBridge against a moto server of each run's own,
//! Google Cloud Pub/Sub against Google's emulator. Per kind: deliveries/s, enqueue→delivery latency, the attempt's service time
//! (for a broker: connect, publish and its acknowledgement) and CPU, and each broker's
//! deliveries/s against HTTP's. Embedded SQLite by default; `--database-url` for PostgreSQL.
//!
//! What reaches the bench is timed by a consumer of each broker that reads the producer's
//! `sent_at_us` from the body, as the HTTP receiver does.
//!
//! # Layout
//! - [`run`](mod@run): one kind on a fresh sluice: its consumer, its endpoint, the burst;
//! - [`consumers`]: a consumer per broker, feeding the timeline;
//! - [`cloud`]: the cloud kinds' consumers, behind moto and the Pub/Sub emulator;
//! - [`verdicts`]: the target (a broker reaches 0.8× HTTP's deliveries/s), pure;
//! - [`figures`]: the report.

mod cloud;
pub(crate) mod consumers;
mod figures;
mod run;
mod verdicts;

use crate::BenchArgs;
use crate::report::Report;
use crate::scale::Burst;

/// What a destination is, in this scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Http,
    RabbitMq,
    Nats,
    Redis,
    Sqs,
    Sns,
    EventBridge,
    PubSub,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::Http,
        Kind::RabbitMq,
        Kind::Nats,
        Kind::Redis,
        Kind::Sqs,
        Kind::Sns,
        Kind::EventBridge,
        Kind::PubSub,
    ];

    /// Whether it is a cloud service (against an emulator here: moto, Google's Pub/Sub one).
    fn is_cloud(self) -> bool {
        matches!(
            self,
            Kind::Sqs | Kind::Sns | Kind::EventBridge | Kind::PubSub
        )
    }

    fn key(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::RabbitMq => "rabbitmq",
            Kind::Nats => "nats",
            Kind::Redis => "redis",
            Kind::Sqs => "sqs",
            Kind::Sns => "sns",
            Kind::EventBridge => "eventbridge",
            Kind::PubSub => "pubsub",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Http => "HTTP (loopback receiver)",
            Kind::RabbitMq => "RabbitMQ (publisher confirms)",
            Kind::Nats => "NATS JetStream (PublishAck)",
            Kind::Redis => "Redis Streams (XADD)",
            Kind::Sqs => "Amazon SQS (SendMessage, moto)",
            Kind::Sns => "Amazon SNS (Publish, moto)",
            Kind::EventBridge => "Amazon EventBridge (PutEvents, moto)",
            Kind::PubSub => "Google Cloud Pub/Sub (publish, emulator)",
        }
    }
}

/// What one kind measured.
struct Row {
    kind: Kind,
    burst: Burst,
    /// The attempt's service time (a broker's: connect, publish, acknowledgement), seconds.
    service_p50_s: Option<f64>,
    service_p99_s: Option<f64>,
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let messages = args.messages.unwrap_or(args.sized(20_000, 400)).max(1);
    let producers = args.producers.unwrap_or(32).max(1);
    let mut rows = Vec::with_capacity(Kind::ALL.len());
    for kind in Kind::ALL {
        let row = match &args.database_url {
            Some(url) => {
                let db = crate::harness::FreshDatabase::create(url).await?;
                let mut run_args = args.clone();
                run_args.database_url = Some(db.url.clone());
                let row = run::one(&run_args, kind, messages, producers).await;
                db.drop_it().await;
                row?
            }
            None => run::one(args, kind, messages, producers).await?,
        };
        if !args.json {
            eprintln!(
                "destinations: {}: {:.0} deliveries/s",
                kind.key(),
                row.burst.delivery_per_s
            );
        }
        rows.push(row);
    }
    Ok(figures::report(args, messages, producers, &rows))
}
