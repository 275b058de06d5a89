//! The live fleet as the dispatchers' heartbeats describe it: how many replicas run (fresh,
//! not draining), and their load added up, for the scale signal and `sluice plan` on any
//! process; and what they have done ([`FleetTotals`]) and how fast ([`FleetRates`]), for the
//! operator console on any process; and where the fleet's worker-seconds went, host by host
//! ([`HostShares`]), for the console's occupancy shares on any process.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Heartbeat, HostSeconds, Tally};

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

/// Do two heartbeats come from one run of one dispatcher: same id and start, and no count gone
/// down (a count lower than before means it restarted)?
fn same_run(before: &Heartbeat, after: &Heartbeat) -> bool {
    before.id == after.id
        && before.started_at_ms == after.started_at_ms
        && before.tally.delivered <= after.tally.delivered
        && before.tally.failed <= after.tally.failed
        && before.tally.shed <= after.tally.shed
}

impl Rates {
    /// One dispatcher's rates between an earlier heartbeat of it (`None`: it was not live
    /// then) and a later one, over its own interval between the two beats: dispatchers beat at
    /// their own times, so the reader's interval would be wrong for every one of them. A
    /// dispatcher new since `before`, or one that restarted (another start, or a count that
    /// went down), counts from 0 at its start. `None` when no time passed (no beat since).
    pub fn of_dispatcher(before: Option<&Heartbeat>, after: &Heartbeat) -> Option<Rates> {
        let continued = before.filter(|b| same_run(b, after));
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

/// Two figures of time this close are the same (sums of the same microseconds in another
/// order differ in their last bits).
const SECONDS_EPSILON: f64 = 1e-6;

/// The fleet's worker-seconds per destination host between two readings of the live
/// heartbeats, and each host's share of them, from each dispatcher's cumulative
/// [`HostSeconds`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostShares {
    /// Hosts with time in the window: (host, share 0-1, seconds), largest share first.
    pub hosts: Vec<(String, f64, f64)>,
    /// Seconds of hosts no dispatcher named (each names its busiest [`HostSeconds::TOP`]).
    pub other_seconds: f64,
    /// Every host's seconds, the named ones and the others: the shares' denominator.
    pub total_seconds: f64,
}

impl HostShares {
    /// One dispatcher's seconds per host from an earlier heartbeat of it (`None`: it was not
    /// live then) to a later one. A dispatcher new since `before`, or one that restarted
    /// (another start, or a figure that went down), counts from its start, as its
    /// [`Rates`] do. A host named in both heartbeats grew by the difference; a host named only
    /// in the later one (it joined the busiest, so its time before was in `other` or none) is
    /// credited with its time since the start, at most what the hosts named both times leave
    /// of the dispatcher's growth; whatever remains is `other`. The figures always add up to
    /// the dispatcher's whole growth.
    pub fn of_dispatcher(before: Option<&Heartbeat>, after: &Heartbeat) -> HostSeconds {
        let now = &after.host_seconds;
        let continued = before.filter(|b| {
            same_run(b, after) && b.host_seconds.total() <= now.total() + SECONDS_EPSILON
        });
        let Some(then) = continued.map(|b| &b.host_seconds) else {
            return now.clone();
        };
        let mut grown = HostSeconds::default();
        let mut rest = (now.total() - then.total()).max(0.0);
        for (host, seconds) in &now.hosts {
            if let Some(was) = then.hosts.get(host) {
                let d = (seconds - was).max(0.0);
                rest -= d;
                grown.hosts.insert(host.clone(), d);
            }
        }
        rest = rest.max(0.0);
        let mut joined: Vec<(&String, f64)> = now
            .hosts
            .iter()
            .filter(|(host, _)| !then.hosts.contains_key(*host))
            .map(|(host, seconds)| (host, *seconds))
            .collect();
        joined.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        for (host, seconds) in joined {
            let d = seconds.min(rest);
            rest -= d;
            grown.hosts.insert(host.clone(), d);
        }
        grown.other = rest.max(0.0);
        grown
    }

    /// The shares from `before` to `after`: only dispatchers live in `after` count (one that
    /// stopped since drops out, with what it did in the window), each from its own earlier
    /// beat, or from its start when it is new or restarted; their seconds are added up per
    /// host across the fleet.
    pub fn between(before: &[Heartbeat], after: &[Heartbeat]) -> HostShares {
        let mut per_host: BTreeMap<String, f64> = BTreeMap::new();
        let mut other = 0.0;
        for h in after {
            let earlier = before.iter().find(|b| b.id == h.id);
            let grown = Self::of_dispatcher(earlier, h);
            for (host, seconds) in grown.hosts {
                *per_host.entry(host).or_default() += seconds;
            }
            other += grown.other;
        }
        let total = per_host.values().sum::<f64>() + other;
        let mut hosts: Vec<(String, f64, f64)> = per_host
            .into_iter()
            .filter(|(_, s)| *s > SECONDS_EPSILON)
            .map(|(host, s)| (host, s / total, s))
            .collect();
        hosts.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let other_seconds = if other > SECONDS_EPSILON { other } else { 0.0 };
        HostShares {
            hosts,
            other_seconds,
            total_seconds: if total > SECONDS_EPSILON { total } else { 0.0 },
        }
    }

    /// The share of the hosts no dispatcher named (0 without any time).
    pub fn other_share(&self) -> f64 {
        if self.total_seconds > 0.0 {
            self.other_seconds / self.total_seconds
        } else {
            0.0
        }
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
            host_seconds: HostSeconds::default(),
        }
    }

    /// Dispatcher `id`, started at `started_at_ms`, beating at 10 s with these seconds.
    fn timed(id: &str, started_at_ms: i64, hosts: &[(&str, f64)], other: f64) -> Heartbeat {
        Heartbeat {
            started_at_ms,
            host_seconds: HostSeconds {
                hosts: hosts.iter().map(|(h, s)| ((*h).to_owned(), *s)).collect(),
                other,
            },
            ..beat(id, 10_000, 0.0, 0.0, false)
        }
    }

    fn share_of(s: &HostShares, host: &str) -> Option<(f64, f64)> {
        s.hosts
            .iter()
            .find(|(h, _, _)| h == host)
            .map(|(_, share, seconds)| (*share, *seconds))
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

    #[test]
    fn host_shares_add_up_each_dispatchers_growth() {
        let before = [
            timed("a", 0, &[("slow", 100.0), ("fast", 10.0)], 0.0),
            timed("b", 0, &[("slow", 50.0)], 0.0),
        ];
        let after = [
            timed("a", 0, &[("slow", 160.0), ("fast", 20.0)], 0.0),
            timed("b", 0, &[("slow", 70.0), ("fast", 10.0)], 0.0),
        ];
        let s = HostShares::between(&before, &after);
        // slow: 60 + 20, fast: 10 + 10 (b's first time at fast): 100 seconds in all.
        assert!(close(s.total_seconds, 100.0), "{s:?}");
        assert_eq!(s.hosts[0].0, "slow");
        let (share, seconds) = share_of(&s, "slow").unwrap();
        assert!(close(share, 0.8) && close(seconds, 80.0), "{s:?}");
        let (share, seconds) = share_of(&s, "fast").unwrap();
        assert!(close(share, 0.2) && close(seconds, 20.0), "{s:?}");
        assert_eq!(s.other_seconds, 0.0);
        // No growth: no hosts, no shares.
        let none = HostShares::between(&after, &after);
        assert!(
            none.hosts.is_empty() && none.total_seconds == 0.0,
            "{none:?}"
        );
        assert_eq!(none.other_share(), 0.0);
    }

    #[test]
    fn host_shares_of_a_restarted_dispatcher_count_from_its_start() {
        let before = [timed("a", 0, &[("x", 500.0), ("y", 500.0)], 0.0)];
        // The same id, lower figures: it restarted, and everything it reports is new.
        let after = [timed("a", 0, &[("x", 3.0), ("y", 1.0)], 0.0)];
        let s = HostShares::between(&before, &after);
        assert!(close(s.total_seconds, 4.0), "{s:?}");
        assert!(close(share_of(&s, "x").unwrap().0, 0.75), "{s:?}");
        // Another start with higher figures is a restart all the same.
        let again = [timed("a", 5_000, &[("x", 600.0), ("y", 600.0)], 0.0)];
        let s = HostShares::between(&before, &again);
        assert!(close(s.total_seconds, 1200.0), "{s:?}");
        // A dispatcher new since the earlier reading counts from its start too.
        let s = HostShares::between(&[], &after);
        assert!(close(s.total_seconds, 4.0), "{s:?}");
    }

    #[test]
    fn host_shares_leave_out_a_dispatcher_that_stopped() {
        let before = [
            timed("a", 0, &[("x", 10.0)], 0.0),
            timed("b", 0, &[("y", 900.0)], 0.0),
        ];
        let after = [timed("a", 0, &[("x", 30.0), ("y", 10.0)], 0.0)];
        let s = HostShares::between(&before, &after);
        assert!(close(s.total_seconds, 30.0), "only a's growth: {s:?}");
        assert!(close(share_of(&s, "x").unwrap().1, 20.0), "{s:?}");
        assert!(close(share_of(&s, "y").unwrap().1, 10.0), "{s:?}");
    }

    #[test]
    fn host_shares_keep_the_total_when_hosts_join_or_leave_the_named_ones() {
        // Before: x and y named, z's 40 s in other. After: z joined the busiest (all its 70 s
        // since the start named), y left for other (its 25 s there with w's 45 s).
        let before = [timed("a", 0, &[("x", 100.0), ("y", 20.0)], 40.0)];
        let after = [timed("a", 0, &[("x", 130.0), ("z", 70.0)], 70.0)];
        let g = HostShares::of_dispatcher(Some(&before[0]), &after[0]);
        // Growth: 270 - 160 = 110; x grew 30, so z is credited at most the 80 left: 70, all of
        // it (its 40 s before are not known to the reader), and other the 10 that remain.
        assert!(close(g.total(), 110.0), "{g:?}");
        assert!(
            close(g.hosts["x"], 30.0) && close(g.hosts["z"], 70.0),
            "{g:?}"
        );
        assert!(close(g.other, 10.0), "{g:?}");
        // A host that joins with more than the growth left is credited only that much.
        let big = [timed("a", 0, &[("x", 130.0), ("z", 200.0)], 0.0)];
        let before_big = [timed("a", 0, &[("x", 100.0)], 180.0)];
        let g = HostShares::of_dispatcher(Some(&before_big[0]), &big[0]);
        assert!(
            close(g.hosts["x"], 30.0) && close(g.hosts["z"], 20.0),
            "{g:?}"
        );
        assert!(close(g.other, 0.0) && close(g.total(), 50.0), "{g:?}");
        // Across the fleet, other hosts' time is in the denominator but not listed.
        let s = HostShares::between(&before, &after);
        assert!(close(s.total_seconds, 110.0), "{s:?}");
        assert!(close(s.other_seconds, 10.0) && close(s.other_share(), 10.0 / 110.0));
        let listed: f64 = s.hosts.iter().map(|(_, share, _)| share).sum();
        assert!(close(listed + s.other_share(), 1.0), "{s:?}");
    }
}
