//! Real HTTP receivers on loopback, for tests, benchmarks and `sluice receive`: fast, slow,
//! blackhole (accepts and never answers), throttling (429 + Retry-After), flaky, gone (410),
//! redirecting, and oversized. Each records what it received and its peak concurrency.

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

/// What a receiver has seen.
#[derive(Debug, Default)]
pub struct Record {
    requests: AtomicU64,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    received: Mutex<Vec<Received>>,
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
    task: JoinHandle<()>,
}

impl Receiver {
    /// Its URL (`http://127.0.0.1:PORT/hook`).
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
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
}

/// Start a receiver on 127.0.0.1 with a free port; `keep` records every request's headers and
/// body (tests), otherwise only counts (benchmarks).
pub async fn start(behavior: Behavior, keep: bool) -> std::io::Result<Receiver> {
    start_on("127.0.0.1:0".parse().expect("literal"), behavior, keep).await
}

/// Start a receiver on a given address.
pub async fn start_on(
    addr: SocketAddr,
    behavior: Behavior,
    keep: bool,
) -> std::io::Result<Receiver> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let record = Arc::new(Record {
        keep,
        ..Record::default()
    });
    let task = if matches!(behavior, Behavior::Blackhole) {
        tokio::spawn(blackhole(listener, record.clone()))
    } else {
        let shared = Shared {
            behavior,
            record: record.clone(),
        };
        let app = Router::new().fallback(any(handle)).with_state(shared);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        })
    };
    Ok(Receiver { addr, record, task })
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
                body,
                at_ms: crate::clock::now_ms(),
            });
    }
    match &s.behavior {
        Behavior::Fast | Behavior::Blackhole => StatusCode::OK.into_response(),
        Behavior::Slow(d) => {
            tokio::time::sleep(*d).await;
            StatusCode::OK.into_response()
        }
        Behavior::Throttle { retry_after_s } => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_after_s.to_string())],
        )
            .into_response(),
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
            if *every > 0 && n % every == 0 {
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
    }
}

/// `sluice receive`: a receiver that prints each webhook and whether its signature verifies
/// against `secret` (Standard Webhooks, ±5 minutes of clock skew), answering 204.
pub async fn print_forever(
    addr: SocketAddr,
    secret: Option<crate::signing::Secret>,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("receiving webhooks on http://{}/", listener.local_addr()?);
    let secret = Arc::new(secret);
    let app = Router::new().fallback(any(move |headers: HeaderMap, body: Bytes| {
        let secret = secret.clone();
        async move {
            let get = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let (id, ts, sig) = (
                get("webhook-id"),
                get("webhook-timestamp"),
                get("webhook-signature"),
            );
            let verdict = match (secret.as_ref(), ts.parse::<i64>()) {
                (Some(secret), Ok(ts)) => {
                    let skew = (crate::clock::now_ms() / 1000 - ts).abs();
                    if skew > 300 {
                        "signature timestamp too old".to_owned()
                    } else if crate::signing::verify(secret, &id, ts, &body, &sig) {
                        "signature verified".to_owned()
                    } else {
                        "SIGNATURE INVALID".to_owned()
                    }
                }
                (Some(_), Err(_)) => "no webhook-timestamp".to_owned(),
                (None, _) => "signature not checked (no --secret)".to_owned(),
            };
            println!("{id} {}: {}", verdict, String::from_utf8_lossy(&body));
            StatusCode::NO_CONTENT
        }
    }));
    axum::serve(listener, app).await
}
