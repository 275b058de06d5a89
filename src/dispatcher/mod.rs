//! The dispatcher: claim → admit → deliver → settle, with a reaper and a drain.
//!
//! The [`leaser`] claims batches only as far as free capacity allows and spawns
//! one task per delivery; each task runs [`pipeline::run`] and hands what it came to (its
//! settlement, and what the attempt changed about the endpoint) to the settler, which writes
//! them in batches: the one room that writes. On shutdown the leaser stops, in-flight attempts get a
//! grace period, and whatever has not finished is released (ready again, attempts unchanged).

mod autosize;
mod claim;
mod endpoints;
mod heartbeat;
pub(crate) use heartbeat::host_name;
mod leaser;
mod pipeline;
mod reaper;
mod settings;
mod settler;
mod tenants;
mod throttle_watch;
mod trace;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::time::Instant;

use crate::admission::fleet::FleetLanes;
use crate::admission::fleet::mode::{FleetMode, FleetTransitions};
use crate::admission::peers::Peers;
use crate::delivery::Clients;
use crate::egress::EgressPolicy;
use crate::metrics::Metrics;
use crate::model::{Claimed, SettleOutcome, Settlement};
use crate::shutdown::{Phase, Shutdown};
use crate::store::SharedStore;
use crate::traces::{ExportCounters, Tracer};

use crate::destinations::Brokers;
use endpoints::Endpoints;
pub use settings::{Concurrency, DispatchSettings, parse_concurrency};
use settler::SettleItem;
pub use settler::{Written, settle_batch};
pub(crate) use tenants::in_force;
pub use view::{
    DispatcherView, EndpointView, FleetModeName, LaneBasis, Load, Look, PoolView, TenantView,
};

/// Shared state of one dispatcher process.
pub struct Ctx {
    /// The durable queue.
    store: SharedStore,
    /// Validated settings.
    settings: Arc<DispatchSettings>,
    /// Metrics registry.
    metrics: Arc<Metrics>,
    /// HTTP clients behind the egress guard.
    clients: Clients,
    /// Broker connections behind the same guard.
    brokers: Brokers,
    /// Live endpoint state.
    endpoints: Endpoints,
    /// Fair shares across tenants: virtual time, charges owed, policies, use of the pool.
    tenants: tenants::Tenants,
    /// Fleet-wide lanes, when Redis is configured, and this process's view of its outages.
    fleet: FleetAdmission,
    /// Global bound on attempts in flight.
    attempts: Semaphore,
    /// The current global concurrency bound.
    concurrency: AtomicU32,
    /// Claimed deliveries whose attempt (or hold) has not yet ended: what the pool holds. A slot
    /// frees when its attempt ends, not when its settlement is written.
    outstanding: AtomicUsize,
    /// Settlements handed to the settler and not yet written (bounded by its channel).
    unsettled: AtomicUsize,
    /// Signalled when an attempt ends or a settlement is written (capacity freed).
    capacity: Notify,
    /// The process's shutdown: drain begins when it stops claiming; every task of this
    /// dispatcher is spawned on its tracker.
    shutdown: Shutdown,
    /// Deliveries whose attempt is under way, by delivery id: their lease tokens, for releasing
    /// them if the drain's grace period ends first.
    inflight: Mutex<HashMap<i64, i64>>,
    settle_tx: mpsc::Sender<SettleItem>,
    /// This dispatcher's id in the heartbeat table (new at every start).
    id: String,
    /// When it started, ms epoch.
    started_at_ms: i64,
    /// When its heartbeat was last written, ms epoch.
    last_beat_ms: std::sync::atomic::AtomicI64,
    /// Where attempt spans go (nothing with tracing off).
    tracer: Tracer,
}

impl Ctx {
    /// The global concurrency bound in force.
    pub fn concurrency(&self) -> u32 {
        self.concurrency.load(Ordering::Relaxed)
    }

    /// Change the global concurrency bound (auto-sizing).
    fn set_concurrency(&self, n: u32) {
        let old = self.concurrency.swap(n, Ordering::AcqRel);
        if n > old {
            self.attempts.add_permits((n - old) as usize);
        } else if n < old {
            self.attempts.forget_permits((old - n) as usize);
        }
        self.metrics.concurrency_limit.set(i64::from(n));
        self.capacity.notify_one();
    }

    /// Claimed, and the attempt not yet ended.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Claimed and not yet settled: attempts under way, and settlements not yet written.
    fn unfinished(&self) -> usize {
        self.outstanding() + self.unsettled.load(Ordering::Acquire)
    }

    /// Has drain begun?
    pub fn is_draining(&self) -> bool {
        self.shutdown.is_draining()
    }

    /// What the next claim should know about endpoints this dispatcher has seen: those to skip
    /// (paused, breaker open, or no free lane slot) and those with fewer free slots than
    /// `per_endpoint`, so a claim takes no more than their lanes can start (shedding stays the
    /// exception, not a churn of claim → shed → requeue); and the tenants near their ceiling,
    /// with the room left to each, none to a tenant already holding slots when the claim may
    /// only use the pool's reserve (`reserve_only`; see [`tenants::rooms`]).
    fn claim_view(&self, per_endpoint: u32, limit: u32, reserve_only: bool) -> ClaimView {
        let now = Instant::now();
        let concurrency = self.concurrency();
        let part = |spin| self.fleet.part(spin);
        let whole = part(0);
        self.endpoints.view_key((concurrency, whole.of, whole.rank));
        let mut view = ClaimView::default();
        let endpoints = self.endpoints.for_view();
        let mut quiet = Vec::new();
        let mut held: HashMap<&str, u32> = HashMap::new();
        let policy = self.endpoint_policy();
        for rt in &endpoints {
            let pending = rt.pending();
            let taken = rt.taken();
            let reading = rt.claim_reading(now, &policy, pending);
            let load = claim::EndpointLoad {
                held: reading.held,
                lane: reading.lane,
                service: reading.service,
                stalled: reading.stalled,
                taken,
                turns: reading.turns,
                part: part(rt.spin()),
            };
            let (held_back, turns) = (reading.held, reading.turns);
            if taken > 0 {
                *held.entry(rt.tenant_id()).or_default() += taken;
            }
            match claim::room(load, per_endpoint, self.settings.lane_deadline) {
                claim::Room::Skip => view.exclude.push(rt.id().to_owned()),
                claim::Room::Up(n) => view.room.push((rt.id().to_owned(), n)),
                claim::Room::Full if taken == 0 && !held_back && turns.is_none() => {
                    quiet.push(rt.clone());
                }
                claim::Room::Full => {}
            }
        }
        let (weight, max_share) = (self.settings.tenant_weight, self.settings.tenant_max_share);
        let shares = held.iter().map(|(tenant, &holds)| {
            let policy = self.tenants.policy(tenant);
            let (_, share) = tenants::in_force(policy, weight, max_share);
            (*tenant, holds, share)
        });
        view.tenant_room = tenants::rooms(shares, concurrency, limit, reserve_only);
        self.endpoints.rest(&quiet);
        view
    }

    /// What a delivery to this endpoint is expected to hold of the pool, seconds: its measured
    /// service time, or [`tenants::UNMEASURED_COST`].
    fn expected_cost(&self, endpoint: &str) -> f64 {
        self.endpoints
            .cached(endpoint)
            .and_then(|rt| rt.service_ewma())
            .map_or(tenants::UNMEASURED_COST, |t| t.as_secs_f64().max(1e-3))
    }

    /// Start one delivery's task; its lease ends at `lease_end` (or later, if the attempt
    /// extends it).
    fn spawn(self: &Arc<Self>, d: Claimed, lease_end: Instant) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let ctx = self.clone();
        let id = d.delivery_id;
        let token = d.lease_token;
        let leased_at = Instant::now();
        let pending = self.endpoints.pending(&d.endpoint_id);
        // One span per delivery, claim to settle (`admit` and `attempt` inside it): debug level,
        // so at the default level neither it nor its fields cost anything.
        let span = tracing::debug_span!(
            "delivery",
            delivery_id = d.delivery_id,
            message_id = %d.message_id,
            endpoint_id = %d.endpoint_id,
            attempt = d.attempts + 1,
        );
        // Hold the map lock across the spawn so the task cannot remove its entry first.
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let task = async move {
            tracing::debug!("claimed");
            let concluded = pipeline::run(&ctx, &d, pending, lease_end).await;
            tracing::debug!(outcome = ?concluded.settlement.outcome, "settle");
            ctx.inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&d.delivery_id);
            ctx.submit(SettleItem {
                concluded,
                leased_at,
                endpoint_id: d.endpoint_id,
                tenant_id: d.tenant_id,
                message_id: d.message_id,
            })
            .await;
        };
        // Dropped at its next await once the drain's grace period is over; drain releases it.
        self.shutdown
            .spawn_until(Phase::Abandon, tracing::Instrument::instrument(task, span));
        inflight.insert(id, token);
    }

    /// Hand a settlement to the settler: its slot of the pool is free from then (the
    /// settlement still has the rest of its lease to be written, and the delivery stays leased
    /// until it is, so nothing can be claimed twice). The settler's channel is bounded, so a
    /// store that cannot keep up holds the slots, and the claims, back.
    async fn submit(&self, item: SettleItem) {
        self.unsettled.fetch_add(1, Ordering::AcqRel);
        if self.settle_tx.send(item).await.is_err() {
            // The settler is gone (shutdown): the lease expires and the reaper returns it.
            self.unsettled.fetch_sub(1, Ordering::AcqRel);
        }
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        self.capacity.notify_one();
    }

    pub(crate) fn settled(&self, n: usize) {
        self.unsettled.fetch_sub(n, Ordering::AcqRel);
        self.capacity.notify_one();
    }

    /// Wait until some capacity frees or `timeout` passes.
    async fn capacity_freed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.capacity.notified()).await;
    }
}

/// What a claim is told of this dispatcher's endpoints and tenants ([`Ctx::claim_view`]).
#[derive(Debug, Default)]
struct ClaimView {
    exclude: Vec<String>,
    room: Vec<(String, u32)>,
    tenant_room: Vec<(String, u32)>,
}

/// Fleet-wide admission: the lanes in Redis, when configured, and this process's view of
/// Redis's outages.
pub(crate) struct FleetAdmission {
    /// Lane slots held in Redis; `None` without `--redis-url`.
    lanes: Option<Arc<FleetLanes>>,
    /// When Redis went away and came back, as this process saw it.
    transitions: Mutex<FleetTransitions>,
    /// Without Redis: the live dispatchers its heartbeats count, and this one's rank.
    peers: Peers,
}

impl FleetAdmission {
    /// This dispatcher's part of an endpoint's lane: its part of the fleet's slots, `spin`
    /// turning which dispatchers hold the remainder.
    fn part(&self, spin: u32) -> claim::Part {
        match &self.lanes {
            Some(l) => claim::Part {
                of: l.live_dispatchers(),
                rank: l.rank(),
                spin,
            },
            None => claim::Part {
                of: self.peers.live(),
                rank: self.peers.rank(),
                spin,
            },
        }
    }

    /// Live dispatchers, as Redis counts them or, without it, the heartbeats.
    fn live_dispatchers(&self) -> u32 {
        self.lanes
            .as_ref()
            .map_or_else(|| self.peers.live(), |l| l.live_dispatchers())
    }
}

impl Ctx {
    /// What every admission goes through ([`crate::admission::admit`]).
    fn gate(&self) -> crate::admission::Gate<'_> {
        crate::admission::Gate {
            lane_deadline: self.settings.lane_deadline,
            fleet: self.fleet.lanes.as_ref(),
            transitions: &self.fleet.transitions,
            longest_attempt: self.settings.timeout_caps.total,
            peers: &self.fleet.peers,
            permits: &self.attempts,
            shutdown: &self.shutdown,
            policy: self.endpoint_policy(),
        }
    }

    /// The settings endpoints follow, for the concurrency in force.
    fn endpoint_policy(&self) -> crate::admission::EndpointPolicy<'_> {
        self.settings.endpoint_policy(self.concurrency())
    }

    /// Which rule admits deliveries fleet-wide now (for the view).
    fn fleet_mode(&self, fleet: &FleetLanes) -> FleetMode {
        let hold = self.settings.timeout_caps.total;
        let mut t = self
            .fleet
            .transitions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        t.mode(fleet.is_degraded(), Instant::now(), hold)
    }
}

/// A dispatcher, ready to run.
pub struct Dispatcher {
    ctx: Arc<Ctx>,
    settle_rx: mpsc::Receiver<SettleItem>,
}

/// What a drain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Attempts that finished within the grace period.
    pub finished: usize,
    /// Deliveries released (ready again, attempts unchanged).
    pub released: usize,
}

impl Dispatcher {
    /// A dispatcher over `store`, stopped by `shutdown`, its tasks spawned on its tracker.
    pub fn new(
        store: SharedStore,
        settings: DispatchSettings,
        metrics: Arc<Metrics>,
        fleet: Option<Arc<FleetLanes>>,
        shutdown: Shutdown,
    ) -> Self {
        let settings = Arc::new(settings);
        let concurrency = settings.concurrency.initial();
        let policy = Arc::new(EgressPolicy::new(settings.allow_networks.clone()));
        let (settle_tx, settle_rx) = mpsc::channel(settings.concurrency.ceiling() as usize * 2);
        metrics.concurrency_limit.set(i64::from(concurrency));
        let tracer = Tracer::start(
            &settings.traces,
            ExportCounters {
                exported: metrics.trace_spans_exported.clone(),
                dropped: metrics.trace_spans_dropped.clone(),
            },
        );
        let ctx = Arc::new(Ctx {
            tracer,
            brokers: Brokers::new(
                policy.clone(),
                settings.brokers,
                &settings.egress.extra_roots,
            ),
            clients: Clients::with_egress(
                policy,
                &settings.egress,
                settings.concurrency.ceiling() as usize,
                settings.max_response_bytes,
            ),
            endpoints: Endpoints::new(store.clone(), settings.clone()),
            tenants: tenants::Tenants::default(),
            store,
            metrics,
            fleet: FleetAdmission {
                lanes: fleet,
                transitions: Mutex::new(FleetTransitions::default()),
                peers: Peers::alone(),
            },
            attempts: Semaphore::new(concurrency as usize),
            concurrency: AtomicU32::new(concurrency),
            outstanding: AtomicUsize::new(0),
            unsettled: AtomicUsize::new(0),
            capacity: Notify::new(),
            shutdown,
            inflight: Mutex::new(HashMap::new()),
            settle_tx,
            settings,
            id: crate::ids::new_id("dsp"),
            started_at_ms: crate::clock::now_ms(),
            last_beat_ms: std::sync::atomic::AtomicI64::new(crate::clock::now_ms()),
        });
        Self { ctx, settle_rx }
    }

    /// The shared state: the API and the console read it through [`Ctx::view`].
    pub fn ctx(&self) -> Arc<Ctx> {
        self.ctx.clone()
    }

    /// Run until the shutdown stops claiming, then drain: wait for the claim in progress,
    /// give in-flight attempts the grace period, release what has not finished, and write the
    /// settlements. The caller stops the rest ([`Shutdown::stop`]) once this returns.
    pub async fn run(self) -> DrainReport {
        let ctx = self.ctx;
        let shutdown = ctx.shutdown.clone();
        let _settler = shutdown.spawn_until(Phase::Stop, settler::run(ctx.clone(), self.settle_rx));
        let leaser = shutdown.spawn(leaser::leaser(ctx.clone()));
        shutdown.spawn_until(Phase::Drain, reaper::reaper(ctx.clone()));
        shutdown.spawn_until(Phase::Drain, autosize::autosize(ctx.clone()));
        shutdown.spawn_until(Phase::Drain, throttle_watch::watch(ctx.clone()));
        let heartbeat =
            shutdown.spawn_until(Phase::StopClaiming, heartbeat::heartbeat(ctx.clone()));
        shutdown.until(Phase::StopClaiming).await;
        tracing::info!(
            "draining: no new claims; in-flight attempts get {:?}",
            ctx.settings.drain_grace
        );
        let _ = heartbeat.await;
        // No longer a replica from this moment: the scale signal stops counting it.
        ctx.beat(true).await;
        // The leaser is asked to stop, never dropped mid-claim: dropping it during a claim would
        // lose the claim's answer after the database had committed its leases, and those
        // deliveries would stay leased, seen by no one, until their leases expired. It finishes
        // the claim it is making (bounded by the store deadline) and hands every delivery it got
        // to a task, which releases it at once (drain has begun) or counts as in flight below.
        let _ = leaser.await;
        shutdown.begin_drain();
        let started = ctx.outstanding();
        let deadline = Instant::now() + ctx.settings.drain_grace;
        while ctx.outstanding() > 0 && Instant::now() < deadline {
            ctx.capacity_freed(Duration::from_millis(50)).await;
        }
        // Whatever is still running loses its attempt: release it (at-least-once; the same
        // webhook-id goes out again later).
        let leftover: Vec<(i64, i64)> = {
            let mut inflight = ctx.inflight.lock().unwrap_or_else(|p| p.into_inner());
            shutdown.abandon_attempts();
            inflight.drain().collect()
        };
        let released = leftover.len();
        for (delivery_id, lease_token) in leftover {
            let release = Settlement {
                delivery_id,
                lease_token,
                outcome: SettleOutcome::Release,
                attempt: None,
            };
            ctx.submit(SettleItem {
                concluded: release.into(),
                leased_at: Instant::now(),
                endpoint_id: String::new(),
                tenant_id: String::new(),
                message_id: String::new(),
            })
            .await;
        }
        let flush_deadline = Instant::now() + Duration::from_secs(10);
        while ctx.unfinished() > 0 && Instant::now() < flush_deadline {
            ctx.capacity_freed(Duration::from_millis(50)).await;
        }
        if let Some(fleet) = &ctx.fleet.lanes {
            fleet.leave().await;
        }
        ctx.leave_heartbeats().await;
        DrainReport {
            finished: started.saturating_sub(released),
            released,
        }
    }
}
