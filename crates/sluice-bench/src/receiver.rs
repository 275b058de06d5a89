//! Receivers that time every delivery into a [`Timeline`]: the test kit's loopback receivers
//! (fast, slow, capped, blackhole) with an observer that records each delivery's
//! enqueue→delivery latency in its group, and each 429 a capped one answers.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
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

/// Records into one group of a timeline.
struct Timed {
    timeline: Arc<Timeline>,
    group: usize,
    /// Count the delivery when it arrives (fast, slow) rather than once served (capped).
    on_arrival: bool,
}

impl Observer for Timed {
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

/// [`start`] served as `options` say (HTTPS, no keep-alive); the observer is added here.
pub(crate) async fn start_with(
    mode: Mode,
    timeline: Arc<Timeline>,
    group: usize,
    options: receiver::Options,
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
    };
    let options = receiver::Options {
        observer: Some(Arc::new(observer)),
        ..options
    };
    receiver::start_with(behavior, options).await
}
