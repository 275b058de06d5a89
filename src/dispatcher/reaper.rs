//! The reaper: returns expired leases (a dispatcher that died mid-attempt), dead-letters poison
//! leases, forgets idle endpoints' and tenants' runtime state, and applies retention now and then.

use std::sync::Arc;
use std::time::Duration;

use super::Ctx;

/// How often the reaper also applies retention.
const PURGE_INTERVAL: Duration = Duration::from_secs(600);
/// Deliveries deleted per retention transaction (short transactions, many of them).
const PURGE_BATCH: u32 = 5_000;

/// Return expired leases on an interval until aborted, and apply retention now and then.
pub(super) async fn reaper(ctx: Arc<Ctx>) {
    let mut interval = tokio::time::interval(ctx.settings.reap_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_purge: Option<tokio::time::Instant> = None;
    loop {
        interval.tick().await;
        let forgotten = ctx.endpoints.evict_idle(tokio::time::Instant::now());
        if forgotten > 0 {
            tracing::debug!(forgotten, "idle endpoints forgotten");
        }
        ctx.tenants.forget_idle();
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
