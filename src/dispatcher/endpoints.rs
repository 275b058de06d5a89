//! The dispatcher's registry of endpoints: the ones it knows (each one's state at run time is
//! an [`EndpointRuntime`] of admission's), what it parsed from each configuration (read again
//! from the store at most every few seconds), and which of them claim views read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::DispatchSettings;
use crate::admission::EndpointRuntime;
use crate::admission::breaker::BreakerSettings;
use crate::admission::endpoint::Configuration;
use crate::admission::seats::Seats;
use crate::delivery::oauth2::Grant;
use crate::delivery::{AttemptTimeouts, Target, TlsProfile};
use crate::model::{Endpoint, EndpointTls};
use crate::signing::SigningKey;
use crate::store::{SharedStore, StoreError};

/// How long a loaded endpoint configuration is trusted before it is read again.
const CONFIG_TTL: Duration = Duration::from_secs(5);

/// What the dispatcher parsed from an endpoint's configuration: where to deliver, or why it
/// cannot be delivered to, and the host that names it in metrics.
#[derive(Debug)]
pub(super) struct Parsed {
    /// The parsed destination, or why it cannot be delivered to.
    pub(super) target: Result<Arc<Target>, String>,
    /// Destination host (metrics label).
    pub(super) host: String,
}

/// One endpoint as this dispatcher sees it: its state at run time lives in admission
/// ([`EndpointRuntime`]), with what the dispatcher parsed from its configuration.
pub(super) type Runtime = EndpointRuntime<Arc<Parsed>>;

/// Every endpoint this dispatcher has seen.
pub(super) struct Endpoints {
    store: SharedStore,
    settings: Arc<DispatchSettings>,
    map: Mutex<HashMap<String, Arc<Runtime>>>,
    /// The clock configurations are timed by ([`Runtime::loaded_at_ms`]).
    epoch: Instant,
    /// The endpoints claim views read (see [`Self::for_view`]).
    awake: Mutex<HashSet<String>>,
    /// What the quiet endpoints were found quiet under (see [`Self::view_key`]).
    key: Mutex<ViewKey>,
    /// Each tenant's seats, shared by the runtimes of its endpoints (gone with the last).
    seats: Mutex<HashMap<String, std::sync::Weak<Seats>>>,
}

/// What a quiet endpoint's room depends on beside the endpoint itself: the pool's concurrency
/// (the fairness ceiling on lanes) and this dispatcher's part of a fleet-wide lane (live
/// dispatchers, rank).
pub(super) type ViewKey = (u32, u32, u32);

impl Endpoints {
    /// An empty registry.
    pub(super) fn new(store: SharedStore, settings: Arc<DispatchSettings>) -> Self {
        Self {
            store,
            settings,
            map: Mutex::new(HashMap::new()),
            awake: Mutex::new(HashSet::new()),
            key: Mutex::new((0, 0, 0)),
            seats: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        }
    }

    /// The seats of `tenant`, shared with its other endpoints here.
    fn seats(&self, tenant: &str) -> Arc<Seats> {
        let mut seats = self.seats.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = seats.get(tenant).and_then(std::sync::Weak::upgrade) {
            return s;
        }
        if seats.len() >= 1024 && seats.len().is_power_of_two() {
            seats.retain(|_, s| s.strong_count() > 0);
        }
        let s = Arc::new(Seats::default());
        seats.insert(tenant.to_owned(), Arc::downgrade(&s));
        s
    }

    /// Something happened to the endpoint (a claim, a configuration change): claim views read
    /// it again.
    fn wake(&self, rt: &Runtime) {
        if rt.wake() {
            self.awake
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(rt.id().to_owned());
        }
    }

    /// Milliseconds of the registry's clock now (never 0: that is "read it again").
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// What the quiet endpoints' rooms depend on beside themselves is now `key`: when it
    /// changed, every endpoint is read again.
    pub(super) fn view_key(&self, key: ViewKey) {
        let mut current = self.key.lock().unwrap_or_else(|p| p.into_inner());
        if *current != key {
            *current = key;
            drop(current);
            for rt in self.all() {
                self.wake(&rt);
            }
        }
    }

    /// The endpoints a claim view must read: the awake ones. An endpoint found quiet
    /// ([`rest`](Self::rest)) adds nothing to the view (no exclusion, no narrowed room,
    /// nothing held for its tenant) and stays so until it is claimed, its configuration
    /// changes or the [`view_key`](Self::view_key) does (each wakes it), so a claim costs what
    /// the active endpoints cost, not every endpoint this dispatcher remembers (100,000
    /// endpoints touched once each made every claim read them all). What may change for a
    /// quiet endpoint unseen (an attempt that ends just after it was found quiet opens its
    /// breaker) is caught at admission, which checks again.
    pub(super) fn for_view(&self) -> Vec<Arc<Runtime>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let mut awake = self.awake.lock().unwrap_or_else(|p| p.into_inner());
        // Forgotten endpoints leave the set here.
        awake.retain(|id| map.contains_key(id));
        awake.iter().filter_map(|id| map.get(id).cloned()).collect()
    }

    /// These endpoints were found quiet: nothing on its way or in flight, nothing holding them
    /// back, no rate limit, room for a full share. Claim views leave them out until they wake.
    pub(super) fn rest(&self, quiet: &[Arc<Runtime>]) {
        if quiet.is_empty() {
            return;
        }
        let mut awake = self.awake.lock().unwrap_or_else(|p| p.into_inner());
        for rt in quiet {
            // Under the set's lock: a wake now waits, then finds it asleep and puts it back.
            rt.rest();
            awake.remove(rt.id());
        }
    }

    /// Count a claimed delivery on its way to `endpoint`'s lane (nothing for an endpoint not
    /// seen yet); a claimed endpoint is awake.
    pub(super) fn pending(&self, endpoint: &str) -> Pending {
        let rt = self.cached(endpoint);
        if let Some(rt) = &rt {
            self.wake(rt);
        }
        Pending::new(rt)
    }

    /// Every known endpoint.
    pub(super) fn all(&self) -> Vec<Arc<Runtime>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Forget the endpoints there is nothing to remember about: none of their deliveries is
    /// on its way or in flight (no one else holds the runtime), the breaker is closed, no
    /// Retry-After pause is running, and nothing happened within the evidence window (5 min by
    /// default). What is dropped is a governor limit that would start again from its initial
    /// value and an empty window; the next claim for the endpoint builds a fresh runtime. So a
    /// dispatcher's memory follows its active endpoints, not every endpoint it ever served.
    /// Returns how many were forgotten.
    pub(super) fn evict_idle(&self, now: Instant) -> usize {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let before = map.len();
        map.retain(|_, rt| Arc::strong_count(rt) > 1 || !rt.is_idle(now));
        before - map.len()
    }

    /// Endpoints held in memory now.
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A known endpoint, without touching the store.
    pub(super) fn cached(&self, id: &str) -> Option<Arc<Runtime>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Forget the cached configuration so the next delivery re-reads it.
    pub(super) fn invalidate(&self, id: &str) {
        if let Some(rt) = self.cached(id) {
            self.wake(&rt);
            rt.expire_configuration();
        }
    }

    /// Is this runtime's configuration expired ([`Runtime::expire_configuration`]: read at 0,
    /// which no read gives) or older than [`CONFIG_TTL`]?
    fn stale(&self, rt: &Runtime) -> bool {
        let loaded = rt.loaded_at_ms();
        loaded == 0 || self.now_ms().saturating_sub(loaded) >= CONFIG_TTL.as_millis() as u64
    }

    /// The endpoint, with its configuration refreshed from the store when stale.
    pub(super) async fn get(&self, id: &str) -> Result<Arc<Runtime>, StoreError> {
        let existing = self.cached(id);
        if let Some(rt) = &existing
            && !self.stale(rt)
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
        Ok(self.apply(existing, endpoint))
    }

    /// Read in one store call the endpoints among `ids` (a claim's) that this dispatcher does
    /// not know yet or knows stale, so each delivery's [`get`](Self::get) finds its endpoint
    /// fresh: first contact with many endpoints costs one read per claim, not one per
    /// endpoint. Those the read misses (deleted, or the store failed) are left to `get`.
    pub(super) async fn load<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let mut wanted: Vec<String> = Vec::new();
        {
            let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            for id in ids {
                if map.get(id).is_none_or(|rt| self.stale(rt)) {
                    wanted.push(id.to_owned());
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return;
        }
        match self.store.endpoints_by_id(&wanted).await {
            Ok(found) => {
                for endpoint in found {
                    let existing = self.cached(&endpoint.id);
                    self.apply(existing, endpoint);
                }
            }
            Err(e) => tracing::debug!(error = %e, "endpoints not loaded with the claim"),
        }
    }

    /// Build the runtime of a newly read endpoint, or refresh `existing` from it.
    fn apply(&self, existing: Option<Arc<Runtime>>, endpoint: Endpoint) -> Arc<Runtime> {
        let now = Instant::now();
        let target = parse_target(&endpoint, &self.settings);
        let host = target
            .as_ref()
            .ok()
            .and_then(|t| t.url.host_str().map(str::to_owned))
            .unwrap_or_default();
        let config = Configuration {
            enabled: endpoint.enabled,
            lane_override: endpoint.lane_size,
            rate_limit: endpoint.rate_limit,
            breaker: BreakerSettings {
                latency_ceiling: endpoint
                    .latency_ceiling_ms
                    .map_or(self.settings.breaker.latency_ceiling, |ms| {
                        Duration::from_millis(u64::from(ms))
                    }),
                ..self.settings.breaker.clone()
            },
            attempt_total: target.as_ref().map_or(Duration::ZERO, |t| t.timeouts.total),
            failing_since_ms: endpoint.failing_since_ms,
            parsed: Arc::new(Parsed { target, host }),
        };
        if let Some(rt) = existing {
            rt.configure(config, now, self.now_ms());
            return rt;
        }
        let rt = Arc::new(EndpointRuntime::new(
            endpoint.id.clone(),
            endpoint.tenant_id.clone(),
            self.seats(&endpoint.tenant_id),
            config,
            &self.settings.governor,
            now,
            self.now_ms(),
        ));
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let rt = map.entry(endpoint.id).or_insert(rt).clone();
        drop(map);
        // A new endpoint is awake; `wake` would skip it (its flag starts set).
        self.awake
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(rt.id().to_owned());
        rt
    }
}

fn parse_target(e: &Endpoint, settings: &DispatchSettings) -> Result<Arc<Target>, String> {
    let url = reqwest::Url::parse(&e.url).map_err(|err| format!("bad url: {err}"))?;
    let mut secrets =
        vec![SigningKey::parse(&e.secret).map_err(|err| format!("bad signing secret: {err}"))?];
    if let (Some(previous), Some(until)) = (&e.previous_secret, e.previous_secret_until_ms)
        && until > crate::clock::now_ms()
        && let Ok(secret) = SigningKey::parse(previous)
    {
        secrets.push(secret);
    }
    let mut headers = Vec::with_capacity(e.headers.len());
    // A bearer token is the `Authorization` of an endpoint with OAuth2: the API refuses a
    // header of that name beside it; a row stored before it did keeps only the token.
    let bearer = e.oauth2.is_some();
    for (name, value) in e
        .headers
        .iter()
        .filter(|(name, _)| !(bearer && name.eq_ignore_ascii_case("authorization")))
    {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|err| format!("bad header name {name:?}: {err}"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|err| format!("bad value of header {name}: {err}"))?;
        headers.push((name, value));
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
    let (tls, previous_tls) = tls_profiles(&e.tls);
    Ok(Arc::new(Target {
        endpoint_id: e.id.clone(),
        tenant_id: e.tenant_id.clone(),
        url,
        secrets,
        headers,
        timeouts,
        tls,
        previous_tls,
        grant: match &e.oauth2 {
            Some(creds) => Some(Grant::client_credentials(creds.clone())),
            None => crate::destinations::grant(&e.destination, e.destination_credentials.as_ref()),
        },
        destination: e.destination.clone(),
        destination_credentials: e.destination_credentials.clone(),
        trace_context: e.trace_context,
        fifo: e.ordering.is_fifo(),
    }))
}

/// The endpoint's TLS setting, and the same with the client identity it rotated away from
/// while that one's overlap lasts.
fn tls_profiles(t: &EndpointTls) -> (Option<TlsProfile>, Option<TlsProfile>) {
    if t.is_empty() {
        return (None, None);
    }
    let current = TlsProfile::new(t.ca_bundle.clone(), t.client.clone());
    let previous = match (&t.previous_client, t.previous_client_until_ms) {
        (Some(identity), Some(until)) if until > crate::clock::now_ms() => {
            Some(TlsProfile::new(t.ca_bundle.clone(), Some(identity.clone())))
        }
        _ => None,
    };
    (Some(current), previous)
}

/// A claimed delivery counted against its endpoint's room until it reaches the lane; dropping
/// it (at the lane, or when the task ends early) stops counting it.
pub(super) struct Pending(Option<Arc<Runtime>>);

impl Pending {
    /// Count one delivery for `endpoint` (nothing for an endpoint not seen yet).
    fn new(endpoint: Option<Arc<Runtime>>) -> Self {
        if let Some(rt) = &endpoint {
            rt.add_pending();
        }
        Self(endpoint)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(rt) = &self.0 {
            rt.remove_pending();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Endpoint, Tenant};
    use crate::store::sqlite::{SqliteOptions, SqliteStore};

    async fn registry() -> (Endpoints, String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            synchronous_full: false,
            readers: 1,
        };
        let store: SharedStore =
            Arc::new(SqliteStore::open(&dir.path().join("t.db"), options).unwrap());
        let now = crate::clock::now_ms();
        let tenant = Tenant {
            id: "ten_1".into(),
            name: "t".into(),
            token_hash: "h".into(),
            created_at_ms: now,
            share: Default::default(),
        };
        store.create_tenant(&tenant).await.unwrap();
        let endpoint = Endpoint::new(
            "ep_1".into(),
            "ten_1".into(),
            "https://example.com/hook".into(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            now,
        );
        store.create_endpoint(&endpoint).await.unwrap();
        let registry = Endpoints::new(store, Arc::new(DispatchSettings::default()));
        (registry, endpoint.id, dir)
    }

    #[tokio::test(start_paused = true)]
    async fn an_endpoint_is_forgotten_only_when_there_is_nothing_to_remember() {
        let (registry, id, _dir) = registry().await;
        let rt = registry.get(&id).await.unwrap();
        let start = Instant::now();
        rt.record_attempt(start, Duration::from_millis(40), true);
        // Held by a delivery on its way: kept, whatever the window says.
        assert_eq!(registry.evict_idle(start + Duration::from_secs(3_600)), 0);
        drop(rt);
        // Activity inside the evidence window: kept.
        assert_eq!(registry.evict_idle(start + Duration::from_secs(60)), 0);
        // A Retry-After pause running: kept.
        let rt = registry.cached(&id).unwrap();
        let later = start + Duration::from_secs(400);
        rt.pause_until(Some(later + Duration::from_secs(30)));
        drop(rt);
        assert_eq!(registry.evict_idle(later), 0);
        registry.cached(&id).unwrap().pause_until(None);
        // Nothing in the window, breaker closed, no pause, no other holder: forgotten.
        assert_eq!(registry.evict_idle(later), 1);
        assert_eq!(registry.len(), 0);
        // The next delivery builds a fresh runtime.
        assert!(registry.get(&id).await.is_ok());
        assert_eq!(registry.len(), 1);
    }

    /// A quiet endpoint is left out of claim views until it is claimed, its configuration
    /// changes or what its room depends on changes; the batch read loads a claim's endpoints.
    #[tokio::test]
    async fn quiet_endpoints_are_read_again_once_something_happens_to_them() {
        let (registry, id, _dir) = registry().await;
        registry.load([id.as_str(), "ep_missing"].into_iter()).await;
        assert_eq!(
            registry.len(),
            1,
            "the batch read found the one that exists"
        );
        let rt = registry.cached(&id).unwrap();
        let view = || registry.for_view().len();
        registry.view_key((64, 1, 0));
        assert_eq!(view(), 1, "a new endpoint is awake");
        registry.rest(std::slice::from_ref(&rt));
        assert_eq!(view(), 0, "quiet: left out");
        registry.view_key((64, 1, 0));
        assert_eq!(view(), 0, "the same key wakes nothing");
        // Claimed: read again.
        drop(registry.pending(&id));
        assert_eq!(view(), 1);
        assert_eq!(view(), 1, "awake until found quiet");
        registry.rest(std::slice::from_ref(&rt));
        assert!(!registry.stale(&rt), "read a moment ago");
        registry.invalidate(&id);
        assert!(
            registry.stale(&rt),
            "a changed configuration is read again at once"
        );
        assert_eq!(view(), 1, "its configuration changed");
        registry.rest(std::slice::from_ref(&rt));
        registry.view_key((32, 1, 0));
        assert_eq!(view(), 1, "the pool's concurrency changed");
        // Forgotten: out of the awake set too.
        drop(rt);
        let later = Instant::now() + Duration::from_secs(3_600);
        assert_eq!(registry.evict_idle(later), 1);
        assert_eq!(view(), 0);
    }
}
