//! The autoscaling signal as data: [`desired_replicas`] plus the figures and the reason behind
//! it, for the `sluice_desired_replicas` gauge, `GET /v1/scale` and logs.

use serde::Serialize;
use utoipa::ToSchema;

use super::autoscale::{ScalingPolicy, desired_replicas};

/// Which way the controller moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScaleDirection {
    /// More replicas than now.
    Up,
    /// Fewer replicas than now.
    Down,
    /// As many as now.
    Hold,
}

/// What bounded the answer, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScaleLimit {
    /// The proportional (or one-step) proposal stood.
    None,
    /// `max_step_up` cut a larger proportional step.
    StepUp,
    /// `max_replicas` cut the proposal.
    MaxReplicas,
    /// The floor (`min_replicas` or Little's Law) raised the proposal.
    Floor,
}

/// The controller's answer and why; serialises as the body of `GET /v1/scale`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ScaleSignal {
    /// Replicas wanted for the next interval (never 0).
    pub desired_replicas: u32,
    /// Replicas running now, as given.
    pub current_replicas: u32,
    /// Which way that is.
    pub direction: ScaleDirection,
    /// What bounded it.
    pub limited_by: ScaleLimit,
    /// The lowest count allowed: `max(min_replicas, littles_law_replicas, 1)`.
    pub floor: u32,
    /// `⌈arrival rate × mean service time ÷ tasks per replica⌉`: replicas merely to keep up.
    pub littles_law_replicas: u32,
    /// Arrival rate × mean service time: tasks busy on average.
    pub busy_tasks: f64,
    /// The age reading used, seconds (max over tenants).
    pub oldest_ready_age_s: f64,
    /// Scale out above this age, seconds.
    pub target_age_s: f64,
    /// Scale in below this age, seconds.
    pub scale_in_below_s: f64,
    /// One sentence for people.
    pub reason: String,
}

/// The replica signal for the next interval, with its reasoning; see [`desired_replicas`] for
/// the rules (proportional on oldest ready age, clamped steps, deadband, Little's Law floor,
/// never zero). `oldest_ready_age_s` is the maximum over tenants; a NaN reading holds.
pub fn scale_signal(
    current_replicas: u32,
    oldest_ready_age_s: f64,
    arrival_rate_per_s: f64,
    mean_service_s: f64,
    tasks_per_replica: u32,
    policy: &ScalingPolicy,
) -> ScaleSignal {
    let s = policy.settings();
    let desired = desired_replicas(
        current_replicas,
        oldest_ready_age_s,
        arrival_rate_per_s,
        mean_service_s,
        tasks_per_replica,
        policy,
    );
    let busy = arrival_rate_per_s * mean_service_s;
    let busy_tasks = if busy.is_finite() && busy > 0.0 {
        busy
    } else {
        0.0
    };
    // Same arithmetic as `desired_replicas`, so the floor reported is the floor applied.
    let littles = (busy / f64::from(tasks_per_replica.max(1))).ceil() as u32;
    let floor = s.min_replicas.max(littles).max(1);
    let age = oldest_ready_age_s;

    let (proposed, mut reason) = if age > s.target_age_s {
        let ratio = (age / s.target_age_s).min(2.0);
        let proportional = ((f64::from(current_replicas) * ratio) as u32).saturating_add(1);
        let step_cap = current_replicas.saturating_add(s.max_step_up);
        let text = format!(
            "oldest ready age {:.1} s is above the {:.0} s target: scale out ×{ratio:.2}",
            age, s.target_age_s
        );
        (proportional.min(step_cap), text)
    } else if age < s.scale_in_below_s {
        let text = format!(
            "oldest ready age {:.1} s is below {:.0} s: scale in by {}",
            age, s.scale_in_below_s, s.max_step_down
        );
        (current_replicas.saturating_sub(s.max_step_down), text)
    } else if age.is_nan() {
        (current_replicas, "no oldest-age reading: hold".to_owned())
    } else {
        let text = format!(
            "oldest ready age {:.1} s is inside the {:.0}–{:.0} s deadband: hold",
            age, s.scale_in_below_s, s.target_age_s
        );
        (current_replicas, text)
    };
    let limited_by = if desired > s.max_replicas.min(proposed) {
        ScaleLimit::Floor
    } else if proposed > s.max_replicas {
        ScaleLimit::MaxReplicas
    } else if age > s.target_age_s
        && ((f64::from(current_replicas) * (age / s.target_age_s).min(2.0)) as u32)
            .saturating_add(1)
            > current_replicas.saturating_add(s.max_step_up)
    {
        ScaleLimit::StepUp
    } else {
        ScaleLimit::None
    };
    match limited_by {
        ScaleLimit::Floor if littles > s.min_replicas => reason.push_str(&format!(
            "; held at the Little's Law floor of {littles} ({busy_tasks:.0} busy tasks ÷ {} per \
             replica)",
            tasks_per_replica.max(1)
        )),
        ScaleLimit::Floor => reason.push_str(&format!("; held at min_replicas {floor}")),
        ScaleLimit::MaxReplicas => {
            reason.push_str(&format!("; capped at max_replicas {}", s.max_replicas));
        }
        ScaleLimit::StepUp => reason.push_str(&format!("; step capped at +{}", s.max_step_up)),
        ScaleLimit::None => {}
    }
    let direction = match desired.cmp(&current_replicas) {
        std::cmp::Ordering::Greater => ScaleDirection::Up,
        std::cmp::Ordering::Less => ScaleDirection::Down,
        std::cmp::Ordering::Equal => ScaleDirection::Hold,
    };
    ScaleSignal {
        desired_replicas: desired,
        current_replicas,
        direction,
        limited_by,
        floor,
        littles_law_replicas: littles,
        busy_tasks,
        oldest_ready_age_s,
        target_age_s: s.target_age_s,
        scale_in_below_s: s.scale_in_below_s,
        reason,
    }
}

/// The age to feed [`scale_signal`]: the largest per-tenant oldest-ready age, in seconds, from
/// [`crate::model::QueueStats::oldest_ready_age_ms`]; 0 when no tenant has ready work.
pub fn max_oldest_ready_age_s(oldest_ready_age_ms: &[(String, i64)]) -> f64 {
    oldest_ready_age_ms
        .iter()
        .map(|(_, ms)| (*ms).max(0) as f64 / 1000.0)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ScalingPolicy {
        ScalingPolicy::default()
    }

    #[test]
    fn signal_matches_the_controller_and_explains_it() {
        for (current, age, rate, service) in [
            (20, 120.0, 0.0, 1.0),
            (5, 45.0, 0.0, 1.0),
            (58, 120.0, 0.0, 1.0),
            (20, 2.0, 0.0, 1.0),
            (4, 20.0, 900.0, 1.4),
            (3, f64::NAN, 0.0, 1.0),
        ] {
            let signal = scale_signal(current, age, rate, service, 160, &policy());
            let expected = desired_replicas(current, age, rate, service, 160, &policy());
            assert_eq!(signal.desired_replicas, expected, "{current} {age}");
            assert!(signal.desired_replicas >= signal.floor);
            assert!(!signal.reason.is_empty());
        }
    }

    #[test]
    fn limits_are_named() {
        let s = scale_signal(20, 120.0, 0.0, 1.0, 160, &policy());
        assert_eq!((s.desired_replicas, s.limited_by), (28, ScaleLimit::StepUp));
        assert!(s.reason.contains("+8"), "{}", s.reason);
        let s = scale_signal(58, 120.0, 0.0, 1.0, 160, &policy());
        assert_eq!(
            (s.desired_replicas, s.limited_by),
            (60, ScaleLimit::MaxReplicas)
        );
        let s = scale_signal(4, 20.0, 900.0, 1.4, 160, &policy());
        assert_eq!((s.desired_replicas, s.limited_by), (8, ScaleLimit::Floor));
        assert_eq!(s.direction, ScaleDirection::Up);
        assert!(s.reason.contains("Little's Law"), "{}", s.reason);
        let s = scale_signal(3, 1.0, 0.0, 1.0, 160, &policy());
        assert_eq!((s.desired_replicas, s.limited_by), (3, ScaleLimit::Floor));
        assert!(s.reason.contains("min_replicas"), "{}", s.reason);
        let s = scale_signal(20, 15.0, 0.0, 1.0, 160, &policy());
        assert_eq!(
            (s.direction, s.limited_by),
            (ScaleDirection::Hold, ScaleLimit::None)
        );
    }

    #[test]
    fn max_age_over_tenants() {
        let ages = vec![("a".to_owned(), 1_500), ("b".to_owned(), 42_000)];
        assert_eq!(max_oldest_ready_age_s(&ages), 42.0);
        assert_eq!(max_oldest_ready_age_s(&[]), 0.0);
    }
}
