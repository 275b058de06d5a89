//! Fleet-wide lanes: lane slots held in Redis so N dispatcher processes respect one allowance.
//!
//! A local semaphore of 4 on each of 12 dispatchers is a fleet-wide allowance of 48. Here each
//! endpoint's slots live in one Redis sorted set, `{prefix}:lane:{endpoint_id}`, whose members are
//! holders (`{process_id}:{counter}`) scored by their expiry in milliseconds on Redis's own clock.
//! Acquiring is one Lua script (prune expired holders, admit if fewer than the allowance remain);
//! releasing is `ZREM`. Live dispatchers renew themselves in `{prefix}:dispatchers` every
//! [`FleetSettings::heartbeat`], which gives the count used when Redis is gone. A holder that
//! crashes never releases: its slot frees itself when its dispatcher has not renewed its entry
//! for three heartbeats (the next acquire prunes it), and in any case after
//! [`FleetSettings::slot_ttl`] (a release that never reached Redis).
//!
//! # How the lane combines it
//!
//! The lane keeps its local semaphore of the endpoint's allowance either way. With fleet lanes:
//!
//! 1. take the local permit (bounded by the lane's acquisition deadline, as without Redis);
//! 2. call [`FleetLanes::try_acquire`]; on [`FleetAcquire::Full`] retry (a short, jittered
//!    sleep) until the same acquisition deadline, then **shed**; `try_acquire` itself never waits
//!    beyond [`FleetSettings::redis_timeout`];
//! 3. on [`FleetAcquire::Unavailable`] fall back to the local share: the lane counts its own
//!    in-flight deliveries per endpoint and admits while `in_flight < local_share(allowance)`
//!    (else shed), so the fleet as a whole stays near the allowance while Redis is down;
//! 4. after the attempt, [`FleetLanes::release`] the slot (a failed release is harmless: the slot
//!    expires by itself).
//!
//! # Rate limits
//!
//! An endpoint's rate limit ([`super::rate`]) is one more key, `{prefix}:rate:{endpoint_id}`,
//! holding its bucket's theoretical arrival time on Redis's clock; [`FleetLanes::try_rate`] runs
//! one GCRA step in one script. When Redis cannot answer, each process enforces its own share
//! ([`crate::model::RateLimit::share`]) by its place among the live dispatchers
//! ([`FleetLanes::rank`]), which the heartbeat also reports.
//!
//! While degraded, `try_acquire` answers `Unavailable` at once without touching Redis; the
//! heartbeat task probes about once a second and flips back when Redis answers. Both changes are
//! logged once. Nothing is lost either way: a shed delivery is requeued by the caller.

pub mod count;
pub mod mode;
mod scripts;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, RedisError, Script};

use crate::model::RateLimit;
use crate::setting::{Problems, SettingProblem, joined, shown};

/// How often a degraded dispatcher probes Redis for its return (when the heartbeat is longer).
const DEGRADED_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A live-dispatcher entry lives this many heartbeats, so one late beat does not drop it.
const DISPATCHER_TTL_HEARTBEATS: u32 = 3;

/// Why fleet lanes could not be set up. Redis being down is not one of them: that starts degraded.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// One or more settings are out of range; every problem is listed.
    #[error("invalid fleet settings: {}", joined(.0))]
    InvalidSettings(Vec<SettingProblem>),
    /// The Redis URL could not be parsed.
    #[error("invalid redis url: {0}")]
    InvalidUrl(#[source] RedisError),
}

/// Settings of fleet lanes; one set per dispatcher process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// Prefix of every Redis key; non-empty. Default `sluice`.
    pub key_prefix: String,
    /// How long a slot lives without release; at least the attempt's total deadline, so a slot
    /// never expires under a delivery still in flight. Must be ≥ 1 ms. Default 60 s.
    pub slot_ttl: Duration,
    /// Interval between renewals of this dispatcher's live entry; > 0. Default 5 s.
    pub heartbeat: Duration,
    /// Bound on one Redis round trip (connect or response); > 0, well under the lane's
    /// acquisition deadline, since acquisition is on the delivery path. Default 250 ms.
    pub redis_timeout: Duration,
    /// Unique name of this dispatcher process in the fleet; non-empty. Default: pid + random.
    pub process_id: String,
}

impl Default for FleetSettings {
    fn default() -> Self {
        Self {
            key_prefix: "sluice".to_string(),
            slot_ttl: Duration::from_secs(60),
            heartbeat: Duration::from_secs(5),
            redis_timeout: Duration::from_millis(250),
            process_id: format!("{}-{:08x}", std::process::id(), rand::random::<u32>()),
        }
    }
}

impl FleetSettings {
    /// How long a dispatcher's live entry lasts without a renewal: three heartbeats.
    fn live_entry_ttl(&self) -> Duration {
        self.heartbeat * DISPATCHER_TTL_HEARTBEATS
    }

    /// Check every setting, reporting all problems together (see [`FleetSettings::problems`]).
    pub fn validate(&self) -> Result<(), FleetError> {
        let problems = self.problems();
        match problems.is_empty() {
            true => Ok(()),
            false => Err(FleetError::InvalidSettings(problems)),
        }
    }

    /// Every value out of range: empty names, a slot ttl under 1 ms, zero intervals.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        for (field, value) in [
            ("key_prefix", &self.key_prefix),
            ("process_id", &self.process_id),
        ] {
            p.check(
                !value.is_empty(),
                field,
                format_args!("{value:?}"),
                "non-empty",
            );
        }
        let slot_ttl = self.slot_ttl;
        p.check(
            slot_ttl >= Duration::from_millis(1),
            "slot_ttl",
            shown(slot_ttl),
            "at least 1ms",
        );
        for (field, value) in [
            ("heartbeat", self.heartbeat),
            ("redis_timeout", self.redis_timeout),
        ] {
            p.check(!value.is_zero(), field, shown(value), "above zero");
        }
        p.into_vec()
    }
}

/// One slot held in a fleet lane; give it back with [`FleetLanes::release`].
///
/// Dropping it without release is safe but wasteful: the slot stays taken until its ttl ends.
#[derive(Debug, PartialEq, Eq)]
pub struct FleetSlot {
    key: String,
    member: String,
}

impl FleetSlot {
    /// The holder's member in the lane's sorted set (`{process_id}:{counter}`).
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The Redis key of the lane this slot belongs to.
    pub fn lane_key(&self) -> &str {
        &self.key
    }
}

/// Outcome of one [`FleetLanes::try_acquire`]: what the lane does next.
#[derive(Debug, PartialEq, Eq)]
pub enum FleetAcquire {
    /// A slot is held fleet-wide: attempt the delivery, then release the slot.
    Acquired(FleetSlot),
    /// The fleet holds the whole allowance: retry until the acquisition deadline, then shed.
    Full,
    /// Redis cannot answer: fall back to [`FleetLanes::local_share`].
    Unavailable,
}

/// Outcome of one [`FleetLanes::try_rate`]: the fleet-wide bucket's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetRate {
    /// A turn was taken; the bucket's TAT now runs `ahead` of now.
    Taken {
        /// How far the fleet's TAT runs ahead of now.
        ahead: Duration,
    },
    /// No turn before `wait` has passed; the bucket's TAT runs `ahead` of now.
    Held {
        /// How long until the next turn is free.
        wait: Duration,
        /// How far the fleet's TAT runs ahead of now.
        ahead: Duration,
    },
    /// Redis cannot answer: fall back to this process's share
    /// ([`crate::model::RateLimit::share`]).
    Unavailable,
}

/// Handle to fleet lanes; cheap to clone, one per dispatcher process.
#[derive(Clone)]
pub struct FleetLanes {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    settings: FleetSettings,
    dispatchers_key: String,
    acquire: Script,
    heartbeat: Script,
    rate: Script,
    next_holder: AtomicU64,
    live_dispatchers: AtomicU32,
    /// This process's place among the live dispatchers, by process id (last heartbeat).
    rank: AtomicU32,
    degraded: AtomicBool,
    /// When Redis last answered again after an outage; until one live-entry ttl has passed the
    /// live count may only grow (see [`Inner::beat`]).
    recovered_at: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for FleetLanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetLanes")
            .field("settings", &self.inner.settings)
            .field("live_dispatchers", &self.live_dispatchers())
            .field("degraded", &self.is_degraded())
            .finish()
    }
}

impl FleetLanes {
    /// Set up fleet lanes on the Redis at `url` and start the heartbeat task.
    ///
    /// Fails only on bad settings or a malformed URL. Redis being down is not an error: the
    /// handle starts degraded and the heartbeat task notices when Redis comes up.
    pub async fn connect(url: &str, settings: FleetSettings) -> Result<FleetLanes, FleetError> {
        settings.validate()?;
        let client = redis::Client::open(url).map_err(FleetError::InvalidUrl)?;
        // One connect attempt per command, bounded: the manager reconnects on the next command
        // anyway, and a retry loop inside it would make a dead Redis slow to answer.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.redis_timeout))
            .set_response_timeout(Some(settings.redis_timeout))
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(FleetError::InvalidUrl)?;
        let inner = Arc::new(Inner {
            conn,
            dispatchers_key: scripts::dispatchers_key(&settings.key_prefix),
            settings,
            acquire: Script::new(scripts::ACQUIRE),
            heartbeat: Script::new(scripts::HEARTBEAT),
            rate: Script::new(scripts::RATE),
            next_holder: AtomicU64::new(0),
            live_dispatchers: AtomicU32::new(1),
            rank: AtomicU32::new(0),
            degraded: AtomicBool::new(false),
            recovered_at: std::sync::Mutex::new(None),
        });
        // The first beat is awaited (bounded) so the live count and the mode are known at once.
        inner.beat().await;
        tokio::spawn(heartbeat_loop(Arc::downgrade(&inner)));
        Ok(FleetLanes { inner })
    }

    /// Try once to take a slot of `endpoint_id`'s lane, whose fleet-wide allowance is
    /// `allowance` slots. One round trip (EVALSHA; after a Redis restart the script is loaded
    /// again once, within the same bound), never waits beyond `redis_timeout`.
    pub async fn try_acquire(&self, endpoint_id: &str, allowance: u32) -> FleetAcquire {
        if allowance == 0 {
            return FleetAcquire::Full;
        }
        let inner = &self.inner;
        if inner.degraded.load(Ordering::Relaxed) {
            return FleetAcquire::Unavailable;
        }
        let key = scripts::lane_key(&inner.settings.key_prefix, endpoint_id);
        let counter = inner.next_holder.fetch_add(1, Ordering::Relaxed);
        let member = format!("{}:{counter}", inner.settings.process_id);
        let mut conn = inner.conn.clone();
        let mut call = inner.acquire.key(&key);
        call.key(&inner.dispatchers_key)
            .arg(allowance)
            .arg(duration_ms(inner.settings.slot_ttl))
            .arg(&member)
            .arg(duration_ms(inner.settings.live_entry_ttl()));
        let result = inner.bounded(call.invoke_async::<i64>(&mut conn)).await;
        match result {
            Ok(1) => FleetAcquire::Acquired(FleetSlot { key, member }),
            Ok(_) => FleetAcquire::Full,
            Err(_) => FleetAcquire::Unavailable,
        }
    }

    /// Try once to take a turn of `endpoint_id`'s fleet-wide rate limit (one GCRA step in
    /// Redis, on Redis's clock); never waits beyond `redis_timeout`.
    pub async fn try_rate(&self, endpoint_id: &str, limit: &RateLimit) -> FleetRate {
        let inner = &self.inner;
        if inner.degraded.load(Ordering::Relaxed) {
            return FleetRate::Unavailable;
        }
        let key = scripts::rate_key(&inner.settings.key_prefix, endpoint_id);
        let interval = u64::try_from(limit.interval().as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut conn = inner.conn.clone();
        let mut call = inner.rate.key(&key);
        call.arg(interval).arg(limit.burst());
        let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        match inner
            .bounded(call.invoke_async::<(i64, i64, i64)>(&mut conn))
            .await
        {
            Ok((1, _, ahead)) => FleetRate::Taken {
                ahead: micros(ahead),
            },
            Ok((_, wait, ahead)) => FleetRate::Held {
                wait: micros(wait),
                ahead: micros(ahead),
            },
            Err(_) => FleetRate::Unavailable,
        }
    }

    /// Give a slot back. Never fails: if Redis cannot take it, the slot expires after its ttl.
    ///
    /// While degraded the release runs in the background so the caller never waits on a dead
    /// Redis (it still frees the slot early if Redis is in fact back).
    pub async fn release(&self, slot: FleetSlot) {
        let inner = Arc::clone(&self.inner);
        let zrem = async move {
            let mut conn = inner.conn.clone();
            let removed = conn.zrem::<_, _, i64>(&slot.key, &slot.member);
            let _ = inner.bounded(removed).await;
        };
        if self.is_degraded() {
            tokio::spawn(zrem);
        } else {
            zrem.await;
        }
    }

    /// Number of live dispatchers in the fleet (this one included, so at least 1); the last
    /// value seen while Redis is down.
    pub fn live_dispatchers(&self) -> u32 {
        self.inner.live_dispatchers.load(Ordering::Relaxed).max(1)
    }

    /// This dispatcher's share of `allowance` (slots) while Redis is down:
    /// `max(1, allowance / live_dispatchers)`, floor division, so the fleet stays at or under
    /// the allowance whenever the allowance is at least the number of dispatchers.
    pub fn local_share(&self, allowance: u32) -> u32 {
        (allowance / self.live_dispatchers()).max(1)
    }

    /// This process's place among the live dispatchers (0-based, by process id), as the last
    /// heartbeat saw it: which outage share of a rate limit is its own.
    pub fn rank(&self) -> u32 {
        self.inner.rank.load(Ordering::Relaxed)
    }

    /// Is Redis unreachable, so lanes fall back to [`FleetLanes::local_share`]?
    pub fn is_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Relaxed)
    }

    /// The settings this handle runs with.
    pub fn settings(&self) -> &FleetSettings {
        &self.inner.settings
    }

    /// Leave the fleet on a clean shutdown, so the others' local shares grow at once rather than
    /// after this entry expires. Best effort; the heartbeat task ends when the last handle drops.
    pub async fn leave(&self) {
        let inner = &self.inner;
        let mut conn = inner.conn.clone();
        let removed = conn.zrem::<_, _, i64>(&inner.dispatchers_key, &inner.settings.process_id);
        let _ = inner.bounded(removed).await;
    }
}

impl Inner {
    /// Run one Redis operation within `redis_timeout`, recording whether Redis answered.
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, String> {
        let outcome = match tokio::time::timeout(self.settings.redis_timeout, op).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {:?}",
                self.settings.redis_timeout
            )),
        };
        match &outcome {
            Ok(_) => self.mark_reachable(),
            Err(e) => self.mark_unreachable(e),
        }
        outcome
    }

    /// Renew this dispatcher's live entry and refresh the live count.
    ///
    /// A Redis that comes back after an outage may have restarted empty: it then knows only the
    /// dispatchers that beat since, and the first to beat would count itself alone, take the
    /// whole allowance as its local share and admit it through Redis while the others' attempts
    /// admitted under their outage shares still run. So for one live-entry ttl after a recovery
    /// (time for every live dispatcher to register again) the count only grows.
    async fn beat(&self) {
        let entry_ttl = self.settings.live_entry_ttl();
        let mut conn = self.conn.clone();
        let mut call = self.heartbeat.key(&self.dispatchers_key);
        call.arg(&self.settings.process_id)
            .arg(duration_ms(entry_ttl));
        if let Ok((live, rank)) = self
            .bounded(call.invoke_async::<(i64, i64)>(&mut conn))
            .await
        {
            let live = u32::try_from(live).unwrap_or(u32::MAX).max(1);
            self.rank
                .store(u32::try_from(rank).unwrap_or(0), Ordering::Relaxed);
            let mut recovered = self.recovered_at.lock().unwrap_or_else(|p| p.into_inner());
            match *recovered {
                Some(at) if at.elapsed() < entry_ttl => {
                    self.live_dispatchers.fetch_max(live, Ordering::Relaxed);
                }
                _ => {
                    *recovered = None;
                    self.live_dispatchers.store(live, Ordering::Relaxed);
                }
            }
        }
    }

    fn mark_unreachable(&self, error: &str) {
        if !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error,
                live_dispatchers = self.live_dispatchers.load(Ordering::Relaxed).max(1),
                "redis unreachable: lanes fall back to a local share of their allowance \
                 (allowance / live dispatchers)"
            );
        }
    }

    fn mark_reachable(&self) {
        if self.degraded.swap(false, Ordering::Relaxed) {
            *self.recovered_at.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(tokio::time::Instant::now());
            tracing::info!("redis is back: fleet-wide lanes restored");
        }
    }
}

/// Renew the live entry every heartbeat, or probe every second while degraded; ends when the
/// last [`FleetLanes`] handle is dropped.
async fn heartbeat_loop(inner: Weak<Inner>) {
    loop {
        let pause = match inner.upgrade() {
            Some(inner) if inner.degraded.load(Ordering::Relaxed) => {
                inner.settings.heartbeat.min(DEGRADED_PROBE_INTERVAL)
            }
            Some(inner) => inner.settings.heartbeat,
            None => return,
        };
        tokio::time::sleep(pause).await;
        let Some(inner) = inner.upgrade() else { return };
        inner.beat().await;
    }
}

/// A duration in whole milliseconds, as Redis expects (at least 1).
fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_setting_is_a_problem_and_the_edges_are_not() {
        let bad = FleetSettings {
            key_prefix: String::new(),
            slot_ttl: Duration::from_micros(999),
            heartbeat: Duration::ZERO,
            redis_timeout: Duration::ZERO,
            process_id: String::new(),
        };
        let fields: Vec<_> = bad.problems().into_iter().map(|p| p.field).collect();
        let expected = [
            "key_prefix",
            "process_id",
            "slot_ttl",
            "heartbeat",
            "redis_timeout",
        ];
        assert_eq!(fields, expected);
        let Err(err) = bad.validate() else {
            panic!("bad settings accepted");
        };
        assert!(
            err.to_string().contains(
                "slot_ttl: 999µs must be at least 1ms; heartbeat: 0ns must be above zero"
            ),
            "{err}"
        );
        assert_eq!(FleetSettings::default().problems(), []);
        let edges = FleetSettings {
            key_prefix: "s".into(),
            slot_ttl: Duration::from_millis(1),
            heartbeat: Duration::from_nanos(1),
            redis_timeout: Duration::from_nanos(1),
            process_id: "p".into(),
        };
        assert_eq!(edges.problems(), []);
    }
}
