//! How much of an endpoint the next claim may take: the room arithmetic, pure.
//!
//! A claim takes no more of an endpoint than its lane can start within the lane's acquisition
//! deadline, so shedding stays the exception rather than a churn of claim → shed → requeue;
//! nor, under a rate limit, more than its bucket can give within that deadline. When the lane is
//! shared by the fleet (held in Redis, or split by the live dispatchers without it), each
//! dispatcher takes its part of that room, not all of it: three
//! dispatchers each claiming a whole lane's room would queue three times what the one lane can
//! start, and shed the rest, each shed delivery back only after its 5–20 s requeue delay.

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
    /// How long its held lane slots have gone without one coming free; `None` while none is
    /// held.
    pub(super) stalled: Option<Duration>,
    /// Deliveries in the lane or on their way to it.
    pub(super) taken: u32,
    /// Under a rate limit: the turns its bucket can still give within the lane deadline, less
    /// the deliveries already on their way to take one ([`crate::admission::rate::Turns`]).
    pub(super) turns: Option<u32>,
    /// Who shares the lane: this dispatcher alone, or its part of a fleet-wide lane.
    pub(super) part: Part,
}

/// This dispatcher's part of a lane the live dispatchers share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Part {
    /// Dispatchers sharing the lane (at least 1).
    pub(super) of: u32,
    /// This dispatcher's place among them, 0-based.
    pub(super) rank: u32,
    /// Which dispatchers get the remainder: turns with the endpoint, so one dispatcher does not
    /// take every small lane's odd slot.
    pub(super) spin: u32,
}

impl Part {
    /// The lane is this dispatcher's alone.
    #[cfg(test)]
    pub(super) const WHOLE: Self = Self {
        of: 1,
        rank: 0,
        spin: 0,
    };

    /// This dispatcher's part of `n`: `n / of`, and one more for `n % of` of the dispatchers,
    /// so the parts of every dispatcher add up to `n` exactly.
    pub(super) fn of(self, n: u32) -> u32 {
        crate::admission::peers::part(n, self.of, self.rank, self.spin)
    }
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
/// held by the limit and requeued. A lane shared by the fleet gives this dispatcher its
/// [`Part`] of slots and queue, against what this dispatcher alone has taken.
///
/// The queue is also no longer than the lane would drain were its service time how long its
/// held slots have gone without one coming free: finished attempts say nothing of one still hanging, so an
/// endpoint whose attempts fail at once beside one that hangs (a broker that stopped reading
/// mid-publish) would otherwise look fast, and every claim would take a full share of it only
/// for the lane to shed it.
pub(super) fn room(load: EndpointLoad, per_endpoint: u32, lane_deadline: Duration) -> Room {
    if load.held {
        return Room::Skip;
    }
    // What queue its lane drains within half the deadline at service time `t`.
    let drains = |t: Duration| {
        let turns = lane_deadline.as_secs_f64() / t.as_secs_f64().max(1e-4);
        if turns >= 1.0 {
            (f64::from(load.lane) * turns / 2.0).min(1e6) as u32
        } else {
            0
        }
    };
    let queue = load.service.map_or(per_endpoint, drains);
    let queue = load
        .stalled
        .map_or(queue, |stalled| queue.min(drains(stalled)));
    let mine = load.part.of(load.lane.saturating_add(queue));
    let free = mine.saturating_sub(load.taken);
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
            stalled: None,
            taken,
            turns: None,
            part: Part::WHOLE,
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

    /// Attempts that fail at once beside one that hangs (a broker that stopped reading
    /// mid-publish holds the one slot its governor leaves): the recent service time says 1 ms,
    /// but the slot has not come free for 2 s, so nothing is claimed only to be shed. Slots
    /// turning over as usual leave the queue as it was.
    #[test]
    fn a_lane_whose_slots_do_not_come_free_gets_no_queue() {
        let stuck = |stalled_ms| EndpointLoad {
            stalled: Some(Duration::from_millis(stalled_ms)),
            ..load(1, Some(1), 1)
        };
        assert_eq!(room(load(1, Some(1), 1), 8, DEADLINE), Room::Full);
        assert_eq!(room(stuck(2_000), 8, DEADLINE), Room::Skip);
        assert_eq!(room(stuck(5), 8, DEADLINE), Room::Full);
        // Never measured, its first attempt hanging: no share queued behind it either.
        let first = EndpointLoad {
            service: None,
            ..stuck(2_000)
        };
        assert_eq!(room(first, 8, DEADLINE), Room::Skip);
        // 200 ms answers, slots stuck for 300 ms: the shorter queue of the two (lane × 0.83).
        let middling = EndpointLoad {
            stalled: Some(Duration::from_millis(300)),
            ..load(8, Some(200), 8)
        };
        assert_eq!(room(middling, 8, DEADLINE), Room::Up(6));
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

    /// Three dispatchers share a lane of 4 at 300 ms answers (queue 3): 7 split 3, 2, 2, the
    /// odd slot turning with the endpoint; a part already taken leaves nothing.
    #[test]
    fn a_fleet_lane_is_split_over_its_dispatchers() {
        let part = |rank, spin| EndpointLoad {
            part: Part { of: 3, rank, spin },
            ..load(4, Some(300), 0)
        };
        let rooms: Vec<Room> = (0..3)
            .map(|rank| room(part(rank, 0), 8, DEADLINE))
            .collect();
        assert_eq!(rooms, [Room::Up(3), Room::Up(2), Room::Up(2)]);
        let spun: Vec<Room> = (0..3)
            .map(|rank| room(part(rank, 2), 8, DEADLINE))
            .collect();
        assert_eq!(spun, [Room::Up(2), Room::Up(3), Room::Up(2)]);
        let taken = EndpointLoad {
            taken: 2,
            ..part(1, 0)
        };
        assert_eq!(room(taken, 8, DEADLINE), Room::Skip);
    }

    /// Whatever the lane, the dispatchers' parts add up to it, each within one of the others.
    #[test]
    fn parts_add_up_to_the_whole() {
        for of in 1..=7 {
            for n in 0..=40 {
                for spin in 0..of {
                    let parts: Vec<u32> =
                        (0..of).map(|rank| Part { of, rank, spin }.of(n)).collect();
                    assert_eq!(parts.iter().sum::<u32>(), n, "{n} over {of}");
                    let (lo, hi) = (parts.iter().min(), parts.iter().max());
                    assert!(hi.unwrap() - lo.unwrap() <= 1, "{parts:?}");
                }
            }
        }
        assert_eq!(Part::WHOLE.of(9), 9);
    }

    /// Never measured: its lane plus one share.
    #[test]
    fn before_the_first_attempt_the_queue_is_one_share() {
        assert_eq!(room(load(4, None, 4), 8, DEADLINE), Room::Full);
        assert_eq!(room(load(4, None, 9), 8, DEADLINE), Room::Up(3));
        assert_eq!(room(load(4, None, 12), 8, DEADLINE), Room::Skip);
    }
}
