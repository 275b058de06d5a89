//! Readings every [`INTERVAL`], kept for [`KEEP`], of this process's metrics and of the live
//! dispatchers' heartbeats in the store. The dashboard's fleet rates and charts are differences
//! between two readings of the heartbeats (see [`FleetRates`]), so an API process that runs no
//! dispatcher shows the whole fleet's deliveries; the occupancy share per host is, the same
//! way, the growth of the dispatchers' worker-seconds per host (carried by their heartbeats)
//! over the last minutes divided by the growth over every host (see [`HostShares`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::model::Heartbeat;
use crate::plan::Scrape;
use crate::sizing::heartbeats::{FleetRates, HostShares};
use crate::store::SharedStore;

/// Time between readings.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// How far back readings are kept.
pub const KEEP: Duration = Duration::from_secs(15 * 60);

/// One reading of the metrics.
#[derive(Clone)]
pub struct Reading {
    /// When it was taken.
    pub at: Instant,
    /// The same, epoch ms.
    pub at_ms: i64,
    /// Every sample.
    pub scrape: Arc<Scrape>,
    /// The live dispatchers' heartbeats then (`None`: the store did not answer).
    pub fleet: Option<Arc<[Heartbeat]>>,
}

/// Where the live heartbeats are read.
pub struct FleetSource {
    /// The store the dispatchers beat into.
    pub store: SharedStore,
    /// Heartbeats written within this long are live (three heartbeat intervals).
    pub fresh: Duration,
}

impl FleetSource {
    /// The live heartbeats now, or `None` when the store does not answer (logged: the page
    /// shows no fleet figures rather than wrong ones).
    pub async fn read(&self) -> Option<Arc<[Heartbeat]>> {
        let since = crate::clock::now_ms() - self.fresh.as_millis() as i64;
        match self.store.heartbeats(since).await {
            Ok(beats) => Some(beats.into()),
            Err(e) => {
                tracing::debug!(error = %e, "console: cannot read the heartbeats");
                None
            }
        }
    }
}

/// The readings, oldest first.
pub struct Sampler {
    metrics: Weak<Metrics>,
    fleet: FleetSource,
    ring: Mutex<VecDeque<Reading>>,
}

impl Sampler {
    /// Start reading `metrics` and the heartbeats in `fleet` in the background; the task ends
    /// when the metrics are dropped.
    pub fn start(metrics: &Arc<Metrics>, fleet: FleetSource) -> Arc<Sampler> {
        let sampler = Arc::new(Sampler {
            metrics: Arc::downgrade(metrics),
            fleet,
            ring: Mutex::new(VecDeque::new()),
        });
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let weak = Arc::downgrade(&sampler);
                rt.spawn(async move {
                    let mut tick = tokio::time::interval(INTERVAL);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        match weak.upgrade() {
                            Some(s) if s.metrics.strong_count() > 0 => s.record().await,
                            _ => break,
                        }
                    }
                });
            }
            // Without a runtime (never in a server) the first reading has no fleet figures.
            Err(_) => sampler.keep(sampler.now()),
        }
        sampler
    }

    /// A reading taken now (not kept).
    pub fn now(&self) -> Option<Reading> {
        let metrics = self.metrics.upgrade()?;
        // The registry's own text cannot fail to parse; an empty scrape if it ever did.
        let scrape = Scrape::parse(&metrics.encode()).unwrap_or_default();
        Some(Reading {
            at: Instant::now(),
            at_ms: crate::clock::now_ms(),
            scrape: Arc::new(scrape),
            fleet: None,
        })
    }

    /// A reading taken now with the live heartbeats (not kept).
    pub async fn now_with_fleet(&self) -> Option<Reading> {
        let fleet = self.fleet.read().await;
        self.now().map(|r| Reading { fleet, ..r })
    }

    async fn record(&self) {
        let reading = self.now_with_fleet().await;
        self.keep(reading);
    }

    fn keep(&self, reading: Option<Reading>) {
        let Some(reading) = reading else { return };
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.push_back(reading);
        while ring
            .front()
            .is_some_and(|r| r.at.elapsed() > KEEP + INTERVAL)
        {
            ring.pop_front();
        }
    }

    /// Every kept reading, oldest first.
    pub fn readings(&self) -> Vec<Reading> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }

    /// The newest kept reading at least `age` old, else the oldest one (None when the oldest
    /// is younger than a second: too short to be a rate).
    pub fn baseline(&self, age: Duration) -> Option<Reading> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter()
            .rev()
            .find(|r| r.at.elapsed() >= age)
            .or_else(|| ring.front())
            .filter(|r| r.at.elapsed() >= Duration::from_secs(1))
            .cloned()
    }
}

/// The fleet's rates between two readings, from the live heartbeats in each (`None` when
/// either reading has no heartbeats: the store did not answer then).
pub fn fleet_between(before: &Reading, after: &Reading) -> Option<FleetRates> {
    Some(FleetRates::between(
        before.fleet.as_deref()?,
        after.fleet.as_deref()?,
    ))
}

/// The fleet's share of worker-seconds per destination host between two readings, from the
/// live heartbeats in each (`None` when either reading has no heartbeats: the store did not
/// answer then). See [`HostShares::between`].
pub fn occupancy_shares(before: &Reading, after: &Reading) -> Option<HostShares> {
    Some(HostShares::between(
        before.fleet.as_deref()?,
        after.fleet.as_deref()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(text: &str, at: Instant) -> Reading {
        Reading {
            at,
            at_ms: 0,
            scrape: Arc::new(Scrape::parse(text).expect("metrics text")),
            fleet: None,
        }
    }

    fn beat(id: &str, at_ms: i64, hosts: &[(&str, f64)]) -> Heartbeat {
        Heartbeat {
            id: id.into(),
            host: String::new(),
            started_at_ms: 0,
            beat_at_ms: at_ms,
            in_flight: 0,
            concurrency: 1,
            capacity: 1,
            arrivals_per_s: 0.0,
            mean_service_s: 0.0,
            draining: false,
            tally: crate::model::Tally::default(),
            host_seconds: crate::model::HostSeconds {
                hosts: hosts.iter().map(|(h, s)| ((*h).to_owned(), *s)).collect(),
                other: 0.0,
            },
        }
    }

    #[test]
    fn shares_are_the_fleets_worker_seconds_per_host() {
        let t0 = Instant::now();
        let with = |beats: Vec<Heartbeat>, at| Reading {
            fleet: Some(beats.into()),
            ..reading("", at)
        };
        let before = with(vec![beat("dsp_a", 10_000, &[("a", 10.0), ("b", 5.0)])], t0);
        let after = with(
            vec![
                beat("dsp_a", 20_000, &[("a", 30.0), ("b", 10.0)]),
                beat("dsp_b", 20_000, &[("a", 10.0), ("b", 5.0), ("c", 0.0)]),
            ],
            t0 + Duration::from_secs(10),
        );
        let shares = occupancy_shares(&before, &after).expect("both readings have heartbeats");
        assert_eq!(shares.hosts.len(), 2, "{shares:?}");
        assert_eq!(shares.hosts[0].0, "a");
        assert!((shares.hosts[0].1 - 0.75).abs() < 1e-9, "{shares:?}");
        assert!((shares.hosts[1].1 - 0.25).abs() < 1e-9, "{shares:?}");
        assert!((shares.total_seconds - 40.0).abs() < 1e-9);
        assert!(occupancy_shares(&reading("", t0), &after).is_none());
    }

    #[test]
    fn fleet_rates_need_heartbeats_in_both_readings() {
        let t0 = Instant::now();
        let beat = |at_ms, delivered| Heartbeat {
            tally: crate::model::Tally {
                delivered,
                ..Default::default()
            },
            ..beat("dsp_a", at_ms, &[])
        };
        let with = |beats: Vec<Heartbeat>, at| Reading {
            fleet: Some(beats.into()),
            ..reading("", at)
        };
        let before = with(vec![beat(10_000, 10)], t0);
        let after = with(vec![beat(15_000, 60)], t0 + Duration::from_secs(10));
        let f = fleet_between(&before, &after).expect("both readings have heartbeats");
        assert!((f.total.delivered_per_s - 10.0).abs() < 1e-9, "{f:?}");
        assert!(fleet_between(&reading("", t0), &after).is_none());
    }
}
