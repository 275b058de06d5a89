//! The batch exporter: a bounded queue the dispatcher drops finished spans into without ever
//! waiting, and one background task that POSTs them to the collector in batches.
//!
//! A full queue drops the new span; a collector that fails, refuses or does not answer within
//! the export timeout costs its batch. Both are counted (`sluice_trace_spans_dropped`), never
//! retried: a dead collector must not slow delivery or grow memory.

use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::otlp::{self, Resource};
use super::settings::TraceSettings;
use super::span::Span;

/// Where finished spans go: a handle on the export queue.
#[derive(Clone)]
pub struct Exporter {
    tx: mpsc::Sender<Span>,
    dropped: Counter,
}

/// What the export task counts.
#[derive(Clone, Default)]
pub struct ExportCounters {
    /// Spans the collector accepted.
    pub exported: Counter,
    /// Spans dropped (queue full, collector failed).
    pub dropped: Counter,
}

impl Exporter {
    /// Start the export task for `settings` (export must be on), on the current runtime. It
    /// ends when every handle is dropped, after sending what is queued.
    pub fn start(settings: &TraceSettings, counters: ExportCounters) -> Option<Self> {
        let url = settings.endpoint.clone()?;
        let (tx, rx) = mpsc::channel(settings.max_queue);
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &settings.headers {
            if let (Ok(k), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                reqwest::header::HeaderValue::from_str(v),
            ) {
                headers.insert(k, v);
            }
        }
        let client = match reqwest::Client::builder()
            .timeout(settings.export_timeout)
            .default_headers(headers)
            .no_proxy()
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build the OTLP exporter's HTTP client: tracing is off");
                return None;
            }
        };
        let task = Task {
            client,
            url,
            resource: Resource {
                service_name: settings.service_name.clone(),
                version: env!("CARGO_PKG_VERSION"),
            },
            max_batch: settings.max_batch,
            delay: settings.schedule_delay,
            counters: counters.clone(),
        };
        tokio::spawn(task.run(rx));
        Some(Self {
            tx,
            dropped: counters.dropped,
        })
    }

    /// Queue a finished span; when the queue is full it is dropped and counted. Never waits.
    pub fn send(&self, span: Span) {
        if self.tx.try_send(span).is_err() {
            self.dropped.inc();
        }
    }
}

struct Task {
    client: reqwest::Client,
    url: url::Url,
    resource: Resource,
    max_batch: usize,
    delay: std::time::Duration,
    counters: ExportCounters,
}

impl Task {
    async fn run(self, mut rx: mpsc::Receiver<Span>) {
        let this = self;
        let mut batch = Vec::with_capacity(this.max_batch);
        loop {
            // Wait for a first span, then gather until the batch is full or its delay passed.
            let Some(first) = rx.recv().await else { return };
            batch.push(first);
            let until = Instant::now() + this.delay;
            let mut closed = false;
            while batch.len() < this.max_batch {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) => {
                        closed = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            this.export(std::mem::take(&mut batch)).await;
            if closed {
                return;
            }
        }
    }

    /// POST one batch; what the collector does not accept is counted as dropped.
    async fn export(&self, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let body = otlp::encode(&self.resource, &spans);
        drop(spans);
        let sent = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                self.counters.exported.inc_by(n);
            }
            Ok(r) => {
                self.counters.dropped.inc_by(n);
                tracing::debug!(
                    status = r.status().as_u16(),
                    spans = n,
                    "the collector refused spans"
                );
            }
            Err(e) => {
                self.counters.dropped.inc_by(n);
                tracing::debug!(error = %e, spans = n, "cannot export spans");
            }
        }
    }
}
