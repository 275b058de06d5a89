//! The per-endpoint bulkhead: a bounded number of in-flight slots with an acquisition deadline.
//!
//! Waiting for a slot is bounded by a short deadline; when it passes the delivery is shed
//! (requeued by the caller), never parked in an unbounded queue. The limit is read at every
//! attempt to acquire, so it follows the governor and the fleet share as they move.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Attempts an endpoint's window must hold before its lane is sized from them; fewer say too
/// little about its rate and service time.
pub const SIZING_MIN_SAMPLES: u64 = 20;

/// The lane an endpoint needs by Little's Law: the attempts it holds on average are its arrival
/// rate times its mean service time, and `headroom` (≥ 1) leaves room for bursts above the
/// mean, so `ceil(offered_per_s × mean_service × headroom)`, at least 1. The caller caps it by
/// the fairness ceiling.
///
/// The arrival rate is what is offered to the lane (shed deliveries included), so a lane that is
/// too small sheds, its offered rate exceeds what it serves, and the next sizing grows it.
pub fn sized_by_load(offered_per_s: f64, mean_service: Duration, headroom: f64) -> u32 {
    let needed = offered_per_s * mean_service.as_secs_f64() * headroom;
    if needed.is_nan() || needed <= 1.0 {
        1
    } else {
        needed.ceil().min(f64::from(u32::MAX)) as u32
    }
}

/// The lane had no free slot within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lane full")]
pub struct LaneFull;

/// One endpoint's lane.
#[derive(Debug, Default)]
pub struct Lane {
    in_flight: AtomicU32,
    released: Notify,
}

/// A held slot; dropping it frees the slot and wakes one waiter.
#[derive(Debug)]
pub struct LaneSlot {
    lane: Arc<Lane>,
}

impl Drop for LaneSlot {
    fn drop(&mut self) {
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
                Ok(_) => return Some(LaneSlot { lane: self.clone() }),
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

    /// 100 deliveries/s answered in 2 s hold 200 attempts; with 1.5 headroom the lane is 300. A
    /// fast endpoint needs one slot; nothing is ever sized to zero.
    #[test]
    fn lanes_are_sized_by_littles_law_with_headroom() {
        assert_eq!(sized_by_load(100.0, Duration::from_secs(2), 1.5), 300);
        assert_eq!(sized_by_load(20.0, Duration::from_millis(40), 1.5), 2);
        assert_eq!(sized_by_load(20.0, Duration::from_millis(2), 1.5), 1);
        assert_eq!(sized_by_load(0.0, Duration::from_secs(1), 1.5), 1);
        assert_eq!(sized_by_load(f64::NAN, Duration::from_secs(1), 1.5), 1);
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
}
