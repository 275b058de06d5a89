//! From measurements (two `/metrics` scrapes, or the store's recorded attempts) to a plan:
//! the Erlang C concurrency, its layout, per-endpoint lanes and the warnings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::prom::{Scrape, counter_delta};
use crate::sizing::{self, Layout, SizeError, WaitTarget};
use crate::stats::littles_law_lane;

/// Mean ÷ p50 above which capping request time (or lanes) beats adding workers.
pub const SKEW_WARNING_RATIO: f64 = 5.0;

/// Load offered to one endpoint over the measurement interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EndpointLoad {
    /// Endpoint id.
    pub endpoint: String,
    /// Attempts plus sheds per second: delivered + failed + shed.
    pub offered_per_s: f64,
    /// Destination host, when known (from the store, or the only host seen).
    pub host: Option<String>,
    /// Service time used for the lane: the endpoint's (or its host's) p95, else the fleet's.
    pub latency_s: Option<f64>,
    /// Where `latency_s` came from: `endpoint p95`, `host p95`, `fleet p95` or `fleet mean`.
    pub latency_source: String,
    /// Lane size in force now (`sluice_lane_size`), when exported.
    pub current_lane: Option<u32>,
    /// Its rate limit, events per second, when known (from the store): the most its lane
    /// ever carries, whatever is offered.
    pub rate_limit_per_s: Option<f64>,
}

/// Attempt durations to one destination host.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostLoad {
    /// Destination host.
    pub host: String,
    /// Attempts per second.
    pub attempts_per_s: f64,
    /// Mean attempt duration, seconds.
    pub mean_s: Option<f64>,
    /// p95 attempt duration, seconds (histogram interpolation).
    pub p95_s: Option<f64>,
}

/// What was measured, whatever the source.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measurements {
    /// `metrics`, `store` or `metrics+store`.
    pub source: String,
    /// Length of the measurement, seconds.
    pub interval_s: f64,
    /// Attempts (including retries) completed in the interval.
    pub attempts: f64,
    /// Attempts per second, including retries.
    pub arrival_rate_per_s: f64,
    /// Change of the ready + leased backlog per second (`sluice_queue_depth`); positive when
    /// arrivals outrun completions, which then under-count the offered load.
    pub backlog_growth_per_s: Option<f64>,
    /// Mean service time, seconds.
    pub mean_service_s: Option<f64>,
    /// Median service time, seconds.
    pub p50_service_s: Option<f64>,
    /// 95th percentile service time, seconds.
    pub p95_service_s: Option<f64>,
    /// The dispatcher's global concurrency bound now, if exported.
    pub current_concurrency: Option<u32>,
    /// Age of the oldest due ready delivery, max over tenants, seconds.
    pub oldest_ready_age_s: Option<f64>,
    /// Per endpoint, busiest first.
    pub endpoints: Vec<EndpointLoad>,
    /// Per destination host, busiest first.
    pub hosts: Vec<HostLoad>,
    /// The live fleet (dispatchers with a fresh heartbeat) when it was readable: then the
    /// arrival rate, mean service time and current concurrency are the whole fleet's, not one
    /// process's.
    pub fleet: Option<crate::sizing::heartbeats::FleetLoad>,
}

/// Knobs for turning measurements into a plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlanOptions {
    /// The queue-wait objective.
    pub target: WaitTarget,
    /// Largest share of the recommended concurrency one lane may hold (0–1].
    pub lane_share: f64,
    /// Concurrent tasks per process.
    pub tasks_per_process: u32,
    /// Processes per pod.
    pub processes_per_pod: u32,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            target: WaitTarget::Mean { wait_s: 0.5 },
            lane_share: 0.25,
            tasks_per_process: 160,
            processes_per_pod: 4,
        }
    }
}

/// One endpoint's lane by Little's Law, clamped by the fairness ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneRecommendation {
    /// Endpoint id.
    pub endpoint: String,
    /// Offered per second.
    pub offered_per_s: f64,
    /// Service time used, seconds, and its source.
    pub latency_s: f64,
    /// Where the service time came from.
    pub latency_source: String,
    /// Lane in force now, if known.
    pub current_lane: Option<u32>,
    /// `⌈offered × latency⌉`, at least 1, at most the ceiling.
    pub recommended_lane: u32,
    /// True when the ceiling cut the Little's Law figure: cap this endpoint, do not add workers.
    pub clamped_by_ceiling: bool,
}

/// The result of `sluice plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// What was measured.
    pub measured: Measurements,
    /// The objective the pool was sized for.
    pub target: WaitTarget,
    /// Rate sized for: attempts per second plus any backlog growth.
    pub offered_rate_per_s: f64,
    /// Offered load in erlangs: offered rate × mean service time (mean busy workers).
    pub offered_load_erlangs: f64,
    /// Smallest Erlang C pool meeting the target.
    pub recommended_concurrency: u32,
    /// Offered load ÷ recommended concurrency.
    pub utilisation: f64,
    /// Offered load ÷ current concurrency, when the current bound is known.
    pub current_utilisation: Option<f64>,
    /// Predicted mean queue wait at the recommended pool, seconds.
    pub predicted_mean_wait_s: f64,
    /// Processes, pods and file descriptors for the recommended pool.
    pub layout: Layout,
    /// Mean ÷ p50 service time.
    pub mean_to_p50: Option<f64>,
    /// Largest lane any endpoint may get: `lane_share` of the recommended concurrency.
    pub lane_ceiling: u32,
    /// Per-endpoint lanes, busiest first.
    pub lanes: Vec<LaneRecommendation>,
    /// Things the operator should know.
    pub warnings: Vec<String>,
}

/// Measurements from two scrapes of `/metrics` taken `elapsed_s` seconds apart.
pub fn from_scrapes(before: &Scrape, after: &Scrape, elapsed_s: f64) -> Measurements {
    let elapsed_s = elapsed_s.max(f64::MIN_POSITIVE);
    let delta = |name: &str| {
        let b = before.by_label(name, "endpoint");
        after
            .by_label(name, "endpoint")
            .into_iter()
            .map(move |(k, v)| {
                let d = counter_delta(b.get(&k).copied().unwrap_or(0.0), v);
                (k, d)
            })
    };
    let service = after.histogram("webhook_service_seconds").map(|h| {
        h.delta(
            &before
                .histogram("webhook_service_seconds")
                .unwrap_or_default(),
        )
    });
    let before_hosts = before.histograms("delivery_duration_seconds", Some("host"));
    let host_deltas: BTreeMap<String, _> = after
        .histograms("delivery_duration_seconds", Some("host"))
        .into_iter()
        .map(|(host, h)| {
            let d = h.delta(&before_hosts.get(&host).cloned().unwrap_or_default());
            (host, d)
        })
        .collect();
    let attempts = match &service {
        Some(h) if h.count > 0.0 => h.count,
        _ => host_deltas.values().map(|h| h.count).sum(),
    };
    let mut hosts: Vec<HostLoad> = host_deltas
        .iter()
        .map(|(host, h)| HostLoad {
            host: host.clone(),
            attempts_per_s: h.count / elapsed_s,
            mean_s: h.mean(),
            p95_s: h.quantile(0.95),
        })
        .collect();
    hosts.sort_by(|a, b| b.attempts_per_s.total_cmp(&a.attempts_per_s));

    let mut offered: BTreeMap<String, f64> = BTreeMap::new();
    for name in [
        "webhook_deliveries_ok_total",
        "sluice_attempts_failed_total",
        "webhook_deliveries_shed_total",
    ] {
        // `other` gathers the endpoints outside the metrics' top-N: not one endpoint to size.
        for (endpoint, d) in delta(name).filter(|(e, _)| e != crate::metrics::endpoints::OTHER) {
            *offered.entry(endpoint).or_insert(0.0) += d;
        }
    }
    let lanes = after.by_label("sluice_lane_size", "endpoint");
    let only_host = (hosts.len() == 1).then(|| hosts[0].clone());
    let endpoints = offered
        .into_iter()
        .map(|(endpoint, n)| EndpointLoad {
            current_lane: lanes.get(&endpoint).map(|v| *v as u32),
            host: only_host.as_ref().map(|h| h.host.clone()),
            latency_s: only_host.as_ref().and_then(|h| h.p95_s),
            latency_source: if only_host.as_ref().is_some_and(|h| h.p95_s.is_some()) {
                "host p95".to_owned()
            } else {
                String::new()
            },
            endpoint,
            offered_per_s: n / elapsed_s,
            rate_limit_per_s: None,
        })
        .collect();
    let backlog = |scrape: &Scrape| {
        let depth = scrape.by_label("sluice_queue_depth", "state");
        let pending = ["ready", "leased"].map(|k| depth.get(k).copied());
        pending[0].map(|ready| ready + pending[1].unwrap_or(0.0))
    };
    let backlog_growth_per_s = match (backlog(before), backlog(after)) {
        (Some(b), Some(a)) => Some((a - b) / elapsed_s),
        _ => None,
    };
    let mut m = Measurements {
        source: "metrics".to_owned(),
        interval_s: elapsed_s,
        attempts,
        arrival_rate_per_s: attempts / elapsed_s,
        backlog_growth_per_s,
        mean_service_s: service.as_ref().and_then(|h| h.mean()),
        p50_service_s: service.as_ref().and_then(|h| h.quantile(0.5)),
        p95_service_s: service.as_ref().and_then(|h| h.quantile(0.95)),
        current_concurrency: after.sum("sluice_concurrency_limit").map(|v| v as u32),
        oldest_ready_age_s: after
            .by_label("sluice_oldest_ready_age_seconds", "tenant")
            .into_values()
            .reduce(f64::max),
        endpoints,
        hosts,
        fleet: None,
    };
    m.sort_endpoints();
    // Any process exports the fleet's figures from the heartbeats: an API-only process, or one
    // dispatcher of many, measures only itself, the fleet gauges measure all of them.
    let fleet_gauge = |name: &str| after.sum(name).filter(|v| v.is_finite() && *v >= 0.0);
    if let Some(n) = fleet_gauge("sluice_fleet_dispatchers").filter(|n| *n >= 1.0) {
        m.use_fleet(crate::sizing::heartbeats::FleetLoad {
            dispatchers: n as u32,
            draining: 0,
            in_flight: fleet_gauge("sluice_fleet_in_flight").unwrap_or(0.0) as u32,
            concurrency: fleet_gauge("sluice_fleet_concurrency_limit").unwrap_or(0.0) as u32,
            capacity: 0,
            arrivals_per_s: fleet_gauge("sluice_fleet_arrivals_per_second").unwrap_or(0.0),
            mean_service_s: fleet_gauge("sluice_fleet_mean_service_seconds").unwrap_or(0.0),
        });
    }
    m
}

impl Measurements {
    /// Take the fleet's load and concurrency in place of one process's.
    pub fn use_fleet(&mut self, fleet: crate::sizing::heartbeats::FleetLoad) {
        if fleet.dispatchers == 0 {
            return;
        }
        if fleet.arrivals_per_s > 0.0 {
            self.arrival_rate_per_s = fleet.arrivals_per_s;
        }
        if fleet.mean_service_s > 0.0 {
            self.mean_service_s = Some(fleet.mean_service_s);
        }
        if fleet.concurrency > 0 {
            self.current_concurrency = Some(fleet.concurrency);
        }
        self.fleet = Some(fleet);
    }

    /// Orders endpoints busiest first (ties by id) so reports are stable.
    pub fn sort_endpoints(&mut self) {
        self.endpoints.sort_by(|a, b| {
            b.offered_per_s
                .total_cmp(&a.offered_per_s)
                .then_with(|| a.endpoint.cmp(&b.endpoint))
        });
    }
}

/// Sizes the pool for `m` against `options`.
pub fn plan(m: &Measurements, options: &PlanOptions) -> Result<PlanReport, SizeError> {
    let mut warnings = Vec::new();
    let mean = m.mean_service_s.filter(|v| v.is_finite() && *v > 0.0);
    if m.attempts <= 0.0 || mean.is_none() {
        warnings.push(
            "no attempts were measured: run the plan at peak traffic, over a longer interval"
                .to_owned(),
        );
    }
    let service_s = mean.unwrap_or(1.0);
    let growth = m
        .backlog_growth_per_s
        .filter(|g| g.is_finite())
        .unwrap_or(0.0);
    let offered_rate = m.arrival_rate_per_s.max(0.0) + growth.max(0.0);
    if growth > 0.1 && growth > 0.05 * m.arrival_rate_per_s {
        warnings.push(format!(
            "the backlog grew by {growth:.1}/s: completed attempts under-count arrivals, so the \
             plan sizes for {offered_rate:.1}/s (completed + growth)"
        ));
    }
    let load = if mean.is_some() {
        offered_rate * service_s
    } else {
        0.0
    };
    let concurrency = match options.target {
        WaitTarget::Mean { wait_s } => sizing::servers_for_mean_wait(load, service_s, wait_s)?,
        WaitTarget::Percentile { quantile, wait_s } => {
            sizing::servers_for_percentile_wait(load, service_s, wait_s, quantile)?
        }
    };
    let layout = sizing::plan_layout(
        concurrency,
        options.tasks_per_process,
        options.processes_per_pod,
        sizing::current_fd_soft_limit(),
    )?;
    let mean_to_p50 = match (mean, m.p50_service_s) {
        (Some(mean), Some(p50)) if p50 > 0.0 => Some(mean / p50),
        _ => None,
    };
    if let Some(ratio) = mean_to_p50.filter(|r| *r > SKEW_WARNING_RATIO) {
        warnings.push(format!(
            "mean service time is {ratio:.1}× the p50: a few slow endpoints dominate; cap request \
             time or lanes before adding workers"
        ));
    }
    let lane_share = options.lane_share.clamp(0.0, 1.0);
    let ceiling = ((f64::from(concurrency) * lane_share).floor() as u32).max(1);
    let lanes = lanes(m, ceiling, mean);
    let clamped: Vec<&str> = lanes
        .iter()
        .filter(|l| l.clamped_by_ceiling)
        .map(|l| l.endpoint.as_str())
        .collect();
    if !clamped.is_empty() {
        warnings.push(format!(
            "{} endpoint(s) need more than the fairness ceiling of {ceiling}: {}; capped, they \
             shed rather than take the pool (cap them if slow; if healthy, raise --lane-share)",
            clamped.len(),
            clamped.join(", ")
        ));
    }
    let current_utilisation = m
        .current_concurrency
        .filter(|c| *c > 0)
        .map(|c| load / f64::from(c));
    if current_utilisation.is_some_and(|u| u >= 1.0) {
        warnings.push(
            "the current concurrency is at or below the offered load: the queue grows".into(),
        );
    }
    if layout.fd_limit_too_low {
        warnings.push(format!(
            "ulimit -n here is below the {} file descriptors each process needs",
            layout.fds_per_process
        ));
    }
    Ok(PlanReport {
        measured: m.clone(),
        target: options.target,
        offered_rate_per_s: offered_rate,
        offered_load_erlangs: load,
        recommended_concurrency: concurrency,
        utilisation: load / f64::from(concurrency),
        current_utilisation,
        predicted_mean_wait_s: sizing::mean_queue_wait(concurrency, load, service_s),
        layout,
        mean_to_p50,
        lane_ceiling: ceiling,
        lanes,
        warnings,
    })
}

/// Little's Law lanes: offered × (endpoint or host p95, else the fleet p95, else the mean).
fn lanes(m: &Measurements, ceiling: u32, mean: Option<f64>) -> Vec<LaneRecommendation> {
    let fleet = m
        .p95_service_s
        .map(|v| (v, "fleet p95"))
        .or(mean.map(|v| (v, "fleet mean")));
    m.endpoints
        .iter()
        .filter_map(|e| {
            let (latency_s, source) = match e.latency_s {
                Some(v) => (v, e.latency_source.clone()),
                None => fleet.map(|(v, s)| (v, s.to_owned()))?,
            };
            // A rate limit caps what the lane carries: a backlog offered above it waits for its
            // turns, it does not need slots.
            let carried = e
                .rate_limit_per_s
                .map_or(e.offered_per_s, |limit| e.offered_per_s.min(limit));
            let lane = littles_law_lane(
                carried,
                Duration::try_from_secs_f64(latency_s).unwrap_or(Duration::MAX),
                ceiling,
            );
            Some(LaneRecommendation {
                endpoint: e.endpoint.clone(),
                offered_per_s: e.offered_per_s,
                latency_s,
                latency_source: source,
                current_lane: e.current_lane,
                recommended_lane: lane,
                clamped_by_ceiling: (carried * latency_s).ceil() > f64::from(ceiling),
            })
        })
        .collect()
}
