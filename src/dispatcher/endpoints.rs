//! The dispatcher's live view of each endpoint: its parsed target, lane, governor, breaker and
//! rolling statistics. Configuration is re-read from the store at most every few seconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::breaker::{Breaker, BreakerSettings};
use crate::admission::governor::{self, GovernorState};
use crate::admission::lane::Lane;
use crate::config::{AttemptTimeouts, DispatchSettings};
use crate::delivery::Target;
use crate::signing::Secret;
use crate::stats::Window;
use crate::store::{Endpoint, SharedStore, StoreError};

/// How long a loaded endpoint configuration is trusted before it is read again.
const CONFIG_TTL: Duration = Duration::from_secs(5);

/// Mutable per-endpoint state, behind one short-held mutex.
pub struct EndpointState {
    /// The parsed destination, or why it cannot be delivered to.
    pub target: Result<Arc<Target>, String>,
    /// Is it enabled (as last read)?
    pub enabled: bool,
    /// Operator lane override.
    pub lane_override: Option<u32>,
    /// When the configuration was read.
    pub loaded_at: Instant,
    /// AIMD limit and Retry-After pause.
    pub governor: GovernorState,
    /// Latency and error breakers.
    pub breaker: Breaker,
    /// Rolling statistics for the evidence.
    pub window: Window,
    /// Start of the current unbroken run of failures.
    pub failing_since_ms: Option<i64>,
    /// Destination host (metrics label).
    pub host: String,
    /// Recent attempt duration (exponentially weighted), for sizing claims to the lane.
    pub service_ewma: Option<Duration>,
}

/// One endpoint as this dispatcher sees it.
pub struct EndpointRuntime {
    /// Endpoint id.
    pub id: String,
    /// Tenant id.
    pub tenant_id: String,
    /// The bulkhead.
    pub lane: Arc<Lane>,
    /// Claimed deliveries whose tasks have not yet passed the lane (admitted or shed).
    pending: std::sync::atomic::AtomicU32,
    /// Attempts this process has in flight to the endpoint under fleet admission.
    attempts_in_flight: std::sync::atomic::AtomicU32,
    /// Attempts this process held when the current Redis outage began (outage start, count).
    held_at_outage: Mutex<Option<(Instant, u32)>>,
    state: Mutex<EndpointState>,
}

impl EndpointRuntime {
    /// Claimed deliveries on their way to the lane.
    pub fn pending(&self) -> u32 {
        self.pending.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Attempts in flight to this endpoint under fleet admission.
    pub fn attempts_in_flight(&self) -> u32 {
        self.attempts_in_flight
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Count one more attempt in flight if fewer than `limit` are; atomically.
    pub fn try_reserve(&self, limit: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.attempts_in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// One attempt counted by [`try_reserve`](Self::try_reserve) finished.
    pub fn unreserve(&self) {
        self.attempts_in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// How many attempts this process held when the outage that began at `since` was first
    /// seen for this endpoint (`held_now` if this is that first look).
    pub fn held_at_outage(&self, since: Instant, held_now: u32) -> u32 {
        let mut h = self
            .held_at_outage
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match *h {
            Some((at, n)) if at == since => n,
            _ => {
                *h = Some((since, held_now));
                held_now
            }
        }
    }

    /// Lock the mutable state (never held across an await).
    pub fn state(&self) -> MutexGuard<'_, EndpointState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every endpoint this dispatcher has seen.
pub struct Endpoints {
    store: SharedStore,
    settings: Arc<DispatchSettings>,
    map: Mutex<HashMap<String, Arc<EndpointRuntime>>>,
}

impl Endpoints {
    /// An empty registry.
    pub fn new(store: SharedStore, settings: Arc<DispatchSettings>) -> Self {
        Self {
            store,
            settings,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Every known endpoint.
    pub fn all(&self) -> Vec<Arc<EndpointRuntime>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// A known endpoint, without touching the store.
    pub fn cached(&self, id: &str) -> Option<Arc<EndpointRuntime>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Forget the cached configuration so the next delivery re-reads it.
    pub fn invalidate(&self, id: &str) {
        if let Some(rt) = self.cached(id) {
            rt.state().loaded_at = Instant::now() - CONFIG_TTL * 2;
        }
    }

    /// The endpoint, with its configuration refreshed from the store when stale.
    pub async fn get(&self, id: &str) -> Result<Arc<EndpointRuntime>, StoreError> {
        let existing = self.cached(id);
        if let Some(rt) = &existing
            && rt.state().loaded_at.elapsed() < CONFIG_TTL
        {
            return Ok(rt.clone());
        }
        let endpoint = match self.store.endpoint(None, id).await {
            Ok(e) => e,
            Err(e) => {
                // A store hiccup must not stop deliveries to an endpoint we already know.
                if let (Some(rt), StoreError::Unavailable(_)) = (&existing, &e) {
                    return Ok(rt.clone());
                }
                return Err(e);
            }
        };
        let now = Instant::now();
        let target = parse_target(&endpoint, &self.settings);
        let host = target
            .as_ref()
            .ok()
            .and_then(|t| t.url.host_str().map(str::to_owned))
            .unwrap_or_default();
        let breaker_settings = BreakerSettings {
            latency_ceiling: endpoint
                .latency_ceiling_ms
                .map_or(self.settings.breaker.latency_ceiling, |ms| {
                    Duration::from_millis(u64::from(ms))
                }),
            ..self.settings.breaker.clone()
        };
        if let Some(rt) = existing {
            let mut s = rt.state();
            s.target = target;
            s.enabled = endpoint.enabled;
            s.lane_override = endpoint.lane_size;
            s.loaded_at = now;
            s.host = host;
            s.failing_since_ms = endpoint.failing_since_ms;
            if s.breaker.settings().latency_ceiling != breaker_settings.latency_ceiling {
                s.breaker = Breaker::new(breaker_settings, now);
            }
            drop(s);
            return Ok(rt);
        }
        let rt = Arc::new(EndpointRuntime {
            id: endpoint.id.clone(),
            tenant_id: endpoint.tenant_id.clone(),
            lane: Lane::new(),
            held_at_outage: Mutex::new(None),
            attempts_in_flight: std::sync::atomic::AtomicU32::new(0),
            pending: std::sync::atomic::AtomicU32::new(0),
            state: Mutex::new(EndpointState {
                target,
                enabled: endpoint.enabled,
                lane_override: endpoint.lane_size,
                loaded_at: now,
                governor: GovernorState::new(&self.settings.governor),
                breaker: Breaker::new(breaker_settings, now),
                window: Window::new(
                    now,
                    crate::stats::window::DEFAULT_WINDOW,
                    crate::stats::window::DEFAULT_SLOTS,
                ),
                failing_since_ms: endpoint.failing_since_ms,
                host,
                service_ewma: None,
            }),
        });
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.entry(endpoint.id).or_insert(rt).clone())
    }
}

impl EndpointState {
    /// The configured lane: the operator override or the default, clamped by the fairness
    /// ceiling for this concurrency.
    pub fn lane_size(&self, settings: &DispatchSettings, concurrency: u32) -> u32 {
        self.lane_override
            .unwrap_or(settings.lane_size)
            .min(settings.lane_ceiling(concurrency))
            .max(1)
    }

    /// The lane in force now: min(lane size, governor limit).
    pub fn effective_lane(&self, settings: &DispatchSettings, concurrency: u32) -> u32 {
        governor::effective_limit(&self.governor, self.lane_size(settings, concurrency))
    }
}

fn parse_target(e: &Endpoint, settings: &DispatchSettings) -> Result<Arc<Target>, String> {
    let url = reqwest::Url::parse(&e.url).map_err(|err| format!("bad url: {err}"))?;
    let mut secrets =
        vec![Secret::parse(&e.secret).map_err(|err| format!("bad signing secret: {err}"))?];
    if let (Some(previous), Some(until)) = (&e.previous_secret, e.previous_secret_until_ms)
        && until > crate::clock::now_ms()
        && let Ok(secret) = Secret::parse(previous)
    {
        secrets.push(secret);
    }
    let pick = |ms: Option<u32>, default: Duration, cap: Duration| {
        ms.map_or(default, |ms| Duration::from_millis(u64::from(ms)))
            .min(cap)
    };
    let caps = settings.timeout_caps;
    let timeouts = AttemptTimeouts {
        connect: pick(
            e.connect_timeout_ms,
            settings.timeouts.connect,
            caps.connect,
        ),
        read: pick(e.read_timeout_ms, settings.timeouts.read, caps.read),
        total: pick(e.total_timeout_ms, settings.timeouts.total, caps.total),
    };
    Ok(Arc::new(Target {
        endpoint_id: e.id.clone(),
        tenant_id: e.tenant_id.clone(),
        url,
        secrets,
        timeouts,
    }))
}

/// A claimed delivery counted against its endpoint's room until it reaches the lane; dropping
/// it (at the lane, or when the task ends early) stops counting it.
pub struct Pending(Option<Arc<EndpointRuntime>>);

impl Pending {
    /// Count one delivery for `endpoint` (nothing for an endpoint not seen yet).
    pub fn new(endpoint: Option<Arc<EndpointRuntime>>) -> Self {
        if let Some(rt) = &endpoint {
            rt.pending.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        Self(endpoint)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(rt) = &self.0 {
            rt.pending.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}
