//! A receiver that keeps everything it is sent (every header, the body) and answers with a
//! status the test can change while it runs: what a customer's endpoint sees, whole.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    /// Every header.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Captured {
    /// A header's value as text ("" when absent).
    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The three Standard Webhooks headers and the body, as the Python verifiers read them.
    pub(crate) fn verifier_input(&self, key_field: &str, key: &str) -> serde_json::Value {
        serde_json::json!({
            key_field: key,
            "headers": {
                "webhook-id": self.header("webhook-id"),
                "webhook-timestamp": self.header("webhook-timestamp"),
                "webhook-signature": self.header("webhook-signature"),
            },
            "body": String::from_utf8(self.body.to_vec()).expect("a UTF-8 body"),
        })
    }
}

#[derive(Default)]
struct Inner {
    seen: Mutex<Vec<Captured>>,
    status: AtomicU16,
}

/// A running capture receiver.
pub(crate) struct Capture {
    addr: SocketAddr,
    inner: Arc<Inner>,
}

impl Capture {
    /// Listen on a free loopback port, answering `status`.
    pub(crate) async fn start(status: u16) -> Capture {
        let inner = Arc::new(Inner::default());
        inner.status.store(status, Ordering::Relaxed);
        let app = Router::new()
            .route("/{*path}", any(keep))
            .route("/", any(keep))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Capture { addr, inner }
    }

    /// Where to send webhooks.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Answer `status` from now on.
    pub(crate) fn answer(&self, status: u16) {
        self.inner.status.store(status, Ordering::Relaxed);
    }

    /// Everything received so far, oldest first.
    pub(crate) fn seen(&self) -> Vec<Captured> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// The requests carrying this `webhook-id`.
    pub(crate) fn of(&self, webhook_id: &str) -> Vec<Captured> {
        self.seen()
            .into_iter()
            .filter(|c| c.header("webhook-id") == webhook_id)
            .collect()
    }
}

async fn keep(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    inner.seen.lock().unwrap().push(Captured { headers, body });
    StatusCode::from_u16(inner.status.load(Ordering::Relaxed)).unwrap_or(StatusCode::OK)
}
