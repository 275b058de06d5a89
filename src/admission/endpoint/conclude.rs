//! What one finished attempt changes in its endpoint's state, decided under the state's lock:
//! pure, so each rule is tested alone. The caller then writes what it returns (breaker events,
//! the failing-since mark, a disable) outside the lock.

use std::time::Duration;

use tokio::time::Instant;

use super::{EndpointPolicy, State};
use crate::admission::breaker::Transition;
use crate::admission::governor::{self, Observation};
use crate::stats::AttemptKind;

/// What an attempt came to, as the endpoint's state learns it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// What the governor learns.
    pub observation: Observation,
    /// Did the attempt fail (for the error breaker and auto-disable)?
    pub failed: bool,
    /// How it ended, for the evidence.
    pub kind: AttemptKind,
    /// Does the answer disable the endpoint by itself (410 Gone)?
    pub disables: bool,
}

/// How an attempt moves the endpoint's unbroken run of failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailingChange {
    /// Nothing to write.
    Unchanged,
    /// A run of failures began now (milliseconds since the epoch).
    Began(i64),
    /// The run ended: the endpoint answered.
    Ended,
    /// Failing since then for at least the auto-disable period: disable the endpoint.
    Disable {
        /// When the run began.
        since_ms: i64,
    },
}

/// What the caller must do after the lock is released.
#[derive(Debug, Clone, PartialEq)]
pub struct Effects {
    /// A breaker transition to record as an endpoint event.
    pub transition: Option<Transition>,
    /// The change to the failing-since mark, or a disable.
    pub failing: FailingChange,
}

/// How often an endpoint's lane is sized again from its window.
pub const LANE_RESIZE: Duration = Duration::from_secs(5);

/// One finished attempt, as the lane saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How long it took.
    pub took: Duration,
    /// The endpoint's lane size: the governor's ceiling.
    pub lane: u32,
    /// Whether the endpoint's limit bound while it was out (its lane was full or deliveries
    /// waited at it): only then may a success raise the governor past what is known safe.
    pub limit_bound: bool,
}

/// Apply one `attempt`, decided as `decision`, to `state`: the governor (the one place a
/// Retry-After pause is decided, capped at `max_pause`, never shortening a longer one; its
/// ceiling is the endpoint's lane), the evidence window and the lane sized from it, the
/// service-time average claims are sized by, the breaker, and the run of failures. An endpoint
/// the decision disables itself (410 Gone) is not also auto-disabled; a disabled one is held in
/// memory from here on.
pub(super) fn conclude<C>(
    state: &mut State<C>,
    policy: &EndpointPolicy<'_>,
    decision: &Outcome,
    attempt: Attempt,
    now: Instant,
    now_ms: i64,
) -> Effects {
    let Attempt {
        took,
        lane,
        limit_bound,
    } = attempt;
    let sent = governor::Sent {
        at: now.checked_sub(took).unwrap_or(now),
        limit_bound,
    };
    let governor_settings = governor::GovernorSettings {
        ceiling: policy
            .governor
            .ceiling
            .min(f64::from(lane))
            .max(policy.governor.floor),
        ..policy.governor.clone()
    };
    state.governor = governor::step_sent(
        &governor_settings,
        state.governor,
        &decision.observation,
        sent,
        now,
    );
    state.window.record(now, took, decision.kind);
    state.resize_lane(policy, LANE_RESIZE, now);
    state.service_ewma = Some(match state.service_ewma {
        Some(avg) => avg.mul_f64(0.8) + took.mul_f64(0.2),
        None => took,
    });
    let transition = state.breaker.record(now, took, decision.failed);
    let mut failing = match (decision.failed, state.failing_since_ms) {
        (true, None) => {
            state.failing_since_ms = Some(now_ms);
            FailingChange::Began(now_ms)
        }
        (false, Some(_)) => {
            state.failing_since_ms = None;
            FailingChange::Ended
        }
        _ => FailingChange::Unchanged,
    };
    if let Some(since_ms) = state.failing_since_ms
        && now_ms - since_ms >= policy.auto_disable_after.as_millis() as i64
        && !decision.disables
    {
        failing = FailingChange::Disable { since_ms };
    }
    // A disable holds this process's next deliveries at once, before the settler writes it
    // (and the retry of this one); the settler enables the endpoint again if the store refuses.
    if decision.disables || matches!(failing, FailingChange::Disable { .. }) {
        state.enabled = false;
    }
    Effects {
        transition,
        failing,
    }
}

impl<C> State<C> {
    /// A delivery reached admission: counted in the window and towards the next lane sizing.
    pub(super) fn record_offered(&mut self, now: Instant) {
        self.window.record_offered(now);
        self.offered_since_sized = self.offered_since_sized.saturating_add(1);
    }

    /// Size the lane again when the last sizing is `every` old (Little's Law: offered rate ×
    /// mean service time × headroom, widened until Poisson bursts rarely wait past the lane
    /// deadline; see [`sized_by_load`](crate::admission::lane::sized_by_load)), or forget the
    /// measurement when the window holds too few attempts to say anything. The rate is the
    /// higher of the window's and the one since the last sizing: a lane follows a rise in
    /// traffic within one sizing (a lane too small for it is offered what it can claim, and
    /// grows by the headroom each time) instead of the minutes the window's average takes,
    /// and falls back to the window's rate when the rise is over.
    fn resize_lane(&mut self, policy: &EndpointPolicy<'_>, every: Duration, now: Instant) {
        let since = match self.lane_sized_at {
            Some(at) if now.saturating_duration_since(at) < every => return,
            Some(at) => now.saturating_duration_since(at),
            None => Duration::ZERO,
        };
        self.lane_sized_at = Some(now);
        let recent = match since.as_secs_f64() {
            secs if secs > 0.0 => f64::from(self.offered_since_sized) / secs,
            _ => 0.0,
        };
        self.offered_since_sized = 0;
        let w = self.window.snapshot(now);
        self.measured_lane = match w.mean {
            Some(mean) if w.samples >= crate::admission::lane::SIZING_MIN_SAMPLES => {
                // Offers held by a rate limit come back at their turns: what the lane carries
                // is at most the limit.
                let offered = w.offered_per_s.max(recent);
                let offered = self
                    .rate
                    .as_ref()
                    .map_or(offered, |t| offered.min(t.limit().per_second()));
                Some(crate::admission::lane::sized_by_load(
                    offered,
                    mean,
                    policy.lane_headroom,
                    policy.lane_deadline,
                ))
            }
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::LaneBasis;
    use crate::admission::breaker::{Breaker, BreakerSettings};
    use crate::admission::governor::{GovernorSettings, GovernorState};
    use crate::stats::Window;

    /// The dispatcher's defaults: a lane of 8, 1.5× headroom, a 500 ms lane deadline, a quarter
    /// of the pool at most, disabled after five days of failures.
    struct Settings {
        governor: GovernorSettings,
        auto_disable_after: Duration,
    }

    impl Default for Settings {
        fn default() -> Self {
            Self {
                governor: GovernorSettings::default(),
                auto_disable_after: Duration::from_secs(5 * 24 * 3600),
            }
        }
    }

    impl Settings {
        fn policy(&self, concurrency: u32) -> EndpointPolicy<'_> {
            EndpointPolicy {
                lane_default: 8,
                lane_ceiling: ((f64::from(concurrency) * 0.25).floor() as u32).max(1),
                lane_headroom: 1.5,
                lane_deadline: Duration::from_millis(500),
                governor: &self.governor,
                auto_disable_after: self.auto_disable_after,
            }
        }
    }

    fn state(now: Instant) -> State<()> {
        let settings = Settings::default();
        State {
            parsed: (),
            enabled: true,
            lane_override: None,
            attempt_total: Duration::from_secs(15),
            governor: GovernorState::new(&settings.governor),
            breaker: Breaker::new(BreakerSettings::default(), now),
            window: Window::new(now, Duration::from_secs(300), 10),
            failing_since_ms: None,
            service_ewma: None,
            measured_lane: None,
            lane_sized_at: None,
            offered_since_sized: 0,
            rate: None,
        }
    }

    fn decision(failed: bool, observation: Observation, disable: Option<&str>) -> Outcome {
        Outcome {
            observation,
            disables: disable.is_some(),
            failed,
            kind: if failed {
                crate::stats::AttemptKind::Other
            } else {
                crate::stats::AttemptKind::Delivered
            },
        }
    }

    const MS: Duration = Duration::from_millis(40);

    /// An attempt that took `took` in a lane of `lane`, sent while the limit bound.
    fn took(took: Duration, lane: u32) -> Attempt {
        Attempt {
            took,
            lane,
            limit_bound: true,
        }
    }

    /// The first failure starts the run; more failures leave it; a success ends it.
    #[test]
    fn a_run_of_failures_begins_once_and_ends_on_success() {
        let (settings, now) = (Settings::default(), Instant::now());
        let mut s = state(now);
        let fail = decision(true, Observation::OtherFailure, None);
        let e = conclude(&mut s, &settings.policy(64), &fail, took(MS, 8), now, 1_000);
        assert_eq!(e.failing, FailingChange::Began(1_000));
        let e = conclude(&mut s, &settings.policy(64), &fail, took(MS, 8), now, 2_000);
        assert_eq!(e.failing, FailingChange::Unchanged);
        assert_eq!(s.failing_since_ms, Some(1_000));
        let ok = decision(false, Observation::Success, None);
        let e = conclude(&mut s, &settings.policy(64), &ok, took(MS, 8), now, 3_000);
        assert_eq!(e.failing, FailingChange::Ended);
        assert_eq!(s.failing_since_ms, None);
    }

    /// Failing for the whole auto-disable period disables the endpoint; a 410 that disables it
    /// by itself is not reported twice.
    #[test]
    fn failing_past_the_period_disables_unless_the_answer_already_does() {
        let (settings, now) = (Settings::default(), Instant::now());
        let period = settings.auto_disable_after.as_millis() as i64;
        let mut s = state(now);
        let fail = decision(true, Observation::OtherFailure, None);
        conclude(&mut s, &settings.policy(64), &fail, took(MS, 8), now, 0);
        let e = conclude(
            &mut s,
            &settings.policy(64),
            &fail,
            took(MS, 8),
            now,
            period - 1,
        );
        assert_eq!(e.failing, FailingChange::Unchanged);
        let e = conclude(
            &mut s,
            &settings.policy(64),
            &fail,
            took(MS, 8),
            now,
            period,
        );
        assert_eq!(e.failing, FailingChange::Disable { since_ms: 0 });
        let gone = decision(
            true,
            Observation::OtherFailure,
            Some("endpoint answered 410 Gone"),
        );
        let e = conclude(
            &mut s,
            &settings.policy(64),
            &gone,
            took(MS, 8),
            now,
            period + 1,
        );
        assert_eq!(e.failing, FailingChange::Unchanged);
    }

    /// A 429 with Retry-After pauses the endpoint through the governor, capped at `max_pause`,
    /// and through nothing else: the breaker stays closed, and the rest of the state moves as
    /// for any failed attempt.
    #[test]
    fn retry_after_pauses_through_the_governor_only() {
        use crate::admission::breaker::BreakerState;
        let (settings, now) = (Settings::default(), Instant::now());
        let mut s = state(now);
        let throttled = decision(
            true,
            Observation::Throttled {
                retry_after: Some(Duration::from_secs(30)),
            },
            None,
        );
        let effects = conclude(
            &mut s,
            &settings.policy(64),
            &throttled,
            took(MS, 8),
            now,
            0,
        );
        assert_eq!(s.governor.paused_until, Some(now + Duration::from_secs(30)));
        assert_eq!(
            effects,
            Effects {
                transition: None,
                failing: FailingChange::Began(0),
            }
        );
        assert_eq!(s.breaker.state(), BreakerState::Closed);
        assert!(s.enabled);
        let forever = decision(
            true,
            Observation::Throttled {
                retry_after: Some(Duration::from_secs(30 * 86_400)),
            },
            None,
        );
        let effects = conclude(&mut s, &settings.policy(64), &forever, took(MS, 8), now, 0);
        assert_eq!(
            s.governor.paused_until,
            Some(now + settings.governor.max_pause)
        );
        assert_eq!(effects.transition, None);
        assert_eq!(s.breaker.state(), BreakerState::Closed);
    }

    /// Service time feeds the average claims are sized by: the first attempt sets it, later
    /// ones move it by a fifth of the difference.
    #[test]
    fn the_service_average_moves_by_a_fifth() {
        let (settings, now) = (Settings::default(), Instant::now());
        let mut s = state(now);
        let ok = decision(false, Observation::Success, None);
        conclude(
            &mut s,
            &settings.policy(64),
            &ok,
            took(Duration::from_millis(100), 8),
            now,
            0,
        );
        assert_eq!(s.service_ewma, Some(Duration::from_millis(100)));
        conclude(
            &mut s,
            &settings.policy(64),
            &ok,
            took(Duration::from_millis(600), 8),
            now,
            0,
        );
        assert_eq!(s.service_ewma, Some(Duration::from_millis(200)));
        assert_eq!(s.window.snapshot(now).samples, 2);
    }

    /// The governor never grows past the endpoint's lane: its ceiling is the lane.
    #[test]
    fn the_governor_ceiling_is_the_lane() {
        let (settings, now) = (Settings::default(), Instant::now());
        let mut s = state(now);
        let ok = decision(false, Observation::Success, None);
        for i in 0..2_000u64 {
            let at = now + Duration::from_millis(i);
            conclude(&mut s, &settings.policy(64), &ok, took(MS, 3), at, 0);
        }
        assert_eq!(s.governor.limit, 3.0);
    }

    /// 20 deliveries/s answered in 200 ms hold 4 attempts on average: once the window has
    /// enough of them the lane is ⌈4 × 1.5⌉ = 6; before that, the default; an override wins.
    #[test]
    fn the_lane_follows_littles_law_once_measured() {
        let (settings, now) = (Settings::default(), Instant::now());
        let mut s = state(now);
        let ok = decision(false, Observation::Success, None);
        assert_eq!(s.lane_basis(), LaneBasis::Default);
        for i in 0..200u64 {
            let at = now + Duration::from_millis(50 * i);
            s.record_offered(at);
            conclude(
                &mut s,
                &settings.policy(512),
                &ok,
                took(Duration::from_millis(200), 8),
                at,
                0,
            );
        }
        // 6, or 7 when the window's count and span round the rate just above 20/s.
        let lane = s.measured_lane.expect("measured");
        assert!((6..=7).contains(&lane), "lane {lane}");
        assert_eq!(s.lane_size(&settings.policy(512)), lane);
        assert_eq!(s.lane_basis(), LaneBasis::Measured);
        // The fairness ceiling still caps it, and an operator's lane overrides it.
        assert_eq!(s.lane_size(&settings.policy(16)), 4);
        s.lane_override = Some(2);
        assert_eq!(s.lane_size(&settings.policy(512)), 2);
        assert_eq!(s.lane_basis(), LaneBasis::Override);
    }

    /// Traffic that rises from 4/s to 16/s (answered in 200 ms) widens the lane within one
    /// sizing, ⌈16 × 0.2 × 1.5⌉ = 5, where the five-minute window alone would still say 3 (0.8
    /// erlangs: Little's Law × 1.5 gives 2, widened to 3 for its bursts); when it falls back,
    /// the window's rate (5.2/s over the 100 s) decides again.
    #[test]
    fn a_rise_in_traffic_widens_the_lane_within_one_sizing() {
        let (settings, start) = (Settings::default(), Instant::now());
        let mut s = state(start);
        let ok = decision(false, Observation::Success, None);
        let mut at = start;
        let mut offer = |s: &mut State<()>, per_s: u64, secs: u64| {
            for _ in 0..per_s * secs {
                at += Duration::from_millis(1_000 / per_s);
                s.record_offered(at);
                let attempt = took(Duration::from_millis(200), 64);
                conclude(s, &settings.policy(64), &ok, attempt, at, 0);
            }
        };
        offer(&mut s, 4, 60);
        assert_eq!(s.measured_lane, Some(3));
        offer(&mut s, 16, 10);
        assert_eq!(s.measured_lane, Some(5));
        offer(&mut s, 4, 30);
        assert_eq!(s.measured_lane, Some(3));
    }
}
