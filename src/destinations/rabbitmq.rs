//! RabbitMQ (AMQP 0-9-1): a persistent (`delivery_mode` 2), `mandatory` publish on a channel
//! in confirm mode, delivered only on the broker's `basic.ack`. An unroutable message comes
//! back (`basic.return`, 312 NO_ROUTE) before its ack: a failed attempt of kind `unroutable`,
//! never a silent success. Failures are classified by the protocol's reply codes. `amqps://`
//! connects with TLS, its certificate verified against the URL's host.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::AMQPErrorKind;
use lapin::tcp::{AsyncTcpStream, RustlsConnector};
use lapin::types::{AMQPValue, FieldTable};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Event};
use tokio::time::Instant;

use super::pool::Pool;
use super::tls::{self, Trust, TrustKey};
use super::{Signed, acknowledged};
use crate::delivery::{ErrorKind, Failure, Phases, Response};
use crate::model::DestinationCredentials;

/// Most channels kept open on one connection (one per endpoint publishing there).
const MAX_CHANNELS: usize = 1024;

/// Where one message goes.
pub(super) struct Route<'a> {
    pub url: &'a url::Url,
    pub address: SocketAddr,
    pub credentials: Option<&'a DestinationCredentials>,
    pub endpoint_id: &'a str,
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub headers: &'a [(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    pub connect_timeout: Duration,
    /// `amqps://`: how the connection is secured.
    pub tls: Option<Trust<'a>>,
}

/// A connection to one broker, with a confirm-mode channel per endpoint (a channel error, such
/// as a missing exchange, closes only that endpoint's channel).
struct Amqp {
    conn: Connection,
    channels: Mutex<HashMap<String, Channel>>,
    /// Whether the broker is blocking this connection's publishers (`connection.blocked` until
    /// `connection.unblocked`), as a watch a publish in flight can wait on.
    blocked: tokio::sync::watch::Receiver<bool>,
}

/// One broker's connection: its address, vhost, credentials and TLS setting.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    address: SocketAddr,
    vhost: String,
    username: Option<String>,
    password: Option<String>,
    tls: Option<TrustKey>,
}

/// RabbitMQ publishing with a bounded cache of connections.
pub(super) struct Publisher {
    pool: Pool<Key, Arc<Amqp>>,
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
        let uri = uri(to)?;
        let key = Key {
            address: to.address,
            vhost: uri.vhost.clone(),
            username: to.credentials.and_then(|c| c.username.clone()),
            password: to.credentials.and_then(|c| c.password.clone()),
            tls: to.tls.as_ref().map(Trust::key),
        };
        let slot = self.pool.slot(&key);
        let amqp = slot
            .get_within(
                "AMQP",
                deadline,
                to.connect_timeout,
                phases,
                |a| a.conn.status().connected(),
                || connect(uri, to.address, to.tls.as_ref()),
                Failure::clone,
            )
            .await?;
        if amqp.conn.status().blocked() {
            return Err(Failure {
                kind: ErrorKind::BrokerBlocked,
                message: "the broker is blocking publishers (connection.blocked: a memory or \
                          disk alarm)"
                    .into(),
            });
        }
        let clock = Instant::now();
        let sent = async {
            let channel = amqp.channel(to.endpoint_id).await?;
            let confirm = channel
                .basic_publish(
                    to.exchange.into(),
                    to.routing_key.into(),
                    BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    },
                    signed.payload.as_bytes(),
                    properties(signed, to.headers),
                )
                .await?;
            confirm.await
        };
        // A broker that raises an alarm stops reading the connection: a publish already sent
        // would wait out its deadline, holding its lane slot, so `connection.blocked` ends it.
        let mut blocked = amqp.blocked.clone();
        let confirmed = tokio::select! {
            confirmed = sent => Some(confirmed),
            _ = blocked.wait_for(|b| *b) => None,
        };
        phases.publish = clock.elapsed();
        phases.published = true;
        let Some(confirmed) = confirmed else {
            return Err(Failure {
                kind: ErrorKind::BrokerBlocked,
                message: "the broker began blocking publishers while this message was in flight \
                          (connection.blocked: a memory or disk alarm); it is sent again"
                    .into(),
            });
        };
        match confirmed {
            Ok(Confirmation::Ack(None)) => Ok(acknowledged("RabbitMQ (publisher confirm)")),
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                Err(Failure {
                    kind: if returned.reply_code == 312 {
                        ErrorKind::Unroutable
                    } else {
                        ErrorKind::Other
                    },
                    message: format!(
                        "returned by the broker: {} {} (exchange {:?}, routing key {:?})",
                        returned.reply_code, returned.reply_text, to.exchange, to.routing_key
                    ),
                })
            }
            Ok(Confirmation::Nack(None)) => Err(Failure {
                kind: ErrorKind::BrokerBlocked,
                message: "the broker refused to take the message (basic.nack: a queue at its \
                          limit, or an internal error)"
                    .into(),
            }),
            Ok(Confirmation::NotRequested) => Err(Failure {
                kind: ErrorKind::Other,
                message: "the channel is not in confirm mode".into(),
            }),
            Err(e) => {
                amqp.drop_channel(to.endpoint_id);
                if !amqp.conn.status().connected() {
                    slot.forget(|a| Arc::ptr_eq(a, &amqp)).await;
                }
                Err(failure(&e))
            }
        }
    }
}

impl Amqp {
    /// The endpoint's open confirm-mode channel, opened when it has none (or it was closed).
    async fn channel(&self, endpoint_id: &str) -> lapin::Result<Channel> {
        let cached = self.lock().get(endpoint_id).cloned();
        if let Some(c) = cached.filter(|c| c.status().connected()) {
            return Ok(c);
        }
        let c = self.conn.create_channel().await?;
        c.confirm_select(ConfirmSelectOptions::default()).await?;
        let evicted = {
            let mut channels = self.lock();
            // Within the broker's channel limit (2047 by default): an endpoint's channel is
            // made again when it next publishes.
            let evicted = (channels.len() >= MAX_CHANNELS)
                .then(|| channels.keys().next().cloned())
                .flatten()
                .and_then(|k| channels.remove(&k));
            channels.insert(endpoint_id.to_owned(), c.clone());
            evicted
        };
        if let Some(old) = evicted {
            tokio::spawn(async move {
                let _ = old.close(200, "sluice: channel cache full".into()).await;
            });
        }
        Ok(c)
    }

    fn drop_channel(&self, endpoint_id: &str) {
        self.lock().remove(endpoint_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The URI connected to: the destination's, at the address the egress guard checked, with the
/// stored credentials.
fn uri(to: &Route<'_>) -> Result<AMQPUri, Failure> {
    let mut uri: AMQPUri = to.url.as_str().parse().map_err(|e: String| Failure {
        kind: ErrorKind::Other,
        message: format!("bad AMQP URL: {e}"),
    })?;
    uri.authority.host = match to.address {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    uri.authority.port = to.address.port();
    if let Some(c) = to.credentials {
        if let Some(u) = &c.username {
            uri.authority.userinfo.username = u.clone();
        }
        if let Some(p) = &c.password {
            uri.authority.userinfo.password = p.clone();
        }
    }
    uri.query.connection_timeout = Some(to.connect_timeout.as_millis() as u64);
    Ok(uri)
}

async fn connect(
    uri: AMQPUri,
    address: SocketAddr,
    trust: Option<&Trust<'_>>,
) -> Result<Arc<Amqp>, Failure> {
    let conn = match trust {
        None => Connection::connect_uri(uri, ConnectionProperties::default()).await,
        Some(trust) => {
            // The socket goes to the checked address; the handshake names the URL's host
            // (SNI), and the certificate is verified against it.
            let connector = RustlsConnector::from(trust.config()?);
            let host = trust.host.to_owned();
            let runtime = lapin::runtime::default_runtime().map_err(|e| failure(&e))?;
            Connection::connector(
                uri,
                runtime,
                async move |_, runtime| {
                    let tcp = AsyncTcpStream::connect(&runtime, address).await?;
                    Ok(tcp.into_rustls(&connector, &host).await?)
                },
                ConnectionProperties::default(),
            )
            .await
        }
    }
    .map_err(|e| failure(&e))?;
    let blocked = watch_blocked(&conn);
    Ok(Arc::new(Amqp {
        conn,
        channels: Mutex::new(HashMap::new()),
        blocked,
    }))
}

/// Follow the connection's `connection.blocked` and `connection.unblocked` into a watch; the
/// task ends with the connection, or when the connection's entry is dropped.
fn watch_blocked(conn: &Connection) -> tokio::sync::watch::Receiver<bool> {
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::watch::channel(conn.status().blocked());
    let events = conn.events_listener();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        loop {
            let event = tokio::select! {
                () = tx.closed() => return,
                event = events.next() => event,
            };
            match event {
                Some(Event::ConnectionBlocked(_)) => tx.send_replace(true),
                Some(Event::ConnectionUnblocked) => tx.send_replace(false),
                Some(_) => continue,
                None => return,
            };
        }
    });
    rx
}

/// The message's properties: persistent, JSON, its id and timestamp, the event type, and the
/// Standard Webhooks headers beside the endpoint's own.
fn properties(
    signed: &Signed<'_>,
    own: &[(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in own {
        headers.insert(
            name.as_str().into(),
            AMQPValue::LongString(value.as_bytes().to_vec().into()),
        );
    }
    let text = |s: &str| AMQPValue::LongString(s.to_owned().into());
    headers.insert(crate::signing::WEBHOOK_ID.into(), text(signed.message_id));
    headers.insert(
        crate::signing::WEBHOOK_TIMESTAMP.into(),
        text(&signed.timestamp_s.to_string()),
    );
    headers.insert(
        crate::signing::WEBHOOK_SIGNATURE.into(),
        text(&signed.signature),
    );
    headers.insert("webhook-event-type".into(), text(signed.event_type));
    for (name, value) in signed.trace_headers() {
        headers.insert(name.into(), text(value));
    }
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_message_id(signed.message_id.into())
        .with_timestamp(signed.timestamp_s.max(0) as u64)
        .with_type(signed.event_type.into())
        .with_headers(headers)
}

/// A failure named by the protocol's reply code (or the socket's error), never by its text.
fn failure(e: &lapin::Error) -> Failure {
    use lapin::ErrorKind as K;
    if let Some(failure) = tls::failure("RabbitMQ", e) {
        return failure;
    }
    let kind = match e.kind() {
        K::ProtocolError(amqp) => match (amqp.kind(), amqp.get_id()) {
            (_, 403) => ErrorKind::BrokerAuth,
            // 404 NOT_FOUND (an exchange), 530 NOT_ALLOWED on open (no such vhost).
            (_, 404) | (AMQPErrorKind::Hard(_), 530) => ErrorKind::BrokerNotFound,
            // 311 CONTENT_TOO_LARGE; 406 PRECONDITION_FAILED is how RabbitMQ refuses a publish
            // over its `max_message_size` (a publish sets no other precondition of ours).
            (_, 311) | (AMQPErrorKind::Soft(_), 406) => ErrorKind::TooLarge,
            (_, 312) => ErrorKind::Unroutable,
            (_, 320) => ErrorKind::ConnectionReset,
            _ => ErrorKind::Other,
        },
        K::AuthProviderError(_) => ErrorKind::BrokerAuth,
        K::IOError(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnectionRefused,
            std::io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
            _ => ErrorKind::ConnectionReset,
        },
        K::MissingHeartbeatError | K::InvalidConnectionState(_) => ErrorKind::ConnectionReset,
        _ => ErrorKind::Other,
    };
    Failure {
        kind,
        message: format!("RabbitMQ: {e}"),
    }
}
