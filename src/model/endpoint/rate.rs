//! An endpoint's rate limit as a value: events per second with a burst, always in range. The
//! limiter that enforces it (GCRA buckets, in this process and fleet-wide in Redis) is
//! [`crate::admission::rate`]'s.

use std::time::Duration;

/// Least events per second a limit may ask for (one every 100 s).
pub const MIN_PER_SECOND: f64 = 0.01;
/// Most events per second a limit may ask for.
pub const MAX_PER_SECOND: f64 = 100_000.0;
/// Largest burst a limit may ask for.
pub const MAX_BURST: u32 = 100_000;

/// Why a limit was refused: the field at fault and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {expected}")]
pub struct InvalidRate {
    /// `per_second` or `burst`.
    pub field: &'static str,
    /// The valid range, in words.
    pub expected: String,
}

/// A rate limit: at most `per_second` events per second on average, `burst` at once. Only
/// [`RateLimit::try_new`] makes one, so both values are always in range (never NaN).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RateLimit {
    /// Events per second, [`MIN_PER_SECOND`]–[`MAX_PER_SECOND`].
    per_second: f64,
    /// Events that may go at once after a quiet spell, 1–[`MAX_BURST`].
    burst: u32,
}

// `per_second` is never NaN (see `try_new`), so equality is reflexive.
impl Eq for RateLimit {}

impl RateLimit {
    /// Events per second.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Events at once after a quiet spell.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// A limit, refused when either value is out of its range (the rate first).
    pub fn try_new(per_second: f64, burst: u32) -> Result<Self, InvalidRate> {
        if !(MIN_PER_SECOND..=MAX_PER_SECOND).contains(&per_second) {
            return Err(InvalidRate {
                field: "per_second",
                expected: format!(
                    "a number of events per second, {MIN_PER_SECOND}–{MAX_PER_SECOND}"
                ),
            });
        }
        if !(1..=MAX_BURST).contains(&burst) {
            return Err(InvalidRate {
                field: "burst",
                expected: format!("a whole number of events, 1–{MAX_BURST}"),
            });
        }
        Ok(Self { per_second, burst })
    }

    /// The emission interval: time between turns at the steady rate, in whole microseconds (the
    /// fleet-wide bucket in Redis counts in them, so both buckets step alike), rounded up so the
    /// rate given is never above the rate asked for.
    pub fn interval(&self) -> Duration {
        Duration::from_micros(((1e6 / self.per_second).ceil() as u64).max(1))
    }

    /// How far ahead of now the TAT may run and still give a turn: `(burst − 1) × interval`.
    pub fn tolerance(&self) -> Duration {
        self.interval().saturating_mul(self.burst.saturating_sub(1))
    }

    /// One process's share of the limit while Redis is away and `live` processes each enforce
    /// theirs locally; `rank` is this process's place among them (0-based, by process id, as the
    /// last heartbeat saw it). `None`: this process has no share and holds everything.
    ///
    /// Summed over ranks `0..live` the shares never exceed the limit: not its rate, not its
    /// burst. A process needs a burst of at least one to give any turn at all, so when the burst
    /// is smaller than `live` only `burst` processes get a share (of one each) and split the
    /// whole rate between them; otherwise every process gets `per_second / live` and the burst
    /// is split as evenly as whole numbers allow (the first `burst % live` ranks one more).
    pub fn share(&self, live: u32, rank: u32) -> Option<RateLimit> {
        let live = live.max(1);
        // A stale rank past the live count (the fleet shrank since) folds back into range: two
        // processes may then share a rank, as two may read different live counts.
        let rank = rank % live;
        let holders = live.min(self.burst);
        if rank >= holders {
            return None;
        }
        let burst = self.burst / holders + u32::from(rank < self.burst % holders);
        Some(RateLimit {
            per_second: self.per_second / f64::from(holders),
            burst,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limit(per_second: f64, burst: u32) -> RateLimit {
        RateLimit::try_new(per_second, burst).unwrap()
    }

    #[test]
    fn out_of_range_values_are_refused_by_field() {
        assert_eq!(RateLimit::try_new(0.0, 1).unwrap_err().field, "per_second");
        assert_eq!(RateLimit::try_new(-5.0, 1).unwrap_err().field, "per_second");
        assert_eq!(
            RateLimit::try_new(f64::NAN, 1).unwrap_err().field,
            "per_second"
        );
        assert_eq!(RateLimit::try_new(1e9, 1).unwrap_err().field, "per_second");
        assert_eq!(RateLimit::try_new(50.0, 0).unwrap_err().field, "burst");
        assert_eq!(
            RateLimit::try_new(50.0, MAX_BURST + 1).unwrap_err().field,
            "burst"
        );
        assert!(RateLimit::try_new(MIN_PER_SECOND, 1).is_ok());
        assert!(RateLimit::try_new(MAX_PER_SECOND, MAX_BURST).is_ok());
    }

    /// The earlier rule, `(burst / live).max(1)`, gave 3 processes a burst of one each on a
    /// burst of 2: three at once where two were allowed.
    #[test]
    fn a_burst_smaller_than_the_fleet_goes_to_that_many_processes() {
        let l = limit(30.0, 2);
        let shares: Vec<_> = (0..3).map(|rank| l.share(3, rank)).collect();
        assert_eq!(shares, [Some(limit(15.0, 1)), Some(limit(15.0, 1)), None,]);
        assert_eq!(limit(30.0, 7).share(3, 0), Some(limit(10.0, 3)));
        assert_eq!(limit(30.0, 7).share(3, 2), Some(limit(10.0, 2)));
        // Alone: the whole limit.
        assert_eq!(l.share(1, 0), Some(l));
    }

    proptest! {
        /// Summed over the fleet, the shares never exceed the limit's rate or its burst; every
        /// share can give a turn; and the whole rate is handed out.
        #[test]
        fn outage_shares_never_sum_above_the_limit(
            per_second in MIN_PER_SECOND..MAX_PER_SECOND,
            burst in 1..=MAX_BURST,
            live in 1u32..500,
        ) {
            let l = limit(per_second, burst);
            let shares: Vec<RateLimit> = (0..live).filter_map(|rank| l.share(live, rank)).collect();
            prop_assert!(!shares.is_empty());
            let bursts: u64 = shares.iter().map(|s| u64::from(s.burst)).sum();
            let rate: f64 = shares.iter().map(|s| s.per_second).sum();
            prop_assert!(bursts <= u64::from(burst));
            prop_assert!(rate <= per_second * (1.0 + 1e-12));
            prop_assert!(rate >= per_second * (1.0 - 1e-9));
            prop_assert!(shares.iter().all(|s| s.burst >= 1));
        }
    }
}
