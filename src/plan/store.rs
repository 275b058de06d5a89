//! Measurements read from the store through the public [`Store`] trait only: the attempts
//! recorded in a recent window (durations are the HTTP attempt, not lease-to-settle), each
//! endpoint's destination host, and the age of the oldest ready delivery.

use std::collections::BTreeMap;
use std::time::Duration;

use super::analyse::{EndpointLoad, HostLoad, Measurements};
use crate::model::DeliveryFilter;
use crate::store::{Store, StoreResult};

const PAGE: u32 = 500;

/// What the store showed, and where each endpoint sends.
#[derive(Debug, Clone, Default)]
pub struct StoreReading {
    /// Attempt-based measurements over the window.
    pub measurements: Measurements,
    /// Endpoint id → destination host.
    pub hosts: BTreeMap<String, String>,
    /// Scan limits that were hit, and similar notes.
    pub warnings: Vec<String>,
}

/// Reads attempts started within `window` before `now_ms`, scanning at most `max_deliveries`
/// delivery rows (oldest ids first, so a capped scan under-counts recent traffic; it says so).
pub async fn read_store(
    store: &dyn Store,
    window: Duration,
    max_deliveries: u32,
    now_ms: i64,
) -> StoreResult<StoreReading> {
    let window_ms = window.as_millis().clamp(1, i64::MAX as u128) as i64;
    let since_ms = now_ms.saturating_sub(window_ms);
    let mut reading = StoreReading::default();
    let mut durations: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut rate_limits: BTreeMap<String, f64> = BTreeMap::new();
    let mut scanned = 0u32;
    let mut capped = false;
    let mut tenant_cursor: Option<String> = None;
    'tenants: loop {
        let tenants = store.list_tenants(tenant_cursor.as_deref(), PAGE).await?;
        let Some(last) = tenants.last() else { break };
        tenant_cursor = Some(last.id.clone());
        for tenant in &tenants {
            let mut ep_cursor: Option<String> = None;
            loop {
                let page = store
                    .list_endpoints(&tenant.id, ep_cursor.as_deref(), PAGE)
                    .await?;
                let Some(last) = page.last() else { break };
                ep_cursor = Some(last.id.clone());
                for ep in &page {
                    if let Some(limit) = ep.rate_limit {
                        rate_limits.insert(ep.id.clone(), limit.per_second());
                    }
                    if let Some(host) = url::Url::parse(&ep.url)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_owned))
                    {
                        reading.hosts.insert(ep.id.clone(), host);
                    }
                }
            }
            let mut filter = DeliveryFilter {
                tenant_id: tenant.id.clone(),
                message_id: None,
                endpoint_id: None,
                state: None,
                after: None,
                limit: PAGE,
            };
            loop {
                let page = store.list_deliveries(&filter).await?;
                let Some(last) = page.last() else { break };
                filter.after = Some(last.id);
                for d in &page {
                    scanned += 1;
                    if d.attempts > 0 && d.updated_at_ms >= since_ms {
                        for a in store.attempts(&tenant.id, d.id).await? {
                            if a.started_at_ms >= since_ms && a.started_at_ms <= now_ms {
                                durations
                                    .entry(d.endpoint_id.clone())
                                    .or_default()
                                    .push(f64::from(a.duration_ms) / 1000.0);
                            }
                        }
                    }
                    if scanned >= max_deliveries {
                        capped = true;
                        break 'tenants;
                    }
                }
            }
        }
    }
    if capped {
        reading.warnings.push(format!(
            "stopped after scanning {max_deliveries} deliveries: the store figures under-count; \
             prefer --metrics-url or raise --max-deliveries"
        ));
    }
    let stats = store.queue_stats(now_ms).await?;
    let oldest = stats
        .oldest_ready_age_ms
        .iter()
        .map(|(_, ms)| (*ms).max(0) as f64 / 1000.0)
        .reduce(f64::max);
    reading.measurements = summarise(&durations, &reading.hosts, window.as_secs_f64(), oldest);
    for e in &mut reading.measurements.endpoints {
        e.rate_limit_per_s = rate_limits.get(&e.endpoint).copied();
    }
    // The attempts in the store are already the whole fleet's; the heartbeats add how many
    // dispatchers run now and their concurrency (fresh: the default three intervals).
    let fresh_ms = crate::dispatcher::DispatchSettings::default()
        .heartbeat_fresh()
        .as_millis() as i64;
    let since = now_ms - fresh_ms;
    let fleet = crate::sizing::heartbeats::FleetLoad::from_heartbeats(
        &store.heartbeats(since).await?,
        since,
    );
    if fleet.dispatchers > 0 {
        reading.measurements.current_concurrency = Some(fleet.concurrency);
        reading.measurements.fleet = Some(fleet);
    }
    Ok(reading)
}

/// Turns per-endpoint attempt durations over `window_s` into [`Measurements`].
pub fn summarise(
    durations: &BTreeMap<String, Vec<f64>>,
    hosts: &BTreeMap<String, String>,
    window_s: f64,
    oldest_ready_age_s: Option<f64>,
) -> Measurements {
    let window_s = window_s.max(f64::MIN_POSITIVE);
    let mut all: Vec<f64> = durations.values().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let mut by_host: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let endpoints = durations
        .iter()
        .map(|(endpoint, samples)| {
            let host = hosts.get(endpoint).cloned();
            if let Some(h) = &host {
                by_host
                    .entry(h.clone())
                    .or_default()
                    .extend(samples.iter().copied());
            }
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            EndpointLoad {
                endpoint: endpoint.clone(),
                offered_per_s: samples.len() as f64 / window_s,
                host,
                latency_s: nearest_rank(&sorted, 0.95),
                latency_source: "endpoint p95".to_owned(),
                current_lane: None,
                rate_limit_per_s: None,
            }
        })
        .collect();
    let mut host_loads: Vec<HostLoad> = by_host
        .into_iter()
        .map(|(host, mut samples)| {
            samples.sort_by(f64::total_cmp);
            HostLoad {
                attempts_per_s: samples.len() as f64 / window_s,
                mean_s: mean(&samples),
                p95_s: nearest_rank(&samples, 0.95),
                host,
            }
        })
        .collect();
    host_loads.sort_by(|a, b| b.attempts_per_s.total_cmp(&a.attempts_per_s));
    let mut m = Measurements {
        source: "store".to_owned(),
        interval_s: window_s,
        attempts: all.len() as f64,
        arrival_rate_per_s: all.len() as f64 / window_s,
        backlog_growth_per_s: None,
        mean_service_s: mean(&all),
        p50_service_s: nearest_rank(&all, 0.5),
        p95_service_s: nearest_rank(&all, 0.95),
        current_concurrency: None,
        oldest_ready_age_s,
        endpoints,
        hosts: host_loads,
        fleet: None,
    };
    m.sort_endpoints();
    m
}

/// Completes `/metrics` measurements with what only the store knows: each endpoint's host (so
/// its lane uses that host's p95) and the oldest ready age when the scrape had none.
pub fn merge(metrics: &mut Measurements, store: &StoreReading) {
    metrics.source = "metrics+store".to_owned();
    let host_p95: BTreeMap<&str, f64> = metrics
        .hosts
        .iter()
        .filter_map(|h| h.p95_s.map(|p| (h.host.as_str(), p)))
        .collect();
    for e in &mut metrics.endpoints {
        if let Some(host) = store.hosts.get(&e.endpoint) {
            e.host = Some(host.clone());
            if let Some(p95) = host_p95.get(host.as_str()) {
                e.latency_s = Some(*p95);
                e.latency_source = "host p95".to_owned();
            }
        }
    }
    if metrics.oldest_ready_age_s.is_none() {
        metrics.oldest_ready_age_s = store.measurements.oldest_ready_age_s;
    }
    if metrics.fleet.is_none()
        && let Some(fleet) = store.measurements.fleet
    {
        metrics.use_fleet(fleet);
    }
}

fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Nearest-rank quantile of sorted samples: the ⌈q·n⌉-th smallest.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    (n > 0).then(|| sorted[((q * n as f64) as usize).min(n - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarise_counts_attempts_per_endpoint_and_host() {
        let durations = BTreeMap::from([
            ("ep_a".to_owned(), vec![0.1, 0.2, 0.3, 4.0]),
            ("ep_b".to_owned(), vec![1.0]),
        ]);
        let hosts = BTreeMap::from([("ep_a".to_owned(), "a.example".to_owned())]);
        let m = summarise(&durations, &hosts, 10.0, Some(3.0));
        assert_eq!(m.attempts, 5.0);
        assert_eq!(m.arrival_rate_per_s, 0.5);
        assert!((m.mean_service_s.expect("mean") - 1.12).abs() < 1e-9);
        assert_eq!(m.p50_service_s, Some(0.3));
        assert_eq!(m.endpoints[0].endpoint, "ep_a");
        assert_eq!(m.endpoints[0].latency_s, Some(4.0));
        assert_eq!(m.hosts.len(), 1);
        assert_eq!(m.oldest_ready_age_s, Some(3.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }
}
