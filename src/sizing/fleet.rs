//! The live fleet as the dispatchers' heartbeats describe it: how many replicas run (fresh,
//! not draining), and their load added up, for the scale signal and `sluice plan` on any
//! process; and what they have done ([`FleetTotals`]) and how fast ([`FleetRates`]), for the
//! operator console on any process.

use serde::Serialize;

use crate::store::{Heartbeat, Tally};

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

/// What the live fleet has done: its dispatchers' tallies added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FleetTotals {
    /// Dispatchers counted (draining ones included: they still settle what they hold).
    pub dispatchers: u32,
    /// Their counts since each one started, added up.
    pub tally: Tally,
}

impl FleetTotals {
    /// The sum over `heartbeats`, which the caller has read live (fresh, and on PostgreSQL
    /// with their process still connected): a dispatcher that died is not in them, so what it
    /// had counted leaves the totals with it.
    pub fn of(heartbeats: &[Heartbeat]) -> FleetTotals {
        let mut f = FleetTotals::default();
        for h in heartbeats {
            f.dispatchers += 1;
            f.tally.delivered += h.tally.delivered;
            f.tally.failed += h.tally.failed;
            f.tally.shed += h.tally.shed;
        }
        f
    }
}

/// Events per second of each kind a [`Tally`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rates {
    /// Deliveries answered 2xx per second.
    pub delivered_per_s: f64,
    /// Failed attempts per second.
    pub failed_per_s: f64,
    /// Sheds per second.
    pub shed_per_s: f64,
}

impl Rates {
    /// One dispatcher's rates between an earlier heartbeat of it (`None`: it was not live
    /// then) and a later one, over its own interval between the two beats: dispatchers beat at
    /// their own times, so the reader's interval would be wrong for every one of them. A
    /// dispatcher new since `before`, or one that restarted (another start, or a count that
    /// went down), counts from 0 at its start. `None` when no time passed (no beat since).
    pub fn of_dispatcher(before: Option<&Heartbeat>, after: &Heartbeat) -> Option<Rates> {
        let continued = before.filter(|b| {
            b.id == after.id
                && b.started_at_ms == after.started_at_ms
                && b.tally.delivered <= after.tally.delivered
                && b.tally.failed <= after.tally.failed
                && b.tally.shed <= after.tally.shed
        });
        let (from_ms, from) = match continued {
            Some(b) => (b.beat_at_ms, b.tally),
            None => (after.started_at_ms, Tally::default()),
        };
        let elapsed_s = (after.beat_at_ms - from_ms) as f64 / 1000.0;
        if elapsed_s <= 0.0 {
            return None;
        }
        let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / elapsed_s;
        Some(Rates {
            delivered_per_s: per_s(after.tally.delivered, from.delivered),
            failed_per_s: per_s(after.tally.failed, from.failed),
            shed_per_s: per_s(after.tally.shed, from.shed),
        })
    }

    fn add(&mut self, other: &Rates) {
        self.delivered_per_s += other.delivered_per_s;
        self.failed_per_s += other.failed_per_s;
        self.shed_per_s += other.shed_per_s;
    }
}

/// One live dispatcher in [`FleetRates`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DispatcherRates {
    /// Its latest heartbeat.
    pub heartbeat: Heartbeat,
    /// Its rates since the earlier reading (`None`: it has not beaten since).
    pub rates: Option<Rates>,
}

/// The fleet's rates between two readings of the live heartbeats.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetRates {
    /// The sum of the live dispatchers' rates, each over its own interval.
    pub total: Rates,
    /// Every dispatcher live in the later reading, by id.
    pub dispatchers: Vec<DispatcherRates>,
}

impl FleetRates {
    /// The rates from `before` to `after`: only dispatchers live in `after` count (one that
    /// died since drops out), each from its own earlier beat, or from its start when it is
    /// new or restarted.
    pub fn between(before: &[Heartbeat], after: &[Heartbeat]) -> FleetRates {
        let mut f = FleetRates::default();
        for h in after {
            let earlier = before.iter().find(|b| b.id == h.id);
            let rates = Rates::of_dispatcher(earlier, h);
            if let Some(r) = &rates {
                f.total.add(r);
            }
            f.dispatchers.push(DispatcherRates {
                heartbeat: h.clone(),
                rates,
            });
        }
        f.dispatchers
            .sort_by(|a, b| a.heartbeat.id.cmp(&b.heartbeat.id));
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(id: &str, at: i64, arrivals: f64, mean: f64, draining: bool) -> Heartbeat {
        Heartbeat {
            id: id.into(),
            host: "host-a".into(),
            started_at_ms: 0,
            beat_at_ms: at,
            in_flight: 3,
            concurrency: 100,
            capacity: 200,
            arrivals_per_s: arrivals,
            mean_service_s: mean,
            draining,
            tally: Tally::default(),
        }
    }

    /// Dispatcher `id`, started at 0, beating at `at_ms` with these counts.
    fn counted(id: &str, at_ms: i64, delivered: u64, failed: u64, shed: u64) -> Heartbeat {
        Heartbeat {
            tally: Tally {
                delivered,
                failed,
                shed,
            },
            ..beat(id, at_ms, 0.0, 0.0, false)
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
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

    #[test]
    fn totals_add_up_every_live_dispatcher() {
        let mut draining = counted("c", 9_000, 1, 0, 0);
        draining.draining = true;
        let beats = [
            counted("a", 10_000, 100, 3, 7),
            counted("b", 9_500, 50, 1, 0),
            draining,
        ];
        let t = FleetTotals::of(&beats);
        assert_eq!(t.dispatchers, 3);
        assert_eq!(
            t.tally,
            Tally {
                delivered: 151,
                failed: 4,
                shed: 7
            }
        );
        assert_eq!(FleetTotals::of(&[]), FleetTotals::default());
    }

    #[test]
    fn each_dispatcher_is_measured_over_its_own_interval() {
        // a beat 10 s apart, b 4 s apart: the reader's own interval fits neither.
        let before = [
            counted("a", 10_000, 100, 10, 0),
            counted("b", 12_000, 40, 0, 0),
        ];
        let after = [
            counted("a", 20_000, 300, 20, 5),
            counted("b", 16_000, 80, 2, 0),
        ];
        let f = FleetRates::between(&before, &after);
        let a = f.dispatchers[0].rates.unwrap();
        assert!(close(a.delivered_per_s, 20.0) && close(a.failed_per_s, 1.0));
        assert!(close(a.shed_per_s, 0.5));
        let b = f.dispatchers[1].rates.unwrap();
        assert!(close(b.delivered_per_s, 10.0) && close(b.failed_per_s, 0.5));
        assert!(close(f.total.delivered_per_s, 30.0), "{f:?}");
        assert!(close(f.total.failed_per_s, 1.5));
        assert!(close(f.total.shed_per_s, 0.5));
    }

    #[test]
    fn a_restarted_dispatcher_counts_from_zero_at_its_start() {
        let before = [counted("a", 10_000, 500, 9, 9)];
        // The same id, its counts lower: a restart at 18 s, 40 delivered in the 2 s since.
        let mut restarted = counted("a", 20_000, 40, 0, 2);
        restarted.started_at_ms = 18_000;
        let f = FleetRates::between(&before, &[restarted.clone()]);
        assert!(close(f.total.delivered_per_s, 20.0), "{f:?}");
        assert!(close(f.total.shed_per_s, 1.0));
        assert_eq!(f.total.failed_per_s, 0.0, "not a negative rate");
        // A new start whose counts happen to be higher is a restart all the same.
        let mut again = counted("a", 20_000, 600, 10, 10);
        again.started_at_ms = 19_000;
        let f = FleetRates::between(&before, &[again]);
        assert!(close(f.total.delivered_per_s, 600.0), "{f:?}");
        // A dispatcher new since the earlier reading counts from its start too.
        let f = FleetRates::between(&[], &[restarted]);
        assert!(close(f.total.delivered_per_s, 20.0), "{f:?}");
    }

    #[test]
    fn a_dispatcher_that_disappears_drops_out() {
        let before = [
            counted("a", 10_000, 100, 0, 0),
            counted("b", 10_000, 900, 0, 0),
        ];
        let after = [counted("a", 20_000, 200, 0, 0)];
        let f = FleetRates::between(&before, &after);
        assert_eq!(f.dispatchers.len(), 1);
        assert_eq!(f.dispatchers[0].heartbeat.id, "a");
        assert!(close(f.total.delivered_per_s, 10.0), "{f:?}");
        assert_eq!(FleetTotals::of(&after).tally.delivered, 200);
    }

    #[test]
    fn a_dispatcher_that_has_not_beaten_since_has_no_rate() {
        let same = [
            counted("a", 10_000, 100, 0, 0),
            counted("b", 10_000, 5, 0, 0),
        ];
        let mut after = same.clone();
        after[1] = counted("b", 15_000, 55, 0, 0);
        let f = FleetRates::between(&same, &after);
        assert_eq!(f.dispatchers[0].rates, None);
        assert!(close(f.total.delivered_per_s, 10.0), "only b's: {f:?}");
        // Nor does one whose only beat is at its start.
        let start = Heartbeat {
            started_at_ms: 10_000,
            ..counted("c", 10_000, 0, 0, 0)
        };
        assert_eq!(Rates::of_dispatcher(None, &start), None);
    }
}
