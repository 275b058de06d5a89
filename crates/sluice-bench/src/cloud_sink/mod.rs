//! `--cloud sink`: Amazon SQS, SNS, EventBridge and Google Cloud Pub/Sub stood in for by a
//! loopback HTTP server in this process that answers each call with the service's own success
//! reply ([`wire`]), so a cloud destination's figures are sluice's and not an emulator's. Each
//! message is timed into a timeline by the producer's `sent_at_us` in its payload, as the HTTP
//! receiver times a delivery. Signatures are not verified (that would measure the sink), but an
//! AWS call without an `Authorization` header is counted: a broken signer shows as unsigned
//! calls. With a capacity ([`CloudSink::capped`]), it serves that many calls at once, each
//! taking a service time, and answers the service's throttling error to any beyond them.
//!
//! # Layout
//! - this file: the server, its counts, and the destination that delivers to it;
//! - [`wire`]: each service's call and answers, pure.

pub(crate) mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub(crate) use wire::Service;

use crate::timeline::Timeline;

/// The region, account and key the sink's AWS destinations name (never checked).
const REGION: &str = "us-east-1";
const ACCOUNT: &str = "000000000000";

/// A running sink; stops when dropped.
pub(crate) struct CloudSink {
    /// `http://127.0.0.1:PORT`: every service's endpoint URL.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    timeline: Arc<Timeline>,
    group: usize,
    /// Calls served at once before the rest are throttled (`usize::MAX`: no limit).
    capacity: AtomicUsize,
    /// How long serving one call takes when capped.
    service_time: Duration,
    /// Calls read, every service.
    calls: AtomicU64,
    /// AWS calls that came without an `Authorization` header.
    unsigned: AtomicU64,
    /// Requests that were no publish of any of the four services (answered 400).
    unreadable: AtomicU64,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl Drop for CloudSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CloudSink {
    /// A sink on 127.0.0.1 that accepts every call at once, timing each into `group` of
    /// `timeline` as it arrives.
    pub(crate) async fn start(timeline: Arc<Timeline>, group: usize) -> std::io::Result<Self> {
        Self::serve(timeline, group, usize::MAX, Duration::ZERO).await
    }

    /// A sink serving `capacity` calls at once (see [`CloudSink::set_capacity`]), each taking
    /// `service_time` and timed into `group` of `timeline` once served, throttling the rest
    /// (each counted there as throttled).
    pub(crate) async fn capped(
        timeline: Arc<Timeline>,
        group: usize,
        capacity: usize,
        service_time: Duration,
    ) -> std::io::Result<Self> {
        Self::serve(timeline, group, capacity, service_time).await
    }

    async fn serve(
        timeline: Arc<Timeline>,
        group: usize,
        capacity: usize,
        service_time: Duration,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            timeline,
            group,
            capacity: AtomicUsize::new(capacity),
            service_time,
            calls: AtomicU64::new(0),
            unsigned: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let app = Router::new().fallback(any(call)).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, shared, task })
    }

    /// The endpoint's `destination` delivering to `service` here: made-up queue, topic, bus
    /// and key (AWS), no service account (Pub/Sub, as for an emulator).
    pub(crate) fn destination(&self, service: Service) -> Value {
        let url = &self.url;
        let aws = |mut d: Value| {
            d["region"] = json!(REGION);
            d["endpoint_url"] = json!(url);
            d["credentials"] = json!({
                "access_key_id": "AKIASLUICEBENCH00000",
                "secret_access_key": "sluice-bench-secret-access-key",
            });
            d
        };
        match service {
            Service::Sqs => aws(json!({
                "type": "sqs", "queue_url": format!("{url}/{ACCOUNT}/bench"),
            })),
            Service::Sns => aws(json!({
                "type": "sns", "topic_arn": format!("arn:aws:sns:{REGION}:{ACCOUNT}:bench"),
            })),
            Service::EventBridge => {
                aws(json!({ "type": "eventbridge", "event_bus_name": "bench" }))
            }
            Service::PubSub => json!({
                "type": "pubsub", "project_id": "sluice-bench", "topic": "bench",
                "endpoint_url": url,
            }),
        }
    }

    /// Change how many calls a capped sink serves at once.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        self.shared.capacity.store(capacity, Ordering::Relaxed);
    }

    /// Most calls it had in flight at once.
    pub(crate) fn peak_concurrency(&self) -> usize {
        self.shared.peak.load(Ordering::Relaxed)
    }

    /// Publish calls read so far, every service.
    pub(crate) fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// AWS calls that carried no `Authorization` header.
    pub(crate) fn unsigned(&self) -> u64 {
        self.shared.unsigned.load(Ordering::Relaxed)
    }

    /// Requests that were no publish call it knows.
    pub(crate) fn unreadable(&self) -> u64 {
        self.shared.unreadable.load(Ordering::Relaxed)
    }
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn call(State(s): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok());
    let Some(read) = wire::read(target, uri.path(), &body) else {
        s.unreadable.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::BAD_REQUEST, "not a publish call the sink knows").into_response();
    };
    let n = s.calls.fetch_add(1, Ordering::Relaxed) + 1;
    if read.service.is_aws() && !headers.contains_key(header::AUTHORIZATION) {
        s.unsigned.fetch_add(1, Ordering::Relaxed);
    }
    let now = s.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    let _guard = InFlight(&s.in_flight);
    s.peak.fetch_max(now, Ordering::Relaxed);
    let capacity = s.capacity.load(Ordering::Relaxed);
    let answer = if capacity == usize::MAX {
        s.timeline.delivered(s.group, read.sent_at_us);
        wire::accepted(read.service, n)
    } else if now > capacity {
        s.timeline.throttled(s.group);
        wire::throttled(read.service)
    } else {
        tokio::time::sleep(s.service_time).await;
        s.timeline.delivered(s.group, read.sent_at_us);
        wire::accepted(read.service, n)
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, answer.content_type)],
        answer.body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    use crate::BenchArgs;
    use crate::harness::{Sluice, Tuning};

    /// What sluice recorded of its one attempt to a sink as `service`: (status, error kind).
    async fn one_attempt(service: Service, capacity: usize) -> (Option<u64>, Option<String>) {
        let args = BenchArgs::parse_from(["sluice-bench", "destinations", "--smoke"]);
        let sluice = Sluice::start(&args, &Tuning::default()).await.unwrap();
        let timeline = Arc::new(Timeline::new(&["cloud"]));
        let sink = CloudSink::capped(timeline.clone(), 0, capacity, Duration::ZERO)
            .await
            .unwrap();
        let token = sluice.tenant("cloud").await.unwrap();
        let body = json!({ "destination": sink.destination(service) });
        let id = sluice.endpoint_with(&token, body).await.unwrap();
        let sent = sluice
            .http
            .post(sluice.messages_url())
            .bearer_auth(&token)
            .json(&json!({ "event_type": "e.0", "payload": { "sent_at_us": 1, "seq": 1 } }))
            .send()
            .await
            .unwrap();
        assert!(sent.status().is_success(), "{}", sent.status());
        let mut attempts = Vec::new();
        for _ in 0..200 {
            attempts = sluice.endpoint_attempts(&token, &id).await.unwrap();
            if !attempts.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        sluice.stop().await;
        assert_eq!(sink.calls(), attempts.len() as u64);
        assert_eq!((sink.unsigned(), sink.unreadable()), (0, 0));
        let last = attempts.last().expect("an attempt");
        (
            last["status"].as_u64(),
            last["error_kind"].as_str().map(str::to_owned),
        )
    }

    const SERVICES: [Service; 4] = [
        Service::Sqs,
        Service::Sns,
        Service::EventBridge,
        Service::PubSub,
    ];

    #[tokio::test]
    async fn sluice_takes_each_services_reply_as_delivered() {
        for service in SERVICES {
            assert_eq!(
                one_attempt(service, usize::MAX).await,
                (Some(200), None),
                "{service:?}"
            );
        }
    }

    #[tokio::test]
    async fn sluice_reads_each_services_throttling_as_throttled() {
        for service in SERVICES {
            let (_, kind) = one_attempt(service, 0).await;
            assert_eq!(kind.as_deref(), Some("throttled"), "{service:?}");
        }
    }
}
