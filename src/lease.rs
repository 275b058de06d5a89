//! Leases: the leaser that claims batches as far as free capacity allows, the reaper that
//! returns expired leases, and the auto-sizer of the global concurrency.
//!
//! A claim is one short transaction that commits before any delivery starts; the lease
//! (`lease_until` + a fresh token) is what protects the work afterwards, never a held lock.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Concurrency;
use crate::dispatcher::Ctx;
use crate::store::ClaimRequest;

/// Claim batches until aborted.
pub async fn leaser(ctx: Arc<Ctx>) {
    let signal = ctx.store.work_signal();
    let mut cursor: Option<String> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let concurrency = ctx.concurrency() as usize;
        let free = concurrency.saturating_sub(ctx.outstanding());
        if free == 0 {
            ctx.capacity_freed(Duration::from_millis(100)).await;
            continue;
        }
        let limit = free.min(ctx.settings.claim_batch as usize) as u32;
        let per_endpoint = ctx.settings.lane_size.max(1);
        let (exclude, room) = ctx.claim_view(per_endpoint);
        let request = ClaimRequest {
            now_ms: crate::clock::now_ms(),
            limit,
            per_endpoint,
            lease_ms: ctx.settings.lease_ttl.as_millis() as i64,
            exclude,
            room,
            after_endpoint: cursor.clone(),
        };
        let claimed = match ctx.store.claim(&request).await {
            Ok(c) => {
                backoff = Duration::from_millis(100);
                c
            }
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let got = claimed.len();
        // Continue after the last endpoint served so every endpoint gets its turn.
        cursor = if got as u32 >= limit {
            claimed.iter().map(|d| d.endpoint_id.clone()).max()
        } else {
            None
        };
        for d in claimed {
            ctx.spawn(d);
        }
        if got == 0 {
            // Nothing claimable: every due endpoint is excluded (lane full, paused, breaker
            // open) or nothing is due. Sleep until new work is announced, capacity frees up
            // (a lane may have room again), or the idle poll (retries coming due) elapses.
            tokio::select! {
                _ = signal.notified() => {}
                _ = ctx.capacity_freed(ctx.settings.idle_poll) => {}
            }
        }
        // Otherwise claim again at once: a batch smaller than the limit only means each due
        // endpoint gave its per-endpoint share, not that the backlog is empty.
    }
}

/// How often the reaper also applies retention.
const PURGE_INTERVAL: Duration = Duration::from_secs(600);
/// Deliveries deleted per retention transaction (short transactions, many of them).
const PURGE_BATCH: u32 = 5_000;

/// Return expired leases on an interval until aborted, and apply retention now and then.
pub async fn reaper(ctx: Arc<Ctx>) {
    let mut interval = tokio::time::interval(ctx.settings.reap_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_purge: Option<tokio::time::Instant> = None;
    loop {
        interval.tick().await;
        if last_purge.is_none_or(|at| at.elapsed() >= PURGE_INTERVAL) {
            last_purge = Some(tokio::time::Instant::now());
            purge(&ctx).await;
        }
        match ctx
            .store
            .reap(crate::clock::now_ms(), ctx.settings.max_lease_expiries)
            .await
        {
            Ok(r) if r.returned > 0 || r.dead > 0 => {
                tracing::info!(
                    returned = r.returned,
                    dead = r.dead,
                    "reaper returned expired leases"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reap failed"),
        }
    }
}

/// Delete delivered history older than the retention period, in short batches.
async fn purge(ctx: &Ctx) {
    let before_ms = crate::clock::now_ms() - ctx.settings.retention.as_millis() as i64;
    let mut total = 0;
    loop {
        match ctx.store.purge(before_ms, PURGE_BATCH).await {
            Ok(n) => {
                total += n;
                if n < u64::from(PURGE_BATCH) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention purge failed");
                break;
            }
        }
    }
    if total > 0 {
        tracing::info!(deleted = total, "retention: delivered history deleted");
    }
}

/// With `--concurrency auto`, re-size the global bound from live load every 30 s.
pub async fn autosize(ctx: Arc<Ctx>) {
    let Concurrency::Auto { min, max } = ctx.settings.concurrency else {
        return;
    };
    let mut interval = tokio::time::interval(Duration::from_secs(30));
    interval.tick().await;
    loop {
        interval.tick().await;
        let (rate, mean) = live_load(&ctx);
        let wanted = recommended_concurrency(rate, mean, min, max);
        let current = ctx.concurrency();
        if wanted != current {
            tracing::info!(
                from = current,
                to = wanted,
                arrival_per_s = rate,
                mean_service_s = mean,
                "auto concurrency changed"
            );
            ctx.set_concurrency(wanted);
        }
    }
}

/// Offered attempts per second and mean attempt duration across every known endpoint.
pub fn live_load(ctx: &Ctx) -> (f64, f64) {
    let now = tokio::time::Instant::now();
    let (mut rate, mut weighted, mut samples) = (0.0, 0.0, 0u64);
    for rt in ctx.endpoints.all() {
        let snap = rt.state().window.snapshot(now);
        rate += snap.delivered_per_s + snap.failed_per_s;
        if let Some(mean) = snap.mean {
            weighted += mean.as_secs_f64() * snap.samples as f64;
            samples += snap.samples;
        }
    }
    let mean = if samples > 0 {
        weighted / samples as f64
    } else {
        0.0
    };
    (rate, mean)
}

/// Erlang C pool for a 50 ms mean queue wait, clamped to the operator's bounds.
pub fn recommended_concurrency(rate_per_s: f64, mean_service_s: f64, min: u32, max: u32) -> u32 {
    let load = rate_per_s * mean_service_s;
    if load.is_nan() || load <= 0.0 {
        return min;
    }
    crate::sizing::servers_for_mean_wait(load, mean_service_s, 0.05)
        .unwrap_or(max)
        .clamp(min, max)
}
