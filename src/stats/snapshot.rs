//! The figures of one window at one instant, serialised with durations as seconds (`p95_s`).

use std::time::Duration;

use serde::{Serialize, Serializer};

use super::failures::FailureCounts;

/// The figures of one window at one instant; serialised with durations as seconds (`p95_s`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WindowSnapshot {
    /// The time the figures cover: the window length, or less while the window is young.
    #[serde(rename = "span_s", serialize_with = "secs")]
    pub span: Duration,
    /// Attempts (delivered + failed) in the window: the number of response times measured.
    pub samples: u64,
    /// Mean response time of the attempts.
    #[serde(rename = "mean_s", serialize_with = "opt_secs")]
    pub mean: Option<Duration>,
    /// Median response time.
    #[serde(rename = "p50_s", serialize_with = "opt_secs")]
    pub p50: Option<Duration>,
    /// 95th-percentile response time.
    #[serde(rename = "p95_s", serialize_with = "opt_secs")]
    pub p95: Option<Duration>,
    /// 99th-percentile response time.
    #[serde(rename = "p99_s", serialize_with = "opt_secs")]
    pub p99: Option<Duration>,
    /// Deliveries that reached admission, per second.
    pub offered_per_s: f64,
    /// Attempts answered 2xx, per second.
    pub delivered_per_s: f64,
    /// Attempts that failed, per second.
    pub failed_per_s: f64,
    /// Deliveries shed at a full lane, per second.
    pub shed_per_s: f64,
    /// Deliveries held by a pause or an open breaker, per second.
    pub held_per_s: f64,
    /// Deliveries held by the endpoint's rate limit, per second (each comes back at its turn
    /// and is offered again).
    pub rate_limited_per_s: f64,
    /// Shed ÷ offered, 0 to 1 (0 when nothing was offered).
    pub shed_share: f64,
    /// Failed ÷ attempts, 0 to 1 (0 without attempts).
    pub failure_ratio: f64,
    /// 95th-percentile response time of the delivered attempts only: what capacity is judged
    /// by (a refused connection is fast and delivers nothing).
    #[serde(rename = "delivered_p95_s", serialize_with = "opt_secs")]
    pub delivered_p95: Option<Duration>,
    /// Attempts delivered in the window.
    pub delivered: u64,
    /// Failed attempts in the window, by how they failed.
    pub failures: FailureCounts,
}

/// Serialises a duration as fractional seconds.
pub(crate) fn secs<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// Serialises an optional duration as fractional seconds or null.
pub(crate) fn opt_secs<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => serializer.serialize_some(&duration.as_secs_f64()),
        None => serializer.serialize_none(),
    }
}
