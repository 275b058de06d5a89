//! Rate limit per endpoint: the generic cell rate algorithm (GCRA), pure.
//!
//! A limit of `per_second` events with a `burst` is one emission interval `T = 1 / per_second`
//! and a tolerance `τ = (burst − 1) × T`. The bucket keeps one instant, the theoretical arrival
//! time (TAT) of the next event at the steady rate. An event at `now` is a turn when
//! `now ≥ TAT − τ`; taking it moves the TAT to `max(TAT, now) + T`. So a fresh bucket gives
//! `burst` turns at once and one more every `T`, and over any window of length `t` it never gives
//! more than `burst + t × per_second`.
//!
//! Time is passed in: nothing here sleeps or reads a clock. The fleet-wide bucket in Redis runs
//! the same step ([`super::fleet`]); this one serves a dispatcher without Redis, a dispatcher's
//! share while Redis is away ([`RateLimit::share`]), and the claim's cap ([`Bucket::turns_within`]).

use std::time::Duration;

use tokio::time::Instant;

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

/// One bucket of a limit: the theoretical arrival time of the next turn at the steady rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    limit: RateLimit,
    tat: Instant,
}

impl Bucket {
    /// A full bucket: `burst` turns at once from `now`.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        Self { limit, tat: now }
    }

    /// The limit it enforces.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Take a turn at `now`: `Ok`, or `Err(until)`, the exact instant the next turn is free
    /// (nothing is taken then).
    pub fn try_take(&mut self, now: Instant) -> Result<(), Instant> {
        let tat = self.tat.max(now);
        let free_at = tat
            .checked_sub(self.limit.tolerance())
            .unwrap_or(now)
            .max(now);
        if free_at > now {
            return Err(free_at);
        }
        self.tat = tat + self.limit.interval();
        Ok(())
    }

    /// How many turns the bucket can give from `now` to `now + horizon`, both included, if
    /// nothing else takes any: the turns it has now, plus one per interval of the horizon.
    ///
    /// With `s = now + horizon + τ − max(TAT, now)`, that is `⌊s / T⌋ + 1` when `s ≥ 0`, else 0.
    pub fn turns_within(&self, now: Instant, horizon: Duration) -> u32 {
        let tat = self.tat.max(now);
        let reach = now + horizon + self.limit.tolerance();
        if reach < tat {
            return 0;
        }
        let intervals = (reach - tat).as_nanos() / self.limit.interval().as_nanos().max(1);
        u32::try_from(intervals)
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    /// Set the TAT to `ahead` past `now`: what the fleet-wide bucket in Redis said it is, so
    /// the claim's cap follows the fleet's bucket, not this process's alone.
    pub fn follow(&mut self, now: Instant, ahead: Duration) {
        self.tat = now + ahead;
    }
}

/// One endpoint's buckets in one process: the whole limit's (enforced here without Redis, a
/// copy of the fleet's bucket with it) and this process's outage share's.
#[derive(Debug, Clone, PartialEq)]
pub struct Turns {
    whole: Bucket,
    /// Set during a Redis outage: this process's share's bucket, or `None` when it has no share.
    share: Option<Option<Bucket>>,
}

impl Turns {
    /// Full buckets for `limit` from `now`.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        Self {
            whole: Bucket::new(limit, now),
            share: None,
        }
    }

    /// The limit, as configured.
    pub fn limit(&self) -> RateLimit {
        self.whole.limit()
    }

    /// Take a turn of the whole limit (no Redis).
    pub fn take(&mut self, now: Instant) -> Result<(), Instant> {
        self.whole.try_take(now)
    }

    /// Take a turn of this process's outage `share` (`None`: it has none, and holds everything
    /// until `now + retry`). A bucket kept from an earlier share is kept while the share stays
    /// the same, and starts full when it changes.
    pub fn take_share(
        &mut self,
        share: Option<RateLimit>,
        now: Instant,
        retry: Duration,
    ) -> Result<(), Instant> {
        let Some(share) = share else {
            self.share = Some(None);
            return Err(now + retry);
        };
        let bucket = match &mut self.share {
            Some(Some(b)) if b.limit() == share => b,
            slot => slot.insert(None).insert(Bucket::new(share, now)),
        };
        bucket.try_take(now)
    }

    /// The fleet's bucket runs `ahead` of `now` (Redis said so): the whole bucket follows it,
    /// and the outage share starts afresh at the next outage.
    pub fn follow(&mut self, now: Instant, ahead: Duration) {
        self.whole.follow(now, ahead);
        self.share = None;
    }

    /// Turns this process expects from `now` to `now + horizon`: its outage share's when it
    /// has one running, else the whole bucket's ([`Bucket::turns_within`]).
    pub fn turns_within(&self, now: Instant, horizon: Duration) -> u32 {
        match &self.share {
            Some(Some(share)) => share.turns_within(now, horizon),
            Some(None) => 0,
            None => self.whole.turns_within(now, horizon),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limit(per_second: f64, burst: u32) -> RateLimit {
        RateLimit::try_new(per_second, burst).unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    /// 10/s, burst 3: three at once, then exactly one every 100 ms, each refusal naming the
    /// instant its turn comes.
    #[test]
    fn a_fresh_bucket_gives_its_burst_then_one_turn_per_interval() {
        let t0 = Instant::now();
        let mut b = Bucket::new(limit(10.0, 3), t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        assert_eq!(b.try_take(t0), Err(t0 + 100 * MS));
        // A refusal takes nothing: asked again just before, the same instant.
        assert_eq!(b.try_take(t0 + 99 * MS), Err(t0 + 100 * MS));
        assert_eq!(b.try_take(t0 + 100 * MS), Ok(()));
        assert_eq!(b.try_take(t0 + 100 * MS), Err(t0 + 200 * MS));
        assert_eq!(b.try_take(t0 + 200 * MS), Ok(()));
    }

    /// A quiet spell refills the bucket, but never past its burst.
    #[test]
    fn a_quiet_spell_refills_up_to_the_burst_only() {
        let t0 = Instant::now();
        let mut b = Bucket::new(limit(10.0, 3), t0);
        for _ in 0..3 {
            b.try_take(t0).unwrap();
        }
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(later), Ok(()));
        }
        assert_eq!(b.try_take(later), Err(later + 100 * MS));
    }

    /// A burst of one is a steady pace; a slow limit's turn is far ahead.
    #[test]
    fn a_burst_of_one_is_a_steady_pace() {
        let t0 = Instant::now();
        let mut b = Bucket::new(limit(0.5, 1), t0);
        assert_eq!(b.try_take(t0), Ok(()));
        assert_eq!(b.try_take(t0 + MS), Err(t0 + Duration::from_secs(2)));
    }

    /// The claim's cap: what is in the bucket now plus one per interval of the horizon.
    #[test]
    fn turns_within_counts_the_bucket_and_the_horizon() {
        let t0 = Instant::now();
        let mut b = Bucket::new(limit(10.0, 3), t0);
        assert_eq!(b.turns_within(t0, Duration::ZERO), 3);
        assert_eq!(b.turns_within(t0, 500 * MS), 8);
        assert_eq!(b.turns_within(t0, 499 * MS), 7);
        for _ in 0..3 {
            b.try_take(t0).unwrap();
        }
        assert_eq!(b.turns_within(t0, Duration::ZERO), 0);
        assert_eq!(b.turns_within(t0, 99 * MS), 0);
        assert_eq!(b.turns_within(t0, 100 * MS), 1);
        assert_eq!(b.turns_within(t0, 500 * MS), 5);
        // Following a fleet bucket 1 s ahead: nothing for 800 ms (τ is 200 ms).
        b.follow(t0, Duration::from_secs(1));
        assert_eq!(b.turns_within(t0, 799 * MS), 0);
        assert_eq!(b.turns_within(t0, 800 * MS), 1);
    }

    /// What `turns_within` promises is what `try_take` gives, turn for turn.
    #[test]
    fn turns_within_agrees_with_taking() {
        let t0 = Instant::now();
        for (per_second, burst) in [(10.0, 3), (7.0, 1), (1000.0, 50), (0.3, 2)] {
            let l = limit(per_second, burst);
            let horizon = l.interval() * 9 + l.interval() / 2;
            let mut b = Bucket::new(l, t0);
            let promised = b.turns_within(t0, horizon);
            let mut now = t0;
            let mut given = 0;
            while now <= t0 + horizon {
                match b.try_take(now) {
                    Ok(()) => given += 1,
                    Err(until) => now = until,
                }
            }
            assert_eq!(given, promised, "{per_second}/s burst {burst}");
        }
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

        /// Over any run of requests, a bucket gives at most `burst + elapsed × rate` turns.
        #[test]
        fn a_bucket_never_gives_more_than_its_limit(
            per_second in 0.5f64..2000.0,
            burst in 1u32..50,
            gaps in proptest::collection::vec(0u64..50_000, 1..300),
        ) {
            let l = limit(per_second, burst);
            let t0 = Instant::now();
            let mut b = Bucket::new(l, t0);
            let mut now = t0;
            let mut given = 0u64;
            for gap in gaps {
                now += Duration::from_micros(gap);
                if b.try_take(now).is_ok() {
                    given += 1;
                }
            }
            let allowed = f64::from(burst) + (now - t0).as_secs_f64() * per_second;
            prop_assert!(given as f64 <= allowed, "{given} > {allowed}");
        }
    }
}
