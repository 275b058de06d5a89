//! Each destination host's attempt time since this process started, in microseconds: the
//! cumulative figures a dispatcher's heartbeat carries (see
//! [`HostSeconds`](crate::model::HostSeconds)) so the console on any process shows the fleet's
//! occupancy shares. The same durations feed `delivery_duration_seconds{host}`, whose
//! histograms cannot be read back; this keeps their sums where the heartbeat can.
//!
//! An attempt takes the map's read lock (shared: attempts never wait on each other) and adds
//! to its host's atomic; only the first attempt to a host takes the write lock.
//!
//! The heartbeat names at most [`HostSeconds::TOP`] hosts: the busiest lately (their time
//! since the previous heartbeat and before it, halved every [`HALF_LIFE`]), so a host that
//! turns hot is named at the next beat however long the others have been counting; every
//! other host's time goes to `other`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::model::HostSeconds;

/// How fast a host's recent time fades when the heartbeat ranks the hosts.
pub const HALF_LIFE: Duration = Duration::from_secs(60);

/// Microseconds of attempts per destination host since this process started.
#[derive(Default)]
pub struct HostTime {
    hosts: RwLock<HashMap<String, AtomicU64>>,
    ranking: Mutex<Ranking>,
}

/// Each host's figure at the previous heartbeat and its fading recent time.
#[derive(Default)]
struct Ranking {
    at: Option<Instant>,
    hosts: HashMap<String, (u64, f64)>,
}

impl HostTime {
    /// Count `took` for `host`.
    pub fn add(&self, host: &str, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        {
            let hosts = self.hosts.read().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = hosts.get(host) {
                t.fetch_add(us, Ordering::Relaxed);
                return;
            }
        }
        let mut hosts = self.hosts.write().unwrap_or_else(|p| p.into_inner());
        hosts
            .entry(host.to_owned())
            .or_default()
            .fetch_add(us, Ordering::Relaxed);
    }

    /// Every host's microseconds so far.
    pub fn totals(&self) -> Vec<(String, u64)> {
        let hosts = self.hosts.read().unwrap_or_else(|p| p.into_inner());
        hosts
            .iter()
            .map(|(h, t)| (h.clone(), t.load(Ordering::Relaxed)))
            .collect()
    }

    /// The heartbeat's figures now: the `top` hosts busiest lately by name, the rest as
    /// `other`, every figure since the start.
    pub fn heartbeat(&self, top: usize) -> HostSeconds {
        let totals = self.totals();
        let mut ranking = self.ranking.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let fade = ranking.at.map_or(1.0, |at| {
            0.5f64.powf(now.duration_since(at).as_secs_f64() / HALF_LIFE.as_secs_f64())
        });
        ranking.at = Some(now);
        let mut ranked: Vec<(f64, u64, String)> = totals
            .into_iter()
            .map(|(host, us)| {
                let (before, recent) = ranking.hosts.get(&host).copied().unwrap_or((0, 0.0));
                let recent = recent * fade + us.saturating_sub(before) as f64;
                ranking.hosts.insert(host.clone(), (us, recent));
                (recent, us, host)
            })
            .collect();
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then_with(|| a.2.cmp(&b.2))
        });
        let seconds = |us: u64| us as f64 / 1e6;
        let mut figures = HostSeconds::default();
        for (n, (_, us, host)) in ranked.into_iter().enumerate() {
            if n < top {
                figures.hosts.insert(host, seconds(us));
            } else {
                figures.other += seconds(us);
            }
        }
        figures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_adds_up_per_host() {
        let t = HostTime::default();
        t.add("a.example", Duration::from_millis(1500));
        t.add("b.example", Duration::from_micros(7));
        t.add("a.example", Duration::from_millis(500));
        let mut totals = t.totals();
        totals.sort();
        assert_eq!(
            totals,
            [
                ("a.example".to_owned(), 2_000_000),
                ("b.example".to_owned(), 7)
            ]
        );
    }

    #[test]
    fn the_heartbeat_names_the_hosts_busiest_lately_and_adds_up_the_rest() {
        let t = HostTime::default();
        t.add("old.example", Duration::from_secs(100));
        t.add("b.example", Duration::from_secs(2));
        t.add("c.example", Duration::from_secs(1));
        let first = t.heartbeat(2);
        assert_eq!(
            first.hosts.keys().collect::<Vec<_>>(),
            ["b.example", "old.example"]
        );
        assert!((first.other - 1.0).abs() < 1e-9, "{first:?}");
        assert!((first.total() - 103.0).abs() < 1e-9);
        // A host that turns hot is named at the next beat, beside the one that has the most
        // time since the start, and still with all its time.
        t.add("c.example", Duration::from_secs(50));
        let second = t.heartbeat(2);
        assert_eq!(
            second.hosts.keys().collect::<Vec<_>>(),
            ["c.example", "old.example"]
        );
        assert!((second.hosts["c.example"] - 51.0).abs() < 1e-9);
        assert!((second.other - 2.0).abs() < 1e-9, "{second:?}");
        assert!((second.total() - 153.0).abs() < 1e-9);
    }
}
