//! The dispatcher: claim → admit → deliver → settle, with a reaper and a drain.
//!
//! The leaser ([`crate::lease`]) claims batches only as far as free capacity allows and spawns
//! one task per delivery; each task runs [`pipeline::run`] and hands its settlement to the
//! settler, which writes them in batches. On shutdown the leaser stops, in-flight attempts get a
//! grace period, and whatever has not finished is released (ready again, attempts unchanged).

pub mod endpoints;
pub mod pipeline;
mod settler;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::admission::fleet::{FleetAcquire, FleetLanes, FleetSlot};
use crate::config::DispatchSettings;
use crate::delivery::Clients;
use crate::egress::EgressPolicy;
use crate::metrics::Metrics;
use crate::store::{Claimed, SettleOutcome, Settlement, SharedStore};

use endpoints::{EndpointRuntime, Endpoints};
pub use settler::SettleItem;

/// Shared state of one dispatcher process.
pub struct Ctx {
    /// The durable queue.
    pub store: SharedStore,
    /// Validated settings.
    pub settings: Arc<DispatchSettings>,
    /// Metrics registry.
    pub metrics: Arc<Metrics>,
    /// HTTP clients behind the egress guard.
    pub clients: Clients,
    /// Live endpoint state.
    pub endpoints: Endpoints,
    /// Fleet-wide lanes, when Redis is configured, and this process's view of its outages.
    pub fleet: (Option<Arc<FleetLanes>>, Mutex<FleetTransitions>),
    /// Global bound on attempts in flight.
    pub attempts: Semaphore,
    /// The current global concurrency bound.
    concurrency: AtomicU32,
    /// Claimed deliveries not yet settled.
    outstanding: AtomicUsize,
    /// Signalled when outstanding work settles (capacity freed).
    capacity: Notify,
    draining: AtomicBool,
    inflight: Mutex<HashMap<i64, (i64, AbortHandle)>>,
    settle_tx: mpsc::Sender<SettleItem>,
}

impl Ctx {
    /// The global concurrency bound in force.
    pub fn concurrency(&self) -> u32 {
        self.concurrency.load(Ordering::Relaxed)
    }

    /// Change the global concurrency bound (auto-sizing).
    pub fn set_concurrency(&self, n: u32) {
        let old = self.concurrency.swap(n, Ordering::AcqRel);
        if n > old {
            self.attempts.add_permits((n - old) as usize);
        } else if n < old {
            self.attempts.forget_permits((old - n) as usize);
        }
        self.metrics.concurrency_limit.set(i64::from(n));
        self.capacity.notify_one();
    }

    /// Claimed and not yet settled.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Has drain begun?
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// What the next claim should know about endpoints this dispatcher has seen: those to skip
    /// (paused, breaker open, or no free lane slot) and those with fewer free slots than
    /// `per_endpoint`, so a claim takes no more than their lanes can start (shedding stays the
    /// exception, not a churn of claim → shed → requeue).
    pub fn claim_view(&self, per_endpoint: u32) -> (Vec<String>, Vec<(String, u32)>) {
        let now = Instant::now();
        let concurrency = self.concurrency();
        let (mut exclude, mut room) = (Vec::new(), Vec::new());
        for rt in self.endpoints.all() {
            let s = rt.state();
            let held = crate::admission::governor::is_paused(&s.governor, now)
                || matches!(s.breaker.state(),
                    crate::admission::breaker::BreakerState::Open { until, .. } if until > now);
            // What the lane can start within its acquisition deadline: its slots, plus a short
            // queue when the endpoint answers fast enough for that queue to drain within half
            // the deadline at its recent service time (q × t / lane ≤ deadline / 2). A fast
            // endpoint takes a full share and waits briefly at the lane; an endpoint slower
            // than the deadline gets only its free slots, so it is not claimed just to be shed.
            let lane = s.effective_lane(&self.settings, concurrency);
            let queue = s.service_ewma.map_or(per_endpoint, |t| {
                let turns = self.settings.lane_deadline.as_secs_f64() / t.as_secs_f64().max(1e-4);
                if turns >= 1.0 {
                    (f64::from(lane) * turns / 2.0).min(1e6) as u32
                } else {
                    0
                }
            });
            let startable = lane.saturating_add(queue);
            let taken = rt.lane.in_use() + rt.pending();
            let free = startable.saturating_sub(taken);
            if held || free == 0 {
                exclude.push(rt.id.clone());
            } else if free < per_endpoint {
                room.push((rt.id.clone(), free));
            }
        }
        (exclude, room)
    }

    /// Start one delivery's task.
    pub fn spawn(self: &Arc<Self>, d: Claimed) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let ctx = self.clone();
        let id = d.delivery_id;
        let token = d.lease_token;
        let leased_at = Instant::now();
        let pending = endpoints::Pending::new(self.endpoints.cached(&d.endpoint_id));
        // Hold the map lock across the spawn so the task cannot remove its entry first.
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let handle = tokio::spawn(async move {
            let settlement = pipeline::run(&ctx, &d, pending).await;
            ctx.inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&d.delivery_id);
            ctx.submit(SettleItem {
                settlement,
                leased_at,
                endpoint_id: d.endpoint_id,
                tenant_id: d.tenant_id,
                message_id: d.message_id,
            })
            .await;
        });
        inflight.insert(id, (token, handle.abort_handle()));
    }

    async fn submit(&self, item: SettleItem) {
        if self.settle_tx.send(item).await.is_err() {
            // The settler is gone (shutdown): the lease expires and the reaper returns it.
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn settled(&self, n: usize) {
        self.outstanding.fetch_sub(n, Ordering::AcqRel);
        self.capacity.notify_one();
    }

    /// Wait until some capacity frees or `timeout` passes.
    pub async fn capacity_freed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.capacity.notified()).await;
    }
}

/// How a delivery was admitted fleet-wide.
pub(crate) enum FleetAdmit {
    /// A slot held in Redis.
    Slot(FleetSlot),
    /// Admitted under this process's local share of the allowance (Redis unreachable, or
    /// recently so).
    Local,
}

/// Which rule admits deliveries fleet-wide right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FleetMode {
    /// Redis answers: a slot in Redis is the admission.
    Redis,
    /// Redis just returned: attempts admitted under local shares may still run, unknown to
    /// Redis, so for one maximum attempt duration a Redis slot AND the local share are needed.
    Recovering,
    /// Redis unreachable since this instant, for less than one maximum attempt duration:
    /// attempts admitted through Redis before the outage may still run, so each process keeps
    /// at most what it held then (never more than its share).
    OutageStart(Instant),
    /// Redis unreachable for longer: each process admits up to its local share.
    Local,
}

/// Transitions of the fleet mode, per process.
#[derive(Debug, Default)]
pub struct FleetTransitions {
    degraded_since: Option<Instant>,
    recovered_at: Option<Instant>,
}

impl Ctx {
    fn fleet_mode(&self, fleet: &FleetLanes) -> FleetMode {
        let hold = self.settings.timeout_caps.total;
        let mut t = self.fleet.1.lock().unwrap_or_else(|p| p.into_inner());
        if fleet.is_degraded() {
            t.recovered_at = None;
            let since = *t.degraded_since.get_or_insert_with(Instant::now);
            return if since.elapsed() < hold {
                FleetMode::OutageStart(since)
            } else {
                FleetMode::Local
            };
        }
        if t.degraded_since.take().is_some() {
            t.recovered_at = Some(Instant::now());
        }
        if t.recovered_at.is_some_and(|at| at.elapsed() < hold) {
            FleetMode::Recovering
        } else {
            FleetMode::Redis
        }
    }
}

/// Take a fleet-wide slot for the endpoint within the lane deadline, or `Err(())` to shed.
///
/// The allowance holds across the fleet through Redis outages and recoveries: see
/// [`FleetMode`] for the rule in force at each stage. The endpoint's own lane slot is already
/// held when this runs; fleet admissions are counted per endpoint in `attempts_in_flight`.
pub(crate) async fn fleet_slot(
    ctx: &Ctx,
    fleet: &FleetLanes,
    endpoint: &EndpointRuntime,
    concurrency: u32,
) -> Result<FleetAdmit, ()> {
    let until = Instant::now() + ctx.settings.lane_deadline;
    loop {
        let allowance = endpoint.state().effective_lane(&ctx.settings, concurrency);
        let share = fleet.local_share(allowance);
        let admitted = match ctx.fleet_mode(fleet) {
            FleetMode::Redis => {
                if endpoint.try_reserve(u32::MAX) {
                    let admit = try_redis(fleet, endpoint, allowance).await;
                    if admit.is_none() {
                        endpoint.unreserve();
                    }
                    admit
                } else {
                    None
                }
            }
            FleetMode::Recovering => {
                if endpoint.try_reserve(share) {
                    let admit = try_redis(fleet, endpoint, allowance).await;
                    if admit.is_none() {
                        endpoint.unreserve();
                    }
                    admit
                } else {
                    None
                }
            }
            FleetMode::OutageStart(since) => {
                let held = endpoint.held_at_outage(since, endpoint.attempts_in_flight());
                endpoint
                    .try_reserve(share.min(held))
                    .then_some(FleetAdmit::Local)
            }
            FleetMode::Local => endpoint.try_reserve(share).then_some(FleetAdmit::Local),
        };
        if let Some(admit) = admitted {
            return Ok(admit);
        }
        if Instant::now() + Duration::from_millis(20) >= until {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn try_redis(
    fleet: &FleetLanes,
    endpoint: &EndpointRuntime,
    allowance: u32,
) -> Option<FleetAdmit> {
    match fleet.try_acquire(&endpoint.id, allowance).await {
        FleetAcquire::Acquired(slot) => Some(FleetAdmit::Slot(slot)),
        // Unavailable flips the fleet to degraded: the next pass applies the outage rule.
        FleetAcquire::Unavailable | FleetAcquire::Full => None,
    }
}

/// Give back what [`fleet_slot`] took.
pub(crate) async fn fleet_release(
    fleet: &FleetLanes,
    endpoint: &EndpointRuntime,
    admit: FleetAdmit,
) {
    endpoint.unreserve();
    if let FleetAdmit::Slot(slot) = admit {
        fleet.release(slot).await;
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
    /// A dispatcher over `store`.
    pub fn new(
        store: SharedStore,
        settings: DispatchSettings,
        metrics: Arc<Metrics>,
        fleet: Option<Arc<FleetLanes>>,
    ) -> Self {
        let settings = Arc::new(settings);
        let concurrency = settings.concurrency.initial();
        let policy = Arc::new(EgressPolicy::new(settings.allow_networks.clone()));
        let (settle_tx, settle_rx) = mpsc::channel(settings.concurrency.ceiling() as usize * 2);
        metrics.concurrency_limit.set(i64::from(concurrency));
        let ctx = Arc::new(Ctx {
            clients: Clients::new(
                policy,
                settings.concurrency.ceiling() as usize,
                settings.max_response_bytes,
            ),
            endpoints: Endpoints::new(store.clone(), settings.clone()),
            store,
            metrics,
            fleet: (fleet, Mutex::new(FleetTransitions::default())),
            attempts: Semaphore::new(concurrency as usize),
            concurrency: AtomicU32::new(concurrency),
            outstanding: AtomicUsize::new(0),
            capacity: Notify::new(),
            draining: AtomicBool::new(false),
            inflight: Mutex::new(HashMap::new()),
            settle_tx,
            settings,
        });
        Self { ctx, settle_rx }
    }

    /// The shared state (for the API's status and metrics views).
    pub fn ctx(&self) -> Arc<Ctx> {
        self.ctx.clone()
    }

    /// Run until `shutdown` resolves, then drain.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> DrainReport {
        let ctx = self.ctx;
        let settler = tokio::spawn(settler::run(ctx.clone(), self.settle_rx));
        let leaser = tokio::spawn(crate::lease::leaser(ctx.clone()));
        let reaper = tokio::spawn(crate::lease::reaper(ctx.clone()));
        let autosize = tokio::spawn(crate::lease::autosize(ctx.clone()));
        shutdown.await;
        tracing::info!(
            "draining: no new claims; in-flight attempts get {:?}",
            ctx.settings.drain_grace
        );
        ctx.draining.store(true, Ordering::Release);
        leaser.abort();
        reaper.abort();
        autosize.abort();
        let started = ctx.outstanding();
        let deadline = Instant::now() + ctx.settings.drain_grace;
        while ctx.outstanding() > 0 && Instant::now() < deadline {
            ctx.capacity_freed(Duration::from_millis(50)).await;
        }
        // Whatever is still running loses its attempt: release it (at-least-once; the same
        // webhook-id goes out again later).
        let leftover: Vec<(i64, i64)> = {
            let mut inflight = ctx.inflight.lock().unwrap_or_else(|p| p.into_inner());
            inflight
                .drain()
                .map(|(id, (token, handle))| {
                    handle.abort();
                    (id, token)
                })
                .collect()
        };
        let released = leftover.len();
        for (delivery_id, lease_token) in leftover {
            ctx.submit(SettleItem {
                settlement: Settlement {
                    delivery_id,
                    lease_token,
                    outcome: SettleOutcome::Release,
                    attempt: None,
                },
                leased_at: Instant::now(),
                endpoint_id: String::new(),
                tenant_id: String::new(),
                message_id: String::new(),
            })
            .await;
        }
        let flush_deadline = Instant::now() + Duration::from_secs(10);
        while ctx.outstanding() > 0 && Instant::now() < flush_deadline {
            ctx.capacity_freed(Duration::from_millis(50)).await;
        }
        settler.abort();
        if let Some(fleet) = &ctx.fleet.0 {
            fleet.leave().await;
        }
        DrainReport {
            finished: started.saturating_sub(released),
            released,
        }
    }
}
