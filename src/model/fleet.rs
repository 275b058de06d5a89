//! The fleet's heartbeats: who each dispatcher is, its load, and its running totals (the
//! tally and the seconds per destination host) that rates and shares are taken from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A dispatcher's heartbeat: who it is and its load, rewritten every heartbeat interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heartbeat {
    /// The dispatcher's id (`dsp_…`, new at every start).
    pub id: String,
    /// The name of the host it runs on (a pod's name on Kubernetes); empty when unknown.
    pub host: String,
    /// When it started, ms epoch.
    pub started_at_ms: i64,
    /// When this heartbeat was written, ms epoch.
    pub beat_at_ms: i64,
    /// Attempts in flight.
    pub in_flight: u32,
    /// Its global bound on in-flight attempts now.
    pub concurrency: u32,
    /// The largest bound it may reach (`--concurrency`, or the top of `auto:MIN-MAX`).
    pub capacity: u32,
    /// Offered attempts per second (delivered and failed), from its rolling windows.
    pub arrivals_per_s: f64,
    /// Mean attempt duration, seconds (0 without samples).
    pub mean_service_s: f64,
    /// Has it begun to drain?
    pub draining: bool,
    /// What it has done since it started, for fleet-wide rates on any process.
    pub tally: Tally,
    /// Its attempts' seconds per destination host since it started, for fleet-wide
    /// occupancy shares on any process.
    pub host_seconds: HostSeconds,
}

/// A dispatcher's worker-seconds (attempt durations added up) per destination host since it
/// started, carried by its heartbeat and stored as JSON text (`{"hosts":{…},"other":…}`).
/// Bounded: at most [`HostSeconds::TOP`] hosts by name, the ones busiest lately, and every
/// other host's seconds in `other`, so the sum is always the dispatcher's whole time. A named
/// host's figure is its whole time since the start, whenever it joined the named ones; like
/// the [`Tally`], every figure starts at 0 with the process. See
/// [`crate::sizing::heartbeats::HostShares`] for how a reader takes shares from two of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSeconds {
    /// Seconds per named host.
    #[serde(default)]
    pub hosts: BTreeMap<String, f64>,
    /// Seconds of every host not named.
    #[serde(default)]
    pub other: f64,
}

impl HostSeconds {
    /// Hosts named in one heartbeat at most.
    pub const TOP: usize = 32;

    /// Every host's seconds, the named ones and the others.
    pub fn total(&self) -> f64 {
        self.hosts.values().sum::<f64>() + self.other
    }

    /// As stored: JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// From the stored text; text that does not parse (never written by sluice) reads as none,
    /// as a dispatcher that has just started.
    pub fn from_json(text: &str) -> HostSeconds {
        let mut read: HostSeconds = serde_json::from_str(text).unwrap_or_default();
        let clean = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        read.hosts.values_mut().for_each(|v| *v = clean(*v));
        read.other = clean(read.other);
        read
    }
}

/// A dispatcher's cumulative counts since it started, carried by its heartbeat: a reader takes
/// rates from two of them (see [`crate::sizing::heartbeats::FleetRates`]). They start at 0 with
/// every process, so a count lower than the one before means a restart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Deliveries answered 2xx.
    pub delivered: u64,
    /// Attempts that failed (retried later or dead-lettered).
    pub failed: u64,
    /// Deliveries shed at a full lane and requeued (no attempt used).
    pub shed: u64,
}
