//! Real HTTP receivers on loopback, for tests and benchmarks: fast, slow, blackhole (accepts and
//! never answers), throttling (429 + Retry-After), capped (429 above a concurrency it can take,
//! changeable while running), flaky, gone (410), redirecting, oversized, and hostile (fixed raw
//! bytes: NUL, invalid UTF-8, huge). Each records what it received and its peak concurrency,
//! and may tell an [`Observer`] about every request (a benchmark's timeline). Any of them can
//! speak HTTPS ([`Options::tls`], certificates from [`crate::tls`]) and close every connection
//! after its answer ([`Options::close`]: no keep-alive).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How a receiver answers.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// 200 at once.
    Fast,
    /// 200 after a delay.
    Slow(Duration),
    /// Accept the connection, read the request, never answer.
    Blackhole,
    /// 429 with `Retry-After: N` seconds.
    Throttle {
        /// Seconds in Retry-After.
        retry_after_s: u64,
    },
    /// Serve up to `capacity` requests at once (see [`Receiver::set_capacity`]), each taking
    /// `service`; answer 429 with `Retry-After: retry_after_s` to any request beyond that.
    Capped {
        /// Requests it serves at once.
        capacity: usize,
        /// Time to serve one.
        service: Duration,
        /// Seconds in Retry-After.
        retry_after_s: u64,
    },
    /// Answer `status` to every n-th request (1-based: the first `fail_first` fail).
    FailFirst {
        /// How many requests fail before it succeeds.
        fail_first: u64,
        /// Status of the failures.
        status: u16,
    },
    /// Fail a fraction of requests with 500 (deterministic: every k-th).
    Flaky {
        /// Every `every`-th request fails.
        every: u64,
    },
    /// Always this status.
    Status(u16),
    /// 302 to elsewhere.
    Redirect,
    /// 200 with a body of this many bytes.
    Oversized(usize),
    /// Always `status` with exactly these bytes as the body (hostile bodies: NUL, invalid UTF-8,
    /// megabytes).
    Body {
        /// The status answered.
        status: u16,
        /// The body, sent verbatim.
        body: Bytes,
    },
}

/// One received request.
#[derive(Debug, Clone)]
pub struct Received {
    /// `webhook-id`
    pub id: String,
    /// `webhook-timestamp`
    pub timestamp: String,
    /// `webhook-signature`
    pub signature: String,
    /// Body.
    pub body: Bytes,
    /// When it arrived (epoch ms).
    pub at_ms: i64,
}

/// Told about every request a receiver answers (not the blackhole's), e.g. to time
/// deliveries into a benchmark's timeline.
pub trait Observer: Send + Sync + 'static {
    /// A request arrived with these `headers` and `body` (called just before
    /// [`Observer::arrived`]), e.g. to read its `webhook-id`.
    fn request(&self, headers: &HeaderMap, body: &[u8]) {
        let _ = (headers, body);
    }
    /// A request arrived with `body`, before any delay its behaviour adds.
    fn arrived(&self, body: &[u8]) {
        let _ = body;
    }
    /// The request with `body` was answered `status`, after that delay.
    fn answered(&self, body: &[u8], status: StatusCode) {
        let _ = (body, status);
    }
}

/// What a receiver has seen.
#[derive(Debug, Default)]
pub struct Record {
    requests: AtomicU64,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    received: Mutex<Vec<Received>>,
    handshakes: AtomicU64,
    handshake_failures: AtomicU64,
    keep: bool,
}

impl Record {
    /// Requests seen.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Acquire)
    }
    /// Most requests in flight at once.
    pub fn peak_concurrency(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }
    /// Start measuring the peak afresh (from the current in-flight count); returns the old peak.
    pub fn reset_peak(&self) -> usize {
        self.peak
            .swap(self.in_flight.load(Ordering::Acquire), Ordering::AcqRel)
    }
    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
    /// Everything received (when recording is on).
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// TLS handshakes completed (new connections, for an HTTPS receiver).
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Acquire)
    }
    /// TLS handshakes that failed (a client that did not trust us, or we did not trust).
    pub fn handshake_failures(&self) -> u64 {
        self.handshake_failures.load(Ordering::Acquire)
    }
    /// Distinct webhook ids received.
    pub fn distinct_ids(&self) -> std::collections::HashSet<String> {
        self.received().into_iter().map(|r| r.id).collect()
    }
}

/// A running receiver.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it has seen.
    pub record: Arc<Record>,
    capacity: Arc<AtomicUsize>,
    task: JoinHandle<()>,
    tls: bool,
}

/// How a receiver serves, besides how it answers.
#[derive(Clone, Default)]
pub struct Options {
    /// Serve HTTPS with this configuration (see [`crate::tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Close every connection after its answer (`Connection: close`): no keep-alive.
    pub close: bool,
    /// Record every request's headers and body (tests), not only count them (benchmarks).
    pub keep: bool,
    /// Told about every request.
    pub observer: Option<Arc<dyn Observer>>,
}

impl Receiver {
    /// Its URL (`http://127.0.0.1:PORT/hook`, or `https://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/hook", self.addr)
    }

    /// Change how many requests a [`Behavior::Capped`] receiver serves at once.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Shared {
    behavior: Behavior,
    record: Arc<Record>,
    capacity: Arc<AtomicUsize>,
    observer: Option<Arc<dyn Observer>>,
    close: bool,
}

/// Start a receiver on 127.0.0.1 with a free port; `keep` records every request's headers and
/// body (tests), otherwise only counts (benchmarks).
pub async fn start(behavior: Behavior, keep: bool) -> std::io::Result<Receiver> {
    start_on("127.0.0.1:0".parse().expect("literal"), behavior, keep).await
}

/// Start a receiver on 127.0.0.1 with a free port that tells `observer` about every request
/// (and only counts them).
pub async fn start_observed(
    behavior: Behavior,
    observer: Arc<dyn Observer>,
) -> std::io::Result<Receiver> {
    let options = Options {
        observer: Some(observer),
        ..Options::default()
    };
    start_with(behavior, options).await
}

/// Start a receiver on 127.0.0.1 with a free port, served as `options` say.
pub async fn start_with(behavior: Behavior, options: Options) -> std::io::Result<Receiver> {
    serve("127.0.0.1:0".parse().expect("literal"), behavior, options).await
}

/// Start a receiver on a given address.
pub async fn start_on(
    addr: SocketAddr,
    behavior: Behavior,
    keep: bool,
) -> std::io::Result<Receiver> {
    let options = Options {
        keep,
        ..Options::default()
    };
    serve(addr, behavior, options).await
}

async fn serve(
    addr: SocketAddr,
    behavior: Behavior,
    options: Options,
) -> std::io::Result<Receiver> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let record = Arc::new(Record {
        keep: options.keep,
        ..Record::default()
    });
    let tls = options.tls.is_some();
    let capacity = Arc::new(AtomicUsize::new(match behavior {
        Behavior::Capped { capacity, .. } => capacity,
        _ => usize::MAX,
    }));
    let task = if matches!(behavior, Behavior::Blackhole) {
        tokio::spawn(blackhole(listener, record.clone()))
    } else {
        let shared = Shared {
            behavior,
            record: record.clone(),
            capacity: capacity.clone(),
            observer: options.observer,
            close: options.close,
        };
        let app = Router::new().fallback(any(handle)).with_state(shared);
        match options.tls {
            None => tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }),
            Some(config) => tokio::spawn(serve_tls(listener, app, config, record.clone())),
        }
    };
    Ok(Receiver {
        addr,
        record,
        capacity,
        task,
        tls,
    })
}

/// Accept TLS connections and serve `app` on each (HTTP/1.1 with keep-alive), counting the
/// handshakes that completed and those that failed.
async fn serve_tls(
    listener: TcpListener,
    app: Router,
    config: Arc<rustls::ServerConfig>,
    record: Arc<Record>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, app, record) = (acceptor.clone(), app.clone(), record.clone());
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(stream) => stream,
                Err(_) => {
                    record.handshake_failures.fetch_add(1, Ordering::AcqRel);
                    return;
                }
            };
            record.handshakes.fetch_add(1, Ordering::AcqRel);
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn blackhole(listener: TcpListener, record: Arc<Record>) {
    while let Ok((mut socket, _)) = listener.accept().await {
        record.requests.fetch_add(1, Ordering::AcqRel);
        let now = record.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        record.peak.fetch_max(now, Ordering::AcqRel);
        let record = record.clone();
        // Read and never answer: the sender must give up by its own timeout. The connection
        // counts as in flight until the sender closes it.
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            record.in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

struct InFlight<'a>(&'a Record);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn handle(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let n = s.record.requests.fetch_add(1, Ordering::AcqRel) + 1;
    let now = s.record.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
    s.record.peak.fetch_max(now, Ordering::AcqRel);
    let _guard = InFlight(&s.record);
    if let Some(observer) = &s.observer {
        observer.request(&headers, &body);
        observer.arrived(&body);
    }
    let mut response = answer(&s, n, now, &headers, &body).await;
    if let Some(observer) = &s.observer {
        observer.answered(&body, response.status());
    }
    if s.close {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn answer(s: &Shared, n: u64, now: usize, headers: &HeaderMap, body: &Bytes) -> Response {
    if s.record.keep {
        let get = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        s.record
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Received {
                id: get("webhook-id"),
                timestamp: get("webhook-timestamp"),
                signature: get("webhook-signature"),
                body: body.clone(),
                at_ms: sluice::clock::now_ms(),
            });
    }
    match &s.behavior {
        Behavior::Fast | Behavior::Blackhole => StatusCode::OK.into_response(),
        Behavior::Slow(d) => {
            tokio::time::sleep(*d).await;
            StatusCode::OK.into_response()
        }
        Behavior::Throttle { retry_after_s } => too_many(*retry_after_s),
        Behavior::Capped {
            service,
            retry_after_s,
            ..
        } => {
            if now > s.capacity.load(Ordering::Relaxed) {
                return too_many(*retry_after_s);
            }
            tokio::time::sleep(*service).await;
            StatusCode::OK.into_response()
        }
        Behavior::FailFirst { fail_first, status } => {
            if n <= *fail_first {
                StatusCode::from_u16(*status)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                    .into_response()
            } else {
                StatusCode::OK.into_response()
            }
        }
        Behavior::Flaky { every } => {
            if *every > 0 && n.is_multiple_of(*every) {
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            } else {
                StatusCode::OK.into_response()
            }
        }
        Behavior::Status(code) => StatusCode::from_u16(*code)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
        Behavior::Redirect => (
            StatusCode::FOUND,
            [(header::LOCATION, "http://127.0.0.1:1/elsewhere")],
        )
            .into_response(),
        Behavior::Oversized(n) => (StatusCode::OK, "x".repeat(*n)).into_response(),
        Behavior::Body { status, body } => (
            StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body.clone(),
        )
            .into_response(),
    }
}

fn too_many(retry_after_s: u64) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, retry_after_s.to_string())],
    )
        .into_response()
}
