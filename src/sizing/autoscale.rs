//! Replica controller: proportional on the age of the oldest ready message, damped and clamped.
//!
//! Scaling on age rather than depth tracks the thing the latency objective is written about and
//! reacts at once when service time degrades. The controller is a pure function so an autoscaler
//! (or a test) can drive it with any readings.

use serde::Serialize;
use thiserror::Error;

use crate::setting::{Problems, SettingProblem, joined};

/// One or more [`ScalingSettings`] values were invalid; every problem is listed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid scaling policy: {}", joined(.0))]
pub struct PolicyError(pub Vec<SettingProblem>);

/// Raw controller settings, as read from configuration; validate with [`ScalingPolicy::try_new`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScalingSettings {
    /// Oldest-message age in seconds above which the controller scales out (default 30).
    pub target_age_s: f64,
    /// Replicas never go below this; must be at least 1 (default 3).
    pub min_replicas: u32,
    /// Upper bound for age-driven scale-out (default 60).
    pub max_replicas: u32,
    /// Most replicas added in one interval (default 8).
    pub max_step_up: u32,
    /// Most replicas removed in one interval (default 1).
    pub max_step_down: u32,
    /// Oldest-message age in seconds below which the controller scales in (default 10).
    pub scale_in_below_s: f64,
}

impl Default for ScalingSettings {
    fn default() -> Self {
        Self {
            target_age_s: 30.0,
            min_replicas: 3,
            max_replicas: 60,
            max_step_up: 8,
            max_step_down: 1,
            scale_in_below_s: 10.0,
        }
    }
}

impl ScalingSettings {
    /// Every value out of range: ages finite, the target above zero and the scale-in age
    /// not past it; at least one replica and one replica per step; `max_replicas` not below
    /// `min_replicas`.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        let (target, below) = (self.target_age_s, self.scale_in_below_s);
        // A comparison with NaN is false, so NaN is refused too.
        p.check(
            target.is_finite() && target > 0.0,
            "target_age_s",
            target,
            "above 0",
        );
        p.check(
            below.is_finite() && below >= 0.0,
            "scale_in_below_s",
            below,
            "at least 0",
        );
        p.check(
            !(below.is_finite() && below >= 0.0) || below <= target,
            "scale_in_below_s",
            below,
            format_args!("at most target_age_s ({target})"),
        );
        p.check(
            self.min_replicas >= 1,
            "min_replicas",
            self.min_replicas,
            "at least 1 (never scale to zero)",
        );
        p.check(
            self.max_replicas >= self.min_replicas,
            "max_replicas",
            self.max_replicas,
            format_args!("at least min_replicas ({})", self.min_replicas),
        );
        for (field, step) in [
            ("max_step_up", self.max_step_up),
            ("max_step_down", self.max_step_down),
        ] {
            p.check(step >= 1, field, step, "at least 1");
        }
        p.into_vec()
    }
}

/// Validated controller settings: `min_replicas >= 1`, so the controller never returns zero.
///
/// `Default`: a 30 s age target, 3..=60 replicas, +8 / -1 steps, scale in below 10 s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ScalingPolicy(ScalingSettings);

impl ScalingPolicy {
    /// Checks `settings`, reporting every invalid value together (see
    /// [`ScalingSettings::problems`]).
    pub fn try_new(settings: ScalingSettings) -> Result<Self, PolicyError> {
        let problems = settings.problems();
        match problems.is_empty() {
            true => Ok(Self(settings)),
            false => Err(PolicyError(problems)),
        }
    }

    /// The validated settings.
    pub fn settings(&self) -> &ScalingSettings {
        &self.0
    }
}

impl TryFrom<ScalingSettings> for ScalingPolicy {
    type Error = PolicyError;

    fn try_from(settings: ScalingSettings) -> Result<Self, Self::Error> {
        Self::try_new(settings)
    }
}

/// Replica count for the next interval.
///
/// * Oldest ready age above target: grow in proportion to `age / target` (at most doubling),
///   by at most `max_step_up`, capped at `max_replicas`.
/// * Age below `scale_in_below_s`: shrink by `max_step_down`.
/// * Otherwise (the deadband, or a NaN age reading): hold.
///
/// The result is never below the floor `max(min_replicas, ceil(rate × service time / tasks))`;
/// that Little's Law floor wins even over `max_replicas`, because fewer replicas than it cannot
/// keep up at all. A `tasks_per_replica` of 0 is treated as 1. Never returns 0.
pub fn desired_replicas(
    current: u32,
    oldest_age_s: f64,
    arrival_rate_per_s: f64,
    service_time_s: f64,
    tasks_per_replica: u32,
    policy: &ScalingPolicy,
) -> u32 {
    let s = policy.settings();
    let busy_tasks = arrival_rate_per_s * service_time_s;
    // `as` saturates: NaN or negative readings give 0, so the floor falls back to min_replicas.
    let littles_floor = (busy_tasks / f64::from(tasks_per_replica.max(1))).ceil() as u32;
    let floor = s.min_replicas.max(littles_floor).max(1);

    let proposed = if oldest_age_s > s.target_age_s {
        let ratio = (oldest_age_s / s.target_age_s).min(2.0);
        let proportional = (f64::from(current) * ratio) as u32;
        current
            .saturating_add(s.max_step_up)
            .min(proportional.saturating_add(1))
    } else if oldest_age_s < s.scale_in_below_s {
        current.saturating_sub(s.max_step_down)
    } else {
        current
    };
    floor.max(s.max_replicas.min(proposed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ScalingPolicy {
        ScalingPolicy::default()
    }

    #[test]
    fn step_up_is_clamped() {
        // Age 4× target would double 20 → 41, but at most +8 per interval.
        assert_eq!(desired_replicas(20, 120.0, 0.0, 1.0, 160, &policy()), 28);
        // Small pools grow proportionally: 5 × (45/30) = 7.5 → 7, + 1.
        assert_eq!(desired_replicas(5, 45.0, 0.0, 1.0, 160, &policy()), 8);
        // Never above max_replicas when the floor allows it.
        assert_eq!(desired_replicas(58, 120.0, 0.0, 1.0, 160, &policy()), 60);
    }

    #[test]
    fn step_down_is_one_replica() {
        assert_eq!(desired_replicas(20, 2.0, 0.0, 1.0, 160, &policy()), 19);
        let fast = ScalingSettings {
            max_step_down: 3,
            ..ScalingSettings::default()
        };
        let fast = ScalingPolicy::try_new(fast).expect("valid policy");
        assert_eq!(desired_replicas(20, 2.0, 0.0, 1.0, 160, &fast), 17);
    }

    #[test]
    fn deadband_holds() {
        for age in [10.0, 15.0, 29.9, 30.0, f64::NAN] {
            assert_eq!(
                desired_replicas(20, age, 0.0, 1.0, 160, &policy()),
                20,
                "{age}"
            );
        }
    }

    #[test]
    fn littles_law_floor_is_enforced() {
        // 900/s × 1.4 s = 1,260 busy tasks / 160 per replica → 8 replicas at least.
        assert_eq!(desired_replicas(8, 1.0, 900.0, 1.4, 160, &policy()), 8);
        assert_eq!(desired_replicas(4, 20.0, 900.0, 1.4, 160, &policy()), 8);
        // The floor wins even over max_replicas.
        assert_eq!(
            desired_replicas(60, 1.0, 10_000.0, 1.0, 100, &policy()),
            100
        );
    }

    #[test]
    fn never_below_min_replicas_nor_zero() {
        assert_eq!(desired_replicas(3, 0.0, 0.0, 1.0, 160, &policy()), 3);
        assert_eq!(desired_replicas(0, 0.0, 0.0, 1.0, 0, &policy()), 3);
        let one = ScalingSettings {
            min_replicas: 1,
            ..ScalingSettings::default()
        };
        let one = ScalingPolicy::try_new(one).expect("valid policy");
        for current in 0..5 {
            assert!(desired_replicas(current, 0.0, f64::NAN, 1.0, 160, &one) >= 1);
        }
        assert_eq!(desired_replicas(0, 100.0, 0.0, 1.0, 160, &one), 1);
    }

    #[test]
    fn invalid_policies_are_refused_with_every_reason() {
        let bad = ScalingSettings {
            target_age_s: 0.0,
            min_replicas: 0,
            max_step_up: 0,
            max_step_down: 0,
            scale_in_below_s: -1.0,
            ..ScalingSettings::default()
        };
        let PolicyError(problems) = ScalingPolicy::try_new(bad).expect_err("invalid");
        assert_eq!(problems.len(), 5, "{problems:?}");
        let inverted = ScalingSettings {
            min_replicas: 10,
            max_replicas: 5,
            scale_in_below_s: 40.0,
            ..ScalingSettings::default()
        };
        let PolicyError(problems) = ScalingPolicy::try_new(inverted).expect_err("invalid");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(ScalingPolicy::try_new(ScalingSettings::default()).is_ok());
        assert_eq!(ScalingSettings::default().problems(), []);
        let edges = ScalingSettings {
            target_age_s: f64::MIN_POSITIVE,
            scale_in_below_s: 0.0,
            min_replicas: 1,
            max_replicas: 1,
            max_step_up: 1,
            max_step_down: 1,
        };
        assert_eq!(edges.problems(), []);
        let at_target = ScalingSettings {
            scale_in_below_s: 30.0,
            ..ScalingSettings::default()
        };
        assert_eq!(at_target.problems(), []);
    }
}
