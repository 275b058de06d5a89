//! `replay`'s judgements over what was sampled: each level's figures reduced from the samples,
//! and the three pass criteria. Pure: no I/O, unit-tested below.

use std::collections::HashMap;

use super::{GROUPS, HEALTHY, HEALTHY_KINDS, THROTTLING, shape};
use crate::report::{percentile, ratio};
use crate::timeline::Timeline;
use crate::watch;

/// What one level measured.
pub(super) struct Level {
    pub(super) factor: f64,
    pub(super) healthy_age_max: Option<f64>,
    pub(super) healthy_age_p99: Option<f64>,
    pub(super) all_age_max: Option<f64>,
    pub(super) utilisation: Option<f64>,
    pub(super) attempts_share: Option<f64>,
    pub(super) concurrency_end: Option<f64>,
    pub(super) delivered_per_s: f64,
    pub(super) throttled_share: [Option<f64>; 3],
    /// Sheds per delivery offered, the fast endpoints and the 300 ms ones.
    pub(super) healthy_shed_share: [Option<f64>; 2],
    /// The healthy endpoints' delivery latency (event accepted → receiver), p99 and p99.9, s.
    pub(super) healthy_latency_p99: Option<f64>,
    pub(super) healthy_latency_p999: Option<f64>,
}

/// Sheds of the watched endpoints whose names start with `prefix` within `[from, to)`: the
/// growth of each one's shed counter from its last sample before `from` to its last before `to`.
pub(super) fn sheds_between(
    series: &watch::Series,
    prefix: &str,
    from: f64,
    to: f64,
) -> Option<f64> {
    let mut total = None;
    for (name, samples) in series {
        let Some(label) = name.strip_suffix(".shed_total") else {
            continue;
        };
        if !label.starts_with(prefix) {
            continue;
        }
        let at = |t: f64| {
            samples
                .iter()
                .rfind(|(s, _)| *s < t)
                .map_or(0.0, |(_, n)| *n)
        };
        *total.get_or_insert(0.0) += at(to) - at(from);
    }
    total
}

/// The figures of one level, from what was sampled within `[from, to)` seconds.
pub(super) fn measure(
    timeline: &Timeline,
    series: &watch::Series,
    ages: &[(f64, HashMap<String, f64>)],
    healthy_tenants: &[String],
    factor: f64,
    from: f64,
    to: f64,
) -> Level {
    let within = |t: f64| t >= from && t < to;
    let healthy_age: Vec<f64> = ages
        .iter()
        .filter(|(t, _)| within(*t))
        .map(|(_, s)| {
            healthy_tenants
                .iter()
                .filter_map(|t| s.get(t))
                .fold(0.0, |a: f64, b| a.max(*b))
        })
        .collect();
    let all_age = ages
        .iter()
        .filter(|(t, _)| within(*t))
        .map(|(_, s)| s.values().fold(0.0, |a: f64, b| a.max(*b)))
        .reduce(f64::max);
    // The auto-sizer needs a few decisions to follow a step in load: utilisation is judged on
    // the second half of the level. The pool bounds what is claimed and not settled (attempts
    // and deliveries waiting at their lanes): that is its utilisation; attempts alone are
    // shown too.
    let half = (from + to) / 2.0;
    let share = |name: &str| {
        let pairs: Vec<(f64, f64)> = series
            .get(name)
            .into_iter()
            .flatten()
            .zip(series.get("concurrency").into_iter().flatten())
            .filter(|((t, _), _)| *t >= half && *t < to)
            .map(|((_, busy), (_, slots))| (busy.min(*slots), *slots))
            .collect();
        (!pairs.is_empty()).then(|| {
            let busy: f64 = pairs.iter().map(|(b, _)| b).sum();
            let slots: f64 = pairs.iter().map(|(_, s)| s).sum();
            busy / slots.max(1.0)
        })
    };
    let concurrency_end = series
        .get("concurrency")
        .into_iter()
        .flatten()
        .rfind(|(t, _)| within(*t))
        .map(|(_, c)| *c);
    let (first, last) = (from as usize, to as usize);
    let delivered: u64 = (0..GROUPS.len())
        .map(|g| timeline.delivered_between(g, first, last))
        .sum();
    let throttled_share = THROTTLING.map(|g| {
        let seconds = timeline.seconds(g);
        let level = seconds.get(first..last.min(seconds.len())).unwrap_or(&[]);
        let t: u64 = level.iter().map(|s| s.throttled).sum();
        let ok: u64 = level.iter().map(|s| s.ok).sum();
        ratio(Some(t as f64), Some((t + ok) as f64))
    });
    // Offered at the level's rate: the shape's rates × the factor × the level's span.
    let healthy_shed_share = HEALTHY_KINDS.map(|(prefix, _)| {
        let offered: f64 = shape()
            .iter()
            .filter(|e| e.group == HEALTHY && e.name.starts_with(prefix))
            .map(|e| e.rate * factor * (to - from))
            .sum();
        ratio(sheds_between(series, prefix, from, to), Some(offered))
    });
    let latency = timeline.latency_between(HEALTHY, first, last);
    let seconds = |q: f64| latency.quantile(q).map(|d| d.as_secs_f64());
    Level {
        factor,
        healthy_age_max: healthy_age.iter().copied().reduce(f64::max),
        healthy_age_p99: percentile(&healthy_age, 0.99),
        all_age_max: all_age,
        utilisation: share("outstanding"),
        attempts_share: share("in_flight"),
        concurrency_end,
        delivered_per_s: delivered as f64 / (to - from),
        throttled_share,
        healthy_shed_share,
        healthy_latency_p99: seconds(0.99),
        healthy_latency_p999: seconds(0.999),
    }
}

/// The healthy tenants' oldest ready age is under the objective (unknown is not).
pub(super) fn within_objective(age_s: Option<f64>, objective_s: f64) -> bool {
    age_s.is_some_and(|a| a < objective_s)
}

/// The pool's mean utilisation sits in 85–95 % (unknown does not).
pub(super) fn in_band(utilisation: Option<f64>) -> bool {
    utilisation.is_some_and(|u| (0.85..=0.95).contains(&u))
}

/// No throttling endpoint's 429 share rose from `before` to `after` (an unknown share fails).
pub(super) fn not_rising(before: &[Option<f64>], after: &[Option<f64>]) -> bool {
    (0..THROTTLING.len()).all(|i| match (before[i], after[i]) {
        (Some(a), Some(b)) => b <= a,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_objective_is_a_strict_upper_bound_and_unknown_fails() {
        assert!(within_objective(Some(4.9), 5.0));
        assert!(!within_objective(Some(5.0), 5.0));
        assert!(!within_objective(None, 5.0));
    }

    #[test]
    fn utilisation_must_sit_in_the_band() {
        assert!(in_band(Some(0.85)));
        assert!(in_band(Some(0.95)));
        assert!(!in_band(Some(0.84)));
        assert!(!in_band(Some(0.96)));
        assert!(!in_band(None));
    }

    #[test]
    fn a_429_share_that_rises_or_is_unknown_fails() {
        let one = [Some(0.2), Some(0.1), Some(0.3)];
        assert!(not_rising(&one, &[Some(0.2), Some(0.05), Some(0.0)]));
        assert!(!not_rising(&one, &[Some(0.21), Some(0.1), Some(0.3)]));
        assert!(!not_rising(&one, &[Some(0.1), None, Some(0.3)]));
    }

    #[test]
    fn sheds_are_the_growth_of_the_counters_within_the_window() {
        let series: watch::Series = [
            (
                "fast-1.shed_total".to_owned(),
                vec![(0.5, 1.0), (1.5, 4.0), (3.5, 10.0)],
            ),
            ("fast-2.shed_total".to_owned(), vec![(0.5, 0.0), (2.5, 2.0)]),
            ("medium-1.shed_total".to_owned(), vec![(0.5, 100.0)]),
            ("fast-1.other".to_owned(), vec![(0.5, 50.0)]),
        ]
        .into_iter()
        .collect();
        // fast-1: 4 at 3.0 less 1 at 1.0; fast-2: 2 less 0.
        assert_eq!(sheds_between(&series, "fast", 1.0, 3.0), Some(5.0));
        assert_eq!(sheds_between(&series, "slow", 1.0, 3.0), None);
    }
}
