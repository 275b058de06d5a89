//! Per-endpoint circuit breaker: trips on a slow p95 whatever the status codes, or on a sustained
//! failure ratio, then lets exactly one probe through after a cooldown (a pure state machine).
//!
//! The caller owns one [`Breaker`] per endpoint behind its own mutex, asks [`Breaker::admit`]
//! before an attempt and reports every attempt to [`Breaker::record`]. Shed and paused deliveries
//! are not attempts: the caller must never record them, or a busy but healthy endpoint would trip.

use std::time::Duration;

use tokio::time::Instant;

use crate::setting::{Problems, SettingProblem, shown};

use crate::stats::{Window, format_duration};

/// How long callers are held while a probe is in flight, so they come back soon after it settles.
pub const HALF_OPEN_HOLD: Duration = Duration::from_secs(5);
/// Sub-windows in each breaker window: the windows move in tenths of their length.
const WINDOW_SLOTS: u32 = 10;

/// When the breakers trip and how long they stay open. Build with [`BreakerSettings::try_new`].
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerSettings {
    /// The latency breaker trips when the p95 exceeds this; 1 ms to 1 h, default 15 s.
    pub latency_ceiling: Duration,
    /// The window the p95 is taken over; 1 s to 24 h, default 300 s.
    pub latency_window: Duration,
    /// No latency trip with fewer attempts in the window; 1 to 1,000,000, default 20.
    pub latency_min_samples: u32,
    /// How long a latency trip holds the endpoint; 1 s to 24 h, default 600 s.
    pub cooldown: Duration,
    /// The error breaker trips when failed ÷ attempts reaches this; above 0 up to 1, default 0.5.
    pub error_ratio: f64,
    /// The window the failure ratio is taken over; 1 s to 24 h, default 60 s.
    pub error_window: Duration,
    /// No error trip with fewer attempts in the window; 1 to 1,000,000, default 20.
    pub error_min_samples: u32,
    /// How long an error trip holds the endpoint; 1 s to 24 h, default 30 s.
    pub error_cooldown: Duration,
    /// A probe unanswered for this long (lost to a crash or a lease expiry) lets another caller
    /// probe; 1 s to 24 h, default 60 s (the lease).
    pub probe_timeout: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            latency_ceiling: Duration::from_secs(15),
            latency_window: Duration::from_secs(300),
            latency_min_samples: 20,
            cooldown: Duration::from_secs(600),
            error_ratio: 0.5,
            error_window: Duration::from_secs(60),
            error_min_samples: 20,
            error_cooldown: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(60),
        }
    }
}

impl BreakerSettings {
    /// Returns `settings` if every value is in range, or the first one that is not (see
    /// [`BreakerSettings::problems`] to report them all).
    pub fn try_new(settings: BreakerSettings) -> Result<Self, SettingProblem> {
        match settings.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(settings),
        }
    }

    /// Every value out of range, so configuration can report them together.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let (second, day) = (Duration::from_secs(1), Duration::from_secs(86_400));
        let mut p = Problems::default();
        let ceiling = self.latency_ceiling;
        p.check(
            (Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&ceiling),
            "latency_ceiling",
            shown(ceiling),
            "1ms–1h",
        );
        for (field, value) in [
            ("latency_window", self.latency_window),
            ("cooldown", self.cooldown),
            ("error_window", self.error_window),
            ("error_cooldown", self.error_cooldown),
            ("probe_timeout", self.probe_timeout),
        ] {
            p.check(
                (second..=day).contains(&value),
                field,
                shown(value),
                "1s–24h",
            );
        }
        for (field, value) in [
            ("latency_min_samples", self.latency_min_samples),
            ("error_min_samples", self.error_min_samples),
        ] {
            p.check((1..=1_000_000).contains(&value), field, value, "1–1000000");
        }
        // A comparison with NaN is false, so NaN is refused too.
        let ratio = self.error_ratio;
        p.check(
            ratio > 0.0 && ratio <= 1.0,
            "error_ratio",
            ratio,
            "in (0, 1]",
        );
        p.into_vec()
    }
}

/// Why a breaker opened.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TripReason {
    /// The p95 over the latency window (or a probe's own time) exceeded the ceiling.
    Latency {
        /// The p95 that tripped it.
        p95: Duration,
    },
    /// The failure ratio over the error window reached the threshold (1.0 for a failed probe).
    Errors {
        /// Failed ÷ attempts, 0 to 1.
        ratio: f64,
    },
}

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BreakerState {
    /// Deliveries flow.
    Closed,
    /// Deliveries are held until `until`.
    Open {
        /// When the first caller may probe.
        until: Instant,
        /// What tripped it.
        reason: TripReason,
    },
    /// The cooldown is over; one probe decides.
    HalfOpen {
        /// Whether a caller holds the probe.
        probe_in_flight: bool,
    },
}

/// What [`Breaker::admit`] tells a caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Closed: attempt the delivery.
    Allow,
    /// Half-open and this caller carries the one probe: attempt it and record the outcome (or
    /// call [`Breaker::cancel_probe`] if it never becomes an attempt).
    Probe,
    /// Do not attempt; requeue the delivery (not an attempt, not a failure) until `until`.
    Hold {
        /// When to try again.
        until: Instant,
    },
}

/// A change of breaker state, for the caller to log and count.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The state left: "closed", "open" or "half_open".
    pub from: &'static str,
    /// The state entered.
    pub to: &'static str,
    /// Why, in words with the figures.
    pub reason: String,
    /// When.
    pub at: Instant,
}

/// The latency breaker and the error breaker of one endpoint.
#[derive(Clone, Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    state: BreakerState,
    /// Response times and outcomes over `latency_window`, for the p95.
    latency: Window,
    /// Outcomes over `error_window`, for the failure ratio (no histograms).
    errors: Window,
    /// When the current probe was handed out.
    probe_since: Instant,
}

impl Breaker {
    /// A closed breaker whose windows start at `now`. Settings should come from
    /// [`BreakerSettings::try_new`]; out-of-range ones are not refused here.
    pub fn new(settings: BreakerSettings, now: Instant) -> Self {
        Self {
            latency: Window::new(now, settings.latency_window, WINDOW_SLOTS),
            errors: Window::counters_only(now, settings.error_window, WINDOW_SLOTS),
            settings,
            state: BreakerState::Closed,
            probe_since: now,
        }
    }

    /// May a delivery be attempted at `now`? Entering half-open is reported by handing out
    /// [`Admission::Probe`]; every other state change comes back from [`Breaker::record`].
    pub fn admit(&mut self, now: Instant) -> Admission {
        match self.state {
            BreakerState::Closed => Admission::Allow,
            BreakerState::Open { until, .. } if now < until => Admission::Hold { until },
            BreakerState::Open { .. } => self.hand_out_probe(now),
            BreakerState::HalfOpen { probe_in_flight } => {
                let expires = self.probe_since + self.settings.probe_timeout;
                if !probe_in_flight || now >= expires {
                    self.hand_out_probe(now)
                } else {
                    Admission::Hold {
                        until: expires.min(now + HALF_OPEN_HOLD),
                    }
                }
            }
        }
    }

    /// Gives the probe back when it was shed, paused or lost before any attempt, so the next
    /// caller may probe. Does nothing unless a probe is in flight.
    pub fn cancel_probe(&mut self) {
        if self.state
            == (BreakerState::HalfOpen {
                probe_in_flight: true,
            })
        {
            self.state = BreakerState::HalfOpen {
                probe_in_flight: false,
            };
        }
    }

    /// Records one attempt that took `duration` and `failed` or not (any non-2xx, timeout or
    /// refusal). Never pass shed or paused deliveries: they are not attempts.
    ///
    /// While closed this may trip a breaker; while half-open it is taken as the probe's outcome
    /// (a success under the ceiling closes and clears the windows, anything else re-opens); while
    /// open it is only measured (a delivery that was already in flight).
    pub fn record(&mut self, now: Instant, duration: Duration, failed: bool) -> Option<Transition> {
        match self.state {
            BreakerState::Closed => {
                self.measure(now, duration, failed);
                self.trip_if_due(now)
            }
            BreakerState::Open { .. } => {
                self.measure(now, duration, failed);
                None
            }
            BreakerState::HalfOpen { .. } => Some(self.settle_probe(now, duration, failed)),
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// "closed", "open" or "half_open".
    pub fn state_name(&self) -> &'static str {
        name(&self.state)
    }

    /// The state as a gauge value: 0 closed, 1 open, 2 half-open.
    pub fn state_code(&self) -> u8 {
        match self.state {
            BreakerState::Closed => 0,
            BreakerState::Open { .. } => 1,
            BreakerState::HalfOpen { .. } => 2,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// The latency window as it stands at `now` (what the latency breaker judges).
    pub fn latency_snapshot(&self, now: Instant) -> crate::stats::WindowSnapshot {
        self.latency.snapshot(now)
    }

    /// The error window as it stands at `now` (what the error breaker judges; no quantiles).
    pub fn error_snapshot(&self, now: Instant) -> crate::stats::WindowSnapshot {
        self.errors.snapshot(now)
    }

    /// Did nothing reach either window within its span at `now`?
    pub fn is_idle(&self, now: Instant) -> bool {
        self.latency.is_idle(now) && self.errors.is_idle(now)
    }

    fn measure(&mut self, now: Instant, duration: Duration, failed: bool) {
        self.latency.record_attempt(now, duration, !failed);
        self.errors.record_attempt(now, duration, !failed);
    }

    fn hand_out_probe(&mut self, now: Instant) -> Admission {
        self.state = BreakerState::HalfOpen {
            probe_in_flight: true,
        };
        self.probe_since = now;
        Admission::Probe
    }

    /// Latency first: it holds the endpoint longer and is the cause when both fire.
    fn trip_if_due(&mut self, now: Instant) -> Option<Transition> {
        let s = &self.settings;
        let latency = self.latency.snapshot(now);
        if let Some(p95) = latency.p95.filter(|&p95| p95 > s.latency_ceiling)
            && latency.samples >= u64::from(s.latency_min_samples)
        {
            let why = format!(
                "p95 of {} over {} attempts exceeds the ceiling of {}",
                format_duration(p95),
                latency.samples,
                format_duration(s.latency_ceiling),
            );
            return Some(self.open(now, TripReason::Latency { p95 }, why));
        }
        let errors = self.errors.snapshot(now);
        if errors.samples >= u64::from(s.error_min_samples) && errors.failure_ratio >= s.error_ratio
        {
            let ratio = errors.failure_ratio;
            let why = format!(
                "{:.0} % of {} attempts failed, threshold {:.0} %",
                ratio * 100.0,
                errors.samples,
                s.error_ratio * 100.0,
            );
            return Some(self.open(now, TripReason::Errors { ratio }, why));
        }
        None
    }

    fn settle_probe(&mut self, now: Instant, duration: Duration, failed: bool) -> Transition {
        let ceiling = self.settings.latency_ceiling;
        let took = format_duration(duration);
        if !failed && duration <= ceiling {
            // The old slow samples would trip it again at once: start the evidence afresh.
            self.latency.clear(now);
            self.errors.clear(now);
            self.measure(now, duration, failed);
            let from = self.state_name();
            self.state = BreakerState::Closed;
            return transition(from, &self.state, format!("probe succeeded in {took}"), now);
        }
        self.measure(now, duration, failed);
        if duration > ceiling {
            let why = format!(
                "probe took {took}, over the ceiling of {}",
                format_duration(ceiling)
            );
            self.open(now, TripReason::Latency { p95: duration }, why)
        } else {
            let why = format!("probe failed after {took}");
            self.open(now, TripReason::Errors { ratio: 1.0 }, why)
        }
    }

    fn open(&mut self, now: Instant, reason: TripReason, why: String) -> Transition {
        let cooldown = match reason {
            TripReason::Latency { .. } => self.settings.cooldown,
            TripReason::Errors { .. } => self.settings.error_cooldown,
        };
        let from = self.state_name();
        self.state = BreakerState::Open {
            until: now + cooldown,
            reason,
        };
        transition(from, &self.state, why, now)
    }
}

fn name(state: &BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::Open { .. } => "open",
        BreakerState::HalfOpen { .. } => "half_open",
    }
}

fn transition(from: &'static str, to: &BreakerState, reason: String, at: Instant) -> Transition {
    Transition {
        from,
        to: name(to),
        reason,
        at,
    }
}

#[cfg(test)]
#[path = "breaker/tests.rs"]
mod tests;
