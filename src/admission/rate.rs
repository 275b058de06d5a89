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

use crate::model::RateLimit;

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

    proptest! {
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
