//! Receivers that time every delivery into a [`Timeline`]: the test kit's loopback receivers
//! (fast, slow, capped, blackhole) with an observer that records each delivery's
//! enqueue→delivery latency in its group, and each 429 a capped one answers; with
//! [`WebhookIds`], also every `webhook-id` it saw, to count the deliveries received twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use sluice_testkit::receiver::{self, Behavior, Observer, Receiver};

use super::timeline::{Timeline, sent_at_us};

/// How a bench receiver answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// 200 at once.
    Fast,
    /// 200 after this long (the latency is recorded on arrival).
    Slow(Duration),
    /// Serve up to `capacity` requests at once (changeable while running, see
    /// [`Receiver::set_capacity`]), each taking `service`; answer 429 with
    /// `Retry-After: retry_after_s` to any request beyond that. A delivery counts once served.
    Capped {
        /// Requests it serves at once.
        capacity: usize,
        /// Time to serve one.
        service: Duration,
        /// Seconds in Retry-After.
        retry_after_s: u64,
    },
    /// Accept, read, never answer (nothing reaches the timeline).
    Blackhole,
}

/// Every `webhook-id` one receiver saw, with how often: a delivery received twice is one
/// whose id shows up again (its endpoint's receiver only: a message fanned out to several
/// endpoints carries the same id to each).
#[derive(Debug, Default)]
pub(crate) struct WebhookIds {
    seen: Mutex<HashMap<String, u32>>,
}

impl WebhookIds {
    /// A request carrying `id` arrived.
    pub(crate) fn saw(&self, id: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        *seen.entry(id.to_owned()).or_default() += 1;
    }

    /// Requests beyond the first of each id: what arrived twice (or more).
    pub(crate) fn duplicates(&self) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.values().map(|&n| u64::from(n.saturating_sub(1))).sum()
    }

    /// Distinct ids seen.
    pub(crate) fn distinct(&self) -> u64 {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    /// Requests seen, repeats included.
    pub(crate) fn requests(&self) -> u64 {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.values().map(|&n| u64::from(n)).sum()
    }
}

/// Records into one group of a timeline.
struct Timed {
    timeline: Arc<Timeline>,
    group: usize,
    /// Count the delivery when it arrives (fast, slow) rather than once served (capped).
    on_arrival: bool,
    /// Where the `webhook-id` of every request goes, when counted.
    ids: Option<Arc<WebhookIds>>,
}

impl Observer for Timed {
    fn request(&self, headers: &HeaderMap, _body: &[u8]) {
        if let Some(ids) = &self.ids {
            let id = headers.get("webhook-id").and_then(|v| v.to_str().ok());
            ids.saw(id.unwrap_or_default());
        }
    }

    fn arrived(&self, body: &[u8]) {
        if self.on_arrival {
            self.timeline.delivered(self.group, sent_at_us(body));
        }
    }

    fn answered(&self, body: &[u8], status: StatusCode) {
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.timeline.throttled(self.group);
        } else if !self.on_arrival && status.is_success() {
            self.timeline.delivered(self.group, sent_at_us(body));
        }
    }
}

/// Start a receiver of `mode` recording into `group` of `timeline`.
pub(crate) async fn start(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
) -> std::io::Result<Receiver> {
    start_with(mode, timeline, group, receiver::Options::default()).await
}

/// [`start`], every request's `webhook-id` counted into `ids` as well (not for
/// [`Mode::Blackhole`], which answers nothing and counts only connections).
pub(crate) async fn start_counted(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
    ids: Arc<WebhookIds>,
) -> std::io::Result<Receiver> {
    serve(
        mode,
        timeline,
        group,
        receiver::Options::default(),
        Some(ids),
    )
    .await
}

/// [`start`] served as `options` say (HTTPS, no keep-alive); the observer is added here.
pub(crate) async fn start_with(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
    options: receiver::Options,
) -> std::io::Result<Receiver> {
    serve(mode, timeline, group, options, None).await
}

async fn serve(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
    options: receiver::Options,
    ids: Option<Arc<WebhookIds>>,
) -> std::io::Result<Receiver> {
    let behavior = match mode {
        Mode::Fast => Behavior::Fast,
        Mode::Slow(delay) => Behavior::Slow(delay),
        Mode::Capped {
            capacity,
            service,
            retry_after_s,
        } => Behavior::Capped {
            capacity,
            service,
            retry_after_s,
        },
        Mode::Blackhole => return receiver::start(Behavior::Blackhole, false).await,
    };
    let observer = Timed {
        timeline,
        group,
        on_arrival: !matches!(mode, Mode::Capped { .. }),
        ids,
    };
    let options = receiver::Options {
        observer: Some(Arc::new(observer)),
        ..options
    };
    receiver::start_with(behavior, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_seen_again_is_a_duplicate_and_each_repeat_counts() {
        let ids = WebhookIds::default();
        assert_eq!(
            (ids.duplicates(), ids.distinct(), ids.requests()),
            (0, 0, 0)
        );
        for id in ["msg_a", "msg_b", "msg_a", "msg_c", "msg_a", "msg_b"] {
            ids.saw(id);
        }
        // msg_a twice more, msg_b once more.
        assert_eq!(ids.duplicates(), 3);
        assert_eq!(ids.distinct(), 3);
        assert_eq!(ids.requests(), 6);
    }
}
