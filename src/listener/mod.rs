//! The HTTP listener's defences against slow, idle and too many clients: how long a request's
//! headers and body may take to arrive, how long an idle keep-alive connection is kept, and how
//! many connections are served at once, overall and from one peer (an IPv4 address or an IPv6
//! /64; see [`slots`]: at either bound the connection idle longest, else the one longest in a
//! request head, makes room before a new one is refused).
//!
//! # Layout
//! - [`settings`]: the limits, validated.
//! - [`slots`]: who holds the connection slots, and which waiting connection makes room.
//! - [`connection`]: one connection's header and idle deadlines, and hyper's own errors as
//!   problem+json.
//!
//! The request body's deadline is the API's ([`crate::web::deadline`]): its extractors answer
//! a body that did not arrive in time.

pub mod connection;
pub mod settings;
pub mod slots;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::metrics::{ListenerLabel, Metrics};
use crate::web::deadline::DeadlineBody;
use crate::web::problem::Problem;
use connection::{Activity, Stop, WatchedIo, watch};
use slots::{Full, Slots};

pub use settings::ListenerSettings;

/// Refusals answered at once (each holds its socket for at most [`REFUSAL_LINGER`]); beyond
/// this, connections over the limit are closed without an answer.
pub const REFUSAL_SLOTS: usize = 64;

/// How long a refused connection is kept to deliver its 503 and read what the client sent.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long in-flight requests may finish after the listener stops.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Largest request head (request line and headers) hyper buffers, in bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Which listener (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The tenant-facing API.
    Api,
    /// `/metrics`, `/healthz`, `/readyz` for the operator.
    Operator,
}

impl Kind {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Api => "api",
            Kind::Operator => "operator",
        }
    }
}

/// Serve `router` on `listener` until `shutdown` resolves, then let requests in progress finish
/// (for at most 5 s) and return.
///
/// At most `max_connections` are served at once, at most `max_per_peer` from one peer (an
/// IPv4 address or an IPv6 /64); at either bound the connection idle longest, else the one
/// longest in the middle of a request head, is closed to make room. When every connection in
/// the way has a request in the service the new one is accepted, answered `503` problem+json
/// with `Retry-After: 1` and closed, so a client sees why rather than a connection that hangs
/// in the kernel's backlog; a flood beyond the refusal slots is closed without an answer so
/// that refusing stays cheap.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerSettings,
    max_connections: u32,
    max_per_peer: u32,
    kind: Kind,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let max = max_connections.max(1) as usize;
    let per_peer = (max_per_peer.max(1) as usize).min(max);
    let slots = Slots::new(max, per_peer);
    let tasks = TaskTracker::new();
    let refusals = Arc::new(Semaphore::new(REFUSAL_SLOTS));
    let full: Arc<[u8]> = refusal_answer(&format!(
        "too many connections: this listener serves at most {max} at once; retry shortly"
    ))
    .into();
    let peer_full: Arc<[u8]> = refusal_answer(&format!(
        "too many connections from your address: one address (an IPv6 /64) may hold at most \
         {per_peer} of this listener's connections at once; retry shortly"
    ))
    .into();
    let stop = Stop::default();
    let label = ListenerLabel {
        listener: kind.name(),
    };
    let open = metrics.http_connections.get_or_create(&label).clone();
    let refused = metrics
        .http_connections_refused
        .get_or_create(&label)
        .clone();
    let evictions = metrics
        .http_connections_evicted
        .get_or_create(&label)
        .clone();
    let mut http = http1::Builder::new();
    http.max_buf_size(MAX_HEAD_BYTES)
        .max_header_size(MAX_HEAD_BYTES)
        .header_read_timeout(None)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait a
                    // little rather than spin; the connections being served go on.
                    tracing::warn!(error = %e, listener = kind.name(), "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let activity = Activity::new();
        let evict = CancellationToken::new();
        let slot = match slots.admit(peer.ip(), Arc::clone(&activity), evict.clone()) {
            Ok((slot, evicted)) => {
                evictions.inc_by(evicted);
                slot
            }
            Err(why) => {
                refused.inc();
                let answer = match why {
                    Full::Listener => &full,
                    Full::Peer => &peer_full,
                };
                refuse(stream, &refusals, answer);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(WatchedIo::new(stream, Arc::clone(&activity)));
        let service = {
            let activity = Arc::clone(&activity);
            let router = router.clone();
            let body_timeout = limits.body_read_timeout;
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let in_service = activity.begin_request();
                let req = req.map(|b| Body::new(DeadlineBody::new(b, body_timeout)));
                let answer = router.clone().oneshot(req);
                async move {
                    let response = answer.await;
                    drop(in_service);
                    response
                }
            })
        };
        let conn = http.serve_connection(io, service);
        let stop = stop.clone();
        let open = open.clone();
        open.inc();
        tasks.spawn(async move {
            watch(conn, activity, limits, stop, evict).await;
            open.dec();
            drop(slot);
        });
    }
    drop(listener);
    stop.drain.cancel();
    tasks.close();
    let _ = tokio::time::timeout(DRAIN_GRACE, tasks.wait()).await;
    stop.now.cancel();
}

/// The answer to a connection over a limit, saying which.
fn refusal_answer(detail: &str) -> Vec<u8> {
    let status = StatusCode::SERVICE_UNAVAILABLE;
    let body = serde_json::to_vec(&Problem::new(status, detail)).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Answer a connection over the limit and close it, without letting refusals pile up.
fn refuse(mut stream: TcpStream, refusals: &Arc<Semaphore>, answer: &Arc<[u8]>) {
    let Ok(permit) = Arc::clone(refusals).try_acquire_owned() else {
        // Refusing is already saturated: a best-effort answer, then close.
        let _ = stream.try_write(answer);
        return;
    };
    let answer = Arc::clone(answer);
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            stream.write_all(&answer).await?;
            stream.shutdown().await?;
            // Read what the client sent before closing: closing with unread bytes resets the
            // connection, and a reset can discard the 503 before the client has read it.
            let mut sink = [0u8; 4096];
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        })
        .await;
    });
}

/// Raise this process's soft limit on open files to its hard limit (a refused or failed raise
/// leaves it as it was) and return the soft limit now in force.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if limit.current != limit.maximum {
            let raised = rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                limit = raised;
            }
        }
        // `None` is "unlimited".
        Some(limit.current.unwrap_or(u64::MAX))
    }
    #[cfg(not(unix))]
    None
}
