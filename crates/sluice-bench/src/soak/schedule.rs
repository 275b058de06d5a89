//! The soak's fault schedule: what each kind of fault does and how long it is judged on, and the
//! seeded draw that spreads faults over the load. Pure: the same seed and duration give the
//! same faults at the same times.

use super::{ATTEMPT_S, DISPATCHERS, EXPLAIN_AFTER_S, KNOWN_DEAD_S, REAP_S, TAIL_FACTOR, round};

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    DispatcherKill,
    DispatcherTerm,
    ApiKill,
    DbFreeze,
    DbRestart,
    RedisKill,
}

impl Kind {
    pub(super) const ALL: [Kind; 6] = [
        Kind::DispatcherKill,
        Kind::DispatcherTerm,
        Kind::ApiKill,
        Kind::DbFreeze,
        Kind::DbRestart,
        Kind::RedisKill,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::DispatcherKill => "dispatcher-kill",
            Kind::DispatcherTerm => "dispatcher-sigterm",
            Kind::ApiKill => "api-kill",
            Kind::DbFreeze => "db-freeze",
            Kind::DbRestart => "db-restart",
            Kind::RedisKill => "redis-kill",
        }
    }

    /// How long it holds (freeze, refusal) or keeps its process down, seconds: `(low, high)`.
    pub(super) fn hold_range(self, smoke: bool) -> (f64, f64) {
        match (self, smoke) {
            (Kind::DispatcherKill, false) => (2.0, 6.0),
            (Kind::DispatcherTerm, false) => (1.0, 3.0),
            (Kind::ApiKill, false) => (1.0, 4.0),
            (Kind::DbFreeze, false) => (5.0, 15.0),
            (Kind::DbRestart, false) => (2.0, 8.0),
            (Kind::RedisKill, false) => (2.0, 8.0),
            (Kind::DispatcherKill, true) => (1.0, 2.0),
            (Kind::DispatcherTerm, true) => (0.5, 1.0),
            (Kind::ApiKill, true) => (1.0, 2.0),
            (Kind::DbFreeze, true) => (2.0, 4.0),
            (Kind::DbRestart, true) => (1.0, 3.0),
            (Kind::RedisKill, true) => (1.0, 2.0),
        }
    }

    /// The length a tail is judged against, for a fault that lasted `length_s`: its own,
    /// except a dispatcher `kill -9`, whose work comes back only once it is known dead and its
    /// leases are reaped (two heartbeats + reap interval) however soon it is started again.
    pub(super) fn judged_length(self, length_s: f64) -> f64 {
        match self {
            Kind::DispatcherKill => length_s.max(KNOWN_DEAD_S + REAP_S),
            _ => length_s,
        }
    }

    /// The window around a fault in which a duplicated message's first arrival is explained by
    /// it (see the module's notes), or `None` when this kind explains no duplicate.
    pub(super) fn explains(self, start_s: f64, end_s: f64) -> Option<(f64, f64)> {
        match self {
            Kind::DispatcherKill => Some((start_s - ATTEMPT_S, start_s + EXPLAIN_AFTER_S)),
            Kind::DbFreeze | Kind::DbRestart => {
                Some((start_s - ATTEMPT_S, end_s + EXPLAIN_AFTER_S))
            }
            Kind::DispatcherTerm | Kind::ApiKill | Kind::RedisKill => None,
        }
    }
}

/// A small seeded generator (SplitMix64): the schedule must not change with a dependency.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(super) fn between(&mut self, (low, high): (f64, f64)) -> f64 {
        low + (high - low) * self.unit()
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Planned {
    pub(super) kind: Kind,
    /// Seconds after the load starts.
    pub(super) at_s: f64,
    /// How long it holds, or keeps its process down before starting it again.
    pub(super) hold_s: f64,
    /// The dispatcher it hits (dispatcher kinds).
    pub(super) target: usize,
    /// Quiet seconds after it, for its tail.
    pub(super) gap_s: f64,
}

impl Planned {
    /// When the next fault may start, as planned (a SIGTERM's drain adds to it when run).
    pub(super) fn over_s(&self) -> f64 {
        self.at_s + self.hold_s + self.gap_s
    }
}

/// The faults and when the load ends.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Schedule {
    pub(super) faults: Vec<Planned>,
    /// Fault-free seconds at the start: the baseline.
    pub(super) warmup_s: f64,
    pub(super) load_s: f64,
}

impl Schedule {
    /// The schedule for `seed`: with `smoke`, each kind once in a seeded order with short
    /// holds and gaps; else kinds drawn uniformly over `duration_s`, each followed by a gap of
    /// twice the length its tail is judged against plus 5 s.
    pub(super) fn new(seed: u64, duration_s: f64, smoke: bool) -> Self {
        let mut rng = Rng(seed);
        let warmup_s = if smoke { 6.0 } else { 20.0 };
        let mut faults = Vec::new();
        let mut t = warmup_s;
        let plan = |kind: Kind, t: f64, rng: &mut Rng| {
            let hold_s = round(rng.between(kind.hold_range(smoke)));
            let target = rng.below(DISPATCHERS);
            let gap_s = if smoke {
                5.0
            } else {
                // A SIGTERM's drain is not known ahead: allow 5 s for it.
                let expected = match kind {
                    Kind::DispatcherTerm => hold_s + 5.0,
                    _ => hold_s,
                };
                TAIL_FACTOR * kind.judged_length(expected) + 5.0
            };
            Planned {
                kind,
                at_s: round(t),
                hold_s,
                target,
                gap_s,
            }
        };
        if smoke {
            let mut kinds = Kind::ALL;
            for i in (1..kinds.len()).rev() {
                kinds.swap(i, rng.below(i + 1));
            }
            for kind in kinds {
                let p = plan(kind, t, &mut rng);
                t = p.over_s();
                faults.push(p);
            }
            return Self {
                faults,
                warmup_s,
                load_s: t,
            };
        }
        loop {
            let kind = Kind::ALL[rng.below(Kind::ALL.len())];
            let p = plan(kind, t, &mut rng);
            if p.over_s() > duration_s {
                break;
            }
            t = p.over_s();
            faults.push(p);
        }
        Self {
            faults,
            warmup_s,
            load_s: duration_s.max(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::soak::{DEFAULT_DURATION_S, DEFAULT_SEED};

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        assert_eq!(
            Schedule::new(7, 1800.0, false),
            Schedule::new(7, 1800.0, false)
        );
        assert_eq!(Schedule::new(7, 0.0, true), Schedule::new(7, 0.0, true));
        assert_ne!(
            Schedule::new(7, 1800.0, false),
            Schedule::new(8, 1800.0, false)
        );
    }

    #[test]
    fn faults_do_not_overlap_and_fit_the_load() {
        for seed in 0..20 {
            for (duration, smoke) in [(1800.0, false), (300.0, false), (0.0, true)] {
                let s = Schedule::new(seed, duration, smoke);
                assert!(!s.faults.is_empty());
                assert!(s.faults[0].at_s >= s.warmup_s);
                for w in s.faults.windows(2) {
                    assert!(w[0].over_s() <= w[1].at_s + 1e-9, "{w:?}");
                }
                let last = s.faults.last().unwrap();
                assert!(last.over_s() <= s.load_s + 1e-9);
                for f in &s.faults {
                    let (low, high) = f.kind.hold_range(smoke);
                    assert!(f.hold_s >= low - 0.05 && f.hold_s <= high + 0.05, "{f:?}");
                    assert!(f.target < DISPATCHERS);
                    // The gap leaves room for a tail of twice the fault's judged length.
                    if !smoke {
                        assert!(f.gap_s >= TAIL_FACTOR * f.kind.judged_length(f.hold_s));
                    }
                }
            }
        }
    }

    #[test]
    fn smoke_has_every_kind_once_and_is_short() {
        for seed in 0..20 {
            let s = Schedule::new(seed, 1800.0, true);
            let kinds: HashSet<Kind> = s.faults.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), Kind::ALL.len());
            assert_eq!(s.faults.len(), Kind::ALL.len());
            assert!(s.load_s >= 40.0 && s.load_s <= 60.0, "{}", s.load_s);
        }
    }

    #[test]
    fn a_full_run_has_every_kind() {
        let s = Schedule::new(DEFAULT_SEED, DEFAULT_DURATION_S, false);
        let kinds: HashSet<Kind> = s.faults.iter().map(|f| f.kind).collect();
        assert_eq!(kinds.len(), Kind::ALL.len());
    }
}
