//! `history`'s judgements over the phases' numbers: how much slower than the empty store, the
//! target each phase is held to, how much of the history the purge should find due. Pure: no
//! I/O, unit-tested below.

use super::{HISTORY_TARGET, PURGE_TARGET, SPAN_DAYS};

/// The empty store's deliveries/s ÷ this phase's (how many times slower).
pub(super) fn slowdown(empty_per_s: f64, per_s: f64) -> f64 {
    empty_per_s / per_s.max(f64::MIN_POSITIVE)
}

/// This phase's claim p99 ÷ the empty store's (unknown when either is).
pub(super) fn claim_ratio(p99_ms: Option<f64>, empty_p99_ms: Option<f64>) -> Option<f64> {
    p99_ms.zip(empty_p99_ms).map(|(h, e)| h / e.max(1e-3))
}

/// The most a phase may cost against the empty store: the purge is allowed more.
pub(super) fn target_of(phase: &str) -> f64 {
    if phase == "purge" {
        PURGE_TARGET
    } else {
        HISTORY_TARGET
    }
}

/// Both the slowdown and the claim ratio within `target` (an unmeasured claim ratio is not).
pub(super) fn within(slowdown: f64, claim_ratio: Option<f64>, target: f64) -> bool {
    slowdown <= target && claim_ratio.is_some_and(|f| f <= target)
}

/// About how many of `history` deliveries, spread evenly over [`SPAN_DAYS`], are older than the
/// purge's retention (20 days: the oldest 10 days' worth) when sluice starts.
pub(super) fn due_at_start(history: u64) -> u64 {
    history * 10 / u64::try_from(SPAN_DAYS).unwrap_or(30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowdown_is_the_empty_rate_over_this_one() {
        assert_eq!(slowdown(1000.0, 800.0), 1.25);
        // No delivery at all is infinitely slower, not a division by zero.
        assert!(slowdown(1000.0, 0.0) > 1e300);
    }

    #[test]
    fn claim_ratio_needs_both_and_floors_the_empty_one() {
        assert_eq!(claim_ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(claim_ratio(None, Some(2.0)), None);
        assert_eq!(claim_ratio(Some(3.0), None), None);
        assert_eq!(claim_ratio(Some(1.0), Some(0.0)), Some(1000.0));
    }

    #[test]
    fn each_phase_is_held_to_its_target() {
        assert_eq!(target_of("history"), HISTORY_TARGET);
        assert_eq!(target_of("purge"), PURGE_TARGET);
        assert!(within(1.2, Some(1.2), 1.2));
        assert!(!within(1.21, Some(1.0), 1.2));
        assert!(!within(1.0, Some(1.3), 1.2));
        assert!(!within(1.0, None, 1.2));
    }

    #[test]
    fn a_third_of_thirty_days_is_due() {
        assert_eq!(due_at_start(3_000), 1_000);
    }
}
