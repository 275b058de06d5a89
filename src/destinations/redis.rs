//! Redis Streams: `XADD stream NOMKSTREAM [MAXLEN ~ n] * field value …`, delivered when Redis
//! answers the entry's id. `NOMKSTREAM`: sluice never creates a stream, so a stream name
//! nobody reads (a typo, a consumer not set up yet) is a failed attempt of kind
//! `broker_not_found`, not a silent success into a stream no one reads (as for a NATS subject no
//! stream captures). An `OOM` answer (Redis at its `maxmemory`) is backpressure. `rediss://`
//! connects with TLS, its certificate verified against the URL's host.

use std::net::SocketAddr;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisConnectionInfo};
use tokio::time::Instant;

use super::pool::Pool;
use super::tls::{self, Trust, TrustKey};
use super::{Signed, acknowledged};
use crate::delivery::{ErrorKind, Failure, Phases, Response};
use crate::model::DestinationCredentials;

/// Where one message goes.
pub(super) struct Route<'a> {
    pub address: SocketAddr,
    pub db: i64,
    pub credentials: Option<&'a DestinationCredentials>,
    pub stream: &'a str,
    pub max_len: Option<u64>,
    pub headers: &'a [(reqwest::header::HeaderName, reqwest::header::HeaderValue)],
    pub connect_timeout: Duration,
    /// `rediss://`: how the connection is secured.
    pub tls: Option<Trust<'a>>,
}

/// One server's connection: its address, database, credentials and TLS setting.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    address: SocketAddr,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    tls: Option<TrustKey>,
}

/// Redis Streams publishing with a bounded cache of connections.
pub(super) struct Publisher {
    pool: Pool<Key, MultiplexedConnection>,
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
            db: to.db,
            username: c.and_then(|c| c.username.clone()),
            password: c.and_then(|c| c.password.clone()),
            tls: to.tls.as_ref().map(Trust::key),
        };
        let slot = self.pool.slot(&key);
        let left = deadline.saturating_duration_since(Instant::now());
        let mut conn = slot
            .get_within(
                "Redis",
                deadline,
                to.connect_timeout,
                phases,
                |_| true,
                || connect(&key, to.tls.as_ref(), to.connect_timeout, left),
                Failure::clone,
            )
            .await?;
        let clock = Instant::now();
        let added: ::redis::RedisResult<Option<String>> =
            xadd(to, signed).query_async(&mut conn).await;
        phases.publish = clock.elapsed();
        phases.published = true;
        match added {
            Ok(Some(id)) => Ok(acknowledged(&format!("Redis (stream entry {id})"))),
            Ok(None) => Err(Failure {
                kind: ErrorKind::BrokerNotFound,
                message: format!(
                    "Redis: no stream {:?} (sluice adds to existing streams only: create it, \
                     e.g. with XGROUP CREATE … MKSTREAM)",
                    to.stream
                ),
            }),
            Err(e) => {
                // A multiplexed connection has no identity to compare: whichever is cached
                // is made again by the next attempt.
                if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
                    slot.forget(|_| true).await;
                }
                Err(failure(&e))
            }
        }
    }
}

/// The `XADD`: the Standard Webhooks headers, the event type and the endpoint's own headers
/// as fields, then `body`, exactly the bytes signed.
fn xadd(to: &Route<'_>, signed: &Signed<'_>) -> ::redis::Cmd {
    let mut cmd = ::redis::cmd("XADD");
    cmd.arg(to.stream).arg("NOMKSTREAM");
    if let Some(n) = to.max_len {
        cmd.arg("MAXLEN").arg("~").arg(n);
    }
    cmd.arg("*");
    for (name, value) in to.headers {
        if name.as_str() != "body" {
            cmd.arg(name.as_str()).arg(value.as_bytes());
        }
    }
    cmd.arg(crate::signing::WEBHOOK_ID)
        .arg(signed.message_id)
        .arg(crate::signing::WEBHOOK_TIMESTAMP)
        .arg(signed.timestamp_s)
        .arg(crate::signing::WEBHOOK_SIGNATURE)
        .arg(&signed.signature)
        .arg("webhook-event-type")
        .arg(signed.event_type)
        .arg("content-type")
        .arg("application/json");
    for (name, value) in signed.trace_headers() {
        cmd.arg(name).arg(value);
    }
    cmd.arg("body").arg(signed.payload);
    cmd
}

async fn connect(
    key: &Key,
    trust: Option<&Trust<'_>>,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Failure> {
    let mut settings = RedisConnectionInfo::default().set_db(key.db);
    if let Some(u) = &key.username {
        settings = settings.set_username(u);
    }
    if let Some(p) = &key.password {
        settings = settings.set_password(p);
    }
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout));
    let Some(trust) = trust else {
        let info = format!("redis://{}/", key.address)
            .into_connection_info()
            .map_err(|e| failure(&e))?
            .set_redis_settings(settings);
        let client = ::redis::Client::open(info).map_err(|e| failure(&e))?;
        return client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| failure(&e));
    };
    // The TLS stream is made here, to the checked address and verified as the URL's host;
    // Redis then logs in and selects the database over it.
    let stream = trust.connect("Redis", key.address).await?;
    let (conn, driver) = MultiplexedConnection::new_with_config(&settings, stream, config)
        .await
        .map_err(|e| failure(&e))?;
    tokio::spawn(driver);
    Ok(conn)
}

/// A failure named by Redis's error code or the socket's error, never by its text.
fn failure(e: &::redis::RedisError) -> Failure {
    // Over TLS 1.3 a refused client certificate surfaces on the first read, not in the handshake.
    if let Some(failure) = tls::failure("Redis", e) {
        return failure;
    }
    let kind = match e.code() {
        Some("OOM") => ErrorKind::BrokerBlocked,
        Some("NOPERM" | "WRONGPASS" | "NOAUTH") => ErrorKind::BrokerAuth,
        _ if e.kind() == ::redis::ErrorKind::AuthenticationFailed => ErrorKind::BrokerAuth,
        _ if e.is_connection_refusal() => ErrorKind::ConnectionRefused,
        _ if e.is_timeout() => ErrorKind::TotalTimeout,
        _ if e.is_io_error() || e.is_connection_dropped() => ErrorKind::ConnectionReset,
        _ => ErrorKind::Other,
    };
    Failure {
        kind,
        message: format!("Redis: {e}"),
    }
}
