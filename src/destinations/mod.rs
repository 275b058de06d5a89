//! Broker destinations (RabbitMQ, NATS JetStream, Redis Streams) and the cloud services (SQS,
//! SNS, EventBridge, [`aws`]; Google Cloud Pub/Sub, [`pubsub`]): one signed publish per attempt, delivered only when the broker
//! or service itself acknowledges it, under the same deadline, lane and settle path as an HTTP
//! attempt.
//!
//! The attempt's result is the HTTP attempt's [`Report`], so admission, the governor, the
//! breakers, retries and the evidence read a broker exactly as they read a receiver: the
//! broker's acknowledgement is a `200` (its body says who confirmed), a failure is one of the
//! broker kinds of [`ErrorKind`] (`unroutable`, `broker_auth`, `broker_not_found`,
//! `broker_blocked`, `too_large`) or the connection kinds HTTP shares (`connection_refused`,
//! `timeout_connect`, `timeout_total`).
//!
//! Connections are shared per broker address, credentials and TLS setting ([`pool`]), made
//! lazily, bounded in number, and made again after a failure; each broker has its own slot, so
//! a broker that is slow to connect holds only the attempts bound for it, each to its own
//! deadline. `amqps://`, NATS `tls://` and `rediss://` connect with TLS ([`tls`]), trusting
//! what the endpoint's HTTP attempts would trust.

mod addresses;
mod aws;
mod nats;
mod pool;
mod pubsub;
mod rabbitmq;
mod redis;
mod tls;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use tokio::time::Instant;

use crate::delivery::oauth2::Grant;
use crate::delivery::{Clients, ErrorKind, Failure, Phases, Report, Response, Target};
use crate::egress::EgressPolicy;
use crate::model::{Destination, DestinationCredentials, broker_default_port};
use crate::signing;

/// Settings of broker connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerSettings {
    /// Most broker connections held open at once (`--broker-max-connections`, 1–10000); the
    /// least recently used is closed to make room.
    pub max_connections: usize,
}

impl Default for BrokerSettings {
    fn default() -> Self {
        Self {
            max_connections: 64,
        }
    }
}

/// What a broker message carries beside its body: the Standard Webhooks headers over the same
/// bytes, the event type and the endpoint's own headers.
#[derive(Debug, Clone)]
pub struct Signed<'a> {
    /// `webhook-id`: the message id.
    pub message_id: &'a str,
    /// `webhook-timestamp`, seconds.
    pub timestamp_s: i64,
    /// `webhook-signature`.
    pub signature: String,
    /// The event type (`webhook-event-type`).
    pub event_type: &'a str,
    /// The body, exactly the bytes signed.
    pub payload: &'a str,
    /// W3C `traceparent` and `tracestate`, for an endpoint that asked for trace context.
    pub trace: Option<&'a crate::delivery::TraceHeaders>,
}

impl Signed<'_> {
    /// The trace context headers as text, `traceparent` first (none unless asked for).
    pub fn trace_headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let t = self.trace;
        let parent = t.and_then(|t| t.traceparent.to_str().ok());
        let state = t.and_then(|t| t.tracestate.as_ref()?.to_str().ok());
        [("traceparent", parent), ("tracestate", state)]
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?)))
    }
}

/// What the cloud services say, behind a generic code, when they refuse a message for its size
/// (the real services' wording, which moto's SQS and SNS share).
const SIZE_REFUSALS: [&str; 4] = [
    // SQS `InvalidParameterValue`: "One or more parameters are invalid. Reason: Message must
    // be shorter than 262144 bytes."
    "Message must be shorter than",
    // SNS `InvalidParameter`: "Invalid parameter: Message too long".
    "Message too long",
    // EventBridge `ValidationException`: "Total size of the entries in the request is over the
    // limit."
    "Total size of the entries in the request is over the limit",
    // Pub/Sub `INVALID_ARGUMENT`: "Request payload size exceeds the limit: 10485760 bytes."
    "Request payload size exceeds the limit",
];

/// Whether a cloud service's refusal of a message as invalid is about its size, so the
/// attempt is `too_large` (as an HTTP 413 is) rather than `invalid`. SQS, SNS, EventBridge and
/// Pub/Sub say so only in their text, behind a code they use for any bad parameter: this is
/// the one place sluice reads a service's error text, and only for these phrases, and only
/// when the code already made the refusal `invalid`.
fn refused_for_size(text: &str) -> bool {
    SIZE_REFUSALS.iter().any(|phrase| text.contains(phrase))
}

/// The grant `destination`'s OAuth2 tokens are fetched by, if it has one: a Pub/Sub
/// destination's service account (when `credentials` hold its key).
pub fn grant(
    destination: &Destination,
    credentials: Option<&DestinationCredentials>,
) -> Option<Grant> {
    match destination {
        Destination::Pubsub { .. } => credentials
            .and_then(|c| c.service_account_key.as_deref())
            .map(pubsub::grant),
        _ => None,
    }
}

/// The broker clients of one dispatcher.
pub struct Brokers {
    policy: Arc<EgressPolicy>,
    addresses: addresses::Addresses,
    roots: Arc<RootCertStore>,
    rabbitmq: rabbitmq::Publisher,
    nats: nats::Publisher,
    redis: redis::Publisher,
    aws: aws::Publisher,
}

impl Brokers {
    /// Broker clients behind `policy`, holding at most `settings.max_connections` of each kind,
    /// trusting the system's roots and `extra_roots` (the operator's CAs) over TLS.
    pub fn new(
        policy: Arc<EgressPolicy>,
        settings: BrokerSettings,
        extra_roots: &[CertificateDer<'static>],
    ) -> Self {
        crate::delivery::install_tls_provider();
        Self {
            policy,
            addresses: addresses::Addresses::default(),
            roots: crate::delivery::tls::base_roots(extra_roots),
            rabbitmq: rabbitmq::Publisher::new(settings.max_connections),
            nats: nats::Publisher::new(settings.max_connections),
            redis: redis::Publisher::new(settings.max_connections),
            aws: aws::Publisher::default(),
        }
    }

    /// Publish `payload` as message `message_id` to `target`'s broker, all of it (the egress
    /// check, the connection, the publish and its acknowledgement) by `deadline`. A cloud
    /// destination's API call goes through `clients`, HTTP delivery's own.
    // What one attempt publishes and how long it may take, each its own plain argument.
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt(
        &self,
        clients: &Clients,
        target: &Target,
        message_id: &str,
        event_type: &str,
        payload: &str,
        trace: Option<&crate::delivery::TraceHeaders>,
        deadline: Instant,
    ) -> Report {
        let started_at_ms = crate::clock::now_ms();
        let started = Instant::now();
        let mut phases = Phases::default();
        let clock = Instant::now();
        let timestamp_s = started_at_ms / 1000;
        let signed = Signed {
            message_id,
            timestamp_s,
            signature: signing::signature_header(
                &target.secrets,
                message_id,
                timestamp_s,
                payload.as_bytes(),
            ),
            event_type,
            payload,
            trace,
        };
        phases.sign = clock.elapsed();
        let sent = self.publish(clients, target, &signed, deadline, &mut phases);
        let result = tokio::time::timeout_at(deadline, sent)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    kind: ErrorKind::TotalTimeout,
                    message: format!(
                        "the broker did not acknowledge by the attempt's deadline ({} ms)",
                        started.elapsed().as_millis()
                    ),
                })
            });
        Report {
            started_at_ms,
            duration: started.elapsed(),
            result,
            phases,
        }
    }

    async fn publish(
        &self,
        clients: &Clients,
        target: &Target,
        signed: &Signed<'_>,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        if target.destination.is_aws() {
            return self
                .aws
                .publish(clients, target, signed, deadline, phases)
                .await;
        }
        if let Destination::Pubsub {
            project_id, topic, ..
        } = &target.destination
        {
            let to = pubsub::Topic { project_id, topic };
            return pubsub::publish(clients, target, &to, signed, deadline, phases).await;
        }
        let address = self.checked_address(&target.url).await?;
        let trust = tls::Trust::of(&target.url, &self.roots, target.tls.as_ref());
        match &target.destination {
            Destination::Rabbitmq {
                exchange,
                routing_key,
                ..
            } => {
                let to = rabbitmq::Route {
                    url: &target.url,
                    address,
                    credentials: target.destination_credentials.as_ref(),
                    endpoint_id: &target.endpoint_id,
                    exchange,
                    routing_key,
                    headers: &target.headers,
                    connect_timeout: target.timeouts.connect,
                    tls: trust,
                };
                self.rabbitmq.publish(&to, signed, deadline, phases).await
            }
            Destination::Nats { subject, .. } => {
                let to = nats::Route {
                    address,
                    credentials: target.destination_credentials.as_ref(),
                    subject,
                    headers: &target.headers,
                    connect_timeout: target.timeouts.connect,
                    tls: trust,
                };
                self.nats.publish(&to, signed, deadline, phases).await
            }
            Destination::Redis {
                stream, max_len, ..
            } => {
                let to = redis::Route {
                    address,
                    db: redis_db(&target.url),
                    credentials: target.destination_credentials.as_ref(),
                    stream,
                    max_len: *max_len,
                    headers: &target.headers,
                    connect_timeout: target.timeouts.connect,
                    tls: trust,
                };
                self.redis.publish(&to, signed, deadline, phases).await
            }
            Destination::Http { .. }
            | Destination::Sqs { .. }
            | Destination::Sns { .. }
            | Destination::Eventbridge { .. }
            | Destination::Pubsub { .. } => Err(Failure {
                kind: ErrorKind::Other,
                message: format!(
                    "a {} destination is not a broker's",
                    target.destination.kind()
                ),
            }),
        }
    }

    /// The address to connect to: the URL's IP literal, or the first address of its name that
    /// the egress guard allows (so the connection goes exactly where the check looked),
    /// remembered for [`addresses::REMEMBERED`] rather than looked up on every attempt.
    async fn checked_address(&self, url: &url::Url) -> Result<SocketAddr, Failure> {
        let refused = |e: crate::egress::EgressError| Failure {
            kind: if e.is_refused() {
                ErrorKind::Refused
            } else {
                ErrorKind::Dns
            },
            message: e.to_string(),
        };
        let port = url
            .port()
            .or_else(|| broker_default_port(url.scheme()))
            .unwrap_or(5672);
        match url.host() {
            Some(url::Host::Ipv4(v4)) => {
                self.policy.check_ip(IpAddr::V4(v4)).map_err(refused)?;
                Ok(SocketAddr::new(IpAddr::V4(v4), port))
            }
            Some(url::Host::Ipv6(v6)) => {
                self.policy.check_ip(IpAddr::V6(v6)).map_err(refused)?;
                Ok(SocketAddr::new(IpAddr::V6(v6), port))
            }
            Some(url::Host::Domain(host)) => {
                if let Some(ip) = self.addresses.get(host) {
                    return Ok(SocketAddr::new(ip, port));
                }
                let addrs = self
                    .policy
                    .resolve_checked(host, port)
                    .await
                    .map_err(refused)?;
                self.addresses.remember(host, addrs[0].ip());
                Ok(addrs[0])
            }
            None => Err(Failure {
                kind: ErrorKind::Refused,
                message: "the broker URL has no host".into(),
            }),
        }
    }
}

/// The database of a `redis://host:port/db` URL (0 when it names none).
fn redis_db(url: &url::Url) -> i64 {
    url.path().trim_start_matches('/').parse().unwrap_or(0)
}

/// What a broker's acknowledgement is recorded as: a `200` whose body names the broker.
fn acknowledged(by: &str) -> Response {
    Response {
        status: 200,
        retry_after: None,
        body: format!("acknowledged by {by}").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The services' own wording of a size refusal, and of refusals with the same codes that
    /// are not about size.
    #[test]
    fn only_a_size_refusals_text_makes_it_too_large() {
        for text in [
            "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.",
            "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.",
            "Invalid parameter: Message too long",
            "An error occurred (InvalidParameter) when calling the Publish operation: Invalid \
             parameter: Message too long",
            "Total size of the entries in the request is over the limit.",
            "Request payload size exceeds the limit: 10485760 bytes.",
        ] {
            assert!(refused_for_size(text), "{text}");
        }
        for text in [
            "Value 1000 for parameter DelaySeconds is invalid. Reason: must be between 0 and 900.",
            "The queue should either have ContentBasedDeduplication enabled or \
             MessageDeduplicationId provided explicitly",
            "Invalid parameter: TopicArn",
            "1 validation error detected: Value null at 'entries.1.member.detail' failed to \
             satisfy constraint",
            "Invalid resource name given (name=projects/p/topics/-).",
            "",
        ] {
            assert!(!refused_for_size(text), "{text}");
        }
    }
}
