//! Which rule admits deliveries fleet-wide, as one process sees Redis come and go.
//!
//! Pure: the caller says whether Redis is reachable now and what time it is, so every transition
//! is tested here without a Redis or a clock.

use std::time::Duration;

use tokio::time::Instant;

/// Which rule admits deliveries fleet-wide right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetMode {
    /// Redis answers: a slot in Redis is the admission.
    Redis,
    /// Redis just returned: attempts admitted under local shares may still run, unknown to
    /// Redis, so for one maximum attempt duration a Redis slot AND the local share are needed.
    Recovering,
    /// Redis unreachable since this instant, for less than one maximum attempt duration:
    /// attempts admitted through Redis before the outage may still run, so each process keeps
    /// at most what it held then (never more than its share).
    OutageStart(Instant),
    /// Redis unreachable for longer: each process admits up to its local share.
    Local,
}

/// When Redis went away and came back, as this process saw it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FleetTransitions {
    degraded_since: Option<Instant>,
    recovered_at: Option<Instant>,
}

impl FleetTransitions {
    /// The mode at `now`, given whether Redis is unreachable now; `hold` is the longest an
    /// attempt admitted under the previous rule may still run (the attempt's total deadline).
    pub fn mode(&mut self, degraded: bool, now: Instant, hold: Duration) -> FleetMode {
        if degraded {
            self.recovered_at = None;
            let since = *self.degraded_since.get_or_insert(now);
            return if now.saturating_duration_since(since) < hold {
                FleetMode::OutageStart(since)
            } else {
                FleetMode::Local
            };
        }
        if self.degraded_since.take().is_some() {
            self.recovered_at = Some(now);
        }
        match self.recovered_at {
            Some(at) if now.saturating_duration_since(at) < hold => FleetMode::Recovering,
            _ => FleetMode::Redis,
        }
    }
}

/// The shortest an endpoint keeps the outage-start rule, whatever its attempts took.
pub const MIN_ENDPOINT_HOLD: Duration = Duration::from_millis(250);

/// How long, from the start of a Redis outage, attempts to one endpoint admitted through Redis
/// (by any process of the fleet) may still be running: twice the longest attempt to it in the
/// recent window, at least [`MIN_ENDPOINT_HOLD`], and never past `deadline`, the endpoint's
/// own total attempt deadline, which bounds every attempt (each process reads the same
/// endpoint settings). With no attempt in the window, the deadline.
///
/// Past it the endpoint is admitted under the local share. Without this, an endpoint that this
/// process happened to hold nothing for when Redis went away (any fast endpoint, most of the
/// time) would get no delivery at all until the longest deadline had passed: the outage rule
/// would starve the healthy endpoints to protect the slow one.
pub fn endpoint_hold(deadline: Duration, longest_seen: Option<Duration>) -> Duration {
    match longest_seen {
        Some(longest) => longest
            .saturating_mul(2)
            .max(MIN_ENDPOINT_HOLD)
            .min(deadline),
        None => deadline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fast endpoint leaves the outage-start rule after the floor; a slow one after twice
    /// its longest attempt; one that times out at its deadline; one never seen at its deadline.
    #[test]
    fn an_endpoint_holds_for_what_its_attempts_can_still_take() {
        let deadline = Duration::from_secs(15);
        let ms = Duration::from_millis;
        assert_eq!(endpoint_hold(deadline, Some(ms(5))), MIN_ENDPOINT_HOLD);
        assert_eq!(endpoint_hold(deadline, Some(ms(300))), ms(600));
        assert_eq!(endpoint_hold(deadline, Some(ms(10_000))), deadline);
        assert_eq!(endpoint_hold(deadline, None), deadline);
        // A deadline shorter than the floor wins: no attempt outlives it.
        assert_eq!(endpoint_hold(ms(100), Some(ms(5))), ms(100));
    }

    const HOLD: Duration = Duration::from_secs(15);

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    /// The whole cycle: Redis, an outage (first the start rule, then local shares once every
    /// attempt admitted through Redis has ended), Redis back (both rules for one attempt
    /// duration), then Redis alone.
    #[test]
    fn an_outage_and_a_recovery_each_hold_for_one_attempt_duration() {
        let t0 = Instant::now();
        let mut t = FleetTransitions::default();
        assert_eq!(t.mode(false, t0, HOLD), FleetMode::Redis);
        let down = at(t0, 10);
        assert_eq!(t.mode(true, down, HOLD), FleetMode::OutageStart(down));
        assert_eq!(t.mode(true, at(t0, 24), HOLD), FleetMode::OutageStart(down));
        assert_eq!(t.mode(true, at(t0, 25), HOLD), FleetMode::Local);
        assert_eq!(t.mode(false, at(t0, 40), HOLD), FleetMode::Recovering);
        assert_eq!(t.mode(false, at(t0, 54), HOLD), FleetMode::Recovering);
        assert_eq!(t.mode(false, at(t0, 55), HOLD), FleetMode::Redis);
    }

    /// Redis failing again while recovering starts a new outage from that instant: attempts
    /// admitted under local shares during the recovery are counted as held then.
    #[test]
    fn a_second_outage_during_recovery_starts_over() {
        let t0 = Instant::now();
        let mut t = FleetTransitions::default();
        t.mode(true, t0, HOLD);
        assert_eq!(t.mode(false, at(t0, 30), HOLD), FleetMode::Recovering);
        let again = at(t0, 35);
        assert_eq!(t.mode(true, again, HOLD), FleetMode::OutageStart(again));
        // Back once more: a fresh recovery, not the remainder of the first one.
        assert_eq!(t.mode(false, at(t0, 60), HOLD), FleetMode::Recovering);
        assert_eq!(t.mode(false, at(t0, 74), HOLD), FleetMode::Recovering);
        assert_eq!(t.mode(false, at(t0, 75), HOLD), FleetMode::Redis);
    }

    /// A clock read slightly out of order (another thread's `now`) never panics or goes back
    /// to an earlier stage.
    #[test]
    fn an_earlier_now_is_harmless() {
        let t0 = Instant::now();
        let mut t = FleetTransitions::default();
        let down = at(t0, 10);
        t.mode(true, down, HOLD);
        assert_eq!(t.mode(true, t0, HOLD), FleetMode::OutageStart(down));
    }
}
