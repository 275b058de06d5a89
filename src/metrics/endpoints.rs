//! Per-endpoint series with bounded cardinality: the counters of every endpoint are kept in
//! memory, but only the top-N endpoints by occupancy (attempt-seconds, decayed with a five
//! minute half-life) get series of their own; everything else adds up in one
//! `endpoint="other"` series.
//!
//! Every exported series is monotonic, and every increment is attributed to exactly one series,
//! so `sum(rate(…))` over the series of a counter is its true rate across membership changes:
//! at each exposition pass the increments since the previous pass go to the endpoint's own
//! series when it is in the top-N, else to `other`. An endpoint that drops out keeps the value
//! it had (its series simply stops), and when it comes back it continues from there: nothing is
//! counted twice, no series ever decreases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// The label value that gathers every endpoint outside the top-N.
pub const OTHER: &str = "other";

/// How fast an endpoint's occupancy score forgets: its half-life.
const SCORE_HALF_LIFE: Duration = Duration::from_secs(300);

/// An endpoint whose counters have not moved for this long, and that is outside the top-N, is
/// forgotten (its increments already live in its own series or in `other`).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// What is counted per endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Delivered (2xx): `webhook_deliveries_ok_total`.
    Delivered = 0,
    /// Shed at a full lane, requeued, no attempt used: `webhook_deliveries_shed_total`.
    Shed = 1,
    /// An attempt that failed (to be retried, or dead-lettered): `sluice_attempts_failed_total`.
    AttemptFailed = 2,
    /// A delivery dead-lettered: `sluice_dead_letters_total`.
    DeadLettered = 3,
    /// Held by the endpoint's rate limit, requeued at its next turn, no attempt used:
    /// `sluice_rate_limited_total`.
    RateLimited = 4,
}

const COUNTS: usize = 5;

/// The counters' names and help, in [`Count`] order (OpenMetrics names, without `_total`).
const COUNTER_FAMILIES: [(&str, &str); COUNTS] = [
    (
        "webhook_deliveries_ok",
        "Deliveries answered 2xx, per endpoint (top-N by occupancy, the rest as other)",
    ),
    (
        "webhook_deliveries_shed",
        "Deliveries shed at a full lane and requeued (not attempts), per endpoint",
    ),
    (
        "sluice_attempts_failed",
        "Attempts that failed (retried later or dead-lettered), per endpoint",
    ),
    (
        "sluice_dead_letters",
        "Deliveries dead-lettered after their last attempt, per endpoint",
    ),
    (
        "sluice_rate_limited",
        "Deliveries held by the endpoint's rate limit and requeued at its next turn (not \
         attempts), per endpoint",
    ),
];

/// The live state of one endpoint at a scrape, as the dispatcher knows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointGauges {
    /// Lane size in force.
    pub lane_size: u32,
    /// Lane slots held.
    pub lane_in_flight: u32,
    /// The AIMD governor's limit.
    pub governor_limit: f64,
    /// "closed", "open" or "half_open".
    pub breaker: &'static str,
}

/// The breaker states, one series each.
pub const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

#[derive(Debug, Default)]
struct Live {
    counts: [AtomicU64; COUNTS],
    /// Attempt time, microseconds.
    occupancy_us: AtomicU64,
}

impl Live {
    fn read(&self) -> ([u64; COUNTS], u64) {
        let counts = std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed));
        (counts, self.occupancy_us.load(Ordering::Relaxed))
    }
}

#[derive(Debug, Default)]
struct Attribution {
    /// Counts (and occupancy) already attributed.
    seen: [u64; COUNTS],
    seen_us: u64,
    /// What this endpoint's own series shows.
    exported: [u64; COUNTS],
    /// Decayed attempt-seconds.
    score: f64,
    last_change: Option<Instant>,
}

#[derive(Debug, Default)]
struct Passes {
    by_endpoint: HashMap<String, Attribution>,
    other: [u64; COUNTS],
    top: Vec<String>,
    last_pass: Option<Instant>,
    gauges: HashMap<String, EndpointGauges>,
}

/// Per-endpoint counters and the top-N rule; registered as a collector.
#[derive(Debug)]
pub struct EndpointSeries {
    top_n: usize,
    live: RwLock<HashMap<String, Live>>,
    /// What forgotten endpoints had counted, so [`EndpointSeries::totals`] never goes down.
    /// Written only when an endpoint is forgotten (under the `live` write lock), never on the
    /// counting path.
    forgotten: [AtomicU64; COUNTS],
    passes: Mutex<Passes>,
}

impl EndpointSeries {
    /// Series for at most `top_n` endpoints (plus `other`).
    pub fn new(top_n: usize) -> Self {
        Self {
            top_n,
            live: RwLock::new(HashMap::new()),
            forgotten: Default::default(),
            passes: Mutex::new(Passes::default()),
        }
    }

    /// How many endpoints may have series of their own.
    pub fn top_n(&self) -> usize {
        self.top_n
    }

    /// Count one event for `endpoint` (no allocation once the endpoint is known).
    pub fn count(&self, endpoint: &str, what: Count) {
        self.with_live(endpoint, |l| {
            l.counts[what as usize].fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Add one attempt's duration to `endpoint`'s occupancy.
    pub fn occupied(&self, endpoint: &str, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.with_live(endpoint, |l| {
            l.occupancy_us.fetch_add(us, Ordering::Relaxed);
        });
    }

    /// `endpoint`'s count of `what` since this process started (or since it was forgotten).
    pub fn total(&self, endpoint: &str, what: Count) -> u64 {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        live.get(endpoint)
            .map_or(0, |l| l.counts[what as usize].load(Ordering::Relaxed))
    }

    /// This process's count of `what` over every endpoint since it started: the sum of the
    /// live counters plus what forgotten endpoints had counted (monotonic).
    pub fn totals(&self, what: Count) -> u64 {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        let known: u64 = live
            .values()
            .map(|l| l.counts[what as usize].load(Ordering::Relaxed))
            .sum();
        known + self.forgotten[what as usize].load(Ordering::Relaxed)
    }

    // The increment happens under the read lock, so a forget (under the write lock) never
    // drops an increment it did not see.
    fn with_live(&self, endpoint: &str, f: impl Fn(&Live)) {
        {
            let live = self.live.read().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = live.get(endpoint) {
                f(l);
                return;
            }
        }
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        f(live.entry(endpoint.to_owned()).or_default());
    }

    /// Replace the live gauges (lane, governor, breaker) of the endpoints the dispatcher knows;
    /// only the top-N of them are exported.
    pub fn set_gauges(&self, gauges: impl IntoIterator<Item = (String, EndpointGauges)>) {
        let mut passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        passes.gauges = gauges.into_iter().collect();
    }

    /// The endpoints with series of their own after the latest pass, busiest first.
    pub fn top(&self) -> Vec<String> {
        let passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        passes.top.clone()
    }

    /// Attribute what was counted since the previous pass, re-rank, and forget idle endpoints.
    fn pass(&self, now: Instant) -> Snapshot {
        let mut passes = self.passes.lock().unwrap_or_else(|p| p.into_inner());
        let decay = passes.last_pass.map_or(1.0, |t| {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            0.5f64.powf(dt / SCORE_HALF_LIFE.as_secs_f64())
        });
        passes.last_pass = Some(now);
        let mut deltas: Vec<(String, [u64; COUNTS])> = Vec::new();
        {
            let live = self.live.read().unwrap_or_else(|p| p.into_inner());
            for (id, l) in live.iter() {
                let (counts, us) = l.read();
                let a = passes.by_endpoint.entry(id.clone()).or_default();
                let delta: [u64; COUNTS] =
                    std::array::from_fn(|i| counts[i].saturating_sub(a.seen[i]));
                let delta_us = us.saturating_sub(a.seen_us);
                a.seen = counts;
                a.seen_us = us;
                a.score = a.score * decay + delta_us as f64 / 1e6;
                if delta_us > 0 || delta.iter().any(|d| *d > 0) {
                    a.last_change = Some(now);
                }
                deltas.push((id.clone(), delta));
            }
        }
        let mut ranked: Vec<(&String, f64, Option<Instant>)> = passes
            .by_endpoint
            .iter()
            .map(|(id, a)| (id, a.score, a.last_change))
            .collect();
        // Busiest first; among equals the most recently active, then by id for stability.
        ranked.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| b.2.cmp(&a.2))
                .then_with(|| a.0.cmp(b.0))
        });
        let top: Vec<String> = ranked
            .iter()
            .take(self.top_n)
            .map(|(id, ..)| (*id).clone())
            .collect();
        for (id, delta) in deltas {
            let in_top = top.contains(&id);
            let passes = &mut *passes;
            let target = match in_top {
                true => &mut passes.by_endpoint.entry(id).or_default().exported,
                false => &mut passes.other,
            };
            for (t, d) in target.iter_mut().zip(delta) {
                *t += d;
            }
        }
        self.forget_idle(&mut passes, &top, now);
        passes.top = top.clone();
        Snapshot {
            series: top
                .iter()
                .map(|id| {
                    let exported = passes
                        .by_endpoint
                        .get(id)
                        .map_or([0; COUNTS], |a| a.exported);
                    (id.clone(), exported, passes.gauges.get(id).copied())
                })
                .collect(),
            other: passes.other,
        }
    }

    fn forget_idle(&self, passes: &mut Passes, top: &[String], now: Instant) {
        let idle: Vec<String> = passes
            .by_endpoint
            .iter()
            .filter(|(id, a)| {
                !top.contains(id)
                    && a.last_change
                        .is_none_or(|t| now.saturating_duration_since(t) >= FORGET_AFTER)
            })
            .map(|(id, _)| id.clone())
            .collect();
        if idle.is_empty() {
            return;
        }
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        for id in idle {
            // Counted since this pass began: keep it, the next pass attributes it.
            let moved = live.get(&id).is_some_and(|l| {
                let a = &passes.by_endpoint[&id];
                let (counts, us) = l.read();
                counts != a.seen || us != a.seen_us
            });
            if !moved {
                if let Some(l) = live.remove(&id) {
                    let (counts, _) = l.read();
                    for (f, n) in self.forgotten.iter().zip(counts) {
                        f.fetch_add(n, Ordering::Relaxed);
                    }
                }
                passes.by_endpoint.remove(&id);
            }
        }
    }
}

struct Snapshot {
    series: Vec<(String, [u64; COUNTS], Option<EndpointGauges>)>,
    other: [u64; COUNTS],
}

impl Collector for EndpointSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.pass(Instant::now());
        for (i, (name, help)) in COUNTER_FAMILIES.iter().enumerate() {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (id, counts, _) in &snap.series {
                let labels = [("endpoint", id.as_str())];
                family
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&counts[i], None)?;
            }
            family
                .encode_family(&[("endpoint", OTHER)])?
                .encode_counter::<NoLabelSet, _, u64>(&snap.other[i], None)?;
        }
        let gauges: Vec<(&str, &EndpointGauges)> = snap
            .series
            .iter()
            .filter_map(|(id, _, g)| g.as_ref().map(|g| (id.as_str(), g)))
            .collect();
        type Read = fn(&EndpointGauges) -> f64;
        let families: [(&str, &str, Read); 3] = [
            (
                "sluice_lane_size",
                "Lane size in force per endpoint (top-N by occupancy)",
                |g| f64::from(g.lane_size),
            ),
            (
                "sluice_lane_in_flight",
                "Lane slots held per endpoint (top-N by occupancy)",
                |g| f64::from(g.lane_in_flight),
            ),
            (
                "sluice_governor_limit",
                "AIMD concurrency limit per endpoint (top-N by occupancy)",
                |g| g.governor_limit,
            ),
        ];
        for (name, help, read) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (id, g) in &gauges {
                family
                    .encode_family(&[("endpoint", *id)])?
                    .encode_gauge(&read(g))?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "sluice_breaker_state",
            "Breaker state per endpoint, one series per state, 1 for the state it is in \
             (top-N by occupancy)",
            None,
            MetricType::Gauge,
        )?;
        for (id, g) in &gauges {
            for state in BREAKER_STATES {
                family
                    .encode_family(&[("endpoint", *id), ("state", state)])?
                    .encode_gauge(&i64::from(g.breaker == state))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported(s: &Snapshot, id: &str, what: Count) -> Option<u64> {
        s.series
            .iter()
            .find(|(e, ..)| e == id)
            .map(|(_, c, _)| c[what as usize])
    }

    /// Every attribution, shown now or frozen since its endpoint left the top-N.
    fn sum(series: &EndpointSeries, what: Count) -> u64 {
        let passes = series.passes.lock().unwrap();
        let frozen: u64 = passes
            .by_endpoint
            .values()
            .map(|a| a.exported[what as usize])
            .sum();
        frozen + passes.other[what as usize]
    }

    #[test]
    fn only_the_busiest_have_series_and_the_sum_is_the_total() {
        let series = EndpointSeries::new(2);
        let t0 = Instant::now();
        for (id, secs, n) in [("ep_a", 5, 3), ("ep_b", 3, 2), ("ep_c", 1, 7)] {
            for _ in 0..n {
                series.count(id, Count::Delivered);
            }
            series.occupied(id, Duration::from_secs(secs));
        }
        let s = series.pass(t0);
        assert_eq!(series.top(), ["ep_a", "ep_b"]);
        assert_eq!(exported(&s, "ep_a", Count::Delivered), Some(3));
        assert_eq!(exported(&s, "ep_c", Count::Delivered), None);
        assert_eq!(s.other[Count::Delivered as usize], 7);
        assert_eq!(sum(&series, Count::Delivered), 12);
        assert_eq!(
            series.totals(Count::Delivered),
            12,
            "the process's own total"
        );
        assert_eq!(series.totals(Count::Shed), 0);
    }

    #[test]
    fn series_stay_monotonic_and_exact_when_membership_changes() {
        let series = EndpointSeries::new(1);
        let t0 = Instant::now();
        series.occupied("ep_a", Duration::from_secs(10));
        series.count("ep_a", Count::AttemptFailed);
        series.count("ep_b", Count::AttemptFailed);
        let first = series.pass(t0);
        assert_eq!(exported(&first, "ep_a", Count::AttemptFailed), Some(1));
        assert_eq!(first.other[Count::AttemptFailed as usize], 1);
        // ep_b becomes far busier: it takes the only series, ep_a's counts go to `other`.
        series.occupied("ep_b", Duration::from_secs(100));
        for _ in 0..5 {
            series.count("ep_b", Count::AttemptFailed);
            series.count("ep_a", Count::AttemptFailed);
        }
        let second = series.pass(t0 + Duration::from_secs(15));
        assert_eq!(series.top(), ["ep_b"]);
        // ep_b's series starts from what it had not yet shown elsewhere: 5, not 6.
        assert_eq!(exported(&second, "ep_b", Count::AttemptFailed), Some(5));
        assert_eq!(second.other[Count::AttemptFailed as usize], 1 + 5);
        assert_eq!(sum(&series, Count::AttemptFailed), 12);
        // ep_a comes back: its series continues from the 1 it showed, never below.
        series.occupied("ep_a", Duration::from_secs(10_000));
        series.count("ep_a", Count::AttemptFailed);
        let third = series.pass(t0 + Duration::from_secs(30));
        assert_eq!(exported(&third, "ep_a", Count::AttemptFailed), Some(2));
        assert_eq!(third.other[Count::AttemptFailed as usize], 6);
        assert_eq!(sum(&series, Count::AttemptFailed), 13);
    }

    #[test]
    fn idle_endpoints_outside_the_top_are_forgotten_without_losing_counts() {
        let series = EndpointSeries::new(1);
        let t0 = Instant::now();
        series.occupied("ep_a", Duration::from_secs(10));
        series.count("ep_b", Count::Shed);
        series.pass(t0);
        let later = series.pass(t0 + FORGET_AFTER + Duration::from_secs(1));
        assert_eq!(series.total("ep_b", Count::Shed), 0, "forgotten");
        assert_eq!(later.other[Count::Shed as usize], 1, "still counted");
        assert_eq!(series.totals(Count::Shed), 1, "the process total keeps it");
        series.count("ep_b", Count::Shed);
        assert_eq!(series.totals(Count::Shed), 2, "and goes on from there");
        // The top endpoint is kept however idle.
        assert_eq!(series.top(), ["ep_a"]);
    }

    #[test]
    fn breaker_states_are_one_series_each() {
        let series = EndpointSeries::new(5);
        series.occupied("ep_a", Duration::from_secs(1));
        series.set_gauges([(
            "ep_a".to_owned(),
            EndpointGauges {
                lane_size: 8,
                lane_in_flight: 2,
                governor_limit: 4.5,
                breaker: "open",
            },
        )]);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(series));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "sluice_breaker_state{endpoint=\"ep_a\",state=\"open\"} 1",
            "sluice_breaker_state{endpoint=\"ep_a\",state=\"closed\"} 0",
            "sluice_breaker_state{endpoint=\"ep_a\",state=\"half_open\"} 0",
            "sluice_governor_limit{endpoint=\"ep_a\"} 4.5",
            "webhook_deliveries_ok_total{endpoint=\"other\"} 0",
            "sluice_attempts_failed_total{endpoint=\"ep_a\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
