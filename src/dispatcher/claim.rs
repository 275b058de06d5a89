//! How much of an endpoint the next claim may take: the room arithmetic, pure.
//!
//! A claim takes no more of an endpoint than its lane can start within the lane's acquisition
//! deadline, so shedding stays the exception rather than a churn of claim → shed → requeue;
//! nor, under a rate limit, more than its bucket can give within that deadline.

use std::time::Duration;

/// What this dispatcher knows of one endpoint when it prepares a claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct EndpointLoad {
    /// Paused by a Retry-After, or its breaker open: nothing may start.
    pub(super) held: bool,
    /// The lane in force (the lane size, lowered by the governor).
    pub(super) lane: u32,
    /// Recent attempt duration (exponentially weighted); `None` before the first attempt.
    pub(super) service: Option<Duration>,
    /// Deliveries in the lane or on their way to it.
    pub(super) taken: u32,
    /// Under a rate limit: the turns its bucket can still give within the lane deadline, less
    /// the deliveries already on their way to take one ([`crate::admission::rate::Turns`]).
    pub(super) turns: Option<u32>,
}

/// How many of its due deliveries the next claim may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// None: skip the endpoint.
    Skip,
    /// At most this many (fewer than a full share).
    Up(u32),
    /// A full per-endpoint share.
    Full,
}

/// The room of one endpoint. What its lane can start within `lane_deadline` is its slots plus a
/// short queue when the endpoint answers fast enough for that queue to drain within half the
/// deadline at its recent service time (queue × service ÷ lane ≤ deadline ÷ 2): a fast endpoint
/// takes a full share and waits briefly at the lane; one slower than the deadline gets only its
/// free slots, so it is not claimed just to be shed. Before any attempt the queue is one share.
/// A rate-limited endpoint gets no more than its `turns`: its backlog is not claimed just to be
/// held by the limit and requeued.
pub(super) fn room(load: EndpointLoad, per_endpoint: u32, lane_deadline: Duration) -> Room {
    if load.held {
        return Room::Skip;
    }
    let queue = load.service.map_or(per_endpoint, |t| {
        let turns = lane_deadline.as_secs_f64() / t.as_secs_f64().max(1e-4);
        if turns >= 1.0 {
            (f64::from(load.lane) * turns / 2.0).min(1e6) as u32
        } else {
            0
        }
    });
    let free = load.lane.saturating_add(queue).saturating_sub(load.taken);
    let free = load.turns.map_or(free, |turns| free.min(turns));
    match free {
        0 => Room::Skip,
        n if n < per_endpoint => Room::Up(n),
        _ => Room::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_millis(500);

    fn load(lane: u32, service_ms: Option<u64>, taken: u32) -> EndpointLoad {
        EndpointLoad {
            held: false,
            lane,
            service: service_ms.map(Duration::from_millis),
            taken,
            turns: None,
        }
    }

    /// A paused endpoint or an open breaker: nothing, whatever its lane.
    #[test]
    fn a_held_endpoint_is_skipped() {
        let held = EndpointLoad {
            held: true,
            ..load(8, Some(10), 0)
        };
        assert_eq!(room(held, 8, DEADLINE), Room::Skip);
    }

    /// A slow consumer, 2 s answers against a 0.5 s deadline: only free slots, never a queue
    /// that would wait out the deadline and be shed.
    #[test]
    fn a_slow_endpoint_gets_only_its_free_slots() {
        assert_eq!(room(load(8, Some(2_000), 5), 8, DEADLINE), Room::Up(3));
        assert_eq!(room(load(8, Some(2_000), 8), 8, DEADLINE), Room::Skip);
    }

    /// 10 ms answers: the lane turns 50 times per deadline, so a full share fits even with the
    /// lane busy.
    #[test]
    fn a_fast_endpoint_takes_a_full_share_past_a_busy_lane() {
        assert_eq!(room(load(8, Some(10), 8), 8, DEADLINE), Room::Full);
    }

    /// 200 ms answers: 2.5 turns per deadline, a queue of lane × 1.25 = 10 beside 8 slots.
    #[test]
    fn a_middling_endpoint_gets_a_short_queue() {
        assert_eq!(room(load(8, Some(200), 16), 8, DEADLINE), Room::Up(2));
        assert_eq!(room(load(8, Some(200), 18), 8, DEADLINE), Room::Skip);
    }

    /// A rate limit caps the room at its turns, whatever the lane would take; none left: skip.
    #[test]
    fn a_rate_limit_caps_the_room_at_its_turns() {
        let limited = |turns| EndpointLoad {
            turns: Some(turns),
            ..load(8, Some(10), 0)
        };
        assert_eq!(room(limited(3), 8, DEADLINE), Room::Up(3));
        assert_eq!(room(limited(0), 8, DEADLINE), Room::Skip);
        assert_eq!(room(limited(500), 8, DEADLINE), Room::Full);
    }

    /// Never measured: its lane plus one share.
    #[test]
    fn before_the_first_attempt_the_queue_is_one_share() {
        assert_eq!(room(load(4, None, 4), 8, DEADLINE), Room::Full);
        assert_eq!(room(load(4, None, 9), 8, DEADLINE), Room::Up(3));
        assert_eq!(room(load(4, None, 12), 8, DEADLINE), Room::Skip);
    }
}
