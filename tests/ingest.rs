//! Ingest from a queue (`--ingest-from`) against the real brokers on this machine (RabbitMQ at
//! 127.0.0.1:5672, guest/guest; NATS with JetStream at 127.0.0.1:4222; Redis at 127.0.0.1:6379),
//! each test on a queue, stream or consumer group of its own: events published to the broker
//! are delivered, signed, to a loopback receiver; a poison message among good ones goes to the
//! broker's dead-letter place while the good ones are delivered; a redelivery stores nothing
//! twice; a sluice killed with SIGKILL mid-stream loses nothing; a store that is down keeps
//! events unacknowledged, never refused; a broker that is not there yet, or goes away, is
//! waited for. No broker is mocked.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use sluice::signing::{self, Secret};
use sluice_testkit as support;
use support::receiver::{self, Behavior, Receiver};
use support::{ADMIN, Sluice, eventually, test_settings};

#[path = "ingest/crash.rs"]
mod crash;
#[path = "ingest/nats.rs"]
mod nats;
#[path = "ingest/rabbitmq.rs"]
mod rabbitmq;
#[path = "ingest/reconnect.rs"]
mod reconnect;
#[path = "ingest/redis.rs"]
mod redis_streams;
#[path = "ingest/store_down.rs"]
mod store_down;

/// Long enough for a delivery on a busy 2-core machine.
pub const WAIT: Duration = Duration::from_secs(60);

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", sluice::ids::new_id("t"))
}

/// The body of a good event: tenant, `order.created`, payload `{"i": i}`.
pub fn event(tenant: &str, i: usize) -> Vec<u8> {
    json!({"tenant_id": tenant, "event_type": "order.created", "payload": {"i": i}})
        .to_string()
        .into_bytes()
}

/// Bodies that are no events, each refused for its own reason: not JSON, an unknown tenant,
/// a bad event type.
pub fn poison(tenant: &str) -> Vec<Vec<u8>> {
    vec![
        b"this is not json".to_vec(),
        json!({"tenant_id": "ten_nobody", "event_type": "order.created", "payload": {}})
            .to_string()
            .into_bytes(),
        json!({"tenant_id": tenant, "event_type": "order created", "payload": {}})
            .to_string()
            .into_bytes(),
    ]
}

/// A sluice (in this process, on SQLite) ingesting from `urls`, with a tenant whose one
/// endpoint is a loopback receiver.
pub struct Ingesting {
    /// The server.
    pub sluice: Sluice,
    /// The tenant's id.
    pub tenant: String,
    token: String,
    secret: String,
    /// The receiver.
    pub rx: Receiver,
}

impl Ingesting {
    /// Start it; events published from now on are for [`Ingesting::tenant`].
    pub async fn start(urls: &[String]) -> Ingesting {
        Self::start_with(sluice::config::RawSettings {
            ingest_from: urls.to_vec(),
            ..test_settings()
        })
        .await
    }

    /// [`Ingesting::start`] with these settings (which name the sources).
    pub async fn start_with(raw: sluice::config::RawSettings) -> Ingesting {
        let rx = receiver::start(Behavior::Fast, true).await.unwrap();
        let sluice = Sluice::start(raw).await;
        let (tenant, token) = sluice.tenant("shop").await;
        let (_, secret) = sluice.endpoint(&token, &rx.url(), json!({})).await;
        Ingesting {
            sluice,
            tenant,
            token,
            secret,
            rx,
        }
    }

    /// Wait until `n` distinct messages have arrived; whether they did.
    pub async fn delivered(&self, n: usize) -> bool {
        eventually(WAIT, || async { self.rx.record.distinct_ids().len() >= n }).await
    }

    /// The `i` of every payload received, each checked against its signature.
    pub fn verified(&self) -> BTreeSet<u64> {
        let secret = Secret::parse(&self.secret).unwrap();
        self.rx
            .record
            .received()
            .iter()
            .map(|got| {
                let ts: i64 = got.timestamp.parse().unwrap();
                assert!(
                    signing::verify(&secret, &got.id, ts, &got.body, &got.signature),
                    "a delivery's signature does not verify"
                );
                let body: Value = serde_json::from_slice(&got.body).unwrap();
                body["i"].as_u64().expect("payload {i}")
            })
            .collect()
    }

    /// How many messages the tenant's log holds.
    pub async fn stored(&self) -> usize {
        let (status, page) = self.sluice.get(&self.token, "/v1/messages?limit=250").await;
        assert_eq!(status, 200, "{page}");
        page["data"].as_array().expect("data").len()
    }

    /// `sluice_ingest_messages_total{source, outcome}`.
    pub async fn counted(&self, source: &str, outcome: &str) -> u64 {
        metric(&self.sluice, source, outcome).await
    }
}

/// Every `sluice_ingest_messages_total` line of `sluice`'s metrics, for a failure's message.
pub async fn ingest_metrics(sluice: &Sluice) -> String {
    metrics_text(sluice)
        .await
        .lines()
        .filter(|l| l.starts_with("sluice_ingest"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn metrics_text(sluice: &Sluice) -> String {
    sluice
        .http
        .get(format!("{}/metrics", sluice.base))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `sluice_ingest_messages_total{source, outcome}` of `sluice`, 0 when absent.
pub async fn metric(sluice: &Sluice, source: &str, outcome: &str) -> u64 {
    let text = metrics_text(sluice).await;
    let series =
        format!("sluice_ingest_messages_total{{source=\"{source}\",outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}
