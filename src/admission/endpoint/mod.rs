//! One endpoint at run time in this dispatcher: the one home of its lane, governor, breaker,
//! rate-limit turns, evidence window and lane sizing. Every question about it is a method here
//! ([`EndpointRuntime::held`], [`EndpointRuntime::lane_in_force`]), so the claim view,
//! admission and the evidence ask the same ones; its fields are private, behind one short-held
//! mutex that is never held across an await.
//!
//! A delivery takes that mutex twice on its way ([`EndpointRuntime::enter`] at admission, which
//! also hands back the parsed configuration, and [`EndpointRuntime::conclude`] after the
//! attempt), once more only when the fleet's rate limit in Redis answers or a delivery is
//! turned away after it entered (shed, tenant full).
//!
//! `C` is what the dispatcher parsed from the endpoint's configuration (its target): admission
//! hands it back to the caller without looking inside.

mod conclude;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

pub use conclude::{Attempt, Effects, FailingChange, LANE_RESIZE, Outcome};

use super::breaker::{Admission, Breaker, BreakerSettings, BreakerState};
use super::fleet::FleetCount;
use super::governor::{self, GovernorSettings, GovernorState};
use super::held::Held;
use super::lane::Lane;
use super::rate::Turns;
use super::seats::{Seat, Seats};
use crate::model::RateLimit;
use crate::stats::{Window, WindowSnapshot};

/// Where an endpoint's lane size comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LaneBasis {
    /// The operator set it on the endpoint.
    Override,
    /// Little's Law on the endpoint's window: arrivals × mean service time × headroom.
    Measured,
    /// Not measured yet: the configured default.
    Default,
}

/// The dispatcher's settings an endpoint's state follows, for the concurrency in force.
#[derive(Debug, Clone, Copy)]
pub struct EndpointPolicy<'a> {
    /// Lane of an endpoint not yet measured.
    pub lane_default: u32,
    /// The fairness ceiling on any one lane, for the concurrency in force.
    pub lane_ceiling: u32,
    /// Headroom over the measured mean concurrency.
    pub lane_headroom: f64,
    /// How long a delivery may wait for a lane slot.
    pub lane_deadline: Duration,
    /// The AIMD governor.
    pub governor: &'a GovernorSettings,
    /// Failing continuously this long disables the endpoint.
    pub auto_disable_after: Duration,
}

/// An endpoint's configuration as last read, with what the dispatcher parsed from it.
#[derive(Debug, Clone)]
pub struct Configuration<C> {
    /// Enabled?
    pub enabled: bool,
    /// The operator's lane.
    pub lane_override: Option<u32>,
    /// Its rate limit.
    pub rate_limit: Option<RateLimit>,
    /// Its breakers (the latency ceiling is per endpoint).
    pub breaker: BreakerSettings,
    /// Its attempts' total deadline (zero when it cannot be delivered to).
    pub attempt_total: Duration,
    /// Start of its current unbroken run of failures, as stored.
    pub failing_since_ms: Option<i64>,
    /// What the dispatcher parsed from it.
    pub parsed: C,
}

/// Mutable per-endpoint state.
struct State<C> {
    parsed: C,
    enabled: bool,
    lane_override: Option<u32>,
    attempt_total: Duration,
    /// AIMD limit and Retry-After pause.
    governor: GovernorState,
    /// Latency and error breakers.
    breaker: Breaker,
    /// Rolling statistics for the evidence.
    window: Window,
    /// Start of the current unbroken run of failures.
    failing_since_ms: Option<i64>,
    /// Recent attempt duration (exponentially weighted), for sizing claims to the lane.
    service_ewma: Option<Duration>,
    /// The lane Little's Law gives from the window (before the fairness ceiling); `None` until
    /// the window holds enough attempts.
    measured_lane: Option<u32>,
    /// When `measured_lane` was last computed.
    lane_sized_at: Option<Instant>,
    /// Deliveries offered to the lane since then: the rate a step in traffic shows at once,
    /// before the window's five-minute average catches up.
    offered_since_sized: u32,
    /// Its rate limit's buckets in this process, when it has a limit.
    rate: Option<Turns>,
}

/// One endpoint as this dispatcher sees it.
pub struct EndpointRuntime<C> {
    id: String,
    tenant_id: String,
    /// Its tenant's seats in the pool (one count per tenant, shared by its endpoints).
    seats: Arc<Seats>,
    /// The bulkhead.
    lane: Arc<Lane>,
    /// Claimed deliveries whose tasks have not yet passed the lane (admitted or shed).
    pending: AtomicU32,
    /// This process's fleet-wide admissions to the endpoint.
    fleet: Arc<FleetCount>,
    /// The same number on every dispatcher for this endpoint: which of them takes the odd slot
    /// of a fleet-wide lane.
    spin: u32,
    /// Do claim views read it? (The dispatcher's registry keeps the set.)
    awake: AtomicBool,
    /// When its configuration was read, in milliseconds of the registry's clock.
    loaded_at: std::sync::atomic::AtomicU64,
    state: Mutex<State<C>>,
}

/// What a delivery that entered admission carries on: whether it is the breaker's probe, the
/// lane in force, and the endpoint's parsed configuration.
#[derive(Debug, Clone)]
pub struct Entered<C> {
    /// The breaker let it through as its half-open probe.
    pub probe: bool,
    /// The lane in force as it entered.
    pub lane: u32,
    /// The endpoint's rate limit, when its turn is still to be taken in the fleet's store.
    pub fleet_rate: Option<RateLimit>,
    /// The parsed configuration.
    pub parsed: C,
}

/// What a claim needs to know of an endpoint, read under one lock.
#[derive(Debug, Clone, Copy)]
pub struct ClaimReading {
    /// Held back now ([`EndpointRuntime::held`]).
    pub held: bool,
    /// The lane in force.
    pub lane: u32,
    /// Recent service time.
    pub service: Option<Duration>,
    /// How long its held lane slots have gone without one coming free ([`Lane::stalled`]).
    pub stalled: Option<Duration>,
    /// Turns of its rate limit within the horizon, when it has one.
    pub turns: Option<u32>,
}

/// An endpoint's figures at one instant, for the evidence and the view.
#[derive(Debug, Clone)]
pub struct Reading<C> {
    /// The parsed configuration.
    pub parsed: C,
    /// Enabled, as last read.
    pub enabled: bool,
    /// The lane before the governor.
    pub lane_size: u32,
    /// Where it comes from.
    pub lane_basis: LaneBasis,
    /// The lane in force.
    pub lane_in_force: u32,
    /// The AIMD limit.
    pub governor_limit: f64,
    /// A Retry-After pause runs.
    pub paused: bool,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// The breaker holds deliveries back now.
    pub breaker_holding: bool,
    /// Recent service time.
    pub service_ewma: Option<Duration>,
    /// The window's figures, when asked for.
    pub window: Option<WindowSnapshot>,
}

impl<C: Clone> EndpointRuntime<C> {
    /// A runtime for an endpoint first seen at `now`.
    pub fn new(
        id: String,
        tenant_id: String,
        seats: Arc<Seats>,
        config: Configuration<C>,
        governor: &GovernorSettings,
        now: Instant,
        loaded_at_ms: u64,
    ) -> Self {
        let spin = spin(&id);
        Self {
            id,
            tenant_id,
            seats,
            lane: Lane::new(),
            pending: AtomicU32::new(0),
            fleet: Arc::default(),
            spin,
            awake: AtomicBool::new(true),
            loaded_at: loaded_at_ms.into(),
            state: Mutex::new(State {
                parsed: config.parsed,
                enabled: config.enabled,
                lane_override: config.lane_override,
                attempt_total: config.attempt_total,
                governor: GovernorState::new(governor),
                breaker: Breaker::new(config.breaker, now),
                window: Window::new(
                    now,
                    crate::stats::window::DEFAULT_WINDOW,
                    crate::stats::window::DEFAULT_SLOTS,
                ),
                failing_since_ms: config.failing_since_ms,
                service_ewma: None,
                measured_lane: None,
                lane_sized_at: None,
                offered_since_sized: 0,
                rate: config.rate_limit.map(|l| Turns::new(l, now)),
            }),
        }
    }

    /// Its configuration was read again: a changed rate limit starts from full buckets (an
    /// unchanged one keeps its turns), a changed latency ceiling from a fresh breaker.
    pub fn configure(&self, config: Configuration<C>, now: Instant, loaded_at_ms: u64) {
        let mut s = self.state();
        s.parsed = config.parsed;
        s.enabled = config.enabled;
        s.lane_override = config.lane_override;
        s.attempt_total = config.attempt_total;
        s.failing_since_ms = config.failing_since_ms;
        if s.rate.as_ref().map(Turns::limit) != config.rate_limit {
            s.rate = config.rate_limit.map(|l| Turns::new(l, now));
        }
        if s.breaker.settings().latency_ceiling != config.breaker.latency_ceiling {
            s.breaker = Breaker::new(config.breaker, now);
        }
        drop(s);
        self.loaded_at.store(loaded_at_ms, Ordering::Release);
    }

    /// Endpoint id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its tenant.
    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// Its lane.
    pub fn lane(&self) -> &Arc<Lane> {
        &self.lane
    }

    /// This process's fleet-wide admissions to it.
    pub fn fleet_count(&self) -> &Arc<FleetCount> {
        &self.fleet
    }

    /// Which dispatcher of a fleet takes the odd slot of its lane.
    pub fn spin(&self) -> u32 {
        self.spin
    }

    /// When its configuration was read (registry milliseconds).
    pub fn loaded_at_ms(&self) -> u64 {
        self.loaded_at.load(Ordering::Acquire)
    }

    /// Read it again at the next delivery.
    pub fn expire_configuration(&self) {
        self.loaded_at.store(0, Ordering::Release);
    }

    /// Mark it read by claim views; `true` when it was not.
    pub fn wake(&self) -> bool {
        !self.awake.swap(true, Ordering::AcqRel)
    }

    /// Leave it out of claim views until it wakes.
    pub fn rest(&self) {
        self.awake.store(false, Ordering::Release);
    }

    /// Claimed deliveries on their way to the lane.
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire)
    }

    /// Count one claimed delivery on its way to the lane.
    pub fn add_pending(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// That delivery passed the lane (or its task ended early).
    pub fn remove_pending(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Deliveries in its lane or on their way to it.
    pub fn taken(&self) -> u32 {
        self.lane.in_use() + self.pending()
    }

    /// Lock the mutable state (never held across an await).
    fn state(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What it was parsed into, as last read.
    pub fn parsed(&self) -> C {
        self.state().parsed.clone()
    }

    /// Why deliveries to it are held back now, if they are: a Retry-After pause, or an open
    /// breaker whose cooldown is not over. The claim view and admission both ask this.
    pub fn held(&self, now: Instant) -> Option<Held> {
        self.state().held(now)
    }

    /// The lane in force now: the lane size, narrowed by the governor.
    pub fn lane_in_force(&self, policy: &EndpointPolicy<'_>) -> u32 {
        self.state().lane_in_force(policy)
    }

    /// Recent service time.
    pub fn service_ewma(&self) -> Option<Duration> {
        self.state().service_ewma
    }

    /// A delivery reaches admission (one lock): counted as offered; held when the endpoint is
    /// disabled or [`held`](Self::held); let through by the breaker (perhaps as its probe);
    /// then its rate limit's turn taken here with `local_turn` when it is this process's to
    /// take (held until the exact instant of its next turn otherwise, the probe given back).
    /// Without `local_turn`, an endpoint with a rate limit leaves the turn to the caller
    /// ([`Entered::fleet_rate`]).
    pub fn enter(
        &self,
        now: Instant,
        policy: &EndpointPolicy<'_>,
        local_turn: Option<impl FnOnce(&mut Turns, Instant) -> Result<(), Instant>>,
    ) -> Result<Entered<C>, Held> {
        let mut s = self.state();
        s.record_offered(now);
        if !s.enabled {
            return Err(Held::Disabled);
        }
        if let Some(held) = s.held(now) {
            s.window.record_held(now);
            return Err(held);
        }
        let probe = match s.breaker.admit(now) {
            Admission::Allow => false,
            Admission::Probe => true,
            Admission::Hold { until } => {
                s.window.record_held(now);
                return Err(Held::BreakerOpen { until });
            }
        };
        let mut fleet_rate = None;
        if let Some(turns) = s.rate.as_mut() {
            match local_turn {
                Some(take) => {
                    if let Err(until) = take(turns, now) {
                        s.rate_held(now, probe);
                        return Err(Held::RateLimited { until });
                    }
                }
                None => fleet_rate = Some(turns.limit()),
            }
        }
        Ok(Entered {
            probe,
            lane: s.lane_in_force(policy),
            fleet_rate,
            parsed: s.parsed.clone(),
        })
    }

    /// Run `f` on its rate limit's buckets in this process; `None` when it has no rate limit.
    pub fn turns<R>(&self, f: impl FnOnce(&mut Turns) -> R) -> Option<R> {
        self.state().rate.as_mut().map(f)
    }

    /// A delivery to it was held by its rate limit after it entered: counted, the breaker
    /// probe given back.
    pub fn rate_held(&self, probe: bool) {
        self.state().rate_held(Instant::now(), probe);
    }

    /// A delivery to it was shed: counted, the breaker probe given back.
    pub fn shed(&self, probe: bool) {
        let mut s = self.state();
        s.window.record_shed(Instant::now());
        if probe {
            s.breaker.cancel_probe();
        }
    }

    /// Give back a breaker probe that will not be attempted.
    pub fn cancel_probe(&self) {
        self.state().breaker.cancel_probe();
    }

    /// Take a seat of its tenant's under `ceiling`; `None` (the breaker probe given back) when
    /// the tenant holds all its ceiling allows.
    pub fn seat(&self, ceiling: u32, probe: bool) -> Option<Seat> {
        let seat = self.seats.try_take(ceiling);
        if seat.is_none() && probe {
            self.cancel_probe();
        }
        seat
    }

    /// How long from the start of a Redis outage attempts admitted to it before may still run
    /// anywhere in the fleet ([`crate::admission::fleet::mode::endpoint_hold`]).
    pub fn outage_hold(&self) -> Duration {
        let s = self.state();
        let longest = s.window.histogram(Instant::now()).quantile(1.0);
        super::fleet::mode::endpoint_hold(s.attempt_total, longest)
    }

    /// Enable or disable it in memory (the store says so, or refused to).
    pub fn set_enabled(&self, enabled: bool) {
        self.state().enabled = enabled;
    }

    /// One finished attempt (one lock): the governor, the window and the lane sized from it,
    /// the service average, the breaker and the run of failures (see [`conclude`]). What to
    /// write comes back.
    pub fn conclude(
        &self,
        policy: &EndpointPolicy<'_>,
        outcome: &Outcome,
        took: Duration,
        now: Instant,
        now_ms: i64,
    ) -> Effects {
        let mut s = self.state();
        let lane = s.lane_size(policy);
        // This attempt's slot is free again: the limit bound if the lane is full without it,
        // or deliveries are waiting at it.
        let limit_bound = self.pending() > 0
            || self.lane.in_use() + 1 >= governor::effective_limit(&s.governor, lane);
        let attempt = Attempt {
            took,
            lane,
            limit_bound,
        };
        conclude::conclude(&mut s, policy, outcome, attempt, now, now_ms)
    }

    /// What a claim needs to know of it, under one lock.
    pub fn claim_reading(
        &self,
        now: Instant,
        policy: &EndpointPolicy<'_>,
        pending: u32,
    ) -> ClaimReading {
        let s = self.state();
        ClaimReading {
            held: s.held(now).is_some(),
            lane: s.lane_in_force(policy),
            service: s.service_ewma,
            stalled: self.lane.stalled(now),
            turns: s.rate.as_ref().map(|t| {
                t.turns_within(now, policy.lane_deadline)
                    .saturating_sub(pending)
            }),
        }
    }

    /// Its figures now; the window's only when `window`.
    pub fn reading(&self, now: Instant, policy: &EndpointPolicy<'_>, window: bool) -> Reading<C> {
        let s = self.state();
        Reading {
            parsed: s.parsed.clone(),
            enabled: s.enabled,
            lane_size: s.lane_size(policy),
            lane_basis: s.lane_basis(),
            lane_in_force: s.lane_in_force(policy),
            governor_limit: s.governor.limit,
            paused: governor::is_paused(&s.governor, now),
            breaker: s.breaker.state_name(),
            breaker_holding: matches!(
                s.breaker.state(),
                BreakerState::Open { until, .. } if until > now
            ),
            service_ewma: s.service_ewma,
            window: window.then(|| s.window.snapshot(now)),
        }
    }

    /// Nothing to remember: nothing on its way or in flight, the breaker closed, no pause, and
    /// nothing in the window.
    pub fn is_idle(&self, now: Instant) -> bool {
        if self.pending() > 0 || self.fleet.in_flight() > 0 || self.lane.in_use() > 0 {
            return false;
        }
        let s = self.state();
        matches!(s.breaker.state(), BreakerState::Closed)
            && !governor::is_paused(&s.governor, now)
            && s.window.is_idle(now)
            && s.breaker.is_idle(now)
    }

    /// A Retry-After pause until `until` (tests of what is remembered).
    #[cfg(test)]
    pub(crate) fn pause_until(&self, until: Option<Instant>) {
        self.state().governor.paused_until = until;
    }

    /// An attempt in its window (tests of what is remembered).
    #[cfg(test)]
    pub(crate) fn record_attempt(&self, now: Instant, took: Duration, ok: bool) {
        self.state().window.record_attempt(now, took, ok);
    }
}

impl<C> State<C> {
    /// Held back now: a Retry-After pause, or an open breaker whose cooldown is not over.
    fn held(&self, now: Instant) -> Option<Held> {
        if governor::is_paused(&self.governor, now) {
            return Some(Held::Paused {
                until: self.governor.paused_until,
            });
        }
        match self.breaker.state() {
            BreakerState::Open { until, .. } if until > now => Some(Held::BreakerOpen { until }),
            _ => None,
        }
    }

    fn rate_held(&mut self, now: Instant, probe: bool) {
        self.window.record_rate_limited(now);
        if probe {
            self.breaker.cancel_probe();
        }
    }

    /// The lane: the operator's override, else the one measured by Little's Law, else the
    /// configured default; clamped by the fairness ceiling.
    fn lane_size(&self, policy: &EndpointPolicy<'_>) -> u32 {
        self.lane_override
            .or(self.measured_lane)
            .unwrap_or(policy.lane_default)
            .min(policy.lane_ceiling)
            .max(1)
    }

    /// Where [`lane_size`](Self::lane_size) comes from.
    fn lane_basis(&self) -> LaneBasis {
        match (self.lane_override, self.measured_lane) {
            (Some(_), _) => LaneBasis::Override,
            (None, Some(_)) => LaneBasis::Measured,
            (None, None) => LaneBasis::Default,
        }
    }

    /// The lane in force now: min(lane size, governor limit).
    fn lane_in_force(&self, policy: &EndpointPolicy<'_>) -> u32 {
        governor::effective_limit(&self.governor, self.lane_size(policy))
    }
}

/// FNV-1a of an endpoint's id: stable across processes and builds (the standard hasher is
/// seeded per process).
fn spin(id: &str) -> u32 {
    id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}
