//! The live fleet as the dispatchers' heartbeats describe it: how many replicas run (fresh,
//! not draining), and their load added up, for the scale signal and `sluice plan` on any
//! process.

use serde::Serialize;

use crate::store::Heartbeat;

/// The fleet's figures from its fresh heartbeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FleetLoad {
    /// Dispatchers with a fresh heartbeat that are not draining: the current replicas.
    pub dispatchers: u32,
    /// Dispatchers with a fresh heartbeat that are draining.
    pub draining: u32,
    /// Attempts in flight across the replicas.
    pub in_flight: u32,
    /// Their global concurrency bounds, added up.
    pub concurrency: u32,
    /// Their largest bounds (`--concurrency`, or the top of `auto`), added up.
    pub capacity: u32,
    /// Offered attempts per second across them.
    pub arrivals_per_s: f64,
    /// Mean attempt duration across them, weighted by each one's arrivals, seconds.
    pub mean_service_s: f64,
}

impl FleetLoad {
    /// The fleet from heartbeats written at or after `fresh_since_ms` (older ones are stale
    /// and ignored).
    pub fn from_heartbeats(heartbeats: &[Heartbeat], fresh_since_ms: i64) -> FleetLoad {
        let mut f = FleetLoad::default();
        let mut weighted = 0.0;
        for h in heartbeats.iter().filter(|h| h.beat_at_ms >= fresh_since_ms) {
            if h.draining {
                f.draining += 1;
                continue;
            }
            f.dispatchers += 1;
            f.in_flight += h.in_flight;
            f.concurrency += h.concurrency;
            f.capacity += h.capacity;
            f.arrivals_per_s += h.arrivals_per_s;
            weighted += h.arrivals_per_s * h.mean_service_s;
        }
        if f.arrivals_per_s > 0.0 {
            f.mean_service_s = weighted / f.arrivals_per_s;
        }
        f
    }

    /// Tasks per replica for the Little's Law floor: the replicas' mean concurrency bound, or
    /// `fallback` without replicas.
    pub fn tasks_per_replica(&self, fallback: u32) -> u32 {
        match self.dispatchers {
            0 => fallback.max(1),
            n => (self.concurrency / n).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(id: &str, at: i64, arrivals: f64, mean: f64, draining: bool) -> Heartbeat {
        Heartbeat {
            id: id.into(),
            started_at_ms: 0,
            beat_at_ms: at,
            in_flight: 3,
            concurrency: 100,
            capacity: 200,
            arrivals_per_s: arrivals,
            mean_service_s: mean,
            draining,
        }
    }

    #[test]
    fn fresh_replicas_count_stale_and_draining_do_not() {
        let beats = [
            beat("a", 1_000, 30.0, 1.0, false),
            beat("b", 1_000, 10.0, 3.0, false),
            beat("c", 10, 500.0, 9.0, false),
            beat("d", 1_000, 7.0, 1.0, true),
        ];
        let f = FleetLoad::from_heartbeats(&beats, 500);
        assert_eq!((f.dispatchers, f.draining), (2, 1));
        assert_eq!((f.in_flight, f.concurrency, f.capacity), (6, 200, 400));
        assert_eq!(f.arrivals_per_s, 40.0);
        // (30 × 1 + 10 × 3) / 40
        assert!((f.mean_service_s - 1.5).abs() < 1e-12);
        assert_eq!(f.tasks_per_replica(512), 100);
        let none = FleetLoad::from_heartbeats(&[], 0);
        assert_eq!((none.dispatchers, none.tasks_per_replica(512)), (0, 512));
        assert_eq!(none.mean_service_s, 0.0);
    }
}
