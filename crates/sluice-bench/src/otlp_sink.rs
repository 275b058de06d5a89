//! `--otlp-endpoint sink`: a collector stub in this process that takes every OTLP/HTTP export
//! (`POST /v1/traces`), reads its body, counts it and answers 200, so a run with tracing on
//! measures what sluice spends on spans, not what a collector spends decoding them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use tokio::net::TcpListener;

/// What the sink took.
#[derive(Default)]
pub(crate) struct Taken {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// A running sink; stops when dropped.
pub(crate) struct Sink {
    /// `http://127.0.0.1:PORT` (spans go to `…/v1/traces`).
    pub url: String,
    taken: Arc<Taken>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sink {
    /// Start one on 127.0.0.1 with a free port.
    pub(crate) async fn start() -> std::io::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let taken = Arc::new(Taken::default());
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(taken.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Sink { url, taken, task })
    }

    /// Export requests and body bytes taken so far.
    pub(crate) fn taken(&self) -> (u64, u64) {
        (
            self.taken.requests.load(Ordering::Relaxed),
            self.taken.bytes.load(Ordering::Relaxed),
        )
    }
}

async fn export(State(taken): State<Arc<Taken>>, body: Bytes) -> &'static str {
    taken.requests.fetch_add(1, Ordering::Relaxed);
    taken.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    ""
}
