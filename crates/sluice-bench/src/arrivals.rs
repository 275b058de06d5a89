//! What the receivers of the fleet scenarios (`fleet`, `soak`) saw: each request's event
//! (`(customer, seq)` from the payload), its `webhook-id` and when, recorded as it arrives;
//! and the store's queue counts, read directly.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::http::HeaderMap;
use sluice_testkit::receiver::Observer;

use super::timeline::{Timeline, now_us, sent_at_us, u64_field};

/// One request a receiver saw.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    /// `(customer, seq)` from the payload: which event this is.
    pub(crate) key: (u64, u64),
    /// Its `webhook-id` header.
    pub(crate) webhook_id: String,
    /// Seconds since the load started.
    pub(crate) at_s: f64,
    /// Seconds since the producer stamped the payload (enqueue → this request).
    pub(crate) took_s: Option<f64>,
}

/// Every request the receivers saw, and their timeline.
pub(crate) struct Arrivals {
    timeline: Arc<Timeline>,
    seen: Mutex<Vec<Arrival>>,
}

impl Arrivals {
    /// Nothing seen yet; latencies go into `timeline`.
    pub(crate) fn new(timeline: Arc<Timeline>) -> Self {
        Self {
            timeline,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// A receiver's observer recording into these arrivals and `group` of the timeline.
    pub(crate) fn recorder(self: &Arc<Self>, group: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            arrivals: self.clone(),
            group,
        })
    }

    /// Every arrival so far.
    pub(crate) fn snapshot(&self) -> Vec<Arrival> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A receiver's observer: the arrival (with its `webhook-id`) and its latency.
pub(crate) struct Recorder {
    arrivals: Arc<Arrivals>,
    group: usize,
}

impl Observer for Recorder {
    fn request(&self, headers: &HeaderMap, body: &[u8]) {
        let webhook_id = headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let key = (
            u64_field(body, "c").unwrap_or(u64::MAX),
            u64_field(body, "seq").unwrap_or(u64::MAX),
        );
        let at_s = self.arrivals.timeline.elapsed();
        self.arrivals
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arrival {
                key,
                webhook_id,
                at_s,
                took_s: sent_at_us(body).map(|sent| now_us().saturating_sub(sent) as f64 / 1e6),
            });
    }

    fn arrived(&self, body: &[u8]) {
        self.arrivals
            .timeline
            .delivered(self.group, sent_at_us(body));
    }
}

/// `(ready, leased, dead)` deliveries now.
pub(crate) async fn queue(pg: &tokio_postgres::Client) -> anyhow::Result<(i64, i64, i64)> {
    let row = pg
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1), \
             count(*) FILTER (WHERE state = 3) FROM deliveries",
            &[],
        )
        .await
        .context("queue counts")?;
    Ok((row.get(0), row.get(1), row.get(2)))
}
