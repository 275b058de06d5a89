//! The per-endpoint bulkhead: a bounded number of in-flight slots with an acquisition deadline.
//!
//! Waiting for a slot is bounded by a short deadline; when it passes the delivery is shed
//! (requeued by the caller), never parked in an unbounded queue. The limit is read at every
//! attempt to acquire, so it follows the governor and the fleet share as they move.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Attempts an endpoint's window must hold before its lane is sized from them; fewer say too
/// little about its rate and service time.
pub const SIZING_MIN_SAMPLES: u64 = 20;

/// The share of an endpoint's deliveries its lane may shed when they arrive as a Poisson
/// stream at its mean rate: [`sized_by_load`] widens a lane until Erlang C says no more wait
/// past the lane deadline. A shed waits 5–20 s before it is offered again, so a lane that sheds
/// one in ten of a healthy endpoint's bursts gives it a tail of seconds.
pub const SHED_TARGET: f64 = 0.01;

/// The lane an endpoint needs: by Little's Law the attempts it holds on average are its arrival
/// rate times its mean service time, and `headroom` (≥ 1) leaves room for bursts above the
/// mean, so `ceil(offered_per_s × mean_service × headroom)`; and at least the smallest lane in
/// which no more than [`SHED_TARGET`] of Poisson arrivals would wait past `deadline` (Erlang C,
/// exponential service: conservative for the near-constant answer times of most receivers).
/// Always at least 1. The caller caps it by the fairness ceiling.
///
/// The second bound matters where the load is small: 1.2 erlangs (4/s at 300 ms) get 2 slots
/// by Little's Law × 1.5, and 2 slots make 12 % of Poisson arrivals wait past a 500 ms deadline;
/// 3 make 0.7 %. Above about 20 erlangs the headroom is the wider of the two.
///
/// The arrival rate is what is offered to the lane (shed deliveries included), so a lane that is
/// too small sheds, its offered rate exceeds what it serves, and the next sizing grows it.
pub fn sized_by_load(
    offered_per_s: f64,
    mean_service: Duration,
    headroom: f64,
    deadline: Duration,
) -> u32 {
    let load = offered_per_s * mean_service.as_secs_f64();
    let needed = load * headroom;
    let littles = if needed.is_nan() || needed <= 1.0 {
        1
    } else {
        needed.ceil().min(f64::from(u32::MAX)) as u32
    };
    // No answer (no load, no service time, or a load past the solver's range): Little's Law.
    let bursts = crate::sizing::erlang::servers_for_percentile_wait(
        load,
        mean_service.as_secs_f64(),
        deadline.as_secs_f64(),
        1.0 - SHED_TARGET,
    )
    .unwrap_or(1);
    littles.max(bursts)
}

/// The lane had no free slot within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lane full")]
pub struct LaneFull;

/// One endpoint's lane.
#[derive(Debug)]
pub struct Lane {
    in_flight: AtomicU32,
    released: Notify,
    /// When it was made: what [`turned_ns`](Self::turned_ns) counts from.
    born: Instant,
    /// When a slot last came free, or the lane went from empty to busy, whichever is later
    /// (nanoseconds after `born`).
    turned_ns: AtomicU64,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            released: Notify::new(),
            born: Instant::now(),
            turned_ns: AtomicU64::new(0),
        }
    }
}

/// A held slot; dropping it frees the slot and wakes one waiter.
#[derive(Debug)]
pub struct LaneSlot {
    lane: Arc<Lane>,
}

impl Drop for LaneSlot {
    fn drop(&mut self) {
        self.lane.turned(Instant::now());
        self.lane.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.lane.released.notify_one();
    }
}

impl Lane {
    /// A new, empty lane.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Slots held now.
    pub fn in_use(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// How long its held slots have gone without one coming free: since the later of the last
    /// release and the moment the lane went from empty to busy; `None` while no slot is held.
    /// A lower bound on what a delivery waiting for a slot now would wait, which the service
    /// time of past attempts misses while an attempt hangs: an endpoint whose broker stops
    /// reading mid-publish, whose one slot a token URL holds, whose other attempts fail at once.
    pub fn stalled(&self, now: Instant) -> Option<Duration> {
        if self.in_use() == 0 {
            return None;
        }
        let turned = self.born + Duration::from_nanos(self.turned_ns.load(Ordering::Acquire));
        Some(now.saturating_duration_since(turned))
    }

    /// A slot came free, or the lane went busy, at `now`.
    fn turned(&self, now: Instant) {
        let ns = now.saturating_duration_since(self.born).as_nanos();
        self.turned_ns
            .fetch_max(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    /// Take a slot at once if fewer than `limit` are held.
    pub fn try_acquire(self: &Arc<Self>, limit: u32) -> Option<LaneSlot> {
        let mut current = self.in_flight.load(Ordering::Acquire);
        loop {
            if current >= limit.max(1) {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if current == 0 {
                        self.turned(Instant::now());
                    }
                    return Some(LaneSlot { lane: self.clone() });
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Take a slot, waiting at most `deadline`; `limit` is re-read on every try.
    pub async fn acquire(
        self: &Arc<Self>,
        limit: impl Fn() -> u32,
        deadline: Duration,
    ) -> Result<LaneSlot, LaneFull> {
        let until = Instant::now() + deadline;
        loop {
            let notified = self.released.notified();
            if let Some(slot) = self.try_acquire(limit()) {
                return Ok(slot);
            }
            // A release or the deadline, whichever first; a limit raised by the governor is
            // noticed at the next release, or at the latest after a short re-check.
            let recheck = (until - Instant::now().min(until)).min(Duration::from_millis(100));
            if recheck.is_zero() {
                return Err(LaneFull);
            }
            let _ = tokio::time::timeout(recheck, notified).await;
            if Instant::now() >= until {
                return self.try_acquire(limit()).ok_or(LaneFull);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_millis(500);

    /// 100 deliveries/s answered in 2 s hold 200 attempts; with 1.5 headroom the lane is 300. A
    /// fast endpoint needs one slot; nothing is ever sized to zero.
    #[test]
    fn lanes_are_sized_by_littles_law_with_headroom() {
        let lane =
            |rate, ms, headroom| sized_by_load(rate, Duration::from_millis(ms), headroom, DEADLINE);
        assert_eq!(lane(100.0, 2_000, 1.5), 300);
        assert_eq!(lane(20.0, 40, 1.5), 2);
        assert_eq!(lane(20.0, 2, 1.5), 1);
        assert_eq!(lane(0.0, 1_000, 1.5), 1);
        assert_eq!(lane(f64::NAN, 1_000, 1.5), 1);
        assert_eq!(lane(10.0, 0, 1.5), 1);
    }

    /// Where Little's Law × headroom leaves a small lane that Poisson bursts overflow, the lane
    /// is widened until at most 1 % would wait past the deadline: 4/s at 300 ms (1.2 erlangs)
    /// gets 3, not 2; 8/s at 80 ms (0.64 erlangs) gets 2, not 1.
    #[test]
    fn small_lanes_are_widened_until_bursts_rarely_wait_past_the_deadline() {
        use crate::sizing::erlang::wait_percentile_exceeds;
        for (rate, ms, littles, wider) in [(4.0, 300, 2, 3), (8.0, 80, 1, 2)] {
            let service = Duration::from_millis(ms);
            let load = rate * service.as_secs_f64();
            assert_eq!((load * 1.5_f64).ceil() as u32, littles);
            let sheds = |lane| {
                wait_percentile_exceeds(lane, load, service.as_secs_f64(), DEADLINE.as_secs_f64())
            };
            assert!(
                sheds(littles) > 0.05,
                "{rate}/s at {ms} ms: {}",
                sheds(littles)
            );
            assert_eq!(sized_by_load(rate, service, 1.5, DEADLINE), wider);
            assert!(sheds(wider) <= SHED_TARGET);
        }
    }

    proptest::proptest! {
        /// The lane is never narrower than Little's Law × headroom, and where Erlang C has an
        /// answer no more than the target share waits past the deadline in it.
        #[test]
        fn a_lane_covers_its_load_and_its_bursts(
            rate in 0.0f64..2_000.0,
            ms in 1u64..30_000,
            headroom in 1.0f64..3.0,
            deadline_ms in 1u64..5_000,
        ) {
            let (service, deadline) = (Duration::from_millis(ms), Duration::from_millis(deadline_ms));
            let lane = sized_by_load(rate, service, headroom, deadline);
            let load = rate * service.as_secs_f64();
            proptest::prop_assert!(f64::from(lane) >= (load * headroom).ceil().max(1.0));
            let exceeds = crate::sizing::erlang::wait_percentile_exceeds(
                lane, load, service.as_secs_f64(), deadline.as_secs_f64());
            proptest::prop_assert!(exceeds <= SHED_TARGET + 1e-9, "lane {lane}: {exceeds}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_lane_sheds_within_its_deadline_and_empties_after() {
        let lane = Lane::new();
        let held: Vec<_> = (0..2).map(|_| lane.try_acquire(2).expect("free")).collect();
        let started = Instant::now();
        let shed = lane.acquire(|| 2, Duration::from_millis(100)).await;
        assert_eq!(shed.unwrap_err(), LaneFull);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_millis(150));
        assert_eq!(lane.in_use(), 2);
        drop(held);
        assert_eq!(lane.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_slot_released_before_its_deadline() {
        let lane = Lane::new();
        let held = lane.try_acquire(1).expect("free");
        let waiter = {
            let lane = lane.clone();
            tokio::spawn(async move { lane.acquire(|| 1, Duration::from_millis(500)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        let slot = waiter.await.expect("join").expect("slot");
        assert_eq!(lane.in_use(), 1);
        drop(slot);
        assert_eq!(lane.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_does_not_delay_another_lane() {
        let slow = Lane::new();
        let fast = Lane::new();
        let _held: Vec<_> = (0..2).map(|_| slow.try_acquire(2).expect("free")).collect();
        let started = Instant::now();
        let slot = fast.acquire(|| 2, Duration::from_millis(100)).await;
        assert!(slot.is_ok());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lowered_limit_applies_to_the_next_acquire() {
        let lane = Lane::new();
        let _a = lane.try_acquire(4).expect("free");
        let _b = lane.try_acquire(4).expect("free");
        assert!(lane.try_acquire(2).is_none());
        assert!(lane.try_acquire(3).is_some());
    }

    /// A lane knows how long its slots have gone without turning over: from the moment it went
    /// busy, reset by each release, nothing while it is empty.
    #[tokio::test(start_paused = true)]
    async fn a_lane_knows_how_long_its_slots_have_been_stuck() {
        let lane = Lane::new();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(lane.stalled(Instant::now()), None);
        let first = lane.try_acquire(2).expect("free");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(lane.stalled(Instant::now()), Some(Duration::from_secs(3)));
        let second = lane.try_acquire(2).expect("free");
        tokio::time::advance(Duration::from_secs(1)).await;
        // Busy since the first: the second's arrival is no turnover.
        assert_eq!(lane.stalled(Instant::now()), Some(Duration::from_secs(4)));
        drop(first);
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(
            lane.stalled(Instant::now()),
            Some(Duration::from_millis(200))
        );
        drop(second);
        assert_eq!(lane.stalled(Instant::now()), None);
    }
}
