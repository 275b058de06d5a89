//! What the rest of the program may know about a running dispatcher, as values: the pool
//! (concurrency, attempts in flight, load, fleet mode) and, per endpoint, its lane, governor,
//! breaker and window figures. Everything outside `dispatcher` reads the dispatcher through
//! [`Ctx::view`]; nothing outside locks an endpoint's runtime state.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::Ctx;
pub use crate::admission::LaneBasis;
use crate::admission::fleet::mode::FleetMode;
use crate::stats::WindowSnapshot;

/// Which part of the dispatcher to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look<'a> {
    /// The pool's figures only.
    Pool,
    /// The pool and one endpoint, with its window figures (nothing if this dispatcher has not
    /// handled a delivery to it, or has forgotten it).
    Endpoint(&'a str),
    /// The pool and every endpoint held in memory; window figures only when `windows` (they
    /// merge histograms, so a metrics scrape that needs none skips them).
    Endpoints {
        /// Include each endpoint's window figures?
        windows: bool,
    },
}

/// A dispatcher's state at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct DispatcherView {
    /// The pool.
    pub pool: PoolView,
    /// The endpoints asked for (see [`Look`]).
    pub endpoints: Vec<EndpointView>,
}

/// The dispatcher's global figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PoolView {
    /// The global bound on concurrent attempts in force.
    pub concurrency: u32,
    /// Attempts holding a global slot now.
    pub in_flight: u32,
    /// Claimed deliveries not yet settled (in flight, waiting at a lane, or being settled).
    pub outstanding: usize,
    /// Has drain begun?
    pub draining: bool,
    /// The load across the endpoints held in memory, from their windows (`None` when looking
    /// at one endpoint: the load needs every window).
    pub load: Option<Load>,
    /// Endpoints held in memory.
    pub endpoints_held: usize,
    /// Which rule admits deliveries fleet-wide (`None` without Redis).
    pub fleet_mode: Option<FleetModeName>,
    /// Live dispatchers: those Redis knows to be alive, or without Redis those whose heartbeats
    /// are fresh (what this dispatcher's part of each lane and rate limit is a part of).
    pub live_dispatchers: Option<u32>,
}

/// The offered load, from the endpoints' rolling windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Load {
    /// Attempts per second (delivered and failed).
    pub arrivals_per_s: f64,
    /// Mean attempt duration, seconds (0 without samples).
    pub mean_service_s: f64,
}

/// One tenant as a dispatcher sees it ([`Ctx::tenants`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant_id: String,
    /// Its weight in force.
    pub weight: u32,
    /// Its ceiling in force (1: none).
    pub max_share: f64,
    /// Deliveries it has in flight or waiting at a lane in this dispatcher.
    pub in_flight: u32,
    /// Its share of this dispatcher's pool's time over about the last minute (attempt-seconds
    /// per second ÷ the concurrency).
    pub occupancy: f64,
}

/// [`FleetMode`] without its instant, for reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetModeName {
    /// A Redis slot admits.
    Redis,
    /// Redis returned: a Redis slot and the local share admit.
    Recovering,
    /// Redis just went away: at most what was held then.
    OutageStart,
    /// Redis gone for longer: the local share admits.
    Local,
}

/// One endpoint as the dispatcher sees it.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    /// `ep_…`
    pub id: String,
    /// `ten_…`
    pub tenant_id: String,
    /// Destination host.
    pub host: String,
    /// Enabled, as last read from the store.
    pub enabled: bool,
    /// The lane: override, else Little's Law on the window, else the default; within the
    /// fairness ceiling.
    pub lane_size: u32,
    /// Where `lane_size` comes from.
    pub lane_basis: LaneBasis,
    /// The lane in force now: min(lane size, governor limit).
    pub effective_lane: u32,
    /// Lane slots held now.
    pub lane_in_use: u32,
    /// Claimed deliveries on their way to the lane.
    pub pending: u32,
    /// The AIMD limit.
    pub governor_limit: f64,
    /// Is a Retry-After pause running?
    pub paused: bool,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// Is the breaker holding deliveries back now (open, cooldown not over)?
    pub breaker_holding: bool,
    /// Recent attempt duration (exponentially weighted).
    pub service_ewma: Option<Duration>,
    /// Rolling window figures, when asked for.
    pub window: Option<WindowSnapshot>,
}

impl Ctx {
    /// The dispatcher's state, as values (see [`Look`] for what is included).
    pub fn view(&self, look: Look<'_>) -> DispatcherView {
        let now = Instant::now();
        let concurrency = self.concurrency();
        let runtimes = match look {
            Look::Endpoint(id) => self.endpoints.cached(id).into_iter().collect(),
            Look::Pool | Look::Endpoints { .. } => self.endpoints.all(),
        };
        // The load comes from every window: it is what the auto-sizer and the scale signal use.
        let with_load = !matches!(look, Look::Endpoint(_));
        let windows = matches!(look, Look::Endpoint(_) | Look::Endpoints { windows: true });
        let (mut arrivals, mut weighted, mut samples) = (0.0, 0.0, 0u64);
        let mut endpoints = Vec::new();
        let keep = !matches!(look, Look::Pool);
        let policy = self.endpoint_policy();
        for rt in &runtimes {
            let r = rt.reading(now, &policy, with_load || windows);
            if let (true, Some(snapshot)) = (with_load, &r.window) {
                arrivals += snapshot.delivered_per_s + snapshot.failed_per_s;
                if let Some(mean) = snapshot.mean {
                    weighted += mean.as_secs_f64() * snapshot.samples as f64;
                    samples += snapshot.samples;
                }
            }
            if keep {
                endpoints.push(EndpointView {
                    id: rt.id().to_owned(),
                    tenant_id: rt.tenant_id().to_owned(),
                    host: r.parsed.host.clone(),
                    enabled: r.enabled,
                    lane_size: r.lane_size,
                    lane_basis: r.lane_basis,
                    effective_lane: r.lane_in_force,
                    lane_in_use: rt.lane().in_use(),
                    pending: rt.pending(),
                    governor_limit: r.governor_limit,
                    paused: r.paused,
                    breaker: r.breaker,
                    breaker_holding: r.breaker_holding,
                    service_ewma: r.service_ewma,
                    window: r.window.filter(|_| windows),
                });
            }
        }
        let fleet = self.fleet.lanes.as_ref();
        DispatcherView {
            pool: PoolView {
                concurrency,
                in_flight: self.in_flight(),
                outstanding: self.outstanding(),
                draining: self.is_draining(),
                load: with_load.then(|| Load {
                    arrivals_per_s: arrivals,
                    mean_service_s: if samples > 0 {
                        weighted / samples as f64
                    } else {
                        0.0
                    },
                }),
                endpoints_held: self.endpoints.len(),
                fleet_mode: fleet.map(|f| match self.fleet_mode(f) {
                    FleetMode::Redis => FleetModeName::Redis,
                    FleetMode::Recovering => FleetModeName::Recovering,
                    FleetMode::OutageStart(_) => FleetModeName::OutageStart,
                    FleetMode::Local => FleetModeName::Local,
                }),
                live_dispatchers: Some(self.fleet.live_dispatchers()),
            },
            endpoints,
        }
    }

    /// Attempts holding a global slot now.
    fn in_flight(&self) -> u32 {
        let concurrency = self.concurrency() as usize;
        concurrency.saturating_sub(self.attempts.available_permits()) as u32
    }

    /// Each tenant this dispatcher has served lately: its policy as last read, what it holds of
    /// the pool now (deliveries in flight or waiting at a lane) and its use of the pool's time,
    /// busiest first.
    pub fn tenants(&self) -> Vec<TenantView> {
        let mut holds: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
        for rt in self.endpoints.all() {
            let n = rt.taken();
            if n > 0 {
                *holds.entry(rt.tenant_id().to_owned()).or_default() += n;
            }
        }
        let concurrency = f64::from(self.concurrency().max(1));
        let (weight, max_share) = (self.settings.tenant_weight, self.settings.tenant_max_share);
        self.tenants
            .uses()
            .into_iter()
            .map(|u| {
                let (weight, max_share) = super::tenants::in_force(u.policy, weight, max_share);
                TenantView {
                    in_flight: holds.remove(&u.tenant_id).unwrap_or(0),
                    occupancy: (u.busy / concurrency).min(1.0),
                    tenant_id: u.tenant_id,
                    weight,
                    max_share,
                }
            })
            .collect()
    }

    /// Forget an endpoint's cached configuration, so its next delivery re-reads it from the
    /// store (it was edited, enabled, disabled or had its secret rotated).
    pub fn reload_endpoint(&self, id: &str) {
        self.endpoints.invalidate(id);
    }
}
