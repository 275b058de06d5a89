//! `destinations`: the standard burst (20,000 messages from 32 producers) to one endpoint of
//! each destination kind, from a fresh sluice and store each: a loopback HTTP receiver (the
//! yardstick), RabbitMQ (a durable queue behind the default exchange), NATS JetStream (a stream
//! of its own) and Redis Streams (a stream of its own), every one at 127.0.0.1 as `.ci/run`
//! starts them; and Amazon SQS, SNS, EventBridge and Google Cloud Pub/Sub, as `--cloud` says:
//! a stand-in for the services in this process ([`crate::cloud_sink`], the default: sluice's
//! own ceiling per kind), or emulators (a moto server of each run's own, Google's Pub/Sub
//! emulator) with each one's own ceiling beside it. Per kind: deliveries/s, enqueue→delivery
//! latency, the attempt's service time (for a broker: connect, publish and its
//! acknowledgement) and CPU, and its deliveries/s against HTTP's. Embedded SQLite by default;
//! `--database-url` for PostgreSQL.
//!
//! What reaches the bench is timed by a consumer of each broker (or the sink) that reads the
//! producer's `sent_at_us` from the body, as the HTTP receiver does.
//!
//! # Layout
//! - [`run`](mod@run): one kind on a fresh sluice: its consumer, its endpoint, the burst;
//! - [`consumers`]: a consumer per broker, feeding the timeline;
//! - [`cloud`]: the cloud kinds' consumers behind moto and the Pub/Sub emulator;
//! - [`ceiling`]: an emulator's own ceiling and CPU;
//! - [`verdicts`]: the targets (a broker reaches 0.8× HTTP's deliveries/s, a cloud kind 0.5×),
//!   pure;
//! - [`figures`]: the report.

mod ceiling;
mod cloud;
pub(crate) mod consumers;
mod figures;
mod run;
mod verdicts;

use crate::cloud_sink::Service;
use crate::report::Report;
use crate::scale::Burst;
use crate::{BenchArgs, Cloud};

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

    /// The cloud service it is, if it is one.
    fn service(self) -> Option<Service> {
        match self {
            Kind::Sqs => Some(Service::Sqs),
            Kind::Sns => Some(Service::Sns),
            Kind::EventBridge => Some(Service::EventBridge),
            Kind::PubSub => Some(Service::PubSub),
            Kind::Http | Kind::RabbitMq | Kind::Nats | Kind::Redis => None,
        }
    }

    /// Whether it is a cloud service (see `--cloud`).
    fn is_cloud(self) -> bool {
        self.service().is_some()
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
            Kind::Sqs => "Amazon SQS (SendMessage)",
            Kind::Sns => "Amazon SNS (Publish)",
            Kind::EventBridge => "Amazon EventBridge (PutEvents)",
            Kind::PubSub => "Google Cloud Pub/Sub (publish)",
        }
    }

    /// Its label with where its calls went: the sink or the emulator.
    fn label_in(self, cloud: Cloud) -> String {
        if !self.is_cloud() {
            return self.label().to_owned();
        }
        let to = match (self, cloud) {
            (_, Cloud::Sink) => "the sink",
            (Kind::PubSub, Cloud::Emulators) => "Google's emulator",
            (_, Cloud::Emulators) => "moto",
        };
        format!("{} to {to}", self.label())
    }
}

/// What one kind measured.
struct Row {
    kind: Kind,
    burst: Burst,
    /// The attempt's service time (a broker's: connect, publish, acknowledgement), seconds.
    service_p50_s: Option<f64>,
    service_p99_s: Option<f64>,
    /// A cloud kind to the sink: the calls it answered, the AWS ones without an
    /// `Authorization` header, and requests that were no publish call.
    sink: Option<SinkCounts>,
    /// A cloud kind to an emulator: its CPU over the burst and its own ceiling.
    emulator: Option<EmulatorFigures>,
}

/// What the sink counted of one kind's burst.
struct SinkCounts {
    calls: u64,
    unsigned: u64,
    unreadable: u64,
}

/// An emulator's figures beside sluice's.
struct EmulatorFigures {
    /// Its CPU over the burst, cores.
    burst_cpu_cores: Option<f64>,
    /// What it took from a client that is not sluice.
    ceiling: ceiling::Ceiling,
}

/// Messages in the burst: `--messages`, else the standard 20,000 (a smaller one against
/// emulators, which are slow).
fn messages(args: &BenchArgs) -> u64 {
    let default = match args.cloud {
        Cloud::Sink => args.sized(20_000, 400),
        Cloud::Emulators => args.sized(1_000, 100),
    };
    args.messages.unwrap_or(default).max(1)
}

/// Run and report.
pub(crate) async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    let messages = messages(args);
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
