//! `tenants`' judgements over what the phases recorded: each phase's quantiles and rates, the
//! weighted tenants' shares, and the pass criteria. Pure: no I/O, unit-tested below.

use std::sync::Arc;

use sluice::plan::prom::HistogramSnapshot;

use super::WEIGHTED;
use crate::timeline::{Timeline, ms};

/// What a phase recorded.
pub(super) struct Outcome {
    pub(super) timeline: Arc<Timeline>,
    pub(super) duration_s: f64,
    pub(super) warmup_s: usize,
    /// Deliveries the quiet and trickle tenants' accepted messages fan out to.
    pub(super) quiet_expected: u64,
    pub(super) trickle_expected: u64,
    /// The claims made during the load, from the sluice's `/metrics` (`None` in a fleet,
    /// whose claims are the dispatcher processes').
    pub(super) claims: Option<HistogramSnapshot>,
}

impl Outcome {
    pub(super) fn quantile_ms(&self, group: usize, q: f64) -> Option<f64> {
        self.timeline
            .latency_from(group, self.warmup_s)
            .quantile(q)
            .map(ms)
    }

    /// The `q`-quantile of the claims made during the load, in ms.
    pub(super) fn claim_ms(&self, q: f64) -> Option<f64> {
        self.claims.as_ref()?.quantile(q).map(|s| s * 1e3)
    }

    /// The `q`-quantile of `group`'s POST → 202 times, in ms.
    pub(super) fn ingest_ms(&self, group: usize, q: f64) -> Option<f64> {
        self.timeline.ingest_latency(group).quantile(q).map(ms)
    }

    /// Deliveries per second of `group` over the load, after warm-up.
    pub(super) fn rate(&self, group: usize) -> f64 {
        let to = self.duration_s.floor() as usize;
        let n = self.timeline.delivered_between(group, self.warmup_s, to);
        n as f64 / (to.saturating_sub(self.warmup_s)).max(1) as f64
    }
}

/// The quiet tenant's p99 beside the backlog is within twice its p99 alone (unknown is not).
pub(super) fn within_twice(factor: Option<f64>) -> bool {
    factor.is_some_and(|f| f <= 2.0)
}

/// The busy tenant keeps at least 90 % of the rate it gets alone (unknown does not).
pub(super) fn keeps_most(kept: Option<f64>) -> bool {
    kept.is_some_and(|k| k >= 0.9)
}

/// Each weighted tenant's share of the deliveries (`None` for each when there were none).
pub(super) fn shares(counts: &[f64]) -> Vec<Option<f64>> {
    let total: f64 = counts.iter().sum();
    counts
        .iter()
        .map(|n| (total > 0.0).then(|| n / total))
        .collect()
}

/// Every weighted tenant's share is within 10 % of its weight's (`w`/7).
pub(super) fn fair(shares: &[Option<f64>]) -> bool {
    WEIGHTED.iter().zip(shares).all(|(&(_, w), share)| {
        let want = f64::from(w) / 7.0;
        share.is_some_and(|s| (s - want).abs() <= want * 0.1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_the_deliveries_and_none_without_any() {
        assert_eq!(
            shares(&[100.0, 200.0, 400.0]),
            vec![Some(1.0 / 7.0), Some(2.0 / 7.0), Some(4.0 / 7.0)]
        );
        assert_eq!(shares(&[0.0, 0.0, 0.0]), vec![None, None, None]);
    }

    #[test]
    fn shares_are_fair_within_ten_percent_of_the_weight() {
        assert!(fair(&shares(&[100.0, 200.0, 400.0])));
        // Weight 1 at 0.16 is 12 % over its 1/7.
        assert!(!fair(&[Some(0.16), Some(2.0 / 7.0), Some(0.554)]));
        assert!(!fair(&shares(&[0.0, 0.0, 0.0])));
    }

    #[test]
    fn the_latency_and_rate_criteria() {
        assert!(within_twice(Some(2.0)));
        assert!(!within_twice(Some(2.01)));
        assert!(!within_twice(None));
        assert!(keeps_most(Some(0.9)));
        assert!(!keeps_most(Some(0.89)));
        assert!(!keeps_most(None));
    }
}
