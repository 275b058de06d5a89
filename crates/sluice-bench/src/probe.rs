//! One reading of the dispatcher's live state: the pool (global attempt slots) and, per watched
//! endpoint, the governor's limit, the lane's occupancy and size, and the shed counter.

use std::collections::HashMap;

use super::harness::Probe;
use sluice::dispatcher::Look;
use sluice::metrics::Count;

/// One endpoint at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EndpointSample {
    /// The AIMD limit.
    pub governor: f64,
    /// Lane slots held.
    pub lane_in_use: f64,
    /// The configured lane (override or default, clamped by the fairness ceiling).
    pub lane_size: f64,
    /// Deliveries shed so far.
    pub shed_total: f64,
    /// Failed attempts so far.
    pub failed_total: f64,
}

/// The dispatcher at one instant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    /// The global bound on attempts in flight.
    pub concurrency: f64,
    /// Attempts in flight.
    pub in_flight: f64,
    /// Claimed deliveries not yet settled (in flight or waiting at their lanes); what the
    /// pool's size bounds. Known only in-process (`None` for a target).
    pub outstanding: Option<f64>,
    /// Watched endpoints by id (missing until the dispatcher has seen one).
    pub endpoints: HashMap<String, EndpointSample>,
}

impl Sample {
    /// Free global attempt slots.
    pub(crate) fn free_slots(&self) -> f64 {
        self.concurrency - self.in_flight
    }
}

impl Probe {
    /// Read the pool and the endpoints `ids`.
    pub(crate) async fn sample(&self, ids: &[String]) -> Sample {
        match self {
            Probe::Embedded { ctx, metrics } => {
                let mut pool = None;
                let mut endpoints = HashMap::new();
                for id in ids {
                    let view = ctx.view(Look::Endpoint(id));
                    pool = Some(view.pool);
                    let Some(e) = view.endpoints.into_iter().next() else {
                        continue;
                    };
                    let shed_total = metrics.endpoints.total(id, Count::Shed) as f64;
                    let failed_total = metrics.endpoints.total(id, Count::AttemptFailed) as f64;
                    endpoints.insert(
                        id.clone(),
                        EndpointSample {
                            governor: e.governor_limit,
                            lane_in_use: f64::from(e.lane_in_use),
                            lane_size: f64::from(e.lane_size),
                            shed_total,
                            failed_total,
                        },
                    );
                }
                let pool = pool.unwrap_or_else(|| ctx.view(Look::Pool).pool);
                Sample {
                    concurrency: f64::from(pool.concurrency),
                    in_flight: f64::from(pool.in_flight),
                    outstanding: Some(pool.outstanding as f64),
                    endpoints,
                }
            }
            Probe::Remote {
                http,
                url,
                admin_token,
            } => {
                let text = match http.get(url).bearer_auth(admin_token).send().await {
                    Ok(r) => r.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                parse_metrics(&text, ids)
            }
        }
    }
}

/// Read the figures a [`Sample`] needs out of a Prometheus text exposition.
pub(crate) fn parse_metrics(text: &str, ids: &[String]) -> Sample {
    let mut sample = Sample::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, endpoint) = match name_labels.split_once('{') {
            Some((name, labels)) => (name, label(labels, "endpoint")),
            None => (name_labels, None),
        };
        match (name, endpoint) {
            ("sluice_concurrency_limit", _) => sample.concurrency = value,
            ("sluice_in_flight", _) => sample.in_flight = value,
            (_, Some(id)) if ids.iter().any(|i| i == id) => {
                let e = sample.endpoints.entry(id.to_owned()).or_default();
                match name {
                    "sluice_governor_limit" => e.governor = value,
                    "sluice_lane_in_flight" => e.lane_in_use = value,
                    "sluice_lane_size" => e.lane_size = value,
                    "webhook_deliveries_shed_total" => e.shed_total = value,
                    "sluice_attempts_failed_total" => e.failed_total = value,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    sample
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels
        .trim_end_matches('}')
        .split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_exposition() {
        let text = "# HELP x\nsluice_concurrency_limit 16\nsluice_in_flight 3\n\
            sluice_governor_limit{endpoint=\"ep_a\"} 2.5\n\
            webhook_deliveries_shed_total{endpoint=\"ep_a\"} 7\n\
            sluice_governor_limit{endpoint=\"ep_b\"} 8.0\n";
        let s = parse_metrics(text, &["ep_a".to_owned()]);
        assert_eq!(s.free_slots(), 13.0);
        assert_eq!(s.endpoints["ep_a"].governor, 2.5);
        assert_eq!(s.endpoints["ep_a"].shed_total, 7.0);
        assert!(!s.endpoints.contains_key("ep_b"));
    }
}
