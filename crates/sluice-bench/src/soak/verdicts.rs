//! The soak's judgements over what the run collected: a fault's tail, the requests that were
//! late, the shed counter read from `/metrics`, and which duplicates a fault explains. Pure:
//! no I/O, unit-tested below.

use std::collections::{BTreeMap, HashMap};

use super::schedule::Kind;
use crate::arrivals::Arrival;

/// A fault as it ran.
#[derive(Debug, Clone)]
pub(super) struct Done {
    pub(super) kind: Kind,
    pub(super) target: usize,
    pub(super) start_s: f64,
    /// When the fault was over: the proxy thawed or up again, the process or Redis back.
    pub(super) end_s: f64,
    /// When the next fault started (or the load ended): the tail is read until then.
    pub(super) until_s: f64,
    /// SIGTERM → exit, and whether it exited cleanly.
    pub(super) drain: Option<(f64, bool)>,
}

impl Done {
    pub(super) fn length_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}

/// A tail, seconds from the fault's end (`f.end_s`) until the later of:
///
/// - the first whole second from which every second before the next fault (`f.until_s`)
///   delivered something with a p99 at most `threshold_ms` (`p99[i]` is second `i`'s p99;
///   `None`, nothing delivered, is not back while the load runs); when the last second before
///   the next fault is not back, that fault's start;
/// - the arrival of the last of this fault's stragglers: requests in `late` (`(POSTed at,
///   arrived at)` of requests later than the threshold) that were already late before the next
///   fault began and not before this one did (POSTed at + threshold within
///   `[f.start_s, f.until_s)`), so a request late because of one fault counts for it alone,
///   however far into the next one's window it arrives.
///
/// `None` when there was no second to read and no straggler.
pub(super) fn tail(
    p99: &[Option<f64>],
    late: &[(f64, f64)],
    f: &Done,
    threshold_ms: f64,
) -> Option<f64> {
    let (end_s, until_s) = (f.end_s, f.until_s);
    let from = end_s.max(0.0).floor() as usize;
    let to = (until_s.max(0.0).floor() as usize).min(p99.len());
    let by_seconds = (from < to).then(|| {
        let good = |i: usize| p99[i].is_some_and(|v| v <= threshold_ms);
        let mut back = until_s;
        for i in (from..to).rev() {
            if !good(i) {
                break;
            }
            back = i as f64;
        }
        back
    });
    let threshold_s = threshold_ms / 1000.0;
    let last_straggler = late
        .iter()
        .filter(|(posted, _)| {
            let due = posted + threshold_s;
            due >= f.start_s && due < until_s
        })
        .map(|(_, arrived)| *arrived)
        .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
    let over = match (by_seconds, last_straggler) {
        (Some(a), Some(b)) => a.max(b),
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => return None,
    };
    Some((over - end_s).max(0.0))
}

/// `(POSTed at, arrived at)` of the requests of `customers` later than `threshold_ms`, seconds.
pub(super) fn late_requests(
    arrivals: &[Arrival],
    customers: impl Fn(u64) -> bool,
    threshold_ms: f64,
) -> Vec<(f64, f64)> {
    arrivals
        .iter()
        .filter(|a| customers(a.key.0))
        .filter_map(|a| {
            let took = a.took_s?;
            (took * 1000.0 > threshold_ms).then_some((a.at_s - took, a.at_s))
        })
        .collect()
}

/// `webhook_deliveries_shed_total` in a `/metrics` text: `(the endpoint's, every endpoint's)`.
pub(super) fn shed_in(text: &str, endpoint: &str) -> (f64, f64) {
    let label = format!("endpoint=\"{endpoint}\"");
    let mut out = (0.0, 0.0);
    for line in text
        .lines()
        .filter(|l| l.starts_with("webhook_deliveries_shed_total"))
    {
        let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if line.contains(&label) {
            out.0 += v;
        }
        out.1 += v;
    }
    out
}

/// What the deliveries say about duplicates.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Duplicates {
    /// Requests beyond a message's first.
    pub(super) requests: u64,
    /// Messages delivered more than once.
    pub(super) messages: u64,
    /// Duplicated messages whose first arrival a fault explains, by kind.
    pub(super) explained: BTreeMap<&'static str, u64>,
    /// Duplicated messages no fault explains.
    pub(super) unexplained: u64,
    /// Duplicates with another `webhook-id` than the message's first delivery.
    pub(super) other_id: u64,
}

impl Duplicates {
    pub(super) fn explained_total(&self) -> u64 {
        self.explained.values().sum()
    }
}

/// Count duplicates, and which fault explains each duplicated message (the first whose window
/// holds its first arrival).
pub(super) fn duplicates(arrivals: &[Arrival], faults: &[Done]) -> Duplicates {
    let mut by_key: HashMap<(u64, u64), Vec<&Arrival>> = HashMap::new();
    for a in arrivals {
        by_key.entry(a.key).or_default().push(a);
    }
    let mut d = Duplicates::default();
    for seen in by_key.values().filter(|s| s.len() > 1) {
        d.messages += 1;
        d.requests += seen.len() as u64 - 1;
        let first = seen
            .iter()
            .min_by(|a, b| a.at_s.total_cmp(&b.at_s))
            .expect("non-empty");
        d.other_id += seen
            .iter()
            .filter(|a| a.webhook_id != first.webhook_id)
            .count() as u64;
        let by = faults.iter().find(|f| {
            f.kind
                .explains(f.start_s, f.end_s)
                .is_some_and(|(from, to)| first.at_s >= from && first.at_s <= to)
        });
        match by {
            Some(f) => *d.explained.entry(f.kind.name()).or_default() += 1,
            None => d.unexplained += 1,
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::{KNOWN_DEAD_S, REAP_S};

    #[test]
    fn tail_is_from_the_end_to_the_last_bad_second() {
        let p = |v: &[f64]| -> Vec<Option<f64>> {
            v.iter().map(|&x| (x >= 0.0).then_some(x)).collect()
        };
        let window = |start_s, end_s, until_s| Done {
            until_s,
            ..done(Kind::DbFreeze, start_s, end_s)
        };
        // Seconds 10–12 bad, back from 13 on: ended at 10.5, tail 2.5 s.
        let series = p(&[50.0; 10]
            .iter()
            .chain(&[900.0, 800.0, 400.0, 60.0, 40.0, 50.0, 45.0])
            .copied()
            .collect::<Vec<_>>());
        assert_eq!(
            tail(&series, &[], &window(8.0, 10.5, 17.0), 250.0),
            Some(2.5)
        );
        // Already back in the second it ended: 0.
        assert_eq!(
            tail(&series, &[], &window(8.0, 13.2, 17.0), 250.0),
            Some(0.0)
        );
        // A bad second later (a kill's leases coming back) moves the end past it.
        let series = p(&[50.0, 50.0, 50.0, 3000.0, 50.0, 50.0]);
        assert_eq!(tail(&series, &[], &window(0.0, 1.0, 6.0), 250.0), Some(3.0));
        // A second without deliveries is not back; still bad at the next fault: up to it.
        let series = p(&[50.0, -1.0, 50.0, 900.0]);
        assert_eq!(tail(&series, &[], &window(0.0, 0.5, 4.0), 250.0), Some(3.5));
        assert_eq!(tail(&series, &[], &window(0.0, 0.5, 3.0), 250.0), Some(1.5));
        // No second to read and no straggler.
        assert_eq!(tail(&series, &[], &window(3.0, 3.5, 3.9), 250.0), None);
    }

    #[test]
    fn a_fault_owns_the_stragglers_it_made_late() {
        let series: Vec<Option<f64>> = vec![Some(50.0); 40];
        let f = Done {
            until_s: 20.0,
            ..done(Kind::DbRestart, 4.0, 6.0)
        };
        // POSTed during the fault, shed and requeued: arrives at 30 s, past the next fault's
        // start; the tail runs to it.
        assert_eq!(tail(&series, &[(5.0, 30.0)], &f, 250.0), Some(24.0));
        // POSTed just before the next fault (on time had it not begun): that fault's.
        assert_eq!(tail(&series, &[(19.9, 35.0)], &f, 250.0), Some(0.0));
        // Already late before this fault began: the previous one's.
        assert_eq!(tail(&series, &[(3.0, 12.0)], &f, 250.0), Some(0.0));
        // Late requests of the right window only.
        let arrivals = [
            Arrival {
                took_s: Some(9.0),
                ..arrival(0, 0, "a", 14.0)
            },
            Arrival {
                took_s: Some(0.01),
                ..arrival(0, 1, "b", 14.0)
            },
            Arrival {
                took_s: Some(9.0),
                ..arrival(7, 2, "c", 14.0)
            },
        ];
        assert_eq!(
            late_requests(&arrivals, |c| c != 7, 250.0),
            vec![(5.0, 14.0)]
        );
    }

    fn arrival(c: u64, seq: u64, id: &str, at_s: f64) -> Arrival {
        Arrival {
            key: (c, seq),
            webhook_id: id.into(),
            at_s,
            took_s: None,
        }
    }

    fn done(kind: Kind, start_s: f64, end_s: f64) -> Done {
        Done {
            kind,
            target: 0,
            start_s,
            end_s,
            until_s: end_s + 30.0,
            drain: None,
        }
    }

    #[test]
    fn duplicates_are_explained_by_kills_and_database_faults_only() {
        let faults = [
            done(Kind::DispatcherKill, 100.0, 103.0),
            done(Kind::DbRestart, 200.0, 205.0),
            done(Kind::ApiKill, 300.0, 302.0),
            done(Kind::DbFreeze, 400.0, 410.0),
        ];
        let seen = [
            // Once: not a duplicate.
            arrival(0, 0, "a", 1.0),
            // In flight 2 s before the kill, again when its lease expired.
            arrival(0, 1, "b", 98.0),
            arrival(0, 1, "b", 125.0),
            // Its first arrival after the kill (+1 s): not the kill's.
            arrival(0, 2, "c", 102.5),
            arrival(0, 2, "c", 126.0),
            // During the database restart, twice more.
            arrival(0, 3, "d", 203.0),
            arrival(0, 3, "d", 226.0),
            arrival(0, 3, "d", 250.0),
            // At the API kill: nothing explains it.
            arrival(0, 4, "e", 299.0),
            arrival(0, 4, "e", 301.0),
            // Within the attempt deadline before a freeze, under another webhook-id.
            arrival(0, 5, "f", 390.0),
            arrival(0, 5, "g", 420.0),
        ];
        let d = duplicates(&seen, &faults);
        assert_eq!(d.requests, 6);
        assert_eq!(d.messages, 5);
        assert_eq!(d.unexplained, 2);
        assert_eq!(d.other_id, 1);
        assert_eq!(
            d.explained,
            BTreeMap::from([("db-freeze", 1), ("db-restart", 1), ("dispatcher-kill", 1)])
        );
        assert_eq!(d.explained_total(), 3);
    }

    #[test]
    fn sums_the_shed_counter() {
        let text = "# HELP webhook_deliveries_shed_total Deliveries shed\n\
                    # TYPE webhook_deliveries_shed_total counter\n\
                    webhook_deliveries_shed_total{endpoint=\"ep_a\"} 3\n\
                    webhook_deliveries_shed_total{endpoint=\"ep_b\"} 4\n\
                    webhook_deliveries_total 99\n";
        assert_eq!(shed_in(text, "ep_a"), (3.0, 7.0));
        assert_eq!(shed_in(text, "ep_c"), (0.0, 7.0));
        assert_eq!(shed_in("", "ep_a"), (0.0, 0.0));
    }

    #[test]
    fn a_kill_is_judged_on_the_lease() {
        assert_eq!(
            Kind::DispatcherKill.judged_length(3.0),
            KNOWN_DEAD_S + REAP_S
        );
        assert_eq!(Kind::DbFreeze.judged_length(8.0), 8.0);
        assert_eq!(Kind::RedisKill.explains(1.0, 2.0), None);
    }
}
