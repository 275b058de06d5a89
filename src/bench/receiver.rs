//! Bench receivers on 127.0.0.1 that time every delivery into a [`Timeline`]: fast, slow, and
//! capped (answers 429 + Retry-After above a concurrency it can take). The blackhole comes from
//! [`crate::receivers`], which already holds connections open without answering.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::timeline::{Timeline, sent_at_us};

/// How a bench receiver answers.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// 200 at once.
    Fast,
    /// 200 after this long (the latency is recorded on arrival).
    Slow(Duration),
    /// Serve up to `capacity` requests at once (changeable while running, see
    /// [`BenchReceiver::set_capacity`]), each taking `service`; answer 429 with
    /// `Retry-After: retry_after_s` to any request beyond that.
    Capped {
        /// Requests it serves at once.
        capacity: usize,
        /// Time to serve one.
        service: Duration,
        /// Seconds in Retry-After.
        retry_after_s: u64,
    },
}

struct Shared {
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
    capacity: AtomicUsize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

/// A running bench receiver; stops when dropped.
pub struct BenchReceiver {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl BenchReceiver {
    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Change how many requests a capped receiver serves at once.
    pub fn set_capacity(&self, capacity: usize) {
        self.shared.capacity.store(capacity, Ordering::Relaxed);
    }

    /// Most requests it had in flight at once.
    pub fn peak_concurrency(&self) -> usize {
        self.shared.peak.load(Ordering::Relaxed)
    }
}

impl Drop for BenchReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start a receiver of `mode` recording into `group` of `timeline`.
pub async fn start(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
) -> std::io::Result<BenchReceiver> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        mode,
        timeline,
        group,
        capacity: AtomicUsize::new(match mode {
            Mode::Capped { capacity, .. } => capacity,
            _ => usize::MAX,
        }),
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    });
    let app = Router::new()
        .fallback(any(handle))
        .with_state(shared.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(BenchReceiver { addr, shared, task })
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn handle(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let now = s.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
    let _guard = InFlight(&s.in_flight);
    s.peak.fetch_max(now, Ordering::AcqRel);
    match s.mode {
        Mode::Fast => {
            s.timeline.delivered(s.group, sent_at_us(&body));
            StatusCode::OK.into_response()
        }
        Mode::Slow(d) => {
            s.timeline.delivered(s.group, sent_at_us(&body));
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Mode::Capped {
            service,
            retry_after_s,
            ..
        } => {
            if now > s.capacity.load(Ordering::Relaxed) {
                s.timeline.throttled(s.group);
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, retry_after_s.to_string())],
                )
                    .into_response();
            }
            tokio::time::sleep(service).await;
            s.timeline.delivered(s.group, sent_at_us(&body));
            StatusCode::OK.into_response()
        }
    }
}
