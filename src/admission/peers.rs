//! This dispatcher's place in a fleet without Redis: how many dispatchers are live (their
//! heartbeats in the store say so) and its rank among them, so that each enforces its part of
//! an endpoint's lane and rate limit, and the fleet as a whole never exceeds either.
//!
//! Redis makes the promise exact (one lane, one bucket, shared); without it the parts are fixed
//! by arithmetic: a lane of `n` slots gives each of `live` dispatchers `n / live`, and one more
//! to `n % live` of them, turning with the endpoint so no dispatcher takes every odd slot
//! ([`Peers::part`]); a rate limit gives each its [`crate::model::RateLimit::share`]. The count is
//! the one the scale signal uses: dispatchers whose heartbeat is fresh and not draining. Two
//! dispatchers may read it a heartbeat apart; for that moment the parts may add up to more.

use std::sync::atomic::{AtomicU32, Ordering};

/// The live dispatchers as this one last counted them, and its rank among them.
#[derive(Debug)]
pub struct Peers {
    live: AtomicU32,
    rank: AtomicU32,
}

impl Default for Peers {
    fn default() -> Self {
        Self::alone()
    }
}

impl Peers {
    /// A dispatcher alone until its first count.
    pub fn alone() -> Self {
        Self {
            live: AtomicU32::new(1),
            rank: AtomicU32::new(0),
        }
    }

    /// Record a count: `live` dispatchers (at least 1: this one), this one at `rank`.
    pub fn set(&self, live: u32, rank: u32) {
        let live = live.max(1);
        self.rank.store(rank.min(live - 1), Ordering::Relaxed);
        self.live.store(live, Ordering::Relaxed);
    }

    /// Count from the ids of the live dispatchers (this one among them, or not yet): their
    /// number and this one's place in id order.
    pub fn count<'a>(&self, me: &str, live: impl IntoIterator<Item = &'a str>) -> (u32, u32) {
        let mut ids: Vec<&str> = live.into_iter().filter(|id| *id != me).collect();
        ids.push(me);
        ids.sort_unstable();
        ids.dedup();
        let rank = ids.iter().position(|id| *id == me).unwrap_or(0);
        let (live, rank) = (ids.len() as u32, rank as u32);
        self.set(live, rank);
        (live, rank)
    }

    /// Live dispatchers, at least 1.
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed).max(1)
    }

    /// This dispatcher's rank, 0-based.
    pub fn rank(&self) -> u32 {
        self.rank.load(Ordering::Relaxed)
    }

    /// This dispatcher's part of `n` slots, `spin` turning which dispatchers get the
    /// remainder (see [`part`]).
    pub fn part(&self, n: u32, spin: u32) -> u32 {
        part(n, self.live(), self.rank(), spin)
    }
}

/// The part of `n` that the dispatcher at `rank` of `of` holds: `n / of`, and one more for
/// `n % of` of them, chosen by `rank + spin`, so the parts of every rank add up to `n`.
pub fn part(n: u32, of: u32, rank: u32, spin: u32) -> u32 {
    let of = of.max(1);
    let place = rank.wrapping_add(spin) % of;
    n / of + u32::from(place < n % of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_of_a_lane_add_up_to_the_lane_for_every_spin() {
        for n in 0..20 {
            for of in 1..6 {
                for spin in 0..6 {
                    let sum: u32 = (0..of).map(|rank| part(n, of, rank, spin)).sum();
                    assert_eq!(sum, n, "{n} slots over {of}, spin {spin}");
                }
            }
        }
        // Two slots over three dispatchers: one of them has none, which one turns.
        let holders = |spin| {
            (0..3)
                .filter(|&r| part(2, 3, r, spin) == 1)
                .collect::<Vec<_>>()
        };
        assert_eq!(holders(0), [0, 1]);
        assert_eq!(holders(1), [0, 2]);
    }

    #[test]
    fn a_count_ranks_this_dispatcher_among_the_live_by_id() {
        let peers = Peers::alone();
        assert_eq!((peers.live(), peers.rank()), (1, 0));
        assert_eq!(peers.count("dsp_b", ["dsp_c", "dsp_a", "dsp_b"]), (3, 1));
        assert_eq!((peers.live(), peers.rank()), (3, 1));
        // Its own heartbeat not yet read: it still counts itself.
        assert_eq!(peers.count("dsp_b", ["dsp_a"]), (2, 1));
        assert_eq!(peers.count("dsp_b", []), (1, 0));
    }
}
