//! The heartbeat: every `--heartbeat-interval` this dispatcher writes its load (in flight,
//! arrivals per second, mean service time, concurrency and capacity) to the store, so any
//! process, an API-only one included, computes the fleet's scale signal from the live fleet
//! without Redis. It also carries its [`Tally`] (delivered, failed, shed since it started),
//! read from the counters the metrics already keep, so the operator console on any process
//! shows the fleet's rates, and its attempts' seconds per destination host since it started
//! ([`HostSeconds`], the [`HostSeconds::TOP`] busiest hosts lately by name and the rest as
//! other), so the console shows the fleet's occupancy shares. At drain the row is marked
//! draining at once (the dispatcher no longer counts as a replica) and deleted when the drain
//! ends; rows of dispatchers that died without draining go stale (three intervals) and are
//! purged after [`PURGE_AFTER_INTERVALS`]. Without Redis, the task also counts the live
//! dispatchers every second, whose number sets this one's part of every lane and rate limit
//! ([`crate::admission::peers`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Ctx, Look};
use crate::metrics::Count;
use crate::model::{Heartbeat, HostSeconds, Tally};

/// Heartbeats older than this many intervals are deleted by whichever dispatcher beats next.
pub(super) const PURGE_AFTER_INTERVALS: u32 = 60;

impl Ctx {
    /// This dispatcher's id in the heartbeat table.
    pub fn dispatcher_id(&self) -> &str {
        &self.id
    }

    /// Seconds since this dispatcher's heartbeat was last written (since start before the first).
    pub fn heartbeat_age_s(&self) -> f64 {
        let at = self.last_beat_ms.load(Ordering::Acquire);
        (crate::clock::now_ms() - at).max(0) as f64 / 1000.0
    }

    /// What this dispatcher has done since it started, from its metrics' counters.
    pub fn tally(&self) -> Tally {
        let total = |what| self.metrics.endpoints.totals(what);
        Tally {
            delivered: total(Count::Delivered),
            failed: total(Count::AttemptFailed),
            shed: total(Count::Shed),
        }
    }

    fn heartbeat(&self, draining: bool) -> Heartbeat {
        let view = self.view(Look::Pool);
        let load = view.pool.load.unwrap_or_default();
        Heartbeat {
            id: self.id.clone(),
            host: host_name().to_owned(),
            started_at_ms: self.started_at_ms,
            beat_at_ms: crate::clock::now_ms(),
            in_flight: view.pool.in_flight,
            concurrency: view.pool.concurrency,
            capacity: self.settings.concurrency.ceiling(),
            arrivals_per_s: load.arrivals_per_s,
            mean_service_s: load.mean_service_s,
            draining,
            tally: self.tally(),
            host_seconds: self.metrics.host_time.heartbeat(HostSeconds::TOP),
        }
    }

    /// Write the heartbeat now; a store error is logged and the next interval tries again.
    /// False when the next beat should come soon: the row does not yet name what tells this
    /// process dead (see [`Store::beat`](crate::store::Store::beat)).
    pub(super) async fn beat(&self, draining: bool) -> bool {
        let heartbeat = self.heartbeat(draining);
        match self.store.beat(&heartbeat).await {
            Ok(named) => {
                self.last_beat_ms
                    .store(heartbeat.beat_at_ms, Ordering::Release);
                named
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the dispatcher heartbeat");
                true
            }
        }
    }

    /// Delete this dispatcher's heartbeat (it has drained).
    pub(super) async fn leave_heartbeats(&self) {
        let purge_before = crate::clock::now_ms() - self.purge_after_ms();
        if let Err(e) = self
            .store
            .forget_heartbeats(Some(&self.id), purge_before)
            .await
        {
            tracing::warn!(error = %e, "cannot delete the dispatcher heartbeat");
        }
    }

    /// Count the live dispatchers (fresh heartbeats, not draining) and this one's place among
    /// them, which set its part of every lane and rate limit without Redis; a store error
    /// keeps the last count.
    pub(super) async fn count_peers(&self) {
        let since = crate::clock::now_ms() - self.settings.heartbeat_fresh().as_millis() as i64;
        match self.store.heartbeats(since).await {
            Ok(beats) => {
                let live = beats.iter().filter(|b| !b.draining).map(|b| b.id.as_str());
                let before = (self.fleet.peers.live(), self.fleet.peers.rank());
                let now = self.fleet.peers.count(&self.id, live);
                if now != before {
                    tracing::info!(
                        live = now.0,
                        rank = now.1,
                        "live dispatchers counted: each holds its part of every lane and rate limit"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot count the live dispatchers"),
        }
    }

    fn purge_after_ms(&self) -> i64 {
        (self.settings.heartbeat_interval * PURGE_AFTER_INTERVALS).as_millis() as i64
    }
}

/// Beat every interval until the drain stops it, and every [`UNNAMED_RETRY`] while a beat could
/// not name its process's liveness (a dispatcher killed then would count until its row went
/// stale, three intervals); purge long-dead dispatchers' rows now and then.
pub(super) async fn heartbeat(ctx: Arc<Ctx>) {
    let interval = ctx.settings.heartbeat_interval;
    let mut next_beat = tokio::time::Instant::now();
    let mut beats = 0u64;
    loop {
        if tokio::time::Instant::now() >= next_beat {
            let named = ctx.beat(false).await;
            if beats.is_multiple_of(12) {
                let before = crate::clock::now_ms() - ctx.purge_after_ms();
                if let Err(e) = ctx.store.forget_heartbeats(None, before).await {
                    tracing::warn!(error = %e, "cannot purge stale heartbeats");
                }
            }
            beats += 1;
            next_beat = tokio::time::Instant::now()
                + if named {
                    interval
                } else {
                    interval.min(UNNAMED_RETRY)
                };
        }
        // Without Redis the live dispatchers are counted every second, not every beat: a
        // dispatcher that joins is then counted by the others within a second (each holds
        // its part of every lane and rate limit by that count).
        let wait = if ctx.fleet.lanes.is_none() {
            ctx.count_peers().await;
            PEER_COUNT_INTERVAL
        } else {
            interval
        };
        tokio::time::sleep_until(next_beat.min(tokio::time::Instant::now() + wait)).await;
    }
}

/// How often, without Redis, a dispatcher counts the live dispatchers.
const PEER_COUNT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The name of this host (a pod's name on Kubernetes), read once; empty when the system does
/// not say.
pub(crate) fn host_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|n| n.trim().to_owned())
            .unwrap_or_default()
    })
}

/// How soon a beat that could not name its process's liveness is written again.
const UNNAMED_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
