//! AIMD per-endpoint concurrency governor: additive increase, multiplicative decrease, Retry-After pauses.
//!
//! Pure logic: [`step`] maps (settings, state, observation, now) to the next state. The lane asks
//! [`effective_limit`] how many attempts may be in flight and [`is_paused`] whether to send at all.
//!
//! # How it converges on an endpoint's capacity
//!
//! Plain AIMD (+0.5 per success, ×0.5 per throttle) probes past the capacity every few round
//! trips: each success adds half an attempt, so the limit grows by half the successes of a round
//! trip per round trip (multiplicatively), overshoots, is halved below the capacity, and climbs
//! again; against an endpoint whose 429 carries `Retry-After` every overshoot also pauses it. So
//! the governor remembers what it learnt, as TCP remembers its slow-start threshold:
//!
//! - **safe limit**: one below the concurrency that drew the last throttle while probing — what
//!   the endpoint is known to take. Until the first throttle there is none.
//! - **below the safe limit** (after a decrease) the limit recovers fast, +`increase` per success;
//!   it stops at the safe limit and **holds** there for the probe wait (`probe_interval` at
//!   first, see below);
//! - **above it** (and before any throttle) it grows additively, +`increase` per round trip
//!   (`increase ÷ limit` per success), the probe for more capacity;
//! - **a throttle, timeout or refusal** (at most once per round trip, see [`step_sent`]) halves the
//!   limit; one met while probing sets the safe limit just below it, one met at or below the safe
//!   limit says the capacity fell, and the safe limit falls to the halved limit with it.
//! - **a probe that failed waits twice as long** before the next one, up to
//!   [`PROBE_BACKOFF_LIMIT`]× `probe_interval`: an endpoint whose capacity stays put pays one 429
//!   per 80 s by default, not one per 10 s. A probe that holds (the limit reaches two above the
//!   safe limit without a throttle) raises the safe limit and resets the wait, and so does a
//!   capacity that fell, since what the endpoint takes has to be found again.
//! - **only a limit that binds grows** (past the safe limit, or before one is known): a success
//!   sent while fewer attempts were in flight than allowed and nothing waited at the lane says
//!   nothing about more concurrency, so it does not raise the limit (TCP's congestion window
//!   validation). Otherwise a quiet hour would raise the limit to the ceiling untested, and the
//!   next burst would meet the endpoint with all of it.
//!
//! Against an endpoint of fixed capacity the limit sits at the capacity for `probe_interval`,
//! probes one above it, is throttled once, halves, and is back at the capacity within a round trip
//! or two of successes, then waits longer before each next probe; when the capacity falls it
//! follows in a few halvings.
//!
//! Only attempts that actually reached the network are observations. A delivery that admission shed
//! (lane full, breaker open) or held back because the endpoint is paused never left the process and
//! says nothing about the endpoint, so it must never be fed to [`step`]: feeding it would let our own
//! back-pressure shrink the limit, and a paused endpoint could never recover.

use std::time::Duration;

use tokio::time::Instant;

use crate::setting::{Problems, SettingProblem, shown};

/// The longest wait between probes, as a multiple of `probe_interval` (a failed probe doubles
/// the wait up to this).
pub const PROBE_BACKOFF_LIMIT: u32 = 8;

/// The longest `max_pause` accepted: an endpoint asking for more is better handled by disabling it.
pub const MAX_PAUSE_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Tuning of the AIMD governor; one set is shared by every endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct GovernorSettings {
    /// Limit (concurrent attempts) a newly seen endpoint starts at; within `[floor, ceiling]`. Default 8.
    pub initial_limit: f64,
    /// Highest limit (concurrent attempts); finite and `>= floor`. Default 64.
    pub ceiling: f64,
    /// Lowest limit (concurrent attempts); `>= 1` so an endpoint always gets a probe through. Default 1.
    pub floor: f64,
    /// Added to the limit per successful attempt (concurrent attempts); finite, `> 0`. Default 0.5.
    pub increase: f64,
    /// Multiplier applied on a congestion signal; strictly within `(0, 1)`. Default 0.5.
    pub decrease_factor: f64,
    /// Longest pause a `Retry-After` can impose; within `(0, 7 days]`. Default 1 hour.
    pub max_pause: Duration,
    /// How long the limit holds at the safe limit before probing above it again, after a probe
    /// that held; each probe that draws a throttle doubles it, up to [`PROBE_BACKOFF_LIMIT`]×.
    /// Within `(0 s, 1 hour]`. Default 10 s: one overshoot (one 429, often a `Retry-After`
    /// pause) per wait is what finding more capacity costs.
    pub probe_interval: Duration,
}

impl Default for GovernorSettings {
    fn default() -> Self {
        Self {
            initial_limit: 8.0,
            ceiling: 64.0,
            floor: 1.0,
            increase: 0.5,
            decrease_factor: 0.5,
            max_pause: Duration::from_secs(3600),
            probe_interval: Duration::from_secs(10),
        }
    }
}

impl GovernorSettings {
    /// Builds settings from their parts, refusing any value outside its documented range.
    pub fn try_new(
        initial_limit: f64,
        ceiling: f64,
        floor: f64,
        increase: f64,
        decrease_factor: f64,
        max_pause: Duration,
    ) -> Result<Self, SettingProblem> {
        let settings = Self {
            initial_limit,
            ceiling,
            floor,
            increase,
            decrease_factor,
            max_pause,
            probe_interval: GovernorSettings::default().probe_interval,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Checks every field against its documented range; reports the first one out of range
    /// (see [`GovernorSettings::problems`] for all of them).
    pub fn validate(&self) -> Result<(), SettingProblem> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every value out of its documented range.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        let (floor, ceiling) = (self.floor, self.ceiling);
        // Each check states what is valid; every comparison with NaN is false, so NaN is refused.
        p.check(
            floor.is_finite() && floor >= 1.0,
            "floor",
            floor,
            "a finite number of at least 1",
        );
        p.check(
            ceiling.is_finite() && ceiling >= floor,
            "ceiling",
            ceiling,
            format_args!("finite and at least the floor ({floor})"),
        );
        p.check(
            self.initial_limit >= floor && self.initial_limit <= ceiling,
            "initial_limit",
            self.initial_limit,
            format_args!("within the floor and the ceiling ({floor}–{ceiling})"),
        );
        p.check(
            self.increase.is_finite() && self.increase > 0.0,
            "increase",
            self.increase,
            "finite and above 0",
        );
        p.check(
            self.decrease_factor > 0.0 && self.decrease_factor < 1.0,
            "decrease_factor",
            self.decrease_factor,
            "strictly between 0 and 1",
        );
        p.check(
            !self.max_pause.is_zero() && self.max_pause <= MAX_PAUSE_LIMIT,
            "max_pause",
            shown(self.max_pause),
            "above zero and at most 7 days",
        );
        p.check(
            !self.probe_interval.is_zero() && self.probe_interval <= Duration::from_secs(3600),
            "probe_interval",
            shown(self.probe_interval),
            "above zero and at most 1h",
        );
        p.into_vec()
    }
}

/// What one attempt that reached the network told us about the endpoint.
///
/// Shed and paused deliveries are never observations (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// A 2xx answer: the endpoint kept up, so the limit grows additively.
    Success,
    /// 429, 502, 503 or 504: the endpoint asked us to slow down, with its `Retry-After` if any.
    Throttled {
        /// The parsed `Retry-After` delay, before clamping to `max_pause`.
        retry_after: Option<Duration>,
    },
    /// No answer within the deadline: treated as overload.
    Timeout,
    /// The connection was refused or reset before a request was sent: treated as overload.
    ConnectFailure,
    /// Any other failure (500, 3xx, 4xx): a bug on their side, not load, so the limit is unchanged.
    OtherFailure,
}

impl Observation {
    /// Classifies an HTTP status as the governor sees it; `retry_after` is kept only when throttled.
    pub fn from_http_status(status: u16, retry_after: Option<Duration>) -> Self {
        match status {
            200..=299 => Self::Success,
            429 | 502 | 503 | 504 => Self::Throttled { retry_after },
            _ => Self::OtherFailure,
        }
    }
}

/// The governor's memory for one endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GovernorState {
    /// Current concurrency limit (concurrent attempts), kept within `[floor, ceiling]` by [`step`].
    pub limit: f64,
    /// No attempt may start before this instant (a `Retry-After`); `None` when not paused.
    pub paused_until: Option<Instant>,
    /// When the limit was last decreased: congestion signals from attempts sent before it are
    /// the same congestion episode and do not decrease it again (see [`step_sent`]).
    pub decreased_at: Option<Instant>,
    /// What the endpoint is known to take (see the module docs); `None` before any throttle.
    pub safe: Option<f64>,
    /// Since when the limit has held at `safe` (the probe waits from here).
    pub holding_since: Option<Instant>,
    /// Probes that met a throttle since the last that held: the wait before the next probe is
    /// `probe_interval × 2^failed_probes`, at most [`PROBE_BACKOFF_LIMIT`]×.
    pub failed_probes: u32,
}

impl GovernorState {
    /// The state of an endpoint not seen before: `initial_limit`, not paused.
    pub fn new(settings: &GovernorSettings) -> Self {
        Self {
            limit: settings.initial_limit,
            paused_until: None,
            decreased_at: None,
            safe: None,
            holding_since: None,
            failed_probes: 0,
        }
    }

    /// How long the limit holds at the safe limit before the next probe.
    pub fn probe_wait(&self, settings: &GovernorSettings) -> Duration {
        let factor = 1u32
            .checked_shl(self.failed_probes)
            .unwrap_or(u32::MAX)
            .min(PROBE_BACKOFF_LIMIT);
        settings.probe_interval.saturating_mul(factor)
    }
}

/// How the attempt an observation comes from was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// When it left.
    pub at: Instant,
    /// Whether the limit bound while it was out: the lane held as many attempts as the limit
    /// allows, or deliveries waited for it. Only then may a success raise the limit past what
    /// is known to be safe (see the module docs).
    pub limit_bound: bool,
}

/// Applies one observation made at `now` and returns the next state.
///
/// A success grows the limit (see the module docs: fast up to the safe limit, then a hold of
/// `probe_interval`, then +`increase` per round trip) up to `ceiling`; a throttle, timeout or
/// connect failure multiplies it by `decrease_factor` (down to `floor`) and moves the safe limit;
/// other failures leave it alone. A throttle carrying a `Retry-After` pauses the endpoint until
/// `now + min(retry_after, max_pause)`, never shortening a pause that already ends later. A pause
/// that has ended is forgotten.
pub fn step(
    settings: &GovernorSettings,
    state: GovernorState,
    obs: &Observation,
    now: Instant,
) -> GovernorState {
    apply(settings, state, obs, true, now)
}

/// [`step`] for an attempt whose limit did or did not bind (see [`Sent::limit_bound`]).
fn apply(
    settings: &GovernorSettings,
    state: GovernorState,
    obs: &Observation,
    limit_bound: bool,
    now: Instant,
) -> GovernorState {
    // A corrupt (NaN) limit restarts from the floor rather than jumping to the ceiling.
    let limit = if state.limit.is_nan() {
        settings.floor
    } else {
        state.limit
    };
    let clamp = |x: f64| x.min(settings.ceiling).max(settings.floor);
    let mut next = GovernorState { limit, ..state };
    match obs {
        Observation::Success => grow(settings, &mut next, limit_bound, now),
        Observation::Throttled { .. } | Observation::Timeout | Observation::ConnectFailure => {
            let decreased = clamp(limit * settings.decrease_factor);
            // The concurrency that met the congestion, against what was thought safe.
            let met = limit.floor();
            (next.safe, next.failed_probes) = match state.safe {
                // A probe that failed: the next waits longer.
                Some(safe) if met > safe => (
                    Some(clamp(met - 1.0)),
                    state.failed_probes.saturating_add(1),
                ),
                // At or below the safe limit: the endpoint takes less than it did; find it again.
                Some(_) => (Some(decreased), 0),
                // The first throttle: it took what it was given just below.
                None => (Some(clamp(met - 1.0)), 0),
            };
            next.limit = decreased;
            next.holding_since = None;
        }
        Observation::OtherFailure => {}
    }
    next.limit = clamp(next.limit);
    let requested = match obs {
        Observation::Throttled {
            retry_after: Some(delay),
        } => now.checked_add((*delay).min(settings.max_pause)),
        _ => None,
    };
    next.paused_until = match (state.paused_until.filter(|until| *until > now), requested) {
        (Some(current), Some(requested)) => Some(current.max(requested)),
        (current, requested) => current.or(requested),
    };
    next
}

/// One success: recover fast to the safe limit, hold there for the probe wait, then probe
/// additively (+`increase` per round trip: `increase ÷ limit` per success) while the limit binds;
/// a probe that reaches two above the safe limit has held.
fn grow(settings: &GovernorSettings, state: &mut GovernorState, limit_bound: bool, now: Instant) {
    let additive = settings.increase / state.limit.max(1.0);
    match state.safe {
        None if limit_bound => state.limit += additive,
        None => {}
        Some(safe) if state.limit < safe => {
            state.limit = (state.limit + settings.increase).min(safe);
            if state.limit >= safe {
                state.holding_since = Some(now);
            }
        }
        Some(safe) => {
            let since = *state.holding_since.get_or_insert(now);
            if limit_bound && now.saturating_duration_since(since) >= state.probe_wait(settings) {
                state.limit += additive;
                // Two round trips at one above the safe limit without a throttle: it is safe.
                if state.limit.floor() >= safe + 2.0 {
                    state.safe = Some(state.limit.floor() - 1.0);
                    state.failed_probes = 0;
                }
            }
        }
    }
}

/// [`step`] for an attempt sent at `sent_at`: decrease at most once per round trip.
///
/// When a batch of attempts overshoots an endpoint's capacity, every one of them comes back
/// throttled; halving once per response would collapse the limit to the floor for a single
/// overload. Like TCP, only congestion signals from attempts sent after the last decrease
/// decrease the limit again; earlier ones still honour their `Retry-After` pause.
pub fn step_sent(
    settings: &GovernorSettings,
    state: GovernorState,
    obs: &Observation,
    sent: Sent,
    now: Instant,
) -> GovernorState {
    let decreasing = matches!(
        obs,
        Observation::Throttled { .. } | Observation::Timeout | Observation::ConnectFailure
    );
    let same_episode = decreasing && state.decreased_at.is_some_and(|at| at >= sent.at);
    let mut next = apply(settings, state, obs, sent.limit_bound, now);
    if same_episode {
        // Only the pause of this signal counts: the limit and what was learnt stay.
        next = GovernorState {
            paused_until: next.paused_until,
            ..state
        };
        next.limit = state.limit.min(settings.ceiling).max(settings.floor);
    } else if decreasing {
        next.decreased_at = Some(now);
    }
    next
}

/// How many attempts may be in flight: `min(lane_size, floor(limit))`, and never fewer than 1.
pub fn effective_limit(state: &GovernorState, lane_size: u32) -> u32 {
    // `as` saturates for floats (NaN becomes 0), which the `max(1)` then lifts.
    let governed = state.limit.floor() as u32;
    governed.min(lane_size).max(1)
}

/// Whether a `Retry-After` pause is still in force at `now`.
pub fn is_paused(state: &GovernorState, now: Instant) -> bool {
    state.paused_until.is_some_and(|until| until > now)
}

#[cfg(test)]
mod tests;
