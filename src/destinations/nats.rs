//! NATS JetStream: a publish acknowledged by the stream that captures the subject
//! (`PublishAck`), with `Nats-Msg-Id` = the message id, so the stream drops a retry of a
//! message it already has; an ack marked duplicate is that earlier delivery, so it counts as
//! delivered. A subject no stream captures is `broker_not_found` (sluice creates no streams);
//! a stream at its limits, out of storage, or not answering is `broker_blocked`, the broker's
//! backpressure. `tls://` requires TLS, its certificate verified against the URL's host.

use std::net::SocketAddr;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::{ConnectErrorKind, ConnectOptions, HeaderMap};
use tokio::time::Instant;

use super::pool::Pool;
use super::tls::{self, Trust, TrustKey};
use super::{Signed, acknowledged};
use crate::delivery::{ErrorKind, Failure, Phases, Response};
use crate::model::DestinationCredentials;

/// Where one message goes.
pub(super) struct Route<'a> {
    pub address: SocketAddr,
    pub credentials: Option<&'a DestinationCredentials>,
    pub subject: &'a str,
    pub headers: &'a [(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    pub connect_timeout: Duration,
    /// `tls://`: how the connection is secured.
    pub tls: Option<Trust<'a>>,
}

/// One server's connection: its address, credentials and TLS setting.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    address: SocketAddr,
    username: Option<String>,
    password: Option<String>,
    token: Option<String>,
    tls: Option<TrustKey>,
}

/// JetStream publishing with a bounded cache of connections, each kept as its JetStream
/// context: a context runs a task of its own that collects abandoned acknowledgements, so one
/// per connection, not one per attempt.
pub(super) struct Publisher {
    pool: Pool<Key, jetstream::Context>,
}

impl Publisher {
    pub(super) fn new(max_connections: usize) -> Self {
        Self {
            pool: Pool::new(max_connections),
        }
    }

    pub(super) async fn publish(
        &self,
        to: &Route<'_>,
        signed: &Signed<'_>,
        deadline: Instant,
        phases: &mut Phases,
    ) -> Result<Response, Failure> {
        let c = to.credentials;
        let key = Key {
            address: to.address,
            username: c.and_then(|c| c.username.clone()),
            password: c.and_then(|c| c.password.clone()),
            token: c.and_then(|c| c.token.clone()),
            tls: to.tls.as_ref().map(Trust::key),
        };
        let slot = self.pool.slot(&key);
        let context = slot
            .get_within(
                "NATS",
                deadline,
                to.connect_timeout,
                phases,
                |context: &jetstream::Context| {
                    context.client().connection_state() == State::Connected
                },
                || async {
                    connect(&key, to.tls.as_ref(), to.connect_timeout)
                        .await
                        .map(jetstream::new)
                },
                Failure::clone,
            )
            .await?;
        let clock = Instant::now();
        let message = PublishMessage::build()
            .payload(signed.payload.to_owned().into())
            .headers(headers(signed, to.headers))
            .message_id(signed.message_id);
        let acked = async {
            context
                .send_publish(to.subject.to_owned(), message)
                .await?
                .await
        }
        .await;
        phases.publish = clock.elapsed();
        phases.published = true;
        match acked {
            Ok(ack) => Ok(acknowledged(&format!(
                "NATS JetStream (stream {}, sequence {}{})",
                ack.stream,
                ack.sequence,
                if ack.duplicate {
                    ", a duplicate of an earlier delivery"
                } else {
                    ""
                }
            ))),
            Err(e) => {
                let kind = match e.kind() {
                    // Nobody answered the publish: no stream captures the subject, or one does
                    // and JetStream cannot take it now. Only JetStream can tell them apart.
                    PublishErrorKind::StreamNotFound => {
                        no_responders(&context, to.subject, deadline).await
                    }
                    PublishErrorKind::TimedOut => ErrorKind::TotalTimeout,
                    PublishErrorKind::BrokenPipe => ErrorKind::ConnectionReset,
                    PublishErrorKind::MaxPayloadExceeded => ErrorKind::TooLarge,
                    // The stream is at its limits: backpressure.
                    PublishErrorKind::MaxAckPending => ErrorKind::BrokerBlocked,
                    _ => refusal(&e),
                };
                let message = match (e.kind(), kind) {
                    (PublishErrorKind::StreamNotFound, ErrorKind::BrokerBlocked) => format!(
                        "NATS JetStream did not answer the publish to subject {:?} (a stream \
                         without its leader, or a server without JetStream)",
                        to.subject
                    ),
                    _ => format!("NATS JetStream: {e} (subject {:?})", to.subject),
                };
                Err(Failure { kind, message })
            }
        }
    }
}

/// What a publish nobody answered means, asked of JetStream itself: no stream captures the
/// subject (`broker_not_found`, a setting to fix), or a stream does but did not answer, or
/// JetStream is not answering at all (a stream without its leader, a server without
/// JetStream): the broker's 503, `broker_blocked`, which the governor backs off from.
async fn no_responders(
    context: &jetstream::Context,
    subject: &str,
    deadline: Instant,
) -> ErrorKind {
    use async_nats::jetstream::context::GetStreamByNameErrorKind;
    let asked = tokio::time::timeout_at(deadline, context.stream_by_subject(subject)).await;
    match asked {
        Ok(Err(e)) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => {
            ErrorKind::BrokerNotFound
        }
        Ok(_) => ErrorKind::BrokerBlocked,
        Err(_) => ErrorKind::TotalTimeout,
    }
}

/// A publish the stream answered with an error: its JetStream error code, never its text.
fn refusal(e: &async_nats::jetstream::context::PublishError) -> ErrorKind {
    use async_nats::jetstream::{Error, ErrorCode};
    let Some(code) = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<Error>())
        .map(Error::error_code)
    else {
        return ErrorKind::Other;
    };
    match code {
        // Limits reached under `discard: new` (messages, bytes), storage or memory exhausted:
        // the stream cannot take more now.
        ErrorCode::STREAM_STORE_FAILED
        | ErrorCode::STORAGE_RESOURCES_EXCEEDED
        | ErrorCode::MEMORY_RESOURCES_EXCEEDED
        | ErrorCode::INSUFFICIENT_RESOURCES
        | ErrorCode::ACCOUNT_RESOURCES_EXCEEDED => ErrorKind::BrokerBlocked,
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM | ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM => {
            ErrorKind::TooLarge
        }
        _ => ErrorKind::Other,
    }
}

async fn connect(
    key: &Key,
    trust: Option<&Trust<'_>>,
    connect_timeout: Duration,
) -> Result<async_nats::Client, Failure> {
    // Only the address the egress guard checked: never servers the cluster announces.
    let mut options = ConnectOptions::new()
        .connection_timeout(connect_timeout)
        .ignore_discovered_servers()
        .max_reconnects(1);
    if let (Some(u), Some(p)) = (&key.username, &key.password) {
        options = options.user_and_password(u.clone(), p.clone());
    }
    if let Some(t) = &key.token {
        options = options.token(t.clone());
    }
    let scheme = match trust {
        None => "nats",
        Some(trust) => {
            // The client starts its handshake with the address it connects to; the
            // certificate is still verified against the URL's host.
            options = options
                .require_tls(true)
                .tls_client_config(trust.config_for_address()?);
            "tls"
        }
    };
    options
        .connect(format!("{scheme}://{}", key.address))
        .await
        .map_err(|e| connect_failure(&e))
}

fn connect_failure(e: &async_nats::ConnectError) -> Failure {
    if let Some(failure) = tls::failure("NATS", e) {
        return failure;
    }
    let kind = match e.kind() {
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
            ErrorKind::BrokerAuth
        }
        ConnectErrorKind::TimedOut => ErrorKind::ConnectTimeout,
        ConnectErrorKind::Dns => ErrorKind::Dns,
        ConnectErrorKind::Io => {
            match std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map(std::io::Error::kind)
            {
                Some(std::io::ErrorKind::ConnectionRefused) | None => ErrorKind::ConnectionRefused,
                Some(_) => ErrorKind::ConnectionReset,
            }
        }
        _ => ErrorKind::Other,
    };
    Failure {
        kind,
        message: format!("NATS: {e}"),
    }
}

/// The Standard Webhooks headers, the event type and the endpoint's own headers.
fn headers(
    signed: &Signed<'_>,
    own: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in own {
        if let Ok(v) = value.to_str() {
            h.insert(name.as_str(), v);
        }
    }
    h.insert(crate::signing::WEBHOOK_ID, signed.message_id);
    h.insert(
        crate::signing::WEBHOOK_TIMESTAMP,
        signed.timestamp_s.to_string(),
    );
    h.insert(crate::signing::WEBHOOK_SIGNATURE, signed.signature.as_str());
    h.insert("webhook-event-type", signed.event_type);
    h.insert("content-type", "application/json");
    for (name, value) in signed.trace_headers() {
        h.insert(name, value);
    }
    h
}
